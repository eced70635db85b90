"""Benchmark: convert the onnx package's light architectures (random weights) and measure.

One markdown row per model: conversion wall time and peak RSS (of a fresh `qconvert IN OUT --json`
process), weight and output sizes, operator and TRANSPOSE counts read back from the .tflite,
median latency in ai-edge-litert's interpreter (1 thread) and in onnxruntime (1 thread), and the
largest absolute difference of their outputs on the same random input. A model that fails to
convert, or whose .tflite crashes the interpreter, gets a row with the one-line error.

    .venv/bin/python bench/bench.py [--models resnet50,squeezenet] [--out DIR]

The interpreter runs in a child process (this script with --tflite-worker): a bad model can abort
the native interpreter, which must not take the whole benchmark down.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

import numpy as np
import onnx

from qconvert.quantize.calibration_data import model_input_specs

if __package__:
    from . import models
else:  # run as a script: bench/ is on sys.path
    import models

COLUMNS = ["model", "convert (s)", "peak RSS (MB)", "weights (MB)", ".tflite (MB)", "ops",
           "TRANSPOSE", "TFLite (ms)", "ORT (ms)", "max abs diff", "status"]
MB = 1024 * 1024


def qconvert_command() -> list[str]:
    """The installed console script beside this interpreter, else `python -m qconvert`."""
    script = Path(sys.executable).parent / "qconvert"
    if script.exists():
        return [str(script)]
    found = shutil.which("qconvert")
    return [found] if found else [sys.executable, "-m", "qconvert"]


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


def one_line(text: str, limit: int = 160) -> str:
    """The last non-empty line of a process's stderr, shortened and safe inside a table cell."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    line = lines[-1] if lines else "no message"
    line = line.replace("|", "\\|")
    return line if len(line) <= limit else line[:limit - 3] + "..."


# Runs argv[2:] as a child, waits, writes {"seconds", "maxrss_kb", "status"} to argv[1] and exits
# with the child's code. Why a launcher: Linux carries the RSS high-water mark of the forking
# process into the child (exec records the old address space's peak), so a qconvert forked from
# this script, which holds whole models, would report this script's peak. The launcher is small.
_LAUNCHER = """
import json, os, sys, time
start = time.perf_counter()
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
seconds = time.perf_counter() - start
with open(sys.argv[1], "w") as f:
    json.dump({"seconds": seconds, "maxrss_kb": usage.ru_maxrss, "status": status}, f)
code = os.waitstatus_to_exitcode(status)
sys.exit(code if code >= 0 else 128 - code)
"""


def run_qconvert(source: Path, dest: Path, timeout: float, work: Path) -> dict:
    """Runs `qconvert source dest --json` in a fresh process: wall time, peak RSS, report/error.

    Peak RSS is the ru_maxrss of exactly that process (os.wait4 in a small launcher, see
    _LAUNCHER); wall time is from its fork to its exit.
    """
    usage_path = work / f"{dest.stem}.usage.json"
    command = qconvert_command() + [str(source), str(dest), "--json"]
    if not os.path.isabs(command[0]):
        command[0] = shutil.which(command[0]) or command[0]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([sys.executable, "-c", _LAUNCHER, str(usage_path)] + command,
                                stdout=out, stderr=err, start_new_session=True)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the launcher and qconvert
            proc.wait()
            return {"error": f"conversion timed out after {timeout:g} s"}
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    if not usage_path.exists():
        return {"error": f"launcher failed: {one_line(stderr)}"}
    usage = json.loads(usage_path.read_text())
    result = {"seconds": usage["seconds"], "rss_mb": usage["maxrss_kb"] / 1024}  # Linux: KiB
    code = os.waitstatus_to_exitcode(usage["status"])
    if code == 0:
        result["report"] = json.loads(stdout)
    elif code < 0:
        result["error"] = f"qconvert killed by {signal.Signals(-code).name}: {one_line(stderr)}"
    else:
        result["error"] = f"exit {code}: {one_line(stderr)}"
    return result


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
    """Standard normal data for every graph input that is not an initializer (float32 models)."""
    rng = np.random.default_rng(seed)
    return {name: rng.standard_normal([d or 1 for d in dims]).astype(dtype)  # symbolic dims: 1
            for name, (dims, dtype) in model_input_specs(proto).items()}


