"""The benchmark's int8 rows: qconvert's full-integer quantization next to onnxruntime's.

For each model, two rows on the same data:

- qconvert: `qconvert IN OUT --quantize --calibration cal.npz --json` in a fresh process (wall
  time and peak RSS of that process, calibration included), the .tflite run in ai-edge-litert's
  interpreter (1 thread, its default XNNPACK delegate, as the float rows).
- peer: onnxruntime's own post-training quantization of the same float model, in a fresh
  process: the opset is raised to 13 with onnx's version converter (ONNX's per-axis
  QuantizeLinear/DequantizeLinear need it; quantize_static only raises opset 9 to 11 and writes
  an invalid per-channel model), then quant_pre_process (its docs recommend it; symbolic shape
  inference skipped: it needs sympy and serves transformer models), then quantize_static (QDQ,
  per-channel, int8 activations and weights, MinMax). The QDQ model runs in onnxruntime
  (1 thread).

Calibration samples are standard normal, as the light models' weights are random (no real data
means anything to them): --int8-samples of them from one seed in an .npz keyed by the ONNX input name,
[N, *input shape], and held-out samples from another. Scores are against the float ONNX model in
onnxruntime on the held-out samples: SQNR = 10 log10(sum ref^2 / sum (out - ref)^2) over every
output value of every sample, and for classifiers top-1 agreement (argmax equal to the float
model's). When the model ends in a softmax, the notes also give the SQNR of the softmax's input
(the logits): a softmax turns a small absolute error on peaked logits into a large one on the
probabilities, so over a few samples the output SQNR is noisy, the logits' much less.
Latencies: each int8 model is timed in turn with its float model in the same runtime (the float
.tflite in LiteRT, the float .onnx in onnxruntime), so their ratio survives a shared machine.
"""

from __future__ import annotations

import collections
import math
import sys
from pathlib import Path

import numpy as np
import onnx

if __package__:
    from . import runners
else:  # run as a script: bench/ is on sys.path
    import runners

COLUMNS = ["model", "quantizer", "convert + calib (s)", "peak RSS (MB)", "size / float",
           "int8 ops", "float ops", "SQNR (dB)", "top-1 agree", "runtime", "float (ms)", "int8 (ms)",
           "int8 / float", "status"]
PEER = "ORT quantize_static"
PEER_OPSET = 13  # per-axis QuantizeLinear/DequantizeLinear
CALIBRATION_STREAM, HELD_OUT_STREAM = 1, 2  # seed streams; the float rows' input uses the bare seed
HEADER = """
Int8: {samples} calibration samples, {held_out} held-out samples (standard normal, seed {seed}).
qconvert: `qconvert IN OUT --quantize --calibration cal.npz`, run in LiteRT (1 thread, its default
XNNPACK delegate). Peer: onnxruntime's quantize_static (QDQ, per-channel, int8, MinMax) after
onnx's version converter (opset 13) and quant_pre_process, run in onnxruntime (1 thread).
SQNR and top-1 agreement: against the float ONNX model in onnxruntime. float/int8 (ms): the same
runtime's float and int8 model, timed in turn. size / float: .tflite over the float .tflite,
QDQ .onnx over the float .onnx.
"""
# Goals of issue 3 for the qconvert row.
SIZE_GOAL, LATENCY_GOAL = 0.27, 0.6


def sample_set(specs: dict, count: int, seed: int, stream: int) -> dict[str, np.ndarray]:
    """{input name: [count, *input shape]} standard normal, from the seed stream (seed, stream);
    `specs` is model_input_specs of the model (symbolic dimensions become 1)."""
    rng = np.random.default_rng((seed, stream))
    return {name: rng.standard_normal([count] + [d or 1 for d in dims]).astype(dtype)
            for name, (dims, dtype) in specs.items()}


def sqnr_db(reference: dict, actual: dict) -> float:
    """SQNR of `actual` against `reference` over all outputs and samples; nan if shapes differ."""
    if any(actual.get(n) is None or actual[n].shape != r.shape for n, r in reference.items()):
        return math.nan
    ref = np.concatenate([r.astype(np.float64).ravel() for r in reference.values()])
    got = np.concatenate([actual[n].astype(np.float64).ravel() for n in reference])
    noise = float(np.sum((got - ref) ** 2))
    return math.inf if noise == 0 else 10 * math.log10(float(np.sum(ref ** 2)) / noise)


