"""Targets: the device a quantized model is for, as data (`--target`).

A target is a JSON file (the package's own, `qconvert/targets/<name>.json`, or a user's: a path)
saying which precisions its ops may compute in, which input/output types it takes, and, per
TFLite op and precision, whether the kernel exists there, whether its delegate runs it, and what
one unit of the op's work costs (`ns`, nanoseconds: a multiply-accumulate for the ops with
weights and BATCH_MATMUL, an element of the largest tensor for the rest; `work`). A plan's cost
on a target is the sum of its ops' work times their kernels' cost, plus `partition_ns` for each
switch between delegated and undelegated ops in execution order: an estimate of its latency on
that device, computed from the model alone, so the precision planner can pick among the plans
that hold the accuracy target without timing anything on the machine that converts.

The file's fields:
  format       "qconvert-target 1"
  name, summary, source   what it is and where its numbers come from
  precisions   the compute precisions allowed, int8 first; after it, the order in which the plan
               promotes a region that int8 cannot hold (int16: 16x8 kernels; hybrid: int8 weights
               with float activations; float)
  io_types     the input/output types the device takes, the first the default (--io-type)
  partition_ns the cost of one switch between the delegate and the interpreter
  default      {precision: kernel} for an op the file does not list
  ops          {TFLite op: {precision: kernel or null (no kernel on this target)}}
A kernel is {"delegated": bool, "ns": cost of one unit of work}. A precision an op has no
kernel for in qconvert's registry (ops/) has none on any target; a target can only take kernels
away or price them.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from importlib import resources

import numpy as np

from ..errors import UsageError
from ..ir import Model, Operator
from ..ops.registry import TFLITE_OPS

FORMAT = "qconvert-target 1"
PRECISIONS = ("int8", "int16", "hybrid", "float")
DEFAULT = "arm64"
# The names --target took before targets were files: LiteRT's CPU path, and all-integer.
ALIASES = {"cpu": "arm64", "integer": "npu"}
CONVERSIONS = ("QUANTIZE", "DEQUANTIZE")  # ops that move a tensor between types, computing nothing


@dataclass(frozen=True)
class Kernel:
    delegated: bool
    ns: float  # per unit of work


@dataclass(frozen=True)
class Target:
    name: str
    summary: str
    source: str
    precisions: tuple[str, ...]
    io_types: tuple[str, ...]
    partition_ns: float
    default: dict  # precision -> Kernel | None
    ops: dict  # TFLite op -> {precision: Kernel | None}
    path: str  # the file it was read from

    @property
    def promotions(self) -> tuple[str, ...]:
        """The precisions a region int8 cannot hold may go to, in the target's order."""
        return tuple(p for p in self.precisions if p != "int8")

    @property
    def integer_only(self) -> bool:
        """No op may compute in float (hybrid kernels compute in float too)."""
        return "float" not in self.precisions and "hybrid" not in self.precisions

    def kernel(self, op_type: str, precision: str) -> Kernel | None:
        """The op's kernel at `precision` on this target (None: it has none)."""
        if precision not in self.precisions:
            return None
        listed = self.ops.get(op_type, {})
        return listed[precision] if precision in listed else self.default.get(precision)

    def as_dict(self) -> dict:
        return {"name": self.name, "summary": self.summary, "path": self.path}


def names() -> list[str]:
    """The targets the package ships."""
    return sorted(entry.name[:-5] for entry in resources.files(__package__).iterdir()
                  if entry.name.endswith(".json"))


def load_target(spec: str | None) -> Target:
    """The target `spec` names: one the package ships (or an alias), or a path to a target file
    (one that ends in .json or names an existing file). A malformed file is a UsageError naming
    the file and the field."""
    spec = ALIASES.get(spec or DEFAULT, spec or DEFAULT)
    if spec in names():
        path = str(resources.files(__package__) / f"{spec}.json")
    elif spec.endswith(".json") or os.path.sep in spec or os.path.exists(spec):
        path = spec
    else:
        raise UsageError(f"Invalid value for '--target': {spec!r} is not one of "
                         f"{', '.join(repr(n) for n in names())} nor a target file (.json)")
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UsageError(f"--target {path}: cannot read it as a target file: {e}") from None
    return _parsed(data, path)


