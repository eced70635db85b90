"""The zoo's generation (bench/zoo.py): each architecture built from its library's code with seeded
weights (build), exported by torch.onnx or, for Keras, tf2onnx, and written in the formats made
from it (make_format), one file and its .json note at a time (generate_worker). Runs in the zoo
venvs (torch 2.14.1 + torchvision, or tensorflow-cpu + tf2onnx), which have no qconvert: zoo.py
started as a script there with --generate-worker calls generate_worker; the tests and
bench/zoo_dynamic.py call build in the project's .venv.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

try:
    from bench import zoo
except ImportError:  # bench/ itself is on sys.path (zoo.py run as a script in the zoo venv)
    import zoo

ARCHITECTURES, SEED, model_file, jobs_of = zoo.ARCHITECTURES, zoo.SEED, zoo.model_file, zoo.jobs_of
_sibling = zoo._sibling
SEQ = 16
AUDIO_SAMPLES = 4000


def build(kind: str, name: str, spec: dict, opset: int = 17):
    """(torch module in eval mode, example inputs, input names, output names), seeded weights.
    Below opset 14, which has no scaled_dot_product_attention for the TorchScript exporter,
    attention is built unfused (timm's set_fused_attn, transformers' "eager"), as users do."""
    import torch

    torch.manual_seed(SEED)
    size = spec.get("size", 64)
    image = (torch.randn(1, 3, size, size),)  # drawn for every kind: the seeded weights follow it
    if kind in ("tv", "tvseg"):
        return _torchvision(kind, name, spec, image)
    if kind == "tvdet":
        return _detector(name, spec, size)
    if kind == "yolonms":
        model, example = _sibling("zoo_yolo").build(size)
        return model, example, ["images"], ["boxes", "scores", "labels"]
    if kind == "timm":
        import timm

        timm.layers.set_fused_attn(opset >= 14)
        model = timm.create_model(name, pretrained=False, **spec["kw"])
        return model.eval(), image, ["images"], ["logits"]
    return _transformers(spec, opset)


def _torchvision(kind: str, name: str, spec: dict, image: tuple):
    """build's torchvision classifier (kind tv) or segmenter (tvseg: its "out" map)."""
    import torch
    import torchvision

    if kind == "tv" and spec.get("cls"):
        model = getattr(torchvision.models, spec["cls"])(**spec["kw"])
    elif kind == "tv":
        model = getattr(torchvision.models, name)(weights=None, **spec["kw"])
    else:
        model = getattr(torchvision.models.segmentation, name)(
            weights=None, weights_backbone=None, **spec["kw"])

        class Out(torch.nn.Module):  # the "out" map, not the dict
            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, x):
                return self.inner(x)["out"]

        model = Out(model)
    return model.eval(), image, ["images"], ["output"]


def _detector(name: str, spec: dict, size: int):
    """build's torchvision detector (kind tvdet), its scores made to rank (see below)."""
    import torch
    import torchvision

    inner = getattr(torchvision.models.detection, name)(weights=None, weights_backbone=None,
                                                         **spec["kw"])

    # Untrained, the backbone's activations vanish (batch norm's unit statistics: 1e-16 by
    # the last block) and every anchor scores its class head's bias: ties that no two
    # runtimes break alike. Batch norm's statistics from four seeded images and a class head
    # spread make the scores rank (299 distinct of SSDlite's 300, 300 of RetinaNet's).
    part, spread = spec["head"]
    for pname, p in inner.named_parameters():
        if part in pname:
            p.data.normal_(0.0, spread)
    for norm in inner.modules():
        if isinstance(norm, torch.nn.modules.batchnorm._BatchNorm):
            norm.reset_running_stats()
            norm.momentum = None  # the plain average over the batches
    inner.train()
    with torch.no_grad():
        features = inner.backbone(inner.transform(list(torch.rand(4, 3, size, size)))[0].tensors)
        if hasattr(inner, "head"):  # SSD's and RetinaNet's heads have batch norms too
            inner.head(list(features.values()))
    inner.eval()

    class Detector(torch.nn.Module):  # one image in, its boxes, scores and labels out
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            found = self.inner(list(x))[0]
            return found["boxes"], found["scores"], found["labels"]

    return (Detector(inner).eval(), (torch.rand(1, 3, size, size),), ["images"],
            ["boxes", "scores", "labels"])


