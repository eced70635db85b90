"""Measures a target file (qconvert/targets/, `--target FILE`) on the machine at hand.

    PYTHONPATH=. .venv/bin/python bench/target_profile.py --out FILE.json [--base x86]
        [--models ppocrv3-det,mtcnn-onet,...] [--work DIR] [--per-op 6] [--rounds 41]
    /work/vm/run-avx2 -- env PYTHONPATH=. .venv/bin/python bench/target_profile.py \
        --out qconvert/targets/x86.json                       # the shipped x86 target (AVX2)
    PYTHONPATH=. .venv/bin/python bench/target_profile.py --agreement TARGET [--models ...]
    PYTHONPATH=. .venv/bin/python bench/target_profile.py --breakdown [--models ...]
    PYTHONPATH=. .venv/bin/python bench/target_profile.py --delegation-from FILE.ops.json \
        --base arm64 --out qconvert/targets/arm64.json        # another device's delegated fields

Each model (DEFAULT_MODELS: corpus models, bench/corpus.py, and trained-table ones,
bench/trained.py) is converted by qconvert at each precision, in a fresh process, calibrated on 16
samples of the model's own data maker: float (no flag), int8 (`--quantize --precision int8`),
int16 (`--quantize --precision int8 --activations int16`), hybrid (`--weight-only`). The files
stay in --work (~/.cache/qconvert-bench/target-profile) and are reused: a second run, e.g. on
another ISA, times the same files. A file LiteRT cannot load is skipped (and said so).

Each op of each file: whether XNNPACK, LiteRT's default delegate, runs it in the whole model
(qconvert.check.inspect_tflite's partitions), its precision and its work as the cost model reads
them (qconvert.targets.precision_of and work, on the file's ops read back into qconvert's IR: the
converter's own cost to the nanosecond), but a QUANTIZE or DEQUANTIZE with an int16 side counts
as int16. Of each (op, precision), the distinct ops (type, options, tensors' shapes and types) of
MIN_WORK units or more are ranked by work and --per-op of them, evenly spaced in that ranking,
are copied alone into .tflite files (bench/single_op.py: the op's own table, options, tensors,
quantization and constants; its inputs fed the values they take when the whole model runs on a
calibration sample) and timed in LiteRT (1 thread, default resolver: XNNPACK where it takes the
op) in alternating rounds beside two reference ops that do no work: a sample is the mean of as
many invokes as fill --sample-ms (short, so that another process rarely cuts one), the op's time
its median over --rounds rounds less the median of the reference that runs where it runs. Its ns
per unit is that over its work; an (op, precision) gets the median of its timed ops, and is
delegated when most of its ops in the files are. Each file's ops are timed in a child process
(one op per child when that one dies: LiteRT aborts on some files).

partition_ns: a chain of CHAIN delegated float ADDs against the same chain with its middle ADD
replaced by an op XNNPACK does not take (float CUMSUM over an axis of one: a copy): the
difference, less that op's own time and plus the ADD's (both timed alone), over the two switches;
the median over PARTITION_SIZES.

The target written is --base's file (the shipped x86 by default) with every (op, precision)
measured in it ({"delegated", "ns"}), the `default` kernels the medians of the measured
element-wise ops per precision, partition_ns, the delegated field of every other op qconvert
writes from the models' partitions or, for ops they lack, from bench/op_probe.py --xnnpack's
one-op models (--no-probe: not), and `source` naming the CPU (qconvert.check.latency's
cpu_description), the date, the models, the load average and the command. --details (FILE.ops.json
beside it) holds every timed op, the partition timings, the delegation counts and the probe's
answers.

--agreement TARGET: each model's all-int8 and float files timed whole in alternating rounds
(--model-rounds) next to targets.cost(int8) / targets.cost(float) on TARGET: a markdown table.
--breakdown: each model's int8 and float files, every distinct op timed alone as above, summed
per op type (times its count), with the switches between XNNPACK and the interpreter: where the
int8 file spends its time next to the float one. --delegation-from PROFILE.ops.json: --base (a
device not at hand, arm64) with the delegated fields that profile found (XNNPACK takes the same
ops whatever the x86 ISA), a kernel it has delegated that XNNPACK does not take priced at
--interpreter-factor times the profile's measured interpreter kernel where that is more.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parent
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

import corpus  # noqa: E402
import runners  # noqa: E402
from single_op import (CHAIN, NUMPY, REFERENCES, Crashed, chain, in_child, load, median_seconds,  # noqa: E402
                       one_op, single_op, timed_ops)

from qconvert import targets  # noqa: E402
from qconvert.ir import Model, Operator, QuantParams  # noqa: E402
from qconvert.tflite import schema_generated as S  # noqa: E402
from qconvert.tflite.reader import builtin_code, op_name  # noqa: E402

# Convs, depthwise, transposed convs, nearest resizes (PP-OCRv3's detector, YOLOX, YOLOv8n), a
# ResNet, bilinear resizes (CRAFT), HardSwish and attention (PP-OCRv4's recognizer), PReLU and
# dense layers (MTCNN), attention with GELU (khmersm, Smart Turn's Whisper encoder), fused LSTMs
# (openWakeWord's head, ddddocr's CRNN), an unrolled GRU (PLCMOS), embeddings and element-wise
# ops (magika). Corpus models (bench/corpus.py) but ppocr-rec and yolox-chars, trained-table
# models downloaded from wheels (bench/trained.py; no training).
DEFAULT_MODELS = ("ppocrv3-det", "ppocr-rec", "yolox-chars", "nudenet-yolov8n", "open-nsfw", "craft",
                  "mtcnn-onet", "khmersm", "smart-turn-v3", "oww-hey-mycroft", "ddddocr-crnn",
                  "plcmos-v2", "magika")
PRECISION_FLAGS = {"float": (), "int8": ("--quantize", "--precision", "int8"),
                   "int16": ("--quantize", "--precision", "int8", "--activations", "int16"),
                   "hybrid": ("--weight-only",)}
CALIBRATION = 16
# partition_ns's tensor sizes: small enough that every tensor of the chains stays in cache, so the
# difference is the switch (at 64K floats and more it grows with the size: cache effects of the
# chain against the ops timed alone, not the switch itself, since XNNPACK reads and writes the
# interpreter's tensors in place).
PARTITION_SIZES = (16, 256, 4096)
# Ops with less work are not timed: a fraction of a microsecond, their ns per unit would be the
# noise of the reference's subtraction. An (op, precision) with no larger op keeps the base's kernel.
MIN_WORK = 4096

# --- the models ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Source:
    """A model to convert: its ONNX file, its --input-shape flags, its calibration file."""

    name: str
    onnx: Path
    flags: tuple[str, ...]
    calibration: Path


def source(name: str, work: Path) -> Source:
    """The corpus or trained model `name`, its calibration samples written to `work` (corpus:
    the table's stream 0; trained: the table's calibration set)."""
    calibration = work / f"{name}.cal.npz"
    if name in corpus.CORPUS:
        model = corpus.CORPUS[name]
        path = corpus.fetch_member(model.archive, model.member)
        if not calibration.exists():
            np.savez(calibration, **corpus.samples(model, path, 0, CALIBRATION))
        return Source(name, path, corpus.shape_flags(model), calibration)
    from trained_models import SPECS

    if name not in SPECS:
        raise SystemExit(f"target_profile: unknown model {name!r}: not in bench/corpus.py nor "
                         "bench/trained_models")
    spec = SPECS[name]
    path, data = spec.onnx(), spec.data()
    if not calibration.exists():
        chosen = {k: v[:CALIBRATION] for k, v in data.calibration.items()}
        np.savez(calibration, **chosen)
    flags = ("--input-shape", spec.input_shape) if spec.input_shape else ()
    return Source(name, path, flags, calibration)


def convert(src: Source, precision: str, work: Path, timeout: float) -> tuple[Path, dict] | None:
    """The model's file at `precision` and its conversion report, converted into `work` unless
    there already; None (and a line on stderr) when qconvert fails."""
    dest = work / f"{src.name}.{precision}.tflite"
    report_path = dest.with_suffix(".json")
    if dest.exists() and report_path.exists():
        return dest, json.loads(report_path.read_text())
    flags = src.flags + PRECISION_FLAGS[precision] + ("--no-verify",)
    if "--quantize" in flags:
        flags += ("--calibration", str(src.calibration))
    result = runners.run_qconvert(src.onnx, dest, timeout, work, flags)
    if "error" in result:
        print(f"target_profile: {src.name} {precision}: {result['error']}", file=sys.stderr)
        return None
    report_path.write_text(json.dumps(result["report"]))
    return dest, result["report"]


# --- a written file, read back -------------------------------------------------------------------
@dataclass
class FileModel:
    """A .tflite file: its bytes, the flatbuffer's main subgraph, and its ops in qconvert's IR
    (`ir`, `ops`: the file's ops in order, tensors named t<index>) for targets.work and
    precision_of."""

    path: Path
    data: bytes
    root: object
    graph: object
    ir: Model
    ops: list[Operator]
    delegated: set[int] | None = None  # the ops XNNPACK takes (delegated_ops)


def read_file(path: Path) -> FileModel:
    data = path.read_bytes()
    root = S.Model.GetRootAs(data, 0)
    graph = root.Subgraphs(0)
    ir = Model()
    for i in range(graph.TensorsLength()):
        _add_array(ir, root, graph.Tensors(i), i)
    ir.inputs = [f"t{i}" for i in graph.InputsAsNumpy()]
    ir.outputs = [f"t{i}" for i in graph.OutputsAsNumpy()]
    codes = [op_name(builtin_code(root.OperatorCodes(i))) for i in range(root.OperatorCodesLength())]
    ops = []
    for k in range(graph.OperatorsLength()):
        fb_op = graph.Operators(k)
        names = [[f"t{i}" if i >= 0 else "" for i in _vector(fb_op, side)]
                 for side in ("Inputs", "Outputs")]
        op = Operator(codes[fb_op.OpcodeIndex()], names[0], names[1], _options(fb_op))
        op.quantized = _quantized(op, ir)
        ops.append(ir.add_operator(op))
    return FileModel(path, data, root, graph, ir, ops)


def _vector(table, field_name: str) -> list[int]:
    if getattr(table, f"{field_name}IsNone")():
        return []
    return getattr(table, f"{field_name}AsNumpy")().tolist()


def _add_array(ir: Model, root, tensor, index: int) -> None:
    dtype = np.dtype(NUMPY.get(tensor.Type(), np.uint8))
    buffer = root.Buffers(tensor.Buffer())
    constant = buffer is not None and (buffer.DataLength() > 0 or buffer.Offset() > 1)
    name = ir.add_named_array(f"t{index}", _vector(tensor, "Shape"), dtype,
                              np.empty(0, dtype) if constant else None)
    array = ir.arrays[name]
    array.is_variable = bool(tensor.IsVariable())
    q = tensor.Quantization()
    if q is not None and not q.ScaleIsNone() and q.ScaleLength():
        array.quant = QuantParams(q.ScaleAsNumpy().copy(), q.ZeroPointAsNumpy().copy(),
                                  q.QuantizedDimension() if q.ScaleLength() > 1 else None)


def _options(fb_op) -> dict:
    """The options targets.work reads (BATCH_MATMUL's adj_x)."""
    if fb_op.BuiltinOptionsType() != S.BuiltinOptions.BatchMatMulOptions:
        return {}
    table = S.BatchMatMulOptions()
    table.Init(fb_op.BuiltinOptions().Bytes, fb_op.BuiltinOptions().Pos)
    return {"adj_x": bool(table.AdjX()), "adj_y": bool(table.AdjY())}


def _quantized(op: Operator, ir: Model) -> str:
    """The IR's Operator.quantized of a file's op: the type of its quantized activations ("int16"
    before "int8": a 16x8 op's int8 is its weights), "" for QUANTIZE and DEQUANTIZE (the IR
    leaves those unmarked) and for float or integer-only ops."""
    if op.type in targets.CONVERSIONS:
        return ""
    arrays = [ir.arrays[n] for n in op.inputs + op.outputs if n]
    kinds = {a.dtype.name for a in arrays if a.quant is not None and not a.is_constant}
    return "int16" if "int16" in kinds else "int8" if kinds & {"int8", "uint8"} else ""


def delegated_ops(path: Path, count: int) -> set[int] | None:
    """The indices of the ops XNNPACK runs once LiteRT has loaded the file (in a child process);
    None, and a line on stderr, when LiteRT cannot load it."""
    from qconvert.check.inspect_tflite import DelegationUnknown, litert_partitions

    try:
        return {i for part in litert_partitions(str(path), count) for i in part}
    except DelegationUnknown as e:
        print(f"target_profile: {path.name}: skipped: {e}", file=sys.stderr)
        return None


def intermediates(path: Path, report: dict, calibration: Path) -> dict[int, np.ndarray]:
    """Every tensor's value (by index) when the file runs on the first calibration sample (the
    interpreter's own kernels, every tensor kept)."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    interpreter = Interpreter(
        model_path=str(path), num_threads=1, experimental_preserve_all_tensors=True,
        experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    interpreter.allocate_tensors()
    with np.load(calibration) as samples:
        feeds = runners._tflite_feeds(report, {k: samples[k][:1] for k in samples.files})[0]
    by_name = {d["name"]: d for d in interpreter.get_input_details()}
    for name, value in feeds.items():
        interpreter.set_tensor(by_name[name]["index"], value)
    interpreter.invoke()
    values = {}
    for detail in interpreter.get_tensor_details():
        try:
            values[detail["index"]] = interpreter.get_tensor(detail["index"])
        except ValueError:  # a tensor without data (an omitted optional one)
            pass
    return values


# --- the profile ---------------------------------------------------------------------------------
@dataclass
class Instance:
    """One op of a written file, as the cost model sees it."""

    model: str
    file: FileModel
    index: int
    type: str
    precision: str  # targets.precision_of
    work: float
    signature: str
    delegated: bool  # in the whole model


def _signature(fm: FileModel, index: int, op: Operator) -> str:
    """What makes two ops the same to a kernel: type, options, and each tensor's shape, type and
    constness."""
    options = S.OperatorT.InitFromObj(fm.graph.Operators(index)).builtinOptions
    tensors = [(fm.ir.arrays[n].shape, fm.ir.arrays[n].dtype.name, fm.ir.arrays[n].is_constant)
               if n else None for n in op.inputs + op.outputs]
    return repr((op.type, tensors, sorted(vars(options).items()) if options is not None else None))


def instances(name: str, fm: FileModel) -> list[Instance]:
    """The file's ops but control flow (IF, WHILE: not one kernel), with their work and precision."""
    found = []
    for k, op in enumerate(fm.ops):
        if fm.graph.Operators(k).BuiltinOptionsType() in (S.BuiltinOptions.IfOptions,
                                                          S.BuiltinOptions.WhileOptions):
            continue
        found.append(Instance(name, fm, k, op.type, measured_precision(op, fm.ir),
                              targets.work(op, fm.ir), _signature(fm, k, op), k in fm.delegated))
    return found


def measured_precision(op: Operator, ir: Model) -> str:
    """targets.precision_of, but a QUANTIZE or DEQUANTIZE with an int16 side is "int16" (the cost
    model prices it as int8: the report proposes the change; XNNPACK takes the int8 ones only)."""
    precision = targets.precision_of(op, ir)
    if op.type in targets.CONVERSIONS and any(
            ir.arrays[n].dtype == np.int16 for n in op.inputs + op.outputs if n):
        return "int16"
    return precision


def choose(found: list[Instance], per_op: int) -> list[Instance]:
    """Up to `per_op` distinct ops of each (op, precision) of MIN_WORK or more, evenly spaced in
    the ranking by work."""
    groups: dict[tuple, dict[str, Instance]] = {}
    for x in found:
        if x.work >= MIN_WORK:
            groups.setdefault((x.type, x.precision), {}).setdefault(x.signature, x)
    chosen = []
    for distinct in groups.values():
        ranked = sorted(distinct.values(), key=lambda x: x.work)
        picks = np.unique(np.linspace(0, len(ranked) - 1, min(per_op, len(ranked))).round().astype(int))
        chosen += [ranked[i] for i in picks]
    return chosen


def time_instances(chosen: list[Instance], sources: dict, args) -> list[dict]:
    """Each chosen op timed alone (timed_ops), its inputs the values of its whole model's run;
    each file's ops in a child process (single_op.in_child), each op in one of its own when that
    child dies, an op whose child dies recorded with the error."""
    by_file: dict[int, list[int]] = {}
    for k, x in enumerate(chosen):
        by_file.setdefault(id(x.file), []).append(k)
    results: list = [None] * len(chosen)
    for ks in by_file.values():
        fm, src = chosen[ks[0]].file, sources[chosen[ks[0]].model]
        try:
            timed = in_child(_time_file, fm, src, [chosen[k].index for k in ks], args)
        except Crashed:
            timed = []
            for k in ks:
                try:
                    timed += in_child(_time_file, fm, src, [chosen[k].index], args)
                except Crashed as e:
                    timed.append({"error": f"LiteRT {e}"})
        for k, r in zip(ks, timed):
            results[k] = r
    rows = []
    for x, r in zip(chosen, results):
        row = {"model": x.model, "file": x.file.path.name, "op": x.index, "type": x.type,
               "precision": x.precision, "work": x.work, "delegated": x.delegated, **r}
        if "seconds" in r:
            row["ns_per_unit"] = r["seconds"] * 1e9 / x.work if x.work else None
        rows.append(row)
    return rows


def _time_file(fm: FileModel, src: Source, indices: list[int], args) -> list[dict]:
    """In the child: the file's ops `indices` extracted and timed."""
    report = json.loads(fm.path.with_suffix(".json").read_text())
    values = intermediates(fm.path, report, src.calibration)
    models = [single_op(fm, k, values) for k in indices]
    del values
    return timed_ops(models, args.rounds, args.sample_ms / 1e3)


def xnnpack_probe() -> dict[str, str]:
    """bench/op_probe.py --xnnpack's answers: {"OP precision": "XNNPACK" | "interpreter" | why
    not written} for every op qconvert writes, from one-node models."""
    import tempfile

    import op_probe

    with tempfile.TemporaryDirectory(prefix="op-probe-") as tmp:
        found = op_probe.probe(sorted(op_probe.CASES), Path(tmp), tuple(op_probe.FLAGS),
                               op_probe.xnnpack_check)
    return {f"{op} {p}": r for (op, p), r in sorted(found.items())}


def delegation_counts(found: list[Instance]) -> dict[str, dict]:
    """{"OP precision": {"ops", "delegated_ops"}} over every op of the profiled files."""
    counts: dict[str, dict] = {}
    for x in found:
        c = counts.setdefault(f"{x.type} {x.precision}", {"ops": 0, "delegated_ops": 0})
        c["ops"] += 1
        c["delegated_ops"] += x.delegated
    return dict(sorted(counts.items()))


def aggregate(found: list[Instance], rows: list[dict]) -> dict[tuple, dict]:
    """{(op, precision): {"ns": median ns per unit, "delegated": most of its ops in the whole
    models are, "ops", "delegated_ops", "timed", "weighted_ns": total time / total work}}."""
    counts: dict[tuple, list[bool]] = {}
    for x in found:
        counts.setdefault((x.type, x.precision), []).append(x.delegated)
    kernels = {}
    for key, flags in counts.items():
        timed = [r for r in rows if (r["type"], r["precision"]) == key and r.get("ns_per_unit") is not None]
        if not timed:
            continue
        kernels[key] = {"ns": statistics.median(r["ns_per_unit"] for r in timed),
                        "delegated": sum(flags) * 2 > len(flags), "ops": len(flags),
                        "delegated_ops": sum(flags), "timed": len(timed),
                        "weighted_ns": sum(r["seconds"] for r in timed) * 1e9
                        / sum(r["work"] for r in timed)}
    return kernels


def partition_seconds(rounds: int, sample_s: float) -> dict:
    """One switch between XNNPACK and the interpreter (the module docstring), per chain size."""
    found = {}
    for size in PARTITION_SIZES:
        made = [chain(size, False), chain(size, True), one_op("CUMSUM", size, np.float32),
                one_op("ADD", size, np.float32)] + [make() for make in REFERENCES.values()]
        loaded = [load(*m) for m in made]
        parts = [len(x.interpreter._get_ops_details()) - CHAIN for x in loaded[:2]]
        whole, split, cumsum, add, ref_d, ref_u = median_seconds(loaded, rounds, sample_s)
        found[size] = {"seconds": (split - whole - (cumsum - ref_u) + (add - ref_d)) / 2,
                       "chain": whole, "split chain": split, "partitions": parts}
    return found


# --- the target file -----------------------------------------------------------------------------
def _ns(value: float) -> float:
    return float(f"{value:.4g}")


def target_data(base: dict, kernels: dict, partition_ns: float, source_text: str,
                name: str | None) -> dict:
    """The base target's JSON with the measured kernels, defaults and partition_ns in it."""
    data = json.loads(json.dumps(base))
    data["name"] = name or data.get("name")
    data["source"] = source_text
    data["partition_ns"] = _ns(partition_ns)
    ops = data.setdefault("ops", {})
    for (op, precision), k in sorted(kernels.items()):
        ops.setdefault(op, {})[precision] = {"delegated": k["delegated"], "ns": _ns(k["ns"])}
    for precision in targets.PRECISIONS:
        elementwise = [k for (op, p), k in kernels.items() if p == precision and op in ELEMENTWISE]
        if elementwise and data["default"].get(precision) is not None:
            data["default"][precision] = {
                "delegated": sum(k["delegated"] for k in elementwise) * 2 > len(elementwise),
                "ns": _ns(statistics.median(k["ns"] for k in elementwise))}
    return data


# The ops whose work is the elements of their largest tensor and that compute on each (the
# defaults' medians): not data movement, not reductions, not the ops with weights.
ELEMENTWISE = {"ADD", "SUB", "MUL", "DIV", "MAXIMUM", "MINIMUM", "RELU", "RELU6", "RELU_N1_TO_1",
               "LEAKY_RELU", "PRELU", "LOGISTIC", "TANH", "HARD_SWISH", "GELU", "ELU", "EXP", "LOG",
               "SQRT", "RSQRT", "SQUARE", "SQUARED_DIFFERENCE", "ABS", "NEG", "POW", "FLOOR", "CEIL",
               "ROUND", "SIN", "COS", "QUANTIZE", "DEQUANTIZE", "SELECT", "SELECT_V2", "LESS",
               "GREATER", "EQUAL", "NOT_EQUAL", "LESS_EQUAL", "GREATER_EQUAL", "CAST"}


def source_line(models: list[str], loads: list[tuple], per_op: int, command: str) -> str:
    from importlib.metadata import version

    from qconvert.check.latency import cpu_description

    load = "; ".join(f"{when} {', '.join(f'{x:.1f}' for x in la)}" for when, la in loads)
    masked = (" under /work/vm/run-avx2 (CPUID masked)"
              if "cpuidmask" in os.environ.get("LD_PRELOAD", "") else "")
    return (f"measured by bench/target_profile.py on {cpu_description()} ({os.cpu_count()} CPUs{masked}), "
            f"{datetime.date.today().isoformat()}: LiteRT {version('ai-edge-litert')}, 1 thread, default "
            f"resolver (XNNPACK); ns: per op and precision the median ns per unit of work of up to "
            f"{per_op} of its ops ({MIN_WORK} units or more) in the models' float, int8, int16 and hybrid "
            f"files, each timed alone in alternating rounds against a reference op; delegated: most of "
            f"its ops in those files are in an XNNPACK partition (else bench/op_probe.py's one-op "
            f"models); partition_ns: a chain of delegated ADDs split by an interpreter op; models "
            f"{', '.join(models)}; load average (1, 5, 15 min) {load}; kernels not timed keep the base "
            f"file's ns; `{command}`")


def _base(spec: str) -> dict:
    return json.loads(Path(targets.load_target(spec).path).read_text())


def write_target(path: Path, data: dict) -> None:
    path.write_text(targets.target_text(data))


def files(srcs: list[Source], precisions, args) -> list[tuple[str, FileModel]]:
    """Each model's file at each precision, read, its delegation found."""
    found = []
    for src in srcs:
        for precision in precisions:
            converted = convert(src, precision, args.work, args.timeout)
            if converted is None:
                continue
            fm = read_file(converted[0])
            fm.delegated = delegated_ops(fm.path, len(fm.ops))
            if fm.delegated is not None:
                found.append((src.name, fm))
    return found


def profile(args) -> dict:
    """Measures the target (the module docstring) and writes args.out (and its .ops.json)."""
    loads = [("at the start", os.getloadavg())]
    srcs = {name: source(name, args.work) for name in args.models}
    written = files(list(srcs.values()), args.precisions, args)
    found = [x for name, fm in written for x in instances(name, fm)]
    chosen = choose(found, args.per_op)
    print(f"target_profile: timing {len(chosen)} ops of {len(found)}", file=sys.stderr, flush=True)
    rows = time_instances(chosen, srcs, args)
    partitions = partition_seconds(args.rounds, args.sample_ms / 1e3)
    loads.append(("at the end", os.getloadavg()))
    kernels = aggregate(found, rows)
    counts = delegation_counts(found)
    partition_ns = statistics.median(p["seconds"] for p in partitions.values()) * 1e9
    data = target_data(_base(args.base), kernels, max(partition_ns, 0.0),
                       source_line(list(srcs), loads, args.per_op, " ".join(sys.argv)), args.name)
    probe = xnnpack_probe() if args.probe else {}
    apply_delegation(data, delegation_facts(counts, probe), {}, 1.0,
                     keep={f"{op} {p}" for op, p in kernels})
    write_target(args.out, data)
    from qconvert.check.latency import cpu_description

    details = {"cpu": cpu_description(), "date": datetime.date.today().isoformat(),
               "kernels": {f"{op} {p}": k for (op, p), k in sorted(kernels.items())},
               "delegation_counts": counts, "xnnpack_probe": probe,
               "partitions": partitions, "ops": rows, "source": data["source"],
               "delegation": {fm.path.name: sorted(fm.delegated) for _, fm in written}}
    details_path = args.details or args.out.with_suffix(".ops.json")
    details_path.write_text(json.dumps(details, indent=1, default=str))
    return {"kernels": kernels, "partitions": partitions, "rows": rows}


def delegation_target(args) -> dict:
    """--base with the delegated fields of the profile --delegation-from (and --xnnpack-probe)."""
    profiled = json.loads(args.delegation_from.read_text())
    facts = delegation_facts(profiled["delegation_counts"], profiled.get("xnnpack_probe"))
    data = apply_delegation(_base(args.base), facts, profiled["kernels"], args.interpreter_factor)
    data["source"] = (f"{data.get('source', '')}; delegated fields measured: XNNPACK's partitions of the "
                      f"models of bench/target_profile.py and of bench/op_probe.py's one-op models "
                      f"(LiteRT on {profiled['cpu']}, {profiled['date']}; the same partitions with "
                      f"AVX-512 and VNNI), a kernel XNNPACK leaves to the interpreter priced at "
                      f"{args.interpreter_factor:g}x its time measured there where that is more than "
                      f"the estimate")
    return data


def kernel_table(kernels: dict) -> str:
    """Per op: float, int8, int16, hybrid ns per unit, "i" where the interpreter runs it."""
    lines = ["| op | float | int8 | int16 | hybrid | ops (delegated) |", "|---|---:|---:|---:|---:|---|"]
    for op in sorted({op for op, _ in kernels}):
        cells, counts = [], []
        for p in ("float", "int8", "int16", "hybrid"):
            k = kernels.get((op, p))
            cells.append("-" if k is None else f"{k['ns']:.3g}" + ("" if k["delegated"] else " i"))
            if k:
                counts.append(f"{p} {k['ops']} ({k['delegated_ops']})")
        lines.append(f"| {op} | " + " | ".join(cells) + f" | {', '.join(counts)} |")
    return "\n".join(lines)


def delegation_facts(counts: dict, probe: dict | None) -> dict[str, bool]:
    """{"OP precision": XNNPACK takes it}: most of its ops in the profiled models (`counts`, a
    profile's "delegation_counts"), else bench/op_probe.py --xnnpack's answer (`probe`)."""
    facts = {key: r in ("XNNPACK",) for key, r in (probe or {}).items() if r in ("XNNPACK", "interpreter")}
    facts.update({key: c["delegated_ops"] * 2 > c["ops"] for key, c in counts.items()})
    return facts


def apply_delegation(data: dict, facts: dict[str, bool], measured: dict, factor: float,
                     keep: set[str] = frozenset()) -> dict:
    """Each kernel of `facts` (but `keep`'s) with its delegated field; its ns kept, but a kernel
    the file has delegated that XNNPACK leaves to the interpreter priced at `factor` times its
    `measured` ns ({"OP precision": kernel}) when that is more. A kernel the file has none of
    (null, or by a null default) stays so."""
    ops = data.setdefault("ops", {})
    for key, delegated in sorted(facts.items()):
        op, precision = key.split(" ")
        entry = ops.get(op, {})
        current = entry[precision] if precision in entry else data["default"].get(precision)
        if key in keep or current is None:
            continue
        ns = current["ns"]
        if current["delegated"] and not delegated and key in measured:
            ns = max(ns, _ns(measured[key]["ns"] * factor))
        if {"delegated": delegated, "ns": ns} != current:
            ops.setdefault(op, {})[precision] = {"delegated": delegated, "ns": ns}
    return data


# --- the command line ----------------------------------------------------------------------------
def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="the target file to write (profile mode)")
    parser.add_argument("--details", type=Path, metavar="FILE.json",
                        help="every timed op (default: --out's name with .ops.json; not in "
                             "qconvert/targets/, where every .json is a target)")
    parser.add_argument("--base", default="x86", help="the target the measured kernels replace")
    parser.add_argument("--name", help="the written target's name (default: the base's)")
    parser.add_argument("--models", type=_names, default=list(DEFAULT_MODELS),
                        help=f"comma-separated corpus or trained models "
                             f"(default: {','.join(DEFAULT_MODELS)})")
    parser.add_argument("--precisions", type=_names, default=list(PRECISION_FLAGS))
    parser.add_argument("--work", type=Path,
                        default=Path.home() / ".cache" / "qconvert-bench" / "target-profile",
                        help="the converted files and calibration data (reused when there)")
    parser.add_argument("--per-op", type=int, default=6, help="ops timed per (op, precision)")
    parser.add_argument("--rounds", type=int, default=41, help="alternating rounds per single-op timing")
    parser.add_argument("--sample-ms", type=float, default=0.2, help="invokes fill this per sample")
    parser.add_argument("--model-rounds", type=int, default=21, help="rounds of whole-model timings")
    parser.add_argument("--model-sample-ms", type=float, default=1.0,
                        help="whole models: invokes fill this per sample")
    parser.add_argument("--timeout", type=float, default=1800, help="per conversion, seconds")
    parser.add_argument("--agreement", metavar="TARGET", help="the model-level agreement table on TARGET")
    parser.add_argument("--breakdown", action="store_true", help="where each int8 model spends its time")
    parser.add_argument("--partition-ns", type=float, help="--breakdown's switch cost (default: measured)")
    parser.add_argument("--json", type=Path, help="also write the rows of --agreement / --breakdown here")
    parser.add_argument("--delegation-from", type=Path, metavar="PROFILE.ops.json",
                        help="write --out as --base with the delegated fields this profile measured")
    parser.add_argument("--no-probe", dest="probe", action="store_false",
                        help="no bench/op_probe.py --xnnpack for the delegation of the ops the "
                             "models do not hold")
    parser.add_argument("--interpreter-factor", type=float, default=2.0,
                        help="--delegation-from: a kernel found undelegated costs the profile's "
                             "measured one times this")
    args = parser.parse_args(argv)
    if args.delegation_from and not args.out:
        parser.error("--delegation-from needs --out")
    if not (args.out or args.agreement or args.breakdown):
        parser.error("give --out FILE.json, --agreement TARGET or --breakdown")
    if set(args.precisions) - set(PRECISION_FLAGS):
        parser.error(f"--precisions takes a subset of {','.join(PRECISION_FLAGS)}")
    args.work.mkdir(parents=True, exist_ok=True)
    return args


def _names(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _each(args, make_row):
    rows = []
    for name in args.models:
        print(f"target_profile: {name} ...", file=sys.stderr, flush=True)
        try:
            row = make_row(source(name, args.work))
        except (OSError, RuntimeError, ValueError, Crashed) as e:
            print(f"target_profile: {name}: {type(e).__name__}: {e}", file=sys.stderr)
            row = None
        if row is not None:
            rows.append(row)
    return rows


def main(argv=None) -> int:
    args = parse_args(argv)
    import model_timing
    from qconvert.check.latency import cpu_description

    print(f"CPU: {cpu_description()}; load average at the start {os.getloadavg()}")
    if args.delegation_from:
        write_target(args.out, delegation_target(args))
    elif args.out:
        measured = profile(args)
        print(kernel_table(measured["kernels"]))
        print(f"\npartition switches: " + "; ".join(f"[1, {size}]: {p['seconds'] * 1e9:.0f} ns"
                                                    for size, p in measured["partitions"].items()))
    if args.agreement:
        target = targets.load_target(args.agreement)
        rows = _each(args, lambda src: model_timing.agreement_row(src, target, args))
        print(model_timing.agreement_table(rows))
    if args.breakdown:
        partition_ns = args.partition_ns
        if partition_ns is None:
            found = partition_seconds(args.rounds, args.sample_ms / 1e3)
            partition_ns = statistics.median(p["seconds"] for p in found.values()) * 1e9
        rows = _each(args, lambda src: model_timing.breakdown_row(src, args, partition_ns))
        print(model_timing.breakdown_table(rows))
    if args.json and (args.agreement or args.breakdown):
        args.json.write_text(json.dumps(rows, indent=1, default=str))
    print(f"load average at the end {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
