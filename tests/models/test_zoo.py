"""A fast subset of the architecture zoo (bench/zoo.py): Hugging Face transformers built from the
zoo's own small configs with seeded random weights, exported here by torch.onnx's TorchScript
exporter at opset 17 (the test venv's torch, from the qat extra), converted, and run in LiteRT
against onnxruntime on the export's own inputs (token ids inside the vocabulary).

The whole zoo (300+ models, every exporter and format) is `make zoo`; these stay in `make test`
as the canaries of the model classes the zoo found hard: text encoders, a causal decoder, a vision
transformer, speech encoders. Skips, saying so, without torch or transformers."""

from __future__ import annotations

import io

import onnx
import pytest

from bench import zoo
from tests.harness import assert_matches_onnxruntime

torch = pytest.importorskip("torch", reason="torch is the qat extra: pip install -e '.[qat]'")
pytest.importorskip("transformers", reason="transformers is in the test extra")

MODELS = ["hf/bert/bert", "hf/distilbert/distilbert", "hf/gpt2/gpt2", "hf/t5_encoder/t5_encoder",
          "hf/vit/vit", "hf/clip_text/clip_text", "hf/whisper_encoder/whisper_encoder",
          "hf/wav2vec2/wav2vec2"]


def exported(key: str) -> tuple[onnx.ModelProto, dict]:
    """The zoo architecture `key` as an opset-17 TorchScript export, and its example inputs."""
    _, name, kind, spec = zoo.ARCHITECTURES[key]
    module, example, names, outputs = zoo.build(kind, name, spec)
    buffer = io.BytesIO()
    with torch.no_grad():
        torch.onnx.export(module, example, buffer, input_names=names, output_names=outputs,
                          opset_version=17, dynamo=False)
    return onnx.load_from_string(buffer.getvalue()), {n: t.numpy() for n, t in zip(names, example)}


@pytest.mark.parametrize("key", MODELS, ids=[k.split("/")[-1] for k in MODELS])
def test_zoo_model_matches_onnxruntime(key):
    model, feeds = exported(key)
    assert_matches_onnxruntime(model, feeds, rtol=1e-4, atol=1e-4)
