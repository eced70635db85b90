"""What a conversion reports: the CLI's summary line (summary()) and its --json (as_dict())."""

from __future__ import annotations

import collections
import re
from dataclasses import asdict, dataclass, field

from ..calibration.files import DataSource
from ..check.latency import Latency
from ..check.metrics import json_number
from ..check.report import ConversionNotes
from ..check.verify import Verification
from ..plan.planner import HYBRID, PLAN_KEEPS, Plan
from ..targets import DEFAULT as DEFAULT_TARGET
from ..targets import Cost
from ..transforms.keep_unrepresentable_float import CANNOT_CARRY

SHOWN_UNCARRIED = 3  # the summary names the first ops int8 cannot carry
SHOWN_MOVED_INPUTS = 2  # the summary names the first inputs made channels-last
SHOWN_FLOAT_GROUPS = 4  # the summary gives the reasons of this many groups of float ops
_REASON_DETAILS = re.compile(r"'[^']*'|\d+(\.\d+)?")  # a name or number in a reason


@dataclass
class TensorInfo:
    name: str
    shape: list[int]
    dtype: str
    layout_permutation: list[int] | None  # axes of the ONNX tensor, in the TFLite tensor's order


@dataclass
class FloatOp:
    op: str
    node: str
    reason: str


@dataclass
class QuantizationReport:
    io_type: str
    calibration_samples: int  # 0 with --default-range only
    calibration_method: str  # how calibration turned values into ranges (--calibration-method)
    calibration_seconds: float
    int8_ops: int  # ops running an int8 kernel (QUANTIZE/DEQUANTIZE not counted)
    int16_ops: int  # ops running a 16x8 kernel (int16 activations)
    float_ops: list[FloatOp]  # ops on float tensors that stayed float, and why
    weights_bytes_float: int  # constant data before quantization
    weights_bytes: int  # constant data after
    plan: Plan | None = None  # --target-sqnr: the precision planner's rounds and promotions
    qdq_tensors: int = 0  # activations whose range the model's QuantizeLinear/DequantizeLinear gave
    calibration_source: DataSource | None = None  # what calibration read (None: no calibration)
    target: str = ""  # the device it is for (--target, targets/)
    cost: Cost | None = None  # the written model's estimated time on that device (targets.cost)
    # quantized without --quantize: the model arrived with QDQ pairs (--precision float: float)
    from_pairs: bool = False


@dataclass
class WeightsReport:
    mode: str  # "int8" (--weight-only) or "float16"
    tensors: list[str]  # the constants stored as int8 or float16
    weights_bytes_float: int  # constant data before
    weights_bytes: int  # constant data after


@dataclass
class BatchReport:
    """A dynamic batch dimension set to 1 (qconvert/onnx/dynamic_batch.py)."""

    symbol: str  # its ONNX name; "" when unnamed
    size: int  # the batch the .tflite is written with: 1
    resizable: bool  # shape_signature -1: LiteRT's resize_tensor_input may change it
    note: str  # the summary's words, with the reason when it is not resizable


@dataclass
class DimensionReport:
    """A dynamic dimension beyond the batch (qconvert/onnx/dynamic_dims.py)."""

    symbol: str  # its ONNX name, or "input:axis" when it has none
    size: int  # the size the .tflite's shapes have (LiteRT's before resize_tensor_input)
    resizable: bool  # shape_signature -1 wherever it is: resize_tensor_input changes it
    fixed_because: str  # why it is not resizable ("" when it is)
    by_values: bool = False  # a size the values decide (NonZero's count), not an input's


