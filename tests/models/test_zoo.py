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

from bench import zoo, zoo_build
from tests.harness import assert_matches_onnxruntime

torch = pytest.importorskip("torch", reason="torch is the qat extra: pip install -e '.[qat]'")
pytest.importorskip("transformers", reason="transformers is in the test extra")

MODELS = ["hf/bert/bert", "hf/distilbert/distilbert", "hf/gpt2/gpt2", "hf/t5_encoder/t5_encoder",
          "hf/vit/vit", "hf/clip_text/clip_text", "hf/whisper_encoder/whisper_encoder",
          "hf/wav2vec2/wav2vec2"]


def exported(key: str) -> tuple[onnx.ModelProto, dict]:
    """The zoo architecture `key` as an opset-17 TorchScript export, and its example inputs."""
    _, name, kind, spec = zoo.ARCHITECTURES[key]
    module, example, names, outputs = zoo_build.build(kind, name, spec)
    buffer = io.BytesIO()
    with torch.no_grad():
        torch.onnx.export(module, example, buffer, input_names=names, output_names=outputs,
                          opset_version=17, dynamo=False)
    return onnx.load_from_string(buffer.getvalue()), {n: t.numpy() for n, t in zip(names, example)}


@pytest.mark.parametrize("key", MODELS, ids=[k.split("/")[-1] for k in MODELS])
def test_zoo_model_matches_onnxruntime(key):
    model, feeds = exported(key)
    assert_matches_onnxruntime(model, feeds, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("key", ["hf/bert/bert", "hf/t5_encoder/t5_encoder"], ids=["bert", "t5_encoder"])
def test_a_masked_text_encoder_quantizes(key, tmp_path):
    """Issue 30: Hugging Face's additive attention mask sits at float32's minimum, which no int8
    scale carries; the conversion was refused. Issue 37: the masked scores saturate in int8
    (saturate_masked_scores; T5 adds the mask, this BERT export masks with a select), so no op
    stays float for the mask, the attention products run int8, and the written model (LiteRT)
    follows onnxruntime on a padded sample to 20 dB (random weights: this proves the structure,
    not accuracy)."""
    import numpy as np

    from tests.harness import convert_quantized, run_onnxruntime, run_tflite

    model, feeds = exported(key)
    rng = np.random.default_rng(0)
    ids = np.stack([feeds["input_ids"]] + [rng.integers(0, 50, feeds["input_ids"].shape) for _ in range(15)])
    mask = np.ones_like(ids)
    mask[::2, ..., -4:] = 0  # half the samples padded
    flatbuffer, report = convert_quantized(model, {"input_ids": ids, "attention_mask": mask}, tmp_path)
    q = report.quantization
    assert not any(f.reason.startswith("int8 cannot carry") for f in q.float_ops), q.float_ops
    assert q.int8_ops > 20
    sample = {"input_ids": ids[2], "attention_mask": mask[2]}
    want = run_onnxruntime(model, sample)
    got = run_tflite(flatbuffer, report, sample)
    for name, value in want.items():
        error = np.sum((got[name] - value) ** 2) / np.sum(value ** 2)
        assert error < 0.01, (name, error)
