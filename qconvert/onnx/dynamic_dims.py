"""Dynamic dimensions other than the batch (a sequence length, an image's height and width, audio
frames): kept dynamic in the .tflite where the graph allows it, found by measuring.

Each dynamic dimension of an input beyond axis 0 (axis 0 is the batch's: dynamic_batch.py) that
--input-shape does not pin is a *symbol*: its ONNX name (dim_param), or "input:axis" when it has
none; inputs that share a name share the symbol (`symbols`). So is a dimension whose size the
values decide (NonZero's count: registry.RUN_TIME, sized by loader._run_time_size). The loader
converts at BASE_SIZE for every symbol, the same for every model, so the bytes written depend on
the model only (or at the size the calibration samples have, which are the user's data). The
driver then loads and float-transforms the model once more per probe group
(DynamicDims.probe_groups: each input symbol alone, the value-decided ones together) with its
symbols PROBE_STEP larger, and `keep_dynamic` compares each probe with the model:
- the same ops must read and write the same tensors with the same options (RESHAPE's new_shape
  aside), else the symbol is fixed at its size, the summary saying where the graphs part;
- each tensor's axes whose size moved with the symbol get -1 in the .tflite's shape_signature
  (Model.dynamic_axes), so that LiteRT's resize_tensor_input changes them;
- a constant that moved with it is the symbol's too. An integer one whose entries each move by
  a whole multiple of the size (a Reshape's target, a Slice's end, a Resize's size: TFLite reads
  them as tensors) is computed when the model runs, from the SHAPE of an input that carries the
  symbol (from its reader's own inputs first); a RESHAPE target with one moving entry gets -1
  there instead, and a SLICE running to the end of a moving axis becomes STRIDED_SLICE with
  that end masked, which XNNPACK keeps delegated. A constant of another dtype is rebuilt from
  one that does not move (Shaped): one smaller array broadcast to its shape (a value filled to
  a length), or the first rows of one of the model's initializers (a position table cut to the
  length), broadcast along a batch the table has one row of (Shaped.spread: a merged
  token-type + position embedding). Any other fixes the symbol, and the summary names the
  constant and the op reading it; the driver then loads the model once more with the shape
  arithmetic behind such constants computed when the model runs (DynamicDims.unfollowed: the
  ONNX tensors, or for a constant an importer made, a Gather's non-negative indices or a Pad's
  paddings, the inputs of its node), where a Reshape reads its computed target as a tensor and
  a Pad its computed pads (a causal mask from the length, a mask gathered at b * S + s, Swin's
  (7 - W % 7) % 7 window padding, a batch times a length), again with what that load could not
  follow, and keeps the first that fixes fewer symbols once a probe CONFIRM_STEP above agrees.
A symbol whose model does not convert at its probe's size is fixed too, with the loader's words;
a value-decided one cannot be fixed: its model is refused. The check then runs the file at
CHECK_SIZES besides its own (the driver's verify stage).
"""

from __future__ import annotations

import copy

from dataclasses import dataclass, field, replace

import numpy as np

from ..errors import ConversionError
from ..ir import Model, Operator

# Multiples of 32, so that a network that halves its size five times and concatenates skip
# connections (a U-Net) converts at each.
BASE_SIZE = 64
# A probe sets its symbols this much above their size (64 -> 96).
PROBE_STEP = 32
# A model loaded again with its shape arithmetic computed is probed at this step too, and kept only
# where both probes agree: a size computed from a padded one (Swin's windows: a 64 and a 96 image
# both pad their last stage to 7) can stand still between two sizes and move beyond them.
CONFIRM_STEP = 96
# The sizes the check runs the file at besides its own: 96 for every symbol, then every symbol at
# a size of its own (128, 160, ...: a height unlike the width).
CHECK_SIZES = (96, 128)
# A batch probed as a dimension (DynamicDims.add_batch) is converted at 1 and checked at these.
CHECK_BATCHES = (1, 3)
# ... and converted at this batch (at 1, a transpose of it is a reshape: nothing to compare).
BATCH_BASE = 2


def batch_symbol(name: str) -> str:
    """The symbol of a batch dimension named `name` ("" unnamed) among the dimensions."""
    return name or "batch"