@dataclass
class ConversionReport:
    input: str
    output: str
    ops: int
    op_counts: dict[str, int]
    transposes: int
    size_bytes: int
    seconds: float
    inputs: list[TensorInfo] = field(default_factory=list)
    outputs: list[TensorInfo] = field(default_factory=list)
    quantization: QuantizationReport | None = None
    weights: WeightsReport | None = None
    verify: Verification | None = None  # the written file against onnxruntime
    not_verified: str | None = None  # why a conversion that verifies was not (onnx/can_run.py)
    batch: BatchReport | None = None  # the model's dynamic batch, set to 1
    dimensions: list[DimensionReport] = field(default_factory=list)  # the other dynamic ones
    # other inputs' dynamic axis 0, set without --input-shape (to 1, or to the size --input-shape
    # gives the same dimension name): {input: size}
    leading_dims: dict[str, int] = field(default_factory=dict)
    latency: Latency | None = None  # the written model timed next to the float model
    notes: ConversionNotes | None = field(default=None, repr=False)  # for the per-tensor report
    # what the verification's samples were read from (None: generated); --json: verify.data_source
    verify_source: DataSource | None = None

    def as_dict(self) -> dict:
        result = asdict(self)
        result["verify"] = self.verify.as_dict() if self.verify is not None else None
        if self.latency is not None:
            result["latency"]["ratio"] = json_number(self.latency.ratio)
        if result["quantization"] and result["quantization"]["plan"]:
            plan = result["quantization"]["plan"]
            for round_ in plan["rounds"]:
                round_["worst_sqnr_db"] = json_number(round_["worst_sqnr_db"])
                round_["worst_slice_sqnr_db"] = json_number(round_["worst_slice_sqnr_db"])
            for cost in plan["costs"]:
                cost["alone_db"] = json_number(cost["alone_db"])
                cost["poisoned_db"] = json_number(cost["poisoned_db"])
        del result["notes"]
        source = result.pop("verify_source")
        if result["verify"] is not None:
            result["verify"]["data_source"] = source
        return result

    def summary(self) -> str:
        text = (f"qconvert: {self.input} -> {self.output}: {self.ops} ops, "
                f"{_human_size(self.size_bytes)}, {self.seconds:.2f} s")
        q = self.quantization
        unscaled = q.calibration_source.unscaled_images() if q and q.calibration_source else ""
        if unscaled:  # images as [0, 1], where most image models expect them normalized
            text += f"; calibration: {unscaled}"
        if q is not None:
            text += f"; int8: {q.int8_ops} ops"
            if q.int16_ops:
                text += f", int16: {q.int16_ops} ops"
            if q.from_pairs:
                text += (f" from the model's QDQ pairs ({q.qdq_tensors} tensors' ranges; --precision "
                         "float writes the float file)")
            elif q.qdq_tensors:
                text += f", ranges of {q.qdq_tensors} tensors from the model's QDQ pairs"
            text += f", weights {_human_size(q.weights_bytes_float)} -> {_human_size(q.weights_bytes)}"
            if q.target and q.target != DEFAULT_TARGET:
                text += f", for {q.target}"
            if q.plan is not None:
                text += "; " + q.plan.summary()
            uncarried = [f for f in q.float_ops if f.reason.startswith(CANNOT_CARRY)]
            if uncarried:
                text += (f"; int8 cannot carry the values of {len(uncarried)} ops, kept float ("
                         + ", ".join(f"{f.op} {f.node!r}" for f in uncarried[:SHOWN_UNCARRIED])
                         + (", ..." if len(uncarried) > SHOWN_UNCARRIED else "") + ")")
            # The plan's regions are named in its part of the line.
            others = [f for f in q.float_ops if not f.reason.startswith((CANNOT_CARRY, PLAN_KEEPS))]
            if others:
                text += "; stayed float: " + _float_groups(others)
        w = self.weights
        if w is not None:
            text += (f"; {w.mode} weights: {len(w.tensors)} tensors, {_human_size(w.weights_bytes_float)}"
                     f" -> {_human_size(w.weights_bytes)}")
        verify_unscaled = self.verify_source.unscaled_images() if self.verify_source else ""
        if verify_unscaled and not unscaled:  # --mean/--std serve both: said once
            text += f"; verify data: {verify_unscaled}"
        if self.verify is not None:
            text += "; " + self.verify.summary()
        elif self.not_verified:
            text += "; not verified: " + self.not_verified
        if self.latency is not None:
            kind = _written_kind(q) if q is not None else w.mode
            text += "; " + self.latency.summary(kind) if kind is not None else ""
        if self.batch is not None:
            text += "; " + self.batch.note
        if self.dimensions:
            text += "; " + _dimensions_note(self.dimensions)
        if self.leading_dims:
            text += "; dynamic axis 0 set (--input-shape to change it): " + ", ".join(
                f"{name!r} {size}" for name, size in self.leading_dims.items())
        moved = [i for i in self.inputs if i.layout_permutation]
        if moved:  # what a user's code feeds differs from what it fed the ONNX model
            shown = [f"{i.name!r} [{', '.join(map(str, i.shape))}]" for i in moved[:SHOWN_MOVED_INPUTS]]
            text += (f"; channels-last input{'s' if len(moved) > 1 else ''} (--io-layout onnx keeps "
                     f"ONNX's): {', '.join(shown)}{', ...' if len(moved) > SHOWN_MOVED_INPUTS else ''}")
        return text


