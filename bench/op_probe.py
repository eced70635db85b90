"""Single-op probes: which ops TFLite Micro has an int8 and a 16x8 (int16) kernel for (--micro),
and which XNNPACK, LiteRT's default delegate, takes at each precision (--xnnpack).

    PYTHONPATH=. .venv/bin/python bench/op_probe.py --micro [--out micro.json] [--base micro]
    PYTHONPATH=. .venv/bin/python bench/op_probe.py --xnnpack [--json rows.json]
        [--ops CONV_2D,PRELU]

For each TFLite op qconvert writes (ops/registry.py: those with a QuantRule, and the ones with
a hybrid kernel), a one-node ONNX model (CASES: the ONNX op that qconvert imports as it, small
shapes) is converted by qconvert: float, int8 (`--quantize --precision int8`), int16
(`--activations int16` too) and hybrid (`--weight-only`, every weight), 16 random calibration
samples.

--micro: every integer op of the int8 and int16 files (the case's op, and the QUANTIZE,
LOGICAL_NOT... around it) is copied alone into a .tflite (its tensors, quantization, options and
constants: bench/single_op.py), which the tflite-micro Python package's interpreter (its all-ops
resolver) loads, allocates and invokes on zeros. An op it refuses (no registration, or a
kernel's Prepare or Eval rejecting the tensor types) has no kernel at that precision; the message
TFLite Micro prints says which. An op qconvert does not write at a precision (no 16x8 kernel in
its registry, kept float, rewritten into other ops) says so. With --out: the base target (the
shipped micro.json) with each missing kernel of an op qconvert quantizes set to null, and a
kernel found where the base had null given the default kernel again; `source` says so.

--xnnpack: for each op of each of the four files, whether LiteRT (its default resolver, 1
thread) puts it in an XNNPACK partition (qconvert.check.inspect_tflite, in a child process).

The table printed: op, then per precision "ok", "no kernel: <message>" or "not written: <why>"
(--micro), or "XNNPACK" / "interpreter" (--xnnpack).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

BENCH = Path(__file__).resolve().parent
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

import single_op  # noqa: E402
import target_profile  # noqa: E402

from qconvert import targets  # noqa: E402

X = ("x", (1, 4, 8, 8))
Y = ("y", (1, 4, 8, 8))
V = ("x", (1, 16))
I64 = np.int64


def _w(*shape):
    return np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32) * 0.3


# tflite op: (ONNX op, attributes, inputs (name, shape) or constants, opset); a list of such
# nodes chains them (each node's first input the previous node's output).
CASES = {
    "ABS": ("Abs", {}, [X]), "ADD": ("Add", {}, [X, Y]), "SUB": ("Sub", {}, [X, Y]),
    "MUL": ("Mul", {}, [X, Y]), "MAXIMUM": ("Max", {}, [X, Y]), "MINIMUM": ("Min", {}, [X, Y]),
    "ARG_MAX": ("ArgMax", {"axis": 1, "keepdims": 0}, [X]),
    "ARG_MIN": ("ArgMin", {"axis": 1, "keepdims": 0}, [X]),
    "AVERAGE_POOL_2D": ("AveragePool", {"kernel_shape": [2, 2], "strides": [2, 2]}, [X]),
    "MAX_POOL_2D": ("MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2]}, [X]),
    "BATCH_MATMUL": ("MatMul", {}, [("x", (1, 4, 8)), ("y", (1, 8, 6))]),
    "BROADCAST_TO": ("Expand", {}, [("x", (1, 4, 1)), np.array([1, 4, 6], I64)]),
    "CONCATENATION": ("Concat", {"axis": 1}, [X, Y]),
    "CONV_2D": ("Conv", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, [X, _w(8, 4, 3, 3), _w(8)]),
    "DEPTHWISE_CONV_2D": ("Conv", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "group": 4},
                          [X, _w(4, 1, 3, 3), _w(4)]),
    "TRANSPOSE_CONV": ("ConvTranspose", {"kernel_shape": [2, 2], "strides": [2, 2]}, [X, _w(4, 8, 2, 2)]),
    "FULLY_CONNECTED": ("Gemm", {"transB": 1}, [V, _w(8, 16), _w(8)]),
    "DEPTH_TO_SPACE": ("DepthToSpace", {"blocksize": 2}, [X]),
    "SPACE_TO_DEPTH": ("SpaceToDepth", {"blocksize": 2}, [X]),
    "EQUAL": ("Equal", {}, [X, Y]), "GREATER": ("Greater", {}, [X, Y]),
    "GREATER_EQUAL": ("GreaterOrEqual", {}, [X, Y]), "LESS": ("Less", {}, [X, Y]),
    "LESS_EQUAL": ("LessOrEqual", {}, [X, Y]), "NOT_EQUAL": ("IsNaN", {}, [X]),
    "EXP": ("Exp", {}, [X]), "LOG": ("Log", {}, [("x+", (1, 4, 8, 8))]),
    "RSQRT": ("LayerNormalization", {"axis": -1}, [V, _w(16), _w(16)], 17),
    "GELU": [("Gelu", {}, [X], 20), ("Add", {}, [Y])], "HARD_SWISH": ("HardSwish", {}, [X], 14),
    "LEAKY_RELU": ("LeakyRelu", {"alpha": 0.1}, [X]), "LOGISTIC": [("Sigmoid", {}, [X]), ("Add", {}, [Y])],
    "TANH": [("Tanh", {}, [X]), ("Add", {}, [Y])], "RELU": ("Relu", {}, [X]),
    "RELU6": ("Clip", {}, [X, np.array(0, np.float32), np.array(6, np.float32)]),
    "RELU_N1_TO_1": ("Clip", {}, [X, np.array(-1, np.float32), np.array(1, np.float32)]),
    "PRELU": ("PRelu", {}, [X, _w(4, 1, 1)]),
    # a fixed-output op whose output is the model's stays float (its fixed step would lose it)
    "SOFTMAX": [("Softmax", {"axis": -1}, [V]), ("Add", {}, [("y", (1, 16))])],
    "LOG_SOFTMAX": [("LogSoftmax", {"axis": -1}, [V]), ("Add", {}, [("y", (1, 16))])],
    "GATHER": ("Gather", {"axis": 1}, [X, np.array([0, 2], I64)]),
    "GATHER_ND": ("GatherND", {}, [("x", (4, 8)), np.array([[1], [3]], I64)]),
    "MEAN": ("ReduceMean", {"axes": [2, 3], "keepdims": 1}, [X]),
    "REDUCE_MAX": ("ReduceMax", {"axes": [1], "keepdims": 0}, [X]),
    "REDUCE_MIN": ("ReduceMin", {"axes": [1], "keepdims": 0}, [X]),
    "SUM": ("ReduceSum", {"keepdims": 0}, [X, np.array([1], I64)]),
    "PAD": ("Pad", {}, [X, np.array([0, 0, 1, 1, 0, 0, 1, 1], I64)]),
    "PADV2": ("Pad", {}, [X, np.array([0, 0, 1, 1, 0, 0, 1, 1], I64), np.array(0.5, np.float32)]),
    "MIRROR_PAD": ("Pad", {"mode": "reflect"}, [X, np.array([0, 0, 1, 1, 0, 0, 1, 1], I64)]),
    "RESHAPE": ("Reshape", {}, [X, np.array([1, 4, 64], I64)]),
    "RESIZE_BILINEAR": ("Resize", {"mode": "linear"}, [X, "", np.array([1, 1, 2, 2], np.float32)]),
    "RESIZE_NEAREST_NEIGHBOR": ("Resize", {"mode": "nearest"},
                                [X, "", "", np.array([1, 4, 12, 12], I64)]),
    "REVERSE_V2": ("Slice", {}, [X, np.array([-1], I64), np.array([-2 ** 63], I64),
                                 np.array([3], I64), np.array([-1], I64)]),
    "SELECT_V2": ("Where", {}, [("c?", (1, 4, 8, 8)), X, Y]),
    "SLICE": ("Slice", {}, [X, np.array([1], I64), np.array([3], I64), np.array([1], I64)]),
    "STRIDED_SLICE": ("Slice", {}, [X, np.array([0], I64), np.array([8], I64), np.array([2], I64),
                                    np.array([2], I64)]),
    "SPLIT": ("Split", {"axis": 1}, [X, np.array([2, 2], I64)]),
    "SPLIT_V": ("Split", {"axis": 1}, [X, np.array([1, 3], I64)]),
    "SQUARED_DIFFERENCE": [("Sub", {}, [X, Y]), ("Pow", {}, [np.array(2, np.float32)])],
    "TILE": ("Tile", {}, [X, np.array([1, 1, 2, 1], I64)]),
    "TOPK_V2": ("TopK", {"axis": -1}, [V, np.array([3], I64)]),
    "TRANSPOSE": ("Transpose", {"perm": [0, 2, 1]}, [("x", (1, 4, 8))]),
    # a second form of an op: OP/what
    "BATCH_MATMUL/constant": ("MatMul", {}, [("x", (4, 16, 32)), _w(4, 32, 64)]),
    "UNIDIRECTIONAL_SEQUENCE_LSTM": ("LSTM", {"hidden_size": 8},
                                     [("x", (5, 1, 4)), _w(1, 32, 4), _w(1, 32, 8), _w(1, 64)]),
}
OUTPUTS = {"Split": 2, "TopK": 2}


def onnx_model(case) -> onnx.ModelProto:
    """The case's one- (or few-) node model, its outputs' shapes inferred."""
    nodes, inputs, inits = [], {}, []
    steps = case if isinstance(case, list) else [case]
    opset = max(step[3] if len(step) > 3 else 13 for step in steps)
    previous = None
    for k, (op, attrs, args, *_) in enumerate(steps):
        names = [previous] if previous else []
        for j, arg in enumerate(args):
            if isinstance(arg, str):
                names.append(arg)
            elif isinstance(arg, np.ndarray):
                inits.append(onnx.numpy_helper.from_array(arg, f"c{k}_{j}"))
                names.append(f"c{k}_{j}")
            else:
                kind = TensorProto.BOOL if arg[0].endswith("?") else TensorProto.FLOAT
                inputs[arg[0]] = helper.make_tensor_value_info(arg[0], kind, arg[1])
                names.append(arg[0])
        outputs = [f"out{k}_{i}" for i in range(OUTPUTS.get(op, 1))]
        nodes.append(helper.make_node(op, names, outputs, **attrs))
        previous = outputs[0]
    graph = helper.make_graph(nodes, "case", list(inputs.values()), [], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    by_name = {v.name: v for v in inferred.graph.value_info}
    inferred.graph.output.extend(by_name[o] for o in nodes[-1].output)
    return inferred


def calibration(model: onnx.ModelProto, count: int = 16) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    samples = {}
    for value in model.graph.input:
        shape = [count] + [d.dim_value for d in value.type.tensor_type.shape.dim]
        if value.name.endswith("?"):
            samples[value.name] = rng.random(shape) < 0.5
        else:
            x = rng.standard_normal(shape).astype(np.float32)
            samples[value.name] = np.abs(x) + 0.1 if value.name.endswith("+") else x
    return samples


FLAGS = {"float": {}, "int8": {"quantize": True, "precision": "int8"},
         "int16": {"quantize": True, "precision": "int8", "activations": "int16"},
         "hybrid": {"weight_only": True, "weight_only_min_elements": 1}}
MICRO = ("int8", "int16")


def written(op_type: str, precision: str, work: Path):
    """The file qconvert writes from the case's model at `precision`, or why there is none."""
    import qconvert

    model = onnx_model(CASES[op_type])
    flags = dict(FLAGS[precision])
    if flags.get("quantize"):
        flags["calibration"] = calibration(model)
    try:
        content, _ = qconvert.convert(model, **flags)
    except Exception as e:  # qconvert refuses the case: say so in the table
        return f"not written: {type(e).__name__}: {str(e).splitlines()[0][:120]}"
    path = work / f"{op_type.replace('/', '-')}.{precision}.tflite"
    path.write_bytes(content)
    return target_profile.read_file(path)


