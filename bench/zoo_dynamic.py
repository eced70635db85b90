"""The zoo with its dynamic dimensions left dynamic (issue 39): one .tflite for every size.

A subset of bench/zoo.py's architectures (its ARCHITECTURES, and zoo_build.build), exported by
torch.onnx's TorchScript exporter (dynamo=False, opset 17) with the dynamic axes their users
declare: the batch and the image's height and width for torchvision's and timm's classifiers and
segmenters (and Hugging Face's image models), the batch and the sequence length for the Hugging
Face text encoders, the batch and the samples (or mel frames) for the speech models. Files are
cached as ZOO/<family>/<model>__ts17dyn.onnx with a .json beside each, generated in the zoo venv
as zoo_build.generate_worker does.

Each is converted with default flags, `qconvert IN OUT --json` (no --input-shape: every dynamic
dimension stays resizable where the graph allows, and the check runs the file at three sizes), in
a fresh process with a timeout; the report's `batch`, `dimensions` (resizable, or fixed and why)
and `verify` (`other_sizes`) are kept. Then the written .tflite is run in LiteRT (in a child
process: a crash is a row) at three sizes of its resizable dimensions (resize_tensor_input,
allocate_tensors), the third at batch 2 where the batch is resizable, against onnxruntime on the
same seeded inputs (token ids inside the vocab), and each size's worst max abs error over the
output's largest magnitude is recorded; exact is within the float check's 2^-13.

    .venv/bin/python bench/zoo_dynamic.py [--only tv/resnet,hf/bert] [--timeout 900] [--table]

Prints a markdown table and the counts; rows in ZOO/results-dynamic.json (rewritten after each
model). --table: the table of the cached results, nothing converted.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

try:
    from bench import zoo, zoo_build
except ImportError:  # run as a script (the generation worker in the zoo venv): bench/ on sys.path
    import zoo
    import zoo_build

EXPORTER = "ts17dyn"
RESULTS = zoo.ZOO / "results-dynamic.json"
TOLERANCE = 2.0 ** -13  # the float check's FLOAT_TOLERANCE, of an output's scale
VOCAB = 1000  # the zoo's text configs' vocab_size

# The subset: zoo keys and the kind of their dynamic axes.
IMAGE, SEGMENT, TEXT, AUDIO, MEL, DETECT = "image", "segment", "text", "audio", "mel", "detect"
SUBSET = {
    "tv/resnet/resnet18": IMAGE, "tv/mobilenet_v2/mobilenet_v2": IMAGE,
    "tv/mobilenet_v3/mobilenet_v3_small": IMAGE, "tv/efficientnet/efficientnet_b0": IMAGE,
    "tv/shufflenet/shufflenet_v2_x0_5": IMAGE, "tv/squeezenet/squeezenet1_1": IMAGE,
    "tv/regnet/regnet_y_400mf": IMAGE, "tv/convnext/convnext_tiny": IMAGE,
    "tv/swin/swin_t": IMAGE, "tv/lraspp/lraspp_mobilenet_v3_large": SEGMENT,
    "tv/deeplabv3/deeplabv3_mobilenet_v3_large": SEGMENT,
    "timm/mobilenetv3/mobilenetv3_small_100": IMAGE, "timm/convnext/convnext_atto": IMAGE,
    "timm/ghostnet/ghostnet_100": IMAGE, "timm/vit/vit_tiny_patch16_224": IMAGE,
    "timm/mobilevit/mobilevit_xxs": IMAGE, "timm/efficientnet/efficientnet_b0": IMAGE,
    "hf/segformer/segformer": SEGMENT, "hf/resnet/resnet": IMAGE, "hf/convnext/convnext": IMAGE,
    "hf/mobilevit/mobilevit": IMAGE,
    "hf/bert/bert": TEXT, "hf/distilbert/distilbert": TEXT, "hf/roberta/roberta": TEXT,
    "hf/albert/albert": TEXT, "hf/electra/electra": TEXT, "hf/mpnet/mpnet": TEXT,
    "hf/xlm_roberta/xlm_roberta": TEXT, "hf/t5_encoder/t5_encoder": TEXT,
    "hf/gpt2/gpt2": TEXT, "hf/llama/llama": TEXT, "hf/clip_text/clip_text": TEXT,
    "hf/wav2vec2/wav2vec2": AUDIO, "hf/hubert/hubert": AUDIO,
    "hf/whisper_encoder/whisper_encoder": MEL,
    "yolo/nms/yolov8_head_batched_nms": DETECT,
}
# Each kind's dynamic axes: input axes (every input alike), output axes.
AXES = {
    IMAGE: ({0: "batch", 2: "height", 3: "width"}, {0: "batch"}),
    SEGMENT: ({0: "batch", 2: "height", 3: "width"}, {0: "batch", 2: "height", 3: "width"}),
    TEXT: ({0: "batch", 1: "sequence"}, {0: "batch", 1: "sequence"}),
    AUDIO: ({0: "batch", 1: "samples"}, {0: "batch", 1: "frames"}),
    MEL: ({0: "batch", 2: "frames"}, {0: "batch", 1: "positions"}),
    # one image (its postprocess takes the first), the boxes kept: as many as the values decide
    DETECT: ({2: "height", 3: "width"}, {0: "kept"}),
}
# The three sizes LiteRT runs each kind at (a symbol the conversion fixed keeps its size).
SIZES = {
    IMAGE: [dict(height=64, width=64), dict(height=96, width=96), dict(height=160, width=128)],
    TEXT: [dict(sequence=7), dict(sequence=16), dict(sequence=33)],
    AUDIO: [dict(samples=1600), dict(samples=4000), dict(samples=6400)],
    MEL: [dict(frames=100), dict(frames=64), dict(frames=160)],
}
SIZES[SEGMENT] = SIZES[DETECT] = SIZES[IMAGE]
THIRD_BATCH = 2  # the third size's batch, where the batch is resizable


def model_file(key: str) -> Path:
    return zoo.model_file(key, EXPORTER)


# --------------------------------------------------------------------------------------------
# Generation (in the zoo venv: torch 2.14.1, no qconvert).

def with_long_tables(spec: dict) -> dict:
    """The zoo's spec with a text model's position table at its released length (512; RoBERTa's
    kind 514): the zoo's 64 (CLIP's 32) is shorter than the 96 qconvert probes a sequence at, and than a
    served sequence."""
    cfg = spec.get("cfg")
    if not cfg:
        return spec
    longer = dict(cfg)
    for name in ("max_position_embeddings", "n_positions"):
        if name in cfg and cfg[name] < 512:
            longer[name] = 514 if cfg[name] == 66 else 512
    return dict(spec, cfg=longer)


def export_dynamic(key: str, path: Path) -> None:
    """The architecture `key` built by zoo_build.build, exported with its kind's dynamic axes."""
    import onnx
    import torch

    _, model, kind, spec = zoo.ARCHITECTURES[key]
    module, example, names, outputs = zoo_build.build(kind, model, with_long_tables(spec), 17)
    inputs_axes, output_axes = AXES[SUBSET[key]]
    axes = {n: dict(inputs_axes) for n in names}
    axes.update({n: dict(output_axes) for n in outputs})
    torch.onnx.export(module, example, str(path), input_names=names, output_names=outputs,
                      opset_version=17, dynamo=False, do_constant_folding=True,
                      dynamic_axes=axes)
    onnx.checker.check_model(str(path))


