"""Verification: the ONNX model in onnxruntime and a .tflite in LiteRT on the same inputs.

Works for any .tflite, also one another tool wrote. Inputs and outputs are paired by the file's
signature names, then by order and shape; each pair's layout permutation comes from the file's
`qconvert_io_layout` metadata when qconvert wrote it (see tflite/writer.py), else from the shapes
(equal shapes: none; otherwise the channels-last permutation, or the first permutation that fits).
int8/uint8/int16 inputs and outputs are quantized and dequantized with the tensor's params.

Per model output, over all samples: SQNR (10 log10 of the reference's energy over the error's),
max and mean absolute error, cosine similarity, top-1 agreement when the output is
classifier-shaped (one axis longer than 1), and the worst slice along the output's feature axis
(the shortest axis longer than 1 after the first, when two are): the SQNR of every slice, the
lowest one named, so that a collapsed score channel inside a tensor that box coordinates dominate
shows. In a slice, differences within SLICE_TOLERANCE of the output's largest magnitude do not
count: two float runtimes differ by that much from summation order alone, and a slice of small
values would otherwise look broken in a faithful float conversion.

The float check (a float conversion's verification, Verification.check "float") judges what float
means instead: per output, the largest |tflite - onnxruntime| over the output's scale (its largest
magnitude over the samples, at least the range of a bounded function that produces it, see
output_rules) must stay within FLOAT_TOLERANCE; integer and boolean outputs must be equal, but for
near-ties of the step that makes them (an argmax over two values within the tolerance, a Floor or a
comparison of a value within it of the boundary), found from that step's inputs in onnxruntime.
A model that computes in float16 in onnxruntime (onnxconverter-common's float16 models; the .tflite
computes in float32 from the same float16 weights) differs by float16's rounding, not float32's:
its tolerance is FLOAT16_TOLERANCE, and its ulps are float16 steps. Values below float32's smallest
normal number compare as zero on both sides: LiteRT flushes denormals to zero, onnxruntime may not.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import sys
from dataclasses import asdict, dataclass, field

import numpy as np
import onnx

from ..errors import ConversionError, ReferenceFailed, first_line
from ..onnx.file import attribute
from ..tflite.reader import io_layout_metadata

INTEGER_INPUT_HIGH = 10  # generated integer inputs are uniform in [0, 10)
SLICE_TOLERANCE = 2.0 ** -16  # relative to the output's largest magnitude (128 float32 steps)
FLOAT32_EPS = 2.0 ** -23  # one float32 step (ulp) at 1
# The float check: an output's largest error over its scale. Exact conversions of the onnx
# package's light architectures, PP-OCR and YOLOX models and generated graphs measured at most
# 9.1e-6 (76 ulps, 8 samples), the node conformance cases 2.7e-6: 13 times below. One weight of
# the .tflite negated failed 40 of the 43 cases it changed the outputs of, at 1.3e-4 and up
# (README, Verification).
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


@dataclass
class OutputCheck:
    """How one model output of the .tflite compares with onnxruntime's."""

    name: str
    sqnr_db: float
    worst_slice_sqnr_db: float | None  # None: no feature axis (or no slice with a signal)
    worst_slice: str | None  # "axis 1, index 5" of that slice
    max_abs_error: float
    mean_abs_error: float
    cosine: float
    top1_agreement: float | None  # None: not classifier-shaped
    # The float check's view (see the module docstring); computed for every verification.
    scale: float | None = None  # float output: its largest magnitude, at least its bounded_by's range
    bounded_by: str | None = None  # the bounded function whose range floors the scale
    relative_error: float | None = None  # float output: max_abs_error (near-ties aside) / scale
    ulps: float | None = None  # relative_error in steps (float32's, float16's) of the scale
    mismatches: int | None = None  # integer or boolean output: values that differ (near-ties aside)
    near_ties: int = 0  # values that differ at a near-tie of the step that makes them

    def float_failure(self, tolerance: float, ulp: float = FLOAT32_EPS) -> str | None:
        """How the output misses the float check (`ulp`: one step at 1 of the type the reference
        computes in), or None."""
        if self.mismatches:
            return f"output {self.name!r}: {self.mismatches} values differ from onnxruntime's"
        if self.relative_error is not None and not self.relative_error <= tolerance:
            return (f"output {self.name!r} max error {self.max_abs_error:.2g} is "
                    f"{self.relative_error:.1e} of its scale {self.scale:.3g} ({_ulps(self.ulps, ulp)}), "
                    f"above the float tolerance {tolerance:.1e} ({_ulps(tolerance / ulp, ulp)})")
        return None


