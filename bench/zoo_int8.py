"""The zoo's int8 sweep (`bench/zoo.py --int8`): every model the float run converted, quantized
all int8. qconvert never refuses for quantization (values int8 cannot carry stay float), so any
exit but 0 here is a finding. Its own module, beside the float zoo (bench/zoo.py) whose
architectures, files and launcher it uses.

    .venv/bin/python bench/zoo.py --int8 [--only timm/resnet,hf/bert]
    .venv/bin/python bench/zoo.py --int8 --table   # the table again from ZOO/results-int8.json
"""

from __future__ import annotations

import collections
import json
import re
import sys
import tempfile
from pathlib import Path

try:
    from bench import zoo, zoo_report
except ImportError:  # bench/ itself is on sys.path (zoo.py run as a script)
    import zoo
    import zoo_report

ARCHITECTURES, EXPORTERS, ZOO, SEED = zoo.ARCHITECTURES, zoo.EXPORTERS, zoo.ZOO, zoo.SEED
model_file, run_qconvert, reason = zoo.model_file, zoo.run_qconvert, zoo_report.reason

INT8_RESULTS = ZOO / "results-int8.json"
# The float export quantized: the first of these the float run converted exactly, else any other.
INT8_SOURCES = ("ts17", "dynamo18", "tf2onnx17") + tuple(
    e for e in EXPORTERS if e not in ("ts17", "dynamo18", "tf2onnx17"))
INT8_SAMPLES = 8
# A failure is quantization's when its message speaks of it.
QUANTIZATION_WORDS = re.compile(r"quantiz|int8|scale|calibrat|range", re.IGNORECASE)


def int8_source(key: str, floats: dict) -> str | None:
    """The exporter whose float file of `key` is quantized: the first of INT8_SOURCES whose float
    conversion was exact in results.json (`floats`: (family, model, exporter) -> status)."""
    family, model, _, _ = ARCHITECTURES[key]
    return next((e for e in INT8_SOURCES if floats.get((family, model, e)) == "exact"
                 and model_file(key, e).exists()), None)


def write_calibration(path: Path, dest: Path) -> None:
    """INT8_SAMPLES seeded samples of the ONNX graph's inputs, as qconvert's .npz ([N, *shape],
    dynamic dims 1: the float run's defaults). Floats standard normal; integers [0, 100) (token
    ids); a *mask* input ones, its last 3 positions zero in every other sample; token_type_ids
    zeros."""
    import numpy as np
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    weights = {t.name for t in graph.initializer}
    rng = np.random.default_rng(SEED)
    arrays = {}
    for i in graph.input:
        if i.name in weights:
            continue
        tensor = i.type.tensor_type
        shape = [INT8_SAMPLES] + [d.dim_value if d.HasField("dim_value") and d.dim_value > 0
                                  else 1 for d in tensor.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)
        name = i.name.lower()
        if "mask" in name:
            value = np.ones(shape)
            value[1::2, ..., -3:] = 0
        elif "token_type" in name:
            value = np.zeros(shape)
        elif np.issubdtype(dtype, np.floating):
            value = rng.standard_normal(shape)
        else:
            value = rng.integers(0, 100, shape)
        arrays[i.name] = value.astype(dtype)
    np.savez(dest, **arrays)


def convert_int8(key: str, exporter: str, timeout: float, work: Path) -> dict:
    """One model's int8 conversion (`--quantize --precision int8 --no-verify`, seeded calibration)
    in a fresh process: its exit code, seconds, int8 op count and the summary's words on the ops
    int8 cannot carry; a failure's last stderr line."""
    family, model, _, _ = ARCHITECTURES[key]
    path = model_file(key, exporter)
    row = dict(family=family, model=model, exporter=exporter, file=str(path))
    calibration = work / "cal.npz"
    write_calibration(path, calibration)
    dest = work / "out.tflite"
    result = run_qconvert(path, dest, timeout, work, ("--quantize", "--calibration",
                                                      str(calibration), "--precision", "int8",
                                                      "--no-verify"))
    row["commit"] = zoo._sibling("bench").qconvert_commit()
    row["code"] = result.get("code")  # None: timed out, or the launcher failed
    if "seconds" in result:
        row["seconds"] = round(result["seconds"], 2)
    if "error" in result:
        row["message"] = re.sub(r"^exit \d+: (qconvert: (internal )?error: )?", "", result["error"])
    else:
        report = result["report"]
        row["ops"] = report["ops"]
        row["int8_ops"] = report["quantization"]["int8_ops"]
        uncarried = re.search(r"int8 cannot carry the values of \d+ ops, kept float \([^;]*\)",
                              result["summary"])
        if uncarried:
            row["uncarried"] = uncarried.group(0)
    dest.unlink(missing_ok=True)
    calibration.unlink(missing_ok=True)
    return row