def _parsed(data, path: str) -> Target:
    """The Target a file's JSON holds, every field checked."""
    def bad(field: str, why: str) -> UsageError:
        return UsageError(f"--target {path}: {field}: {why}")

    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise bad("format", f"expected {FORMAT!r}")
    precisions = tuple(data.get("precisions") or ())
    if not precisions or precisions[0] != "int8" or not set(precisions) <= set(PRECISIONS) \
            or len(set(precisions)) != len(precisions):
        raise bad("precisions", f"expected int8 first, then any of {', '.join(PRECISIONS[1:])}")
    io_types = tuple(data.get("io_types") or ())
    if not io_types or not set(io_types) <= {"float", "int8", "uint8"}:
        raise bad("io_types", "expected a list of float, int8, uint8")
    partition_ns = data.get("partition_ns", 0)
    if not _cost(partition_ns):
        raise bad("partition_ns", "expected a number of nanoseconds, 0 or more")
    default = _kernels(data.get("default"), "default", bad)
    if set(default) != set(PRECISIONS):
        raise bad("default", f"expected a kernel (or null) for each of {', '.join(PRECISIONS)}")
    ops = data.get("ops", {})
    if not isinstance(ops, dict):
        raise bad("ops", "expected {TFLite op: {precision: kernel}}")
    parsed = {op: _kernels(entry, f"ops.{op}", bad) for op, entry in ops.items()}
    return Target(str(data.get("name") or os.path.basename(path)), str(data.get("summary", "")),
                  str(data.get("source", "")), precisions, io_types, float(partition_ns), default,
                  parsed, path)


