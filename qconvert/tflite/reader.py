"""Reads back what a .tflite file holds (ops with versions, tensors, buffers): for the demo, the
benchmark and tests that check the written bytes rather than qconvert's own report."""

from __future__ import annotations

import collections
from dataclasses import dataclass

import numpy as np

from . import schema_generated as S

_OP_NAMES = {v: k for k, v in vars(S.BuiltinOperator).items() if not k.startswith("_")}
_TYPE_NAMES = {v: k for k, v in vars(S.TensorType).items() if not k.startswith("_")}


@dataclass
class TensorSummary:
    name: str
    shape: list[int]
    dtype: str
    buffer: int
    data_offset: int | None  # file offset of the constant data, None for activations


@dataclass
class FileSummary:
    version: int
    description: str
    ops: list[tuple[str, int]]  # (builtin name, version) in execution order
    tensors: list[TensorSummary]
    buffer_count: int
    signature_inputs: list[str]
    signature_outputs: list[str]

    @property
    def op_counts(self) -> dict[str, int]:
        return dict(sorted(collections.Counter(name for name, _ in self.ops).items()))


def read(data: bytes) -> FileSummary:
    model = S.Model.GetRootAs(data, 0)
    codes = []
    for i in range(model.OperatorCodesLength()):
        code = model.OperatorCodes(i)
        builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
        codes.append((_OP_NAMES.get(builtin, str(builtin)), code.Version()))
    graph = model.Subgraphs(0)
    ops = [codes[graph.Operators(i).OpcodeIndex()] for i in range(graph.OperatorsLength())]
    tensors = []
    for i in range(graph.TensorsLength()):
        t = graph.Tensors(i)
        buffer = model.Buffers(t.Buffer())
        offset = None
        if buffer.DataLength():
            # The vector's data position inside the flatbuffer is its offset in the file.
            offset = buffer._tab.Vector(buffer._tab.Offset(4))
        tensors.append(TensorSummary(t.Name().decode(), [int(d) for d in t.ShapeAsNumpy()] if t.ShapeLength() else [],
                                     _TYPE_NAMES.get(t.Type(), str(t.Type())), t.Buffer(), offset))
    sig_in, sig_out = [], []
    if model.SignatureDefsLength():
        sig = model.SignatureDefs(0)
        sig_in = [sig.Inputs(i).Name().decode() for i in range(sig.InputsLength())]
        sig_out = [sig.Outputs(i).Name().decode() for i in range(sig.OutputsLength())]
    return FileSummary(model.Version(), (model.Description() or b"").decode(), ops, tensors,
                       model.BuffersLength(), sig_in, sig_out)


def buffer_data(data: bytes, index: int) -> np.ndarray:
    return S.Model.GetRootAs(data, 0).Buffers(index).DataAsNumpy()
