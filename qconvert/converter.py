"""The conversion driver: load ONNX, run the pipeline, write the flatbuffer, report."""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from . import __version__
from .dynamic_batch import mark_batch_tensors, note
from .errors import ConversionError, UsageError
from .ir import Model
from .loader import load, nodes_matching
from .onnx_file import read_complete_onnx, read_onnx
from .qdq.importer import apply_qdq_ranges, changed_params, has_qdq, strip_qdq, with_model_precision
from .quantize.calibration_methods import MINMAX, CalibrationMethod
from .quantize.planner import Plan
from .report import ConversionNotes
from .tflite.writer import Flatbuffer, serialize, stored_bytes
from .transforms.keep_requested_float import KEPT_FLOAT
from .transforms.pipeline import (
    QuantizeOptions,
    run_pipeline,
    run_quantize_pipeline,
    run_weight_pipeline,
)
from .verify import Verification, json_number

log = logging.getLogger("qconvert")


@dataclass
class TensorInfo:
    name: str
    shape: list[int]
    dtype: str
    layout_permutation: list[int] | None  # axes of the ONNX tensor, in the TFLite tensor's order


@dataclass
class FloatOp:
    op: str
    node: str
    reason: str


@dataclass
class QuantizationReport:
    io_type: str
    calibration_samples: int  # 0 with --default-range only
    calibration_method: str  # how calibration turned values into ranges (--calibration-method)
    calibration_seconds: float
    int8_ops: int  # ops running an int8 kernel (QUANTIZE/DEQUANTIZE not counted)
    int16_ops: int  # ops running a 16x8 kernel (int16 activations)
    float_ops: list[FloatOp]  # ops on float tensors that stayed float, and why
    weights_bytes_float: int  # constant data before quantization
    weights_bytes: int  # constant data after
    plan: Plan | None = None  # --target-sqnr: the precision planner's rounds and promotions
    qdq_tensors: int = 0  # activations whose range the model's QuantizeLinear/DequantizeLinear gave


@dataclass
class WeightsReport:
    mode: str  # "int8" (--weight-only) or "float16"
    tensors: list[str]  # the constants stored as int8 or float16
    weights_bytes_float: int  # constant data before
    weights_bytes: int  # constant data after


@dataclass
class BatchReport:
    """A dynamic batch dimension set to 1 (qconvert/dynamic_batch.py)."""

    symbol: str  # its ONNX name; "" when unnamed
    size: int  # the batch the .tflite is written with: 1
    resizable: bool  # shape_signature -1: LiteRT's resize_tensor_input may change it
    note: str  # the summary's words, with the reason when it is not resizable


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
    quantization: QuantizationReport | None = None
    weights: WeightsReport | None = None
    verify: Verification | None = None  # set by the caller that verified the written file
    batch: BatchReport | None = None  # the model's dynamic batch, set to 1
    notes: ConversionNotes | None = field(default=None, repr=False)  # for the per-tensor report

    def as_dict(self) -> dict:
        result = asdict(self)
        result["verify"] = self.verify.as_dict() if self.verify is not None else None
        if result["quantization"] and result["quantization"]["plan"]:
            for round_ in result["quantization"]["plan"]["rounds"]:
                round_["worst_sqnr_db"] = json_number(round_["worst_sqnr_db"])
        del result["notes"]
        return result

    def summary(self) -> str:
        text = (f"qconvert: {self.input} -> {self.output}: {self.ops} ops, "
                f"{_human_size(self.size_bytes)}, {self.seconds:.2f} s")
        q = self.quantization
        if q is not None:
            text += f"; int8: {q.int8_ops} ops"
            if q.int16_ops:
                text += f", int16: {q.int16_ops} ops"
            if q.qdq_tensors:
                text += f", ranges of {q.qdq_tensors} tensors from the model's QDQ pairs"
            text += f", weights {_human_size(q.weights_bytes_float)} -> {_human_size(q.weights_bytes)}"
            if q.plan is not None:
                text += "; " + q.plan.summary()
            if q.float_ops:
                kinds = collections.Counter(f.op for f in q.float_ops)
                text += "; stayed float: " + ", ".join(
                    f"{n} {op}" if n > 1 else op for op, n in sorted(kinds.items()))
        w = self.weights
        if w is not None:
            text += (f"; {w.mode} weights: {len(w.tensors)} tensors, {_human_size(w.weights_bytes_float)}"
                     f" -> {_human_size(w.weights_bytes)}")
        if self.verify is not None:
            text += "; " + self.verify.summary()
        if self.batch is not None:
            text += "; " + self.batch.note
        return text


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
    """Runs the float transformation pipeline over a loaded model (in place) and returns it."""
    run_pipeline(model, io_layout=io_layout)
    return model


