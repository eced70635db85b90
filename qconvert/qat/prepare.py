"""prepare_qat: the training-graph rewrite (tf.contrib.quantize's create_training_graph) for a torch
module, with fake-quant exactly where qconvert's int8 TFLite graph quantizes.

The module is traced with torch.fx (symbolic tracing: its forward must not branch on tensor
values), its traced copy rewritten, and returned as a torch.fx.GraphModule; the module passed in is
left as it was. The rules, each what qconvert's conversion does with the exported graph:
- Conv2d [-> BatchNorm2d] [-> ReLU/ReLU6] and Linear [-> ReLU/ReLU6], each link the previous one's
  only reader, become one FusedLayer (fused.py): TFLite's CONV_2D / FULLY_CONNECTED with the batch
  norm folded into its weights and the activation fused. Its weights are fake-quantized per output
  channel; its output gets one fake-quant, after the activation (none between the layer and it).
- Model inputs get a fake-quant (the QUANTIZE after each float input).
- An add of two tensors (a residual add: both inputs are already quantized tensors) gets one on
  its output, unless a ReLU/ReLU6 is its only reader: qconvert fuses that into the ADD, and the
  fake-quant follows the ReLU.
- torch.cat: the inputs and the output share one range (TFLite's CONCATENATION wants one set of
  params; qconvert gives the union of the inputs' ranges to the output and to every input's
  producer, transforms/propagate_minmax.py). The inputs' fake-quants become sites of one shared
  RangeObserver, and the output gets one more site of it (on the grid already: it changes
  nothing, and the export writes the output's params too). An input whose params are tied
  elsewhere (a model input, a same-scale op's or a fixed-output op's output: a split, a max pool,
  a sigmoid) keeps them, and a fake-quant on its edge into the concatenation, a site of the shared
  range, models the QUANTIZE qconvert inserts there (the export writes no pair for it: the
  concatenation's own pair makes qconvert requantize).
- Same-scale ops move int8 values without changing their params, so they get no fake-quant: max
  pooling (and a ReLU after it, which qconvert fuses into MAX_POOL_2D), nearest upsampling
  (nn.Upsample), flatten, reshape, view,
  squeeze, unsqueeze, permute, transpose, dropout, identity, slicing.
- Every other op producing a float tensor (average pooling, which qconvert runs as a
  DEPTHWISE_CONV_2D with its own output params; mean; a ReLU that is not fused; a standalone batch
  norm; mul...) gets one fake-quant after it.
- Ops whose int8 kernel fixes its output params (sigmoid, tanh, softmax, log-softmax) get a
  fake-quant at those params (LOGISTIC's 1/256 and -128...), nothing to learn; none when the op
  writes a model output, which qconvert keeps float (its fixed step would cost precision). SiLU is x *
  sigmoid(x), as qconvert writes it: the sigmoid's fixed fake-quant, then the product's own.
"""

from __future__ import annotations

import copy
import operator

import torch
from torch import fx, nn
from torch.fx.passes.shape_prop import ShapeProp
from torch.nn import functional as F

from ..ops.registry import TFLITE_OPS
from .fake_quant import FakeQuant, FixedFakeQuant, RangeObserver
from .fused import FusedLayer

_RELU = {nn.ReLU: "relu", nn.ReLU6: "relu6", F.relu: "relu", torch.relu: "relu", F.relu6: "relu6",
         "relu": "relu"}
_SAME_MODULES = (nn.MaxPool2d, nn.Flatten, nn.Unflatten, nn.Dropout, nn.Identity)
_SAME_FUNCTIONS = {F.max_pool2d, torch.flatten, torch.reshape, torch.squeeze, torch.unsqueeze,
                   torch.permute, torch.transpose, F.dropout, operator.getitem}
_SAME_METHODS = {"view", "reshape", "flatten", "squeeze", "unsqueeze", "permute", "transpose",
                 "contiguous"}
_MAX_POOL = (nn.MaxPool2d, F.max_pool2d)
# Ops whose int8 kernel fixes its output params -> that TFLite op (its QuantRule.fixed_params).
_FIXED_MODULES = {nn.Sigmoid: "LOGISTIC", nn.Tanh: "TANH", nn.Softmax: "SOFTMAX",
                  nn.LogSoftmax: "LOG_SOFTMAX"}