def _ulps(value: float, ulp: float = FLOAT32_EPS) -> str:
    unit = "float16 ulps" if ulp == FLOAT16_EPS else "ulps"
    return f"inf {unit}" if not math.isfinite(value) else f"{value:.3g} {unit}"


@dataclass
class Verification:
    outputs: list[OutputCheck]
    samples: int
    min_sqnr: float | None = None
    passed: bool = True
    data: str = "generated"  # where the inputs came from
    check: str = "sqnr"  # "float": a float conversion, judged by the float check; "sqnr": by SQNR
    tolerance: float | None = None  # the float check's FLOAT_TOLERANCE (FLOAT16_TOLERANCE)
    ulp: float = FLOAT32_EPS  # a step at 1 of the type the reference computes in (FLOAT16_EPS)
    reason: str | None = None  # why a model is judged by SQNR rather than exactly (run_time_quantization)

    @property
    def worst(self) -> OutputCheck:
        return min(self.outputs, key=lambda o: o.sqnr_db)

    @property
    def worst_float(self) -> OutputCheck | None:
        """The float output with the largest relative error (None: no float output)."""
        floats = [o for o in self.outputs if o.relative_error is not None]
        return max(floats, key=lambda o: o.relative_error) if floats else None

    def float_failures(self) -> list[str]:
        """The float check's failures, described (none unless check is "float")."""
        if self.check != "float":
            return []
        return [f for f in (o.float_failure(self.tolerance, self.ulp) for o in self.outputs) if f]

    @property
    def worst_slice(self) -> OutputCheck | None:
        sliced = [o for o in self.outputs if o.worst_slice_sqnr_db is not None]
        return min(sliced, key=lambda o: o.worst_slice_sqnr_db) if sliced else None

    def below(self, threshold: float) -> list[str]:
        """The outputs (or their worst slice) below `threshold` dB, described."""
        low = []
        for o in self.outputs:
            if o.sqnr_db < threshold:
                low.append(f"{o.name} {_db(o.sqnr_db)}")
            elif o.worst_slice_sqnr_db is not None and o.worst_slice_sqnr_db < threshold:
                low.append(f"{o.name} ({o.worst_slice}) {_db(o.worst_slice_sqnr_db)}")
        return low

    def summary(self) -> str:
        """`verify: worst output 'y' 41.2 dB, worst slice 'y' axis 1, index 4 22.0 dB (8 samples)`,
        for the float check `verify: float, worst output 'y' max error 2.1e-07 of its scale 1 (1.8
        ulps) (1 sample)`."""
        count = f"({self.samples} sample{'s' if self.samples != 1 else ''})"
        if self.check == "float":
            failures = self.float_failures()
            if failures:
                return f"verify: float, {'; '.join(failures)} {count}"
            worst = self.worst_float
            ties = sum(o.near_ties for o in self.outputs)
            plural = "s" if ties != 1 else ""
            if worst is None:
                text = "verify: float, every output equal" + (f" but for {ties} near-tie{plural}"
                                                              if ties else "")
            else:
                text = (f"verify: float, worst output {worst.name!r} max error "
                        f"{worst.max_abs_error:.2g} of its scale {worst.scale:.3g} "
                        f"({_ulps(worst.ulps, self.ulp)})")
                text += f", {ties} near-tie{plural}" if ties else ""
            return f"{text} {count}"
        worst = self.worst
        text = f"verify: worst output {worst.name!r} {_db(worst.sqnr_db)}"
        if self.reason:
            text = f"verify: by SQNR, {self.reason}; worst output {worst.name!r} {_db(worst.sqnr_db)}"
        sliced = self.worst_slice
        if sliced is not None:
            text += f", worst slice {sliced.name!r} {sliced.worst_slice} {_db(sliced.worst_slice_sqnr_db)}"
        return f"{text} {count}"

    def as_dict(self) -> dict:
        result = asdict(self)
        if result["reason"] is None:
            del result["reason"]  # only a model judged by SQNR for a reason has one
        result["outputs"] = [{k: json_number(v) for k, v in o.items()} for o in result["outputs"]]
        return result


def _db(value: float) -> str:
    return "inf dB" if value == math.inf else f"{value:.1f} dB"


def json_number(value):
    """JSON has no infinity: an exact match's SQNR is written as the string "inf"."""
    if isinstance(value, float) and not math.isfinite(value):
        return "inf" if value > 0 else "-inf" if value < 0 else "nan"
    return value


