"""The benchmark's measuring parts: fresh processes for timed conversions, the runtimes' runners.

Every array of "samples" here has a leading sample axis: {input name: [K, *input shape]}. The
runtimes run the K samples one by one; latency is the median over repeated runs of sample 0, and
the outputs come back stacked the same way ({output name: [K, *output shape]}).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

BENCH_SCRIPT = Path(__file__).resolve().parent / "bench.py"


def qconvert_command() -> list[str]:
    """The installed console script beside this interpreter, else `python -m qconvert`."""
    script = Path(sys.executable).parent / "qconvert"
    if script.exists():
        return [str(script)]
    found = shutil.which("qconvert")
    return [found] if found else [sys.executable, "-m", "qconvert"]


def one_line(text: str, limit: int = 160) -> str:
    """The last non-empty line of a process's stderr, shortened and safe inside a table cell."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    line = lines[-1] if lines else "no message"
    line = line.replace("|", "\\|")
    return line if len(line) <= limit else line[:limit - 3] + "..."


# Runs argv[2:] as a child, waits, writes {"seconds", "maxrss_kb", "status"} to argv[1] and exits
# with the child's code. Why a launcher: Linux carries the RSS high-water mark of the forking
# process into the child (exec records the old address space's peak), so a qconvert forked from
# the benchmark, which holds whole models, would report the benchmark's peak. The launcher is small.
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


def run_measured(command: list[str], what: str, timeout: float, work: Path) -> dict:
    """Runs `command` in a fresh process: {"seconds", "rss_mb", "stdout"} or with "error".

    Peak RSS is the ru_maxrss of exactly that process (os.wait4 in a small launcher, see
    _LAUNCHER); wall time is from its fork to its exit. `what` names the process in errors.
    """
    if not os.path.isabs(command[0]):
        command = [shutil.which(command[0]) or command[0]] + command[1:]
    fd, usage_name = tempfile.mkstemp(prefix="usage-", suffix=".json", dir=work)
    os.close(fd)
    usage_path = Path(usage_name)
    usage_path.unlink()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([sys.executable, "-c", _LAUNCHER, str(usage_path)] + command,
                                stdout=out, stderr=err, start_new_session=True)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the launcher and its child
            proc.wait()
            return {"error": f"{what} timed out after {timeout:g} s"}
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    if not usage_path.exists():
        return {"error": f"launcher failed: {one_line(stderr)}"}
    usage = json.loads(usage_path.read_text())
    usage_path.unlink()
    result = {"seconds": usage["seconds"], "rss_mb": usage["maxrss_kb"] / 1024,  # Linux: KiB
              "stdout": stdout}
    code = os.waitstatus_to_exitcode(usage["status"])
    if code < 0:
        result["error"] = f"{what} killed by {signal.Signals(-code).name}: {one_line(stderr)}"
    elif code != 0:
        result["error"] = f"exit {code}: {one_line(stderr)}"
    return result


def run_qconvert(source: Path, dest: Path, timeout: float, work: Path,
                 options: tuple[str, ...] = ()) -> dict:
    """`qconvert source dest --json [options]` in a fresh process (run_measured), with "report"
    (the parsed JSON report) on success."""
    command = qconvert_command() + [str(source), str(dest), "--json", *options]
    result = run_measured(command, "qconvert", timeout, work)
    if "error" not in result:
        result["report"] = json.loads(result["stdout"])
    return result


def median_ms(calls: dict, warmup: int, runs: int) -> dict[str, float]:
    """Median wall time in ms of each `calls[key]()` over `runs` calls after `warmup` calls.

    The calls take turns (a, b, a, b...): on a shared machine a change of load then hits every
    call alike, and their ratio stays meaningful even when the absolute times drift."""
    for _ in range(warmup):
        for call in calls.values():
            call()
    times = {key: [] for key in calls}
    for _ in range(runs):
        for key, call in calls.items():
            start = time.perf_counter()
            call()
            times[key].append(time.perf_counter() - start)
    return {key: statistics.median(values) * 1000 for key, values in times.items()}


def stack_outputs(per_sample: list[dict]) -> dict[str, np.ndarray | list]:
    """[{name: array}] per sample -> {name: [K, *shape]}; an output whose shape the values decide
    (a detector's kept boxes) stays a list of the K arrays."""
    stacked = {}
    for name in per_sample[0]:
        values = [outputs[name] for outputs in per_sample]
        same = all(np.shape(v) == np.shape(values[0]) for v in values)
        stacked[name] = np.stack(values) if same else values
    return stacked


# The suffix of the per-sample lengths (along axis 0) of a list output in an .npz (pack_outputs).
LENGTHS = "__lengths__"