@dataclass
class DynamicDims:
    """The symbols the loader set (by name: the size it set), where they sit among the ONNX
    inputs (by input: {axis: symbol}), and, once keep_dynamic has run, why a symbol was fixed at
    its size ({symbol: reason}; the others stay resizable)."""

    sizes: dict[str, int]
    inputs: dict[str, dict[int, str]]
    fixed_because: dict[str, str] = field(default_factory=dict)
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)  # those inputs' at `sizes`
    # symbols of dimensions the values decide (NonZero's count: loader._run_time_size), which
    # must stay resizable
    value_dependent: set[str] = field(default_factory=set)
    # the batch's symbol when the batch is probed as a dimension (add_batch), else ""
    batch: str = ""
    # the constants keep_dynamic could not follow (ONNX names where they are the model's): the
    # driver loads again with the shape arithmetic behind them computed when the model runs
    unfollowed: set[str] = field(default_factory=set)

    @property
    def resizable(self) -> list[str]:
        return [s for s in self.sizes if s not in self.fixed_because]

    def probe_groups(self) -> list[tuple[str, ...]]:
        """The symbols probed together: each input dimension alone (its own slopes), the
        dimensions the values decide all at once (two NonZero of one mask count the same, and
        moved apart their graph would not convert; an op that writes a tensor of a counted
        shape takes it from SHAPE, ops/folded.shape_of, so that the counts need not be told
        apart)."""
        placed = [s for s in self.sizes if s not in self.value_dependent]
        valued = tuple(s for s in self.sizes if s in self.value_dependent)
        return [(s,) for s in placed] + ([valued] if valued else [])

    def add_batch(self, name: str, inputs: list[str], shapes: dict[str, tuple]) -> None:
        """The batch (axis 0 of every input, at 1), which moves off axis 0 in the graph (a
        Flatten of [batch * sequence, 1]), probed like the other dimensions: where the
        comparison follows it, it stays resizable."""
        self.batch = batch_symbol(name)
        self.sizes[self.batch] = 1
        for input_name in inputs:
            self.inputs.setdefault(input_name, {})[0] = self.batch
            self.shapes[input_name] = tuple(shapes[input_name])

    def with_batch_at(self, size: int) -> DynamicDims:
        """A copy of these dimensions with the batch's (add_batch) at `size`."""
        other = copy.deepcopy(self)
        other.sizes[self.batch] = size
        other.shapes = {name: (size, *shape[1:]) for name, shape in self.shapes.items()}
        return other

    def drop_batch(self) -> None:
        """The batch no longer among the dimensions: it stays fixed at 1 (dynamic_batch.py)."""
        self.sizes.pop(self.batch, None)
        for axes in self.inputs.values():
            axes.pop(0, None)
        self.inputs = {name: axes for name, axes in self.inputs.items() if axes}
        self.shapes = {name: shape for name, shape in self.shapes.items() if name in self.inputs}
        self.batch = ""

    def probe_sizes(self, group: tuple[str, ...], step: int = PROBE_STEP) -> dict[str, int]:
        """The group's symbols `step` above their sizes (a batch PROBE_STEP above)."""
        return {s: self.sizes[s] + (PROBE_STEP if s == self.batch else step) for s in group}

    def check_shapes(self) -> list[dict[str, tuple[int, ...]]]:
        """The ONNX input shapes the check runs the file at besides its own: one set per
        CHECK_SIZES entry, the resizable symbols moved."""
        placed = {s for axes in self.inputs.values() for s in axes.values()}
        resizable = [s for s in self.resizable if s in placed]
        sets = []
        for k, size in enumerate(CHECK_SIZES):
            sizes = {s: CHECK_BATCHES[k] if s == self.batch else size + (32 * j if k else 0)
                     for j, s in enumerate(resizable)}
            sets.append({name: tuple(sizes.get(self.inputs.get(name, {}).get(axis), d)
                                     for axis, d in enumerate(shape))
                         for name, shape in self.shapes.items()})
        return sets if resizable else []


def _is_dynamic(dim) -> bool:
    return not dim.HasField("dim_value") or dim.dim_value < 0


def symbols(inputs, pinned: dict[str, tuple[int, ...]], named: dict[str, int]) -> DynamicDims | None:
    """The dynamic dimensions beyond axis 0 of the ONNX `inputs` (ValueInfoProtos) that neither
    --input-shape (`pinned`) nor a name it sizes (`named`) fixes, each at BASE_SIZE; None when
    there are none."""
    places: dict[str, dict[int, str]] = {}
    for value in inputs:
        if value.name in pinned or not value.type.HasField("tensor_type"):
            continue
        for axis, dim in enumerate(value.type.tensor_type.shape.dim):
            if axis == 0 or not _is_dynamic(dim) or dim.dim_param in named:
                continue
            places.setdefault(value.name, {})[axis] = dim.dim_param or f"{value.name}:{axis}"
    if not places:
        return None
    order = dict.fromkeys(s for axes in places.values() for s in axes.values())
    return DynamicDims(dict.fromkeys(order, BASE_SIZE), places)


def symbols_of(proto, pinned: dict[str, tuple[int, ...]]) -> DynamicDims | None:
    """`symbols` of the ONNX model's (a ModelProto's) inputs."""
    from .dynamic_batch import pinned_names

    weights = {t.name for t in proto.graph.initializer}
    inputs = [i for i in proto.graph.input if i.name not in weights]
    return symbols(inputs, pinned, pinned_names(inputs, pinned))


