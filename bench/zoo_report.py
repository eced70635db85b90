"""The zoo's report (bench/zoo.py, and bench.py's `zoo` table): per family the models, exact,
refused, wrong, errors, conversion seconds and MB/s, peak RSS; the totals by exporter and format;
the failures grouped by message (reason, which bench/zoo_int8.py groups by too) with the models
named; the quantized formats' table (bench/zoo_quantized.py) and the exports that failed. Reads
the rows of ZOO/results.json; runs in the project's .venv.
"""

from __future__ import annotations

import collections
import re

try:
    from bench import zoo
except ImportError:  # bench/ itself is on sys.path (zoo.py or bench.py run as a script)
    import zoo

_sibling = zoo._sibling

COLUMNS = ["family", "models", "exact", "refused", "wrong", "errors", "export failed",
           "convert (s)", "MB/s", "peak RSS (MB)", "refusals"]


def reason(message: str, limit: int = 90) -> str:
    """A failure's message without node, tensor and file names, so that one cause groups: the op
    types of unsupported nodes (corpus._reason), else the failing op and its first clause."""
    if "unsupported ONNX node" in message:  # "name (Op)", "Op ('name')", "Op x 3 ('name', ...)"
        ops = set(re.findall(r"\(([A-Za-z0-9_.:]+)\)", message))
        ops |= set(re.findall(r"([A-Za-z][A-Za-z0-9_.:]*)(?: x \d+)? \('", message))
        text = "unsupported ops: " + ", ".join(sorted(ops))
    else:
        text = _sibling("corpus")._reason(message)
    text = re.sub(r"'[^']*'", "X", text)
    text = re.sub(r"/\S+\.(onnx|tflite)", "FILE", text)
    text = re.sub(r"\b\d+(\.\d+)?(e-?\d+)?\b", "N", text)  # values and shapes
    return (text if len(text) <= limit else text[:limit - 3] + "...").replace("|", "\\|")


def zoo_rows(rows: list[dict]) -> list[dict]:
    by_family = collections.defaultdict(list)
    for r in rows:
        by_family[r["family"]].append(r)
    table = []
    for family in sorted(by_family):
        rs = by_family[family]
        counts = collections.Counter(r["status"] for r in rs)
        timed = [r for r in rs if "seconds" in r and r["status"] in ("exact", "converted")]
        seconds = sum(r["seconds"] for r in timed)
        mb = sum(r["onnx_mb"] for r in timed)
        refusals = collections.Counter(reason(r["message"]) for r in rs if r["status"] == "refused")
        table.append({
            "family": family, "models": str(len(rs) - counts["export failed"]),
            "exact": str(counts["exact"] + counts["converted"]), "refused": str(counts["refused"]),
            "wrong": str(counts["wrong"]), "errors": str(counts["error"] + counts["timeout"]),
            "export failed": str(counts["export failed"]),
            "convert (s)": f"{seconds / len(timed):.1f}" if timed else "-",
            "MB/s": f"{mb / seconds:.1f}" if timed and seconds else "-",
            "peak RSS (MB)": str(max(r["rss_mb"] for r in rs if "rss_mb" in r))
            if any("rss_mb" in r for r in rs) else "-",
            "refusals": "; ".join(f"{m} ({n})" if n > 1 else m
                                  for m, n in refusals.most_common(3))[:200] or "-"})
    return table


def markdown_table(rows: list[dict]) -> str:
    """bench.markdown_table, with this table's text columns left-aligned."""
    lines = _sibling("bench").markdown_table(rows, COLUMNS).split("\n")
    lines[1] = "|" + "|".join("---" if c in ("family", "refusals") else "---:"
                              for c in COLUMNS) + "|"
    return "\n".join(lines)


def report(rows: list[dict]) -> str:
    """The zoo section of the benchmark: header, table, totals by exporter and format, the
    failures grouped by message with the models named, the quantized formats' numbers."""
    converted = [r for r in rows if r["status"] != "export failed"]
    families = {r["family"] for r in converted}
    ok = [r for r in converted if r["status"] in ("exact", "converted")]
    lines = [f"\nArchitecture zoo (bench/zoo.py): {len(converted)} generated models over "
             f"{len(families)} families (seeded random weights; torchvision, timm, Hugging Face "
             f"transformers from small configs, Keras through tf2onnx), each converted by "
             f"`qconvert IN OUT --json` (default flags: the float check; QDQ and dynamic "
             f"int8 to their own quantization, checked against their rounding bound); "
             f"{len(ok)} exact, {sum(r['status'] == 'refused' for r in rows)} refused, "
             f"{sum(r['status'] == 'wrong' for r in rows)} wrong, "
             f"{sum(r['status'] in ('error', 'timeout') for r in rows)} errors; "
             f"{sum(r['status'] == 'export failed' for r in rows)} exports failed (not counted). "
             f"convert (s): mean over the exact ones; MB/s: ONNX MB per second. qconvert "
             f"commit: {', '.join(sorted({r['commit'] for r in rows if 'commit' in r})) or '-'}."
             f"\n",
             markdown_table(zoo_rows(rows)), "", "By exporter and format:"]
    kinds = collections.defaultdict(collections.Counter)
    for r in converted:
        kinds[(r["exporter"], r["format"])][r["status"]] += 1
    for (exp, fmt), counts in sorted(kinds.items()):
        total = sum(counts.values())
        lines.append(f"- {exp} {fmt}: {counts['exact'] + counts['converted']}/{total} "
                     + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())
                                 if k not in ("exact", "converted")))
    groups = collections.defaultdict(list)
    for r in converted:
        if r["status"] not in ("exact", "converted"):
            label = r["status"] + ": " + reason(r["message"])
            fmt = "" if r["format"] == "float" else "/" + r["format"]
            groups[label].append(f"{r['family'].split('/')[0]}/{r['model']}@{r['exporter']}{fmt}")
    lines.append("\nFailures by message (model@exporter[/format]):")
    for label, names in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        lines.append(f"- {label} [{len(names)}]: {', '.join(names)}")
    quantized = _sibling("zoo_quantized")
    if any(r["format"] in quantized.QUANTIZED for r in converted):
        lines += ["\nThe quantized formats (bench/zoo_quantized.py):\n", quantized.table(rows)]
    exports = collections.defaultdict(list)
    for r in rows:
        if r["status"] == "export failed":
            message = re.sub(r"\x1b\[[0-9;]*m", "", r["message"])[:90]  # no colour codes
            exports[message].append(f"{r['model']}@{r['exporter']}/{r['format']}")
    if exports:
        lines.append("\nExports that failed (the exporter's message):")
        lines += [f"- {m} [{len(n)}]: {', '.join(n)}" for m, n in
                  sorted(exports.items(), key=lambda kv: -len(kv[1]))]
    return "\n".join(lines)
