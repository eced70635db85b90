"""What an importer (qconvert.ops) works with while it turns one ONNX node into IR operators: the
node, its attributes decoded (OnnxNode), and the ImportContext, which answers about the model
being built (shapes, dtypes, constant inputs; refusals naming the node) and adds to it (operators,
arrays, constants).

Every constant an importer adds is narrowed as the loader narrows the graph's (narrow: int64 as
int32, float64 and float16 as float32), so the rules for int64 data int32 cannot hold are here
with it: saturated where its reader computes the same so (saturation_is_exact), kept int64 by an
op with a TFLite int64 kernel (INT64_KERNELS), else refused in one line (int32_overflow).

It is apart from loader.py, which settles the ONNX graph and runs each node through its importer
with one ImportContext (loader._Importer), because this is the importers' side of the loading,
and the loader applies its narrowing to the graph's own constants too; the loader imports it,
never the other way.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Mapping
from dataclasses import dataclass

import numpy as np

from ..errors import ConversionError
from ..ir import Model, Operator

_INT32 = np.iinfo(np.int32)


@dataclass
class OnnxNode:
    """An ONNX node as importers see it: attributes decoded to Python values."""

    name: str
    op_type: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict
    domain: str = ""

    def attr(self, name: str, default=None):
        return self.attrs.get(name, default)


# ONNX ops whose TFLite kernels (ADD, SUB, MUL, FLOOR_MOD, MAXIMUM, MINIMUM, and the LESS,
# NOT_EQUAL, SELECT_V2 of an integer fmod) take int64: one reading a constant int32 cannot hold
# stays int64 where its output leaves the graph (loader._Importer.computes_in_int64). DIV and
# FLOOR_DIV have no int64 kernel.
INT64_KERNELS = {"Add", "Sub", "Mul", "Mod", "Max", "Min"}


# Where a node reads an int64 constant whose values int32 cannot hold, saturating them to int32's
# range computes the same result as ONNX: Slice's starts, ends and steps (clamped to the dimension
# anyway), a Loop's trip count (no TFLite loop runs 2^31 times), Trilu's k (beyond any dimension
# either way), NonMaxSuppression's max_output_boxes_per_class (at most the boxes there are:
# torchvision writes INT64_MAX); and, since the other operands hold int32 values inside, a Clip/Max bound below
# int32's minimum or a Clip/Min bound above its maximum. Slots by op: ("low"/"high": values must
# all lie on that side of the int32 range; "any": every value).
_SATURATES = {"Slice": {1: "any", 2: "any", 4: "any"}, "Loop": {0: "any"}, "Trilu": {1: "any"},
              "NonMaxSuppression": {2: "high"},
              "Clip": {1: "low", 2: "high"}, "Max": "low", "Min": "high"}


def saturation_is_exact(op_type: str, slot: int, value: np.ndarray) -> bool:
    """Whether node `op_type` reading the int64 constant `value` at input `slot` computes the
    same with `value` saturated to int32's range (_SATURATES)."""
    rule = _SATURATES.get(op_type)
    side = rule.get(slot) if isinstance(rule, dict) else rule
    outside = value[(value < _INT32.min) | (value > _INT32.max)]
    return (side == "any" or (side == "low" and bool(np.all(outside < _INT32.min)))
            or (side == "high" and bool(np.all(outside > _INT32.max))))


def int32_overflow(value: np.ndarray, what: str, reader: str, op_type: str = "") -> ConversionError:
    """The one-line refusal for int64 data that int32 cannot hold, read by `reader` (a node of
    `op_type`): why that reader cannot keep it in int64."""
    bad = value[(value < _INT32.min) | (value > _INT32.max)]
    if op_type in INT64_KERNELS:
        why = ("it stays int64 only where its output is a graph output declared int64, and here "
               "qconvert narrows int64 to int32 (TFLite's kernels index with int32)")
    elif op_type == "Div":
        why = "TFLite's DIV has no int64 kernel"
    else:
        why = "qconvert narrows int64 to int32 inside the TFLite graph (its kernels index with int32)"
    return ConversionError(f"{what} holds {int(bad.flat[0])}, which int32 cannot hold; {reader} "
                           f"computes it in int32: {why}")


def narrow(value: np.ndarray, what: str, saturate: bool = False, reader: str = "the graph",
           op_type: str = "") -> np.ndarray:
    """Constant data in its graph dtype: int64 as int32, float64 and float16 as float32 (a
    float16 model's weights are stored as float16 again when it is written:
    qconvert/transforms/store_weights_float16.py). An int64 value int32 cannot hold is refused in
    one line (int32_overflow, naming `reader`), or saturated to int32's range when every reader
    computes the same with it so (`saturate`: saturation_is_exact)."""
    value = np.asarray(value)
    if value.dtype in (np.float64, np.float16):
        return value.astype(np.float32)
    if value.dtype != np.int64:
        return value
    if value.size and (value.min() < _INT32.min or value.max() > _INT32.max):
        if not saturate:
            raise int32_overflow(value, what, reader, op_type)
        value = np.clip(value, _INT32.min, _INT32.max)
    return value.astype(np.int32)