def _cost(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        and value >= 0


def _kernels(entry, field: str, bad) -> dict:
    """{precision: Kernel | None} from a file's {precision: {"delegated": b, "ns": x} | null}."""
    if not isinstance(entry, dict) or not set(entry) <= set(PRECISIONS):
        raise bad(field, f"expected {{precision: kernel}} with precisions among {', '.join(PRECISIONS)}")
    kernels = {}
    for precision, kernel in entry.items():
        if kernel is None:
            kernels[precision] = None
            continue
        if not isinstance(kernel, dict) or not isinstance(kernel.get("delegated"), bool) \
                or not _cost(kernel.get("ns")):
            raise bad(f"{field}.{precision}", 'expected {"delegated": true|false, "ns": cost} or null')
        kernels[precision] = Kernel(kernel["delegated"], float(kernel["ns"]))
    return kernels


# --- what a model costs on a target -------------------------------------------------------------

def precision_of(op: Operator, model: Model) -> str:
    """How the op computes: its quantized kernel's type (int8, int16), hybrid (a float op with a
    hybrid kernel reading int8 weights directly), or float. An op that reads and writes no float
    tensor (QUANTIZE and DEQUANTIZE between integer types, shapes, indices, integer arithmetic)
    counts as int8: every target runs integers."""
    if op.quantized in ("int8", "int16"):
        return op.quantized
    arrays = model.arrays
    tensors = [arrays[n] for n in list(op.inputs) + list(op.outputs) if n]
    if not any(a.dtype.kind == "f" and not a.is_constant for a in tensors):
        return "int8"
    definition = TFLITE_OPS.get(op.type)
    hybrid = definition is not None and definition.hybrid is not None and any(
        a.is_constant and a.dtype == np.int8 for a in tensors)
    if hybrid or op.type in CONVERSIONS:  # a QUANTIZE or DEQUANTIZE at a float edge: int8's cost
        return "hybrid" if hybrid else "int8"
    return "float"


def _touches_float(op: Operator, model: Model) -> bool:
    return any(n and model.arrays[n].dtype.kind == "f" and not model.arrays[n].is_constant
               for n in list(op.inputs) + list(op.outputs))


def work(op: Operator, model: Model) -> float:
    """The op's work: multiply-accumulates for an op with weight matrices (each output element
    reads its share of the weights: CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED, TRANSPOSE_CONV,
    the sequence LSTM over its steps) and BATCH_MATMUL; else the elements of its largest tensor."""
    arrays = model.arrays
    sizes = [math.prod(arrays[n].shape) for n in list(op.inputs) + list(op.outputs) if n]
    largest = float(max(sizes, default=0))
    out = arrays[op.outputs[0]].shape if op.outputs and op.outputs[0] else ()
    if not out:
        return largest
    elements, channels = math.prod(out), max(out[-1], 1)
    if op.type == "BATCH_MATMUL" and op.inputs and len(arrays[op.inputs[0]].shape) >= 2:
        a = arrays[op.inputs[0]].shape
        return float(elements * (a[-2] if op.options.get("adj_x") else a[-1]))
    weights = _weight_inputs(op)
    weight_elements = sum(math.prod(arrays[op.inputs[i]].shape) for i in weights
                          if i < len(op.inputs) and op.inputs[i] and arrays[op.inputs[i]].is_constant
                          and len(arrays[op.inputs[i]].shape) >= 2)
    return float(elements * weight_elements / channels) if weight_elements else largest


def _weight_inputs(op: Operator) -> set[int]:
    definition = TFLITE_OPS.get(op.type)
    if definition is None:
        return set()
    found = set()
    if definition.quant is not None and definition.quant.weight is not None:
        found.add(definition.quant.weight)
    if definition.hybrid is not None:
        found |= set(definition.hybrid.weights) | set(definition.hybrid.companions)
    return found


@dataclass(frozen=True)
class Cost:
    """A model's estimated time on a target: in all, and the switches between the delegate and
    the interpreter it counts."""

    ns: float
    switches: int

    def as_dict(self) -> dict:
        return {"ns": round(self.ns, 1), "switches": self.switches}


def cost(model: Model, target: Target) -> Cost:
    """The model's estimated time on `target` (the module docstring). An op the target has no
    kernel for is priced as its float kernel (check_runs says it cannot run there)."""
    total, switches, previous = 0.0, 0, None
    for op in model.operators:
        precision = precision_of(op, model)
        kernel = target.kernel(op.type, precision) or target.kernel(op.type, "float") \
            or target.default["float"] or Kernel(False, 1.0)
        total += work(op, model) * kernel.ns
        if previous is not None and kernel.delegated != previous:
            switches += 1
        previous = kernel.delegated
    return Cost(total + switches * target.partition_ns, switches)


def unsupported(model: Model, target: Target) -> list[str]:
    """What `target` cannot run of `model`, as "OP 'node'": the ops with no kernel there at the
    precision they compute in, and on an integer-only target the ops computing in float; the
    QUANTIZE and DEQUANTIZE around them only when nothing else is listed (a float graph input
    or output on an integer-only target)."""
    found, conversions = [], []
    for op in model.operators:
        precision = precision_of(op, model)
        floating = target.integer_only and _touches_float(op, model)
        if target.kernel(op.type, precision) is None or floating:
            (conversions if op.type in CONVERSIONS else found).append(f"{op.type} {op.source!r}")
    return list(dict.fromkeys(found or conversions))


def target_text(data: dict) -> str:
    """A target file's JSON as the package writes it: the fields in order, each op's kernels on
    one line (bench/target_profile.py writes measured files with it)."""
    def one_line(value) -> str:
        return json.dumps(value, sort_keys=False)

    lines = ["{"]
    fields = [(k, v) for k, v in data.items() if k != "ops"]
    for key, value in fields:
        lines.append(f" {json.dumps(key)}: {one_line(value)},")
    ops = data.get("ops", {})
    lines.append(' "ops": {')
    lines += [f"  {json.dumps(op)}: {one_line(ops[op])}," for op in sorted(ops)]
    if ops:
        lines[-1] = lines[-1].rstrip(",")
    lines += [" }", "}"]
    return "\n".join(lines) + "\n"
