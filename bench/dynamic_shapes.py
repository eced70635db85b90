"""Dynamic dimensions (issue 39): one .tflite for every size against one pinned at a size, per
model and precision. Small PyTorch modules written here (seeded random weights: enough for
latency and exactness), exported by TorchScript (opset 17) with their height and width, frames,
time or sequence length dynamic, each converted twice by qconvert: with default flags (the
dimensions stay resizable: shape_signature -1, written at 64) and with --input-shape at the size
S the table times them at (a static file); float, and int8 with --quantize --calibration
(seeded samples at S for the static file, at 64 for the dynamic one).

The table: the dimensions --json says stay resizable, the ops of each file, XNNPACK's delegated
ops of each file at S (the dynamic one after resize_tensor_input to S and allocate_tensors) and
of the dynamic one at a second size, the median latency at S of both in alternating rounds (one
thread) and their ratio, and the dynamic file's worst error against onnxruntime at S and two
other sizes (float: max abs error over the output's max abs; int8: SQNR in dB). Each model's
measurement runs in a child process (this script with --measure): a file LiteRT crashes on
becomes a row with its message.

    .venv/bin/python bench/dynamic_shapes.py --work /tmp/dyn
    .venv/bin/python bench/dynamic_shapes.py --work /tmp/dyn --models unet,lstm --precisions float
    .venv/bin/python bench/bench.py --tables dynamic --out /tmp/bench-dyn
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

QCONVERT = [sys.executable, "-m", "qconvert"]
CALIBRATION = 16  # int8 calibration samples (seeded standard normal)
SAMPLES = 2  # samples per size that the errors are measured on
BUDGET_S = 3.0  # timing per pair of files, both together
MIN_ROUNDS, MAX_ROUNDS = 5, 400
BASE = 64  # the size qconvert writes a dynamic dimension at (qconvert/onnx/dynamic_dims.py)


@dataclass(frozen=True)
class Spec:
    """A model: its ONNX input shape with the dynamic axes (`axes`: axis -> name), the size S it
    is timed at, the second size its delegation is read at, and the sizes its errors are."""

    name: str
    shape: tuple[int, ...]  # at S
    axes: dict[int, str]
    second: tuple[int, ...]  # the dynamic axes' sizes
    others: tuple[tuple[int, ...], ...]  # besides S: the error's other sizes (second first)

    def at(self, sizes: tuple[int, ...]) -> tuple[int, ...]:
        shape = list(self.shape)
        for axis, size in zip(self.axes, sizes):
            shape[axis] = size
        return tuple(shape)

    @property
    def fixed(self) -> tuple[int, ...]:
        return tuple(self.shape[a] for a in self.axes)


SPECS = {
    "resnet": Spec("resnet", (1, 3, 160, 160), {2: "H", 3: "W"}, (224, 224), ((224, 224), (96, 128))),
    "unet": Spec("unet", (1, 3, 160, 160), {2: "H", 3: "W"}, (224, 224), ((224, 224), (96, 128))),
    "speech": Spec("speech", (1, 40, 400), {2: "T"}, (1000,), ((1000,), (150,))),
    "lstm": Spec("lstm", (1, 128, 40), {1: "T"}, (512,), ((512,), (37,))),
    "transformer": Spec("transformer", (1, 128, 64), {1: "S"}, (256,), ((256,), (37,))),
}
PRECISIONS = ("float", "int8")


# --- the models ------------------------------------------------------------------------------------
def _module(name: str):
    """The torch module of `name`, in eval mode (seeded weights)."""
    import torch
    from torch import nn

    torch.manual_seed(0)

    def block(cin, cout, stride):
        return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1), nn.BatchNorm2d(cout), nn.ReLU())

    if name == "resnet":
        return _ResNet(block, nn, torch).eval()
    if name == "unet":
        return _UNet(block, nn, torch).eval()
    if name == "speech":
        layers, cin = [], 40
        for cout in (64, 96, 128, 128):
            layers += [nn.Conv1d(cin, cout, 5, 2, 2), nn.BatchNorm1d(cout), nn.ReLU()]
            cin = cout
        return nn.Sequential(*layers, nn.Conv1d(cin, 30, 1)).eval()
    if name == "lstm":
        return _Tagger(nn).eval()
    return _Encoder(nn, torch).eval()


def _ResNet(block, nn, torch):
    class Residual(nn.Module):
        def __init__(self, channels):
            super().__init__()
            self.a, self.b = block(channels, channels, 1), nn.Conv2d(channels, channels, 3, 1, 1)

        def forward(self, x):
            return torch.relu(x + self.b(self.a(x)))

    return nn.Sequential(block(3, 16, 2), Residual(16), block(16, 32, 2), Residual(32),
                         block(32, 64, 2), Residual(64), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(64, 10))


def _UNet(block, nn, torch):
    class UNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.d1, self.d2, self.d3 = block(3, 16, 1), block(16, 32, 2), block(32, 64, 2)
            self.u2 = nn.ConvTranspose2d(64, 32, 2, 2)
            self.c2 = block(64, 32, 1)
            self.u1 = nn.ConvTranspose2d(32, 16, 2, 2)
            self.c1 = block(32, 16, 1)
            self.out = nn.Conv2d(16, 2, 1)

        def forward(self, x):
            a = self.d1(x)
            b = self.d2(a)
            c = self.d3(b)
            b = self.c2(torch.cat([self.u2(c), b], 1))
            return self.out(self.c1(torch.cat([self.u1(b), a], 1)))

    return UNet()


def _Tagger(nn):
    class Tagger(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm, self.fc = nn.LSTM(40, 96, batch_first=True), nn.Linear(96, 12)

        def forward(self, x):
            return self.fc(self.lstm(x)[0])

    return Tagger()


def _Encoder(nn, torch):
    """A pre-norm transformer encoder layer written out, its reshapes from x.shape: TorchScript's
    export of nn.TransformerEncoderLayer (torch 2.13, wrapped in a module; the bare layer fails
    to trace, is_causal a Tensor) bakes the traced length into a Reshape (/self_attn/Reshape_4
    to [128, 4, 16]), which onnxruntime itself cannot run at another length."""
    class Encoder(nn.Module):
        def __init__(self, dim=64, heads=4):
            super().__init__()
            self.heads = heads
            self.n1, self.n2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
            self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
            self.ff = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

        def forward(self, x):
            batch, length, dim = x.shape
            q, k, v = self.qkv(self.n1(x)).chunk(3, dim=-1)
            q, k, v = (t.reshape(batch, length, self.heads, dim // self.heads).transpose(1, 2)
                       for t in (q, k, v))
            weights = torch.softmax(q @ k.transpose(-1, -2) / (dim // self.heads) ** 0.5, -1)
            attended = (weights @ v).transpose(1, 2).reshape(batch, length, dim)
            x = x + self.proj(attended)
            return x + self.ff(self.n2(x))

    return Encoder()


def export(spec: Spec, folder: Path) -> Path:
    """`spec`'s model exported to ONNX (opset 17, TorchScript) with its dynamic axes; once."""
    import warnings

    import torch

    path = folder / f"{spec.name}.onnx"
    warnings.filterwarnings("ignore", "You are using the legacy TorchScript", DeprecationWarning)
    if not path.exists():
        sample = torch.from_numpy(_inputs(spec.shape, 1, 0)[0])
        torch.onnx.export(_module(spec.name), (sample,), str(path), input_names=["x"],
                          output_names=["y"], opset_version=17, dynamo=False,
                          dynamic_axes={"x": dict(spec.axes)})
    return path


