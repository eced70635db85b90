"""The float check: what "the same model" means for a float conversion (verify.py, Verification
check "float").

Per output, the largest |tflite - onnxruntime| over the output's scale (its largest magnitude over
the samples, at least the range of a bounded function that produces it, see output_rules) must
stay within FLOAT_TOLERANCE; integer and boolean outputs must be equal, but for near-ties of the
step that makes them (an argmax over two values within the tolerance, a Floor or a comparison of a
value within it of the boundary), found from that step's inputs in onnxruntime (step_fetches,
step_values, near_ties). A model that computes in float16 in onnxruntime (onnxconverter-common's
float16 models; the .tflite computes in float32 from the same float16 weights) differs by
float16's rounding, not float32's: its tolerance is FLOAT16_TOLERANCE, and its ulps are float16
steps. Values below float32's smallest normal number compare as zero on both sides: LiteRT
flushes denormals to zero, onnxruntime may not. The rules are read from the ONNX graph; its
weights are not needed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import onnx

from ..onnx.file import attribute
from ..onnx.graph import GraphIndex

FLOAT32_EPS = 2.0 ** -23  # one float32 step (ulp) at 1
# The float check: an output's largest error over its scale. Exact conversions of the onnx
# package's light architectures, PP-OCR and YOLOX models and generated graphs measured at most
# 9.1e-6 (76 ulps, 8 samples), the node conformance cases 2.7e-6: 13 times below. One weight of
# the .tflite negated failed 40 of the 43 cases it changed the outputs of, at 1.3e-4 and up
# (docs/guide.md, Verification).
FLOAT_TOLERANCE = 2.0 ** -13  # 1.2e-4, 1024 ulps of the scale
FLOAT16_EPS = 2.0 ** -10  # one float16 step (ulp) at 1
# A float16 model's float check: onnxruntime rounds its activations to float16, the .tflite keeps
# them float32. BERTs made float16 by onnxconverter-common measured 1 (2 layers) and 1.6 (6 layers)
# float16 ulps of the scale over 8 samples: 10 times below.
FLOAT16_TOLERANCE = 2.0 ** -6  # 1.6e-2, 16 float16 ulps of the scale
# The float check's tolerance by the step (ulp) of the type the reference computes in.
TOLERANCES = {FLOAT32_EPS: FLOAT_TOLERANCE, FLOAT16_EPS: FLOAT16_TOLERANCE}
# Smaller magnitudes are denormal in float32: LiteRT's kernels flush them to zero.
FLOAT32_TINY = float(np.finfo(np.float32).tiny)

# Functions whose values lie within [-r, r]: an output they produce is judged against a scale of
# at least r. Their kernels are accurate to about a float32 step of r, not of the value: LiteRT's
# logistic gives 6e-7 where onnxruntime gives 5e-7 (a saturated sigmoid), a 20 % relative error.
BOUNDED_OPS = {"Sigmoid": 1.0, "HardSigmoid": 1.0, "Tanh": 1.0, "Softsign": 1.0, "Softmax": 1.0,
               "Erf": 1.0, "Sin": 1.0, "Cos": 1.0}
# Ops whose output holds values of their data input (input 0; Concat: every input), moved,
# repeated or selected: a bounded function's range carries through them.
MOVING_OPS = {"Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Concat", "Slice", "Split",
              "Gather", "GatherElements", "GatherND", "Identity", "Dropout", "Expand", "Tile", "Pad",
              "DepthToSpace", "SpaceToDepth", "MaxPool", "GlobalMaxPool", "ReduceMax", "ReduceMin"}
# Ops that keep their input's elements in order (a step's near-ties map through them).
ORDER_KEEPING_OPS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"}
# Steps: an input within rounding of a boundary may land on either side in two float runtimes.
STEP_OPS = {"ArgMax", "ArgMin", "Floor", "Ceil", "Round", "Greater", "Less", "GreaterOrEqual",
            "LessOrEqual", "Equal", "Cast"}
_FLOAT_ELEM_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16,
                     onnx.TensorProto.BFLOAT16}


def ulps_text(value: float, ulp: float = FLOAT32_EPS) -> str:
    """`value` ulps as text: "1.8 ulps", "3 float16 ulps", "inf ulps"."""
    unit = "float16 ulps" if ulp == FLOAT16_EPS else "ulps"
    return f"inf {unit}" if not math.isfinite(value) else f"{value:.3g} {unit}"


def fill_float_view(check, ref: np.ndarray, got: np.ndarray, error: np.ndarray, integral: bool,
                    rule: OutputRule, step_inputs: list | None, ulp: float = FLOAT32_EPS) -> None:
    """Fills the float check's fields of `check`, a verify.OutputCheck (see the module docstring):
    `ref`, `got` and their absolute `error` are [samples, *shape] in float64; an `integral`
    output's values must be equal, a float one's error is measured over its scale."""
    differs = error > 0
    if rule.step is not None and step_inputs is not None and differs.any():
        ties = near_ties(rule.step, step_inputs, ref, got, TOLERANCES[ulp])
        if ties is not None:
            ties &= differs
            check.near_ties = int(ties.sum())
            error = np.where(ties, 0.0, error)
            differs &= ~ties
    if integral:
        check.mismatches = int(differs.sum())
        return
    largest = float(np.abs(ref).max(initial=0.0))
    check.scale = max(largest, rule.floor)
    if rule.floor > largest:
        check.bounded_by = rule.bounded_by
    worst = float(error.max(initial=0.0))
    check.relative_error = 0.0 if worst == 0 else worst / check.scale if check.scale else math.inf
    check.ulps = check.relative_error / ulp


# --- what the ONNX graph says of its outputs ----------------------------------------------------
@dataclass
class OutputRule:
    """How the float check reads one graph output: the floor of its scale (the range of the
    bounded function that produces it, 0: none) and the step op that makes its values (through
    ops that keep the order of its elements), whose near-ties may differ."""

    floor: float = 0.0
    bounded_by: str | None = None
    step: onnx.NodeProto | None = None


def _plain(node: onnx.NodeProto) -> bool:
    return node.domain in ("", "ai.onnx")


def output_rules(proto: onnx.ModelProto) -> dict[str, OutputRule]:
    """Each graph output's OutputRule, read from the ONNX graph (its weights are not needed)."""
    graph = proto.graph
    index = _index(proto)
    producer = index.producers
    floors: dict[str, tuple[float, str | None]] = {}

    def floor(name: str, depth: int = 0) -> tuple[float, str | None]:
        if name in floors:
            return floors[name]
        floors[name] = (0.0, None)  # while it is worked out (a cycle is no model)
        node = producer.get(name)
        found = (0.0, None)
        if node is not None and _plain(node) and depth < 500:
            kind = node.op_type
            if kind in BOUNDED_OPS:
                found = (BOUNDED_OPS[kind], kind)
            elif kind == "Clip":
                found = _clip_range(node, index)
            elif kind in MOVING_OPS or kind == "Cast" and attribute(node, "to") in _FLOAT_ELEM_TYPES:
                sources = [i for i in node.input if i] if kind == "Concat" else node.input[:1]
                parts = [floor(i, depth + 1) for i in sources]
                if parts and all(p[0] > 0 for p in parts):
                    found = max(parts, key=lambda p: p[0])
        floors[name] = found
        return found

    def step(name: str, depth: int = 0) -> onnx.NodeProto | None:
        node = producer.get(name)
        while node is not None and _plain(node) and depth < 500:
            if node.op_type in ORDER_KEEPING_OPS:
                node, depth = producer.get(node.input[0]), depth + 1
            elif node.op_type == "Cast":
                to = attribute(node, "to")
                inner = step(node.input[0], depth + 1)
                if inner is not None or to in _FLOAT_ELEM_TYPES:
                    return inner  # Cast from a step keeps its values; to float, no step
                return node  # to an integer or bool: truncates (at run time: if its input is float)
            else:
                return node if node.op_type in STEP_OPS else None
        return None

    rules = {}
    for value in graph.output:
        bound, by = floor(value.name)
        rules[value.name] = OutputRule(bound, by, step(value.name))
    return rules


