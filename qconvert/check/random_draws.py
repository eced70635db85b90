"""The check of a model that draws random numbers: the draws fed to both sides.

LiteRT's generators (Philox) are not onnxruntime's, so a model whose outputs depend on a
RandomNormal, RandomUniform (their Like forms), Bernoulli or Multinomial cannot be compared draw
for draw. The check takes the randomness out instead, one mechanism for every random op:

- LiteRT runs a check-only copy of the written file, each drawing kernel (ops/random.py's
  DRAWING_OPS: RANDOM_STANDARD_NORMAL, RANDOM_UNIFORM, MULTINOMIAL) removed and the tensor it
  wrote made a graph input named draw_name(its ONNX output). Everything after the draw (the
  scale and mean, low and high, Bernoulli's comparison, the casts, the rest of the graph) is the
  written file's own. The written file keeps its random kernels; only the copy loses them.
- onnxruntime runs the ONNX model with each random node replaced by the ONNX definition of its
  output given such a draw: RandomNormal(Like) mean + scale * z, RandomUniform(Like)
  low + (high - low) * u, Bernoulli u < p, Multinomial the drawn classes, each cast to the node's
  output type; z, u and the classes are the same graph input.
- The written file itself runs too (the first sample, drawing), so that a file LiteRT cannot run
  fails the check as any other would.
- Both get the same draws on every sample, seeded: standard normal z, uniform u in [0, 1), classes
  uniform below the logits' count; their shapes are the node outputs' in onnxruntime on the
  sample (so a draw that follows a dynamic dimension is sized with it).
The verification says so (Verification.fed_draws). What it cannot show, the draws' own
distribution, the tests show on the written file (tests/ops/test_random.py: moments over many
invokes).
"""

from __future__ import annotations

import contextlib
import os
import tempfile

import flatbuffers
import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import ConversionError
from ..ir import counterpart
from ..ops.random import DRAWING_OPS, RANDOM_OPS, draw_name
from ..tflite import schema_generated as S
from ..tflite.reader import builtin_code, op_name

DRAWS_SEED = 1  # the generator of the fed draws
# The distribution each random op's kernel draws (ops/random.py's DRAWING_OPS).
_KINDS = {"RandomNormal": "normal", "RandomNormalLike": "normal", "RandomUniform": "uniform",
          "RandomUniformLike": "uniform", "Bernoulli": "uniform", "Multinomial": "classes"}


