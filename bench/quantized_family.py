"""Models that arrive quantized (issue 38): small models trained here on synthetic tasks, exported
to ONNX, then quantized by onnxruntime's own quantizer in every format it writes, and each
converted by qconvert with default flags. The table: per model and format, qconvert's exit code,
the rounding bound and the measured SQNR against onnxruntime on held-out samples, how often the
task's decision (the argmax of a classifier) agrees with onnxruntime's, the .tflite's size against
the ONNX file's, and its ops by how they compute (int8, hybrid, float).

The models (trained weights: random ones hide every failure):
- cnn: 16x16 pictures of a bar, its orientation of 4 (Conv, MaxPool, Conv, GlobalAveragePool, Gemm);
- lstm: the sign of a sequence's running sum of its first channel (LSTM, Gemm on the last step);
- transformer: which third of a 12-step sequence holds its largest vector (a TorchScript
  TransformerEncoderLayer: MatMul, Softmax, LayerNormalization);
- vocoder: a 64-sample wave from 8x32 "mel" frames (Conv1d, ConvTranspose1d, LeakyRelu, Tanh),
  quantized dynamically with ConvInteger as HiFi-GAN's int8 exports are.
The formats: static QDQ (quantize_static) with int8 or uint8 activations, per-channel or
per-tensor weights, symmetric or asymmetric activations; dynamic (quantize_dynamic) with int8 or
uint8 weights.

    .venv/bin/python bench/quantized_family.py --work /tmp/family
    .venv/bin/python bench/quantized_family.py --work /tmp/family --models cnn --formats "qdq s8 pc"
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

QCONVERT = [sys.executable, "-m", "qconvert"]
TRAIN, CALIBRATION, HELD_OUT = 512, 32, 8


@dataclass(frozen=True)
class Format:
    name: str
    dynamic: bool
    activations: str = "s8"  # static: QInt8 or QUInt8 activations
    per_channel: bool = True
    symmetric: bool = False  # static: ActivationSymmetric
    weights: str = "s8"  # dynamic: QInt8 or QUInt8 weights


FORMATS = [Format("qdq s8 pc", False), Format("qdq s8 pt", False, per_channel=False),
           Format("qdq u8 pc", False, activations="u8"), Format("qdq s8 pc sym", False, symmetric=True),
           Format("dynamic s8", True), Format("dynamic u8", True, weights="u8")]


# --- data and training --------------------------------------------------------------------------
def _bars(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """[n, 1, 16, 16] pictures of one bar (horizontal, vertical, diagonal, antidiagonal) in noise."""
    labels = rng.integers(0, 4, n)
    x = rng.normal(0, 0.3, (n, 1, 16, 16)).astype(np.float32)
    for k, label in enumerate(labels):
        at = rng.integers(3, 13)
        for t in range(16):
            i, j = [(at, t), (t, at), (t, t), (t, 15 - t)][label]
            x[k, 0, i, j] += 1.0
    return x, labels


def _sums(rng, n):
    x = rng.normal(0, 1, (n, 20, 4)).astype(np.float32)
    return x, (x[:, :, 0].sum(1) > 0).astype(np.int64)


def _thirds(rng, n):
    x = rng.normal(0, 1, (n, 12, 16)).astype(np.float32)
    return x, np.argmax(np.linalg.norm(x, axis=2), axis=1) // 4


def _waves(rng, n):
    """[n, 8, 32] frames and the [n, 1, 64] wave they describe: frame channel c is the
    amplitude of a sine of frequency c + 1 over each pair of samples."""
    x = np.abs(rng.normal(0, 0.5, (n, 8, 32))).astype(np.float32)
    t = np.arange(64) / 64
    sines = np.sin(2 * np.pi * np.outer(np.arange(1, 9), t * 4))  # [8, 64]
    amplitude = np.repeat(x, 2, axis=2)  # [n, 8, 64]
    return x, (np.sum(amplitude * sines, axis=1, keepdims=True) / 4).astype(np.float32)


def _modules(name: str):
    import torch
    from torch import nn

    if name == "cnn":
        return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                             nn.Flatten(), nn.Linear(16, 4))
    if name == "lstm":
        class Last(nn.Module):
            def __init__(self):
                super().__init__()
                self.lstm, self.fc = nn.LSTM(4, 16, batch_first=True), nn.Linear(16, 2)

            def forward(self, x):
                return self.fc(self.lstm(x)[0][:, -1])
        return Last()
    if name == "transformer":
        class Encoder(nn.Module):
            def __init__(self):
                super().__init__()
                self.layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
                self.fc = nn.Linear(16 * 12, 3)

            def forward(self, x):
                return self.fc(torch.flatten(self.layer(x), 1))
        return Encoder()
    return nn.Sequential(nn.Conv1d(8, 64, 3, padding=1), nn.LeakyReLU(0.1),
                         nn.ConvTranspose1d(64, 32, 4, stride=2, padding=1), nn.Tanh(),
                         nn.Conv1d(32, 1, 3, padding=1))


DATA = {"cnn": _bars, "lstm": _sums, "transformer": _thirds, "vocoder": _waves}
CLASSIFIERS = {"cnn", "lstm", "transformer"}


def trained(name: str, folder: Path, steps: int = 300) -> tuple[Path, dict[str, np.ndarray]]:
    """The float ONNX model of `name` trained on its task (seeded), and its data: {"train",
    "calibration", "held"} inputs. Written once into `folder`."""
    rng = np.random.default_rng(0)
    x, y = DATA[name](rng, TRAIN + CALIBRATION + HELD_OUT)
    data = {"train": x[:TRAIN], "calibration": x[TRAIN:TRAIN + CALIBRATION], "held": x[TRAIN + CALIBRATION:]}
    path = folder / f"{name}.onnx"
    if not path.exists():
        _train_and_export(name, x[:TRAIN], y[:TRAIN], path, steps)
    return path, data


def _train_and_export(name, x, y, path: Path, steps: int) -> None:
    import torch

    torch.manual_seed(0)
    module = _modules(name)
    optimizer = torch.optim.Adam(module.parameters(), lr=3e-3)
    loss_of = torch.nn.CrossEntropyLoss() if name in CLASSIFIERS else torch.nn.MSELoss()
    inputs, targets = torch.from_numpy(x), torch.from_numpy(y)
    for step in range(steps):
        batch = slice((step * 32) % len(x), (step * 32) % len(x) + 32)
        optimizer.zero_grad()
        loss_of(module(inputs[batch]), targets[batch]).backward()
        optimizer.step()
    module.eval()
    torch.onnx.export(module, (inputs[:1],), str(path), input_names=["x"], output_names=["y"],
                      opset_version=17, dynamo=False)


# --- quantization ---------------------------------------------------------------------------------
def quantized(model: Path, fmt: Format, calibration: np.ndarray, folder: Path) -> Path:
    """`model` quantized by onnxruntime in format `fmt`, written once into `folder`."""
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_dynamic, quantize_static)

    out = folder / f"{model.stem} {fmt.name}.onnx".replace(" ", "_")
    if out.exists():
        return out
    if fmt.dynamic:
        quantize_dynamic(str(model), str(out), weight_type=QuantType.QInt8 if fmt.weights == "s8"
                         else QuantType.QUInt8, op_types_to_quantize=["MatMul", "Gemm", "Conv", "LSTM"])
        return out

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.samples = iter({"x": s[None]} for s in calibration)

        def get_next(self):
            return next(self.samples, None)

    quantize_static(str(model), str(out), Reader(), quant_format=QuantFormat.QDQ,
                    per_channel=fmt.per_channel,
                    activation_type=QuantType.QInt8 if fmt.activations == "s8" else QuantType.QUInt8,
                    weight_type=QuantType.QInt8, extra_options={"ActivationSymmetric": fmt.symmetric})
    return out


# --- conversion and the table ---------------------------------------------------------------------
def op_mix(tflite: Path) -> dict[str, int]:
    """The file's ops by how they compute: int8 (an integer activation), hybrid (float
    activations, int8 weights) or float; QUANTIZE and DEQUANTIZE not counted."""
    from qconvert.check.inspect_tflite import map_file, read_structure

    structure = read_structure(map_file(str(tflite)))
    mix = {"int8": 0, "hybrid": 0, "float": 0}
    for graph in structure["subgraphs"]:
        tensors = graph["tensors"]
        for op in graph["operators"]:
            if op["op"] in ("QUANTIZE", "DEQUANTIZE"):
                continue
            used = [tensors[i] for i in list(op["inputs"]) + list(op["outputs"]) if i >= 0]
            computed = [t for t in used if not t["bytes"]]
            constant = [t for t in used if t["bytes"]]
            if any(t["dtype"] in ("INT8", "UINT8", "INT16") for t in computed):
                mix["int8"] += 1
            elif any(t["dtype"] == "INT8" for t in constant):
                mix["hybrid"] += 1
            elif any(t["dtype"] in ("FLOAT32", "FLOAT16") for t in computed):
                mix["float"] += 1
    return mix


def converted(model: Path, held: np.ndarray, folder: Path) -> dict:
    """qconvert's default conversion of `model`, verified on the held-out samples: its row."""
    data = folder / "held.npz"
    np.savez(data, x=held[:, None])  # samples of the [1, ...] input
    out = folder / (model.stem + ".tflite")
    run = subprocess.run(QCONVERT + [str(model), str(out), "--json", "--verify-data", str(data)],
                         capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "0"})
    row = {"exit": run.returncode, "stderr": run.stderr.strip().splitlines()[-1:] or [""]}
    if run.returncode != 0 or not out.exists():
        return row
    row.update(checked(json.loads(run.stdout), out, model))
    return row