@contextlib.contextmanager
def captured_output():
    """What native code prints on fds 1 and 2 meanwhile, in the yielded list (one string)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    got = []
    with tempfile.TemporaryFile() as f:
        os.dup2(f.fileno(), 1)
        os.dup2(f.fileno(), 2)
        try:
            yield got
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            f.seek(0)
            got.append(f.read().decode(errors="replace"))


def micro_runs(content: bytes, feeds: list[np.ndarray]) -> str:
    """"ok" when TFLite Micro loads, allocates and invokes the file, else "no kernel: <what it
    printed>"."""
    from tflite_micro import runtime

    error = None
    with captured_output() as printed:
        try:
            interpreter = runtime.Interpreter.from_bytes(content, arena_size=16 << 20)
            for k, value in enumerate(feeds):
                interpreter.set_input(np.zeros_like(value), k)
            interpreter.invoke()
        except (RuntimeError, ValueError) as e:
            error = str(e)
    if error is None:
        return "ok"
    lines = [line.strip() for line in printed[0].splitlines() if line.strip()]
    return "no kernel: " + "; ".join(dict.fromkeys(lines[:3] or [error]))[:160]


def probe(ops: list[str], work: Path, precisions, check) -> dict[tuple[str, str], str]:
    """{(op, precision): check(file, op index) | "not written: ..."} for the cases' ops and every
    other op of `precisions` their files hold (QUANTIZE, LOGICAL_NOT...), an "ok" or "XNNPACK"
    from any of its files winning."""
    results: dict[tuple[str, str], str] = {}
    for op_type in ops:
        for precision in precisions:
            fm = written(op_type, precision, work)
            if isinstance(fm, str):
                results.setdefault((op_type, precision), fm)
                continue
            for k, op in enumerate(fm.ops):
                key = (op.type, target_profile.measured_precision(op, fm.ir))
                if key[1] in precisions and results.get(key) not in ("ok", "XNNPACK"):
                    results[key] = check(fm, k)
            if (op_type.split("/")[0], precision) not in results:
                ops_written = ", ".join(f"{o.type} {target_profile.measured_precision(o, fm.ir)}"
                                        for o in fm.ops)
                results[op_type, precision] = f"not written: qconvert wrote {ops_written}"
        print(f"{op_type}: " + "; ".join(f"{p} {results.get((op_type.split('/')[0], p))}"
                                         for p in precisions), file=sys.stderr, flush=True)
    return results


