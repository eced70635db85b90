"""Reads back what a .tflite file holds (ops with versions, tensors, buffers): for the demo, the
benchmark and tests that check the written bytes rather than qconvert's own report."""

from __future__ import annotations

import collections
import json
import mmap
from dataclasses import dataclass, field

import numpy as np

from . import schema_generated as S

_OP_NAMES = {v: k for k, v in vars(S.BuiltinOperator).items() if not k.startswith("_")}
_TYPE_NAMES = {v: k for k, v in vars(S.TensorType).items() if not k.startswith("_")}
_ACTIVATIONS = {v: k for k, v in vars(S.ActivationFunctionType).items() if not k.startswith("_")}
_OPTIONS = {v: k for k, v in vars(S.BuiltinOptions).items() if not k.startswith("_")}

# Metadata entry recording how graph inputs/outputs are permuted from the source model's layout
# (written by writer.py, read by io_layout_metadata).
IO_LAYOUT_METADATA = "qconvert_io_layout"


def builtin_code(code) -> int:
    """The operator number of an OperatorCode table: the larger of builtin_code and
    deprecated_builtin_code (older files only have the deprecated one, which stops at 127; newer
    codes are only in builtin_code, the deprecated one then holding 127)."""
    return max(code.BuiltinCode(), code.DeprecatedBuiltinCode())


def op_name(number: int) -> str:
    """The BuiltinOperator name of `number`; the number as text when the schema has no such op."""
    return _OP_NAMES.get(number, str(number))


def dtype_name(number: int) -> str:
    """The TensorType name of `number`; the number as text when the schema has no such type."""
    return _TYPE_NAMES.get(number, str(number))


def data_offset(buffer) -> int | None:
    """The file offset of a Buffer table's inline data, None without inline data: a vector's
    position inside the flatbuffer is its offset in the file."""
    return buffer._tab.Vector(buffer._tab.Offset(4)) if buffer.DataLength() else None


def _fused_activation(op) -> str | None:
    """The fused_activation_function of the op's options table, if that table has one."""
    table_name = _OPTIONS.get(op.BuiltinOptionsType())
    if not table_name or op.BuiltinOptions() is None:
        return None
    table = getattr(S, table_name)()
    table.Init(op.BuiltinOptions().Bytes, op.BuiltinOptions().Pos)
    getter = getattr(table, "FusedActivationFunction", None)
    return _ACTIVATIONS.get(getter()) if getter else None


@dataclass
class TensorSummary:
    name: str
    shape: list[int]
    dtype: str
    buffer: int
    data_offset: int | None  # file offset of the constant data, None for activations
    scales: list[float] = field(default_factory=list)  # quantization scales (empty: not quantized)
    zero_points: list[int] = field(default_factory=list)
    quantized_dimension: int = 0


@dataclass
class OpSummary:
    name: str  # builtin name
    version: int
    inputs: list[int]  # tensor indices, -1 for an omitted optional input
    outputs: list[int]
    fused_activation: str | None  # the options' fused_activation_function, None without one


@dataclass
class SubgraphSummary:
    """One subgraph of the file: subgraph 0 is the main one; the others are the bodies of
    control-flow ops (IF, WHILE), which refer to them by index."""

    name: str
    ops: list[tuple[str, int]]
    tensors: list[TensorSummary]
    inputs: list[int]
    outputs: list[int]
    operators: list[OpSummary] = field(default_factory=list)


@dataclass
class FileSummary:
    version: int
    description: str
    ops: list[tuple[str, int]]  # (builtin name, version) in execution order
    tensors: list[TensorSummary]
    buffer_count: int
    signature_inputs: list[str]
    signature_outputs: list[str]
    operators: list[OpSummary] = field(default_factory=list)
    subgraphs: list[SubgraphSummary] = field(default_factory=list)  # every one, the main one first

    @property
    def op_counts(self) -> dict[str, int]:
        return dict(sorted(collections.Counter(name for name, _ in self.ops).items()))


def read(data: bytes) -> FileSummary:
    model = S.Model.GetRootAs(data, 0)
    codes = []
    for i in range(model.OperatorCodesLength()):
        code = model.OperatorCodes(i)
        codes.append((op_name(builtin_code(code)), code.Version()))
    subgraphs = [_subgraph(model, model.Subgraphs(k), codes) for k in range(model.SubgraphsLength())]
    main = subgraphs[0]
    sig_in, sig_out = [], []
    if model.SignatureDefsLength():
        sig = model.SignatureDefs(0)
        sig_in = [sig.Inputs(i).Name().decode() for i in range(sig.InputsLength())]
        sig_out = [sig.Outputs(i).Name().decode() for i in range(sig.OutputsLength())]
    return FileSummary(model.Version(), (model.Description() or b"").decode(), main.ops, main.tensors,
                       model.BuffersLength(), sig_in, sig_out, main.operators, subgraphs)


def _subgraph(model, graph, codes) -> SubgraphSummary:
    ops, operators = [], []
    for i in range(graph.OperatorsLength()):
        op = graph.Operators(i)
        name, version = codes[op.OpcodeIndex()]
        ops.append((name, version))
        inputs = [int(x) for x in op.InputsAsNumpy()] if op.InputsLength() else []
        outputs = [int(x) for x in op.OutputsAsNumpy()] if op.OutputsLength() else []
        operators.append(OpSummary(name, version, inputs, outputs, _fused_activation(op)))
    tensors = []
    for i in range(graph.TensorsLength()):
        t = graph.Tensors(i)
        shape = [int(d) for d in t.ShapeAsNumpy()] if t.ShapeLength() else []
        summary = TensorSummary(t.Name().decode(), shape, dtype_name(t.Type()), t.Buffer(),
                                data_offset(model.Buffers(t.Buffer())))
        q = t.Quantization()
        if q is not None and q.ScaleLength():
            summary.scales = [float(v) for v in q.ScaleAsNumpy()]
            summary.zero_points = [int(v) for v in q.ZeroPointAsNumpy()] if q.ZeroPointLength() else []
            summary.quantized_dimension = q.QuantizedDimension()
        tensors.append(summary)
    inputs = [int(x) for x in graph.InputsAsNumpy()] if graph.InputsLength() else []
    outputs = [int(x) for x in graph.OutputsAsNumpy()] if graph.OutputsLength() else []
    return SubgraphSummary((graph.Name() or b"").decode(), ops, tensors, inputs, outputs, operators)


def buffer_data(data: bytes, index: int) -> np.ndarray:
    return S.Model.GetRootAs(data, 0).Buffers(index).DataAsNumpy()


def io_layout_metadata(path: str) -> dict[str, dict[str, list[int]]]:
    """The permutations qconvert recorded in the file, {"inputs": {...}, "outputs": {...}}."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        # Mapped, not read: only the pages of the header and the metadata are touched (a
        # model's weights are most of the file).
        model = S.Model.GetRootAs(data, 0)
        for i in range(model.MetadataLength()):
            entry = model.Metadata(i)
            if entry.Name() and entry.Name().decode() == IO_LAYOUT_METADATA:
                buffer = model.Buffers(entry.Buffer())
                start = buffer._tab.Offset(4)
                if start:
                    start = buffer._tab.Vector(start)
                    raw = bytes(data[start:start + buffer.DataLength()])
                else:  # stored after the flatbuffer (a model over 2 GB): offset and size
                    raw = bytes(data[buffer.Offset():buffer.Offset() + buffer.Size()])
                return json.loads(raw.decode())
    return {"inputs": {}, "outputs": {}}