DESCRIPTION = f"qconvert {__version__}"


@dataclass(frozen=True)
class PlanRequest:
    """--target-sqnr: plan precision to `target_sqnr` dB on the first `samples` samples of the
    calibration-format file `data` (None: the calibration data)."""

    target_sqnr: float
    samples: int = 8
    data: str | None = None
    runtime: str = "cpu"  # --target: what a promoted op becomes (planner.PROMOTE_TO)


def conversion_notes(model: Model) -> ConversionNotes:
    """What the per-tensor report needs to know of the written model that the file does not say."""
    return ConversionNotes([op.source for op in model.operators],
                           [op.float_reason for op in model.operators],
                           {n: a.minmax.source for n, a in model.arrays.items() if a.minmax})


def _write_candidate(model: Model, path: str) -> None:
    """A plan's quantized model as a .tflite (its arrays keep their data)."""
    with open(path, "wb") as f:
        serialize(model, DESCRIPTION, release_data=False).write_to(f)


def _quantization_report(model: Model, options: QuantizeOptions, samples: int, seconds: float,
                         float_bytes: int, method: str) -> QuantizationReport:
    return QuantizationReport(
        io_type=options.io_type, calibration_samples=samples, calibration_method=method,
        calibration_seconds=round(seconds, 3),
        int8_ops=sum(op.quantized == "int8" for op in model.operators),
        int16_ops=sum(op.quantized == "int16" for op in model.operators),
        float_ops=[FloatOp(op.type, op.source, op.float_reason) for op in model.operators
                   if op.float_reason],
        weights_bytes_float=float_bytes, weights_bytes=stored_bytes(model))


def calibration_set(calibration: str | Mapping, proto, count: int | None):
    """The checked calibration samples for the ONNX model `proto` (the first `count`, all when
    None): `calibration` is a path (an .npz or a directory, see quantize/calibration_data.py) or
    a mapping {input name: array} laid out like an .npz's arrays (the Python API)."""
    from .quantize.calibration_data import calibration_from_arrays, load_calibration, model_input_specs

    if isinstance(calibration, Mapping):
        return calibration_from_arrays(calibration, model_input_specs(proto), count)
    return load_calibration(calibration, model_input_specs(proto), count)


@dataclass
class BuiltModel:
    """The transformed IR model of a conversion, with what the report says of its quantization
    or its stored weights, and when the conversion started."""

    model: Model
    quantization: QuantizationReport | None
    weights: WeightsReport | None
    start: float
    options: QuantizeOptions | None = None  # the quantize options in effect (--keep-float resolved)


def convert(source: str, *, data: bytes | None = None, input_shapes: dict | None = None,
            io_layout: str = "nhwc", output_name: str = "", quantize: QuantizeOptions | None = None,
            calibration: str | Mapping | None = None, calibration_samples: int | None = None,
            calibration_method: CalibrationMethod = MINMAX,
            progress: bool = False, weights: str | None = None,
            weight_only_min_elements: int = 1024,
            keep_float: tuple[str, ...] = (), plan: PlanRequest | None = None,
            ) -> tuple[Flatbuffer, ConversionReport]:
    """Converts the ONNX file `source` (or `data`, the bytes of one) to a TFLite flatbuffer, which
    `.write_to(file)` writes out (once: the weights go as they are written) and bytes() gives.

    With `quantize`, the model is calibrated on the data at `calibration` (or in it: see
    calibration_set) (its first
    `calibration_samples` samples, their ranges by `calibration_method`) unless
    quantize.default_range stands in for it, and written
    as int8, but for the ops of the nodes `keep_float` patterns pick (loader.nodes_matching). With
    `weights` ("int8": --weight-only, "float16": --float16) only the stored weights change (int8
    from `weight_only_min_elements` elements up). With `plan` (and `quantize` with calibration),
    the precision planner chooses which ops stay float (quantize/planner.py)."""
    built = build(source, data=data, input_shapes=input_shapes, io_layout=io_layout,
                  quantize=quantize, calibration=calibration, calibration_samples=calibration_samples,
                  calibration_method=calibration_method, progress=progress, weights=weights,
                  weight_only_min_elements=weight_only_min_elements, keep_float=keep_float, plan=plan)
    model, start = built.model, built.start
    notes = conversion_notes(model)
    mark_batch_tensors(model)
    batch = model.dynamic_batch
    flatbuffer = serialize(model, DESCRIPTION, release_data=True)
    counts = collections.Counter(op.type for op in model.operators)
    report = ConversionReport(
        input=source, output=output_name, ops=len(model.operators),
        op_counts=dict(sorted(counts.items())), transposes=counts.get("TRANSPOSE", 0),
        size_bytes=len(flatbuffer), seconds=round(time.perf_counter() - start, 3),
        inputs=_tensor_infos(model, model.inputs), outputs=_tensor_infos(model, model.outputs),
        quantization=built.quantization, weights=built.weights, notes=notes,
        batch=None if batch is None else BatchReport(batch.symbol, 1, bool(batch.tensors), note(batch)))
    return flatbuffer, report


