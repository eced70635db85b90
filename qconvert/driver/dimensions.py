"""The dynamic dimensions' probes (onnx/dynamic_dims.py) run by the driver: the model loaded and
float-transformed again at other sizes, compared, and, where constants could not be followed,
loaded once more with the shape arithmetic behind them computed when it runs."""

from __future__ import annotations

import copy

from ..errors import ConversionError, first_line
from ..ir import Model
from ..onnx.dynamic_dims import keep_dynamic
from ..onnx.file import OnnxFile
from ..onnx.loader import load, node_names, onnx_names, tables
from ..transforms.pipeline import run_pipeline


def kept(inputs, model: Model | None, dims, source: OnnxFile) -> Model | None:
    """`model` (or, None, the model loaded at `dims`' sizes; `inputs`: the input options, their
    --input-shape and --io-layout) with the dimensions kept that its probes allow; where some constants could not be followed (DynamicDims.unfollowed: a causal
    mask built from the length), the model loaded again with the shape arithmetic behind them
    computed when it runs, if that keeps more dimensions resizable. None: no model at those sizes."""
    fresh = copy.deepcopy(dims)
    if model is None:
        model = _probed(inputs, source.copy(), dims.sizes)
        if not isinstance(model, Model):
            return None
        model.dynamic_dims = dims
    _keep_probed(inputs, model, source.copy())
    computed = _computed(dims.unfollowed, model, source.proto)
    if not computed:
        return model
    again = _probed(inputs, source.copy(), fresh.sizes, computed)
    if not isinstance(again, Model):
        return model
    again.dynamic_dims, again.dynamic_batch = fresh, model.dynamic_batch
    try:
        _keep_probed(inputs, again, source.copy(), computed)
    except ConversionError:
        return model
    return again if len(fresh.fixed_because) < len(dims.fixed_because) else model


def _computed(unfollowed: set[str], model: Model, proto) -> frozenset[str]:
    """The ONNX tensors behind the constants keep_dynamic could not follow: each one the ONNX
    graph names, and for one an op's import made (a Gather's indices made non-negative), the
    computed inputs of the node it was made for."""
    graph = proto.graph
    names = onnx_names(graph)
    nodes = dict(zip(node_names(proto), graph.node))
    weights = {t.name for t in graph.initializer}
    found = set(unfollowed & names)
    for name in unfollowed - names:
        for op in model.consumers(name):
            node = nodes.get(op.source)
            found.update(i for i in (node.input if node is not None else ()) if i and i not in weights)
    return frozenset(found)


def _probed(inputs, source: OnnxFile, sizes: dict[str, int],
            computed: frozenset[str] = frozenset()) -> Model | str:
    """The model loaded and float-transformed at `sizes`, or why it does not convert there."""
    try:
        probe = load(source, inputs.shapes, sizes=sizes, probe=True, computed=computed)
        run_pipeline(probe, io_layout=inputs.io_layout)
        return probe
    except ConversionError as e:
        return first_line(e)


def _keep_probed(inputs, model: Model, source: OnnxFile,
                 computed: frozenset[str] = frozenset()) -> None:
    """keep_dynamic of `model` against its probes (one per DynamicDims.probe_groups group)."""
    dims = model.dynamic_dims
    groups = dims.probe_groups()
    table_source = source.copy()  # the loads free their copy's weights; cut tables are found here
    probes = {group: _probed(inputs, source if k == len(groups) - 1 else source.copy(),
                             {**dims.sizes, **dims.probe_sizes(group)}, computed)
              for k, group in enumerate(groups)}
    keep_dynamic(model, probes, lambda: tables(table_source))