# --- metrics ---------------------------------------------------------------------------------
def sqnr_db(reference: np.ndarray, actual: np.ndarray, tolerance: float = 0.0) -> float:
    """10 log10(sum ref^2 / sum (actual - ref)^2), errors first reduced by `tolerance`: inf for
    a match, -inf for an error on a zero reference or a value that is not finite (a NaN or an
    infinity where the reference is finite)."""
    ref = reference.astype(np.float64)
    error = np.abs(actual.astype(np.float64) - ref)
    if tolerance:
        error = np.maximum(error - tolerance, 0.0)
    noise = float(np.sum(error ** 2))
    signal = float(np.sum(ref ** 2))
    if noise == 0:
        return math.inf
    if signal == 0 or not math.isfinite(noise):
        return -math.inf
    return 10 * math.log10(signal / noise)


def feature_axis(shape: tuple[int, ...]) -> int | None:
    """The output's channel/feature axis. A rank-4 output is an NCHW map (the ONNX layout): its
    channels, axis 1, or none for a single-channel map (a segmenter's probabilities: its rows or
    columns are no features). Otherwise the shortest axis longer than 1 after the first (the last
    of equals); None unless two axes after the first are longer than 1 (a classifier's
    [1, classes] has no slices: each would hold one value per sample, and top-1 agreement
    speaks for it)."""
    if len(shape) == 4:
        return 1 if shape[1] > 1 else None
    axes = [a for a in range(1, len(shape)) if shape[a] > 1]
    return min(reversed(axes), key=lambda a: shape[a]) if len(axes) >= 2 else None


def check_output(name: str, reference: np.ndarray, actual: np.ndarray,
                 rule: OutputRule | None = None, step_inputs: list | None = None,
                 ulp: float = FLOAT32_EPS) -> OutputCheck:
    """The metrics of one output; both are [samples, *shape] in the ONNX layout. Where the
    reference itself is not finite (onnxruntime overflowed), there is nothing to compare: those
    values count as matching; a non-finite value of the .tflite elsewhere is an infinite error.
    Magnitudes below float32's smallest normal count as zero (LiteRT flushes denormals).
    `rule` (output_rules) gives the float check's scale floor and the step that makes the output;
    `step_inputs` that step's inputs in onnxruntime, [samples, *shape] each, to find near-ties."""
    rule = rule or OutputRule()
    integral = reference.dtype.kind in "iub"
    ref = reference.astype(np.float64)
    got = actual.astype(np.float64)
    if not integral:
        ref = np.where(np.abs(ref) < FLOAT32_TINY, 0.0, ref)
        got = np.where(np.abs(got) < FLOAT32_TINY, 0.0, got)
    if ref.shape != got.shape:
        raise ConversionError(f"output {name!r}: the .tflite gives shape {list(got.shape[1:])}, "
                              f"onnxruntime {list(ref.shape[1:])}")
    unknown = ~np.isfinite(ref)
    if unknown.any():
        ref, got = np.where(unknown, 0.0, ref), np.where(unknown, 0.0, got)
    error = np.where(np.isfinite(got), np.abs(got - ref), np.inf)
    if np.isfinite(got).all():
        norms = float(np.linalg.norm(ref)) * float(np.linalg.norm(got))
        cosine = float(np.sum(ref * got)) / norms if norms else (1.0 if not error.any() else 0.0)
    else:
        cosine = math.nan
    check = OutputCheck(name, sqnr_db(ref, got), None, None, float(error.max(initial=0.0)),
                        float(error.mean()) if error.size else 0.0, cosine, None)
    per_sample = ref.shape[1:]
    if sum(d > 1 for d in per_sample) == 1 and ref.size:
        count = len(ref)
        check.top1_agreement = float(np.mean(ref.reshape(count, -1).argmax(1)
                                             == got.reshape(count, -1).argmax(1)))
    axis = feature_axis(ref.shape[1:])
    if axis is not None:
        moved_ref = np.moveaxis(ref, axis + 1, 0).reshape(ref.shape[axis + 1], -1)
        moved_got = np.moveaxis(got, axis + 1, 0).reshape(ref.shape[axis + 1], -1)
        tolerance = float(np.abs(ref).max()) * SLICE_TOLERANCE
        slices = [(sqnr_db(r, g, tolerance), k) for k, (r, g) in enumerate(zip(moved_ref, moved_got))
                  if np.any(r)]
        if slices:
            worst, index = min(slices)
            check.worst_slice_sqnr_db, check.worst_slice = worst, f"axis {axis}, index {index}"
    _float_view(check, ref, got, error, integral, rule, step_inputs, ulp)
    return check


def _float_view(check: OutputCheck, ref: np.ndarray, got: np.ndarray, error: np.ndarray,
                integral: bool, rule: OutputRule, step_inputs: list | None,
                ulp: float = FLOAT32_EPS) -> None:
    """Fills the float check's fields of `check` (see the module docstring)."""
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