def has_symbols(proto, pinned: dict[str, tuple[int, ...]]) -> bool:
    """Whether the ONNX model (a ModelProto) has dynamic dimensions to probe: its inputs'
    (`symbols`), or an op's whose values decide a size (registry.RUN_TIME_SIZED)."""
    from ..ops.registry import RUN_TIME_SIZED, op_key

    return (symbols_of(proto, pinned) is not None
            or any(op_key(node) in RUN_TIME_SIZED for node in proto.graph.node))


def pin_advice(dims: DynamicDims, shapes: dict[str, tuple]) -> str:
    """The words after a conversion error at the symbols' sizes: what was set, and the
    --input-shape that pins each input carrying one (at those sizes: the user's to change)."""
    pins = " ".join(f"--input-shape {name}:" + ",".join(str(d) for d in shapes[name])
                    for name in dims.inputs)
    return (f"with dynamic {', '.join(repr(s) for s in dims.sizes)} set to "
            f"{', '.join(str(v) for v in dims.sizes.values())}; {pins} pins them")


# --- the two float models compared ----------------------------------------------------------
def keep_dynamic(model: Model, probes: dict[tuple[str, ...], Model | str], tables=None,
                 step: int = PROBE_STEP) -> None:
    """Compares `model` with each probe (a Model converted with a group of symbols `step`
    above their sizes, by DynamicDims.probe_groups, or the reason it did not convert) and keeps
    the symbols the graph allows resizable: their tensors' axes in model.dynamic_axes, their
    constants computed at run time (module docstring), a table cut to the size from the whole
    table among `tables` (the source model's initializers). The others are recorded in
    model.dynamic_dims.fixed_because; a dimension the values decide that cannot stay resizable
    is a ConversionError."""
    dims = model.dynamic_dims
    _keep_dynamic_in_bodies(model, probes, tables, step)
    moved: dict[tuple, tuple[dict[str, dict[int, int]], dict[str, np.ndarray]]] = {}
    why: dict[tuple, str] = {}
    for group, probe in probes.items():
        at = ", ".join(str(v) for v in dims.probe_sizes(group, step).values())
        if isinstance(probe, str):
            why[group] = f"the model does not convert at {at} ({probe})"
            continue
        axes, moves, why[group] = _compare(model, probe, at, dims.unfollowed)
        if not why[group]:
            moved[group] = (axes, moves)
    by_constant: dict[str, dict[tuple, np.ndarray]] = {}
    for group, (_, moves) in moved.items():
        for name, move in moves.items():
            by_constant.setdefault(name, {})[group] = move
    for name, by_group in by_constant.items():
        for group, move in by_group.items():
            if isinstance(move, Shaped) and move.cut:
                by_group[group] = _whole_table(move, tables) or move
    spreads = {name for name, by_group in by_constant.items()
               if any(isinstance(m, Shaped) for m in by_group.values())}
    targets = {name for name, by_group in by_constant.items()
               if name not in spreads and _takes_minus_one(model, name, by_group, moved)}
    plans, sources = [], _own_axes(moved)
    for name in [n for n in by_constant if n not in targets]:
        for op, k in _readers(model, name):
            plan, reason = _plan(model, name, op, by_constant[name], sources)
            reason = reason or _product(model, name, op, by_constant[name], spreads)
            if reason:
                dims.unfollowed.add(name)
                for group in by_constant[name]:
                    why[group] = why[group] or reason
            else:
                plans.append((op, k, *plan))
    _record_fixed(dims, why)
    for group in [g for g in moved if why[g]]:
        del moved[group]
    for axes, _ in moved.values():
        for name, moving in axes.items():
            model.dynamic_axes[name] = frozenset(model.dynamic_axes.get(name, frozenset()) | set(moving))
    for name in [n for n in by_constant if n in targets]:
        _minus_one_in_reshapes(model, name, by_constant[name])
    for op, k, offset, terms, shaped in plans:
        value = _compute_before(model, op, k, offset, terms)
        if shaped is not None:  # the computed value is the shape to build
            value = _shaped_before(model, op, k, shaped, value)
        _set_reshape_target(model, op, k, value)


def _keep_dynamic_in_bodies(model: Model, probes: dict, tables, step: int) -> None:
    """keep_dynamic in each control-flow body (an IF's branches) against the same body of each
    probe's op at the same place: a body's constants that follow a size are computed inside it
    (TFLite resizes a body's inputs to what the op passes each time it runs). Symbols it cannot
    keep are fixed in the main model's dims."""
    for k, op in enumerate(model.operators):
        for key, body in op.subgraphs.items():
            twins = {group: _twin_body(probe, k, op, key) for group, probe in probes.items()}
            body.dynamic_dims = model.dynamic_dims
            try:
                keep_dynamic(body, twins, tables, step)
            finally:
                body.dynamic_dims = None


