"""Exporter: the IR becomes a TFLite flatbuffer (schema version 3, identifier "TFL3").

Deterministic: tensors, buffers and operator codes are numbered in order of first use. The
bodies of control-flow ops (IF, WHILE) are further subgraphs after the main one (subgraph 0),
numbered as Model.subgraphs lists them; all share the buffers and operator codes. Identical
constant data is stored once: a buffer is just bytes, so tensors of any dtype and shape whose bytes
are equal share one. Every data buffer starts at a file offset that is a multiple of 16
(the schema's force_align, which the generated Python code does not honour by itself), so runtimes
that map the file and cast in place read aligned data.
"""

from __future__ import annotations

import hashlib
import io
import json
import mmap

import flatbuffers
import numpy as np

from ..errors import ConversionError
from ..ir import WORK, Model
from ..ops.registry import TFLITE_OPS
from . import schema_generated as S
from .reader import IO_LAYOUT_METADATA

DATA_ALIGNMENT = 16
SIGNATURE_KEY = "serving_default"

TENSOR_TYPES = {
    np.dtype(np.float32): S.TensorType.FLOAT32,
    np.dtype(np.float16): S.TensorType.FLOAT16,
    np.dtype(np.int32): S.TensorType.INT32,
    np.dtype(np.uint8): S.TensorType.UINT8,
    np.dtype(np.int64): S.TensorType.INT64,
    np.dtype(np.bool_): S.TensorType.BOOL,
    np.dtype(np.int16): S.TensorType.INT16,
    np.dtype(np.int8): S.TensorType.INT8,
    np.dtype(np.float64): S.TensorType.FLOAT64,
    np.dtype(np.uint64): S.TensorType.UINT64,
    np.dtype(np.uint32): S.TensorType.UINT32,
    np.dtype(np.uint16): S.TensorType.UINT16,
}

# Option fields whose IR value is a name (or a dtype) rather than the schema's enum number.
_ENUM_FIELDS = {
    "padding": S.Padding,
    "fused_activation_function": S.ActivationFunctionType,
    "weights_format": S.FullyConnectedOptionsWeightsFormat,
    "mode": S.MirrorPadMode,
}


def tensor_type(dtype: np.dtype, what: str) -> int:
    try:
        return TENSOR_TYPES[np.dtype(dtype)]
    except KeyError:
        raise ConversionError(f"{what}: dtype {np.dtype(dtype)} has no TFLite tensor type") from None


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _option_value(field: str, value):
    if isinstance(value, np.dtype) or isinstance(value, type) and issubclass(value, np.generic):
        return tensor_type(np.dtype(value), field)
    if isinstance(value, str):
        return getattr(_ENUM_FIELDS[field], value)
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [int(v) for v in value]
    return value


def _options_object(op, subgraph_numbers: dict[int, int]):
    """The op's options table as a flatc object-API instance (or None); a control-flow op's
    bodies by their subgraph numbers (`subgraph_numbers`: id of the Model -> index)."""
    opdef = TFLITE_OPS[op.type]
    if opdef.options is None:
        return None
    obj = getattr(S, opdef.options + "T")()
    fields = dict(op.options)
    fields.update((field, subgraph_numbers[id(graph)]) for field, graph in op.subgraphs.items())
    if hasattr(obj, "fusedActivationFunction"):
        fields["fused_activation_function"] = op.fused_activation
    elif op.fused_activation != "NONE":
        raise AssertionError(f"{op.type} cannot carry a fused activation")
    for field, value in fields.items():
        attr = _camel(field)
        if not hasattr(obj, attr):
            raise AssertionError(f"{opdef.options} has no field {field!r}")
        setattr(obj, attr, _option_value(field, value))
    return obj


def _storable(data: np.ndarray) -> np.ndarray:
    """The array as the file stores it: little-endian, bools as bytes (no copy if already so)."""
    if data.dtype.byteorder == ">":
        data = data.astype(data.dtype.newbyteorder("<"))
    return data.view(np.uint8) if data.dtype == np.bool_ else data


def _bytes_of(data: np.ndarray) -> np.ndarray:
    """The array's bytes as a flat uint8 view (a copy only if it is not contiguous)."""
    return np.ascontiguousarray(data).reshape(-1).view(np.uint8)


def _same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    WORK["constant byte compares"] += 1
    return np.array_equal(_bytes_of(a), _bytes_of(b))


# Bytes of a buffer its fingerprint reads: all of a small one; of a larger one its first and last
# kilobyte and an even sample between (weights that differ, differ there).
_FINGERPRINT_BYTES = 4096