class _Constants:
    """The graph's constants by name, converted when asked for: initializers that hold their data
    (read_onnx leaves big ones in the file) and Constant nodes' values."""

    def __init__(self, graph: onnx.GraphProto):
        self.tensors = {t.name: t for t in graph.initializer}
        self.nodes = {n.output[0]: n for n in graph.node
                      if n.op_type == "Constant" and _plain(n) and n.output}

    def __contains__(self, name: str) -> bool:
        return name in self.tensors or name in self.nodes

    def get(self, name: str) -> np.ndarray | None:
        from onnx import numpy_helper

        tensor = self.tensors.get(name)
        if tensor is None and name in self.nodes:
            node = self.nodes[name]
            tensor = attribute(node, "value")
            if attribute(node, "value_float") is not None:
                return np.array(attribute(node, "value_float"), np.float32)
        if not isinstance(tensor, onnx.TensorProto) or tensor.data_location == onnx.TensorProto.EXTERNAL:
            return None
        count = int(np.prod(tensor.dims)) if tensor.dims else 1
        if count and not tensor.raw_data and not any(getattr(tensor, f) for f in (
                "float_data", "int32_data", "int64_data", "double_data", "uint64_data")):
            return None  # its bytes stayed in the file
        try:
            return numpy_helper.to_array(tensor)
        except (ValueError, TypeError):
            return None


def output_rules(proto: onnx.ModelProto) -> dict[str, OutputRule]:
    """Each graph output's OutputRule, read from the ONNX graph (its weights are not needed)."""
    graph = proto.graph
    producer = {o: node for node in graph.node for o in node.output if o}
    constants = _Constants(graph)
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
                found = _clip_range(node, constants)
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


def _clip_range(node: onnx.NodeProto, constants: _Constants) -> tuple[float, str | None]:
    """A Clip with both bounds constant is bounded by the larger magnitude of the two."""
    bounds = [attribute(node, "min"), attribute(node, "max")]
    for k, name in enumerate(node.input[1:3]):
        if name:
            value = constants.get(name)
            bounds[k] = None if value is None or value.size != 1 else float(value.reshape(()))
    if any(b is None or not math.isfinite(b) for b in bounds):
        return 0.0, None
    return max(abs(bounds[0]), abs(bounds[1])), "Clip"


def step_fetches(proto: onnx.ModelProto, rules: dict[str, OutputRule]) -> list[str]:
    """The tensors onnxruntime must give besides the outputs for the near-ties: the steps'
    inputs that are not constants."""
    constants = _Constants(proto.graph)
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
    constants = _Constants(proto.graph)
    result = {}
    for name, rule in rules.items():
        if rule.step is None:
            continue
        operands = []
        for operand in _step_operands(rule.step):
            value = fetched[operand] if operand in fetched else constants.get(operand)
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


def rounding_dropped(proto: onnx.ModelProto) -> bool:
    """Whether a float conversion of the model drops rounding that onnxruntime keeps: a
    QuantizeLinear of a tensor that is not a constant (a pair on an activation; qdq/importer.py
    makes it a Clip), or run-time quantization (run_time_quantization)."""
    graph = proto.graph
    constants = {t.name for t in graph.initializer}
    constants |= {o for n in graph.node if n.op_type == "Constant" for o in n.output}
    return any(n.op_type == "QuantizeLinear" and _plain(n) and n.input and n.input[0] not in constants
               for n in graph.node) or run_time_quantization(proto) is not None


def run_time_quantization(proto: onnx.ModelProto) -> str | None:
    """Why no conversion repeats onnxruntime's rounding of the model's activations, when it
    quantizes them at run time (quantize_dynamic's DynamicQuantizeLinear, com.microsoft's
    DynamicQuantizeLSTM): a float conversion computes them in float (ops/dynamic_quant.py), an
    int8 one with calibrated params, --weight-only with TFLite's per-row run-time params. Such a
    model is judged by SQNR; None when it does not."""
    counts: dict[str, int] = {}
    quantized = {n.output[0] for n in proto.graph.node if n.op_type == "DynamicQuantizeLinear"}
    for n in proto.graph.node:
        if (n.op_type, n.domain or "ai.onnx") in (("DynamicQuantizeLinear", "ai.onnx"),
                                                   ("DynamicQuantizeLSTM", "com.microsoft")):
            counts[n.op_type] = counts.get(n.op_type, 0) + 1
    # quantize_dynamic's Gather read by MatMulInteger as it is: onnxruntime multiplies the integer
    # rows exactly, the .tflite's hybrid kernel quantizes them again at run time
    rows = sum(n.op_type == "MatMulInteger" and n.input[0] not in quantized for n in proto.graph.node)
    if rows and not counts:
        return ("the .tflite's hybrid kernels quantize at run time the integer rows onnxruntime's "
                f"MatMulInteger multiplies as they are ({rows} MatMulInteger)")
    if not counts:
        return None
    ops = ", ".join(f"{k} {op}" for op, k in sorted(counts.items()))
    return (f"onnxruntime quantizes activations at run time ({ops}), a rounding the .tflite "
            "does not repeat")