def _inputs(shape: tuple[int, ...], count: int, seed: int) -> np.ndarray:
    """[count, *shape] seeded standard normal samples."""
    return np.random.default_rng(seed).standard_normal((count, *shape)).astype(np.float32)


# --- conversion ----------------------------------------------------------------------------------
def convert(model: Path, spec: Spec, precision: str, static: bool, folder: Path) -> dict:
    """qconvert's conversion: {"path", "report"} or {"error": the command and its last line}."""
    kind = "static" if static else "dynamic"
    out = folder / f"{spec.name}-{precision}-{kind}.tflite"
    command = QCONVERT + [str(model), str(out), "--json"]
    if static:
        command += ["--input-shape", "x:" + ",".join(map(str, spec.shape))]
    if precision == "int8":
        data = folder / f"{spec.name}-calibration-{kind}.npz"
        shape = spec.shape if static else spec.at((BASE,) * len(spec.axes))
        np.savez(data, x=_inputs(shape[1:], CALIBRATION, 1))  # rows of the [1, ...] input
        command += ["--quantize", "--calibration", str(data)]
    run = subprocess.run(command, capture_output=True, text=True,
                         env={**os.environ, "PYTHONHASHSEED": "0"})
    shown = " ".join(c if " " not in c else repr(c) for c in command[2:])
    if run.returncode != 0 or not out.exists():
        last = (run.stderr.strip().splitlines() or [""])[-1]
        return {"error": f"exit {run.returncode}: qconvert {shown}: {last}"}
    return {"path": str(out), "report": json.loads(run.stdout)}


def resizable(report: dict) -> str:
    """The dimensions --json says stay resizable ("H, W"), or "none (why)"."""
    dims = report.get("dimensions") or []
    kept = [d["symbol"] for d in dims if d.get("resizable")]
    if kept:
        return ", ".join(kept)
    why = "; ".join(f"{d['symbol']}: {d.get('fixed_because')}" for d in dims)
    return f"none ({why or 'no dimensions reported'})"