def generate_worker(keys: list[str]) -> None:
    """Writes each key's file with a .json beside it ({"ok": ...}, "error": one line)."""
    import torch

    torch.set_num_threads(1)

    for key in keys:
        zoo_build.generated(model_file(key), "zoo_dynamic", lambda path: export_dynamic(key, path))


def generate(keys: list[str]) -> None:
    """Runs generate_worker in the zoo venv for the keys not generated yet."""
    todo = [k for k in keys if not model_file(k).with_suffix(".json").exists()]
    if not todo:
        return
    python = zoo.ensure_venv(zoo.VENV, zoo.REQUIREMENTS)
    zoo.ZOO.mkdir(parents=True, exist_ok=True)
    zoo.run_in_venv(python, __file__, ["--generate-worker", ",".join(todo)], 700 * len(todo),
                    "generate-dynamic.log")


# --------------------------------------------------------------------------------------------
# LiteRT against onnxruntime at three sizes (a child process of the project's .venv).

def sizes_to_run(kind: str, report: dict) -> list[dict]:
    """The symbol values of each size LiteRT runs: the kind's three, a symbol the conversion
    fixed at its written size (so fewer sizes when nothing moves), the third at batch 2 where the
    batch is resizable."""
    fixed = {d["symbol"]: d["size"] for d in report.get("dimensions") or [] if not d["resizable"]}
    batch = report.get("batch") or {}
    sizes = []
    for i, size in enumerate(SIZES[kind]):
        values = {s: fixed.get(s, v) for s, v in size.items()}
        if batch.get("symbol"):
            resizable = batch.get("resizable") and i == len(SIZES[kind]) - 1
            values[batch["symbol"]] = THIRD_BATCH if resizable else batch.get("size", 1)
        if values not in sizes:
            sizes.append(values)
    return sizes


