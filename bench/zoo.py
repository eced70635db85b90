"""The architecture zoo: models generated here from their libraries' code, converted by qconvert.

No weights are downloaded: torchvision, timm, Hugging Face transformers and Keras build each
architecture from its code (transformers from a small config: hidden 64, 2 layers, 2 heads) with
seeded random weights, which is enough for a float conversion's exactness. Each PyTorch model is
exported by every exporter a PyTorch user has: torch.onnx's TorchScript exporter (dynamo=False) at
opsets 13 and 17 and its dynamo exporter at opset 18 (the transformers at 20 too); the Keras
models (layers: LSTM, GRU, Bidirectional, Conv1D, attention; keras.applications) by tf2onnx at
opsets 13 and 17.
The transformers' opset-17 exports are also written in the formats people ship: float16
(onnxconverter-common, keep_io_types), onnxruntime's transformer optimizer output,
quantize_dynamic (int8 weights) and QDQ from quantize_static (random calibration); torchvision's
in float16 and QDQ.

Generation runs in venvs of its own outside git, created on first use: torch 2.14.1 +
torchvision 0.29.1, timm, transformers, onnxscript, onnxconverter-common, onnxruntime (the
project's .venv keeps its torch 2.13.0); tensorflow-cpu + tf2onnx in another (their numpy and
protobuf pins stay apart from torch's). Models are cached as
ZOO/<family>/<model>__<exporter>[__<format>].onnx (ZOO = ~/.cache/qconvert/zoo), with a .json
beside each saying how it was made or why the export failed. Each file is then converted by
`qconvert IN OUT --json` (default flags: the float check; the quantized formats, qdq and
dynint8, convert to their own quantization, checked against their rounding bound) in a fresh
process with a timeout, and classified: exact (exit 0; converted for a quantized format), refused
(exit 1, its one-line message), wrong (exit 4: the check failed), error (exit 3), timeout.

    .venv/bin/python bench/zoo.py [--only timm/resnet,hf/bert] [--exporters ts17,dynamo18]
        [--formats qdq,dynint8] [--timeout 600] [--table [quantized]]

--formats: convert only these formats (float for the exports themselves); every format is still
generated. --table: print the table of ZOO/results.json, convert nothing; `--table quantized`:
the quantized formats' table (bench/zoo_quantized.py: bound, SQNR, size, op mix).

Prints the `zoo` table (per family: models, exact, refused, wrong, errors, conversion seconds and
MB/s, peak RSS), the failures grouped by message with the models named, and writes every row to
ZOO/results.json (rewritten after each model, so a long run can be read while it goes).

    .venv/bin/python bench/zoo.py --int8 [--only ...] [--timeout 600] [--resume] [--table]

The int8 sweep: each model's float export that results.json has exact (ts17, else dynamo18, else
tf2onnx17, else any) by `qconvert IN OUT --quantize --calibration CAL --precision int8 --no-verify
--json` on 8 seeded samples; qconvert never refuses for quantization, so every exit but 0 is a
finding. Rows in ZOO/results-int8.json; prints the counts by exit code and the failures grouped by
message, quantization's apart (bench/zoo_int8.py).

This file holds the architectures, the cache's paths, the zoo venvs and the conversion; the
generation is bench/zoo_build.py (what runs in the zoo venvs), the table bench/zoo_report.py.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

CACHE = Path(os.environ.get("QCONVERT_ZOO_CACHE", Path.home() / ".cache" / "qconvert"))
ZOO = CACHE / "zoo"
VENV = CACHE / "zoo-venv"
RESULTS = ZOO / "results.json"
# torch/torchvision: the pair on this machine's disk (PyPI's torchvision fails beside 2.13.0).
REQUIREMENTS = ["torch==2.14.1", "torchvision==0.29.1", "timm", "transformers", "onnx",
                "onnxscript", "onnxconverter-common", "onnxruntime"]
# TensorFlow's own venv (Keras 3, tf2onnx): its numpy and protobuf pins are not torch's concern.
TF_VENV = CACHE / "zoo-tf-venv"
TF_REQUIREMENTS = ["tensorflow-cpu", "tf2onnx", "onnxruntime"]
# Run in this order: every family first at opset 17 (tf2onnx: 13, its default).
# dynamo20: the transformers only (the dynamo exporter's newest opset, where most of its ops
# changed; the CNNs' ops did not).
EXPORTERS = ("ts17", "tf2onnx13", "dynamo18", "ts13", "tf2onnx17", "dynamo20")
# The formats made from each kind's ts17 export: all for the transformers; float16 and QDQ for
# torchvision's classifiers and segmenters.
FORMATS = {"hf": ("fp16", "ortopt", "dynint8", "qdq"), "tv": ("fp16", "qdq"),
           "tvseg": ("fp16", "qdq")}
SEED = 0
MB = 1024 * 1024


# --------------------------------------------------------------------------------------------
# The architectures. Each is (family, model, kind, arguments); zoo_build.build builds it.
# kind: tv (torchvision.models.<name>(**kw)), tvdet (a torchvision detector, first image's boxes,
# scores, labels), yolonms (a YOLO head with batched_nms: zoo_yolo.py), timm (timm.create_model(name, **kw)), hf (transformers <Class>(<Config>(**kw))).
# "size": the square image side; "seq": the token count; "audio": samples; "mel": (bins, frames).

def _tv(family, name, size=64, **kw):
    return ("tv/" + family, name, "tv", dict(size=size, kw=kw))


TORCHVISION = [
    _tv("resnet", "resnet18"), _tv("mobilenet_v2", "mobilenet_v2"),
    _tv("mobilenet_v3", "mobilenet_v3_small"), _tv("mobilenet_v3", "mobilenet_v3_large"),
    _tv("efficientnet", "efficientnet_b0"), _tv("efficientnet_v2", "efficientnet_v2_s"),
    _tv("regnet", "regnet_y_400mf"), _tv("regnet", "regnet_x_400mf"),
    _tv("convnext", "convnext_tiny"), _tv("shufflenet", "shufflenet_v2_x0_5"),
    _tv("squeezenet", "squeezenet1_1"), _tv("densenet", "densenet121"),
    _tv("googlenet", "googlenet", aux_logits=False, init_weights=True),
    _tv("mnasnet", "mnasnet0_5"), _tv("resnext", "resnext50_32x4d"),
    _tv("wide_resnet", "wide_resnet50_2"), _tv("alexnet", "alexnet", size=224),
    _tv("vgg", "vgg11", size=224),  # 224: adaptive pooling to 6x6 / 7x7 exports as a fixed pool
    _tv("inception", "inception_v3", size=96, aux_logits=False, init_weights=True),
    ("tv/vit", "vit_cfg", "tv", dict(size=64, cls="VisionTransformer",
                                     kw=dict(image_size=64, patch_size=16, num_layers=2,
                                             num_heads=2, hidden_dim=64, mlp_dim=128))),
    _tv("swin", "swin_t", size=64), _tv("maxvit", "maxvit_t", size=224),
    ("tv/lraspp", "lraspp_mobilenet_v3_large", "tvseg", dict(size=128, kw=dict(num_classes=4))),
    ("tv/deeplabv3", "deeplabv3_mobilenet_v3_large", "tvseg",
     dict(size=128, kw=dict(num_classes=4))),
    ("tv/fcn", "fcn_resnet50", "tvseg", dict(size=96, kw=dict(num_classes=4))),
    # "head": the class head's parameters spread (their name's part, the spread): see build
    ("tv/ssdlite", "ssdlite320_mobilenet_v3_large", "tvdet",
     dict(size=320, kw={}, head=("classification_head", 0.05))),
    ("tv/retinanet", "retinanet_resnet50_fpn", "tvdet",
     dict(size=128, kw=dict(min_size=128, max_size=128), head=("cls_logits.weight", 0.3))),
    ("tv/fasterrcnn", "fasterrcnn_mobilenet_v3_large_320_fpn", "tvdet",
     dict(size=320, kw={}, head=("cls_score.weight", 0.3))),
    ("yolo/nms", "yolov8_head_batched_nms", "yolonms", dict(size=128)),  # bench/zoo_yolo.py
]


def _timm(family, name, size=96, **kw):
    return ("timm/" + family, name, "timm", dict(size=size, kw=kw))


_SMALL_VIT = dict(depth=2, embed_dim=64, num_heads=2)
TIMM = [
    _timm("mobilenetv3", "mobilenetv3_small_100"), _timm("mobilenetv4", "mobilenetv4_conv_small"),
    _timm("efficientnet", "efficientnet_b0"), _timm("efficientnet_lite", "tf_efficientnet_lite0"),
    _timm("resnet", "resnet18"), _timm("resnet_d", "resnet26d"), _timm("regnet", "regnetx_002"),
    _timm("regnety", "regnety_002"), _timm("convnext", "convnext_atto"),
    _timm("convnextv2", "convnextv2_atto"),
    _timm("vit", "vit_tiny_patch16_224", size=64, img_size=64),
    _timm("deit", "deit_tiny_patch16_224", size=64, img_size=64),
    _timm("beit", "beit_base_patch16_224", size=64, img_size=64, **_SMALL_VIT),
    _timm("swin", "swin_tiny_patch4_window7_224", size=224, depths=(1, 1, 1, 1)),
    _timm("swinv2", "swinv2_cr_tiny_ns_224", size=224, depths=(1, 1, 1, 1)),
    _timm("maxvit", "maxvit_rmlp_pico_rw_256", size=128, img_size=128),
    _timm("levit", "levit_128s", size=224), _timm("mobilevit", "mobilevit_xxs", size=128),
    _timm("mobilevitv2", "mobilevitv2_050", size=128),
    _timm("efficientformer", "efficientformer_l1", size=224),
    _timm("efficientformerv2", "efficientformerv2_s0", size=224),
    _timm("ghostnet", "ghostnet_100"), _timm("mixnet", "mixnet_s"), _timm("repvgg", "repvgg_a0"),
    _timm("densenet", "densenet121"), _timm("dla", "dla34"), _timm("hrnet", "hrnet_w18_small"),
    _timm("rexnet", "rexnet_100"), _timm("lcnet", "lcnet_050"), _timm("mobileone", "mobileone_s0"),
    _timm("fastvit", "fastvit_t8", size=128), _timm("poolformer", "poolformer_s12"),
    _timm("xcit", "xcit_nano_12_p16_224", size=64, depth=2),
    _timm("pvt_v2", "pvt_v2_b0", size=64), _timm("edgenext", "edgenext_xx_small"),
    _timm("tinynet", "tinynet_e"), _timm("hardcorenas", "hardcorenas_a"),
    _timm("semnasnet", "semnasnet_050"), _timm("resnest", "resnest14d"),
    _timm("skresnet", "skresnet18"), _timm("selecsls", "selecsls42b"),
    _timm("cspnet", "cspresnet50"), _timm("vovnet", "ese_vovnet19b_dw"),
    _timm("inception_v3", "inception_v3", size=96), _timm("xception", "xception41", size=96),
    _timm("nfnet", "nf_resnet26"), _timm("dpn", "dpn68"), _timm("efficientvit", "efficientvit_b0"),
    _timm("cait", "cait_xxs24_224", size=64, img_size=64, depth=2),
    _timm("coat", "coat_lite_tiny", size=224),
    _timm("mlp_mixer", "mixer_s32_224", size=64, img_size=64),
    _timm("resmlp", "resmlp_12_224", size=224),
    _timm("crossvit", "crossvit_tiny_240", size=240),
    _timm("tnt", "tnt_s_patch16_224", size=224, depth=2),
    _timm("gcvit", "gcvit_xxtiny", size=224),
    _timm("twins", "twins_pcpvt_small", size=64, depths=(1, 1, 1, 1)),
    _timm("mobilevitv1_s", "mobilevit_s", size=128), _timm("hgnet", "hgnetv2_b0"),
    _timm("ecaresnet", "ecaresnet26t"), _timm("seresnext", "seresnext26d_32x4d"),
    _timm("res2net", "res2net50_14w_8s"), _timm("regnetz", "regnetz_005"),
]

_H = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128)
_TEXT = dict(_H, vocab_size=1000, max_position_embeddings=64)


def _hf(family, model_cls, config_cls, opt, inputs, **config):
    """inputs: "text" (input_ids, attention_mask), "ids" (input_ids only), "image" (pixel_values
    [1, 3, size, size]), "audio" (input_values [1, samples]), "mel" (input_features)."""
    return ("hf/" + family, family, "hf", dict(model=model_cls, config=config_cls, opt=opt,
                                               inputs=inputs, cfg=config))


HF = [
    _hf("bert", "BertModel", "BertConfig", "bert", "text", **_TEXT),
    _hf("distilbert", "DistilBertModel", "DistilBertConfig", "bert", "text", vocab_size=1000,
        dim=64, n_layers=2, n_heads=2, hidden_dim=128, max_position_embeddings=64),
    _hf("roberta", "RobertaModel", "RobertaConfig", "bert", "text",
        **dict(_TEXT, max_position_embeddings=66)),
    _hf("albert", "AlbertModel", "AlbertConfig", "bert", "text", embedding_size=32, **_TEXT),
    _hf("electra", "ElectraModel", "ElectraConfig", "bert", "text", embedding_size=32, **_TEXT),
    _hf("deberta_v2", "DebertaV2Model", "DebertaV2Config", "bert", "text", **_TEXT),
    _hf("mpnet", "MPNetModel", "MPNetConfig", "bert", "text",
        **dict(_TEXT, max_position_embeddings=66)),
    _hf("xlm_roberta", "XLMRobertaModel", "XLMRobertaConfig", "bert", "text",
        **dict(_TEXT, max_position_embeddings=66)),
    _hf("mobilebert", "MobileBertModel", "MobileBertConfig", "bert", "text",
        **dict(_TEXT, embedding_size=32, intra_bottleneck_size=32, true_hidden_size=32,
               num_feedforward_networks=1)),
    _hf("t5_encoder", "T5EncoderModel", "T5Config", "t5", "text", vocab_size=1000, d_model=64,
        d_kv=32, d_ff=128, num_layers=2, num_heads=2),
    _hf("bart_encoder", "BartModel.encoder", "BartConfig", "bart", "text", vocab_size=1000,
        d_model=64, encoder_layers=2, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=128, decoder_ffn_dim=128,
        max_position_embeddings=64),
    # Causal models with their attention mask (as exported for serving): without one,
    # transformers traces torch.diff (packed-sequence detection), which TorchScript cannot export.
    _hf("gpt2", "GPT2Model", "GPT2Config", "gpt2", "text", vocab_size=1000, n_embd=64, n_layer=2,
        n_head=2, n_positions=64, use_cache=False),
    _hf("llama", "LlamaModel", "LlamaConfig", "gpt2", "text", vocab_size=1000, hidden_size=64,
        intermediate_size=128, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
        max_position_embeddings=64, use_cache=False),
    _hf("vit", "ViTModel", "ViTConfig", "vit", "image", image_size=32, patch_size=8, **_H),
    _hf("deit", "DeiTModel", "DeiTConfig", "vit", "image", image_size=32, patch_size=8, **_H),
    _hf("beit", "BeitModel", "BeitConfig", "vit", "image", image_size=32, patch_size=8,
        use_relative_position_bias=True, **_H),
    _hf("swin", "SwinModel", "SwinConfig", "swin", "image", image_size=64, patch_size=4,
        embed_dim=32, depths=[1, 1], num_heads=[2, 2], window_size=4),
    _hf("convnext", "ConvNextModel", "ConvNextConfig", "bert", "image", image_size=64,
        hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1]),
    _hf("resnet", "ResNetModel", "ResNetConfig", "bert", "image", image_size=64,
        embedding_size=16, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1]),
    _hf("segformer", "SegformerForSemanticSegmentation", "SegformerConfig", "bert", "image",
        image_size=64, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1],
        decoder_hidden_size=64, num_labels=4),
    _hf("mobilevit", "MobileViTModel", "MobileViTConfig", "bert", "image", image_size=64,
        hidden_sizes=[32, 48, 64], neck_hidden_sizes=[8, 16, 24, 32, 48, 64, 160]),
    _hf("whisper_encoder", "WhisperModel.encoder", "WhisperConfig", "bert", "mel",
        vocab_size=1000, d_model=64, encoder_layers=2, decoder_layers=1,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=128,
        decoder_ffn_dim=128, num_mel_bins=80, max_source_positions=50, pad_token_id=0,
        bos_token_id=1, eos_token_id=2, decoder_start_token_id=1),  # the ids inside the vocab
    _hf("wav2vec2", "Wav2Vec2Model", "Wav2Vec2Config", "bert", "audio", conv_dim=(32, 32, 32),
        conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3), num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=2, **_H),
    _hf("hubert", "HubertModel", "HubertConfig", "bert", "audio", conv_dim=(32, 32, 32),
        conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3), num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=2, **_H),
    _hf("clip_text", "CLIPTextModel", "CLIPTextConfig", "clip", "ids", vocab_size=1000,
        max_position_embeddings=32, **_H),
    _hf("clip_vision", "CLIPVisionModel", "CLIPVisionConfig", "clip", "image", image_size=32,
        patch_size=8, **_H),
]


def _keras(family, model, **spec):
    return ("keras/" + family, model, "keras", spec)


# Keras layers in a small functional model on a [1, 16, 8] sequence, and keras.applications
# models (weights=None) on a small image; tf2onnx writes what the user of Keras 3 gets.
KERAS = [
    _keras("lstm", "lstm_seq", layer="LSTM", args=(32,), kw=dict(return_sequences=True)),
    _keras("lstm", "lstm_last", layer="LSTM", args=(32,), kw={}),
    _keras("gru", "gru_seq", layer="GRU", args=(32,), kw=dict(return_sequences=True)),
    _keras("simple_rnn", "simple_rnn", layer="SimpleRNN", args=(32,), kw={}),
    _keras("bidirectional", "bilstm", layer="Bidirectional", args=(), kw={}),
    _keras("conv1d", "conv1d_stack", layer="Conv1D", args=(16, 3), kw=dict(activation="relu")),
    _keras("attention", "mha_block", layer="MultiHeadAttention", args=(), kw={}),
    _keras("gru", "gru_last", layer="GRU", args=(32,), kw={}),
    _keras("attention", "dot_attention", layer="Attention", args=(), kw={}),
    _keras("embedding", "embedding_lstm", layer="Embedding", args=(), kw={}),
    _keras("conv2d", "conv2d_bn", layer="Conv2D", args=(), kw={}),
    _keras("mobilenet_v2", "MobileNetV2", app=dict(alpha=0.35), size=96),
    _keras("mobilenet_v3", "MobileNetV3Small", app=dict(minimalistic=False), size=96),
    _keras("efficientnet", "EfficientNetB0", app={}, size=64),
    _keras("efficientnet_v2", "EfficientNetV2B0", app={}, size=64),
    _keras("resnet", "ResNet50", app={}, size=64),
    _keras("densenet", "DenseNet121", app={}, size=64),
    _keras("nasnet", "NASNetMobile", app={}, size=96),
    _keras("convnext", "ConvNeXtTiny", app={}, size=64),
    _keras("xception", "Xception", app={}, size=71),
    _keras("inception_v3", "InceptionV3", app={}, size=75),
    _keras("vgg", "VGG16", app={}, size=32),
]
ARCHITECTURES = {f"{family}/{model}": (family, model, kind, spec)
                 for family, model, kind, spec in TORCHVISION + TIMM + HF + KERAS}


# --------------------------------------------------------------------------------------------
# The cache's files. Generation itself (build, the exports, the formats, the worker that runs in
# the zoo venvs) is bench/zoo_build.py.

def model_file(key: str, exporter: str, fmt: str = "") -> Path:
    family, model, _, _ = ARCHITECTURES[key]
    return ZOO / family / (f"{model}__{exporter}" + (f"__{fmt}" if fmt else "") + ".onnx")


def jobs_of(key: str, exporter: str) -> list[tuple[str, str]]:
    """(exporter, format) of the files made for `key` in the pass of `exporter`: tf2onnx takes
    the Keras models, torch.onnx the others."""
    kind = ARCHITECTURES[key][2]
    if (kind == "keras") != exporter.startswith("tf2onnx") or (exporter == "dynamo20"
                                                               and kind != "hf"):
        return []
    jobs = [(exporter, "")]
    if exporter == "ts17":
        jobs += [(exporter, f) for f in FORMATS.get(kind, ())]
    return jobs


# --------------------------------------------------------------------------------------------
# The zoo venv and the conversion (run by the project's .venv).

def _sibling(name: str):
    """A module of bench/ (bench.py's helpers), imported where used: the generation workers run
    this file in the zoo venvs, which have neither qconvert nor what the bench imports."""
    import importlib

    try:
        return importlib.import_module(f"bench.{name}" if name != "bench" else "bench.bench")
    except ImportError:  # bench/ itself is on sys.path (bench.py run as a script)
        return importlib.import_module(name)


def ensure_venv(venv: Path, requirements: list[str]) -> Path:
    """The venv's python, created with `requirements` on first use (torch and torchvision alone
    first: pip then takes this machine's wheels, not a resolver's choice)."""
    python = venv / "bin" / "python"
    stamp = venv / ".installed"
    if not stamp.exists():
        print(f"zoo: creating {venv} ({' '.join(requirements)})", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        torch = [r for r in requirements if r.startswith("torch")]
        if torch:
            subprocess.run([str(python), "-m", "pip", "install", "--quiet", *torch], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", *requirements], check=True)
        stamp.touch()
    return python


def _status(result: dict) -> tuple[str, str]:
    error = result.get("error")
    if not error:
        return "exact", ""
    if "timed out" in error:
        return "timeout", error
    code = re.match(r"exit (\d+): (.*)", error)
    if not code:
        return "error", error
    message = code.group(2).replace("qconvert: error: ", "")
    return {"1": "refused", "4": "wrong", "3": "error"}.get(code.group(1), "error"), message


def run_qconvert(source: Path, dest: Path, timeout: float, work: Path, options: tuple) -> dict:
    """runners.run_qconvert, but a failure keeps its whole last line (runners shortens it to a
    table cell; the failures here are grouped by message, and node names come first)."""
    runners = _sibling("runners")

    command = runners.qconvert_command() + [str(source), str(dest), "--json", *options]
    usage = work / "usage.json"
    usage.unlink(missing_ok=True)
    proc = subprocess.Popen([sys.executable, "-c", runners._LAUNCHER, str(usage)] + command,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the launcher and qconvert
        proc.communicate()
        return {"error": f"timed out after {timeout:g} s"}
    if not usage.exists():
        return {"error": f"launcher failed: {runners.one_line(stderr)}"}
    measured = json.loads(usage.read_text())
    code = os.waitstatus_to_exitcode(measured["status"])
    result = {"seconds": measured["seconds"], "rss_mb": measured["maxrss_kb"] / 1024, "code": code}
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    if code:
        result["error"] = f"exit {code}: {lines[-1] if lines else 'no message'}"
    else:
        result["report"] = json.loads(stdout)
        result["summary"] = lines[-1] if lines else ""
    return result


def _onnxruntime_fails(path: Path) -> str | None:
    """Why onnxruntime cannot load the file or run it once on zeros (dynamic dims 1), or None."""
    import numpy as np
    import onnxruntime as ort

    try:
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        feeds = {}
        for i in session.get_inputs():
            shape = [d if isinstance(d, int) and d > 0 else 1 for d in i.shape]
            dtype = {"tensor(float)": np.float32, "tensor(float16)": np.float16,
                     "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(bool)": np.bool_,
                     "tensor(uint8)": np.uint8}.get(i.type, np.float32)
            feeds[i.name] = np.zeros(shape, dtype)
        session.run(None, feeds)
    except Exception as e:  # noqa: BLE001  (any failure of the reference is the answer)
        return str(e).splitlines()[0][:160]
    return None


def _detector_images(key: str, work: Path) -> Path:
    """Two seeded images in [0, 1] at the detector's size, as an .npz for --verify-data."""
    import numpy as np

    size = ARCHITECTURES[key][3]["size"]
    images = np.random.default_rng(SEED).random((2, 1, 3, size, size), dtype=np.float32)
    path = work / "detector-images.npz"
    np.savez(path, images=images)
    return path


