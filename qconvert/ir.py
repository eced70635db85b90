"""The array/operator model (TOCO's IR) that every stage reads and rewrites.

The Model owns named Arrays and Operators in execution order (topological). Operators are TFLite
builtin operators (`type` is the BuiltinOperator name, e.g. "CONV_2D") that refer to arrays by
name, so rewiring is changing a string. An array is constant exactly when it has `data`; it is
quantized exactly when it has `quant` (calibration fills `minmax`, the quantize steps `quant`).

Cost is linear in the model: the Model keeps the order as a linked list (insert and remove
anywhere in O(1)) and a use/def index (each tensor's producer and readers), both kept current by
its edit methods. So once an operator is in a model, its inputs and outputs change only through
those methods (set_input, set_outputs, rename_uses, ...); check_invariants verifies the index.
Operators are compared by identity: two ops with equal fields are still two ops.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import sys
from dataclasses import dataclass, field

import numpy as np


@dataclass
class MinMax:
    """The real-valued range an array takes (from calibration, QDQ nodes or hardcoded rules).
    `source` says where it came from, for the per-tensor report; it takes no part in equality.
    `softmax_floor`, set by calibration on a SOFTMAX's input whose rows held masked values
    (quantize/calibration_methods.py, softmax_floor): its lowest unmasked value less the margin
    below which the int8 SOFTMAX cannot tell a value from -inf; transforms/saturate_masked_scores.py
    makes the masked values saturate there."""

    min: float
    max: float
    source: str = field(default="", compare=False)
    softmax_floor: float | None = field(default=None, compare=False)


@dataclass
class QuantParams:
    """real = scale * (q - zero_point); per-tensor when `axis` is None, else per slice along `axis`."""

    scale: np.ndarray
    zero_point: np.ndarray
    axis: int | None = None


@dataclass
class Array:
    """A tensor: its dtype (numpy), its static shape, and its data if it is a constant."""

    name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    data: np.ndarray | None = None
    minmax: MinMax | None = None
    quant: QuantParams | None = None
    narrow_range: bool = False
    is_variable: bool = False  # TFLite stateful tensor (LSTM state)
    # The values are the computed ones divided per channel (last axis) by this: a rewrite that
    # equalized the channels' ranges (None: as computed). What maps the tensor back (the
    # fake-quant graph) multiplies by it.
    channel_scale: np.ndarray | None = None

    @property
    def is_constant(self) -> bool:
        return self.data is not None


@dataclass(frozen=True)
class DynamicBatch:
    """A batch dimension the ONNX model leaves dynamic (axis 0 of every input, under one name),
    which the loader set to 1 (qconvert/onnx/dynamic_batch.py).

    `tensors` are the tensors whose axis 0 is that batch in the finished model: the writer gives
    them a shape_signature of -1 there, so that LiteRT's resize_tensor_input can change it. Empty
    until dynamic_batch.mark_batch_tensors has run, and when `fixed_because` says why the batch
    stays 1."""

    symbol: str  # the ONNX dim_param; "" when the dimension is unnamed
    fixed_because: str = ""
    tensors: frozenset[str] = frozenset()


# Instrumentation, read by tests/models/test_linear_cost.py and never by the program: how many
# operators whole-graph walks visited ("operator visits") and how many constant buffers the writer
# compared byte by byte. Both must grow linearly with the model.
WORK: collections.Counter = collections.Counter()


@dataclass(eq=False)
class Operator:
    """A TFLite builtin op. `inputs` may hold "" for an omitted optional input.

    `options` holds the fields of the op's TFLite options table by their schema names
    (e.g. {"stride_w": 2}); the fused activation lives apart because transformations change it.
    `source` is the ONNX node the op came from, for error messages.
    `subgraphs` holds the bodies of a control-flow op (IF, WHILE) as Models of their own, by the
    options field that the writer sets to their subgraph index ("then_subgraph_index"...).
    Under --quantize, `quantized` names the activation type of the quantized kernel the op runs
    ("int8", or "int16" for a 16x8 kernel; "" when it runs float), and `float_reason` says why one
    that handles float tensors stays float (both set by the quantize_activations step).
    """

    type: str
    inputs: list[str]
    outputs: list[str]
    options: dict = field(default_factory=dict)
    fused_activation: str = "NONE"
    source: str = ""
    quantized: str = ""
    float_reason: str = ""
    subgraphs: dict = field(default_factory=dict)


class OperatorSequence(tuple):
    """The model's operators in execution order, as of its last edit (edits made while a pass
    iterates it do not disturb the iteration). Searching it by value is refused: that is a scan of
    the whole graph, and inside a loop over operators it makes a pass quadratic; ask the model
    (has_operator, producer, consumers) instead."""

    def __iter__(self):
        WORK["operator visits"] += len(self)
        return super().__iter__()

    def _refuse(self, *args):
        raise TypeError("operators are not searched by value: use Model.has_operator, "
                        "Model.producer or Model.consumers")

    index = count = __contains__ = _refuse


class Model:
    """Arrays by name, operators in execution order, and the graph's input and output names."""

    def __init__(self) -> None:
        self.arrays: dict[str, Array] = {}
        self.inputs: list[str] = []
        self.outputs: list[str] = []
        # How each graph input/output's axes relate to the ONNX tensor's (None: unchanged).
        self.io_permutation: dict[str, tuple[int, ...]] = {}
        # The dynamic batch the loader set to 1 (None: the model had none, or --input-shape).
        self.dynamic_batch: DynamicBatch | None = None
        # Dynamic dimensions beyond the batch (onnx/dynamic_dims.py: DynamicDims), set by the
        # loader at fixed sizes; and each tensor's axes that stay resizable in the .tflite
        # (shape_signature -1), once compared with a probe at another size.
        self.dynamic_dims = None
        self.dynamic_axes: dict[str, frozenset[int]] = {}
        # Weights the source model stores as integers (onnxruntime's dynamic quantization), by
        # the source node reading them: (the scale they were stored with, their largest |integer|),
        # each one value or one per output channel, so that transforms/store_integer_weights.py
        # writes the same integers.
        self.integer_weights: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
        # ... the source nodes whose stored integers could not be kept (requantized to int8)
        self.requantized_weights: list[str] = []
        self._suffix = 0  # the next number unique_name appends
        # Names that belong to the source model (every ONNX value, in every subgraph), reserved
        # before any importer makes a name of its own: unique_name never hands one out, so a
        # constant qconvert creates can never shadow a model tensor the loader adds later.
        self.reserved: set[str] = set()
        # Execution order as a doubly linked list, and its snapshot until the next edit.
        self._prev: dict[Operator, Operator | None] = {}
        self._next: dict[Operator, Operator | None] = {}
        self._first: Operator | None = None
        self._last: Operator | None = None
        self._snapshot: OperatorSequence | None = OperatorSequence()
        # The use/def index: each tensor's producing op, and the ops reading it with how many of
        # their inputs do (an op may read a tensor twice: MUL(x, x)).
        self._producer: dict[str, Operator] = {}
        self._readers: dict[str, dict[Operator, int]] = {}

    # --- arrays -------------------------------------------------------------------------------
    def unique_name(self, hint: str) -> str:
        """`hint`, or `hint_N`: a name no array has and the source model does not reserve."""
        name = hint
        while name in self.arrays or name in self.reserved or not name:
            name = f"{hint}_{self._suffix}"
            self._suffix += 1
        return name

    def copy(self) -> Model:
        """A copy to transform on its own (the precision planner quantizes one per plan): new
        Array and Operator objects with their own lists, options and ranges' holders; constant
        data and params are shared, which is safe because steps replace an array's data rather
        than write into it (data_to_change_in_place refuses data that another Array holds)."""
        other = Model()
        other.arrays = {name: dataclasses.replace(array) for name, array in self.arrays.items()}
        other.inputs, other.outputs = list(self.inputs), list(self.outputs)
        other.io_permutation = dict(self.io_permutation)
        other.dynamic_batch = self.dynamic_batch  # immutable
        other.dynamic_dims = self.dynamic_dims  # the loader's record, shared
        other.dynamic_axes = dict(self.dynamic_axes)
        other.integer_weights = self.integer_weights  # fixed once the model is loaded
        other.requantized_weights = list(self.requantized_weights)
        other._suffix = self._suffix
        other.reserved = self.reserved  # fixed once the model is loaded
        for op in self.operators:
            other.add_operator(dataclasses.replace(
                op, inputs=list(op.inputs), outputs=list(op.outputs), options=copy.deepcopy(op.options),
                subgraphs={field: graph.copy() for field, graph in op.subgraphs.items()}))
        return other

    def add_array(self, hint: str, shape, dtype, data: np.ndarray | None = None) -> str:
        """Creates an array under a fresh name derived from `hint` and returns that name."""
        return self.add_named_array(self.unique_name(hint), shape, dtype, data)

    def add_named_array(self, name: str, shape, dtype, data: np.ndarray | None = None) -> str:
        """Creates the array of a source-model tensor under its own name (reserved or not), which
        no array may hold yet."""
        if not name or name in self.arrays:
            raise ValueError(f"array {name!r} exists already")
        self.arrays[name] = Array(name, np.dtype(dtype), tuple(int(d) for d in shape), data)
        return name

    def add_array_like(self, hint: str, shape, like: str) -> str:
        """A new activation array holding `like`'s values rearranged (transposed, reshaped, or a
        slice of them): same dtype, and its calibrated range as a bound."""
        name = self.add_array(hint, shape, self.arrays[like].dtype)
        self.arrays[name].minmax = self.arrays[like].minmax
        return name

    def add_constant(self, hint: str, value) -> str:
        value = np.asarray(value)
        return self.add_array(hint, value.shape, value.dtype, value)

    def constant(self, name: str) -> np.ndarray | None:
        """The data of a constant array, or None for an activation or an omitted input ("")."""
        array = self.arrays.get(name) if name else None
        return None if array is None else array.data

    def data_to_change_in_place(self, name: str) -> np.ndarray | None:
        """The data of constant `name` when a step may overwrite it, else None: one op input
        reads it, it is writable, and nothing else refers to its memory. A step that rewrites a
        large weight (a permutation) then needs no second copy of it.

        CPython counts references: another Array sharing the data, or a view of its memory
        anywhere, adds one to the array or to the array owning the memory."""
        data = self.constant(name)
        if data is None or not self.is_discardable(name) or not data.flags.writeable:
            return None
        owner = data if data.base is None else data.base
        if not isinstance(owner, np.ndarray) or owner.base is not None:
            return None  # memory owned by a bytes object, a memory map...
        if owner is data:
            # `data` is referenced by the Array, the two names here and getrefcount's argument.
            return data if sys.getrefcount(data) == 4 else None
        # `data` by the Array, `data` here and the argument; `owner` by data.base, `owner` here
        # and the argument.
        return data if sys.getrefcount(data) == 3 and sys.getrefcount(owner) == 3 else None

    # --- operators: order -----------------------------------------------------------------------
    @property
    def operators(self) -> OperatorSequence:
        """The operators in execution order (a snapshot: edit through the methods below)."""
        if self._snapshot is None:
            ops, op = [], self._first
            while op is not None:
                ops.append(op)
                op = self._next[op]
            WORK["operator visits"] += len(ops)
            self._snapshot = OperatorSequence(ops)
        return self._snapshot

    def has_operator(self, op: Operator) -> bool:
        return op in self._next

    def add_operator(self, op: Operator) -> Operator:
        """Appends `op` at the end of the execution order."""
        return self._link(op, self._last, None)

    def insert_before(self, anchor: Operator | None, op: Operator) -> Operator:
        """Puts `op` right before `anchor` (None: at the end)."""
        return self._link(op, self._last if anchor is None else self._prev[anchor], anchor)

    def insert_after(self, anchor: Operator | None, op: Operator) -> Operator:
        """Puts `op` right after `anchor` (None: at the start)."""
        return self._link(op, anchor, self._first if anchor is None else self._next[anchor])

    def remove_operator(self, op: Operator) -> None:
        prev, nxt = self._prev.pop(op), self._next.pop(op)
        if prev is None:
            self._first = nxt
        else:
            self._next[prev] = nxt
        if nxt is None:
            self._last = prev
        else:
            self._prev[nxt] = prev
        self._snapshot = None
        self._unindex(op)

    def replace_operator(self, old: Operator, new: Operator) -> Operator:
        """`new` takes `old`'s place in the execution order."""
        self.insert_before(old, new)
        self.remove_operator(old)
        return new

    def _link(self, op: Operator, prev: Operator | None, nxt: Operator | None) -> Operator:
        if op in self._next:
            raise AssertionError(f"{op.type} ({op.source}) is already in the model")
        self._prev[op], self._next[op] = prev, nxt
        if prev is None:
            self._first = op
        else:
            self._next[prev] = op
        if nxt is None:
            self._last = op
        else:
            self._prev[nxt] = op
        self._snapshot = None
        self._index(op)
        return op

    # --- operators: the use/def index ---------------------------------------------------------
    def producer(self, name: str) -> Operator | None:
        """The op that writes `name` (None for graph inputs, constants and "")."""
        return self._producer.get(name)

    def consumers(self, name: str) -> list[Operator]:
        """The ops reading `name`, once per input that reads it (MUL(x, x) is there twice)."""
        readers = self._readers.get(name)
        if not readers:
            return []
        return [op for op, uses in readers.items() for _ in range(uses)]

    def is_discardable(self, name: str, count: int = 1) -> bool:
        """True when `name` is not a graph output and has exactly `count` consuming op inputs."""
        readers = self._readers.get(name)
        return name not in self.outputs and sum(readers.values() if readers else ()) == count

    def _add_use(self, name: str, op: Operator) -> None:
        if name:
            readers = self._readers.setdefault(name, {})
            readers[op] = readers.get(op, 0) + 1

    def _drop_use(self, name: str, op: Operator) -> None:
        if name:
            readers = self._readers[name]
            readers[op] -= 1
            if not readers[op]:
                del readers[op]
                if not readers:
                    del self._readers[name]

    def _index(self, op: Operator) -> None:
        for name in op.inputs:
            self._add_use(name, op)
        for name in op.outputs:
            self._producer[name] = op

    def _unindex(self, op: Operator) -> None:
        for name in op.inputs:
            self._drop_use(name, op)
        for name in op.outputs:
            if self._producer.get(name) is op:
                del self._producer[name]

    # --- operators: rewiring ------------------------------------------------------------------
    def set_input(self, op: Operator, index: int, name: str) -> None:
        if op in self._next:
            self._drop_use(op.inputs[index], op)
            self._add_use(name, op)
        op.inputs[index] = name

    def set_inputs(self, op: Operator, names: list[str]) -> None:
        if op in self._next:
            for old in op.inputs:
                self._drop_use(old, op)
            for new in names:
                self._add_use(new, op)
        op.inputs = list(names)

    def set_output(self, op: Operator, index: int, name: str) -> None:
        if op in self._next:
            if self._producer.get(op.outputs[index]) is op:
                del self._producer[op.outputs[index]]
            self._producer[name] = op
        op.outputs[index] = name

    def set_outputs(self, op: Operator, names: list[str]) -> None:
        if op in self._next:
            for old in op.outputs:
                if self._producer.get(old) is op:
                    del self._producer[old]
            for new in names:
                self._producer[new] = op
        op.outputs = list(names)

    def rename_uses(self, old: str, new: str) -> None:
        """Makes every consumer (and the graph outputs) read `new` where they read `old`."""
        for op in list(self._readers.get(old, ())):
            self.set_inputs(op, [new if n == old else n for n in op.inputs])
        self.outputs = [new if n == old else n for n in self.outputs]

    def rename_tensor(self, old: str, new: str) -> None:
        """Every reference to `old` (its producer, its readers, the graph outputs) becomes `new`;
        the array itself moves to the new name unless `new` already has one."""
        producer = self._producer.get(old)
        if producer is not None:
            self.set_outputs(producer, [new if n == old else n for n in producer.outputs])
        self.rename_uses(old, new)
        if new not in self.arrays:
            self.arrays[new] = self.arrays.pop(old)
            self.arrays[new].name = new

    def bypass(self, op: Operator) -> bool:
        """Removes an op whose single output equals its first input, rewiring its readers.

        When the output is a graph output, the input is renamed to the output instead (possible
        unless the input is itself a graph input, graph output or constant). An input without a
        calibrated range takes the output's (a model's QDQ pair on an Identity's output). Returns
        whether the op could be removed.
        """
        src, dst = op.inputs[0], op.outputs[0]
        if self.arrays[dst].is_variable or self.arrays[src].is_variable:
            return False
        if dst not in self.outputs:
            if self.arrays[src].minmax is None:  # the same values: the readers keep dst's range
                self.arrays[src].minmax = self.arrays[dst].minmax
            self.remove_operator(op)
            self.rename_uses(dst, src)
            return True
        if src in self.inputs or src in self.outputs or self.arrays[src].is_constant:
            return False
        self.remove_operator(op)
        self.rename_tensor(src, dst)
        return True

    def subgraphs(self) -> list[Model]:
        """The bodies of its control-flow ops, nested ones too, in the order the writer numbers
        them (after the model itself, subgraph 0): breadth first, in execution order."""
        found, k = [self], 0
        while k < len(found):
            for op in found[k].operators:
                found.extend(op.subgraphs.values())
            k += 1
        return found[1:]

    # --- whole-graph passes (each O(ops + arrays)) --------------------------------------------
    def remove_unused(self) -> bool:
        """Drops ops whose outputs nobody reads, then arrays nobody refers to. Returns whether it did.

        One backward sweep: in execution order every reader comes after its producer, so by the
        time an op is reached all its outputs' live readers have been seen."""
        used = set(self.outputs)
        dead = []
        for op in reversed(list(self.operators)):
            if any(o in used for o in op.outputs):
                used.update(op.inputs)
            else:
                dead.append(op)
        for op in dead:
            self.remove_operator(op)
        referenced = set(self.inputs) | set(self.outputs) | self._producer.keys() | self._readers.keys()
        unreferenced = [n for n in self.arrays if n not in referenced]
        for name in unreferenced:
            del self.arrays[name]
        return bool(dead or unreferenced)

    def check_invariants(self) -> None:
        """Every referenced array exists, every array has one producer, ops are in order, and the
        use/def index matches the operators (an edit that bypassed the edit methods breaks it)."""
        available = set(self.inputs) | {n for n, a in self.arrays.items() if a.is_constant}
        producers: dict[str, Operator] = {}
        readers: dict[str, dict[Operator, int]] = {}
        for op in self.operators:
            for name in op.inputs:
                if name and name not in available:
                    raise AssertionError(f"{op.type} ({op.source}) reads {name!r} before it is made")
                if name:
                    uses = readers.setdefault(name, {})
                    uses[op] = uses.get(op, 0) + 1
            for name in op.outputs:
                if name in available:
                    raise AssertionError(f"{name!r} has two producers")
                available.add(name)
                producers[name] = op
        for name in self.outputs:
            if name not in available:
                raise AssertionError(f"graph output {name!r} is never produced")
        if producers != self._producer or readers != self._readers:
            raise AssertionError("the use/def index is out of date: an operator's inputs or "
                                 "outputs were changed without the Model's edit methods")