def pack_outputs(outputs: dict) -> dict[str, np.ndarray]:
    """stack_outputs' outputs as arrays for an .npz: a list as its arrays end to end along axis 0
    and their lengths (name + LENGTHS)."""
    packed = {}
    for name, value in outputs.items():
        if isinstance(value, list):
            packed[name] = np.concatenate([np.asarray(v)[None] if np.ndim(v) == 0 else v for v in value])
            packed[name + LENGTHS] = np.array([max(np.shape(v)[:1], default=1) for v in value], np.int64)
        else:
            packed[name] = value
    return packed


def unpack_outputs(data) -> dict:
    """pack_outputs undone, from a loaded .npz."""
    outputs = {}
    for name in data.files:
        if name.endswith(LENGTHS):
            continue
        value = data[name]
        if name + LENGTHS in data.files:
            value = np.split(value, np.cumsum(data[name + LENGTHS])[:-1])
        outputs[name] = value
    return outputs


def _per_sample(samples: dict) -> list[dict]:
    """{name: [K, ...]} -> K dicts {name: [...]}."""
    count = len(next(iter(samples.values())))
    return [{name: value[k] for name, value in samples.items()} for k in range(count)]


def run_onnxruntime(path: Path, samples: dict, warmup: int, runs: int,
                    baseline: Path | None = None) -> dict:
    """{"ms": median latency of sample 0, "outputs": stacked outputs of every sample}, with one
    intra-op and one inter-op thread; with `baseline` (another model with the same inputs) also
    "baseline_ms", timed in turn with `path` (see median_ms)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3

    def runner(model: Path):
        session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        return lambda feed: dict(zip(names, session.run(names, feed)))

    feeds = _per_sample(samples)
    run = runner(path)
    calls = {"ms": lambda: run(feeds[0])}
    if baseline is not None:
        run_baseline = runner(baseline)
        calls["baseline_ms"] = lambda: run_baseline(feeds[0])
    result = median_ms(calls, warmup, runs)
    result["outputs"] = stack_outputs([run(feed) for feed in feeds])
    return result


# Ops between a classifier's final softmax and the model output that only move or (de)quantize.
_PASS_ONNX = {"Reshape", "Flatten", "Squeeze", "Identity", "QuantizeLinear", "DequantizeLinear"}
_PASS_TFLITE = {"RESHAPE", "SQUEEZE", "QUANTIZE", "DEQUANTIZE"}


def onnx_softmax_input(path: Path) -> str | None:
    """Name of the tensor a final Softmax reads (the logits; in a QDQ model, the dequantized
    ones), when the first graph output is that Softmax's, possibly reshaped; else None."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    producer = {o: node for node in graph.node for o in node.output}
    node = producer.get(graph.output[0].name)
    while node is not None and node.op_type in _PASS_ONNX:
        node = producer.get(node.input[0])
    return node.input[0] if node is not None and node.op_type == "Softmax" else None


def onnx_outputs(path: Path, samples: dict, probe: str | None = None) -> tuple[dict, np.ndarray | None]:
    """(stacked outputs, stacked values of the intermediate tensor `probe` or None) of every
    sample in onnxruntime: the probe is made a graph output of an in-memory copy."""
    import onnx
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    model = str(path)
    if probe is not None:
        proto = onnx.load(str(path))
        proto.graph.output.append(onnx.ValueInfoProto(name=probe))
        model = proto.SerializeToString()
        del proto
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    del model
    names = [o.name for o in session.get_outputs()]
    per_sample = [dict(zip(names, session.run(names, feed))) for feed in _per_sample(samples)]
    probed = np.stack([outputs.pop(probe) for outputs in per_sample]) if probe else None
    return stack_outputs(per_sample), probed


def delegated_ops(interpreter) -> tuple[int, int]:
    """(ops of the main subgraph that a delegate runs, ops in the file), for an interpreter whose
    tensors are allocated: see qconvert.check.inspect_tflite.delegate_partitions."""
    from qconvert.check.inspect_tflite import interpreter_partitions

    partitions, file_ops = interpreter_partitions(interpreter)
    return sum(map(len, partitions)), file_ops


def _tflite_feeds(report: dict, samples: dict, details: dict | None = None) -> list[dict]:
    """Signature-runner arguments per sample: ONNX-layout samples transposed to the file's layout
    and cast to its input dtypes, as the conversion report says; a float sample for an integer
    input with a scale in `details` (the runner's get_input_details(): int8 I/O, --target micro
    or npu) is quantized with it."""
    feeds = []
    for sample in _per_sample(samples):
        args = {}
        for info in report["inputs"]:
            value = sample[info["name"]]
            if info["layout_permutation"]:
                value = np.transpose(value, info["layout_permutation"])
            scale, zero_point = ((details or {}).get(info["name"]) or {}).get("quantization", (0.0, 0))
            if scale and np.asarray(value).dtype.kind == "f" and np.dtype(info["dtype"]).kind in "iu":
                limits = np.iinfo(info["dtype"])
                value = np.clip(np.round(value / scale) + zero_point, limits.min, limits.max)
            args[info["name"]] = np.ascontiguousarray(value.astype(info["dtype"]))
        feeds.append(args)
    return feeds


