"""The zoo's quantized variants (issue 38): the table of bench/zoo.py's `qdq` (quantize_static)
and `dynint8` (quantize_dynamic) files, each converted by qconvert with default flags
(`qconvert IN OUT --json`: a QDQ model becomes int8 from its own pairs, a dynamic one hybrid
kernels), the same columns as the test family's table (bench/quantized_family.py): exit code,
rounding bound, measured SQNR against onnxruntime, size against the ONNX file, int8 / hybrid /
float ops. Read from the --json report by quantized_family.checked, so both tables read a report
one way.

    .venv/bin/python bench/zoo.py --only tv/resnet,hf/bert --exporters ts17 --formats qdq,dynint8
    .venv/bin/python bench/zoo.py --table quantized   # the table of ZOO/results.json's rows

A finding is a row that exits non-zero, is bigger than MAX_SIZE times its ONNX file, or measures
below its rounding bound (the conversion itself exits 4 only below the bound less 3 dB).
"""

from __future__ import annotations

import re
from pathlib import Path

# The formats of the zoo that arrive quantized (zoo.FORMATS).
QUANTIZED = ("qdq", "dynint8")
# The .tflite of a model that arrives quantized is no bigger than this times its ONNX file.
MAX_SIZE = 1.1
COLUMNS = ("model", "format", "exit", "rounding bound (dB)", "SQNR (dB)", "size / ONNX",
           "int8 / hybrid / float ops")


def _family():
    """bench/quantized_family.py, imported where used (zoo.py's workers never get here)."""
    try:
        from bench import quantized_family
    except ImportError:  # bench/ itself on sys.path (run as a script)
        import quantized_family
    return quantized_family


def fields(report: dict, tflite: Path, onnx: Path) -> dict:
    """What a zoo row keeps of a quantized file's exit-0 conversion: the rounding bound and SQNR
    of its output closest to the bound, the .tflite's size over the ONNX file's, the op mix."""
    numbers = _family().checked(report, tflite, onnx)
    return dict(bound_db=numbers["bound"], sqnr_db=numbers["sqnr"], size=round(numbers["size"], 3),
                mix=numbers["mix"], from_pairs=numbers["from_pairs"])


def problem(row: dict) -> str | None:
    """Why a converted row is a finding (see the module docstring), or None."""
    if row.get("code") != 0:
        return f"exit {row.get('code')}: {row.get('message', '')}"
    if row["size"] > MAX_SIZE:
        return f"{row['size']:.2f}x the ONNX file, above {MAX_SIZE}x"
    if row["bound_db"] is not None and row["sqnr_db"] is not None \
            and float(row["sqnr_db"]) < row["bound_db"]:
        return f"SQNR {float(row['sqnr_db']):.1f} dB below its bound {row['bound_db']:.1f} dB"
    return None


def _cells(row: dict) -> list[str]:
    name = f"{row['family'].split('/')[0]}/{row['model']}"  # tv/resnet18, hf/bert
    if row.get("code") != 0:
        code = "timeout" if row.get("code") is None else str(row["code"])
        message = re.sub(r"^verify: | \(--no-verify writes it anyway\)$", "",
                         row.get("message", ""))[:90].replace("|", "\\|")
        return [name, row["format"], code, "", "", "", message]
    bound = "-" if row["bound_db"] is None else f"{row['bound_db']:.1f}"
    sqnr = "-" if row["sqnr_db"] is None else f"{float(row['sqnr_db']):.1f}"
    mix = " / ".join(str(row["mix"][k]) for k in ("int8", "hybrid", "float"))
    return [name, row["format"], "0", bound, sqnr, f"{row['size']:.2f}", mix]


def table(rows: list[dict]) -> str:
    """The markdown table of results.json's quantized rows (by family and model), a line of
    counts, and the findings, one line each."""
    mine = sorted((r for r in rows if r["format"] in QUANTIZED and r["status"] != "export failed"),
                  key=lambda r: (r["family"], r["model"], r["format"]))
    lines = ["| " + " | ".join(COLUMNS) + " |", "|---|---|---:|---:|---:|---:|---|"]
    lines += ["| " + " | ".join(_cells(r)) + " |" for r in mine]
    ok = [r for r in mine if r.get("code") == 0]
    found = [(r, problem(r)) for r in mine if problem(r)]
    lines += ["", f"{len(ok)} of {len(mine)} exit 0; {len(found)} findings"
              + (":" if found else ".")]
    lines += [f"- {r['family'].split('/')[0]}/{r['model']} {r['format']} "
              f"({r.get('file', '-')}): {why}" for r, why in found]
    failed = [r for r in rows if r["format"] in QUANTIZED and r["status"] == "export failed"]
    if failed:
        lines.append("\nNot counted: the export failed, or onnxruntime cannot run the file either:")
        lines += [f"- {r['family'].split('/')[0]}/{r['model']} {r['format']}: {r['message'][:120]}"
                  for r in failed]
    return "\n".join(lines)