def _index(proto: onnx.ModelProto) -> GraphIndex:
    """The index of the model's graph with the constants the float check reads: initializers
    that hold their data (read_onnx leaves big ones in the file) and the values of Constant nodes
    given as `value` or `value_float` (the Clip bounds and step operands it meets)."""
    return GraphIndex(proto.graph, constant_attributes=("value", "value_float"))


def _clip_range(node: onnx.NodeProto, constants: GraphIndex) -> tuple[float, str | None]:
    """A Clip with both bounds constant is bounded by the larger magnitude of the two."""
    bounds = [attribute(node, "min"), attribute(node, "max")]
    for k, name in enumerate(node.input[1:3]):
        if name:
            value = constants.constant(name)
            bounds[k] = None if value is None or value.size != 1 else float(value.reshape(()))
    if any(b is None or not math.isfinite(b) for b in bounds):
        return 0.0, None
    return max(abs(bounds[0]), abs(bounds[1])), "Clip"


def step_fetches(proto: onnx.ModelProto, rules: dict[str, OutputRule]) -> list[str]:
    """The tensors onnxruntime must give besides the outputs for the near-ties: the steps'
    inputs that are not constants."""
    constants = _index(proto)
    names = []
    for rule in rules.values():
        if rule.step is not None:
            names += [i for i in _step_operands(rule.step) if i not in constants]
    return list(dict.fromkeys(names))


