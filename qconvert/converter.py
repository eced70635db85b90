"""The conversion driver: load ONNX, run the pipeline, write the flatbuffer, report."""

from __future__ import annotations

import collections
import time
from dataclasses import asdict, dataclass, field

from . import __version__
from .ir import Model
from .loader import load, read_onnx
from .tflite.writer import serialize
from .transforms.pipeline import run_pipeline


@dataclass
class TensorInfo:
    name: str
    shape: list[int]
    dtype: str
    layout_permutation: list[int] | None  # axes of the ONNX tensor, in the TFLite tensor's order


@dataclass
class ConversionReport:
    input: str
    output: str
    ops: int
    op_counts: dict[str, int]
    transposes: int
    size_bytes: int
    seconds: float
    inputs: list[TensorInfo] = field(default_factory=list)
    outputs: list[TensorInfo] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        return (f"qconvert: {self.input} -> {self.output}: {self.ops} ops, "
                f"{_human_size(self.size_bytes)}, {self.seconds:.2f} s")


def _human_size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def _tensor_infos(model: Model, names: list[str]) -> list[TensorInfo]:
    infos = []
    for name in names:
        array = model.arrays[name]
        perm = model.io_permutation.get(name)
        infos.append(TensorInfo(name, list(array.shape), str(array.dtype), list(perm) if perm else None))
    return infos


def convert_model(model: Model, io_layout: str = "nhwc") -> Model:
    """Runs the transformation pipeline over a loaded model (in place) and returns it."""
    run_pipeline(model, io_layout=io_layout)
    return model


def convert(source: str, *, data: bytes | None = None, input_shapes: dict | None = None,
            io_layout: str = "nhwc", output_name: str = "") -> tuple[memoryview, ConversionReport]:
    """Converts the ONNX file `source` (or `data`, the bytes of one) to TFLite flatbuffer bytes."""
    start = time.perf_counter()
    proto = read_onnx(source, data)
    model = load(proto, input_shapes)
    del proto
    convert_model(model, io_layout)
    flatbuffer = serialize(model, f"qconvert {__version__}", release_data=True)
    counts = collections.Counter(op.type for op in model.operators)
    report = ConversionReport(
        input=source, output=output_name, ops=len(model.operators),
        op_counts=dict(sorted(counts.items())), transposes=counts.get("TRANSPOSE", 0),
        size_bytes=len(flatbuffer), seconds=round(time.perf_counter() - start, 3),
        inputs=_tensor_infos(model, model.inputs), outputs=_tensor_infos(model, model.outputs))
    return flatbuffer, report