def _twin_body(probe: Model | str, k: int, op: Operator, key: str) -> Model | str:
    """The body `key` of the probe's op k, the twin of `op`'s; or why there is none (the probe's
    reason when it did not convert)."""
    if isinstance(probe, str):
        return probe
    twin = probe.operators[k] if k < len(probe.operators) else None
    if twin is None or twin.type != op.type or key not in twin.subgraphs:
        return f"{op.type} (node {op.source}) is not the same op in every probe"
    return twin.subgraphs[key]


def _product(model: Model, name: str, op: Operator, by_group: dict, spreads: set) -> str:
    """Why an integer constant whose one entry moves with two groups cannot be computed (a
    batch times a height times a width in a reshape target: each slope holds at the other's
    converted size only), or ""."""
    if name in spreads:
        return ""
    counts = sum((np.ravel(move) != 0).astype(int) for move in by_group.values())
    if np.ndim(counts) == 0 or not np.any(counts > 1):
        return ""
    return (f"the constant {name!r} read by {op.type} (node {op.source}) has an entry that moves "
            f"with {' and '.join(repr(s) for g in by_group for s in g)} (a product of the sizes)")


def _own_axes(moved: dict) -> dict:
    """`moved` with each group's axes only those that moved in no other group's probe: a size
    follows the axis of one group (a flattened H x W moves with both, and a height computed
    from it would be right only while the width stays put)."""
    owners: dict[tuple[str, int], int] = {}
    for axes, _ in moved.values():
        for name, moving in axes.items():
            for axis in moving:
                owners[(name, axis)] = owners.get((name, axis), 0) + 1
    return {group: ({name: {a: size for a, size in moving.items() if owners[(name, a)] == 1}
                     for name, moving in axes.items()}, moves)
            for group, (axes, moves) in moved.items()}


def _record_fixed(dims: DynamicDims, why: dict[tuple, str]) -> None:
    """Each symbol of a group with a reason is fixed; one the values decide cannot be."""
    for group, reason in why.items():
        for symbol in group if reason else ():
            if symbol in dims.value_dependent:
                raise ConversionError(f"{symbol}: its size is known only when the model runs, and "
                                      f"the graph cannot follow it ({reason})")
            dims.fixed_because[symbol] = reason


def _compare(model: Model, probe: Model, at: str, unfollowed: set[str]) -> tuple[dict[str, dict[int, int]], dict[str, np.ndarray], str]:
    """(tensor -> {axis that moved: its size in the probe}, integer constant -> how far each
    entry moved, "") or (.., .., why the symbols must stay fixed); `at` names the probe's sizes."""
    ops, other = list(model.operators), list(probe.operators)
    if len(ops) != len(other):
        return {}, {}, f"at {at} the graph has {len(other)} ops, not {len(ops)}"
    for op, twin in zip(ops, other):
        if (op.type, op.inputs, op.outputs) != (twin.type, twin.inputs, twin.outputs):
            return {}, {}, f"at {at} {op.type} (node {op.source}) is computed otherwise"
        if _options(op) != _options(twin):
            return {}, {}, f"{op.type} (node {op.source}) has options that depend on the size"
    axes: dict[str, dict[int, int]] = {}
    moves: dict[str, np.ndarray] = {}
    for name, array in model.arrays.items():
        twin = probe.arrays.get(name)
        if twin is None or len(twin.shape) != len(array.shape):
            return {}, {}, f"tensor {name!r} is not the same tensor at {at}"
        if array.is_constant:
            base, other_data = array.data, twin.data
            if base.shape == other_data.shape and np.array_equal(base, other_data):
                continue
            shaped = _shaped(base, other_data)
            if shaped is not None:
                moves[name] = shaped
                continue
            if base.dtype.kind not in "iu" or base.shape != other_data.shape or base.ndim > 1:
                unfollowed.add(name)
                return {}, {}, (f"the constant {name!r} read by {_readers_text(model, name)} "
                                "depends on the size")
            moves[name] = other_data.astype(np.int64) - base.astype(np.int64)
            continue
        moving = {k: b for k, (a, b) in enumerate(zip(array.shape, twin.shape)) if a != b}
        if moving:
            axes[name] = moving
    return axes, moves, ""