# --- derived names ---------------------------------------------------------------------------
# A tensor a step derives from another (its channels-last twin, its copy of another type) is
# named after it. The per-tensor report and the fake-quant graph parse these names back to the
# source model's tensor (counterpart), so they are built and parsed here and only here.
# unique_name may append `_N` to any of them.
LAYOUT_SUFFIX = "_nhwc"
DEQUANTIZED_SUFFIX = "_dequantized"
TYPE_SUFFIXES = (DEQUANTIZED_SUFFIX, "_int8", "_uint8", "_int16")


def channels_last_name(name: str) -> str:
    """The name hint of `name`'s channels-last (NHWC) twin."""
    return name + LAYOUT_SUFFIX


def typed_name(name: str, dtype) -> str:
    """The name hint of `name`'s copy stored as `dtype`: x_int8, x_uint8, x_int16."""
    return f"{name}_{np.dtype(dtype).name}"


def dequantized_name(name: str) -> str:
    """The name hint of `name`'s float32 copy (a DEQUANTIZE's output)."""
    return name + DEQUANTIZED_SUFFIX


def without_type_suffix(name: str) -> str:
    """`name` without the one type suffix qconvert may have added (`x_nhwc_int8`: `x_nhwc`)."""
    for suffix in TYPE_SUFFIXES:
        if name.endswith(suffix) and name[:-len(suffix)]:
            return name[:-len(suffix)]
    return name


def without_layout_suffix(name: str) -> str | None:
    """The tensor whose channels-last twin `name` is, or None."""
    if name.endswith(LAYOUT_SUFFIX) and name[:-len(LAYOUT_SUFFIX)]:
        return name[:-len(LAYOUT_SUFFIX)]
    return None


CHANNELS_LAST = "channels-last"  # counterpart's layout of a channels-last twin


def counterpart(name: str, onnx_names: set[str], io_layouts: dict[str, tuple[int, ...]]):
    """(ONNX tensor, its layout in the .tflite) that the .tflite tensor `name` holds, or None.
    The layout is None (the ONNX one), CHANNELS_LAST, or a graph input's or output's
    permutation from `io_layouts` (ONNX axes in the file's order)."""
    name = without_type_suffix(name)
    if name in onnx_names:
        return name, io_layouts.get(name)
    twin_of = without_layout_suffix(name)
    if twin_of in onnx_names:
        return twin_of, CHANNELS_LAST
    return None