def random_nodes(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """The graph's random nodes (ai.onnx's RANDOM_OPS) whose output a graph output depends on
    (the loader drops the others: no kernel draws for them), in order."""
    producers = {o: n for n in graph.node for o in n.output if o}
    needed, pending = set(), [o.name for o in graph.output]
    while pending:
        name = pending.pop()
        if name in needed:
            continue
        needed.add(name)
        node = producers.get(name)
        pending.extend(i for i in (_read_by(node) if node is not None else ()) if i)
    return [n for n in graph.node if n.op_type in RANDOM_OPS and n.domain in ("", "ai.onnx")
            and n.output[0] in needed]


def _read_by(node: onnx.NodeProto) -> list[str]:
    """The tensors a node reads: its inputs, and what its control-flow bodies read (from outer
    scope too)."""
    names = list(node.input)
    for attr in node.attribute:
        for body in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
            names += [name for inner in body.node for name in _read_by(inner)]
    return names


def fed_draws(verify, proto: onnx.ModelProto, path: str):
    """`verify` (check/verify.py's) itself when the model draws nothing; else a function of the
    same arguments that checks the written file at `path` with the draws fed to both sides
    (FedDraws.verify). `proto` must hold its weights."""
    nodes = random_nodes(proto.graph)
    if not nodes:
        return verify
    fed = FedDraws(proto, path, nodes)
    return lambda *args, **kwargs: fed.verify(verify, *args, **kwargs)


class FedDraws:
    """The two check-only models (module docstring) and the draws they take."""

    def __init__(self, proto: onnx.ModelProto, path: str, nodes: list[onnx.NodeProto]):
        with open(path, "rb") as f:
            data = f.read()
        kernels = _drawing_kernels(data)
        self.pairs = _paired(nodes, kernels)  # [(node, kernel)], in the graph's order
        self.tflite = _without_kernels(data, [(k, draw_name(n.output[0])) for n, k in self.pairs])
        self.proto: onnx.ModelProto | None = None  # made on the first sample (its outputs' types)
        self.described = [f"{n.op_type} {n.output[0]!r}" for n, _ in self.pairs]

    def verify(self, verify, proto, path, samples=None, count: int = 8, *args,
               shapes: dict | None = None, onnx_path=None, **kwargs):
        """verify(...) of the check-only models on `samples` (None: `count` generated as for the
        written file) with the draws added; `proto`, `path` and `onnx_path` are the written
        model's, which the check-only ones stand for. The written file itself runs the first
        sample in LiteRT, drawing (ConversionError when it cannot)."""
        from .runtimes import prepare

        written, samples = prepare(proto, path, samples, count, shapes=shapes)
        written.run(samples[0])
        fed, draw_shapes = self.fed(proto, samples)
        with self.written() as variant:
            result = verify(self.proto, variant, fed, count, *args, onnx_path=None,
                            shapes={**(shapes or {}), **draw_shapes}, **kwargs)
        result.guessed = [g for g in result.guessed if g not in draw_shapes]
        result.fed_draws = list(self.described)
        return result

    def fed(self, proto: onnx.ModelProto, samples: list[dict]) -> tuple[list[dict], dict]:
        """(the samples with the draws added, the draws' shapes by input name): shapes as
        onnxruntime gives the random outputs on the first sample; makes self.proto."""
        from .runtimes import Reference

        outputs = [n.output[0] for n, _ in self.pairs]
        values = Reference(proto, outputs).run(samples[0])
        draw_shapes = {draw_name(y): tuple(np.shape(values[y])) for y in outputs}
        if self.proto is None:
            types = {y: helper.np_dtype_to_tensor_dtype(np.asarray(values[y]).dtype) for y in outputs}
            self.proto = _with_draw_inputs(proto, self.pairs, types)
        rng = np.random.default_rng(DRAWS_SEED)
        fed = [{**s, **{draw_name(n.output[0]): _draws(rng, k, draw_shapes[draw_name(n.output[0])])
                        for n, k in self.pairs}} for s in samples]
        return fed, draw_shapes

    @contextlib.contextmanager
    def written(self):
        """The path of the check-only .tflite, in a directory gone afterwards."""
        with tempfile.TemporaryDirectory(prefix="qconvert-draws-") as folder:
            variant = os.path.join(folder, "draws_fed.tflite")
            with open(variant, "wb") as f:
                f.write(self.tflite)
            yield variant


def fed_compare(compare, proto: onnx.ModelProto, samples: list[dict], session):
    """The precision planner's check(path, n) (driver/conversion.py _planned): compare(proto,
    path, samples[:n], session) (check/verify.py's), with the draws fed to both sides when the
    model draws: the same draws, check-only ONNX model and recorded onnxruntime session for
    every candidate file, each candidate's own check-only copy."""
    nodes = random_nodes(proto.graph)
    if not nodes:
        return lambda path, n: compare(proto, path, samples[:n], session)
    shared: dict = {}

    def check(path: str, n: int):
        from .runtimes import RecordedReference, Reference

        draws = FedDraws(proto, path, nodes)
        if not shared:
            shared["samples"], _ = draws.fed(proto, samples)
            shared["proto"] = draws.proto
            shared["session"] = RecordedReference(Reference(draws.proto))
        with draws.written() as variant:
            return compare(shared["proto"], variant, shared["samples"][:n], shared["session"])

    return check


class _Kernel:
    """A drawing kernel of the written file: its op's place, its distribution, the tensor it
    writes (index, name, dtype, shape signature), and for MULTINOMIAL the classes it draws from."""

    def __init__(self, model, graph, k: int):
        op = graph.Operators(k)
        self.place, self.kind = k, DRAWING_OPS[op_name(builtin_code(model.OperatorCodes(op.OpcodeIndex())))]
        tensor = graph.Tensors(op.Outputs(0))
        self.index, self.name = op.Outputs(0), tensor.Name().decode()
        signature = tensor.ShapeSignatureAsNumpy() if tensor.ShapeSignatureLength() else tensor.ShapeAsNumpy()
        self.signature = tuple(int(d) for d in np.atleast_1d(signature)) if tensor.ShapeLength() else ()
        self.dtype = np.dtype(np.int64 if tensor.Type() == S.TensorType.INT64 else
                              np.int32 if tensor.Type() == S.TensorType.INT32 else np.float32)
        self.classes = int(graph.Tensors(op.Inputs(0)).Shape(1)) if self.kind == "classes" else 0


def _drawing_kernels(data: bytes) -> list[_Kernel]:
    model = S.Model.GetRootAs(data, 0)
    graph = model.Subgraphs(0)
    return [_Kernel(model, graph, k) for k in range(graph.OperatorsLength())
            if op_name(builtin_code(model.OperatorCodes(graph.Operators(k).OpcodeIndex()))) in DRAWING_OPS]


def _paired(nodes: list[onnx.NodeProto], kernels: list[_Kernel]) -> list[tuple[onnx.NodeProto, _Kernel]]:
    """Each random node's kernel: the one whose tensor is its draw_name or its output (ir.py's
    naming contract: a typed twin too; the loader's "_value" twin of a graph output), else the
    next unpaired kernel of its distribution in the file's order (the loader imports nodes in
    order); ConversionError when one has none (a node in a control-flow body)."""
    outputs = {n.output[0]: n for n in nodes}
    by_output: dict[str, _Kernel] = {}
    for kernel in kernels:
        base = kernel.name.removesuffix("/draw")
        found = counterpart(base, set(outputs), {}) or counterpart(base.removesuffix("_value"), set(outputs), {})
        if found is not None and found[1] is None and found[0] not in by_output:
            by_output[found[0]] = kernel
    unpaired = [k for k in kernels if k not in by_output.values()]
    for y, node in outputs.items():
        kernel = by_output.get(y) or next((k for k in unpaired if k.kind == _KINDS[node.op_type]), None)
        if kernel is None:
            raise ConversionError(f"verify: the random node {node.name!r} ({node.op_type}) has no "
                                  "random kernel in the .tflite that the check can feed its draws "
                                  "to; --no-verify writes it unchecked")
        by_output[y] = kernel
        if kernel in unpaired:
            unpaired.remove(kernel)
    return [(n, by_output[n.output[0]]) for n in nodes]


def _draws(rng: np.random.Generator, kernel: _Kernel, shape) -> np.ndarray:
    """One sample's draws for `kernel`: standard normal, uniform [0, 1) or classes."""
    if kernel.kind == "normal":
        return rng.standard_normal(shape, dtype=np.float32)
    if kernel.kind == "uniform":
        return rng.random(shape, dtype=np.float32)
    return rng.integers(0, kernel.classes, shape).astype(kernel.dtype)


def _without_kernels(data: bytes, kernels: list[tuple[_Kernel, str]]) -> bytes:
    """The file with the kernels' ops removed and their tensors graph inputs, in the signature
    under the given names."""
    model = S.ModelT.InitFromPackedBuf(bytearray(data), 0)
    graph = model.subgraphs[0]
    dropped = {kernel.place for kernel, _ in kernels}
    graph.operators = [op for k, op in enumerate(graph.operators) if k not in dropped]
    graph.inputs = [int(i) for i in graph.inputs] + [kernel.index for kernel, _ in kernels]
    for kernel, name in kernels:
        entry = S.TensorMapT()
        entry.name, entry.tensorIndex = name, kernel.index
        model.signatureDefs[0].inputs.append(entry)
    builder = flatbuffers.Builder(len(data) + 65536)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def _with_draw_inputs(proto: onnx.ModelProto, pairs, types: dict[str, int]) -> onnx.ModelProto:
    """A copy of `proto` with each random node replaced by its output's definition from a draw
    input (module docstring), cast to `types` (the outputs' types in onnxruntime, by name); a
    draw dimension the file leaves dynamic is symbolic."""
    variant = onnx.ModelProto()
    variant.CopyFrom(proto)
    graph = variant.graph
    replaced = {id(n): n for n, _ in pairs}
    kept = [n for n in proto.graph.node]
    del graph.node[:]
    for node in kept:
        if id(node) not in replaced:
            graph.node.append(node)
            continue
        kernel = next(k for n, k in pairs if n is node)
        draw = draw_name(node.output[0])
        dims = [d if d >= 0 else f"{draw}_{i}" for i, d in enumerate(kernel.signature)]
        graph.input.append(helper.make_tensor_value_info(
            draw, helper.np_dtype_to_tensor_dtype(kernel.dtype), dims))
        graph.node.extend(_definition(node, draw, types[node.output[0]]))
    return variant


def _definition(node: onnx.NodeProto, draw: str, dtype: int) -> list[onnx.NodeProto]:
    """The ONNX nodes computing the random node's output (of type `dtype`) from its draw."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    y, prefix = node.output[0], draw + "/"
    if node.op_type == "Multinomial":
        return [helper.make_node("Cast", [draw], [y], to=dtype)]
    if node.op_type == "Bernoulli":
        return [helper.make_node("Less", [draw, node.input[0]], [prefix + "less"]),
                helper.make_node("Cast", [prefix + "less"], [y], to=dtype)]
    if node.op_type.startswith("RandomNormal"):
        scale, offset = attrs.get("scale", 1.0), attrs.get("mean", 0.0)
    else:
        low, high = attrs.get("low", 0.0), attrs.get("high", 1.0)
        scale, offset = np.float32(high) - np.float32(low), low
    constants = [numpy_helper.from_array(np.array(v, np.float32), prefix + n)
                 for n, v in (("scale", scale), ("offset", offset))]
    return [*(helper.make_node("Constant", [], [c.name], value=c) for c in constants),
            helper.make_node("Mul", [draw, prefix + "scale"], [prefix + "scaled"]),
            helper.make_node("Add", [prefix + "scaled", prefix + "offset"], [prefix + "shifted"]),
            helper.make_node("Cast", [prefix + "shifted"], [y], to=dtype)]
