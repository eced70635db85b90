"""export: the prepared module as a QDQ ONNX model that qconvert converts with the trained params.

The module is exported in eval mode through torch's TorchScript exporter (torch.onnx.export with
dynamo=False). Every fake-quant is a marker there (fake_quant._Marker: an autograd.Function whose
`symbolic` writes a qconvert::FakeQuant node carrying its site's index), and each marker is then
replaced with onnx.helper by a QuantizeLinear -> DequantizeLinear pair whose scale and zero point
are the site's trained ones, as initializers:
- an activation: per tensor, int8 zero point; the tensor the pair reads is renamed after its site
  (the node name in the traced module, e.g. "relu1"), so the .tflite names it the same;
- a weight: the batch-norm-folded float weights, per output channel (axis 0), symmetric, zero
  points 0 (int8): max|w_c| / 127, so no value reaches -128 and the grid is [-127, 127].
The folded bias stays float: qconvert writes it as int32 at input scale x weight scale.

Why this route: the exporter's own symbolics for fake_quantize_per_*_affine refuse the weights'
narrow range [-127, 127] and would write scales computed in the graph (weights') or as Cast nodes,
while a marker carries exactly the params qconvert must read; the dynamo exporter (torch.export)
has no autograd.Function symbolic and needs onnxscript, which this install does not have.
"""

from __future__ import annotations

import copy
import io
import warnings
from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import helper, numpy_helper

from ..onnx.loader import onnx_names
from ..qdq.names import FreshNames
from .fake_quant import exporting
from .fused import FusedLayer

OPSET = 17  # >= 13: QuantizeLinear's axis (per-channel weights)


def export(module: torch.fx.GraphModule, path, example_inputs, input_names=None, output_names=None,
           opset: int = OPSET) -> onnx.ModelProto:
    """Writes the prepared module (prepare_qat's, trained) as QDQ ONNX at `path` (None: only
    returned) and returns it. Input names default to the traced module's (its forward's
    arguments), output names to "output" (output_0, output_1... for several)."""
    inputs = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    model = copy.deepcopy(module).eval()
    for name, sub in model.named_modules():
        if isinstance(sub, FusedLayer):
            sub.prepare_export(name)
    if input_names is None:
        input_names = [n.name for n in model.graph.nodes if n.op == "placeholder"]
    if output_names is None:
        with torch.no_grad():
            outputs = model(*inputs)
        count = len(outputs) if isinstance(outputs, (tuple, list)) else 1
        output_names = ["output"] if count == 1 else [f"output_{i}" for i in range(count)]
    sites: list[dict] = []
    buffer = io.BytesIO()
    with exporting(sites), torch.no_grad(), warnings.catch_warnings():
        # The TorchScript exporter warns that it is deprecated (see the module docstring).
        warnings.simplefilter("ignore")
        torch.onnx.export(model, inputs, buffer, opset_version=opset, dynamo=False,
                          input_names=list(input_names), output_names=list(output_names),
                          custom_opsets={"qconvert": 1})
    proto = onnx.load_from_string(buffer.getvalue())
    _write_pairs(proto, sites)
    onnx.checker.check_model(proto)
    if path is not None:
        Path(path).write_bytes(proto.SerializeToString())
    return proto


def _write_pairs(proto: onnx.ModelProto, sites: list[dict]) -> None:
    """Replaces every qconvert::FakeQuant marker by its site's Q/DQ pair (module docstring)."""
    graph = proto.graph
    unique = FreshNames(onnx_names(graph)).fresh
    # Graph inputs, outputs and initializers keep their names.
    fixed = ({i.name for i in graph.input} | {t.name for t in graph.initializer}
             | {o.name for o in graph.output})
    renamed: dict[str, str] = {}
    nodes, initializers = [], []
    for node in graph.node:
        if node.domain != "qconvert":
            nodes.append(node)
            continue
        site = sites[next(a.i for a in node.attribute if a.name == "site")]
        x, y = node.input[0], node.output[0]
        if site["kind"] == "activation":
            if x not in fixed:
                renamed[x] = x = unique(site["name"])
            scale = np.array(site["scale"], np.float32)
            zero_point = np.array(site["zero_point"], np.int8)
            axis = {}
        else:
            scale = np.asarray(site["scales"], np.float32)
            zero_point = np.zeros(scale.shape, np.int8)
            axis = {"axis": 0}
        names = [unique(f"{x}_scale"), unique(f"{x}_zero_point"), unique(f"{x}_quantized")]
        initializers += [numpy_helper.from_array(scale, names[0]),
                         numpy_helper.from_array(zero_point, names[1])]
        nodes += [helper.make_node("QuantizeLinear", [x, names[0], names[1]], [names[2]],
                                   name=f"{x}_QuantizeLinear", **axis),
                  helper.make_node("DequantizeLinear", [names[2], names[0], names[1]], [y],
                                   name=f"{x}_DequantizeLinear", **axis)]
    for node in nodes:  # one pass: the renamed tensors' writers and readers
        for k, name in enumerate(node.input):
            node.input[k] = renamed.get(name, name)
        for k, name in enumerate(node.output):
            node.output[k] = renamed.get(name, name)
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend(initializers)
    del graph.value_info[:]  # written for the old names; onnx and qconvert infer them again
    kept = [o for o in proto.opset_import if o.domain != "qconvert"]
    del proto.opset_import[:]
    proto.opset_import.extend(kept)
