"""A dynamic batch dimension: set to 1 to convert, kept resizable in the .tflite where it can be.

PyTorch exports (and most others) leave axis 0 of the inputs dynamic: a name such as "batch_size",
or no value at all. When axis 0 of *every* input is dynamic under one name (or unnamed on all of
them) and no --input-shape is given, the loader converts at batch 1 (`default_batch`), as
TensorFlow's converter and onnx2tf do. Otherwise a dynamic axis 0 of any input --input-shape does
not pin (a rank-1 `length`, `[batch, 256]` state inputs) is set to 1 too (`leading_sizes`), fixed,
and the summary names those inputs. Any other dynamic dimension is still an error asking for
--input-shape.

The .tflite then keeps the batch resizable (shape_signature -1 on axis 0 of every tensor that
carries it, so that LiteRT's `resize_tensor_input` works) only when two checks agree that the
graph is batch-polymorphic; otherwise the batch stays 1 and the report says why:

1. ONNX, before anything is imported (`onnx_blocker`): shape inference and load-time folding are
   run a second time at batch 2. Every activation must then have the batch-1 shape with axis 0
   doubled: a Flatten or a Reshape to a constant [1, -1] that folds the batch into another axis,
   a reduction over it or a Transpose that moves it shows there. A constant that folding computes
   from the batch size (Shape -> Gather -> Concat) may only feed a shape input (Reshape's shape,
   Expand's shape, Slice's starts and ends), whose effect the shape check sees; used in
   arithmetic (x / batch_size) it would be wrong at another batch.
2. The finished TFLite graph (`mark_batch_tensors`): the batch is followed from the inputs op by
   op. Each op must carry it from axis 0 of its inputs to axis 0 of its outputs by a rule that
   holds at any batch (`_RULES`); constants that spell out batch 1 are rewritten to say "the
   whole axis" (-1 as RESHAPE's batch dimension, as SLICE's size; STRIDED_SLICE's end mask), and
   an op without such a rule (TRANSPOSE_CONV's constant output shape, BROADCAST_TO, an LSTM's
   state) keeps the batch at 1.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Callable

import numpy as np

from ..errors import ConversionError
from ..ir import DynamicBatch, Model, Operator

# The batch the ONNX graph is probed at (check 1): any size but 1 would do.
PROBE_BATCH = 2
# (ONNX op, input index) that may read a constant computed from the batch size.
_SHAPE_INPUTS = {("Reshape", 1), ("Expand", 1), ("Slice", 1), ("Slice", 2)}


# --- the loader's side ----------------------------------------------------------------------------
def default_batch(inputs) -> str | None:
    """The name of the batch dimension to set to 1 ("" when unnamed), or None when there is none:
    axis 0 of every input (ONNX ValueInfoProtos) must be dynamic -- a dim_param, no value, or a
    negative dim_value as Paddle writes -- and all under the same name."""
    names = set()
    for value in inputs:
        if not value.type.HasField("tensor_type") or not value.type.tensor_type.shape.dim:
            return None
        dim = value.type.tensor_type.shape.dim[0]
        if dim.HasField("dim_value") and dim.dim_value >= 0:
            return None
        names.add(dim.dim_param if dim.HasField("dim_param") else "")
    return names.pop() if len(names) == 1 else None


def _dynamic(dim) -> bool:
    return not dim.HasField("dim_value") or dim.dim_value < 0


def pinned_names(inputs, pinned: dict[str, tuple[int, ...]]) -> dict[str, int]:
    """The sizes --input-shape (`pinned`) gives dimension names: a dimension of another input
    under the same name (`seq` of an attention mask beside the pinned `input_ids`) has that size,
    as ONNX's shared names mean."""
    named: dict[str, int] = {}
    for value in inputs:
        if value.name in pinned and value.type.tensor_type.HasField("shape"):
            for dim, size in zip(value.type.tensor_type.shape.dim, pinned[value.name]):
                if dim.HasField("dim_param") and dim.dim_param:
                    named.setdefault(dim.dim_param, size)
    return named