def onnx_feeds(session, values: dict, seed: int) -> dict:
    """Seeded inputs of the ONNX model at the symbol values: floats standard normal, token ids in
    [1, VOCAB), masks ones."""
    import numpy as np

    rng = np.random.default_rng(seed)
    feeds = {}
    for i in session.get_inputs():
        shape = [d if isinstance(d, int) else values.get(d, 1) for d in i.shape]
        if "float" in i.type:
            feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
        elif "mask" in i.name:
            feeds[i.name] = np.ones(shape, np.int64)
        else:
            feeds[i.name] = rng.integers(1, VOCAB, shape).astype(np.int64)
    return feeds


def run_litert(tflite: str, report: dict, feeds: dict) -> dict:
    """The file's outputs (ONNX layout) on `feeds`, its inputs resized to their shapes."""
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=tflite, num_threads=1)
    signature = next(iter(interpreter._get_full_signature_list().values()))
    inputs, outputs = signature["inputs"], signature["outputs"]
    values = {}
    for info in report["inputs"]:
        value = feeds[info["name"]]
        if info["layout_permutation"]:
            value = np.transpose(value, info["layout_permutation"])
        values[info["name"]] = np.ascontiguousarray(value.astype(info["dtype"]))
        interpreter.resize_tensor_input(inputs[info["name"]], list(value.shape))
    interpreter.allocate_tensors()
    for name, value in values.items():
        interpreter.set_tensor(inputs[name], value)
    interpreter.invoke()
    found = {}
    for info in report["outputs"]:
        value = interpreter.get_tensor(outputs[info["name"]])
        if info["layout_permutation"]:
            value = np.transpose(value, np.argsort(info["layout_permutation"]))
        found[info["name"]] = value
    return found


def relative_error(expected, got) -> float:
    """Max abs error over the largest magnitude of the reference (inf: shapes differ)."""
    import numpy as np

    expected, got = np.asarray(expected), np.asarray(got)
    if expected.shape != got.shape:
        return float("inf")
    if expected.dtype.kind in "iub":
        return float(np.count_nonzero(expected != got))  # integer outputs: the count that differ
    scale = max(float(np.max(np.abs(expected))) if expected.size else 0.0, 1e-30)
    return float(np.max(np.abs(expected.astype(np.float64) - got))) / scale if got.size else 0.0


def check_worker(onnx_path: str, tflite: str, report_path: str, sizes_path: str,
                 result_path: str) -> None:
    """Writes [{"values", "shapes", "error" | "ort_error" | "litert_error"}] after each size."""
    import onnxruntime as ort

    report = json.loads(Path(report_path).read_text())
    session = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    results = []
    for k, values in enumerate(json.loads(Path(sizes_path).read_text())):
        feeds = onnx_feeds(session, values, zoo.SEED + k)
        result = {"values": values, "shapes": {n: list(v.shape) for n, v in feeds.items()}}
        results.append(result)
        Path(result_path).write_text(json.dumps(results))  # a crash below leaves this size
        try:
            expected = dict(zip(names, session.run(None, feeds)))
        except Exception as e:  # noqa: BLE001 - the reference cannot run at this size
            result["ort_error"] = " ".join(str(e).split())[:200]
            continue
        try:
            got = run_litert(tflite, report, feeds)
        except Exception as e:  # noqa: BLE001 - LiteRT refused the size: a finding
            result["litert_error"] = " ".join(f"{type(e).__name__}: {e}".split())[:300]
            continue
        result["error"] = max(relative_error(expected[n], got[n]) for n in names)
        result["worst_output"] = max(names, key=lambda n: relative_error(expected[n], got[n]))
    Path(result_path).write_text(json.dumps(results))


