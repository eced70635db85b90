"""Reading an ONNX file without holding its weights twice.

Parsing a whole .onnx file with protobuf needs the file's bytes and the parsed message at once,
both as large as the weights, and protobuf does not give the memory of a parsed tensor back when
its data is cleared. So read_onnx walks the file's protobuf wire format first (through a memory
map, touching only the field headers), parses a copy of the model without the raw data of the
top-level graph's big initializers, and remembers where each one's bytes lie in the file
(`OnnxFile.stored`). The loader reads them straight into numpy arrays, one at a time; what needs a
complete ModelProto (onnxruntime for calibration, onnx's version converter) calls
`restore_weights()` first.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass, field

import numpy as np
import onnx
from google.protobuf.message import DecodeError

from ..errors import MODEL_BYTES, ConversionError

# Initializers with fewer raw bytes than this stay in the parsed message.
STORED_MIN_BYTES = 4096
# Field numbers of onnx.proto3: ModelProto.graph, GraphProto.initializer, TensorProto.name and
# TensorProto.raw_data.
_MODEL_GRAPH, _GRAPH_INITIALIZER, _TENSOR_NAME, _TENSOR_RAW_DATA = 7, 5, 8, 9
_LENGTH_DELIMITED = 2


@dataclass
class StoredTensor:
    """Where an initializer's raw (little-endian) bytes lie in a file."""

    path: str
    offset: int
    length: int


