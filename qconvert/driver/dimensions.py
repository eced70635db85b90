"""The dynamic dimensions' probes (onnx/dynamic_dims.py) run by the driver: the model loaded and
float-transformed again at other sizes, compared, and, where constants could not be followed,
loaded once more with the shape arithmetic behind them computed when it runs."""

from __future__ import annotations

import copy

from ..errors import ConversionError, first_line
from ..ir import Model
from ..onnx import dynamic_dims
from ..onnx.dynamic_dims import keep_dynamic
from ..onnx.file import OnnxFile
from ..onnx.loader import load, node_names, onnx_names, tables
from ..transforms.pipeline import run_pipeline


# Loads with more shape arithmetic computed, at most: one reload can show a constant the first
# could not (MPNet's position bias, once its padding mask is computed).
RELOADS = 3


def kept(inputs, model: Model | None, dims, source: OnnxFile) -> Model | None:
    """`model` (or, None, the model loaded at `dims`' sizes; `inputs`: the input options, their
    --input-shape and --io-layout) with the dimensions kept that its probes allow; where some
    constants could not be followed (DynamicDims.unfollowed: a causal mask built from the
    length), the model loaded again with the shape arithmetic behind them computed when it runs
    (_computed: those the ONNX graph names first, then with what the importers' own constants
    were made from), again with what that one could not follow, up to RELOADS times: the
    first that keeps more dimensions resizable and a second probe confirms. None: no model at
    those sizes."""
    fresh = copy.deepcopy(dims)
    if model is None:
        model = _probed(inputs, source.copy(), dims.sizes)
        if not isinstance(model, Model):
            return None
        model.dynamic_dims = dims
    _keep_probed(inputs, model, source.copy())
    best = current = model
    computed: frozenset[str] = frozenset()
    for _ in range(RELOADS):
        named, made = _computed(current.dynamic_dims.unfollowed, current, source.proto)
        wider = dict.fromkeys(c for c in (computed | named, computed | named | made) if c - computed)
        trials = (_again(inputs, model, copy.deepcopy(fresh), source, c) for c in wider)
        found = next((t for t in trials if t is not None and _fixed(t[0]) <= _fixed(current)), None)
        if found is None:
            break
        current, computed = found
        if _fixed(current) < _fixed(best):
            disagreement = _unconfirmed(inputs, current, source, computed)
            if disagreement:
                _annotate(best.dynamic_dims, current.dynamic_dims, disagreement)
                break
            best = current
        if not _fixed(current):
            break
    return best


def _fixed(model: Model) -> int:
    return len(model.dynamic_dims.fixed_because)


def _again(inputs, model: Model, dims, source: OnnxFile, computed: frozenset[str]):
    """(the model loaded again at `dims` with `computed` computed when it runs, probed;
    `computed`), or None when it does not convert or probe."""
    again = _reloaded(inputs, model, dims, source, computed, dynamic_dims.PROBE_STEP)
    return (again, computed) if isinstance(again, Model) else None


def _reloaded(inputs, model: Model, dims, source: OnnxFile, computed: frozenset[str],
              step: int) -> Model | str:
    """The model loaded again at `dims` with `computed` computed when it runs, probed `step`
    above its sizes (keep_dynamic); or why it does not convert or probe."""
    again = _probed(inputs, source.copy(), dims.sizes, computed)
    if not isinstance(again, Model):
        return again
    again.dynamic_dims, again.dynamic_batch = dims, model.dynamic_batch
    try:
        _keep_probed(inputs, again, source.copy(), computed, step)
    except ConversionError as e:
        return first_line(e)
    return again


def _annotate(dims, again, disagreement: str) -> None:
    """The reason a reload that kept more dimensions was not confirmed, added to theirs."""
    for symbol, reason in dims.fixed_because.items():
        if symbol not in again.fixed_because:
            dims.fixed_because[symbol] = f"{reason}; computed when the model runs, {disagreement}"


def _unconfirmed(inputs, model: Model, source: OnnxFile, computed: frozenset[str]) -> str:
    """Why the model loaded again with `computed` is not confirmed by a probe at CONFIRM_STEP
    ("": it keeps the same dimensions resizable on the same tensor axes as at PROBE_STEP)."""
    dims, above = model.dynamic_dims, f"{dynamic_dims.CONFIRM_STEP} above the sizes"
    unfixed = copy.deepcopy(dims)
    unfixed.fixed_because.clear()
    other = _reloaded(inputs, model, unfixed, source, computed, dynamic_dims.CONFIRM_STEP)
    if not isinstance(other, Model):
        return f"{above}: {other}"
    lost = {s: r for s, r in other.dynamic_dims.fixed_because.items() if s not in dims.fixed_because}
    if lost:
        return f"{above}: {next(iter(lost.values()))}"
    moved = [n for op in model.operators for n in op.outputs
             if model.dynamic_axes.get(n) != other.dynamic_axes.get(n)]
    if not moved:
        return ""
    return (f"tensor {moved[0]!r} moves {above} where it stands still {dynamic_dims.PROBE_STEP} "
            "above (a size padded to a whole window), or the other way")


def _computed(unfollowed: set[str], model: Model, proto) -> tuple[frozenset[str], frozenset[str]]:
    """The ONNX tensors behind the constants keep_dynamic could not follow: (those the ONNX graph
    names, the computed inputs of the nodes the others were made for by their importers: a
    Gather's indices made non-negative, a Pad's paddings)."""
    graph = proto.graph
    names = onnx_names(graph)
    nodes = dict(zip(node_names(proto), graph.node))
    weights = {t.name for t in graph.initializer}
    made = set()
    for name in unfollowed - names:
        for op in model.consumers(name):
            node = nodes.get(op.source)
            made.update(i for i in (node.input if node is not None else ()) if i and i not in weights)
    return frozenset(unfollowed & names), frozenset(made)


def _probed(inputs, source: OnnxFile, sizes: dict[str, int],
            computed: frozenset[str] = frozenset()) -> Model | str:
    """The model loaded and float-transformed at `sizes`, or why it does not convert there."""
    try:
        probe = load(source, inputs.shapes, sizes=sizes, probe=True, computed=computed)
        run_pipeline(probe, io_layout=inputs.io_layout)
        return probe
    except ConversionError as e:
        return first_line(e)


def _keep_probed(inputs, model: Model, source: OnnxFile, computed: frozenset[str] = frozenset(),
                 step: int = dynamic_dims.PROBE_STEP) -> None:
    """keep_dynamic of `model` against its probes (one per DynamicDims.probe_groups group),
    `step` above its sizes."""
    dims = model.dynamic_dims
    groups = dims.probe_groups()
    table_source = source.copy()  # the loads free their copy's weights; cut tables are found here
    probes = {group: _probed(inputs, source if k == len(groups) - 1 else source.copy(),
                             {**dims.sizes, **dims.probe_sizes(group, step)}, computed)
              for k, group in enumerate(groups)}
    keep_dynamic(model, probes, lambda: tables(table_source), step)