def logits_sqnr_db(reference: np.ndarray | None, actual: np.ndarray | None) -> float | None:
    """SQNR of the values a final softmax reads, [K, ...] each, compared per sample flattened
    (the class axis is the only one longer than 1, whatever the layout); None if one is
    missing."""
    if reference is None or actual is None or reference.size != actual.size:
        return None
    count = len(reference)
    return sqnr_db({"logits": reference.reshape(count, -1)}, {"logits": actual.reshape(count, -1)})


def top1_agreement(reference: dict, actual: dict) -> tuple[int, int] | None:
    """(samples whose argmax matches the reference's, samples) on the first output, when it is a
    class vector (one axis longer than 1 per sample); None otherwise."""
    name, ref = next(iter(reference.items()))
    if sum(d > 1 for d in ref.shape[1:]) != 1 or actual.get(name) is None:
        return None
    count = len(ref)
    same = ref.reshape(count, -1).argmax(1) == actual[name].reshape(count, -1).argmax(1)
    return int(same.sum()), count


def qdq_op_counts(path: Path) -> tuple[int, collections.Counter]:
    """(ops fed only by DequantizeLinear and feeding only QuantizeLinear, the other ops by type)
    of a QDQ model: what onnxruntime may run as int8 kernels, and what it certainly runs in
    float. QuantizeLinear/DequantizeLinear themselves are not counted."""
    graph = onnx.load(str(path), load_external_data=False).graph
    constants = {t.name for t in graph.initializer}
    dequantized = {o for n in graph.node if n.op_type == "DequantizeLinear" for o in n.output}
    consumers = collections.defaultdict(list)
    for node in graph.node:
        for name in node.input:
            consumers[name].append(node.op_type)
    int8, other = 0, collections.Counter()
    for node in graph.node:
        if node.op_type in ("QuantizeLinear", "DequantizeLinear"):
            continue
        data = [i for i in node.input if i and i not in constants]
        wrapped = (data and all(i in dequantized for i in data)
                   and all(consumers[o] and set(consumers[o]) == {"QuantizeLinear"}
                           for o in node.output))
        if wrapped:
            int8 += 1
        else:
            other[node.op_type] += 1
    return int8, other


def ort_prepared(source: str, dest: str) -> Path:
    """`source` made ready for onnxruntime's quantizers, as the module docstring says (opset 13,
    quant_pre_process), written beside `dest`; the caller deletes it."""
    from onnx import version_converter
    from onnxruntime.quantization import quant_pre_process

    out = Path(dest)
    model = onnx.load(source)
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    if opset < PEER_OPSET:
        model = version_converter.convert_version(model, PEER_OPSET)
    upgraded = out.with_suffix(".opset.onnx")
    onnx.save(model, str(upgraded))
    del model
    prepared = out.with_suffix(".pre.onnx")
    quant_pre_process(str(upgraded), str(prepared), skip_symbolic_shape=True)
    upgraded.unlink()
    return prepared