class ImportContext:
    """What an importer may ask and do while turning one ONNX node into IR operators."""

    # the values whose shapes the values decide (the loader's _Graph.run_time_shaped)
    run_time_shaped: Collection[str] = ()
    # such computed values at the loader's sizes (_Graph.at_sizes): what they type, never data
    at_sizes: Mapping[str, np.ndarray] = {}
    # loaded again with the shape arithmetic dynamic_dims could not follow computed (`computed`):
    # a Reshape reads a computed target as a tensor
    sizes_computed: bool = False

    def __init__(self, model: Model, opset: int, consumed: Collection[str]):
        self._consumed = consumed
        self.model = model
        self.opset = opset
        self.node: OnnxNode | None = None
        self.source_mark = ""
        self.wide = False  # importing a node that computes in int64: constants are not narrowed

    def error(self, message: str) -> ConversionError:
        node = self.node
        return ConversionError(f"node {node.name!r} ({node.op_type}): {message}")

    def is_used(self, name: str) -> bool:
        """Whether a node or a graph output reads the value `name` (an optional output, say)."""
        return bool(name) and name in self._consumed

    def shape(self, name: str) -> tuple[int, ...]:
        return self.model.arrays[name].shape

    def dtype(self, name: str) -> np.dtype:
        return self.model.arrays[name].dtype

    def rank(self, name: str) -> int:
        return len(self.shape(name))

    def check_not_empty(self, name: str) -> None:
        """TFLite's convolutions, pools and matrix products refuse an input with a zero-sized
        dimension at prepare time (elementwise ops and reductions run empty tensors)."""
        if 0 in self.shape(name):
            raise self.error(f"input {name!r} of shape {list(self.shape(name))} is empty; TFLite's "
                             f"{self.node.op_type} kernel cannot run an empty input")

    def check_broadcast(self, inputs: list[str], output: str) -> None:
        """The inputs' shapes broadcast to the output's (numpy's rule, ONNX's and TFLite's): a
        model whose shapes contradict each other is refused here rather than by LiteRT."""
        shapes = [self.shape(n) for n in inputs if n]
        try:
            result = np.broadcast_shapes(*shapes)
        except ValueError:
            raise self.error("input shapes " + ", ".join(str(list(s)) for s in shapes)
                             + " do not broadcast") from None
        if tuple(result) != tuple(self.shape(output)):
            raise self.error(f"input shapes {', '.join(str(list(s)) for s in shapes)} broadcast to "
                             f"{list(result)}, not to the output's shape {list(self.shape(output))}")

    def const(self, name: str) -> np.ndarray | None:
        """The value of a constant input (None for an activation or an omitted input)."""
        return self.model.constant(name)

    def require_const(self, name: str, what: str, needs: str = "") -> np.ndarray:
        """The value of the constant input `name`. One computed at run time is refused in one
        line naming the node, `what`, the input and the graph inputs it is computed from, then
        `needs`: why the TFLite op wants it constant and what would make it convert. Shapes are
        all static once importers run, so what is missing is a value, never a static graph."""
        value = self.const(name)
        if value is not None:
            return value
        sources, seen, pending = set(), {name}, [name]
        while pending:  # back through the producers to the graph inputs (CASTs of them too)
            producer = self.model.producer(pending.pop())
            for source in producer.inputs if producer is not None else ():
                if source and source not in seen and self.model.constant(source) is None:
                    seen.add(source)
                    pending.append(source)
                    if self.model.producer(source) is None:
                        sources.add(source)
        named = [n for n in self.model.inputs if n in sources] + sorted(sources - set(self.model.inputs))
        origin = (" from " + ", ".join(repr(n) for n in named)) if named else ""
        producer = self.model.producer(name)
        if producer is not None and producer.type == "CAST" and producer.source == f"input {producer.inputs[0]}":
            name = producer.inputs[0]  # a graph input narrowed to int32: the model's name for it
        how = "a graph input, fed at run time" if name in self.model.inputs else f"computed at run time{origin}"
        raise self.error(f"{what} (input {name!r}): {how}; " + (
            needs or "qconvert takes it as a constant only: make it an initializer (or compute "
            "it from constants and input shapes, which the loader folds)"))

    def add_op(self, type: str, inputs: list[str], outputs: list[str], options: dict | None = None,
               activation: str = "NONE") -> Operator:
        op = Operator(type, list(inputs), list(outputs), dict(options or {}), activation,
                      (self.node.name if self.node else "") + self.source_mark)
        return self.model.add_operator(op)

    @contextlib.contextmanager
    def marked(self, mark: str):
        """Ops added inside the block carry `mark` after the node's name in their `source` (a
        decomposition that a later step recognises by it: unary.ERF_MARK)."""
        previous, self.source_mark = self.source_mark, self.source_mark + mark
        try:
            yield
        finally:
            self.source_mark = previous

    def set_constant(self, name: str, value) -> None:
        """Makes the array `name` (a node output) a constant holding `value`, narrowed like
        every constant (int64 to int32)."""
        array = self.model.arrays[name]
        value = narrow(np.asarray(value), f"tensor {name!r}", reader=self.label(), op_type=self.op_type())
        array.data = np.ascontiguousarray(value, dtype=array.dtype).reshape(array.shape)

    def tensor(self, hint: str, shape, dtype) -> str:
        """A new intermediate array (an op output); returns its name."""
        return self.model.add_array(hint, shape, dtype)

    def constant(self, hint: str, value) -> str:
        """A new constant array; int64 values are narrowed to int32. Returns its name."""
        value = np.asarray(value)
        if not self.wide:  # an int64 node's constants stay int64 (loader._Importer.computes_in_int64)
            value = narrow(value, f"constant {hint!r}", reader=self.label(), op_type=self.op_type())
        return self.model.add_constant(hint, value)

    def label(self) -> str:
        """The node being imported, as refusals name it."""
        return f"node {self.node.name!r} ({self.node.op_type})" if self.node else "the graph"

    def op_type(self) -> str:
        return self.node.op_type if self.node else ""

    def unary(self, type: str, x: str, y: str, options: dict | None = None) -> Operator:
        return self.add_op(type, [x], [y], options)
