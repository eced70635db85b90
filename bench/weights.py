"""The benchmark's weight-storage rows: `--weight-only` and `--float16` next to the float model.

For each model, up to three rows, scored on the int8 table's held-out samples against the float
ONNX model in onnxruntime (SQNR of the outputs and of the logits, top-1 agreement: see int8.py):

- `qconvert IN OUT --weight-only --json` (int8 weights, hybrid kernels) and
  `qconvert IN OUT --float16 --json` (float16 weights read through DEQUANTIZE), each in a fresh
  process (wall time, peak RSS), run in LiteRT (1 thread, its default XNNPACK delegate) and timed
  in turn with the float .tflite.
- peer: onnxruntime's quantize_dynamic (int8 weights per channel; activations quantized at run
  time to uint8, which is what its DynamicQuantizeLinear + ConvInteger / MatMulInteger operators
  take: its only format, QOperator) after the int8 peer's preparation (opset 13,
  quant_pre_process), in a fresh process, run in onnxruntime (1 thread) and timed in turn with
  the float .onnx. onnxruntime has no float16 converter of its own, so --float16 has no peer.
"""

from __future__ import annotations

import sys
from pathlib import Path

import onnx

if __package__:
    from . import int8, runners
else:  # run as a script: bench/ is on sys.path
    import int8
    import runners

COLUMNS = ["model", "quantizer", "convert (s)", "peak RSS (MB)", "size / float", "weight tensors",
           "SQNR (dB)", "logits SQNR (dB)", "top-1 agree", "runtime", "float (ms)", "model (ms)",
           "model / float", "status"]
PEER = "ORT quantize_dynamic"
MODES = {"--weight-only": "int8", "--float16": "float16"}  # qconvert flag -> report weights mode
HEADER = """
Weight storage: {held_out} held-out samples (standard normal, seed {seed}; the int8 table's).
SQNR and top-1 agreement: against the float ONNX model in onnxruntime; logits SQNR: on the
input of the final softmax. qconvert `--weight-only` (int8 weights, hybrid kernels) and
`--float16` (float16 weights, DEQUANTIZE), run in LiteRT (1 thread, its default XNNPACK
delegate). Peer: onnxruntime's quantize_dynamic (int8 weights per channel, activations quantized
at run time; QOperator) after onnx's version converter (opset 13) and quant_pre_process, run in
onnxruntime (1 thread); no float16 peer. weight tensors: tensors stored as int8 / float16.
float/model (ms): the float model and this one in the same runtime, timed in turn.
size / float: over the float file of the same format.
"""
# Goals of issue 4: the --weight-only and --float16 file over the float file, logits SQNR.
WEIGHT_ONLY_SIZE_GOAL, FLOAT16_SIZE_GOAL, SQNR_GOAL = 0.27, 0.52, 30.0


def ort_dynamic_worker(source: str, dest: str) -> None:
    """Child process: the peer's quantization of `source` (see the module docstring) to `dest`."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    prepared = int8.ort_prepared(source, dest)
    # quant_pre_process folds a Reshape of a weight into an initializer and keeps its value_info;
    # quantize_dynamic then transposes a Gemm's transB weight but not that shape, and its own
    # shape inference fails (onnxruntime issue 25890; inception_v1). The shape is redundant.
    model = onnx.load(str(prepared))
    constants = {t.name for t in model.graph.initializer}
    shapes = [v for v in model.graph.value_info if v.name not in constants]
    del model.graph.value_info[:]
    model.graph.value_info.extend(shapes)
    onnx.save(model, str(prepared))
    del model
    quantize_dynamic(str(prepared), dest, per_channel=True, weight_type=QuantType.QInt8)
    prepared.unlink()


def int8_weight_tensors(path: Path) -> int:
    """Initializers of an onnxruntime-quantized model that hold int8/uint8 weights: those of two
    or more axes (zero points are scalars or per-channel vectors)."""
    graph = onnx.load(str(path), load_external_data=False).graph
    small = (onnx.TensorProto.INT8, onnx.TensorProto.UINT8)
    return sum(t.data_type in small and len(t.dims) >= 2 for t in graph.initializer)


def _score(row: dict, facts: dict, reference: tuple, outputs: dict, logits) -> None:
    facts["sqnr"] = int8.sqnr_db(reference[0], outputs)
    row["SQNR (dB)"] = f"{facts['sqnr']:.1f}"
    facts["logits_sqnr"] = int8.logits_sqnr_db(reference[1], logits)
    if facts["logits_sqnr"] is not None:
        row["logits SQNR (dB)"] = f"{facts['logits_sqnr']:.1f}"
    agreement = int8.top1_agreement(reference[0], outputs)
    if agreement:
        row["top-1 agree"] = f"{agreement[0]}/{agreement[1]}"


def _latency(row: dict, facts: dict, float_ms: float | None, ms: float) -> None:
    row["model (ms)"] = f"{ms:.1f}"
    if float_ms:
        facts["latency"] = ms / float_ms
        row["float (ms)"] = f"{float_ms:.1f}"
        row["model / float"] = f"{facts['latency']:.2f}"


def bench_qconvert(name: str, flag: str, scoring: tuple, floats: dict, out_dir: Path,
                   args) -> tuple[dict, dict]:
    """The row of `qconvert --weight-only` or `--float16` (`flag`) and its notes' numbers."""
    row = dict.fromkeys(COLUMNS, "-")
    row.update(model=name, quantizer=f"qconvert {flag}", runtime="LiteRT")
    facts = {}
    held_out, reference = scoring
    dest = out_dir / f"{name}.{MODES[flag]}-weights.tflite"
    converted = runners.run_qconvert(floats["source"], dest, args.timeout, args.work, (flag,))
    if not runners.record_measured(row, converted, "convert (s)", 2):
        return row, facts
    weights = converted["report"].get("weights") or {}
    if weights.get("mode") != MODES[flag]:  # the flag did nothing: say so, do not score a float file
        row["status"] = f"report weights mode {weights.get('mode')!r}, expected {MODES[flag]!r}"
        return row, facts
    row["weight tensors"] = str(len(weights["tensors"]))
    result = runners.run_next_to_float(dest, converted["report"], floats, held_out, args, reference,
                                       row, facts)
    if result is None:
        return row, facts
    _score(row, facts, reference, result["outputs"], result["logits"])
    _latency(row, facts, result.get("baseline_ms"), result["ms"])
    if result["delegated"]:
        row["runtime"] = "LiteRT, XNNPACK {}/{} ops".format(*result["delegated"])
    row["status"] = "ok"
    return row, facts


