"""The per-tensor report: where a written model departs from the float ONNX model, tensor by tensor
and op by op, as JSON or as one self-contained HTML page.

Every activation tensor of the .tflite that has an ONNX counterpart is compared with
onnxruntime's value of it on the verification samples (LiteRT runs without a delegate and keeps
every tensor). Counterparts are found by name: qconvert keeps ONNX names, and names the tensors it
creates after the ONNX tensor they hold, with a suffix: `<name>_nhwc` holds <name> channels-last,
`<name>_int8` / `_uint8` / `_int16` / `_dequantized` hold <name> in another type (suffixes
combine: `x_nhwc_int8`). Any other tensor (a decomposition's intermediate, a name made unique with
`_<n>`) has no counterpart and is counted in "unmatched"; so is one whose shape does not fit.

For every op: the SQNR of its output, of its worst activation input, their difference (the error
amplification: negative when the op loses accuracy), its precision (the type it computes in) and,
for a conversion, its ONNX node, why it stayed float and where each tensor's range came from.
Ops are listed losing the most first. Amplification counts SQNR above SQNR_CEILING as
SQNR_CEILING: beyond that an error is negligible next to int8 rounding, and the exact float input
of the first QUANTIZE would otherwise always rank first.
"""

from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass, field

import numpy as np
import onnx

from ..errors import UsageError
from ..ir import CHANNELS_LAST, counterpart
from ..onnx.loader import node_names
from ..tflite.reader import read
from ..tflite.reader import io_layout_metadata
from .metrics import json_number
from .runtimes import prepare, run_both

SQNR_CEILING = 60.0
# Ops whose output holds their first input's values rearranged: an output without an ONNX
# counterpart (a reordered flatten) still has that input's SQNR as its readers' input.
VALUE_MOVING = {"RESHAPE", "TRANSPOSE", "SQUEEZE", "EXPAND_DIMS"}


@dataclass
class ConversionNotes:
    """What a conversion knows of the written model that the file does not say."""

    op_nodes: list[str] = field(default_factory=list)  # each written op's source node
    float_reasons: list[str] = field(default_factory=list)  # why each op stayed float ("" if not)
    range_sources: dict[str, str] = field(default_factory=dict)  # tensor -> where its range came from
    # tensor -> the ONNX values over the file's, per channel (equalize_channel_ranges): kept here,
    # not in the file (files written before kept them in its io-layout metadata, still read).
    channel_scales: dict[str, np.ndarray] = field(default_factory=dict)


class _Comparison:
    """Running signal and noise energy of one tensor over the samples."""

    def __init__(self, index: int, onnx_name: str, layout, quantization, channel_scale=None):
        self.index, self.onnx_name, self.layout = index, onnx_name, layout
        self.quantization = quantization
        self.channel_scale = channel_scale  # the file's values are the ONNX ones over this
        self.signal = self.noise = 0.0
        self.fits = True

    def add(self, reference: np.ndarray, value: np.ndarray) -> None:
        if self.quantization is not None:
            scale, zero_point = self.quantization
            value = (value.astype(np.float32) - np.float32(zero_point)) * np.float32(scale)
        if self.channel_scale is not None:  # equalized channels (last axis of the file's tensor)
            value = value.astype(np.float32) * self.channel_scale
        perm = self.layout
        if perm == CHANNELS_LAST:
            perm = (0,) + tuple(range(2, value.ndim)) + (1,) if value.ndim >= 3 else None
        if perm is not None:
            value = np.transpose(value, np.argsort(perm))
        if value.shape != np.shape(reference):
            self.fits = False
            return
        ref = np.asarray(reference, np.float32)
        value = np.asarray(value, np.float32)
        known = np.isfinite(ref)
        if not known.all():  # as verify.check_output: no reference, nothing to compare
            ref, value = np.where(known, ref, 0), np.where(known, value, 0)
        # A value of the .tflite that is not finite makes the noise so: sqnr_db gives -inf.
        difference = value - ref
        # Dot products: the energies in one pass each (float32 sums are ample for decibels).
        self.signal += float(np.vdot(ref, ref))
        self.noise += float(np.vdot(difference, difference))

    @property
    def sqnr_db(self) -> float:
        if self.noise == 0:
            return math.inf
        if self.signal == 0 or not math.isfinite(self.noise):
            return -math.inf
        return 10 * math.log10(self.signal / self.noise)