# --- measurement (in a child process) ------------------------------------------------------------
def _loaded(path: str, proto):
    """The .tflite in LiteRT (XNNPACK, one thread), paired with the ONNX model's inputs and outputs."""
    from qconvert.check.runtimes import TFLiteModel, onnx_values

    model = TFLiteModel(path)
    model.pair(onnx_values(proto), onnx_values(proto, outputs=True))
    return model


def _delegated(model) -> str:
    """"delegated / ops" of the interpreter as it is allocated now."""
    if __package__:
        from .runners import delegated_ops
    else:
        from runners import delegated_ops
    done, total = delegated_ops(model.interpreter)
    return f"{done}/{total}"


def _error(model, session, shape: tuple[int, ...], precision: str) -> float:
    """The worst over SAMPLES inputs of `shape`: float, max |tflite - onnxruntime| over the
    output's max |onnxruntime|; int8, the SQNR in dB (the worst is the lowest)."""
    from qconvert.check.metrics import sqnr_db

    scores = []
    for sample in _inputs(shape, SAMPLES, 2):
        want = session.run(None, {"x": sample})[0].astype(np.float64)
        got = model.run({"x": sample})["y"].astype(np.float64)
        if got.shape != want.shape:
            raise RuntimeError(f"output {list(got.shape)} at {list(shape)}, onnxruntime's {list(want.shape)}")
        if precision == "int8":
            scores.append(sqnr_db(want, got))
        else:
            scores.append(float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1e-30)))
    return min(scores) if precision == "int8" else max(scores)


def timed_ms(interpreters: list) -> tuple[list[float], int]:
    """Median ms of each interpreter's invoke, inputs already set, in alternating rounds (one
    warm-up run each; about BUDGET_S seconds, MIN_ROUNDS to MAX_ROUNDS rounds), as
    qconvert.check.latency.median_ms times, but on interpreters already resized."""
    for interpreter in interpreters:
        interpreter.invoke()
    times: list[list[float]] = [[] for _ in interpreters]
    deadline = time.perf_counter() + BUDGET_S
    while len(times[0]) < MAX_ROUNDS and (len(times[0]) < MIN_ROUNDS or time.perf_counter() < deadline):
        for interpreter, seconds in zip(interpreters, times):
            start = time.perf_counter()
            interpreter.invoke()
            seconds.append(time.perf_counter() - start)
    return [statistics.median(s) * 1e3 for s in times], len(times[0])


def measure(spec: Spec, onnx_path: str, static_path: str, dynamic_path: str, precision: str) -> dict:
    """The row's measured numbers: delegation, latency at S, errors at S and the other sizes."""
    import onnx
    import onnxruntime

    proto = onnx.load(onnx_path)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    session = onnxruntime.InferenceSession(onnx_path, options, providers=["CPUExecutionProvider"])
    static, dynamic = _loaded(static_path, proto), _loaded(dynamic_path, proto)
    dynamic.resize({"x": spec.shape})
    result = {"static_delegated": _delegated(static), "dynamic_delegated": _delegated(dynamic),
              "static_error": _error(static, session, spec.shape, precision),
              "errors": [_error(dynamic, session, spec.shape, precision)]}
    sample = _inputs(spec.shape, 1, 3)[0]
    for model in (static, dynamic):
        model.run({"x": sample})  # sets the input
    (result["static_ms"], result["dynamic_ms"]), result["rounds"] = timed_ms(
        [static.interpreter, dynamic.interpreter])
    for k, sizes in enumerate(spec.others):
        shape = spec.at(sizes)
        dynamic.resize({"x": shape})
        if k == 0:
            result["second_delegated"] = _delegated(dynamic)
        result["errors"].append(_error(dynamic, session, shape, precision))
    return result


def measured(spec: Spec, onnx_path: Path, static: dict, dynamic: dict, precision: str,
             folder: Path) -> dict:
    """measure() in a child process (this script with --measure): {"error"} if it fails."""
    out = folder / f"{spec.name}-{precision}-measured.json"
    command = [sys.executable, str(Path(__file__).resolve()), "--measure", spec.name, str(onnx_path),
               static["path"], dynamic["path"], precision, str(out)]
    run = subprocess.run(command, capture_output=True, text=True)
    if run.returncode != 0 or not out.exists():
        last = (run.stderr.strip().splitlines() or [f"signal {-run.returncode}"])[-1]
        return {"error": f"measuring failed (exit {run.returncode}): {last}"}
    return json.loads(out.read_text())