_FIXED_FUNCTIONS = {torch.sigmoid: "LOGISTIC", F.sigmoid: "LOGISTIC", torch.tanh: "TANH", F.tanh: "TANH",
                    F.softmax: "SOFTMAX", torch.softmax: "SOFTMAX", F.log_softmax: "LOG_SOFTMAX",
                    torch.log_softmax: "LOG_SOFTMAX"}
_FIXED_METHODS = {"sigmoid": "LOGISTIC", "tanh": "TANH", "softmax": "SOFTMAX", "log_softmax": "LOG_SOFTMAX"}
_ADDS = {operator.add, torch.add}


class _Graph:
    """The traced module and what the rules ask of its nodes."""

    def __init__(self, gm: fx.GraphModule):
        self.gm, self.graph = gm, gm.graph

    def module(self, node: fx.Node) -> nn.Module | None:
        return self.gm.get_submodule(node.target) if node.op == "call_module" else None

    def target(self, node: fx.Node):
        """What the node calls: a module's class, a function, or a method's name."""
        if node.op == "call_module":
            return type(self.module(node))
        return node.target if node.op in ("call_function", "call_method") else None

    def relu(self, node: fx.Node) -> str | None:
        """"relu" or "relu6" when the node is one (ReLU, ReLU6, their functions and methods;
        Hardtanh(0, 6) too); None otherwise."""
        if node.op not in ("call_module", "call_function", "call_method"):
            return None
        module = self.module(node)
        if isinstance(module, nn.Hardtanh) and (module.min_val, module.max_val) == (0.0, 6.0):
            return "relu6"
        try:
            return _RELU.get(self.target(node))
        except TypeError:  # an unhashable target
            return None

    def is_float_tensor(self, node: fx.Node) -> bool:
        meta = node.meta.get("tensor_meta")
        return meta is not None and hasattr(meta, "dtype") and meta.dtype.is_floating_point

    def only_reader(self, node: fx.Node) -> fx.Node | None:
        readers = list(node.users)
        return readers[0] if len(readers) == 1 and node.op != "output" else None

    def is_same_scale(self, node: fx.Node) -> bool:
        target = self.target(node)
        if node.op == "call_module":
            module = self.module(node)
            # Nearest upsampling moves values (TFLite's nearest resize, or the DEPTH_TO_SPACE
            # qconvert lowers it to, keeps its input's params).
            nearest = isinstance(module, nn.Upsample) and module.mode == "nearest"
            return issubclass(target, _SAME_MODULES) or nearest
        if node.op == "call_method":
            return target in _SAME_METHODS
        return node.op == "call_function" and target in _SAME_FUNCTIONS

    def is_max_pool(self, node: fx.Node) -> bool:
        target = self.target(node)
        return target in _MAX_POOL if node.op == "call_function" else (
            node.op == "call_module" and issubclass(target, _MAX_POOL[0]))

    def fixed_op(self, node: fx.Node) -> str | None:
        """The TFLite op with fixed output params the node is (LOGISTIC, TANH...), or None."""
        target = self.target(node)
        if node.op == "call_module":
            return next((op for kind, op in _FIXED_MODULES.items() if issubclass(target, kind)), None)
        table = _FIXED_METHODS if node.op == "call_method" else _FIXED_FUNCTIONS
        try:
            return table.get(target) if node.op in ("call_method", "call_function") else None
        except TypeError:  # an unhashable target
            return None

    def is_silu(self, node: fx.Node) -> bool:
        if node.op == "call_module":
            return isinstance(self.module(node), nn.SiLU)
        return node.op == "call_function" and node.target is F.silu

    def is_add(self, node: fx.Node) -> bool:
        tensors = [a for a in node.args if isinstance(a, fx.Node) and self.is_float_tensor(a)]
        return len(tensors) == 2 and (
            (node.op == "call_function" and node.target in _ADDS)
            or (node.op == "call_method" and node.target == "add"))

    def is_cat(self, node: fx.Node) -> bool:
        return node.op == "call_function" and node.target in (torch.cat, torch.concat)