# --- the two runtimes ------------------------------------------------------------------------
@dataclass
class Port:
    """One model input or output of the .tflite, paired with an ONNX tensor."""

    onnx_name: str
    name: str  # the signature name in the .tflite
    index: int  # tensor index
    dtype: np.dtype
    shape: tuple[int, ...]
    quantization: tuple[float, int] | None  # (scale, zero point) of int8/uint8/int16 I/O
    permutation: tuple[int, ...] | None = None  # ONNX axes in the .tflite tensor's order

    def onnx_shape(self) -> tuple[int, ...]:
        if self.permutation is None:
            return self.shape
        return tuple(self.shape[k] for k in np.argsort(self.permutation))


@dataclass
class TFLiteModel:
    """A .tflite in LiteRT, with its inputs and outputs paired with the ONNX model's."""

    path: str
    inputs: list[Port] = field(default_factory=list)
    outputs: list[Port] = field(default_factory=list)
    preserve_all: bool = False

    def __post_init__(self):
        from ai_edge_litert.interpreter import Interpreter, OpResolverType

        # With every tensor kept (the report reads them), no delegate: a delegated partition's
        # inner tensors are never written.
        resolver = (OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES if self.preserve_all
                    else OpResolverType.AUTO)
        try:
            with quiet_native_stderr():
                self.interpreter = Interpreter(model_path=self.path, num_threads=1,
                                               experimental_op_resolver_type=resolver,
                                               experimental_preserve_all_tensors=self.preserve_all)
                self.interpreter.allocate_tensors()
        except (ValueError, RuntimeError) as e:
            raise ConversionError(f"{self.path}: LiteRT cannot load it: {first_line(e)}") from None

    def pair(self, inputs: list[OnnxValue] | None = None, outputs: list[OnnxValue] | None = None):
        """Pairs the file's inputs or outputs with the ONNX model's (see _pair)."""
        interpreter = self.interpreter
        signatures = interpreter.get_signature_list()
        if signatures:
            runner = interpreter.get_signature_runner(next(iter(signatures)))
            details = {"inputs": runner.get_input_details(), "outputs": runner.get_output_details()}
        else:
            details = {"inputs": {d["name"]: d for d in interpreter.get_input_details()},
                       "outputs": {d["name"]: d for d in interpreter.get_output_details()}}
        layouts = io_layout_metadata(self.path)
        if inputs is not None:
            self.inputs = _pair("input", inputs, _ports(details["inputs"], layouts.get("inputs", {})))
        if outputs is not None:
            self.outputs = _pair("output", outputs,
                                 _ports(details["outputs"], layouts.get("outputs", {})))

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """ONNX-layout float feeds by ONNX name -> ONNX-layout float outputs by ONNX name."""
        interpreter = self.interpreter
        try:
            for port in self.inputs:
                value = np.asarray(feeds[port.onnx_name])
                if port.permutation is not None:
                    value = np.transpose(value, port.permutation)
                # np.require, not np.ascontiguousarray: that makes a scalar one-dimensional.
                interpreter.set_tensor(port.index, np.require(_to_file(value, port), requirements="C"))
            interpreter.invoke()
        except (ValueError, RuntimeError) as e:
            raise ConversionError(f"{self.path}: LiteRT cannot run it: {first_line(e)}") from None
        outputs = {}
        for port in self.outputs:
            value = _from_file(interpreter.get_tensor(port.index), port)
            if port.permutation is not None:
                value = np.transpose(value, np.argsort(port.permutation))
            outputs[port.onnx_name] = value
        return outputs