def convert_one(key: str, exporter: str, fmt: str, timeout: float, work: Path) -> dict:
    family, model, _, _ = ARCHITECTURES[key]
    path = model_file(key, exporter, fmt)
    row = dict(family=family, model=model, exporter=exporter, format=fmt or "float",
               file=str(path))
    note = path.with_suffix(".json")
    made = (json.loads(note.read_text()) if note.exists()
            else {"ok": False, "error": "not generated"})
    if not made["ok"]:
        row.update(status="export failed", message=made["error"])
        return row
    row["onnx_mb"] = round(path.stat().st_size / MB, 3)
    dest = work / "out.tflite"
    # default flags, quantized formats too; a detector checked on images as its transform takes
    # them ([0, 1]): from standard normal pixels every score saturates to 1.0, an order of ties
    options = ("--verify-data", str(_detector_images(key, work))) if ARCHITECTURES[key][2] == "tvdet" else ()
    result = run_qconvert(path, dest, timeout, work, options)
    row["code"] = result.get("code")  # None: timed out, or the launcher failed
    row["status"], row["message"] = _status(result)
    if row["status"] == "refused" and (invalid := _onnxruntime_fails(path)):
        # A file onnxruntime cannot run either is the exporter's failure (an op that is not
        # ONNX, a QDQ scale of inf): no conversion can match a reference that does not exist.
        row["status"], row["message"] = "export failed", f"onnxruntime cannot run it: {invalid}"
    row["commit"] = _sibling("bench").qconvert_commit()  # others may commit while the zoo runs
    quantized = _sibling("zoo_quantized")
    if fmt in quantized.QUANTIZED and row["status"] == "exact":
        row["status"] = "converted"
    if "seconds" in result:
        row["seconds"] = round(result["seconds"], 2)
        row["rss_mb"] = round(result["rss_mb"])
    if dest.exists() and "error" not in result:
        row["tflite_mb"] = round(dest.stat().st_size / MB, 3)
        outputs = (result["report"].get("verify") or {}).get("outputs", [])
        sqnr = [o["sqnr_db"] for o in outputs if isinstance(o.get("sqnr_db"), (int, float))]
        if sqnr:
            row["sqnr_db"] = round(min(sqnr), 1)
        if fmt in quantized.QUANTIZED:
            row.update(quantized.fields(result["report"], dest, path))
    dest.unlink(missing_ok=True)
    return row