def leading_sizes(inputs, pinned: dict[str, tuple[int, ...]]) -> dict[str, int]:
    """The size a dynamic axis 0 takes, by input, where the shared batch (default_batch) does not
    apply: inputs --input-shape (`pinned`) leaves out, whose axis 0 is dynamic -- a rank-1
    `length`, `[batch, 256]` state inputs beside a pinned `[batch, seq]` one -- take the size a
    pinned input gives the same dimension name (pinned_names), else 1, as a batch does. Other
    dynamic dimensions without a pinned name still need --input-shape."""
    named = pinned_names(inputs, pinned)
    sizes = {}
    for value in inputs:
        dims = value.type.tensor_type.shape.dim if value.type.HasField("tensor_type") else ()
        if value.name not in pinned and dims and _dynamic(dims[0]):
            sizes[value.name] = named.get(dims[0].dim_param, 1) if dims[0].dim_param else 1
    return sizes


def defaulted_inputs(inputs, pinned: dict[str, tuple[int, ...]]) -> dict[str, int]:
    """The inputs whose dynamic axis 0 the loader set without a shared batch, and to what
    (leading_sizes), for the report."""
    if not pinned and default_batch(inputs) is not None:
        return {}
    return leading_sizes(inputs, pinned)


def probe(graph):
    """A copy of the loader's graph (loader._Graph, before shape inference and folding) whose
    inputs have batch PROBE_BATCH; it shares the initializers' data."""
    other = copy.copy(graph)
    other.constants, other.dtypes, other.nodes = dict(graph.constants), dict(graph.dtypes), list(graph.nodes)
    other.shapes = dict(graph.shapes)
    for value in graph.inputs:
        other.shapes[value.name] = (PROBE_BATCH,) + tuple(graph.shapes[value.name][1:])
    return other


def onnx_blocker(graph, probed, settle: Callable) -> str:
    """Check 1 (module docstring): "" when the ONNX graph keeps the batch on axis 0 of every
    activation, else why not. `graph` is the loader's graph at batch 1 after `settle` (shape
    inference and folding to a fixed point), `probed` its probe() copy, settled here."""
    try:
        settle(probed)
    except ConversionError as e:
        return f"the model does not convert at batch {PROBE_BATCH} ({e})"
    for name, shape in graph.shapes.items():
        if name in graph.constants:
            continue
        expected = (PROBE_BATCH,) + tuple(shape[1:]) if shape and shape[0] == 1 else None
        probed_shape = None if name in probed.constants else probed.shapes.get(name)
        if expected is None or tuple(probed_shape or ()) != expected:
            shown = "none" if probed_shape is None else _shape_text(probed_shape)
            return (f"tensor {name!r} is {_shape_text(shape)} at batch 1 but {shown} at batch "
                    f"{PROBE_BATCH}: the batch leaves axis 0")
    initializers = {t.name for t in graph.graph.initializer}
    outputs = {o.name for o in graph.graph.output}
    reads = [(node.op_type, k, name) for node in graph.nodes for k, name in enumerate(node.input)]
    reads += [("", 0, name) for name in outputs]
    for op_type, k, name in reads:
        if name not in graph.constants or name in initializers or (op_type, k) in _SHAPE_INPUTS:
            continue
        value, other = graph.constants[name], probed.constants.get(name)
        if other is None or value.shape != other.shape or not np.array_equal(value, other):
            where = f"{op_type} input {k}" if op_type else "a graph output"
            return f"the value of {name!r} ({where}) depends on the batch size"
    return ""


def _shape_text(shape) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


# --- the finished TFLite graph ----------------------------------------------------------------
def _rank(model: Model, name: str) -> int:
    return len(model.arrays[name].shape)


def _const(model: Model, op: Operator, index: int) -> np.ndarray | None:
    name = op.inputs[index] if index < len(op.inputs) else ""
    return model.constant(name)


def _axes(model: Model, op: Operator, index: int, rank: int) -> set[int] | None:
    """The constant axes input `index` of `op`, made non-negative (None: not a constant)."""
    axes = _const(model, op, index)
    return None if axes is None else {int(a) % max(rank, 1) for a in np.ravel(axes)}


def _elementwise(model, op, batched) -> str:
    """Each output element reads the same place of its inputs (broadcasting); a last-axis op of
    rank >= 2 (SOFTMAX) too. Inputs without the batch broadcast along it."""
    out_rank = _rank(model, op.outputs[0])
    if any(_rank(model, n) != out_rank for n in op.inputs if n in batched):
        return "broadcasts the batch into another axis"
    if op.type in _LAST_AXIS and out_rank < 2:
        return "works along axis 0"
    return ""