def build(source: str, *, data: bytes | None = None, input_shapes: dict | None = None,
          io_layout: str = "nhwc", quantize: QuantizeOptions | None = None,
          calibration: str | Mapping | None = None, calibration_samples: int | None = None,
          calibration_method: CalibrationMethod = MINMAX, progress: bool = False,
          weights: str | None = None, weight_only_min_elements: int = 1024,
          keep_float: tuple[str, ...] = (), plan: PlanRequest | None = None,
          before_quantizing: Callable[[Model], None] | None = None) -> BuiltModel:
    """convert's first part: the model loaded, calibrated and transformed, ready to write (see
    convert for the arguments). `before_quantizing` sees the float-transformed model just before
    the quantize steps (or the precision planner) run (fakequant keeps its float weights)."""
    start = time.perf_counter()
    onnx_file = read_onnx(source, data)
    qdq = None
    if has_qdq(onnx_file.proto):  # ranges from the model's Q/DQ pairs (qdq/importer.py)
        onnx_file.restore_weights()
        qdq = strip_qdq(onnx_file.proto, clip=quantize is None)
    if (quantize is not None and calibration is None and quantize.default_range is None
            and not (qdq and qdq.activations)):
        raise UsageError("--quantize needs --calibration PATH (or --default-range MIN,MAX for a "
                         "speed study without data), unless the model carries its ranges in "
                         "QuantizeLinear/DequantizeLinear pairs")
    if quantize is not None and qdq:
        quantize = with_model_precision(quantize, qdq)
    if keep_float:
        quantize = replace(quantize, keep_float=dict.fromkeys(
            nodes_matching(onnx_file.proto, keep_float), KEPT_FLOAT))
    samples = run = None
    calibration_seconds = 0.0  # reading the data, making the session, running it
    if quantize is not None and calibration is not None:
        from .quantize.calibrate import CalibrationRun

        started = time.perf_counter()
        samples = calibration_set(calibration, onnx_file.proto, calibration_samples)
        onnx_file.restore_weights()  # onnxruntime needs the whole model
        run = CalibrationRun(onnx_file.proto, "all")  # before load(), which frees the ONNX weights
        calibration_seconds += time.perf_counter() - started
    model = load(onnx_file, input_shapes)
    del onnx_file
    if run is not None:
        from .quantize.calibrate import calibrate_model

        started = time.perf_counter()
        calibrate_model(model, run, samples, progress, calibration_method)
        calibration_seconds += time.perf_counter() - started
        del run
    qdq_tensors = 0
    if quantize is not None and qdq:
        qdq_tensors = apply_qdq_ranges(model, qdq)  # over calibration's: the model's own params win
    convert_model(model, io_layout)
    float_bytes = stored_bytes(model) if quantize is not None or weights is not None else 0
    quantization = weights_report = precision_plan = None
    if quantize is not None and before_quantizing is not None:
        before_quantizing(model)
    if quantize is not None and plan is not None and calibration is not None:
        from .quantize.planner import plan_precision

        reference = read_complete_onnx(source, data)  # onnxruntime's model
        checks = list(calibration_set(plan.data or calibration, reference, plan.samples))
        model, precision_plan = plan_precision(model, quantize, reference, checks,
                                               plan.target_sqnr, _write_candidate, conversion_notes,
                                               plan.runtime)
        del reference
    elif quantize is not None:
        run_quantize_pipeline(model, quantize)
    if quantize is not None and qdq:
        for warning in qdq.warnings + changed_params(model, qdq):
            log.warning("warning: %s", warning)
    if quantize is not None:
        quantization = _quantization_report(model, quantize, len(samples) if samples else 0,
                                            calibration_seconds, float_bytes,
                                            str(calibration_method) if samples else "")
        quantization.plan = precision_plan
        quantization.qdq_tensors = qdq_tensors
    if weights is not None:
        floats = {n for n, a in model.arrays.items() if a.is_constant and a.dtype.kind == "f"}
        run_weight_pipeline(model, weights, weight_only_min_elements)
        stored = np.dtype(np.int8) if weights == "int8" else np.dtype(np.float16)
        weights_report = WeightsReport(
            weights, sorted(n for n in floats if n in model.arrays and model.arrays[n].dtype == stored),
            float_bytes, stored_bytes(model))
    return BuiltModel(model, quantization, weights_report, start, quantize)