def save(rows: list[dict]) -> None:
    ZOO.mkdir(parents=True, exist_ok=True)
    tmp = RESULTS.with_suffix(".tmp")
    tmp.write_text(json.dumps(rows, indent=1))
    tmp.replace(RESULTS)


def run_in_venv(python: Path, script: str, args: list[str], timeout: float, log_name: str) -> None:
    """`script args` by a zoo venv's `python`, one thread, the exporters' chatter appended to
    ZOO/log_name; a worker that times out leaves what it made (the rest are "not generated")."""
    with open(ZOO / log_name, "a") as log:
        try:
            subprocess.run([str(python), str(script), *args], timeout=timeout,
                           env=dict(os.environ, OMP_NUM_THREADS="1"), stdout=log, stderr=log)
        except subprocess.TimeoutExpired:
            pass


def run(keys: list[str], exporters: list[str], timeout: float, resume: bool = False,
        formats: tuple = ()) -> list[dict]:
    """Generates (in chunks, in the zoo venv) and converts; results.json after every model.
    resume: files whose row is exact (or, quantized, converted) keep it; the others are converted
    again (a refusal fixed since, an export to retry). formats: convert only these ("float": the
    exports themselves); empty: all."""
    rows = {}
    if RESULTS.exists():  # a rerun keeps the rows of files it does not redo
        rows = {(r["family"], r["model"], r["exporter"], r["format"]): r
                for r in json.loads(RESULTS.read_text())}
    ZOO.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="qconvert-zoo-") as tmp:
        work = Path(tmp)
        for exporter in exporters:
            mine = [k for k in keys if jobs_of(k, exporter)]
            if not mine:
                continue
            python = (ensure_venv(TF_VENV, TF_REQUIREMENTS) if exporter.startswith("tf2onnx")
                      else ensure_venv(VENV, REQUIREMENTS))
            for i in range(0, len(mine), 6):
                chunk = mine[i:i + 6]
                made = all(model_file(k, e, f).with_suffix(".json").exists()
                           for k in chunk for e, f in jobs_of(k, exporter))
                if not made:  # else all cached: no worker to start
                    run_in_venv(python, __file__, ["--generate-worker", exporter, ",".join(chunk)],
                                700 * len(chunk) * 5, "generate.log")
                for key in chunk:
                    for exp, fmt in jobs_of(key, exporter):
                        family, model, _, _ = ARCHITECTURES[key]
                        done = rows.get((family, model, exp, fmt or "float"))
                        if formats and (fmt or "float") not in formats:
                            continue
                        if resume and done and done["status"] in ("exact", "converted"):
                            continue
                        print(f"zoo: convert {key} {exp} {fmt or 'float'}", file=sys.stderr,
                              flush=True)
                        try:
                            row = convert_one(key, exp, fmt, timeout, work)
                        except Exception as e:  # the benchmark's own failure: a row
                            row = dict(family=family, model=model, exporter=exp,
                                       format=fmt or "float", status="error",
                                       message=f"zoo: {type(e).__name__}: {e}")
                        rows[(row["family"], row["model"], row["exporter"], row["format"])] = row
                        save(list(rows.values()))
    return list(rows.values())