def check_sizes(onnx_path: Path, tflite: Path, report: dict, sizes: list[dict], work: Path,
                timeout: float) -> list[dict]:
    """check_worker in a child process; a crash or timeout marks the size it was at."""
    (work / "report.json").write_text(json.dumps(report))
    (work / "sizes.json").write_text(json.dumps(sizes))
    result = work / "check.json"
    result.unlink(missing_ok=True)
    command = [sys.executable, __file__, "--check-worker", str(onnx_path), str(tflite),
               str(work / "report.json"), str(work / "sizes.json"), str(result)]
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        failure = (f"exit {proc.returncode}: " + (proc.stderr.strip().splitlines() or ["-"])[-1]
                   if proc.returncode else "")
    except subprocess.TimeoutExpired:
        failure = f"timed out after {timeout:g} s"
    found = json.loads(result.read_text()) if result.exists() else [{"values": sizes[0]}]
    if failure:
        last = found[-1]
        if not any(k in last for k in ("error", "ort_error", "litert_error")):
            last["litert_error"] = f"the check process died ({failure[:250]})"
        elif len(found) < len(sizes):
            found.append({"values": sizes[len(found)], "litert_error": failure[:250]})
    return found


# --------------------------------------------------------------------------------------------
# One model: convert, then LiteRT at three sizes.

def reference_fails(path: Path) -> str:
    """Why onnxruntime cannot run the model with its dynamic dimensions at 64 (batch 1), the size
    qconvert converts at ("" when it can): the export's limit, not the conversion's."""
    import onnxruntime as ort

    try:
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        symbols = {d for i in session.get_inputs() for d in i.shape if isinstance(d, str)}
        session.run(None, onnx_feeds(session, {s: 1 if s == "batch" else 64 for s in symbols}, 0))
    except Exception as e:  # noqa: BLE001 - any failure of the reference is the answer
        return "onnxruntime at 64 fails too: " + " ".join(str(e).split())[:200]
    return ""