def bench_peer(name: str, scoring: tuple, floats: dict, out_dir: Path, args) -> dict:
    """The peer's row (onnxruntime quantize_dynamic, run in onnxruntime)."""
    row = dict.fromkeys(COLUMNS, "-")
    row.update(model=name, quantizer=PEER, runtime="ORT")
    held_out, reference = scoring
    source = floats["source"]
    dest = out_dir / f"{name}.dynamic.onnx"
    command = [sys.executable, str(runners.BENCH_SCRIPT), "--ort-dynamic-worker", str(source),
               str(dest)]
    quantized = runners.run_measured(command, "quantize_dynamic", args.timeout, args.work)
    if not runners.record_measured(row, quantized, "convert (s)", 2):
        return row
    row["weight tensors"] = str(int8_weight_tensors(dest))
    row["size / float"] = f"{dest.stat().st_size / source.stat().st_size:.3f}"
    try:  # timed on sample 0; outputs and logits in one pass (the model is slow: ConvInteger)
        first = {input_name: samples[:1] for input_name, samples in held_out.items()}
        result = runners.run_onnxruntime(dest, first, args.warmup, args.runs, baseline=source)
        probe = runners.onnx_softmax_input(dest) if reference[1] is not None else None
        outputs, logits = runners.onnx_outputs(dest, held_out, probe)
    except Exception as e:  # an invalid quantized model: the peer's failure, a cell
        row["status"] = runners.one_line(f"onnxruntime: {type(e).__name__}: {e}")
        return row
    _score(row, {}, reference, outputs, logits)
    _latency(row, {}, result["baseline_ms"], result["ms"])
    row["status"] = "ok"
    return row


def bench_weights(name: str, floats: dict, scoring: tuple, out_dir: Path,
                  args) -> tuple[list, list]:
    """The rows of `name` (qconvert --weight-only, --float16, the peer unless --no-peer) and its
    line for the notes; `floats` as int8.bench_int8 takes it, `scoring` held_out_scoring's."""
    rows, facts = [], {}
    for flag in MODES:
        row, facts[flag] = bench_qconvert(name, flag, scoring, floats, out_dir, args)
        rows.append(row)
    if not args.no_peer:
        rows.append(bench_peer(name, scoring, floats, out_dir, args))
    return rows, notes(name, facts)


def notes(name: str, facts: dict) -> list[str]:
    """Issue 4's goals (--weight-only: size, logits SQNR; --float16: size) and XNNPACK's share."""
    checks = []
    weight_only, float16 = facts["--weight-only"], facts["--float16"]
    if "size" in weight_only:
        ok = weight_only["size"] <= WEIGHT_ONLY_SIZE_GOAL
        checks.append(f"weight-only size {weight_only['size']:.3f}x {'met' if ok else 'MISSED'}")
    # the logits when the model ends in a softmax (see int8.py), else the outputs themselves
    which, sqnr = "logits ", weight_only.get("logits_sqnr")
    if sqnr is None:
        which, sqnr = "", weight_only.get("sqnr")
    if sqnr is not None:
        ok = sqnr >= SQNR_GOAL
        checks.append(f"weight-only {which}SQNR {sqnr:.1f} dB {'met' if ok else 'MISSED'}")
    if "size" in float16:
        ok = float16["size"] <= FLOAT16_SIZE_GOAL
        checks.append(f"float16 size {float16['size']:.3f}x {'met' if ok else 'MISSED'}")
    line = f"- {name}: goals: " + ("; ".join(checks) if checks else "not measured")
    delegated = [(label, f[key]) for label, f, key in
                 (("float", weight_only, "float_delegated"), ("weight-only", weight_only, "delegated"),
                  ("float16", float16, "delegated")) if f.get(key)]
    if delegated:
        line += "; XNNPACK took " + ", ".join(f"{d[0]}/{d[1]} {label}" for label, d in delegated)
    return [line]