def _first_input(model, op, batched) -> str:
    """Only input 0 carries the batch (convolutions, pooling, resizes: their other inputs are
    weights, sizes or shapes without it)."""
    return "" if all(n not in batched for n in op.inputs[1:]) else "mixes the batch into its weights"


def _fully_connected(model, op, batched) -> str:
    if any(n in batched for n in op.inputs[1:]):
        return "mixes the batch into its weights"
    if _rank(model, op.inputs[0]) != 2 and not op.options.get("keep_num_dims"):
        return "flattens the batch with other axes"
    return ""


def _batch_matmul(model, op, batched) -> str:
    a, b = op.inputs[:2]
    rank = _rank(model, op.outputs[0])
    if b not in batched and _rank(model, a) == 2 == rank and not op.options.get("adj_x"):
        return ""  # [batch, K] @ [K, N]: the batch is the rows
    if all(n not in batched or _rank(model, n) == rank for n in (a, b)) and rank >= 3:
        return ""  # the batch is a broadcast axis
    return "multiplies along the batch"


def _axis_option(model, op, batched) -> str:
    """CONCATENATION, GATHER: an `axis` option other than 0; every input of a concatenation
    carries the batch; a GATHER with batch_dims reads its batch from both inputs."""
    rank = _rank(model, op.inputs[0])
    axis = op.options.get("axis", 0) % max(rank, 1)
    if op.type == "GATHER":
        params, indices = op.inputs[:2]
        if params in batched and indices not in batched and axis != 0:
            return ""
        if params not in batched and indices in batched and axis == 0 and _rank(model, indices) >= 1:
            return ""  # a table lookup: the output's axis 0 is the indices'
        if params in batched and indices in batched and op.options.get("batch_dims", 0) >= 1 \
                and axis != 0:
            return ""  # per-sample gathers (batch_dims 1: GridSample's): the batch stays axis 0
        return "gathers along the batch"
    if axis == 0 or any(n not in batched for n in op.inputs):
        return "concatenates along the batch"
    return ""


def _axes_input(index: int, what: str):
    """ARG_MAX, reducers, REVERSE_V2, SPLIT: a constant axes input `index` without axis 0."""

    def rule(model, op, batched) -> str:
        data = op.inputs[1] if op.type == "SPLIT" else op.inputs[0]
        if any(n in batched for k, n in enumerate(op.inputs) if n != data and k != index):
            return "mixes the batch into its parameters"
        axes = _axes(model, op, index, _rank(model, data))
        return "" if axes is not None and 0 not in axes else what

    return rule


def _first_row_is(values: tuple[int, ...], index: int, what: str):
    """PAD (paddings [0, 0] for axis 0), TRANSPOSE (perm[0] = 0), TILE (multiples[0] = 1)."""

    def rule(model, op, batched) -> str:
        value = _const(model, op, index)
        if value is None or value.ndim == 0 or value.size == 0 or tuple(np.atleast_1d(value[0])) != values:
            return what
        return _first_input(model, op, batched)

    return rule


