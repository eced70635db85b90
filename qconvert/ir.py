"""The array/operator model (TOCO's IR) that every stage reads and rewrites.

The Model owns named Arrays and an ordered list of Operators (topological order). Operators are
TFLite builtin operators (`type` is the BuiltinOperator name, e.g. "CONV_2D") that refer to arrays by
name, so rewiring is changing a string. An array is constant exactly when it has `data`; it is
quantized exactly when it has `quant` (calibration fills `minmax`, the quantize steps `quant`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np


@dataclass
class MinMax:
    """The real-valued range an array takes (from calibration, QDQ nodes or hardcoded rules)."""

    min: float
    max: float


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

    @property
    def is_constant(self) -> bool:
        return self.data is not None


@dataclass
class Operator:
    """A TFLite builtin op. `inputs` may hold "" for an omitted optional input.

    `options` holds the fields of the op's TFLite options table by their schema names
    (e.g. {"stride_w": 2}); the fused activation lives apart because transformations change it.
    `source` is the ONNX node the op came from, for error messages.
    Under --quantize, `int8` says the op runs its int8 kernel, and `float_reason` why one that
    handles float tensors stays float (both set by the quantize_activations step).
    """

    type: str
    inputs: list[str]
    outputs: list[str]
    options: dict = field(default_factory=dict)
    fused_activation: str = "NONE"
    source: str = ""
    int8: bool = False
    float_reason: str = ""


class Model:
    """Arrays by name, operators in execution order, and the graph's input and output names."""

    def __init__(self) -> None:
        self.arrays: dict[str, Array] = {}
        self.operators: list[Operator] = []
        self.inputs: list[str] = []
        self.outputs: list[str] = []
        # How each graph input/output's axes relate to the ONNX tensor's (None: unchanged).
        self.io_permutation: dict[str, tuple[int, ...]] = {}
        self._counter = itertools.count()

    # --- arrays -------------------------------------------------------------------------------
    def unique_name(self, hint: str) -> str:
        name = hint
        while name in self.arrays or not name:
            name = f"{hint}_{next(self._counter)}"
        return name

    def add_array(self, hint: str, shape, dtype, data: np.ndarray | None = None) -> str:
        """Creates an array under a fresh name derived from `hint` and returns that name."""
        name = self.unique_name(hint)
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

    # --- graph queries ------------------------------------------------------------------------
    def producers(self) -> dict[str, Operator]:
        return {out: op for op in self.operators for out in op.outputs}

    def consumers(self) -> dict[str, list[Operator]]:
        result: dict[str, list[Operator]] = {}
        for op in self.operators:
            for name in op.inputs:
                if name:
                    result.setdefault(name, []).append(op)
        return result

    def is_discardable(self, name: str, consumers: dict[str, list[Operator]], count: int = 1) -> bool:
        """True when `name` is not a graph output and has exactly `count` consuming op inputs."""
        return name not in self.outputs and len(consumers.get(name, ())) == count

    def rename_uses(self, old: str, new: str) -> None:
        """Makes every consumer (and the graph outputs) read `new` where they read `old`."""
        for op in self.operators:
            op.inputs = [new if n == old else n for n in op.inputs]
        self.outputs = [new if n == old else n for n in self.outputs]

    def rename_tensor(self, old: str, new: str) -> None:
        """Every reference to `old` (its producer, its readers, the graph outputs) becomes `new`;
        the array itself moves to the new name unless `new` already has one."""
        for op in self.operators:
            op.outputs = [new if n == old else n for n in op.outputs]
        self.rename_uses(old, new)
        if new not in self.arrays:
            self.arrays[new] = self.arrays.pop(old)
            self.arrays[new].name = new

    def bypass(self, op: Operator) -> bool:
        """Removes an op whose single output equals its first input, rewiring its readers.

        When the output is a graph output, the input is renamed to the output instead (possible
        unless the input is itself a graph input, graph output or constant). Returns whether the
        op could be removed.
        """
        src, dst = op.inputs[0], op.outputs[0]
        if self.arrays[dst].is_variable or self.arrays[src].is_variable:
            return False
        if dst not in self.outputs:
            self.operators.remove(op)
            self.rename_uses(dst, src)
            return True
        if src in self.inputs or src in self.outputs or self.arrays[src].is_constant:
            return False
        self.operators.remove(op)
        self.rename_tensor(src, dst)
        return True

    def remove_unused(self) -> bool:
        """Drops ops whose outputs nobody reads, then arrays nobody refers to. Returns whether it did."""
        changed = False
        while True:
            used = set(self.outputs)
            for op in self.operators:
                used.update(op.inputs)
            kept = [op for op in self.operators if any(o in used for o in op.outputs)]
            if len(kept) == len(self.operators):
                break
            self.operators = kept
            changed = True
        referenced = set(self.inputs) | set(self.outputs)
        for op in self.operators:
            referenced.update(op.inputs)
            referenced.update(op.outputs)
        for name in [n for n in self.arrays if n not in referenced]:
            del self.arrays[name]
            changed = True
        return changed

    def check_invariants(self) -> None:
        """Every referenced array exists, every array has one producer, and ops are in order."""
        available = set(self.inputs) | {n for n, a in self.arrays.items() if a.is_constant}
        for op in self.operators:
            for name in op.inputs:
                if name and name not in available:
                    raise AssertionError(f"{op.type} ({op.source}) reads {name!r} before it is made")
            for name in op.outputs:
                if name in available:
                    raise AssertionError(f"{name!r} has two producers")
                available.add(name)
        for name in self.outputs:
            if name not in available:
                raise AssertionError(f"graph output {name!r} is never produced")