def prepare_qat(module: nn.Module, example_inputs, quant_delay: int = 0, ema_decay: float = 0.999,
                freeze_bn_delay: int | None = None) -> fx.GraphModule:
    """A copy of `module` with fake-quant where qconvert's int8 TFLite graph quantizes (the rules
    in the module docstring), in training mode. `example_inputs` (a tensor or a tuple of them)
    gives the traced graph's shapes and dtypes. `quant_delay`: training passes during which
    fake-quant passes float values through (ranges and batch norms still train); `ema_decay`: the
    moving average of the activation ranges; `freeze_bn_delay`: training passes after which the
    folded batch norms use their moving statistics (None: never during training).

    Train it like the float module; export(prepared, path, example_inputs) writes the QDQ ONNX
    model that qconvert converts with the trained params. fake_quant_sites(prepared) lists the
    quantized tensors."""
    inputs = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    gm = fx.symbolic_trace(copy.deepcopy(module))
    gm.eval()
    with torch.no_grad():  # shapes and dtypes only: eval mode, so no batch norm statistics move
        ShapeProp(gm).propagate(*inputs)
    g = _Graph(gm)
    _decompose_silu(g)
    _fuse_layers(g, quant_delay, freeze_bn_delay)
    observers = _insert_fake_quants(g, ema_decay, quant_delay)
    _share_concatenation_ranges(g, observers, ema_decay, quant_delay)
    gm.graph.lint()
    gm.delete_all_unused_submodules()
    gm.recompile()
    gm.train()
    return gm


def _fuse_layers(g: _Graph, quant_delay: int, freeze_bn_delay: int | None) -> None:
    """Each Conv2d [-> BatchNorm2d] [-> ReLU] and Linear [-> ReLU] chain becomes one FusedLayer
    call; the call keeps the name of the chain's last node (the tensor the int8 op writes)."""
    for node in list(g.graph.nodes):
        layer = g.module(node)
        if not isinstance(layer, (nn.Conv2d, nn.Linear)):
            continue
        chain, bn, last = [node], None, node
        reader = g.only_reader(last)
        if (isinstance(layer, nn.Conv2d) and reader is not None
                and isinstance(g.module(reader), nn.BatchNorm2d)):
            bn, last = g.module(reader), reader
            chain.append(reader)
            reader = g.only_reader(last)
        activation = g.relu(reader) if reader is not None and reader.args[0] is last else None
        if activation is not None:
            last = reader
            chain.append(reader)
        name = f"qat_{last.name}"
        g.gm.add_submodule(name, FusedLayer(layer, bn, activation, quant_delay, freeze_bn_delay))
        with g.graph.inserting_after(last):
            fused = g.graph.call_module(name, node.args)
        fused.meta = dict(last.meta)
        fused.meta["qat_site"] = last.name
        last.replace_all_uses_with(fused)
        for old in reversed(chain):
            g.graph.erase_node(old)


def _decompose_silu(g: _Graph) -> None:
    """SiLU becomes x * sigmoid(x), as qconvert writes it (LOGISTIC, then MUL): the sigmoid's
    output then gets its fixed-params fake-quant and the product its own."""
    for node in list(g.graph.nodes):
        if not g.is_silu(node):
            continue
        x = node.args[0] if node.args else node.kwargs["input"]
        with g.graph.inserting_after(node):
            sigmoid = g.graph.call_function(torch.sigmoid, (x,))
        with g.graph.inserting_after(sigmoid):
            product = g.graph.call_function(operator.mul, (x, sigmoid))
        sigmoid.meta, product.meta = dict(node.meta), dict(node.meta)
        node.replace_all_uses_with(product)
        g.graph.erase_node(node)


def _site(node: fx.Node) -> str:
    return node.meta.get("qat_site", node.name)


def _insert_fake_quants(g: _Graph, decay: float, quant_delay: int) -> dict[str, RangeObserver]:
    """A FakeQuant after every tensor the rules quantize; {FakeQuant submodule name: observer}."""
    observers = {}
    for node in list(g.graph.nodes):
        if node.op in ("output", "get_attr") or not g.is_float_tensor(node):
            continue
        if node.op != "placeholder" and _needs_no_fake_quant(g, node):
            continue
        site = _site(node)
        name = f"fake_quant_{site}"
        fixed = g.fixed_op(node)
        if fixed is not None and all(user.op == "output" for user in node.users):
            continue  # a model output: qconvert keeps the op float (its fixed step would cost)
        if fixed is not None:  # the kernel's own params, nothing to observe
            scale, zero_point = TFLITE_OPS[fixed].quant.fixed_params
            g.gm.add_submodule(name, FixedFakeQuant(site, scale, zero_point, quant_delay))
        else:
            observers[name] = RangeObserver(decay, quant_delay)
            g.gm.add_submodule(name, FakeQuant(site, observers[name]))
        with g.graph.inserting_after(node):
            fq = g.graph.call_module(name, (node,))
        fq.meta = dict(node.meta)
        fq.meta["qat_source"] = node
        node.replace_all_uses_with(fq, delete_user_cb=lambda user: user is not fq)
    return observers