# The ops whose only axis is the last one; they must not be rank 1.
_LAST_AXIS = {"SOFTMAX", "LOG_SOFTMAX", "LOCAL_RESPONSE_NORMALIZATION", "L2_NORMALIZATION"}
_ELEMENTWISE = {
    "ABS", "ADD", "CAST", "CEIL", "COS", "DEQUANTIZE", "DIV", "ELU", "EQUAL", "EXP", "FLOOR",
    "GELU", "GREATER", "GREATER_EQUAL", "HARD_SWISH", "IDENTITY", "LEAKY_RELU", "LESS",
    "LESS_EQUAL", "LOG", "LOGICAL_AND", "LOGICAL_NOT", "LOGICAL_OR", "LOGISTIC", "MAXIMUM",
    "MINIMUM", "MUL", "NEG", "NOT_EQUAL", "POW", "PRELU", "QUANTIZE", "RELU", "RELU6",
    "RELU_N1_TO_1", "ROUND", "RSQRT", "SELECT_V2", "SIN", "SQRT", "SQUARE", "SQUARED_DIFFERENCE",
    "SUB", "TANH", *_LAST_AXIS,
}
_RULES: dict[str, Callable[[Model, Operator, set], str]] = {
    **dict.fromkeys(_ELEMENTWISE, _elementwise),
    **dict.fromkeys(("CONV_2D", "DEPTHWISE_CONV_2D", "AVERAGE_POOL_2D", "MAX_POOL_2D",
                     "RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR", "SPACE_TO_DEPTH",
                     "DEPTH_TO_SPACE"), _first_input),
    "FULLY_CONNECTED": _fully_connected,
    "BATCH_MATMUL": _batch_matmul,
    "CONCATENATION": _axis_option,
    "GATHER": _axis_option,
    **dict.fromkeys(("ARG_MAX", "ARG_MIN", "MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD",
                     "REDUCE_ANY", "REDUCE_ALL", "REVERSE_V2"), _axes_input(1, "reduces the batch")),
    "SPLIT": _axes_input(0, "splits the batch"),
    "SPLIT_V": _axes_input(2, "splits the batch"),
    **dict.fromkeys(("PAD", "PADV2", "MIRROR_PAD"), _first_row_is((0, 0), 1, "pads the batch")),
    "TRANSPOSE": _first_row_is((0,), 1, "moves the batch"),
    "TILE": _first_row_is((1,), 1, "tiles the batch"),
    # These three hold batch 1 in a constant that _whole_batch_rewrite makes "the whole axis".
    "RESHAPE": _first_input,
    "SLICE": _first_input,
    "STRIDED_SLICE": _first_input,
}


def _whole_batch_rewrite(model: Model, op: Operator) -> Callable[[], None] | str | None:
    """For RESHAPE, SLICE and STRIDED_SLICE reading the batch: the edit that makes the op take
    axis 0 whole whatever its size (applied only once the whole graph is known to allow it), or
    why it cannot; None for the other ops."""
    if op.type == "RESHAPE":
        shape = _const(model, op, 1)
        out = model.arrays[op.outputs[0]].shape
        target = model.arrays[op.inputs[1]] if len(op.inputs) > 1 and op.inputs[1] else None
        if (target is None or target.dtype != np.int32 or len(target.shape) != 1
                or target.shape[0] != len(out) or not out or out[0] != 1
                or shape is not None and shape[0] != 1):
            return "does not keep the batch on axis 0"
        if shape is None or np.any(shape[1:] == -1):  # a dynamic dimension's target (dynamic_dims.py)
            return lambda: _batch_from_input(model, op)
        return lambda: _reshape_to_whole_batch(model, op, shape)
    if op.type == "SLICE":
        begin, size = _const(model, op, 1), _const(model, op, 2)
        if begin is None or size is None or begin.ndim != 1 or size.ndim != 1 or begin[0] != 0:
            return "slices the batch"
        return lambda: _set_constant_input(model, op, 2, np.concatenate([[-1], size[1:]]).astype(size.dtype))
    if op.type == "STRIDED_SLICE":
        begin, strides = _const(model, op, 1), _const(model, op, 3)
        options = op.options
        if (begin is None or strides is None or begin.ndim != 1 or strides.ndim != 1
                or begin[0] != 0 or strides[0] != 1
                or options.get("shrink_axis_mask", 0) & 1 or options.get("ellipsis_mask", 0)
                or options.get("new_axis_mask", 0) or options.get("offset")):
            return "slices the batch"
        return lambda: options.update(end_mask=options.get("end_mask", 0) | 1)
    return None


def _reshape_to_whole_batch(model: Model, op: Operator, shape: np.ndarray) -> None:
    """RESHAPE's batch dimension becomes -1 (the kernel reads the shape input; new_shape, when
    set, says the same)."""
    _set_constant_input(model, op, 1, np.concatenate([[-1], shape[1:]]).astype(shape.dtype))
    if "new_shape" in op.options:
        op.options["new_shape"] = [-1] + [int(d) for d in shape[1:]]