@dataclass(frozen=True)
class Shaped:
    """A float (or any) constant whose shape moved, rebuilt when the model runs from a constant
    that does not move: `source` broadcast to its shape (a scalar filled to a length, a row
    repeated down a sequence: a folded ConstantOfShape or Expand to a computed shape), or with
    kind "table", `source` cut to its shape (a table's first rows: a position embedding gathered
    by Range(0, S), `source` the whole table `tables` found), or with kind "range" a vector
    of positions start + step * i (an arange to the length), `source` [start, step].
    `shape_move`: how far each axis of its shape moved."""

    source: np.ndarray
    shape_move: np.ndarray
    # or "cut" (`source` the probe's longer value, its table not found yet), "table" (`source`
    # the whole table), "range" (`source` [start, step])
    kind: str = "broadcast"
    offset: np.ndarray | None = None  # "table": added to the cut (a merged embedding's other term)
    # "table": axes where the table has size 1 and the constant repeats it (a batch the float
    # pipeline broadcast a merged embedding to): the cut is broadcast along them
    spread: tuple[int, ...] = ()

    @property
    def cut(self) -> bool:
        return self.kind == "cut"


def _shaped(base: np.ndarray, probe: np.ndarray) -> Shaped | None:
    """How a constant that moved from `base` to `probe` is rebuilt (Shaped), or None."""
    if base.ndim != probe.ndim or base.shape == probe.shape:
        return None
    moving = tuple(k for k, (a, b) in enumerate(zip(base.shape, probe.shape)) if a != b)
    move = np.subtract(probe.shape, base.shape)
    if min(base.shape[k] for k in moving) > 0:
        small = base[tuple(slice(0, 1) if k in moving else slice(None) for k in range(base.ndim))]
        if (np.array_equal(np.broadcast_to(small, base.shape), base)
                and np.array_equal(np.broadcast_to(small, probe.shape), probe)):
            return Shaped(np.ascontiguousarray(small), move)
    if np.all(move >= 0) and np.array_equal(probe[tuple(slice(0, d) for d in base.shape)], base):
        return _progression(base, probe, move) or Shaped(probe, move, kind="cut")
    return None


def _progression(base: np.ndarray, probe: np.ndarray, move: np.ndarray) -> Shaped | None:
    """An integer vector (any other axes of size 1) of positions start + step * i at both sizes:
    RANGE when the model runs; None otherwise."""
    if base.dtype.kind not in "iu" or base.size < 2 or max(base.shape) != base.size \
            or np.count_nonzero(move) != 1:
        return None
    flat, longer = base.ravel().astype(np.int64), probe.ravel().astype(np.int64)
    start, step = flat[0], flat[1] - flat[0]
    if np.array_equal(flat, start + step * np.arange(flat.size)) and \
            np.array_equal(longer, start + step * np.arange(longer.size)):
        return Shaped(np.array([start, step], base.dtype), move, kind="range")
    return None


def _one_source(base: np.ndarray, shaped: list) -> Shaped | None:
    """The one Shaped that rebuilds `base` for every probe group that moved it: a table cut by
    one group alone, or the array broadcast along every group's moving axes; None otherwise."""
    if not all(isinstance(m, Shaped) for m in shaped):
        return None
    if len(shaped) == 1:
        return shaped[0]
    tables = [m for m in shaped if m.kind == "table"]
    if len(tables) == 1 and all(m.kind == "broadcast" for m in shaped if m is not tables[0]):
        # a table cut by one group, broadcast along the others' axes (a batch)
        spread = {int(k) for m in shaped if m is not tables[0] for k in np.flatnonzero(m.shape_move)}
        if not spread <= set(tables[0].spread):
            return None
        return replace(tables[0], shape_move=sum(m.shape_move for m in shaped))
    if any(m.kind != "broadcast" for m in shaped):
        return None
    moving = {k for m in shaped for k in np.flatnonzero(m.shape_move)}
    small = base[tuple(slice(0, 1) if k in moving else slice(None) for k in range(base.ndim))]
    if not np.array_equal(np.broadcast_to(small, base.shape), base):
        return None
    return Shaped(np.ascontiguousarray(small), sum(m.shape_move for m in shaped))