@contextlib.contextmanager
def quiet_native_stderr():
    """Silences what native code prints on file descriptor 2 meanwhile (LiteRT's "INFO: Created
    TensorFlow Lite XNNPACK delegate"): qconvert prints one summary line. Errors still arrive as
    exceptions."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as devnull:
            os.dup2(devnull.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _to_file(value: np.ndarray, port: Port) -> np.ndarray:
    if port.quantization is not None:
        scale, zero_point = port.quantization
        info = np.iinfo(port.dtype)
        value = np.clip(np.round(value / scale) + zero_point, info.min, info.max)
    return value.astype(port.dtype)


def _from_file(value: np.ndarray, port: Port) -> np.ndarray:
    if port.quantization is not None:
        scale, zero_point = port.quantization
        return (value.astype(np.float64) - zero_point) * scale
    return value


def _ports(details: dict[str, dict], layouts: dict[str, list[int]]) -> list[Port]:
    ports = []
    for name, d in details.items():
        params = d.get("quantization_parameters", {})
        scales = params.get("scales", np.zeros(0))
        dtype = np.dtype(d["dtype"])
        quantization = None
        if len(scales) and dtype.kind in "iu":
            quantization = (float(scales[0]), int(params["zero_points"][0]))
        perm = layouts.get(name)
        ports.append(Port(name, name, int(d["index"]), dtype, tuple(int(x) for x in d["shape"]),
                          quantization, tuple(perm) if perm else None))
    return ports


def _pair(kind: str, values: list[OnnxValue], ports: list[Port]) -> list[Port]:
    """Each ONNX value's port: the one of the same name, else the next unpaired one (in order)
    whose shape fits; its permutation detected from the shapes when the file had none."""
    names = {v.name for v in values}
    by_name = {p.name: p for p in ports}
    unpaired = [p for p in ports if p.name not in names]
    paired = []
    for value in values:
        port = by_name.get(value.name)
        if port is None:
            port = next((p for p in unpaired if _permutation(value.shape, p.shape) is not None), None)
            if port is None:
                raise ConversionError(f"the .tflite has no {kind} for the ONNX model's {kind} "
                                      f"{value.name!r} (shape {_shown(value.shape)})")
            unpaired.remove(port)
        if port.permutation is None:
            perm = _permutation(value.shape, port.shape)
            if perm is None:
                raise ConversionError(f"{kind} {value.name!r}: the .tflite's shape "
                                      f"{list(port.shape)} does not fit the ONNX shape "
                                      f"{_shown(value.shape)}")
            port.permutation = None if perm == tuple(range(len(perm))) else perm
        port.onnx_name = value.name
        paired.append(port)
    return paired


def _shown(shape: tuple | None) -> str:
    return "unknown" if shape is None else str(list(shape))


def _permutation(onnx_shape: tuple | None, tflite_shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """The axes of the ONNX tensor in the .tflite tensor's order that the shapes allow: identity
    first, then channels-last, then the first that fits (None: none). Symbolic ONNX dims (also
    0 and -1), and an ONNX shape the model does not give, fit anything."""
    rank = len(tflite_shape)
    if onnx_shape is None:
        return tuple(range(rank))
    if len(onnx_shape) != rank:
        return None

    def fits(perm) -> bool:  # 0 and -1 (Paddle's exports) are dynamic too
        return all(not isinstance(onnx_shape[p], int) or onnx_shape[p] <= 0
                   or onnx_shape[p] == tflite_shape[k] for k, p in enumerate(perm))

    candidates = [tuple(range(rank))]
    if rank >= 3:
        candidates.append((0,) + tuple(range(2, rank)) + (1,))
    candidates += list(itertools.permutations(range(rank))) if rank <= 6 else []
    return next((c for c in candidates if fits(c)), None)


# --- verification ----------------------------------------------------------------------------
@dataclass
class OnnxValue:
    """A graph input or output of the ONNX model: its shape (a symbolic dim is its name; None
    when the model does not say) and dtype."""

    name: str
    shape: tuple | None
    dtype: np.dtype


def onnx_values(proto: onnx.ModelProto, outputs: bool = False) -> list[OnnxValue]:
    """The graph's inputs (not initializers, nor an old exporter's input that a node computes:
    the loader drops those) or outputs."""
    graph = proto.graph
    skipped = {t.name for t in graph.initializer} | _produced(graph) if not outputs else set()
    values = graph.output if outputs else [i for i in graph.input if i.name not in skipped]
    result = []
    for value in values:
        tensor = value.type.tensor_type
        shape = None
        if tensor.HasField("shape"):
            shape = tuple(d.dim_value if d.HasField("dim_value") else d.dim_param for d in tensor.shape.dim)
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)) if tensor.elem_type else None
        result.append(OnnxValue(value.name, shape, dtype))
    return result


def generated_samples(model: TFLiteModel, proto: onnx.ModelProto, count: int,
                      seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Seeded inputs in the ONNX layout and dtypes: standard normal for float inputs, uniform in
    [0, INTEGER_INPUT_HIGH) for integer ones, random for booleans."""
    dtypes = {v.name: v.dtype for v in onnx_values(proto)}
    rng = np.random.default_rng(seed)
    samples = []
    for _ in range(count):
        sample = {}
        for port in model.inputs:
            shape, dtype = port.onnx_shape(), dtypes[port.onnx_name] or np.dtype(np.float32)
            if dtype.kind == "f":
                sample[port.onnx_name] = rng.standard_normal(shape).astype(dtype)
            elif dtype.kind == "b":
                sample[port.onnx_name] = np.asarray(rng.random(shape) > 0.5)  # 0-d too
            else:
                sample[port.onnx_name] = rng.integers(0, INTEGER_INPUT_HIGH, shape).astype(dtype)
        samples.append(sample)
    return samples