def _tflite_runner(tflite: str, report: dict, samples: dict):
    """(interpreter, run(k) -> ONNX-layout outputs of sample k) for a converted file."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=tflite, num_threads=1)
    runner = interpreter.get_signature_runner()
    feeds = _tflite_feeds(report, samples, runner.get_input_details())
    output_details = runner.get_output_details()

    def run(k: int) -> dict:
        results = runner(**feeds[k])
        outputs = {}
        for info in report["outputs"]:
            value = results[info["name"]]
            scale, zero_point = (output_details.get(info["name"]) or {}).get("quantization", (0.0, 0))
            if scale and value.dtype.kind in "iu":  # an integer output (int8 I/O): its real values
                value = (value.astype(np.float64) - zero_point) * scale
            if info["layout_permutation"]:
                value = np.transpose(value, np.argsort(info["layout_permutation"]))
            outputs[info["name"]] = value
        return outputs

    return interpreter, run


def _op_name(model, op) -> str:
    from qconvert.tflite import schema_generated as schema

    code = model.operatorCodes[op.opcodeIndex]
    number = max(code.builtinCode, code.deprecatedBuiltinCode)
    return next((k for k, v in vars(schema.BuiltinOperator).items() if v == number), "")


def _with_logits_output(tflite: str) -> tuple[bytes, int] | None:
    """(the file with the input of its final SOFTMAX added to the subgraph outputs, that tensor's
    index), when the first output is that SOFTMAX's, possibly reshaped or (de)quantized; else
    None. The added output keeps the interpreter from reusing the tensor's memory."""
    import flatbuffers

    from qconvert.tflite import schema_generated as schema

    model = schema.ModelT.InitFromPackedBuf(Path(tflite).read_bytes(), 0)
    subgraph = model.subgraphs[0]
    producer = {int(t): op for op in subgraph.operators for t in op.outputs}
    op = producer.get(int(subgraph.outputs[0]))
    while op is not None and _op_name(model, op) in _PASS_TFLITE:
        op = producer.get(int(op.inputs[0]))
    if op is None or _op_name(model, op) != "SOFTMAX":
        return None
    index = int(op.inputs[0])
    subgraph.outputs = list(subgraph.outputs) + [index]
    builder = flatbuffers.Builder(0)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output()), index


def _tflite_logits(tflite: str, samples: dict, report: dict) -> np.ndarray | None:
    """Stacked (dequantized) values of the tensor the final SOFTMAX reads, one per sample, in a
    second interpreter on a copy of the file where that tensor is an output; None without one."""
    from ai_edge_litert.interpreter import Interpreter

    found = _with_logits_output(tflite)
    if found is None:
        return None
    interpreter = Interpreter(model_content=found[0], num_threads=1)
    runner = interpreter.get_signature_runner()
    detail = next(d for d in interpreter.get_tensor_details() if d["index"] == found[1])
    scale, zero_point = detail["quantization"]
    values = []
    for args in _tflite_feeds(report, samples):
        runner(**args)
        value = interpreter.get_tensor(found[1]).astype(np.float64)
        values.append((value - zero_point) * scale if scale else value)
    return np.stack(values)


def tflite_worker(tflite: str, report_path: str, samples_path: str, result_path: str,
                  warmup: int, runs: int, baseline: list[str] | None = None,
                  logits: bool = False) -> None:
    """Child process: runs the .tflite through its signature on ONNX-layout samples, saves the
    stacked ONNX-layout outputs, prints as JSON the median ms of sample 0 and how many ops the
    default delegate (XNNPACK) took; with `baseline` ([tflite, report path] of another file with
    the same inputs) the same for it, timed in turn (see median_ms); with `logits` the values
    the final SOFTMAX reads too (saved as "__logits__", see _tflite_logits).
    The timed call includes copying the inputs in and the outputs out, as onnxruntime's does."""
    samples = dict(np.load(samples_path))
    report = json.loads(Path(report_path).read_text())
    interpreter, run = _tflite_runner(tflite, report, samples)
    calls = {"ms": lambda: run(0)}
    if baseline:
        base_interpreter, base_run = _tflite_runner(
            baseline[0], json.loads(Path(baseline[1]).read_text()), samples)
        calls["baseline_ms"] = lambda: base_run(0)
    result = median_ms(calls, warmup, runs)
    count = len(next(iter(samples.values())))
    outputs = stack_outputs([run(k) for k in range(count)])
    probed = _tflite_logits(tflite, samples, report) if logits else None
    if probed is not None:
        outputs["__logits__"] = probed
    np.savez(result_path, **pack_outputs(outputs))
    result["delegated"] = _delegated_or_none(interpreter)
    if baseline:
        result["baseline_delegated"] = _delegated_or_none(base_interpreter)
    print(json.dumps(result))