def _dimensions_note(dimensions: list[DimensionReport]) -> str:
    """The dynamic dimensions kept resizable, then those fixed at their size with why."""
    kept = [d for d in dimensions if d.resizable and not d.by_values]
    valued = sum(1 for d in dimensions if d.by_values)
    parts = []
    if valued:  # a detector's hundreds: counted (--json lists them)
        parts.append(f"{valued} size{'s' if valued > 1 else ''} the values decide, set when it runs")
    if kept:
        parts.append("dynamic " + ", ".join(repr(d.symbol) for d in kept) + " kept resizable "
                     f"(shape_signature -1; written at {', '.join(str(d.size) for d in kept)})")
    parts += [f"dynamic {d.symbol!r} fixed at {d.size}: {d.fixed_because}"
              for d in dimensions if not d.resizable]
    return "; ".join(parts)


def _written_kind(q: QuantizationReport) -> str | None:
    """What the written quantized model computes in, for its latency's label: int8 (int16), or
    hybrid when its only integer ops are hybrid kernels; None when the plan wrote the float model
    (its time is float's: --json still has it)."""
    if q.int8_ops or q.int16_ops:
        return "int8"
    return "hybrid" if q.plan is not None and q.plan.mix.get(HYBRID) else None


def _float_groups(float_ops: list[FloatOp]) -> str:
    """The ops that stayed float grouped by why, each group's reason in short (the text before
    its first colon; --json has every op's whole reason): "SOFTMAX (its output is a model output);
    3 ADD, MUL (tensor '...' has no calibrated range)". Reasons that differ only in a quoted name
    or a number are one group (_one_reason says it)."""
    groups: dict[str, tuple[set[str], collections.Counter]] = {}
    for f in float_ops:
        short = f.reason.split(": ", 1)[0]
        shown, kinds = groups.setdefault(_REASON_DETAILS.sub("#", short), (set(), collections.Counter()))
        shown.add(short)
        kinds[f.op] += 1
    parts = [", ".join(f"{n} {op}" if n > 1 else op for op, n in sorted(kinds.items()))
             + f" ({_one_reason(shown)})" for shown, kinds in list(groups.values())[:SHOWN_FLOAT_GROUPS]]
    more = len(groups) - SHOWN_FLOAT_GROUPS
    if more > 0:
        parts.append(f"{more} more reason{'s' if more > 1 else ''} (--json lists each op's)")
    return "; ".join(parts)


def _one_reason(reasons: set[str]) -> str:
    """A group's reason: the one its ops share, or with the names and numbers that differ
    between them elided ("tensor '...' has no calibrated range")."""
    if len(reasons) == 1:
        return next(iter(reasons))
    return _REASON_DETAILS.sub(lambda m: "'...'" if m.group(0).startswith("'") else "N", min(reasons))


def _human_size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


@dataclass
class FakeQuantReport:
    """What `qconvert fakequant` wrote (qdq/fakequant.py)."""

    input: str
    output: str
    activations: list[str]  # ONNX tensors with a Q -> DQ pair
    weights: list[str]  # initializers stored int8 + DequantizeLinear
    biases: list[str]  # initializers stored int32 + DequantizeLinear
    float_weights: list[str]  # nodes whose int8 weight the graph holds float (see fakequant.py)
    ranges_in_metadata: list[str]  # tensors whose range no pair carries (qdq/fakequant.py): metadata
    quantization: QuantizationReport
    size_bytes: int
    seconds: float

    def as_dict(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        text = (f"qconvert: {self.input} -> {self.output}: fake-quant pairs on {len(self.activations)} "
                f"tensors, {len(self.weights)} weights int8, {len(self.biases)} biases int32, "
                f"{_human_size(self.size_bytes)}, {self.seconds:.2f} s")
        if self.float_weights:
            text += f"; {len(self.float_weights)} weights held float (folded across their inputs)"
        if self.ranges_in_metadata:
            text += f"; {len(self.ranges_in_metadata)} ranges in the model's metadata"
        if self.quantization.float_ops:
            text += f"; {len(self.quantization.float_ops)} ops stay float"
        return text