# --- the table -------------------------------------------------------------------------------------
COLUMNS = ["model", "precision", "resizable", "S", "ops static / dynamic", "XNNPACK static @S",
           "XNNPACK dynamic @S", "XNNPACK dynamic @2nd", "static ms @S", "dynamic ms @S",
           "dynamic / static", "error static @S", "error dynamic @S, 2nd, 3rd", "status"]


def _sizes(sizes: tuple[int, ...]) -> str:
    return "x".join(map(str, sizes))


def _score(value: float, precision: str) -> str:
    return f"{value:.1f}" if precision == "int8" else f"{value:.1e}"


def row(spec: Spec, precision: str, work: Path) -> dict:
    """One row (column -> text) of `spec` at `precision`; a failure fills "status"."""
    folder = work / spec.name
    folder.mkdir(parents=True, exist_ok=True)
    cells = dict.fromkeys(COLUMNS, "-")
    cells.update(model=spec.name, precision=precision, S=_sizes(spec.fixed))
    model = export(spec, folder)
    static = convert(model, spec, precision, True, folder)
    dynamic = convert(model, spec, precision, False, folder)
    failed = [c["error"] for c in (static, dynamic) if "error" in c]
    if failed:
        cells["status"] = "; ".join(failed)
        return cells
    cells["resizable"] = resizable(dynamic["report"])
    cells["ops static / dynamic"] = " / ".join(str(_ops(c["path"])) for c in (static, dynamic))
    got = measured(spec, model, static, dynamic, precision, folder)
    if "error" in got:
        cells["status"] = got["error"]
        return cells
    errors = [_score(e, precision) for e in got["errors"]]
    sizes = ["S"] + [_sizes(s) for s in spec.others]
    cells.update({
        "XNNPACK static @S": got["static_delegated"], "XNNPACK dynamic @S": got["dynamic_delegated"],
        "XNNPACK dynamic @2nd": f"{got['second_delegated']} @{_sizes(spec.second)}",
        "static ms @S": f"{got['static_ms']:.2f}", "dynamic ms @S": f"{got['dynamic_ms']:.2f}",
        "dynamic / static": f"{got['dynamic_ms'] / got['static_ms']:.2f}",
        "error static @S": _score(got["static_error"], precision),
        "error dynamic @S, 2nd, 3rd": ", ".join(f"{e} @{s}" for e, s in zip(errors, sizes)),
        "status": "ok"})
    return cells


def _ops(path: str) -> int:
    """The operators of the file's main subgraph."""
    from qconvert.tflite import schema_generated as schema

    model = schema.Model.GetRootAsModel(Path(path).read_bytes(), 0)
    return model.Subgraphs(0).OperatorsLength()


def rows(names: list[str], precisions: list[str], work: Path) -> list[dict]:
    found = []
    for name in names:
        for precision in precisions:
            print(f"bench: dynamic {name} {precision} ...", file=sys.stderr, flush=True)
            try:
                found.append(row(SPECS[name], precision, work))
            except Exception as e:  # a model that fails to export: a row, never a crash
                cells = dict.fromkeys(COLUMNS, "-")
                cells.update(model=name, precision=precision, status=f"{type(e).__name__}: {e}"[:200])
                found.append(cells)
    return found


def header() -> str:
    from qconvert.check.latency import cpu_description

    return (f"\nDynamic dimensions (dynamic_shapes.py): static file (--input-shape at S) against "
            f"dynamic file (default flags, written at {BASE}, resize_tensor_input to S); LiteRT "
            f"with XNNPACK, 1 thread, alternating rounds of about {BUDGET_S:.0f} s per pair; "
            f"CPU {cpu_description()}. Error: float max abs error / max abs output, int8 SQNR "
            f"(dB), worst of {SAMPLES} seeded samples per size against onnxruntime\n")


def markdown(found: list[dict]) -> str:
    text = ("model", "precision", "resizable", "S", "status")
    lines = ["| " + " | ".join(COLUMNS) + " |",
             "|" + "|".join("---" if c in text else "---:" for c in COLUMNS) + "|"]
    return "\n".join(lines + ["| " + " | ".join(r[c] for c in COLUMNS) + " |" for r in found])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path)
    parser.add_argument("--models", default=",".join(SPECS))
    parser.add_argument("--precisions", default=",".join(PRECISIONS))
    parser.add_argument("--measure", nargs=6, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        name, onnx_path, static, dynamic, precision, out = args.measure
        Path(out).write_text(json.dumps(measure(SPECS[name], onnx_path, static, dynamic, precision)))
        return 0
    if args.work is None:
        parser.error("--work is required")
    found = rows(args.models.split(","), args.precisions.split(","), args.work)
    print(header())
    print(markdown(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