def reference_sizes(path: Path, kind: str) -> list[str]:
    """The kind's sizes (every symbol free, batch 1) that onnxruntime cannot run the model at:
    a fixed dimension the model itself does not resize (a position table of one length) is the
    export's limit; one it runs at every size is qconvert's."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    failing = []
    for k, values in enumerate(SIZES[kind]):
        try:
            session.run(None, onnx_feeds(session, dict(values, batch=1), zoo.SEED + k))
        except Exception:  # noqa: BLE001 - the model does not run at this size
            failing.append(_size_label(values))
    return failing


def _verify_fields(report: dict) -> dict:
    verify = report.get("verify") or {}
    errors = [o["relative_error"] for o in verify.get("outputs", [])
              if isinstance(o.get("relative_error"), (int, float))]
    return dict(verify_passed=verify.get("passed"), verify_check=verify.get("check"),
                verify_error=max(errors) if errors else None,
                verify_other_sizes=verify.get("other_sizes", []))


def convert_one(key: str, timeout: float, work: Path) -> dict:
    family, model, _, _ = zoo.ARCHITECTURES[key]
    path = model_file(key)
    row = dict(key=key, family=family, model=model, kind=SUBSET[key], file=str(path))
    note = path.with_suffix(".json")
    made = json.loads(note.read_text()) if note.exists() else {"ok": False, "error": "not generated"}
    if not made["ok"]:
        return dict(row, status="export failed", message=made["error"])
    row["onnxruntime_fails_at"] = reference_sizes(path, SUBSET[key])
    dest = work / "out.tflite"
    dest.unlink(missing_ok=True)
    result = zoo.run_qconvert(path, dest, timeout, work, ())
    row["code"] = result.get("code")
    row["seconds"] = round(result["seconds"], 2) if "seconds" in result else None
    row["commit"] = zoo._sibling("bench").qconvert_commit()
    if "error" in result:
        status = "reference" if (why := reference_fails(path)) else "failed"
        return dict(row, status=status, message=result["error"] + (f" ({why})" if why else ""))
    report = result["report"]
    row.update(ops=report["ops"], summary=result.get("summary", ""),
               batch=report.get("batch"), dimensions=report.get("dimensions") or [],
               **_verify_fields(report))
    sizes = sizes_to_run(SUBSET[key], report)
    row["litert"] = check_sizes(path, dest, report, sizes, work, timeout)
    row["status"], row["message"] = classify(row)
    dest.unlink(missing_ok=True)
    return row


def classify(row: dict) -> tuple[str, str]:
    """resizable (every dimension, exact at every size LiteRT ran), batch fixed (the others
    resizable, exact), fixed (exit 0, a dimension beyond the batch fixed, exact where run), reference (onnxruntime cannot run a size: the
    export's limit), or failed (a mismatch, LiteRT's failure)."""
    problems = []
    for size in row["litert"]:
        where = _size_text(size["values"])
        if "litert_error" in size:
            problems.append(f"LiteRT at {where}: {size['litert_error']}")
        elif "error" in size and not size["error"] <= TOLERANCE:
            problems.append(f"at {where} max error {size['error']:.2g} of the output's scale")
    if problems:
        return "failed", "; ".join(problems)
    if any("ort_error" in s for s in row["litert"]):
        first = next(s for s in row["litert"] if "ort_error" in s)
        return "reference", f"onnxruntime at {_size_text(first['values'])}: {first['ort_error']}"
    fixed = [f"{d['symbol']}: {d['fixed_because']}" for d in row["dimensions"] if not d["resizable"]]
    if fixed:
        return "fixed", "; ".join(fixed)
    batch = row.get("batch") or {}
    if batch.get("symbol") and not batch.get("resizable"):
        return "batch fixed", f"{batch['symbol']}: {batch.get('note', '')}"
    return "resizable", ""


def _size_text(values: dict) -> str:
    return ",".join(f"{s}={v}" for s, v in values.items())


def save(rows: dict) -> None:
    zoo.ZOO.mkdir(parents=True, exist_ok=True)
    tmp = RESULTS.with_suffix(".tmp")
    tmp.write_text(json.dumps(list(rows.values()), indent=1))
    tmp.replace(RESULTS)


def run(keys: list[str], timeout: float) -> list[dict]:
    """Generates what is missing, converts one model at a time; results after each."""
    rows = {r["key"]: r for r in json.loads(RESULTS.read_text())} if RESULTS.exists() else {}
    generate(keys)
    with tempfile.TemporaryDirectory(prefix="qconvert-zoo-dyn-") as tmp:
        for key in keys:
            print(f"zoo_dynamic: convert {key}", file=sys.stderr, flush=True)
            try:
                rows[key] = convert_one(key, timeout, Path(tmp))
            except Exception as e:  # the benchmark's own failure: a row
                rows[key] = dict(key=key, family=zoo.ARCHITECTURES[key][0], kind=SUBSET[key],
                                 model=zoo.ARCHITECTURES[key][1], status="error",
                                 message=f"zoo_dynamic: {type(e).__name__}: {e}")
            save(rows)
    return [rows[k] for k in SUBSET if k in rows]


# --------------------------------------------------------------------------------------------
# The table.

def _size_label(values: dict) -> str:
    """64x64, S=7, samples=1600 ...; "batch 2" appended where the batch was 2."""
    batch = {s: v for s, v in values.items() if s == "batch"}
    rest = {s: v for s, v in values.items() if s != "batch"}
    if set(rest) == {"height", "width"}:
        text = f"{rest['height']}x{rest['width']}"
    else:
        text = ", ".join(f"{'S' if s == 'sequence' else s}={v}" for s, v in rest.items())
    return text + (f", batch {batch['batch']}" if batch.get("batch", 1) != 1 else "")


def size_cell(size: dict) -> str:
    label = _size_label(size["values"])
    if "litert_error" in size:
        return f"{label}: LiteRT failed"
    if "ort_error" in size:
        return f"{label}: onnxruntime cannot run it"
    if "error" not in size:
        return f"{label}: not run"
    exact = "yes" if size["error"] <= TOLERANCE else "**no**"
    return f"{label}: {exact} {size['error']:.1e}"


def dims_cells(row: dict) -> tuple[str, str]:
    """(resizable symbols, fixed ones with their reason)."""
    dims = list(row.get("dimensions") or [])
    batch = row.get("batch") or {}
    if batch.get("symbol"):
        dims.insert(0, dict(symbol=batch["symbol"], resizable=batch.get("resizable"),
                            fixed_because=batch.get("note", "").split("fixed: ", 1)[-1]))
    resizable = ", ".join(d["symbol"] for d in dims if d["resizable"]) or "-"
    fixed = "; ".join(f"{d['symbol']}: {d['fixed_because']}" for d in dims if not d["resizable"])
    return resizable, fixed or "-"


def table_row(row: dict) -> str:
    name = f"{row['family']}/{row['model']}" if row["family"].split("/")[-1] != row["model"] \
        else row["family"]
    fails = row.get("onnxruntime_fails_at")
    reference = "all" if fails == [] else "-" if fails is None else "not " + ", ".join(fails)
    if row["status"] in ("export failed", "error") or "litert" not in row:
        message = re.sub(r"/tmp/\S*out\.tflite", "OUT", row.get("message", ""))
        message = message.replace("qconvert: error: ", "").replace("|", "/")
        return f"| {name} | - | - | {reference} | {row['status']}: {message[:300]} | - | - | - " \
               f"| {row.get('code', '-')} | - | - |"
    resizable, fixed = dims_cells(row)
    cells = [size_cell(s) for s in row["litert"]] + ["-"] * 3
    verify = "passed" if row.get("verify_passed") else "**failed**"
    n = len(row.get("verify_other_sizes", [])) + 1
    verify += f" at {n} size{'s' if n > 1 else ''}"
    return (f"| {name} | {resizable} | {fixed.replace('|', '/')} | {reference} | {verify} | "
            + " | ".join(cells[:3]) + f" | {row['code']} | {row['ops']} | {row['seconds']} |")


HEADER = ("| model | resizable | fixed (why) | onnxruntime runs the 3 sizes | qconvert's check "
          "| LiteRT size 1 | LiteRT size 2 | LiteRT size 3 | exit | ops | s |\n"
          "|---|---|---|---|---|---|---|---|---:|---:|---:|")


def reason_group(text: str) -> str:
    """A fixed dimension's reason with its names taken out, to group models by it."""
    text = re.sub(r"\(node [^)]*\)", "", text)
    text = re.sub(r"'[^']*'", "'…'", text)
    text = re.sub(r"\[[0-9, ]+\]", "[…]", text)
    return " ".join(text.split())