@dataclass
class OnnxFile:
    """A parsed model whose initializers named in `stored` have no data in `proto`."""

    proto: onnx.ModelProto
    stored: dict[str, StoredTensor] = field(default_factory=dict)
    checked: bool = False  # validate.check_model passed (read_onnx checks what it reads)

    def read_stored(self, tensor: onnx.TensorProto, dtype: np.dtype) -> np.ndarray:
        """The initializer's data, read from the file into a new array of `dtype`."""
        where = self.stored[tensor.name]
        array = np.empty(where.length // dtype.itemsize, dtype=dtype)
        try:
            with open(where.path, "rb") as f:
                f.seek(where.offset)
                count = f.readinto(memoryview(array).cast("B"))
        except OSError as e:
            raise ConversionError(f"{where.path}: cannot read initializer {tensor.name!r}: "
                                  f"{e.strerror}") from None
        if count != where.length:
            raise ConversionError(f"{where.path}: changed while being read")
        return array.reshape(tuple(tensor.dims))

    def copy(self) -> OnnxFile:
        """Another OnnxFile of the same model: a copy of the parsed message (without the stored
        initializers' bytes, which stay in the file: a copy of a model read from bytes holds its
        weights a second time) that restore_weights completes on its own."""
        proto = onnx.ModelProto()
        proto.CopyFrom(self.proto)
        return OnnxFile(proto, dict(self.stored), self.checked)

    def restore_weights(self) -> None:
        """Puts the stored bytes back into `proto`, which is then a complete model."""
        tensors = {t.name: t for t in self.proto.graph.initializer if t.name in self.stored}
        for name, where in self.stored.items():
            with open(where.path, "rb") as f:
                f.seek(where.offset)
                tensors[name].raw_data = f.read(where.length)
        self.stored.clear()


def attribute(node: onnx.NodeProto, name: str, default=None):
    """The value of `node`'s attribute `name` (onnx's Python value), or `default`."""
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def read_onnx(path: str, data: bytes | None = None) -> OnnxFile:
    """Parses an ONNX file (or bytes read from stdin), loading external data; clear errors.

    From a regular file, big initializers' bytes stay in the file (see the module docstring).
    The model is checked (qconvert.onnx.validate) before anything else reads it: external data only
    from inside the model's folder, the file and its external data within MODEL_BYTES."""
    from .validate import check_external_data, check_model

    shown = "<stdin>" if data is not None else path
    stored: dict[str, StoredTensor] = {}
    try:
        proto = onnx.ModelProto()
        if data is None:
            with open(path, "rb") as f:
                try:
                    view = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                except (ValueError, OSError):  # empty, or not a regular file (a FIFO)
                    view = None
                    data = MODEL_BYTES.read(f, shown)
            if view is not None:
                file_bytes = len(view)
                with view:
                    MODEL_BYTES.check(file_bytes, shown)
                    message, segments = _without_raw_data(view)
                proto.ParseFromString(message)
                where = os.path.abspath(path)
                stored = {name: StoredTensor(where, offset, length) for name, offset, length in segments}
        if data is not None:
            file_bytes = len(data)
            MODEL_BYTES.check(file_bytes, shown)
            proto.ParseFromString(data)
            del data  # the file's bytes: as large as the weights
    except FileNotFoundError:
        raise ConversionError(f"{shown}: no such file") from None
    except IsADirectoryError:
        raise ConversionError(f"{shown}: is a directory, not an ONNX file") from None
    except PermissionError:
        raise ConversionError(f"{shown}: permission denied") from None
    except OSError as e:
        raise ConversionError(f"{shown}: cannot read: {e.strerror or e}") from None
    except (DecodeError, RuntimeError, ValueError) as e:
        raise ConversionError(f"{shown}: not a valid ONNX file (truncated or corrupt: {e})") from None
    if not proto.ir_version or not proto.graph.node and not proto.graph.output:
        raise ConversionError(f"{shown}: not an ONNX model (no IR version or empty graph)")
    base_dir = os.getcwd() if path == "-" else os.path.dirname(os.path.abspath(path))
    external_bytes = check_external_data(proto, base_dir)
    MODEL_BYTES.check(file_bytes + external_bytes, f"{shown} with its external data")
    try:
        onnx.external_data_helper.load_external_data_for_model(proto, base_dir)
    except (OSError, ValueError) as e:
        raise ConversionError(f"{shown}: cannot read external data: {e}") from None
    check_model(proto, {name: where.length for name, where in stored.items()})
    return OnnxFile(proto, stored, checked=True)


# --- the protobuf wire format ------------------------------------------------------------------
def _varint(buf, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("a varint runs past the end")
        byte = buf[pos]
        value |= (byte & 0x7F) << shift
        pos += 1
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ValueError("a varint is too long")


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _fields(buf, start: int, end: int):
    """(field number, wire type, start of the field, start of its value, end) of each field of
    the message in buf[start:end]; the value of a length-delimited field starts after its
    length."""
    pos = start
    while pos < end:
        first = pos
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            _, stop = _varint(buf, pos)
        elif wire == 1:
            stop = pos + 8
        elif wire == _LENGTH_DELIMITED:
            length, pos = _varint(buf, pos)
            stop = pos + length
        elif wire == 5:
            stop = pos + 4
        else:
            raise ValueError(f"wire type {wire} of field {number}")
        if stop > end:
            raise ValueError(f"field {number} runs past the end of its message")
        yield number, wire, first, pos, stop
        pos = stop


def _rewritten(buf, start: int, end: int, number: int, rewrite) -> bytes:
    """The message in buf[start:end] with each length-delimited field `number` replaced by
    rewrite(value start, value end), or dropped where that is None; other fields as they are."""
    out = bytearray()
    for field_number, wire, first, value, stop in _fields(buf, start, end):
        if field_number != number or wire != _LENGTH_DELIMITED:
            out += buf[first:stop]
            continue
        content = rewrite(value, stop)
        if content is not None:
            out += _encode_varint(number << 3 | _LENGTH_DELIMITED) + _encode_varint(len(content))
            out += content
    return bytes(out)


def _without_raw_data(buf) -> tuple[bytes, list[tuple[str, int, int]]]:
    """The serialized model without the raw data of the top-level graph's initializers of at
    least STORED_MIN_BYTES, and (name, offset, length) of each of those raw data."""
    segments: list[tuple[str, int, int]] = []

    def tensor(start: int, end: int) -> bytes:
        raw = name = None
        for number, wire, _, value, stop in _fields(buf, start, end):
            if number == _TENSOR_RAW_DATA and wire == _LENGTH_DELIMITED:
                raw = (value, stop)
            elif number == _TENSOR_NAME and wire == _LENGTH_DELIMITED:
                name = bytes(buf[value:stop]).decode("utf-8", "replace")
        if raw is None or raw[1] - raw[0] < STORED_MIN_BYTES or name is None:
            return bytes(buf[start:end])
        segments.append((name, raw[0], raw[1] - raw[0]))
        return _rewritten(buf, start, end, _TENSOR_RAW_DATA, lambda value, stop: None)

    def graph(start: int, end: int) -> bytes:
        return _rewritten(buf, start, end, _GRAPH_INITIALIZER, tensor)

    message = _rewritten(buf, 0, len(buf), _MODEL_GRAPH, graph)
    names = [name for name, _, _ in segments]
    if len(set(names)) != len(names):  # two initializers of one name: leave them to protobuf
        return bytes(buf), []
    return message, segments