def _transformers(spec: dict, opset: int):
    """build's Hugging Face model (kind hf): <Class>(<Config>(**cfg)), its first output."""
    import torch
    import transformers

    config = getattr(transformers, spec["config"])(**spec["cfg"])
    if opset < 14:
        config._attn_implementation = "eager"
    cls, _, part = spec["model"].partition(".")
    inner = getattr(transformers, cls)(config)
    if part:
        inner = getattr(inner, "get_" + part)()
    inputs = spec["inputs"]
    if inputs in ("text", "ids"):
        ids = torch.randint(1, 1000, (1, SEQ))
        example = (ids, torch.ones(1, SEQ, dtype=torch.int64)) if inputs == "text" else (ids,)
        names = ["input_ids", "attention_mask"][:len(example)]
    elif inputs == "image":
        s = spec["cfg"].get("image_size", 64)
        example, names = (torch.randn(1, 3, s, s),), ["pixel_values"]
    elif inputs == "audio":
        example, names = (torch.randn(1, AUDIO_SAMPLES),), ["input_values"]
    else:  # mel
        frames = 2 * spec["cfg"]["max_source_positions"]
        example, names = (torch.randn(1, spec["cfg"]["num_mel_bins"], frames),), ["input_features"]

    class First(torch.nn.Module):  # the first output (last hidden state, or logits)
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, *args):
            out = self.inner(**dict(zip(names, args)), return_dict=False)
            return out[0]

    return First(inner).eval(), example, names, ["output"]


def export(module, example, names, outputs, exporter: str, path: Path) -> None:
    import torch

    opset = int(re.sub(r"\D", "", exporter))
    # Not under no_grad: there nn.MultiheadAttention takes its fused fast path
    # (aten::_native_multi_head_attention), which the TorchScript exporter cannot write.
    torch.onnx.export(module, example, str(path), input_names=names, output_names=outputs,
                      opset_version=opset, dynamo=exporter.startswith("dynamo"),
                      **({} if exporter.startswith("dynamo") else {"do_constant_folding": True}))
    import onnx

    onnx.checker.check_model(str(path))


def export_keras(name: str, spec: dict, exporter: str, path: Path) -> None:
    """A Keras model (seeded) through tf2onnx at the exporter's opset. Runs in the TF venv."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras
    import tensorflow as tf
    import tf2onnx

    keras.utils.set_random_seed(SEED)
    dtype = "float32"
    if "app" in spec:
        size = spec["size"]
        shape = (size, size, 3)
        model = getattr(keras.applications, name)(weights=None, input_shape=shape, **spec["app"])
    else:
        layer = spec["layer"]
        shape = {"Embedding": (SEQ,), "Conv2D": (32, 32, 3)}.get(layer, (SEQ, 8))
        dtype = "int32" if layer == "Embedding" else "float32"
        inp = keras.Input(shape, batch_size=1, dtype=dtype)
        if layer == "Embedding":  # token ids (the verification draws them in [0, 10))
            x = keras.layers.LSTM(16)(keras.layers.Embedding(100, 16)(inp))
        elif layer == "Conv2D":
            x = keras.layers.Conv2D(8, 3, padding="same")(inp)
            x = keras.layers.ReLU()(keras.layers.BatchNormalization()(x))
            x = keras.layers.DepthwiseConv2D(3, strides=2)(keras.layers.MaxPooling2D()(x))
            x = keras.layers.Dense(4)(keras.layers.GlobalAveragePooling2D()(x))
        elif layer == "Attention":
            h = keras.layers.Dense(16)(inp)
            x = keras.layers.Attention(use_scale=True)([h, h])
        elif layer == "Bidirectional":
            x = keras.layers.Bidirectional(keras.layers.LSTM(16, return_sequences=True))(inp)
        elif layer == "MultiHeadAttention":
            h = keras.layers.Dense(32)(inp)
            a = keras.layers.MultiHeadAttention(num_heads=2, key_dim=16)(h, h)
            h = keras.layers.LayerNormalization()(h + a)
            x = keras.layers.LayerNormalization()(h + keras.layers.Dense(32, activation="gelu")(h))
        elif layer == "Conv1D":
            x = keras.layers.Conv1D(*spec["args"], **spec["kw"])(inp)
            x = keras.layers.MaxPooling1D(2)(x)
            x = keras.layers.Conv1D(32, 3, padding="same", activation="relu")(x)
            x = keras.layers.Dense(4)(keras.layers.GlobalAveragePooling1D()(x))
        else:
            x = getattr(keras.layers, layer)(*spec["args"], **spec["kw"])(inp)
        model = keras.Model(inp, x)
    signature = (tf.TensorSpec((1,) + shape, getattr(tf, dtype), name="x"),)
    tf2onnx.convert.from_keras(model, input_signature=signature, opset=int(exporter[7:]),
                               output_path=str(path))


def random_samples(path: Path, count: int, seed: int) -> list[dict]:
    """`count` feeds of the model at `path`: standard normal floats, integers in [0, 10) (the
    range qconvert's verification draws from)."""
    import numpy as np
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(seed)
    samples = []
    for _ in range(count):
        feed = {}
        for i in session.get_inputs():
            shape = [d if isinstance(d, int) else 1 for d in i.shape]
            if "float" in i.type:
                feed[i.name] = rng.standard_normal(shape).astype(np.float32)
            else:
                feed[i.name] = rng.integers(1, 10, shape).astype(np.int64)
        samples.append(feed)
    return samples


def make_format(source: Path, fmt: str, spec: dict, dest: Path) -> None:
    """The format `fmt` of the float ONNX file `source`, written to `dest`."""
    import onnx

    if fmt == "fp16":
        from onnxconverter_common import float16

        onnx.save(float16.convert_float_to_float16(onnx.load(str(source)), keep_io_types=True),
                  str(dest))
    elif fmt == "ortopt":
        from onnxruntime.transformers.optimizer import optimize_model

        cfg = spec["cfg"]
        heads = cfg.get("num_attention_heads") or cfg.get("n_heads") or cfg.get("n_head") or \
            cfg.get("encoder_attention_heads") or cfg.get("num_heads") or 2
        hidden = (cfg.get("hidden_size") or cfg.get("dim") or cfg.get("n_embd")
                  or cfg.get("d_model") or 64)
        heads = heads[0] if isinstance(heads, list) else heads
        optimize_model(str(source), model_type=spec["opt"], num_heads=heads,
                       hidden_size=hidden).save_model_to_file(str(dest))
    elif fmt == "dynint8":
        from onnxruntime.quantization import QuantType, quantize_dynamic

        quantize_dynamic(str(source), str(dest), weight_type=QuantType.QInt8)
    elif fmt == "qdq":
        from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                              quantize_static)

        class Reader(CalibrationDataReader):
            def __init__(self):
                self.samples = iter(random_samples(source, 8, SEED + 1))

            def get_next(self):
                return next(self.samples, None)

        quantize_static(str(source), str(dest), Reader(), quant_format=QuantFormat.QDQ,
                        per_channel=True, activation_type=QuantType.QInt8,
                        weight_type=QuantType.QInt8)
    else:
        raise ValueError(fmt)
    if fmt != "ortopt":  # the optimizer writes contrib ops (SimplifiedLayerNormalization) into
        onnx.checker.check_model(str(dest))  # the default domain, which the checker rejects