def micro_check(fm, index: int) -> str:
    return micro_runs(*single_op.single_op(fm, index, {}))


def xnnpack_check(fm, index: int) -> str:
    if fm.delegated is None:
        fm.delegated = target_profile.delegated_ops(fm.path, len(fm.ops))
    if fm.delegated is None:
        return "LiteRT cannot load the file"
    return "XNNPACK" if index in fm.delegated else "interpreter"


def micro_target(base: dict, results: dict) -> dict:
    """The base with each probed kernel TFLite Micro lacks set to null, and a kernel it has that
    the base made null given the default again; only for the ops qconvert quantizes (a CAST
    missing one pair of types is not CAST missing)."""
    from qconvert.ops.registry import TFLITE_OPS

    data = json.loads(json.dumps(base))
    ops = data.setdefault("ops", {})
    for (op, precision), result in sorted(results.items()):
        if precision not in MICRO or op not in TFLITE_OPS or TFLITE_OPS[op].quant is None:
            continue  # QUANTIZE, CAST...: a type pair missing is no kernel missing
        entry = ops.setdefault(op, {})
        if result.startswith("no kernel"):
            entry[precision] = None
        elif result == "ok" and precision in entry and entry[precision] is None:
            del entry[precision]  # the default kernel
        ops[op] = {p: entry[p] for p in targets.PRECISIONS if p in entry}
        if not ops[op]:
            del ops[op]
    from importlib.metadata import version

    data["source"] = (f"kernels probed with tflite-micro {version('tflite_micro')} "
                      f"({datetime.date.today().isoformat()}, bench/op_probe.py --micro: each quantized op "
                      "qconvert writes, alone in a .tflite, loaded and invoked by TFLite Micro's "
                      "interpreter; null where it has no int8 or no 16x8 kernel); costs relative (1 a "
                      "multiply-accumulate, 0.5 an element of an element-wise op), 16x8 kernels twice "
                      "int8's; every op runs on the CPU (no delegate)")
    return data