def report(rows: list[dict]) -> str:
    """The zoo section of the benchmark (bench/zoo_report.py): bench.py prints it too."""
    return _sibling("zoo_report").report(rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="comma-separated families or family/model keys")
    parser.add_argument("--exporters", default=",".join(EXPORTERS))
    parser.add_argument("--timeout", type=float, default=600, help="per conversion, seconds")
    parser.add_argument("--formats", default="",
                        help="comma-separated formats to convert (float, fp16, ortopt, dynint8, "
                             "qdq); default all")
    parser.add_argument("--table", nargs="?", const="zoo", choices=("zoo", "quantized"),
                        help="print the table of results.json (quantized: the quantized formats')")
    parser.add_argument("--resume", action="store_true",
                        help="convert only the files results.json has no exact row for")
    parser.add_argument("--int8", action="store_true",
                        help="the int8 sweep: each model's float export quantized all int8 "
                             "(results-int8.json; with --table, its table)")
    parser.add_argument("--generate-worker", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.generate_worker:
        _sibling("zoo_build").generate_worker(args.generate_worker[0],
                                              args.generate_worker[1].split(","))
        return 0
    root = str(Path(__file__).resolve().parent.parent)
    if root not in sys.path:  # the bench package's helpers (imported where used: the workers
        sys.path.insert(0, root)  # in the zoo venvs have neither qconvert nor the bench's needs)
    if args.table:
        if args.int8:
            sweep = _sibling("zoo_int8")
            print(sweep.int8_report(json.loads(sweep.INT8_RESULTS.read_text())))
        elif args.table == "quantized":
            print(_sibling("zoo_quantized").table(json.loads(RESULTS.read_text())))
        else:
            print(report(json.loads(RESULTS.read_text())))
        return 0
    wanted = [w for w in args.only.split(",") if w]
    keys = [k for k in ARCHITECTURES if not wanted or k in wanted
            or any(k.startswith(w + "/") for w in wanted)]
    if args.int8:
        sweep = _sibling("zoo_int8")
        print(sweep.int8_report(sweep.run_int8(keys, args.timeout, args.resume)))
        return 0
    exporters = [e for e in args.exporters.split(",") if e]
    rows = run(keys, exporters, args.timeout, args.resume,
               tuple(f for f in args.formats.split(",") if f))
    print(report(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