class Reference:
    """onnxruntime's side of a verification: one session over the ONNX model that gives its graph
    outputs and the `extra` tensors (graph inputs or node outputs). With `path`, the file `proto`
    was read from, onnxruntime reads the model itself (`proto`'s weights may then be missing);
    that takes a model whose `extra` are all graph outputs (see reads_file). Otherwise the session is made from `proto` (CalibrationRun), which must hold its
    weights."""

    def __init__(self, proto: onnx.ModelProto, extra=(), path: str | None = None):
        outputs = [value.name for value in onnx_values(proto, outputs=True)]
        names = list(dict.fromkeys(outputs + list(extra)))
        if path is not None and set(names) <= set(outputs) and _no_computed_inputs(proto):
            graph_inputs = {value.name for value in onnx_values(proto)}
            self.session = _session_from_file(path, proto)
            self.from_feeds = [n for n in names if n in graph_inputs]
            self.fetched = [n for n in names if n not in graph_inputs]
        else:
            from ..calibration.calibrate import CalibrationRun

            graph = proto.graph
            produced = _produced(graph)
            inputs = list(graph.input)
            try:  # onnxruntime refuses a graph input that a node computes: the model without it
                if any(i.name in produced for i in inputs):
                    del graph.input[:]
                    graph.input.extend(i for i in inputs if i.name not in produced)
                run = CalibrationRun(proto, names)
            finally:
                if len(graph.input) != len(inputs):
                    del graph.input[:]
                    graph.input.extend(inputs)
            self.session, self.fetched, self.from_feeds = run.session, run.fetched, run.from_feeds

    def run(self, feeds: dict[str, np.ndarray], k: int = 0) -> dict[str, np.ndarray]:
        """The values by name on one sample (`k`: its number, for the error message)."""
        try:
            values = dict(zip(self.fetched, self.session.run(self.fetched, feeds)))
        except Exception as e:  # onnxruntime raises its own exception types
            raise ReferenceFailed(f"onnxruntime failed on sample {k}: {first_line(e)}") from None
        values.update((name, feeds[name]) for name in self.from_feeds)
        return values


class RecordedReference:
    """A Reference whose values of each sample number are computed once: the same samples checked
    against several .tflite files (the precision planner's plans) need onnxruntime once."""

    def __init__(self, reference: Reference):
        self.reference = reference
        self.values: dict[int, dict[str, np.ndarray]] = {}

    def run(self, feeds: dict[str, np.ndarray], k: int = 0) -> dict[str, np.ndarray]:
        if k not in self.values:
            self.values[k] = self.reference.run(feeds, k)
        return self.values[k]


def reads_file(proto: onnx.ModelProto) -> bool:
    """Whether Reference can read the model from its file: no near-ties to look into (no tensor
    but the outputs to fetch), no graph input that a node computes (onnxruntime refuses it)."""
    return not step_fetches(proto, output_rules(proto)) and _no_computed_inputs(proto)


def _no_computed_inputs(proto: onnx.ModelProto) -> bool:
    produced = _produced(proto.graph)
    return not any(i.name in produced for i in proto.graph.input)


def _produced(graph: onnx.GraphProto) -> set[str]:
    return {o for node in graph.node for o in node.output if o}


def _session_from_file(path: str, proto: onnx.ModelProto):
    """An onnxruntime session reading the model file (and its external data) itself, with the
    options CalibrationRun gives the model (onnx/runtime.py session_options: the basic level for a
    float graph, none for one with Q/DQ pairs)."""
    import onnxruntime as ort

    from ..onnx.runtime import session_options

    options = session_options(proto, ort.GraphOptimizationLevel.ORT_ENABLE_BASIC)
    options.log_severity_level = 4  # fatal only: a model it refuses is one line from qconvert
    try:
        return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime raises its own exception types
        raise ReferenceFailed(f"onnxruntime cannot load the model for verification: "
                              f"{first_line(e)}") from None


def run_both(proto: onnx.ModelProto, model: TFLiteModel, samples: list[dict[str, np.ndarray]],
             extra: list[str] = (), reference: Reference | None = None):
    """For each sample: (onnxruntime's values of the graph outputs and of the `extra` tensors by
    ONNX name, the .tflite's outputs by ONNX name). `model`'s inputs are paired; its outputs are
    paired on the first sample, whose reference gives their shapes when the model does not.
    `reference` (made from `proto` and `extra` when None) runs the ONNX model."""
    outputs = onnx_values(proto, outputs=True)
    reference = reference or Reference(proto, extra)
    for k, sample in enumerate(samples):
        feeds = {port.onnx_name: sample[port.onnx_name] for port in model.inputs}
        values = reference.run(feeds, k)
        if k == 0:
            model.pair(outputs=[OnnxValue(v.name, np.shape(values[v.name]), v.dtype) for v in outputs])
        yield values, model.run(feeds)