@dataclass
class FakeQuantReport:
    """What `qconvert fakequant` wrote (qdq/fakequant.py)."""

    input: str
    output: str
    activations: list[str]  # ONNX tensors with a Q -> DQ pair
    weights: list[str]  # initializers stored int8 + DequantizeLinear
    biases: list[str]  # initializers stored int32 + DequantizeLinear
    float_weights: list[str]  # nodes whose int8 weight the graph holds float (see fakequant.py)
    ranges_in_metadata: list[str]  # tensors whose range no pair carries (qdq/fakequant.py): metadata
    quantization: QuantizationReport
    size_bytes: int
    seconds: float

    def as_dict(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        text = (f"qconvert: {self.input} -> {self.output}: fake-quant pairs on {len(self.activations)} "
                f"tensors, {len(self.weights)} weights int8, {len(self.biases)} biases int32, "
                f"{_human_size(self.size_bytes)}, {self.seconds:.2f} s")
        if self.float_weights:
            text += f"; {len(self.float_weights)} weights held float (folded across their inputs)"
        if self.ranges_in_metadata:
            text += f"; {len(self.ranges_in_metadata)} ranges in the model's metadata"
        if self.quantization.float_ops:
            text += f"; {len(self.quantization.float_ops)} ops stay float"
        return text


def fake_quant(source: str, *, quantize: QuantizeOptions, data: bytes | None = None,
               output_name: str = "", **arguments) -> tuple[bytes, FakeQuantReport]:
    """`qconvert fakequant`: the ONNX model `source` with QuantizeLinear/DequantizeLinear pairs
    where its int8 conversion (convert's `arguments`, with `quantize`) quantizes, holding the
    params that conversion chooses (qdq/fakequant.py). Returns the model's bytes."""
    from .qdq.fakequant import (
        INT16_OPSET,
        PER_AXIS_OPSET,
        FloatWeights,
        Precision,
        insert_fake_quant,
        with_opset,
    )

    float_weights = FloatWeights()
    built = build(source, data=data, quantize=quantize, before_quantizing=float_weights, **arguments)
    proto = read_complete_onnx(source, data)
    if has_qdq(proto):  # the model's own pairs give way to the conversion's
        strip_qdq(proto)
    proto = with_opset(proto, INT16_OPSET if built.quantization.int16_ops else PER_AXIS_OPSET)
    options, plan = built.options, built.quantization.plan
    promoted = {p.node: p.reason for p in plan.promotions} if plan is not None else {}
    to_int16 = plan is not None and plan.promoted_to == "int16"
    precision = Precision(  # what no pair says: the ops kept float or promoted, by ONNX node
        float_nodes={**options.keep_float, **({} if to_int16 else promoted)},
        int16_nodes={**options.int16_nodes, **(promoted if to_int16 else {})},
        activations=options.activations)
    graph = insert_fake_quant(proto, built.model, float_weights, precision)
    try:
        written = proto.SerializeToString()
    except ValueError as e:  # protobuf's 2 GiB limit (weights written as external data: not yet)
        raise ConversionError(f"the fake-quant model cannot be written as one protobuf: {e}") from None
    report = FakeQuantReport(
        input=source, output=output_name, activations=graph.activations, weights=graph.weights,
        biases=graph.biases, float_weights=graph.float_weights, ranges_in_metadata=graph.ranges_in_metadata,
        quantization=built.quantization, size_bytes=len(written),
        seconds=round(time.perf_counter() - built.start, 3))
    return written, report