def median_ms(run, warmup: int, runs: int) -> tuple[float, object]:
    """Median wall time of `run()` in ms over `runs` calls after `warmup` calls; last result."""
    result = None
    for _ in range(warmup):
        result = run()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000, result


def run_onnxruntime(path: Path, feeds: dict, warmup: int, runs: int) -> tuple[float, dict]:
    """(median latency in ms, outputs by name) with one intra-op and one inter-op thread."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    ms, outputs = median_ms(lambda: session.run(names, feeds), warmup, runs)
    return ms, dict(zip(names, outputs))


def tflite_worker(tflite: str, report_path: str, feeds_path: str, result_path: str,
                  warmup: int, runs: int) -> None:
    """Child process: runs the .tflite through its signature on ONNX-layout feeds (transposed to
    the file's layout as the report says), saves ONNX-layout outputs, prints the median ms.
    The timed call includes copying the inputs in and the outputs out, as onnxruntime's does."""
    from ai_edge_litert.interpreter import Interpreter

    report = json.loads(Path(report_path).read_text())
    feeds = dict(np.load(feeds_path))
    interpreter = Interpreter(model_path=tflite, num_threads=1)
    runner = interpreter.get_signature_runner()
    args = {}
    for info in report["inputs"]:
        value = feeds[info["name"]]
        if info["layout_permutation"]:
            value = np.transpose(value, info["layout_permutation"])
        args[info["name"]] = np.ascontiguousarray(value.astype(info["dtype"]))
    ms, results = median_ms(lambda: runner(**args), warmup, runs)
    outputs = {}
    for info in report["outputs"]:
        value = results[info["name"]]
        if info["layout_permutation"]:
            value = np.transpose(value, np.argsort(info["layout_permutation"]))
        outputs[info["name"]] = value
    np.savez(result_path, **outputs)
    print(json.dumps({"ms": ms}))


def run_tflite(tflite: Path, report: dict, feeds: dict, work: Path, args) -> tuple[float, dict]:
    """Runs tflite_worker in a child: (median ms, outputs); a one-line RuntimeError on failure."""
    report_path, feeds_path, result_path = (work / f"{tflite.stem}.{suffix}"
                                            for suffix in ("report.json", "feeds.npz", "out.npz"))
    report_path.write_text(json.dumps(report))
    np.savez(feeds_path, **feeds)
    command = [sys.executable, str(Path(__file__).resolve()), "--tflite-worker", str(tflite),
               str(report_path), str(feeds_path), str(result_path),
               "--warmup", str(args.warmup), "--runs", str(args.runs)]
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"interpreter timed out after {args.timeout:g} s") from None
    if proc.returncode < 0:
        name = signal.Signals(-proc.returncode).name
        raise RuntimeError(f"interpreter crashed ({name}): {one_line(proc.stderr)}")
    if proc.returncode != 0:
        raise RuntimeError(f"interpreter failed: {one_line(proc.stderr)}")
    with np.load(result_path) as data:
        outputs = {name: data[name] for name in data.files}
    return json.loads(proc.stdout.strip().splitlines()[-1])["ms"], outputs


def max_abs_diff(expected: dict, actual: dict) -> float:
    """Largest |actual - expected| over every output; inf when shapes differ or one is missing."""
    worst = 0.0
    for name, want in expected.items():
        got = actual.get(name)
        if got is None or got.shape != want.shape:
            return float("inf")
        worst = max(worst, float(np.max(np.abs(got.astype(np.float64) - want))))
    return worst