def prepare(proto: onnx.ModelProto, tflite_path: str, samples, count: int,
            preserve_all: bool = False) -> tuple[TFLiteModel, list[dict[str, np.ndarray]]]:
    """The .tflite in LiteRT with its inputs paired, and the samples (`count` generated ones when
    `samples` is None)."""
    model = TFLiteModel(tflite_path, preserve_all=preserve_all)
    model.pair(inputs=onnx_values(proto))
    return model, samples if samples is not None else generated_samples(model, proto, count)


class OutputStacks:
    """Both models' outputs gathered sample by sample (run_both's pairs), then compared; with
    them, onnxruntime's values of the steps' operands (step_fetches) when it gave them."""

    def __init__(self, proto: onnx.ModelProto, rules: dict[str, OutputRule] | None = None):
        self.proto = proto
        self.rules = output_rules(proto) if rules is None else rules
        self.names = [value.name for value in onnx_values(proto, outputs=True)]
        self.step_names = step_fetches(proto, self.rules)
        self.expected: dict[str, list] = {name: [] for name in self.names}
        self.actual: dict[str, list] = {name: [] for name in self.names}
        self.operands: dict[str, list] = {name: [] for name in self.step_names}

    def add(self, reference: dict[str, np.ndarray], outputs: dict[str, np.ndarray]) -> None:
        for name in self.names:
            self.expected[name].append(reference[name])
            self.actual[name].append(outputs[name])
        for name in self.step_names:
            if name in reference:
                self.operands[name].append(reference[name])

    def verification(self, samples: int, min_sqnr: float | None = None,
                     data: str = "generated", float_check: bool = False) -> Verification:
        """The comparison; with `float_check`, judged by the float check (and `min_sqnr` when
        given), else by `min_sqnr` alone."""
        fetched = {name: np.stack(values) for name, values in self.operands.items()
                   if values and len(values) == samples}
        operands = step_values(self.proto, self.rules, fetched)
        half = computes_in_float16(self.proto)
        ulp = FLOAT16_EPS if half else FLOAT32_EPS
        checks = [check_output(name, np.stack(self.expected[name]), np.stack(self.actual[name]),
                               self.rules.get(name), operands.get(name), ulp)
                  for name in self.names]
        result = Verification(checks, samples, min_sqnr, data=data,
                              check="float" if float_check else "sqnr",
                              tolerance=TOLERANCES[ulp] if float_check else None, ulp=ulp,
                              reason=None if float_check else run_time_quantization(self.proto))
        result.passed = (min_sqnr is None or not result.below(min_sqnr)) and not result.float_failures()
        return result


def compare(proto: onnx.ModelProto, tflite_path: str, samples: list[dict[str, np.ndarray]],
            reference: Reference | RecordedReference | None = None):
    """Both models on `samples`: (the Verification, the .tflite's outputs, onnxruntime's), the
    outputs as {ONNX output name: [samples, ...]}. `reference`: as run_both's."""
    model, samples = prepare(proto, tflite_path, samples, len(samples))
    stacks = OutputStacks(proto)
    for values, outputs in run_both(proto, model, samples, reference=reference):
        stacks.add(values, outputs)
    return (stacks.verification(len(samples)),
            {name: np.stack(values) for name, values in stacks.actual.items()},
            {name: np.stack(values) for name, values in stacks.expected.items()})


def verify(proto: onnx.ModelProto, tflite_path: str, samples: list[dict[str, np.ndarray]] | None = None,
           count: int = 8, min_sqnr: float | None = None, data: str = "generated",
           float_check: bool = False, onnx_path: str | None = None) -> Verification:
    """Runs both models on `samples` (ONNX-layout inputs by name; None: `count` generated ones)
    and compares every output; `float_check` judges them by the float check (see the module
    docstring). `proto` must hold its weights, unless `onnx_path` is the file it was read from
    and reads_file(proto): onnxruntime then reads that file."""
    model, samples = prepare(proto, tflite_path, samples, count)
    stacks = OutputStacks(proto)
    reference = Reference(proto, stacks.step_names, onnx_path)
    for values, outputs in run_both(proto, model, samples, reference=reference):
        stacks.add(values, outputs)
    return stacks.verification(len(samples), min_sqnr, data, float_check)