def counts(rows: list[dict]) -> str:
    by = {s: [r for r in rows if r["status"] == s] for s in
          ("resizable", "batch fixed", "fixed", "reference", "failed", "export failed", "error")}
    parts = [f"{len(by['resizable'])} resizable and exact at every size",
             f"{len(by['batch fixed'])} with every dimension but the batch resizable, exact at "
             "every size",
             f"{len(by['fixed'])} with a dimension beyond the batch fixed (the reason said)",
             f"{len(by['failed']) + len(by['error'])} failed"]
    if by["reference"]:
        parts.append(f"{len(by['reference'])} that onnxruntime cannot run at another size")
    if by["export failed"]:
        parts.append(f"{len(by['export failed'])} whose export failed")
    return f"**{len(rows)} models: " + ", ".join(parts) + ".**"


def reasons(rows: list[dict]) -> str:
    groups: dict[str, list[str]] = {}
    for row in rows:
        batch = row.get("batch") or {}
        if batch.get("symbol") and not batch.get("resizable"):
            groups.setdefault("batch: " + reason_group(batch.get("note", "").split("fixed: ")[-1]),
                              []).append(row["model"])
        for d in row.get("dimensions") or []:
            if not d["resizable"]:
                groups.setdefault(reason_group(d["fixed_because"]), []).append(
                    f"{row['model']} ({d['symbol']})")
    lines = [f"- {reason} ({len(models)}): {', '.join(models)}"
             for reason, models in sorted(groups.items(), key=lambda g: -len(g[1]))]
    return "Fixed dimensions by reason:\n\n" + "\n".join(lines) if lines else ""


def markdown(rows: list[dict]) -> str:
    body = "\n".join(table_row(r) for r in rows)
    return "\n\n".join(p for p in (HEADER + "\n" + body, counts(rows), reasons(rows)) if p)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="comma-separated families or zoo keys")
    parser.add_argument("--timeout", type=float, default=900, help="per conversion, seconds")
    parser.add_argument("--table", action="store_true", help="the cached results' table")
    parser.add_argument("--generate-worker", help=argparse.SUPPRESS)
    parser.add_argument("--check-worker", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.generate_worker:
        generate_worker(args.generate_worker.split(","))
        return 0
    if args.check_worker:
        check_worker(*args.check_worker)
        return 0
    root = str(Path(__file__).resolve().parent.parent)
    if root not in sys.path:
        sys.path.insert(0, root)
    if args.table:
        rows = {r["key"]: r for r in json.loads(RESULTS.read_text())}
        for row in rows.values():
            if "litert" in row:  # classified again: the rule may be newer than the rows
                row["status"], row["message"] = classify(row)
        print(markdown([rows[k] for k in SUBSET if k in rows]))
        return 0
    wanted = [w for w in args.only.split(",") if w]
    keys = [k for k in SUBSET if not wanted or k in wanted
            or any(k.startswith(w + "/") for w in wanted)]
    print(markdown(run(keys, args.timeout)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
