"""Whether the check can run, said before it runs (issue 40).

A check runs the model twice, in onnxruntime and in LiteRT: a Loop whose constant trip count is
2^40 converts in a fraction of a second but is never checked, both runtimes running every
iteration. check_cost counts, before any run, how many node runs one sample takes (a Loop's
constant trip count times its body's count, nested Loops multiplied, the larger branch of an If)
and stops the check with one line (CheckTooCostly) beyond CHECK_NODE_RUNS.

A check onnxruntime cannot run at all is a failure, said in one line: onnxruntime_message keeps the
part of its message that says why (the axes, their sizes and the model's, which its first line
cuts off), and contradicted_shapes refuses up front an --input-shape that contradicts an input's
static dimension (onnxruntime refuses every such input).
"""

from __future__ import annotations

import re

import numpy as np
import onnx
from onnx import numpy_helper

from ..errors import ConversionError, Limit, UsageError

# One sample's node runs in the check (a Loop body's nodes count once per iteration). A recurrent
# model unrolled as a Loop over 512 steps of 40 nodes is 20,480; onnxruntime runs a Loop iteration
# in some microseconds, so the default stays within seconds per sample.
CHECK_NODE_RUNS = Limit("node runs per sample", "QCONVERT_MAX_CHECK_NODE_RUNS", 10_000_000)


class CheckTooCostly(ConversionError):
    """The check would run longer than CHECK_NODE_RUNS allows (the conversion writes the file
    unverified and says why; `qconvert verify` exits 1 with it)."""


def check_cost(proto: onnx.ModelProto, what: str = "the check") -> None:
    """CheckTooCostly naming the costliest Loop when one sample of the model takes more node runs
    than CHECK_NODE_RUNS, before `what` runs it (the check; calibration runs onnxruntime too)."""
    runs, loop = _node_runs(proto.graph, {})
    limit = CHECK_NODE_RUNS.value()
    if runs <= limit:
        return
    name, trip, body = loop
    raise CheckTooCostly(
        f"Loop {name!r} runs its {body:,}-node body {trip:,} times: {runs:,} node runs per "
        f"sample exceed the limit of {limit:,} for {what} (set {CHECK_NODE_RUNS.variable} to "
        "raise it; onnxruntime would run every iteration)")


def _constants(graph: onnx.GraphProto, outer: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The graph's scalar-sized constants by name (initializers, Constant nodes), with `outer`'s."""
    found = dict(outer)
    for init in graph.initializer:
        if np.prod(init.dims, dtype=np.int64) <= 1 and init.data_location != onnx.TensorProto.EXTERNAL:
            found[init.name] = numpy_helper.to_array(init)
    for node in graph.node:
        if node.op_type == "Constant" and node.output:
            for a in node.attribute:
                if a.name == "value" and np.prod(a.t.dims, dtype=np.int64) <= 1:
                    found[node.output[0]] = numpy_helper.to_array(a.t)
                elif a.name == "value_int":
                    found[node.output[0]] = np.array(a.i, np.int64)
    return found


def _trip_count(node: onnx.NodeProto, constants: dict[str, np.ndarray]) -> int:
    """A Loop's constant trip count (1 when it is not constant: the check cannot know it)."""
    name = node.input[0] if node.input else ""
    if name not in constants:
        return 1
    return max(int(np.ravel(constants[name])[0]), 0) if constants[name].size else 1


def _node_runs(graph: onnx.GraphProto, outer: dict[str, np.ndarray]) -> tuple[int, tuple]:
    """(the node runs of one pass through `graph`, the costliest Loop's (name, trip count, body
    node runs)); a Loop's trip count only when it is constant."""
    constants = _constants(graph, outer)
    total, costliest, worst = 0, ("", 1, 1), -1
    for node in graph.node:
        bodies = [a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH]
        counted = [_node_runs(body, constants) for body in bodies]
        inner = max((runs for runs, _ in counted), default=0)
        if node.op_type == "Loop" and bodies:
            trip = _trip_count(node, constants)
            runs = 1 + trip * inner
            if runs > worst:
                costliest, worst = (node.name or node.output[0], trip, inner), runs
        else:
            runs = 1 + inner
            deeper = max(counted, key=lambda c: c[0], default=None)
            if deeper is not None and deeper[0] > worst:
                costliest, worst = deeper[1], deeper[0]
        total += runs
    return total, costliest


# --- what onnxruntime says -----------------------------------------------------------------------
_PREFIX = re.compile(r"^\s*\[ONNXRuntimeError\]\s*:\s*\d+\s*:\s*[A-Z_]+\s*:\s*")
_TAIL = re.compile(r"\s*Please fix either the inputs/outputs or the model\.?\s*$")
_AXES = re.compile(r"index:\s*(\d+)\s+Got:\s*(\d+)\s+Expected:\s*(\d+)")


def onnxruntime_message(error: Exception) -> str:
    """onnxruntime's message on one line with what says why kept: its `[ONNXRuntimeError] : 2 :
    INVALID_ARGUMENT :` prefix and "Please fix" tail dropped, the invalid dimensions' lines as
    `axis 2 is 64, the model's 32`."""
    text = _TAIL.sub("", _PREFIX.sub("", str(error).strip()))
    axes = _AXES.findall(text)
    if axes:
        head = _AXES.split(text)[0].replace(" for the following indices", "").strip()
        text = head + ": " + "; ".join(f"axis {a} is {g}, the model's {e}" for a, g, e in axes)
    return " ".join(text.split()) or type(error).__name__


def shapes_named(message: str, feeds: dict[str, np.ndarray]) -> str:
    """`message`, with the shape given to each input it names ("input: x" in onnxruntime's words)."""
    named = [f"input {n!r} given shape {list(np.shape(v))}" for n, v in feeds.items()
             if re.search(rf"\binput:?\s+{re.escape(n)}\b", message)]
    return message + (f" ({'; '.join(named)})" if named else "")


def contradicted_shapes(proto: onnx.ModelProto, shapes: dict[str, tuple[int, ...]]) -> None:
    """UsageError when an --input-shape gives a static dimension of an input another size (the
    check could not run: onnxruntime refuses such an input), naming the input and both shapes."""
    for value in proto.graph.input:
        if value.name not in shapes or not value.type.tensor_type.HasField("shape"):
            continue
        dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
                for d in value.type.tensor_type.shape.dim]
        asked = tuple(shapes[value.name])
        clash = [k for k, (d, a) in enumerate(zip(dims, asked)) if d is not None and d != a]
        if clash and len(dims) == len(asked):
            shown = ",".join("?" if d is None else str(d) for d in dims)
            raise UsageError(
                f"--input-shape {value.name}:{','.join(map(str, asked))} contradicts the model's "
                f"static shape [{shown}] of input {value.name!r} (axis {clash[0]}); onnxruntime "
                "cannot check it (--no-verify converts at the asked shape unchecked)")