def _digest(data: np.ndarray) -> bytes:
    """A fingerprint of the buffer's bytes, not the whole of them: equal bytes give equal
    fingerprints, and a fingerprint match is confirmed by a full comparison (_same_bytes), so
    reading a few kilobytes of each weight is enough to tell most buffers apart."""
    flat = _bytes_of(data)
    if flat.size > _FINGERPRINT_BYTES:
        step = flat.size // (_FINGERPRINT_BYTES // 2)
        flat = np.concatenate([flat[:1024], flat[-1024:], flat[::step]])
    return hashlib.blake2b(flat, digest_size=16).digest()


class DistinctBuffers:
    """Constant data kept once per distinct byte string, numbered from 1 as the file's buffers are
    (buffer 0 is the empty one). A byte length met once keeps its buffer in `unhashed` (big weights
    rarely share a length, and are then never fingerprinted); from the second buffer of a length
    on, its buffers are fingerprinted (_digest) and looked up by (length, fingerprint), and a match
    is compared byte for byte."""

    def __init__(self) -> None:
        self.data: list[np.ndarray | None] = []
        self.unhashed: dict[int, int] = {}
        self.hashed_lengths: set[int] = set()
        self.by_hash: dict[tuple[int, bytes], list[int]] = {}

    def number(self, data: np.ndarray) -> int:
        """The number of the buffer holding exactly these bytes, adding one if none does."""
        length = data.nbytes
        if length in self.unhashed:
            first = self.unhashed.pop(length)
            self.by_hash[(length, _digest(self.data[first - 1]))] = [first]
            self.hashed_lengths.add(length)
        key = (length, _digest(data)) if length in self.hashed_lengths else None
        for index in self.by_hash.get(key, ()):
            if _same_bytes(data, self.data[index - 1]):
                return index
        self.data.append(data)
        index = len(self.data)
        if key is None:
            self.unhashed[length] = index
        else:
            self.by_hash.setdefault(key, []).append(index)
        return index


def stored_bytes(model: Model) -> int:
    """The bytes of the model's constant data as the file stores it: a weight shared by several
    tensors (equal bytes: an unrolled LSTM's per-step copies) counts once."""
    buffers = DistinctBuffers()
    for graph in [model] + model.subgraphs():
        for array in graph.arrays.values():
            if array.is_constant and array.data.size:
                buffers.number(_storable(array.data))
    return sum(data.nbytes for data in buffers.data)