def checked(report: dict, tflite: Path, model: Path) -> dict:
    """A quantized row's numbers, read from qconvert's --json `report` of the conversion of `model`
    to `tflite`: the SQNR, rounding bound and top-1 agreement of the output closest to its bound
    (by SQNR less bound, a missing bound counting 0; one output: that output); the .tflite's size
    over the ONNX file's; its op mix; whether the model's own QDQ pairs quantized it. Shared with
    the zoo's quantized table (bench/zoo_quantized.py), so both read a report one way."""
    outputs = [dict(o, sqnr_db=float(o["sqnr_db"]),  # JSON writes an infinity as "inf"
                    bound_db=None if o.get("bound_db") is None else float(o["bound_db"]))
               for o in (report.get("verify") or {}).get("outputs") or []]
    check = min(outputs, key=lambda o: o["sqnr_db"] - (o["bound_db"] or 0.0), default={})
    return dict(sqnr=check.get("sqnr_db"), bound=check.get("bound_db"),
                agreement=check.get("top1_agreement"),
                size=tflite.stat().st_size / model.stat().st_size, mix=op_mix(tflite),
                from_pairs=bool((report.get("quantization") or {}).get("from_pairs")))


def table(names: list[str], formats: list[Format], work: Path) -> list[str]:
    lines = ["| model | format | exit | rounding bound (dB) | SQNR (dB) | argmax agrees | size / ONNX "
             "| int8 / hybrid / float ops |", "|---|---|---:|---:|---:|---:|---:|---|"]
    for name in names:
        folder = work / name
        folder.mkdir(parents=True, exist_ok=True)
        model, data = trained(name, folder)
        for fmt in formats:
            q = quantized(model, fmt, data["calibration"], folder)
            row = converted(q, data["held"], folder)
            if row["exit"] != 0:
                lines.append(f"| {name} | {fmt.name} | {row['exit']} | | | | | {row['stderr'][0][:90]} |")
            else:
                bound = "-" if row["bound"] is None else f"{row['bound']:.1f}"
                agrees = "-" if row["agreement"] is None or name not in CLASSIFIERS else f"{row['agreement']:.2f}"
                mix = " / ".join(str(row["mix"][k]) for k in ("int8", "hybrid", "float"))
                lines.append(f"| {name} | {fmt.name} | 0 | {bound} | {row['sqnr']:.1f} | {agrees} | "
                             f"{row['size']:.2f} | {mix} |")
            print(lines[-1], file=sys.stderr, flush=True)
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--models", default=",".join(DATA))
    parser.add_argument("--formats", default=",".join(f.name for f in FORMATS))
    args = parser.parse_args(argv)
    wanted = args.formats.split(",")
    print("\n".join(table(args.models.split(","), [f for f in FORMATS if f.name in wanted], args.work)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