def ort_quantize_worker(source: str, calibration: str, dest: str) -> None:
    """Child process: the peer's quantization of `source` on the samples in `calibration` (see
    the module docstring), written to `dest`."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class Reader(CalibrationDataReader):
        """One {input: sample} dict per call, from the calibration .npz."""

        def __init__(self, path: str):
            self.data = dict(np.load(path))
            self.count = len(next(iter(self.data.values())))
            self.next = 0

        def get_next(self):
            if self.next >= self.count:
                return None
            self.next += 1
            return {name: value[self.next - 1] for name, value in self.data.items()}

    prepared = ort_prepared(source, dest)
    quantize_static(str(prepared), dest, Reader(calibration), quant_format=QuantFormat.QDQ,
                    per_channel=True, activation_type=QuantType.QInt8,
                    weight_type=QuantType.QInt8, calibrate_method=CalibrationMethod.MinMax)
    prepared.unlink()


def _score(row: dict, reference: dict, actual: dict) -> None:
    sqnr = sqnr_db(reference, actual)
    row["SQNR (dB)"] = f"{sqnr:.1f}"
    agreement = top1_agreement(reference, actual)
    if agreement:
        row["top-1 agree"] = f"{agreement[0]}/{agreement[1]}"


def _latency(row: dict, float_ms: float | None, int8_ms: float) -> None:
    row["int8 (ms)"] = f"{int8_ms:.1f}"
    if float_ms:
        row["float (ms)"] = f"{float_ms:.1f}"
        row["int8 / float"] = f"{int8_ms / float_ms:.2f}"


def bench_qconvert(name: str, calibration: Path, held_out: dict, reference: tuple, floats: dict,
                   out_dir: Path, args) -> tuple[dict, dict]:
    """The qconvert row and the numbers the goals and notes need."""
    row = dict.fromkeys(COLUMNS, "-")
    row.update(model=name, quantizer="qconvert", runtime="LiteRT")
    facts = {}
    dest = out_dir / f"{name}.int8.tflite"
    converted = runners.run_qconvert(floats["source"], dest, args.timeout, args.work,
                                     ("--quantize", "--calibration", str(calibration)))
    if not runners.record_measured(row, converted, "convert + calib (s)", 1):
        return row, facts
    quantization = converted["report"]["quantization"]
    facts["calibration_seconds"] = quantization["calibration_seconds"]
    facts["float_ops"] = quantization["float_ops"]
    row["int8 ops"] = str(quantization["int8_ops"])
    row["float ops"] = str(len(quantization["float_ops"]))
    result = runners.run_next_to_float(dest, converted["report"], floats, held_out, args, reference,
                                       row, facts)
    if result is None:
        return row, facts
    facts["sqnr"] = sqnr_db(reference[0], result["outputs"])
    facts["logits_sqnr"] = logits_sqnr_db(reference[1], result["logits"])
    _score(row, reference[0], result["outputs"])
    _latency(row, result.get("baseline_ms"), result["ms"])
    if result.get("baseline_ms"):
        facts["latency"] = result["ms"] / result["baseline_ms"]
    if result["delegated"]:
        row["runtime"] = "LiteRT, XNNPACK {}/{} ops".format(*result["delegated"])
    row["status"] = "ok"
    return row, facts


def bench_peer(name: str, calibration: Path, held_out: dict, reference: tuple, floats: dict,
               out_dir: Path, args) -> tuple[dict, dict]:
    """The peer's row (onnxruntime quantize_static, run in onnxruntime) and its notes' numbers."""
    row = dict.fromkeys(COLUMNS, "-")
    row.update(model=name, quantizer=PEER, runtime="ORT")
    facts = {}
    source = floats["source"]
    dest = out_dir / f"{name}.qdq.onnx"
    command = [sys.executable, str(runners.BENCH_SCRIPT), "--ort-quantize-worker", str(source),
               str(calibration), str(dest)]
    quantized = runners.run_measured(command, "quantize_static", args.timeout, args.work)
    if not runners.record_measured(row, quantized, "convert + calib (s)", 1):
        return row, facts
    int8, other = qdq_op_counts(dest)
    facts["float_ops"] = other
    row["int8 ops"], row["float ops"] = str(int8), str(sum(other.values()))
    row["size / float"] = f"{dest.stat().st_size / source.stat().st_size:.3f}"
    try:
        result = runners.run_onnxruntime(dest, held_out, args.warmup, args.runs, baseline=source)
        probe = runners.onnx_softmax_input(dest) if reference[1] is not None else None
        logits = runners.onnx_outputs(dest, held_out, probe)[1] if probe else None
    except Exception as e:  # an invalid QDQ model: the peer's failure, a cell
        row["status"] = runners.one_line(f"onnxruntime: {type(e).__name__}: {e}")
        return row, facts
    facts["sqnr"] = sqnr_db(reference[0], result["outputs"])
    facts["logits_sqnr"] = logits_sqnr_db(reference[1], logits)
    _score(row, reference[0], result["outputs"])
    _latency(row, result["baseline_ms"], result["ms"])
    row["status"] = "ok"
    return row, facts


def held_out_scoring(floats: dict, args) -> tuple[dict, tuple]:
    """(held-out samples, reference): the samples every quantized model is scored on (the int8
    and the weight-storage tables share them) and the float ONNX model's (outputs, logits: what a
    final softmax reads, or None) on them in onnxruntime."""
    held_out = sample_set(floats["specs"], args.held_out, args.seed, HELD_OUT_STREAM)
    reference = runners.onnx_outputs(floats["source"], held_out,
                                     runners.onnx_softmax_input(floats["source"]))
    return held_out, reference


def bench_int8(name: str, floats: dict, scoring: tuple, out_dir: Path,
               args) -> tuple[list, list]:
    """The two rows of `name` (qconvert, peer) and its lines for the notes under the table.

    `floats` is what the float row leaves: "source" (the float ONNX file), "specs" (its
    model_input_specs) and, when the float conversion worked, "tflite" and "report" (the float
    .tflite and its JSON report): the int8 file is sized and timed against them. `scoring` is
    held_out_scoring's.
    """
    calibration = args.work / f"{name}.calibration.npz"
    np.savez(calibration, **sample_set(floats["specs"], args.int8_samples, args.seed,
                                       CALIBRATION_STREAM))
    held_out, reference = scoring
    ours, our_facts = bench_qconvert(name, calibration, held_out, reference, floats, out_dir, args)
    if "calibration_seconds" in our_facts:
        our_facts["ort_seconds"] = runners.ort_seconds(floats["source"], calibration, args.timeout)
    if args.no_peer:
        peer, peer_facts = None, {}
    else:
        peer, peer_facts = bench_peer(name, calibration, held_out, reference, floats, out_dir,
                                      args)
    calibration.unlink()
    return [r for r in (ours, peer) if r], notes(name, our_facts, peer_facts)


def notes(name: str, ours: dict, peer: dict) -> list[str]:
    """Goal checks and what stayed float, for the lines under the int8 table."""
    checks = []
    if "sqnr" in ours and "sqnr" in peer:
        ok = ours["sqnr"] >= peer["sqnr"]
        checks.append(f"SQNR {ours['sqnr']:.1f} vs peer {peer['sqnr']:.1f} dB "
                      f"{'met' if ok else 'MISSED'}")
    if "size" in ours:
        checks.append(f"size {ours['size']:.3f}x {'met' if ours['size'] <= SIZE_GOAL else 'MISSED'}")
    if "latency" in ours:
        ok = ours["latency"] <= LATENCY_GOAL
        checks.append(f"latency {ours['latency']:.2f}x {'met' if ok else 'MISSED'}")
    lines = [f"- {name}: goals: " + ("; ".join(checks) if checks else "not measured")]
    details = []
    if ours.get("logits_sqnr") is not None:
        theirs = peer.get("logits_sqnr")
        details.append(f"softmax-input SQNR {ours['logits_sqnr']:.1f}"
                       + (f" vs peer {theirs:.1f}" if theirs is not None else "") + " dB")
    if "calibration_seconds" in ours:
        calibration, plain = ours["calibration_seconds"], ours["ort_seconds"]
        details.append(f"qconvert calibration {calibration:.1f} s, plain onnxruntime on the same "
                       f"samples {plain:.1f} s ({calibration / plain:.1f}x)")
    if ours.get("float_delegated") and ours.get("delegated"):
        f, i = ours["float_delegated"], ours["delegated"]
        details.append(f"XNNPACK took {f[0]}/{f[1]} float ops, {i[0]}/{i[1]} int8 ops")
    if ours.get("float_ops"):
        reasons = collections.Counter((op["op"], op["reason"].split(":")[0])
                                      for op in ours["float_ops"])
        details.append("qconvert left float: " + ", ".join(
            f"{count} {op} ({reason})" for (op, reason), count in reasons.items()))
    if peer.get("float_ops"):
        details.append("peer not QDQ-wrapped: " + ", ".join(
            f"{count} {op}" for op, count in sorted(peer["float_ops"].items())))
    if details:
        lines.append("  " + "; ".join(details))
    return lines