class _Writer:
    def __init__(self, model: Model, description: str, release_data: bool):
        self.model = model  # the subgraph being written (the main one, but while writing others)
        self.main = model
        self.graphs = [model] + model.subgraphs()
        self.graph_number = {id(graph): k for k, graph in enumerate(self.graphs)}
        # "main", or the control-flow op's source node and the body's role ("If_3 then").
        self.graph_name = {id(model): "main"}
        for graph in self.graphs:
            for op in graph.operators if len(self.graphs) > 1 else ():
                for field, body in op.subgraphs.items():
                    self.graph_name[id(body)] = f"{op.source} {field.removesuffix('_subgraph_index')}"
        self.description = description
        self.release_data = release_data
        self.tensor_index: dict[str, int] = {}  # of the subgraph being written
        self.tensor_indices: list[dict[str, int]] = []  # of each subgraph
        self.buffer_ofs: list[dict[str, int]] = []  # each subgraph's constants' buffers
        self.buffer_readers: dict[int, list[tuple[Model, str]]] = {}
        self.buffer_of: dict[str, int] = {}
        self.buffers = DistinctBuffers()
        self.buffer_data = self.buffers.data  # index i+1 in the file's buffer list
        self.opcode_index: dict[tuple[str, int], int] = {}  # (op type, version) -> code index
        self.op_code: list[list[int]] = []  # each operator's code index, per subgraph
        # Written once, referred to by every tensor that has them: per-channel zero points (all
        # 0, int64 by the schema) would otherwise take 8 bytes per channel per tensor.
        self.shared: dict[tuple, int] = {}

    def number_everything(self) -> None:
        for model in self.graphs:
            tensor_index: dict[str, int] = {}
            self.tensor_indices.append(tensor_index)
            buffer_of = self.buffer_of if model is self.main else {}
            self.buffer_ofs.append(buffer_of)
            order = list(model.inputs)
            for op in model.operators:
                order.extend(n for n in op.inputs if n)
                order.extend(op.outputs)
            order.extend(model.outputs)
            for name in order:
                if name in tensor_index:
                    continue
                tensor_index[name] = len(tensor_index)
                array = model.arrays[name]
                if array.is_constant and array.data.size:
                    buffer_of[name] = self.buffers.number(_storable(array.data))
                    self.buffer_readers.setdefault(buffer_of[name], []).append((model, name))
            codes = []
            for op in model.operators:
                key = (op.type, TFLITE_OPS[op.type].version(op, model))
                codes.append(self.opcode_index.setdefault(key, len(self.opcode_index)))
            self.op_code.append(codes)
        self.tensor_index = self.tensor_indices[0]

    def _enter(self, number: int) -> None:
        """Makes subgraph `number` the one the table builders below read."""
        self.model = self.graphs[number]
        self.tensor_index = self.tensor_indices[number]
        self.buffer_of = self.buffer_ofs[number]

    def build(self) -> Flatbuffer:
        """The whole model as one Flatbuffer: the constant data, the buffers, the io-layout
        metadata, every subgraph, the operator codes and the signature."""
        self.number_everything()
        b = self._presized_builder()
        # Data first: it ends up at the end of the file, as TensorFlow's converter lays it out.
        data_vectors, holes = self._data_vectors(b)
        layout = self._io_layout()
        if layout is not None:
            data_vectors.append(self._reserve(b, len(layout), layout))
        buffers = []
        for vec in [None] + data_vectors:
            S.BufferStart(b)
            if vec is not None:
                S.BufferAddData(b, vec)
            buffers.append(S.BufferEnd(b))
        metadata = None
        if layout is not None:
            name = b.CreateString(IO_LAYOUT_METADATA)
            metadata = self._vector(b, "ModelStartMetadataVector", [self._table(
                b, "Metadata", [("Name", name), ("Buffer", len(buffers) - 1)])])
        subgraphs = []
        for number, graph in enumerate(self.graphs):
            self._enter(number)
            tensors = [self._tensor(b, name) for name in self.tensor_index]
            operators = [self._operator(b, op, code)
                         for op, code in zip(graph.operators, self.op_code[number])]
            subgraphs.append(self._subgraph(b, tensors, operators, self.graph_name[id(graph)]))
        self._enter(0)
        codes = [self._opcode(b, op_type, version) for (op_type, version) in self.opcode_index]
        signature = self._signature(b)
        description = b.CreateString(self.description)
        model = self._table(b, "Model", [
            ("Version", 3),
            ("OperatorCodes", self._vector(b, "ModelStartOperatorCodesVector", codes)),
            ("Subgraphs", self._vector(b, "ModelStartSubgraphsVector", subgraphs)),
            ("Description", description),
            ("Buffers", self._vector(b, "ModelStartBuffersVector", buffers)),
            ("SignatureDefs", self._vector(b, "ModelStartSignatureDefsVector", [signature])),
            ("Metadata", metadata),
        ])
        b.Finish(model, file_identifier=b"TFL3")
        # A vector's offset counts from the end of the buffer; its data follows its 4-byte length.
        end = len(b.Bytes)
        holes = [(end - vector + 4, data) for vector, data in holes]
        return Flatbuffer(b.Bytes, b.Head(), holes, self.release_data)

    def _presized_builder(self) -> flatbuffers.Builder:
        """A Builder over a buffer large enough for the whole model, so that it never grows
        (growing copies everything); sized from the data, the scales, the tensors and the ops."""
        data_size = sum(v.nbytes + DATA_ALIGNMENT + 8 for v in self.buffer_data)
        quant_size = sum(12 * np.size(a.quant.scale) for g in self.graphs for a in g.arrays.values()
                         if a.quant)
        size = (data_size + quant_size + 65536
                + sum(1024 * len(index) for index in self.tensor_indices)
                + sum(1024 * len(codes) for codes in self.op_code))
        b = flatbuffers.Builder(0)
        # An anonymous mapping: its pages take memory only once written, and the data's pages
        # never are (see _reserve).
        b.Bytes = memoryview(mmap.mmap(-1, size))
        b.head = size
        return b

    def _data_vectors(self, b: flatbuffers.Builder) -> tuple[list[int], list[tuple[int, np.ndarray]]]:
        """(one reserved vector per constant buffer, (vector, data) holes that Flatbuffer fills
        when written out); with release_data, the model's references to the data are dropped."""
        data_vectors, holes = [], []
        for k, data in enumerate(self.buffer_data):
            vector = self._reserve(b, data.nbytes)
            data_vectors.append(vector)
            holes.append((vector, data))
            if self.release_data:
                # The Flatbuffer holds the data now, until it is written out: drop every other
                # reference to it, so that each array goes as soon as it is in the file.
                self.buffer_data[k] = None
                for graph, name in self.buffer_readers[k + 1]:
                    graph.arrays[name].data = None
        return data_vectors, holes

    # --- pieces -------------------------------------------------------------------------------
    def _io_layout(self) -> bytes | None:
        """The permuted graph inputs and outputs as JSON {"inputs": {name: ONNX axes in the
        file's order}, "outputs": {...}}, which a later run reads to pair the file's inputs and
        outputs with the ONNX model's (qconvert.check.runtimes); None when nothing is permuted.
        Only that: the file goes to devices. What the conversion's diagnostics need (the equalized
        channels' scales) goes to its report (check/report.py's ConversionNotes)."""
        model = self.model
        perms = model.io_permutation
        if not any(name in perms for name in model.inputs + model.outputs):
            return None
        layout = {kind: {n: list(perms[n]) for n in names if n in perms}
                  for kind, names in (("inputs", model.inputs), ("outputs", model.outputs))}
        return json.dumps(layout, sort_keys=True).encode()

    @staticmethod
    def _reserve(b: flatbuffers.Builder, size: int, content: bytes | None = None) -> int:
        """Makes room for `size` bytes of data in the builder, 16-byte aligned in the file, and
        writes `content` there if given (else Flatbuffer.write_to writes the data); returns the
        vector's offset."""
        b.StartVector(1, size, DATA_ALIGNMENT)
        b.head = b.head - size
        if content is not None:
            b.Bytes[b.head:b.head + size] = content
        return b.EndVector()

    @staticmethod
    def _vector(b: flatbuffers.Builder, start: str, offsets: list[int]) -> int:
        getattr(S, start)(b, len(offsets))
        for off in reversed(offsets):
            b.PrependUOffsetTRelative(off)
        return b.EndVector()

    @staticmethod
    def _ints(b: flatbuffers.Builder, values, dtype=np.int32) -> int:
        return b.CreateNumpyVector(np.asarray(values, dtype=dtype).reshape(-1))

    @staticmethod
    def _table(b: flatbuffers.Builder, table: str, fields: list[tuple[str, object]]) -> int:
        getattr(S, table + "Start")(b)
        for field, value in fields:
            if value is not None:
                getattr(S, f"{table}Add{field}")(b, value)
        return getattr(S, table + "End")(b)

    def _tensor(self, b: flatbuffers.Builder, name: str) -> int:
        array = self.model.arrays[name]
        quant = None
        if array.quant is not None:
            quant = self._quantization(b, array)
        shape = self._ints(b, array.shape)
        signature = None
        batch = self.model.dynamic_batch if self.model is self.main else None
        axes = set(self.model.dynamic_axes.get(name, ())) if self.model is self.main else set()
        if batch is not None and name in batch.tensors:
            axes.add(0)
        if axes:
            # TensorFlow's converter marks a dynamic dimension so: -1 where the shape has its
            # current size. LiteRT's resize_tensor_input may then change it (dynamic_batch.py,
            # dynamic_dims.py).
            signature = self._ints(b, tuple(-1 if k in axes else d for k, d in enumerate(array.shape)))
        name_off = b.CreateString(name)
        return self._table(b, "Tensor", [
            ("Shape", shape),
            ("ShapeSignature", signature),
            ("Type", tensor_type(array.dtype, f"tensor {name!r}")),
            ("Buffer", self.buffer_of.get(name, 0)),
            ("Name", name_off),
            ("Quantization", quant),
            ("IsVariable", True if array.is_variable else None),
            ("HasRank", True),
        ])

    def _shared_ints(self, b: flatbuffers.Builder, values, dtype) -> int:
        values = np.asarray(values, dtype=dtype).reshape(-1)
        key = (values.dtype.str, values.tobytes())
        if key not in self.shared:
            self.shared[key] = b.CreateNumpyVector(values)
        return self.shared[key]

    def _quantization(self, b: flatbuffers.Builder, array) -> int:
        # Only scale and zero point: the calibrated min/max are the converter's working data.
        # Identical tables (tensors sharing params through same-scale ops) are written once.
        q = array.quant
        scale = self._shared_ints(b, q.scale, np.float32)
        zero_point = self._shared_ints(b, q.zero_point, np.int64)
        key = ("table", scale, zero_point, q.axis or 0)
        if key not in self.shared:
            self.shared[key] = self._table(b, "QuantizationParameters", [
                ("Scale", scale), ("ZeroPoint", zero_point), ("QuantizedDimension", q.axis or None)])
        return self.shared[key]

    def _operator(self, b: flatbuffers.Builder, op, code: int) -> int:
        options = _options_object(op, self.graph_number)
        options_off = options.Pack(b) if options is not None else None
        inputs = self._ints(b, [self.tensor_index[n] if n else -1 for n in op.inputs])
        outputs = self._ints(b, [self.tensor_index[n] for n in op.outputs])
        return self._table(b, "Operator", [
            ("OpcodeIndex", code),
            ("Inputs", inputs),
            ("Outputs", outputs),
            ("BuiltinOptionsType",
             getattr(S.BuiltinOptions, TFLITE_OPS[op.type].options) if options is not None else None),
            ("BuiltinOptions", options_off),
        ])

    def _subgraph(self, b: flatbuffers.Builder, tensors: list[int], operators: list[int],
                  name: str) -> int:
        return self._table(b, "SubGraph", [
            ("Tensors", self._vector(b, "SubGraphStartTensorsVector", tensors)),
            ("Inputs", self._ints(b, [self.tensor_index[n] for n in self.model.inputs])),
            ("Outputs", self._ints(b, [self.tensor_index[n] for n in self.model.outputs])),
            ("Operators", self._vector(b, "SubGraphStartOperatorsVector", operators)),
            ("Name", b.CreateString(name)),
        ])

    @staticmethod
    def _opcode(b: flatbuffers.Builder, op_type: str, version: int) -> int:
        code = getattr(S.BuiltinOperator, op_type)
        # Runtimes before the int32 builtin_code field read only the byte; 127 means "look further".
        return _Writer._table(b, "OperatorCode", [
            ("DeprecatedBuiltinCode", min(code, S.BuiltinOperator.PLACEHOLDER_FOR_GREATER_OP_CODES)),
            ("Version", version),
            ("BuiltinCode", code),
        ])

    def _signature(self, b: flatbuffers.Builder) -> int:
        def tensor_maps(names: list[str], start: str) -> int:
            maps = []
            for name in names:
                name_off = b.CreateString(name)
                maps.append(self._table(b, "TensorMap", [
                    ("Name", name_off), ("TensorIndex", self.tensor_index[name])]))
            return self._vector(b, start, maps)

        inputs = tensor_maps(self.main.inputs, "SignatureDefStartInputsVector")
        outputs = tensor_maps(self.main.outputs, "SignatureDefStartOutputsVector")
        key = b.CreateString(SIGNATURE_KEY)
        return self._table(b, "SignatureDef", [
            ("Inputs", inputs), ("Outputs", outputs), ("SignatureKey", key), ("SubgraphIndex", 0)])