def generate_worker(exporter: str, keys: list[str]) -> None:
    """Writes each architecture's file of `exporter` (and its formats) with a .json beside it:
    {"ok": true} or {"ok": false, "error": one line}. Runs in the zoo venv."""
    if exporter.startswith("tf2onnx"):
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    else:
        import torch

        torch.set_num_threads(1)

    for key in keys:
        family, model, kind, spec = ARCHITECTURES[key]
        module = []  # built once for every exporter of the key

        def make(path, exp, fmt):
            if fmt:
                source = model_file(key, exp)
                if not source.exists():
                    raise RuntimeError("its float export failed")
                make_format(source, fmt, spec, path)
            elif kind == "keras":
                export_keras(model, spec, exp, path)
            else:
                if not module:
                    module.append(build(kind, model, spec, int(re.sub(r"\D", "", exp))))
                export(*module[0], exp, path)

        for exp, fmt in jobs_of(key, exporter):
            generated(model_file(key, exp, fmt), "zoo", lambda path: make(path, exp, fmt))


def generated(path, label: str, make) -> None:
    """make(path) with its .json note beside it ({"ok": true} or {"ok": false, "error": one
    line}, and its seconds), unless the note is there already; 600 s at most (SIGALRM)."""
    import signal

    note = path.with_suffix(".json")
    if note.exists():
        return

    def alarm(*_):
        raise TimeoutError("export took longer than 600 s")

    signal.signal(signal.SIGALRM, alarm)
    path.parent.mkdir(parents=True, exist_ok=True)
    print(f"{label}: generate {path.name}", file=sys.stderr, flush=True)
    start = time.perf_counter()
    signal.alarm(600)
    try:
        make(path)
        result = {"ok": True}
    except BaseException as e:  # noqa: BLE001 - any exporter failure is a row
        if isinstance(e, KeyboardInterrupt):
            raise
        text = re.sub(r"\x1b\[[0-9;]*m", "", f"{type(e).__name__}: {e}").strip()
        result = {"ok": False, "error": " ".join(text.split())[:300]}
        path.unlink(missing_ok=True)
    finally:
        signal.alarm(0)
    result["seconds"] = round(time.perf_counter() - start, 2)
    note.write_text(json.dumps(result))