def run_int8(keys: list[str], timeout: float, resume: bool = False) -> list[dict]:
    """Converts each model's float export (int8_source) to int8, one at a time; results-int8.json
    after every model. resume: models with an exit-0 row of the same file keep it."""
    floats = {(r["family"], r["model"], r["exporter"]): r["status"]
              for r in json.loads(zoo.RESULTS.read_text()) if r["format"] == "float"}
    rows = {}
    if INT8_RESULTS.exists():
        rows = {(r["family"], r["model"]): r for r in json.loads(INT8_RESULTS.read_text())}
    with tempfile.TemporaryDirectory(prefix="qconvert-zoo-int8-") as tmp:
        for key in keys:
            exporter = int8_source(key, floats)
            if exporter is None:  # no float conversion to hold the int8 one to
                print(f"zoo: int8 {key}: skipped, no exact float conversion", file=sys.stderr)
                continue
            family, model, _, _ = ARCHITECTURES[key]
            done = rows.get((family, model))
            if resume and done and done["code"] == 0 and done["exporter"] == exporter:
                continue
            print(f"zoo: int8 {key} {exporter}", file=sys.stderr, flush=True)
            try:
                row = convert_int8(key, exporter, timeout, Path(tmp))
            except Exception as e:  # the benchmark's own failure: a row
                row = dict(family=family, model=model, exporter=exporter, code=None,
                           message=f"zoo: {type(e).__name__}: {e}")
            rows[(family, model)] = row
            tmp_file = INT8_RESULTS.with_suffix(".tmp")
            tmp_file.write_text(json.dumps(list(rows.values()), indent=1))
            tmp_file.replace(INT8_RESULTS)
    return list(rows.values())


def int8_report(rows: list[dict]) -> str:
    """Counts by exit code, then every failure grouped by message (quantization's apart from the
    others), then the models where int8 could not carry some values."""
    codes = collections.Counter("timeout/none" if r["code"] is None else str(r["code"])
                                for r in rows)
    ok = [r for r in rows if r["code"] == 0]
    seconds = sorted(r["seconds"] for r in ok)
    commits = sorted({r["commit"] for r in rows if "commit" in r},  # by date: "hash date ..."
                     key=lambda c: c.split(" ")[1:2]) or ["-"]
    lines = [f"Zoo int8 sweep (`--quantize --calibration <{INT8_SAMPLES} seeded samples> "
             f"--precision int8 --no-verify`): {len(rows)} models, by exit code: "
             + ", ".join(f"{c}: {n}" for c, n in sorted(codes.items()))
             + (f"; exit 0 median {seconds[len(seconds) // 2]:.1f} s, int8 ops "
                f"{sum(r['int8_ops'] for r in ok)}/{sum(r['ops'] for r in ok)}" if ok else "")
             + f". qconvert commits (others commit while it runs): {commits[0]} .. {commits[-1]}"
             f" ({len(commits)} distinct)."]
    failed = [r for r in rows if r["code"] != 0]
    for title, quantization in (("Quantization failures", True), ("Other failures", False)):
        groups = collections.defaultdict(list)
        for r in failed:
            if bool(QUANTIZATION_WORDS.search(r["message"])) == quantization:
                groups[(r["code"], reason(r["message"], 140))].append(
                    f"{r['family']}/{r['model']}@{r['exporter']}")
        lines.append(f"\n{title} ({sum(len(n) for n in groups.values())}):")
        lines += [f"- exit {code}: {message} [{len(names)}]: {', '.join(names)}"
                  for (code, message), names in sorted(groups.items(), key=lambda kv: -len(kv[1]))]
    uncarried = [r for r in ok if "uncarried" in r]
    if uncarried:
        lines.append(f"\nValues int8 cannot carry, kept float ({len(uncarried)} models):")
        lines += [f"- {r['family']}/{r['model']}: {r['uncarried']}" for r in uncarried]
    return "\n".join(lines)