def _step_operands(node: onnx.NodeProto) -> list[str]:
    return [i for i in node.input[:2 if node.op_type in _COMPARISONS else 1] if i]


_COMPARISONS = {"Greater", "Less", "GreaterOrEqual", "LessOrEqual", "Equal"}


def step_values(proto: onnx.ModelProto, rules: dict[str, OutputRule],
                fetched: dict[str, np.ndarray]) -> dict[str, list[np.ndarray] | None]:
    """Per output with a step: its operands [samples, *shape] (None: one is missing)."""
    constants = _index(proto)
    result = {}
    for name, rule in rules.items():
        if rule.step is None:
            continue
        operands = []
        for operand in _step_operands(rule.step):
            value = fetched[operand] if operand in fetched else constants.constant(operand)
            if value is None:
                operands = None
                break
            operands.append(value if operand in fetched else np.asarray(value)[None])
        result[name] = operands
    return result


def near_ties(node: onnx.NodeProto, operands: list[np.ndarray], ref: np.ndarray,
              got: np.ndarray, tolerance: float = FLOAT_TOLERANCE) -> np.ndarray | None:
    """Where the output's values ([samples, *shape], through ops that keep the order) may differ
    because the step `node` saw operands ([samples or 1, *shape] each) within `tolerance` (the
    float check's) of their scale from a boundary: ArgMax/ArgMin, the .tflite's index holding a value that close to
    the one at onnxruntime's; Floor, Ceil, Cast to an integer, an integer that close (Round: a
    half-integer; Cast to bool: zero); a comparison, its two operands that close. None: no float
    operands, or shapes that do not tell."""
    if not operands or any(np.asarray(o).dtype.kind != "f" or not np.size(o) for o in operands):
        return None
    rank = max(np.ndim(o) for o in operands) - 1
    operands = [np.asarray(o, np.float64) for o in operands]
    operands = [o.reshape((len(o),) + (1,) * (rank + 1 - o.ndim) + o.shape[1:]) for o in operands]
    scale = max(float(np.abs(np.where(np.isfinite(o), o, 0.0)).max()) for o in operands)
    margin = tolerance * scale
    kind = node.op_type
    if kind in ("ArgMax", "ArgMin"):
        (x,) = operands
        axis = attribute(node, "axis", 0)
        axis = axis + rank if axis < 0 else axis
        if not 0 <= axis < rank or len(x) != len(ref):
            return None
        shape = x.shape[:axis + 1] + (1,) + x.shape[axis + 2:]
        if ref.size != int(np.prod(shape)):
            return None
        ours, theirs = ref.reshape(shape).astype(np.int64), got.reshape(shape).astype(np.int64)
        inside = (theirs >= 0) & (theirs < x.shape[axis + 1])
        at_ours = np.take_along_axis(x, np.clip(ours, 0, x.shape[axis + 1] - 1), axis + 1)
        at_theirs = np.take_along_axis(x, np.where(inside, theirs, 0), axis + 1)
        return (inside & (np.abs(at_theirs - at_ours) <= margin)).reshape(ref.shape)
    x = operands[0]
    if kind in _COMPARISONS:
        try:
            gap = np.abs(x - operands[1])
        except ValueError:
            return None
    elif kind == "Round":
        gap = np.abs(x - np.floor(x) - 0.5)
    elif kind == "Cast" and attribute(node, "to") == onnx.TensorProto.BOOL:
        gap = np.abs(x)
    else:  # Floor, Ceil, Cast to an integer
        gap = np.abs(x - np.round(x))
    if len(gap) == 1 and len(ref) > 1:
        gap = np.broadcast_to(gap, (len(ref),) + gap.shape[1:])
    if gap.size != ref.size:
        return None
    return (gap <= margin).reshape(ref.shape)


def computes_in_float16(proto: onnx.ModelProto) -> bool:
    """Whether onnxruntime computes part of the model in float16: a float16 weight, graph input,
    output or intermediate value, or a Cast to float16 (a float16 model keeping float32 inputs
    and outputs, as onnxconverter-common's keep_io_types writes it)."""
    half = onnx.TensorProto.FLOAT16
    graph = proto.graph
    values = list(graph.input) + list(graph.output) + list(graph.value_info)
    return (any(t.data_type == half for t in graph.initializer)
            or any(v.type.tensor_type.elem_type == half for v in values if v.type.HasField("tensor_type"))
            or any(n.op_type == "Cast" and attribute(n, "to") == half for n in graph.node))