def _whole_table(shaped: Shaped, tables) -> Shaped | None:
    """A cut Shaped with its source the whole table it was cut from: the first of `tables()`
    (arrays; None: none known) that, given leading axes of size 1, has the source as its first
    entries along the moving axes, but for an array the same along them (`offset`: a token-type
    row that the float pipeline merged into a position table, found within a few rounding steps:
    the merged sum rounded once where the model rounds twice); None when none has."""
    whole = shaped.source
    moving = tuple(int(k) for k in np.flatnonzero(shaped.shape_move))
    for table in tables() if tables is not None else ():
        if table.ndim > whole.ndim or table.dtype.kind != whole.dtype.kind:
            continue
        table = table.reshape((1,) * (whole.ndim - table.ndim) + table.shape)
        spread = tuple(k for k, (t, s) in enumerate(zip(table.shape, whole.shape))
                       if k not in moving and t == 1 < s)
        if not all(t >= s if k in moving else t == s or k in spread
                   for k, (t, s) in enumerate(zip(table.shape, whole.shape))):
            continue
        # the same rows along each spread axis: one of them is the cut
        source = whole[tuple(slice(0, 1) if k in spread else slice(None) for k in range(whole.ndim))]
        if spread and not np.array_equal(np.broadcast_to(source, whole.shape), whole):
            continue
        if table.dtype != source.dtype:  # int64 ids narrowed to int32 inside the graph
            if np.any(table != table.astype(source.dtype)):
                continue
            table = table.astype(source.dtype)
        cut = table[tuple(slice(0, d) for d in source.shape)]
        offset = (source - cut)[tuple(slice(0, 1) if k in moving else slice(None) for k in range(source.ndim))]
        # the same sum, but for rounding: (p + t) - p need not be t to the last bit
        if _same(cut + offset, source):
            return Shaped(table, shaped.shape_move, kind="table",
                          offset=np.ascontiguousarray(offset) if np.any(offset) else None, spread=spread)
    return None


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal, floats within a few rounding steps of their largest magnitude."""
    if a.dtype.kind != "f":
        return bool(np.array_equal(a, b))
    scale = float(np.max(np.abs(b))) if b.size else 0.0
    return bool(np.all(np.abs(a - b) <= 4 * np.finfo(np.float32).eps * scale))


def _readers_text(model: Model, name: str) -> str:
    readers = sorted({f"{op.type} (node {op.source})" for op in model.consumers(name)})
    return ", ".join(readers) or "the graph output"


def _options(op: Operator) -> dict:
    return {k: v for k, v in op.options.items() if not (op.type == "RESHAPE" and k == "new_shape")}


def _readers(model: Model, name: str) -> list[tuple[Operator, int]]:
    return [(op, k) for op in model.consumers(name) for k, n in enumerate(op.inputs) if n == name]


def _set_reshape_target(model: Model, op: Operator, k: int, name: str) -> None:
    """RESHAPE reads its target from input 1 alone: the new_shape option would say otherwise."""
    model.set_input(op, k, name)
    if op.type == "RESHAPE":
        op.options.pop("new_shape", None)


def _takes_minus_one(model: Model, name: str, moves: dict[tuple, np.ndarray], moved: dict) -> bool:
    """Whether every reader of the integer constant `name` can read what moved (`moves`: by
    probe group) so that it holds at any size, which XNNPACK keeps delegated: a RESHAPE target
    with one entry moving and none -1 already (-1 there), or a SLICE whose moving sizes follow
    their input axes one for one, ending a fixed distance from the axis's end (STRIDED_SLICE
    with an end counted from the end)."""
    base = model.constant(name)
    moving = np.flatnonzero(sum(np.abs(np.ravel(m)) for m in moves.values()))
    if base.ndim != 1 or not len(moving):
        return False
    for op, k in _readers(model, name):
        if op.type == "RESHAPE" and k == 1:
            if len(moving) != 1 or np.any(base == -1):
                return False
        elif not (op.type == "SLICE" and k == 2 and _follows_its_axes(model, op, moves, moved, moving)):
            return False
    return True


def _follows_its_axes(model: Model, op: Operator, moves: dict, moved: dict, moving) -> bool:
    """A SLICE whose constant begin does not move and whose size entries `moving` moved as far
    as the same axes of its input did, in every probe group."""
    begin, x = model.constant(op.inputs[1]), op.inputs[0]
    if begin is None or begin.ndim != 1 or op.inputs[1] in {n for m in moved.values() for n in m[1]}:
        return False
    shape = model.arrays[x].shape
    for group, move in moves.items():
        axes = moved[group][0].get(x, {})
        if any(int(np.ravel(move)[i]) != axes.get(int(i), shape[i]) - shape[i] for i in moving):
            return False
    return True


def _minus_one_in_reshapes(model: Model, name: str, moves: dict[tuple, np.ndarray]) -> None:
    """The readers of `name` (_takes_minus_one) take what moved at any size: a RESHAPE target
    -1 at its moving entry, a SLICE as STRIDED_SLICE ending as far from the end."""
    target = model.constant(name).copy()
    moving = np.flatnonzero(sum(np.abs(np.ravel(m)) for m in moves.values()))
    target[moving] = -1
    constant = model.add_constant(name + "_dynamic", target)
    for op, k in _readers(model, name):
        if op.type == "SLICE":
            _strided_from_the_end(model, op, moving)
        else:
            _set_reshape_target(model, op, k, constant)


def _strided_from_the_end(model: Model, op: Operator, moving: np.ndarray) -> None:
    """A SLICE whose `moving` axes end a fixed distance from their end becomes STRIDED_SLICE:
    those axes' end masked (distance 0) or negative (counted from the end), the same at any
    size, and delegated to XNNPACK (a SLICE of computed or -1 size is not)."""
    begin = model.constant(op.inputs[1]).astype(np.int32)
    end = begin + model.constant(op.inputs[2]).astype(np.int32)
    shape = model.arrays[op.inputs[0]].shape
    mask = 0
    for axis in (int(a) for a in moving):
        end[axis] -= shape[axis]  # the distance from the end, as a negative index
        if end[axis] == 0:
            mask |= 1 << axis
    op.type = "STRIDED_SLICE"
    model.set_inputs(op, [op.inputs[0], op.inputs[1], model.add_constant("end", end),
                          model.add_constant("strides", np.ones_like(end))])
    op.options = {"end_mask": mask}


def _plan(model: Model, name: str, op: Operator, moves: dict, moved: dict) -> tuple[tuple | None, str]:
    """How `op` reads the constant `name` computed when the model runs: ((offset, terms, the
    smaller array broadcast to that shape or None), "") or (None, why it cannot): an integer
    constant computed itself (_run_time_plan), a Shaped its shape."""
    base = model.constant(name)
    label = f"the constant {name!r} read by {op.type} (node {op.source})"
    if any(isinstance(m, Shaped) for m in moves.values()):
        shaped = _one_source(base, list(moves.values()))
        if shaped is None:
            return None, f"{label} depends on the size"
        if shaped.cut:
            return None, f"{label} is a table cut to the size, whose whole table qconvert did not find"
        shape = np.array(base.shape, np.int32)
        plan, why = _run_time_plan(model, shape, label, op, {g: m.shape_move for g, m in moves.items()}, moved)
        return (None if why else (*plan, shaped)), why
    plan, why = _run_time_plan(model, base, label, op, moves, moved)
    return (None if why else (*plan, None)), why


def _run_time_plan(model: Model, base: np.ndarray, label: str, op: Operator,
                   moves: dict[tuple, np.ndarray], moved: dict) -> tuple[tuple | None, str]:
    """How `op` computes an integer constant (`base`, its value) when the model runs: ((its value
    less the terms' share at the converted sizes, {(tensor, axis): slope per unit of that axis}), "") or
    (None, why it cannot). Each moving entry follows an axis of one of op's inputs that moved
    with the same symbol by a whole multiple of it (a Resize's size twice its input's height),
    else of a model input, else of any tensor written before op, nearest first (a Shape's
    value): the nearest tensor keeps the arithmetic exact at any size (a stride's rounding lies
    between the model input and op)."""
    if base.dtype != np.int32 or base.ndim > 1:
        return None, f"{label} depends on the size"
    near = [t for t in op.inputs if t and not model.arrays[t].is_constant] + list(model.inputs)
    terms: dict[tuple[str, int], np.ndarray] = {}
    for group, move in moves.items():
        axes = moved[group][0]
        move = np.ravel(move)
        for i in np.flatnonzero(move):
            source = _source(model, near, axes, int(move[i]))
            if source is None:
                source = _source(model, _written_before(model, op), axes, int(move[i]))
            if source is None:
                return None, (f"{label} moves with {', '.join(map(repr, group))} unlike any "
                              "tensor before it")
            step = axes[source[0]][source[1]] - model.arrays[source[0]].shape[source[1]]
            terms.setdefault(source, np.zeros(base.shape, np.int64)).flat[i] = move[i] // step
    offset = base.astype(np.int64) - sum(slope * model.arrays[t].shape[a] for (t, a), slope in terms.items())
    return (offset.astype(np.int32), {k: v.astype(np.int32) for k, v in terms.items()}), ""


def _source(model: Model, candidates, axes: dict[str, dict[int, int]], move: int):
    """The first (tensor, axis) among `candidates` whose size moved (`axes`) by a whole divisor
    of `move`, or None."""
    return next(((t, a) for t in candidates for a, size in axes.get(t, {}).items()
                 if move % (size - model.arrays[t].shape[a]) == 0), None)


def _written_before(model: Model, op: Operator) -> list[str]:
    """The tensors the ops before `op` write, nearest first."""
    earlier: list[str] = []
    for other in model.operators:
        if other is op:
            break
        earlier.append(other.outputs)
    return [name for outputs in reversed(earlier) for name in outputs]


def _compute_before(model: Model, op: Operator, k: int, offset: np.ndarray,
                    terms: dict[tuple[str, int], np.ndarray]) -> str:
    """An int32 tensor computed right before `op` (for its input k): `offset` plus each slope
    times its tensor's axis when the model runs (SHAPE, GATHER, MUL, ADD)."""
    value = model.add_constant(op.inputs[k] + "_offset", offset)
    for (tensor, axis), slope in terms.items():
        shape = model.add_array(tensor + "_shape", (len(model.arrays[tensor].shape),), np.int32)
        size = model.add_array(f"{tensor}_size{axis}", (), np.int32)
        product = model.add_array(op.inputs[k] + "_term", offset.shape, np.int32)
        total = model.add_array(op.inputs[k] + "_run_time", offset.shape, np.int32)
        for new in (Operator("SHAPE", [tensor], [shape], {"out_type": np.int32}),
                    Operator("GATHER", [shape, model.add_constant("axis", np.int32(axis))], [size], {"axis": 0}),
                    Operator("MUL", [model.add_constant("slope", slope), size], [product]),
                    Operator("ADD", [value, product], [total])):
            model.insert_before(op, new)
        value = total
    return value


def _shaped_before(model: Model, op: Operator, k: int, shaped: Shaped, shape: str) -> str:
    """Input k of `op` built right before it at the computed `shape`: BROADCAST_TO of the
    smaller array, or SLICE of the whole table from its start."""
    source = "" if shaped.kind == "range" else model.add_constant(op.inputs[k] + "_source", shaped.source)
    out = model.add_array(op.inputs[k] + "_shaped", model.arrays[op.inputs[k]].shape, shaped.source.dtype)
    if shaped.kind == "range":
        _range_before(model, op, shaped, shape, out)
    elif shaped.kind == "table":
        _table_before(model, op, shaped, shape, source, out)
    else:
        model.insert_before(op, Operator("BROADCAST_TO", [source, shape], [out]))
    # resizable where it moved: a delegate that took it for static would fail to resize
    model.dynamic_axes[out] = frozenset(int(a) for a in np.flatnonzero(shaped.shape_move))
    return out


def _table_before(model: Model, op: Operator, shaped: Shaped, shape: str, table: str, out: str) -> None:
    """`out` = the first entries of `table` to the computed `shape` (SLICE from its start), plus
    the offset, then broadcast along the spread axes (their sizes -1 in the SLICE: the table's 1)."""
    begin = model.add_constant("begin", np.zeros(shaped.source.ndim, np.int32))
    moving = frozenset(int(a) for a in np.flatnonzero(shaped.shape_move)) - set(shaped.spread)
    full = model.arrays[out].shape
    sizes, cut_shape = shape, tuple(1 if k in shaped.spread else d for k, d in enumerate(full))
    if shaped.spread:
        keep = np.array([k not in shaped.spread for k in range(len(full))], np.int32)
        kept = model.add_array(out + "_kept", (len(full),), np.int32)
        sizes = model.add_array(out + "_sizes", (len(full),), np.int32)
        model.insert_before(op, Operator("MUL", [shape, model.add_constant("keep", keep)], [kept]))
        model.insert_before(op, Operator("ADD", [kept, model.add_constant("rest", keep - 1)], [sizes]))
    steps = [("SLICE", [table, begin, sizes])]
    if shaped.offset is not None:
        steps.append(("ADD", [None, model.add_constant("offset", shaped.offset)]))
    if shaped.spread:
        steps.append(("BROADCAST_TO", [None, shape]))
    last = ""
    for k, (kind, inputs) in enumerate(steps):
        written = out if k == len(steps) - 1 else model.add_array(out + "_cut", cut_shape, shaped.source.dtype)
        model.insert_before(op, Operator(kind, [i if i is not None else last for i in inputs], [written]))
        if written != out:
            model.dynamic_axes[written] = moving
        last = written


def _range_before(model: Model, op: Operator, shaped: Shaped, shape: str, out: str) -> None:
    """`out` = start + step * i for i below the moving axis's computed length (RANGE of the
    length's entry of `shape`, start, limit and step int32 scalars), reshaped to its rank."""
    axis = int(np.flatnonzero(shaped.shape_move)[0])
    start, step = (int(v) for v in shaped.source)
    length = model.add_array(out + "_length", (), np.int32)
    limit = model.add_array(out + "_limit", (), np.int32)
    positions = model.add_array(out + "_positions", (max(model.arrays[out].shape),), np.int32)
    target = [1] * len(model.arrays[out].shape)
    target[axis] = -1
    for new in (Operator("GATHER", [shape, model.add_constant("axis", np.int32(axis))], [length], {"axis": 0}),
                Operator("MUL", [length, model.add_constant("step", np.int32(step))], [limit]),
                Operator("ADD", [limit, model.add_constant("start", np.int32(start))], [limit + "_end"]),
                Operator("RANGE", [model.add_constant("start", np.int32(start)), limit + "_end",
                                   model.add_constant("step", np.int32(step))], [positions]),
                Operator("RESHAPE", [positions, model.add_constant("shape", np.array(target, np.int32))], [out])):
        if new.type == "ADD":
            model.add_named_array(limit + "_end", (), np.int32)
        model.insert_before(op, new)