def _needs_no_fake_quant(g: _Graph, node: fx.Node) -> bool:
    """Same-scale ops, concatenations (their sites come later), an add whose only reader is a
    ReLU fused into it, and a ReLU fused into a max pool (same params as the pool's input)."""
    if g.is_same_scale(node) or g.is_cat(node):
        return True
    reader = g.only_reader(node)
    if g.is_add(node) and reader is not None and g.relu(reader) and reader.args[0] is node:
        return True
    source = node.args[0] if node.args and isinstance(node.args[0], fx.Node) else None
    return (bool(g.relu(node)) and source is not None and g.is_max_pool(source)
            and g.only_reader(source) is node)


def _share_concatenation_ranges(g: _Graph, observers: dict[str, RangeObserver], decay: float,
                                quant_delay: int) -> None:
    """Every concatenation's inputs and output read one RangeObserver (merging the ranges of
    nested or overlapping concatenations); each observer learns how many sites read it."""
    sites_of: dict[int, list[FakeQuant]] = {}  # id(observer) -> the FakeQuant modules reading it
    for name, observer in observers.items():
        sites_of.setdefault(id(observer), []).append(g.gm.get_submodule(name))
    for node in list(g.graph.nodes):
        if not g.is_cat(node):
            continue
        pieces = node.args[0] if node.args else node.kwargs.get("tensors")
        shared = RangeObserver(decay, quant_delay)
        members: list[FakeQuant] = []
        for k, piece in enumerate(pieces):
            fq = g.module(piece)
            source = piece.meta.get("qat_source")
            if isinstance(fq, FakeQuant) and source is not None and source.op != "placeholder":
                members.extend(sites_of.pop(id(fq.observer), []))
                continue
            # Params tied elsewhere (a model input, a same-scale op's or a fixed-output op's
            # output): the piece keeps them, and TFLite requantizes it to the concatenation's
            # (a QUANTIZE qconvert inserts, no pair of its own in the export).
            requantize = FakeQuant(f"{node.name}_input_{k}", shared, exported=False)
            name = f"fake_quant_{node.name}_input_{k}"
            g.gm.add_submodule(name, requantize)
            with g.graph.inserting_before(node):
                edge = g.graph.call_module(name, (piece,))
            edge.meta = dict(piece.meta)
            node.replace_input_with(piece, edge)
            members.append(requantize)
        name = f"fake_quant_{node.name}"
        output = FakeQuant(node.name, shared)
        g.gm.add_submodule(name, output)
        with g.graph.inserting_after(node):
            fq = g.graph.call_module(name, (node,))
        fq.meta = dict(node.meta)
        fq.meta["qat_source"] = node
        node.replace_all_uses_with(fq, delete_user_cb=lambda user: user is not fq)
        for member in members + [output]:
            member.observer = shared
        sites_of[id(shared)] = members + [output]
    for members in sites_of.values():
        members[0].observer.sites = len(members)


def fake_quant_sites(prepared: fx.GraphModule) -> list[str]:
    """The tensors the prepared module fake-quantizes, in execution order, by their node names in
    the traced module (a fused layer's by its last node: the ReLU, or the batch norm)."""
    return [prepared.get_submodule(n.target).site for n in prepared.graph.nodes
            if n.op == "call_module"
            and isinstance(prepared.get_submodule(n.target), (FakeQuant, FixedFakeQuant))]


def weight_sites(prepared: fx.GraphModule) -> list[str]:
    """The fused layers whose weights are fake-quantized, in execution order, by their submodule
    names: "qat_" and the site name of their output."""
    return [n.target for n in prepared.graph.nodes
            if n.op == "call_module" and isinstance(prepared.get_submodule(n.target), FusedLayer)]
