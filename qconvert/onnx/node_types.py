"""Per-node type inference: the static output shapes and dtypes of one ONNX node from its
inputs', for the loader's folding pass (onnx/loader.py, _Graph.fold_constants).

ONNX's whole-graph shape inference stops where it cannot see a value (a Reshape whose shape is
computed by a Shape/Gather/Concat chain) and knows no contrib op. The loader's folding pass walks
the graph in order; asking each node it does not fold for its output types there, from the shapes
and constants known so far, lets the chains behind it fold in the same pass instead of one whole
inference run each (a 12-layer transformer needed 39 runs). The types come from the op family's
output types where it registers them (registry.onnx_types: contrib ops, function ops onnx does
not expand), else from onnx's inference of the node alone.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..ops.registry import OUTPUT_TYPES, RUN_TIME, UNKNOWN, VALUE_TYPED, op_key

# Constants up to this size are shown to shape inference as data (Reshape's shape), here and in the
# loader's whole-graph inference; bigger ones as typed inputs, so that inference does not copy the
# weights (it only needs their shapes).
DATA_LIMIT = 4096
_GRAPHS = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)


def infer_node(node: onnx.NodeProto, shapes: dict, dtypes: dict, constants: dict,
               opsets: dict, run_time_size=None, varying: bool = False, guess: bool = True,
               deferred: set | None = None) -> bool:
    """Adds to `shapes` and `dtypes` the static types of the outputs of `node` that they lack,
    when every input's type is known; returns whether it added any. Nothing for a node whose
    types cannot be told (the whole-graph inference, or the importer, says why).
    `run_time_size(node, axis)` gives a dimension the values decide (RUN_TIME) its size; without
    it such an output stays unknown. A `varying` node reads a value whose shape the values
    decide: a dimension inference cannot tell (a TopK of a computed k, a ConstantOfShape of a
    computed shape) is one the values decide too (registry.UNKNOWN), but only when `guess`: else
    that output stays untyped for now, its name added to `deferred`."""
    if all(not o or o in shapes for o in node.output) or any(n and n not in shapes for n in node.input):
        return False
    key = op_key(node)
    fn = OUTPUT_TYPES.get(key)
    if varying and node.op_type == "If" and node.domain in ("", "ai.onnx"):
        found = _branch_types(node)
    elif fn is not None:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        given = ([[constants.get(n) if n else None for n in node.input]] if key in VALUE_TYPED
                 else [])
        try:
            found = fn([shapes.get(n) if n else None for n in node.input],
                       [dtypes.get(n) if n else None for n in node.input], attrs, *given)
        except (ValueError, IndexError, TypeError, KeyError, ZeroDivisionError):
            return False  # malformed: the importer names what is wrong
    else:
        found = _onnx_types(node, shapes, dtypes, constants, opsets)
    added = False
    for name, types in zip(node.output, found):
        if varying and types is not None:
            types = (tuple(UNKNOWN if d == -1 else d for d in types[0]), types[1])
        if types is not None and UNKNOWN in types[0]:
            if not guess:
                if deferred is not None and name:
                    deferred.add(name)
                continue
            types = (tuple(RUN_TIME if d == UNKNOWN else d for d in types[0]), types[1])
        if types is not None and RUN_TIME in types[0]:
            if run_time_size is None:
                continue
            types = (tuple(run_time_size(node, k) if d == RUN_TIME else d
                           for k, d in enumerate(types[0])), types[1])
        if name and types is not None and name not in shapes and all(d >= 0 for d in types[0]):
            shapes[name], dtypes[name] = tuple(int(d) for d in types[0]), np.dtype(types[1])
            added = True
    return added


def _branch_types(node: onnx.NodeProto) -> list:
    """An If's output types from its branches' declared outputs: a dimension both declare with
    one size keeps it, any other is one the values decide (RUN_TIME: the branch taken sizes it);
    None where a branch declares no rank or the element types differ."""
    branches = [helper.get_attribute_value(a) for a in node.attribute
                if a.name in ("then_branch", "else_branch")]
    result = []
    for k in range(len(node.output)):
        types = [b.output[k].type.tensor_type if k < len(b.output) else None for b in branches]
        if (len(types) != 2 or any(t is None or not t.HasField("shape") for t in types)
                or types[0].elem_type != types[1].elem_type
                or len(types[0].shape.dim) != len(types[1].shape.dim)):
            result.append(None)
            continue
        dims = tuple(a.dim_value if a.HasField("dim_value") and b.HasField("dim_value")
                     and a.dim_value == b.dim_value else RUN_TIME
                     for a, b in zip(types[0].shape.dim, types[1].shape.dim))
        result.append((dims, helper.tensor_dtype_to_np_dtype(types[0].elem_type)))
    return result


def _onnx_types(node, shapes, dtypes, constants, opsets) -> list:
    """[(shape, dtype) or None per output] by onnx's inference of the ONNX-domain `node` alone."""
    if node.domain not in ("", "ai.onnx") or any(a.type in _GRAPHS for a in node.attribute):
        return []
    version = opsets.get("", opsets.get("ai.onnx", 1))
    try:
        schema = onnx.defs.get_schema(node.op_type, version, "")
        types = {n: helper.make_tensor_type_proto(helper.np_dtype_to_tensor_dtype(dtypes[n]), shapes[n])
                 for n in node.input if n}
        data = {n: numpy_helper.from_array(np.asarray(constants[n]), n) for n in node.input
                if n in constants and np.asarray(constants[n]).size <= DATA_LIMIT}
        found = onnx.shape_inference.infer_node_outputs(
            schema, node, types, data, opset_imports=[helper.make_opsetid("", version)])
    except Exception:  # onnx raises several types: no schema, a function op, an invalid node
        return []
    result = []
    for name in node.output:
        tensor = found[name].tensor_type if name in found else None
        if tensor is None or not tensor.elem_type or not tensor.HasField("shape"):
            result.append(None)
            continue
        dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim)
        result.append((dims, helper.tensor_dtype_to_np_dtype(tensor.elem_type)))
    return result


def value_info(nodes, shapes: dict, dtypes: dict) -> list:
    """The known outputs of the nodes onnx's inference does not know (OUTPUT_TYPES), as
    ValueInfoProtos for the whole-graph inference to start from."""
    return [helper.make_tensor_value_info(o, helper.np_dtype_to_tensor_dtype(dtypes[o]), shapes[o])
            for node in nodes if op_key(node) in OUTPUT_TYPES for o in node.output if o in shapes]