class Flatbuffer:
    """A serialized model: the builder's bytes, in which each constant's data still sits in its
    numpy array (`holes`: position in the builder's bytes, array). write_to writes the file with
    every array in its place; bytes() gives it in one piece. So the weights are never in memory
    twice, and with release_data each array goes as soon as it is written."""

    def __init__(self, builder_bytes: memoryview, head: int, holes: list, release_data: bool):
        self._bytes, self._head = builder_bytes, head
        self._holes = sorted(holes, key=lambda hole: hole[0])  # in file order
        self._release_data = release_data

    def __len__(self) -> int:
        return len(self._bytes) - self._head

    def write_to(self, f) -> None:
        """Writes the model to the binary file object `f`, once if made with release_data."""
        if self._holes is None:
            raise RuntimeError("the model's data was released when it was written")
        cursor = self._head
        for k, (position, data) in enumerate(self._holes):
            f.write(self._bytes[cursor:position])
            f.write(_bytes_of(data))
            cursor = position + data.nbytes
            if self._release_data:
                self._holes[k] = (position, None)
                del data
        f.write(self._bytes[cursor:])
        if self._release_data:
            self._holes = None

    def __bytes__(self) -> bytes:
        out = io.BytesIO()
        self.write_to(out)
        return out.getvalue()


def serialize(model: Model, description: str, release_data: bool = False) -> Flatbuffer:
    """`model` as a TFLite flatbuffer (see Flatbuffer).

    With release_data, each constant's data is dropped from the model (which keeps its structure
    but no longer its weights) and from the Flatbuffer once written out."""
    return _Writer(model, description, release_data).build()