def _batch_from_input(model: Model, op: Operator) -> None:
    """A RESHAPE target that holds -1 already (or is computed when the model runs): its axis 0
    becomes its input's axis 0 when the model runs, SHAPE then STRIDED_SLICE, joined to the
    rest of the target by CONCATENATION (put before the RESHAPE)."""
    x, target = op.inputs[0], op.inputs[1]
    rank = model.arrays[target].shape[0]
    shape = model.add_array(x + "_shape", (len(model.arrays[x].shape),), np.int32)
    batch = model.add_array(x + "_batch", (1,), np.int32)
    rest = model.constant(target)
    ops = [Operator("SHAPE", [x], [shape], {"out_type": np.int32}), _first_entries(model, shape, batch, 0, 1)]
    if rest is not None:
        rest = model.add_constant(target + "_rest", rest[1:])
    else:
        rest = model.add_array(target + "_rest", (rank - 1,), np.int32)
        ops.append(_first_entries(model, target, rest, 1, rank))
    joined = model.add_array(target + "_batched", (rank,), np.int32)
    ops.append(Operator("CONCATENATION", [batch, rest], [joined], {"axis": 0}))
    for new in ops:
        model.insert_before(op, new)
    model.set_input(op, 1, joined)
    op.options.pop("new_shape", None)


def _first_entries(model: Model, vector: str, out: str, begin: int, end: int) -> Operator:
    """STRIDED_SLICE of a 1-D int32 `vector`'s entries [begin, end) into `out`."""
    return Operator("STRIDED_SLICE", [vector, model.add_constant("begin", np.array([begin], np.int32)),
                                      model.add_constant("end", np.array([end], np.int32)),
                                      model.add_constant("strides", np.array([1], np.int32))], [out])


def _set_constant_input(model: Model, op: Operator, index: int, value: np.ndarray) -> None:
    """A new constant for input `index` (the old one may be shared with other ops)."""
    model.set_input(op, index, model.add_constant(op.inputs[index], value))


def _batched_tensors(model: Model) -> tuple[set[str], list[Callable[[], None]], str]:
    """(tensors whose axis 0 is the batch, edits to make, "") or (.., .., why the batch must
    stay 1): check 2 of the module docstring, one pass in execution order."""
    batched: set[str] = set()
    for name in model.inputs:
        perm = model.io_permutation.get(name)
        if not model.arrays[name].shape or (perm and perm[0] != 0):
            return batched, [], f"input {name!r} does not have the batch on axis 0"
        batched.add(name)
    edits: list[Callable[[], None]] = []
    for op in model.operators:
        if not any(n in batched for n in op.inputs):
            continue
        if op.type == "SHAPE":  # a dynamic dimension's size (dynamic_dims.py): no batch axis
            continue
        rule = _RULES.get(op.type)
        problem = "has no batch-agnostic form in qconvert" if rule is None else rule(model, op, batched)
        if not problem:
            edit = _whole_batch_rewrite(model, op)
            if isinstance(edit, str):
                problem = edit
            elif edit is not None:
                edits.append(edit)
        if not problem and any(not model.arrays[n].shape or model.arrays[n].shape[0] != 1
                               for n in op.outputs):
            problem = "does not keep the batch on axis 0"
        if problem:
            return batched, [], f"{op.type} (node {op.source}) {problem}"
        batched.update(op.outputs)
    return batched, edits, ""


def mark_batch_tensors(model: Model) -> None:
    """Check 2 on the finished model (run it last: later steps would not keep the marks): when
    the graph allows, rewrites the constants that hold batch 1 and records the tensors whose axis
    0 is the batch in model.dynamic_batch.tensors; otherwise records why the batch stays 1."""
    batch = model.dynamic_batch
    if batch is None or batch.fixed_because:
        return
    tensors, edits, problem = _batched_tensors(model)
    if problem:
        model.dynamic_batch = replace(batch, fixed_because=problem)
        return
    for edit in edits:
        edit()
    model.dynamic_batch = replace(batch, tensors=frozenset(tensors))


def note(batch: DynamicBatch, written_at: int | None = None) -> str:
    """The report's one-line note on a batch set to 1; `written_at`: the size of one that
    leaves axis 0 but stays resizable as a dynamic dimension (dynamic_dims.py)."""
    name = f"{batch.symbol!r}" if batch.symbol else "(unnamed)"
    if written_at is not None:
        return (f"batch dimension {name} resizable as a dynamic dimension, written at "
                f"{written_at} (shape_signature -1 where it goes; {batch.fixed_because})")
    if batch.fixed_because:
        return f"batch dimension {name} set to 1, fixed: {batch.fixed_because}"
    return f"batch dimension {name} set to 1, resizable (shape_signature -1)"