def build_report(proto: onnx.ModelProto, tflite_path: str, samples=None, count: int = 8,
                 notes: ConversionNotes | None = None) -> dict:
    """The report's content (see the module docstring); `proto` must hold its weights."""
    model, samples = prepare(proto, tflite_path, samples, count, preserve_all=True)
    with open(tflite_path, "rb") as f:
        summary = read(f.read())
    onnx_names = {o for node in proto.graph.node for o in node.output} | {i.name for i in proto.graph.input}
    details = {d["index"]: d for d in model.interpreter.get_tensor_details()}
    recorded = io_layout_metadata(tflite_path)
    io_layouts = {name: tuple(perm) for name, perm in recorded.get("outputs", {}).items()}
    channel_scales = notes.channel_scales if notes is not None else recorded.get("channel_scales", {})
    io_layouts.update((p.onnx_name, p.permutation) for p in model.inputs if p.permutation)
    comparisons, unmatched = {}, []
    for index, tensor in enumerate(summary.tensors):
        if tensor.data_offset is not None or tensor.dtype not in _COMPARED:
            continue  # constants, and tensors of indices or booleans
        found = counterpart(tensor.name, onnx_names, io_layouts)
        if found is None:
            unmatched.append(tensor.name)
            continue
        quantization = (tensor.scales[0], tensor.zero_points[0]) if len(tensor.scales) == 1 else None
        scale = channel_scales.get(tensor.name)
        comparisons[index] = _Comparison(index, found[0], found[1], quantization,
                                         None if scale is None else np.asarray(scale, np.float32))
    extra = sorted({c.onnx_name for c in comparisons.values()})
    for reference, _ in run_both(proto, model, samples, extra):
        for index, comparison in comparisons.items():
            value = reference.get(comparison.onnx_name)
            if value is not None and np.asarray(value).dtype.kind == "f":
                comparison.add(value, model.interpreter.get_tensor(details[index]["index"]))
    for index in [i for i, c in comparisons.items() if not c.fits]:
        unmatched.append(summary.tensors[index].name)
        del comparisons[index]
    return _content(proto, summary, comparisons, unmatched, len(samples), notes)


_COMPARED = {"FLOAT32", "FLOAT16", "INT8", "UINT8", "INT16"}


def _precision(dtypes: list[str]) -> str:
    for kind, name in (("INT8", "int8"), ("UINT8", "int8"), ("INT16", "int16")):
        if kind in dtypes:
            return name
    return "float" if any(d.startswith("FLOAT") for d in dtypes) else (dtypes[0].lower() if dtypes else "-")


def _content(proto, summary, comparisons: dict, unmatched: list[str], samples: int,
             notes: ConversionNotes | None) -> dict:
    producer_node = {}
    for name, node in zip(node_names(proto), proto.graph.node):
        for output in node.output:
            producer_node[output] = name
    sqnr = {index: c.sqnr_db for index, c in comparisons.items()}
    for op in summary.operators:  # a tensor only rearranged from a compared one has its SQNR
        if op.name in VALUE_MOVING and op.inputs and op.inputs[0] in sqnr:
            for out in op.outputs:
                sqnr.setdefault(out, sqnr[op.inputs[0]])
    tensors = []
    for index, c in sorted(comparisons.items()):
        tensor = summary.tensors[index]
        tensors.append({
            "name": tensor.name, "onnx_name": c.onnx_name, "sqnr_db": c.sqnr_db, "dtype": tensor.dtype.lower(),
            "shape": tensor.shape, "scale": tensor.scales[0] if tensor.scales else None,
            "zero_point": tensor.zero_points[0] if tensor.zero_points else None,
            "range_source": (notes.range_sources.get(tensor.name, "-") if notes else "-")})
    ops = []
    for k, op in enumerate(summary.operators):
        outputs = [i for i in op.outputs if i in comparisons]
        inputs = [i for i in op.inputs if i in sqnr]
        out = sqnr[outputs[0]] if outputs else None
        worst_in = min((sqnr[i] for i in inputs), default=None)
        amplification = None
        if out is not None and worst_in is not None:
            amplification = min(out, SQNR_CEILING) - min(worst_in, SQNR_CEILING)
        node = notes.op_nodes[k] if notes and k < len(notes.op_nodes) else ""
        if not node:
            named = [comparisons[i].onnx_name for i in outputs]
            node = producer_node.get(named[0], "-") if named else "-"
        dtypes = [summary.tensors[i].dtype for i in op.outputs if i >= 0]
        ops.append({"index": k, "type": op.name, "node": node, "precision": _precision(dtypes),
                    "output_sqnr_db": out, "worst_input_sqnr_db": worst_in,
                    "amplification_db": amplification,
                    "float_reason": notes.float_reasons[k] if notes and k < len(notes.float_reasons) else ""})
    ranked = sorted(ops, key=lambda o: (o["amplification_db"] is None, o["amplification_db"] or 0, o["index"]))
    return {"samples": samples, "tensors": tensors, "ops": ranked, "unmatched": unmatched,
            "outputs": [summary.tensors[i].name for i in _graph_outputs(summary)]}


