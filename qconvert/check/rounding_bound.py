"""The error a model that arrives quantized explains by its own rounding: the bound its conversion
is held to (issue 38's gate). A dynamically quantized model (quantize_dynamic's
DynamicQuantizeLinear, which picks a tensor's grid at run time) is moved the same way on the grid
its DynamicQuantizeLinear picks; com.microsoft's DynamicQuantizeLSTM rounds inside one node and is
not moved.

A QDQ model fixes every quantized tensor's grid (its QuantizeLinear's scale). onnxruntime runs the
pairs in float (graph optimizations off: dequantize, compute in float32, round half to even); a
TFLite kernel computes the same grid in integers (exact int32 sums, a fixed-point multiplier,
rounding half away from zero). The two land on different grid points wherever the exact value
sits near a rounding boundary, and each such step travels on through the graph. How far a model's
outputs move when its tensors round differently is the model's own property, measured here: the
QDQ graph in onnxruntime once more with every activation's QuantizeLinear input moved by a seeded
uniform draw in [-HALF_STEP, HALF_STEP] of its own scale before it rounds (each tensor then rounds
to either neighbour of its value, as another valid int8 arithmetic might), and each output's SQNR
against the unperturbed run. That is far more disagreement than TFLite's rounding leaves (it
moves nearly every value, TFLite's the ones at a tie), so a conversion that computes the model's
arithmetic stays above it; a wrong scale, zero point, layout or op does not.

The draws come from RandomUniformLike with a fixed seed per tensor: the bound depends on the model
and the samples only (it decides pass or fail, never the bytes written).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..onnx.loader import onnx_names
from ..qdq.names import FreshNames

HALF_STEP = 0.5  # how far (in grid steps) each quantized tensor is moved before it rounds
SLACK_DB = 3.0  # the written model may fall this far below the bound (sample noise: 8 samples)


def perturbed(proto: onnx.ModelProto) -> onnx.ModelProto | None:
    """A copy of the model whose activation QuantizeLinears (and DynamicQuantizeLinears: a
    dynamically quantized model) round a moved input: x + step * U(-HALF_STEP, HALF_STEP), seeded
    by the tensor's position. None when nothing rounds an activation on one grid."""
    model = onnx.ModelProto()
    model.CopyFrom(proto)
    graph = model.graph
    constants = {t.name: t for t in graph.initializer}
    names = FreshNames(onnx_names(graph))
    nodes, moved = [], 0
    for node in graph.node:
        scale = _step(node, constants, names, nodes)
        if scale is None:
            nodes.append(node)
            continue
        x = node.input[0]
        noise, step, shifted = names.fresh(f"{x}_draw"), names.fresh(f"{x}_move"), names.fresh(f"{x}_moved")
        nodes += [helper.make_node("RandomUniformLike", [x], [noise], low=-HALF_STEP, high=HALF_STEP,
                                   seed=float(moved + 1)),
                  helper.make_node("Mul", [noise, scale], [step]),
                  helper.make_node("Add", [x, step], [shifted])]
        node.input[0] = shifted
        nodes.append(node)
        moved += 1
    if not moved:
        return None
    del graph.node[:]
    graph.node.extend(nodes)
    return model


def rounds_movably(graph: onnx.GraphProto) -> bool:
    """Whether the graph quantizes activations at run time, every time in a DynamicQuantizeLinear
    (which perturbed moves); com.microsoft's fused DynamicQuantize* nodes round inside themselves."""
    nodes = graph.node
    return (any(n.op_type == "DynamicQuantizeLinear" for n in nodes)
            and not any(n.op_type.startswith("DynamicQuantize") and n.domain == "com.microsoft" for n in nodes))


def _step(node: onnx.NodeProto, constants: dict, names: FreshNames, nodes: list) -> str | None:
    """The tensor holding the grid step of what `node` rounds (None: it rounds no activation on
    one grid): a QuantizeLinear's constant scale; a DynamicQuantizeLinear's run-time one, which
    a copy of the node computes first (appended to `nodes`)."""
    if node.domain not in ("", "ai.onnx") or not node.input or node.input[0] in constants:
        return None
    if node.op_type == "QuantizeLinear" and len(node.input) > 1 and node.input[1] in constants:
        return node.input[1] if numpy_helper.to_array(constants[node.input[1]]).size == 1 else None
    if node.op_type == "DynamicQuantizeLinear":
        x = node.input[0]
        probe = [names.fresh(f"{x}_probe"), names.fresh(f"{x}_probe_scale"), names.fresh(f"{x}_probe_zero")]
        nodes.append(helper.make_node("DynamicQuantizeLinear", [x], probe))
        return probe[1]
    return None


def rounding_bounds(proto: onnx.ModelProto, samples: list[dict[str, np.ndarray]],
                    reference: dict[str, list[np.ndarray]]) -> dict[str, float]:
    """{output name: the SQNR (dB) of the perturbed model against `reference` (onnxruntime's
    outputs of the model as it is, [sample, ...] per output) on `samples`}: the error the
    model's rounding explains. Empty when the model has no activation pair to move."""
    from .metrics import sqnr_db
    from .runtimes import Reference

    model = perturbed(proto)
    if model is None:
        return {}
    session = Reference(model)
    moved = [session.run(sample, k) for k, sample in enumerate(samples)]
    return {name: sqnr_db(np.stack(values).astype(np.float64),
                          np.stack([m[name] for m in moved]).astype(np.float64))
            for name, values in reference.items() if np.asarray(values[0]).dtype.kind == "f"}