def table(results: dict, precisions) -> str:
    lines = ["| op | " + " | ".join(precisions) + " |", "|---|" + "---|" * len(precisions)]
    for op in sorted({op for op, _ in results}):
        lines.append(f"| {op} | " + " | ".join(results.get((op, p), "-") for p in precisions) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--micro", action="store_true", help="probe TFLite Micro's kernels")
    parser.add_argument("--xnnpack", action="store_true", help="probe XNNPACK's delegation")
    parser.add_argument("--ops", type=target_profile._names, default=sorted(CASES))
    parser.add_argument("--out", type=Path, help="--micro: the micro target file to write")
    parser.add_argument("--base", default="micro")
    parser.add_argument("--json", type=Path, help="the results as JSON")
    args = parser.parse_args(argv)
    if args.micro == args.xnnpack:
        parser.error("give one of --micro, --xnnpack")
    precisions, check = (MICRO, micro_check) if args.micro else (tuple(FLAGS), xnnpack_check)
    with tempfile.TemporaryDirectory(prefix="op-probe-") as tmp:
        results = probe(args.ops, Path(tmp), precisions, check)
    print(table(results, precisions))
    if args.json:
        args.json.write_text(json.dumps({f"{op} {p}": r for (op, p), r in sorted(results.items())},
                                        indent=1))
    if args.out and args.micro:
        base = json.loads(Path(targets.load_target(args.base).path).read_text())
        target_profile.write_target(args.out, micro_target(base, results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