def _graph_outputs(summary) -> list[int]:
    names = set(summary.signature_outputs)
    return [k for k, t in enumerate(summary.tensors) if t.name in names]


def _jsonable(value):
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return json_number(value)


def write_report(content: dict, path: str) -> None:
    """Writes the report as JSON (path ending in .json) or HTML (.html)."""
    if path.endswith(".json"):
        text = json.dumps(_jsonable(content), indent=1)
    elif path.endswith((".html", ".htm")):
        text = html_page(content)
    else:
        raise UsageError(f"--report {path}: the file name must end in .json or .html")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


# --- the HTML page ---------------------------------------------------------------------------
PLOT_WIDTH, PLOT_HEIGHT, MARGIN = 960, 320, 48
PLOT_TOP_DB = 100.0  # SQNR above this (and exact matches) are drawn at the top
LABELLED, LABEL_LOSS_DB = 5, 1.0  # the 5 ops that lose the most, 1 dB or more, are labelled


def _db_text(value) -> str:
    if value is None:
        return "-"
    return "exact" if value == math.inf else f"{value:.1f}"


def _plot(ops: list[dict]) -> str:
    """SQNR of each op's output along the execution order: int8 ops as dots, float ops as
    squares, the ops that lose the most labelled."""
    points = sorted((o for o in ops if o["output_sqnr_db"] is not None), key=lambda o: o["index"])
    count = max((o["index"] for o in ops), default=0) + 1
    lowest = min([0.0] + [o["output_sqnr_db"] for o in points if o["output_sqnr_db"] != -math.inf])

    def x(index):
        return MARGIN + (PLOT_WIDTH - 2 * MARGIN) * (index + 0.5) / count

    def y(db):
        db = min(max(db, lowest), PLOT_TOP_DB)
        return MARGIN + (PLOT_HEIGHT - 2 * MARGIN) * (PLOT_TOP_DB - db) / (PLOT_TOP_DB - lowest)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{PLOT_WIDTH}" height="{PLOT_HEIGHT}" '
             f'viewBox="0 0 {PLOT_WIDTH} {PLOT_HEIGHT}" role="img" aria-label="SQNR per op">']
    for db in range(int(math.ceil(lowest / 20) * 20), int(PLOT_TOP_DB) + 1, 20):
        parts.append(f'<line x1="{MARGIN}" x2="{PLOT_WIDTH - MARGIN}" y1="{y(db):.1f}" y2="{y(db):.1f}" '
                     f'class="grid"/><text x="{MARGIN - 6}" y="{y(db) + 4:.1f}" class="axis" '
                     f'text-anchor="end">{db}</text>')
    parts.append(f'<text x="{MARGIN}" y="{MARGIN - 18}" class="axis">output SQNR (dB) of each op, in '
                 'execution order; squares: ops that stayed float</text>')
    if points:
        line = " ".join(f"{x(o['index']):.1f},{y(o['output_sqnr_db']):.1f}" for o in points)
        parts.append(f'<polyline points="{line}" class="trace"/>')
    for o in points:
        cx, cy = x(o["index"]), y(o["output_sqnr_db"])
        if o["precision"] == "float":
            parts.append(f'<rect x="{cx - 4:.1f}" y="{cy - 4:.1f}" width="8" height="8" class="float">'
                         f'<title>{html.escape(_label(o))}</title></rect>')
        else:
            parts.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="3.5" class="quant">'
                         f'<title>{html.escape(_label(o))}</title></circle>')
    losing = [o for o in ops if o["amplification_db"] is not None and o["amplification_db"] <= -LABEL_LOSS_DB]
    for o in losing[:LABELLED]:
        cx, cy = x(o["index"]), y(o["output_sqnr_db"])
        parts.append(f'<text x="{cx + 6:.1f}" y="{cy + 14:.1f}" class="label">'
                     f'{html.escape(o["node"])} ({o["amplification_db"]:+.1f} dB)</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def _label(op: dict) -> str:
    return (f"#{op['index']} {op['type']} {op['node']} ({op['precision']}): "
            f"{_db_text(op['output_sqnr_db'])} dB")


STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 28px; }
table { border-collapse: collapse; } td, th { padding: 2px 10px; border-bottom: 1px solid #ddd; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
.grid { stroke: #e4e4e4; } .axis { font-size: 11px; fill: #666; }
.trace { fill: none; stroke: #9bb8d8; stroke-width: 1; }
.quant { fill: #1f5fa8; } .float { fill: #e07b00; } .label { font-size: 11px; fill: #b00020; }
.bad { color: #b00020; font-weight: 600; }
"""


def html_page(content: dict) -> str:
    """One self-contained page: the plot, then the ops (losing the most first), then the
    tensors. No script, no external resource."""
    ops, tensors = content["ops"], content["tensors"]
    rows = []
    for o in ops:
        bad = o["amplification_db"] is not None and o["amplification_db"] < -6
        rows.append("<tr>" + "".join([
            f'<td class="n">{o["index"]}</td>', f"<td>{html.escape(o['type'])}</td>",
            f"<td>{html.escape(o['node'])}</td>", f"<td>{o['precision']}</td>",
            f'<td class="n">{_db_text(o["output_sqnr_db"])}</td>',
            f'<td class="n">{_db_text(o["worst_input_sqnr_db"])}</td>',
            f'<td class="n{" bad" if bad else ""}">{_db_text(o["amplification_db"])}</td>',
            f"<td>{html.escape(o['float_reason'])}</td>"]) + "</tr>")
    tensor_rows = []
    for t in tensors:
        scale = "-" if t["scale"] is None else f"{t['scale']:.4g}"
        zero = "-" if t["zero_point"] is None else str(t["zero_point"])
        tensor_rows.append("<tr>" + "".join([
            f"<td>{html.escape(t['name'])}</td>", f'<td class="n">{_db_text(t["sqnr_db"])}</td>',
            f"<td>{t['dtype']}</td>", f'<td class="n">{scale}</td>', f'<td class="n">{zero}</td>',
            f"<td>{html.escape(t['range_source'])}</td>"]) + "</tr>")
    worst = [o for o in ops if o["amplification_db"] is not None][:3]
    headline = ", ".join(f"{html.escape(o['node'])} ({o['type']}, {o['amplification_db']:+.1f} dB)"
                         for o in worst) or "no op loses accuracy measurably"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>qconvert report</title>
<style>{STYLE}</style></head><body>
<h1>qconvert report: where the converted model departs from the ONNX model</h1>
<p>{content["samples"]} samples. Ops losing the most: {headline}.</p>
{_plot(ops)}
<h2>Ops, losing the most first</h2>
<table><tr><th class="n">#</th><th>op</th><th>ONNX node</th><th>precision</th>
<th class="n">output dB</th><th class="n">worst input dB</th><th class="n">amplification dB</th>
<th>stayed float because</th></tr>
{"".join(rows)}
</table>
<h2>Tensors</h2>
<table><tr><th>tensor</th><th class="n">SQNR dB</th><th>dtype</th><th class="n">scale</th>
<th class="n">zero point</th><th>range from</th></tr>
{"".join(tensor_rows)}
</table>
<p>{len(content["unmatched"])} tensors without an ONNX counterpart are not compared.</p>
</body></html>
"""