def bench_model(name: str, out_dir: Path, args) -> tuple[dict, collections.Counter | None]:
    """One table row (column -> text) and the operator counts of the converted file."""
    row = dict.fromkeys(COLUMNS, "-")
    row["model"] = name
    source = models.model_path(name, args.seed)
    proto = onnx.load(str(source))
    row["weights (MB)"] = f"{models.weight_bytes(proto) / MB:.1f}"
    feeds = random_feeds(proto, args.seed)
    del proto
    ort_ms, expected = run_onnxruntime(source, feeds, args.warmup, args.runs)
    row["ORT (ms)"] = f"{ort_ms:.1f}"

    dest = out_dir / f"{name}.tflite"
    converted = run_qconvert(source, dest, args.timeout, args.work)
    if "seconds" in converted:
        row["convert (s)"] = f"{converted['seconds']:.2f}"
        row["peak RSS (MB)"] = f"{converted['rss_mb']:.0f}"
    if "error" in converted:
        row["status"] = converted["error"]
        return row, None
    counts = count_operators(dest)
    row[".tflite (MB)"] = f"{dest.stat().st_size / MB:.1f}"
    row["ops"] = str(sum(counts.values()))
    row["TRANSPOSE"] = str(counts.get("TRANSPOSE", 0))
    try:
        tfl_ms, actual = run_tflite(dest, converted["report"], feeds, args.work, args)
    except RuntimeError as e:
        row["status"] = str(e)
        return row, counts
    row["TFLite (ms)"] = f"{tfl_ms:.1f}"
    row["max abs diff"] = f"{max_abs_diff(expected, actual):.2e}"
    row["status"] = "ok"
    return row, counts


def markdown_table(rows: list[dict]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |",
             "|" + "|".join("---" if c in ("model", "status") else "---:" for c in COLUMNS) + "|"]
    lines += ["| " + " | ".join(row[c] for c in COLUMNS) + " |" for row in rows]
    return "\n".join(lines)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(models.MODELS),
                        help=f"comma-separated subset of: {','.join(models.MODELS)}")
    parser.add_argument("--out", type=Path, help="directory for the .tflite files (default: temp)")
    parser.add_argument("--seed", type=int, default=models.DEFAULT_SEED,
                        help="seed of the random weights and of the input")
    parser.add_argument("--runs", type=int, default=20, help="timed runs per runtime")
    parser.add_argument("--warmup", type=int, default=3, help="untimed runs before timing")
    parser.add_argument("--timeout", type=float, default=1800, help="per conversion / run, seconds")
    parser.add_argument("--tflite-worker", nargs=4, help=argparse.SUPPRESS,
                        metavar=("TFLITE", "REPORT", "FEEDS", "RESULT"))
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.tflite_worker:
        tflite_worker(*args.tflite_worker, args.warmup, args.runs)
        return 0
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in models.MODELS]
    if unknown:
        print(f"bench: unknown model(s) {', '.join(unknown)}; known: {', '.join(models.MODELS)}",
              file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="qconvert-bench-") as tmp:
        args.work = Path(tmp)  # the interpreter worker's feeds and results
        out_dir = args.out or args.work
        out_dir.mkdir(parents=True, exist_ok=True)
        rows, op_lines = [], []
        for name in names:
            print(f"bench: {name} ...", file=sys.stderr, flush=True)
            try:
                row, counts = bench_model(name, out_dir, args)
            except Exception as e:  # a broken model or runtime: a row, never a crash
                row, counts = dict.fromkeys(COLUMNS, "-"), None
                row.update(model=name, status=one_line(f"{type(e).__name__}: {e}"))
            rows.append(row)
            if counts:
                op_lines.append(f"- {name}: " + ", ".join(f"{k} {v}" for k, v in
                                                         sorted(counts.items())))
    print(machine_line())
    print()
    print(markdown_table(rows))
    if op_lines:
        print("\nOperators per model:")
        print("\n".join(op_lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
