"""Conversion cost grows linearly with the model, measured without a clock.

Generated models of two sizes (tests/models/generated.py: conv chains with residual adds, and
transformer encoders in primitive ops, 100 and 800 ONNX nodes) are converted in float, with
--quantize (calibrated on 2 samples) and with --weight-only, and three counts are compared per
ONNX node between the sizes:
- Python lines executed in each qconvert module (sys.settrace): a step that scans the graph, the
  arrays or a list once per rewrite shows up as more lines per node in the bigger model, and the
  failure names the module;
- operators visited by whole-graph walks (qconvert.ir.WORK): iterating the operators, or
  rebuilding an index from them, once per rewrite instead of once per pass;
- constant buffers the writer compared byte by byte (WORK): the de-duplication compares only on
  a hash hit.
A linear conversion does the same work per node at both sizes (a little less in the bigger one:
fixed costs spread out).
"""

from __future__ import annotations

import collections
import sys
from pathlib import Path

import numpy as np
import pytest

import qconvert
from tests.harness import convert
from qconvert.ir import WORK
from qconvert.transforms.pipeline import QuantizeOptions
from tests.models.generated import FAMILIES

SMALL, LARGE = 100, 800
PACKAGE = str(Path(qconvert.__file__).parent)
# Allowed growth of the work per node from the small to the large model, and a few lines per node
# of slack for modules that do almost nothing (their count rounds badly).
GROWTH, SLACK_LINES = 1.1, 2.0


def _calibration(model, path: Path) -> str:
    graph_input = model.graph.input[0]
    shape = [d.dim_value for d in graph_input.type.tensor_type.shape.dim]
    samples = np.random.default_rng(0).standard_normal([2] + shape).astype(np.float32)
    np.savez(path, **{graph_input.name: samples})
    return str(path)


def _options(mode: str, model, tmp_path: Path) -> dict:
    if mode == "int8":
        return {"quantize": QuantizeOptions(), "calibration": _calibration(model, tmp_path / "cal.npz")}
    if mode == "weight-only":
        return {"weights": "int8"}
    return {}


def _measure(model, options: dict, traced: tuple[str, ...]) -> tuple[collections.Counter, ...]:
    """(Python lines executed per file under `traced`, WORK) of one conversion, written out."""
    lines: collections.Counter = collections.Counter()

    def trace_lines(frame, event, arg):
        if event == "line":
            lines[frame.f_code.co_filename] += 1
        return trace_lines

    def trace_calls(frame, event, arg):
        return trace_lines if frame.f_code.co_filename.startswith(traced) else None

    WORK.clear()
    data = model.SerializeToString()
    sys.settrace(trace_calls)
    try:
        flatbuffer, _ = convert("<generated>", data=data, **options)
        written = bytes(flatbuffer)
    finally:
        sys.settrace(None)
    assert written[4:8] == b"TFL3"
    return lines, collections.Counter(WORK)


def check_linear(family: str, mode: str, tmp_path: Path, traced: tuple[str, ...] = (PACKAGE,)) -> None:
    per_node = []
    for size in (SMALL, LARGE):
        model = FAMILIES[family](size)
        lines, work = _measure(model, _options(mode, model, tmp_path), traced)
        nodes = len(model.graph.node)
        per_node.append(({m: n / nodes for m, n in lines.items()}, {k: n / nodes for k, n in work.items()}))
    (small_lines, small_work), (large_lines, large_work) = per_node
    grown = [f"{Path(module).name}: {small_lines.get(module, 0):.1f} lines per node at {SMALL} nodes, "
             f"{count:.1f} at {LARGE}"
             for module, count in sorted(large_lines.items())
             if count > GROWTH * small_lines.get(module, 0) + SLACK_LINES]
    assert not grown, "; ".join(grown)
    assert sum(large_lines.values()) <= GROWTH * sum(small_lines.values())
    for counter in ("operator visits", "constant byte compares"):
        assert large_work.get(counter, 0) <= GROWTH * small_work.get(counter, 0) + 0.5, counter
    assert small_work["operator visits"] > 0  # the counter counts


@pytest.mark.parametrize("mode", ["float", "int8", "weight-only"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_work_per_node_does_not_grow_with_the_model(family, mode, tmp_path):
    check_linear(family, mode, tmp_path)


def _scan_per_conv(model) -> bool:
    """A float step that looks at every array for each conv (as steps rebuilt maps per rewrite)."""
    for op in model.operators:
        if op.type == "CONV_2D":
            [name for name, array in model.arrays.items() if array.is_constant]
    return False


def test_a_step_that_scans_per_rewrite_is_caught(monkeypatch, tmp_path):
    """The measurement is sharp enough to fail a step whose cost is one array scan per op."""
    from qconvert.transforms import pipeline

    monkeypatch.setattr(pipeline, "FLOAT_STEPS", pipeline.FLOAT_STEPS + [("scan", _scan_per_conv)])
    with pytest.raises(AssertionError, match="test_linear_cost.py: .* lines per node"):
        check_linear("conv_chain", "float", tmp_path, (PACKAGE, __file__))