def _delegated_or_none(interpreter) -> list[int] | None:
    try:
        return list(delegated_ops(interpreter))
    except Exception:  # a private API: its absence costs the count, not the run
        return None


def run_tflite(tflite: Path, report: dict, samples: dict, work: Path, args,
               baseline: tuple[Path, dict] | None = None, logits: bool = False) -> dict:
    """Runs tflite_worker in a child: {"ms", "outputs", "delegated": [delegated ops, file ops] or
    None}, with `baseline` (a .tflite and its report) "baseline_ms", "baseline_delegated", with
    `logits` "logits" (None when the model does not end in a softmax); a one-line RuntimeError
    on failure."""
    report_path, samples_path, result_path = (work / f"{tflite.stem}.{suffix}"
                                              for suffix in ("report.json", "samples.npz", "out.npz"))
    report_path.write_text(json.dumps(report))
    np.savez(samples_path, **samples)
    command = [sys.executable, str(BENCH_SCRIPT), "--tflite-worker", str(tflite),
               str(report_path), str(samples_path), str(result_path),
               "--warmup", str(args.warmup), "--runs", str(args.runs)]
    if baseline is not None:
        baseline_report = work / f"{baseline[0].stem}.baseline.json"
        baseline_report.write_text(json.dumps(baseline[1]))
        command += ["--baseline", str(baseline[0]), str(baseline_report)]
    if logits:
        command.append("--logits")
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"interpreter timed out after {args.timeout:g} s") from None
    finally:
        samples_path.unlink(missing_ok=True)
    if proc.returncode < 0:
        name = signal.Signals(-proc.returncode).name
        raise RuntimeError(f"interpreter crashed ({name}): {one_line(proc.stderr)}")
    if proc.returncode != 0:
        raise RuntimeError(f"interpreter failed: {one_line(proc.stderr)}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    with np.load(result_path) as data:
        result["outputs"] = unpack_outputs(data)
    result["logits"] = result["outputs"].pop("__logits__", None)
    return result


def run_next_to_float(dest, report, floats, held_out, args, reference, row, facts):
    """A quantized .tflite's size over the float one and its run on the held-out samples, timed in
    turn with the float model (the int8 and weight-storage tables). Returns the run's result, or
    None with the interpreter's error in row["status"]."""
    baseline = None
    if "tflite" in floats:
        facts["size"] = dest.stat().st_size / floats["tflite"].stat().st_size
        row["size / float"] = f"{facts['size']:.3f}"
        baseline = (floats["tflite"], floats["report"])
    try:
        result = run_tflite(dest, report, held_out, args.work, args, baseline,
                            logits=reference[1] is not None)
    except RuntimeError as e:
        row["status"] = str(e)
        return None
    facts["delegated"] = result["delegated"]
    facts["float_delegated"] = result.get("baseline_delegated")
    return result


def record_measured(row: dict, measured: dict, time_column: str, digits: int) -> bool:
    """Puts a measured process run's wall time (in `time_column`) and peak RSS in the row;
    returns False, with the run's error as the row's status, when it failed."""
    if "seconds" in measured:
        row[time_column] = f"{measured['seconds']:.{digits}f}"
        row["peak RSS (MB)"] = f"{measured['rss_mb']:.0f}"
    if "error" in measured:
        row["status"] = measured["error"]
        return False
    return True


# Child process: a default onnxruntime session on argv[1], run on each sample of the .npz argv[2];
# prints the seconds from making the session to the last run's end.
_ORT_TIMER = """
import json, sys, time
import numpy as np, onnxruntime as ort
samples = dict(np.load(sys.argv[2]))
count = len(next(iter(samples.values())))
start = time.perf_counter()
session = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
for k in range(count):
    session.run(None, {name: value[k] for name, value in samples.items()})
print(json.dumps(time.perf_counter() - start))
"""


def ort_seconds(source: Path, calibration: Path, timeout: float) -> float:
    """Plain onnxruntime's time on the calibration samples, in a fresh process (_ORT_TIMER)."""
    proc = subprocess.run([sys.executable, "-c", _ORT_TIMER, str(source), str(calibration)],
                          capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"onnxruntime: {one_line(proc.stderr)}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def names_from(text: str, known, what: str = "model(s)") -> list[str]:
    """A comma-separated list of names from `known` (an argparse type: a bad name is its error)."""
    import argparse

    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown {what} {', '.join(unknown)}; known: "
                                         f"{', '.join(known)}")
    return names
