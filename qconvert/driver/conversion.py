"""The conversion driver: a conversion is the stages in `convert`, read top to bottom, each a
function from one State to the next. The ONNX file is parsed once (read); what later needs the
model as onnxruntime runs it (verification, the precision planner, the fake-quant graph) gets a
copy taken then (State.reference), its weights put back from the file when needed.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import math
import os
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import numpy as np

from ..calibration.files import DataSource
from ..check.latency import Latency
from ..check.report import ConversionNotes
from ..check.verify import Verification
from ..errors import BelowThreshold, ConversionError, ReferenceFailed, UsageError, first_line
from ..ir import Model
from ..onnx.dynamic_batch import defaulted_inputs, mark_batch_tensors, note
from ..onnx import dynamic_dims
from ..onnx.dynamic_dims import has_symbols, symbols_of
from ..onnx.file import OnnxFile, read_onnx
from ..onnx.loader import load, nodes_matching, stores_float16
from ..onnx.runtime import has_qdq, quantizes_activations
from ..plan.planner import HYBRID
from ..qdq.importer import (
    QdqRanges,
    apply_qdq_ranges,
    changed_params,
    strip_qdq,
    unusable_pairs_bypassed,
    with_model_precision,
)
from ..targets import Target, cost
from ..targets import unsupported as target_unsupported
from ..tflite.writer import Flatbuffer, serialize, stored_bytes
from ..transforms.keep_requested_float import KEPT_FLOAT
from ..transforms.pipeline import (
    QuantizeOptions,
    run_equalization,
    run_pipeline,
    run_quantize_pipeline,
    run_weight_pipeline,
)
from ..version import __version__
from .dimensions import kept
from .files import replace_atomically
from .options import Options, VerifyOptions, WeightOptions
from .reports import (
    BatchReport,
    ConversionReport,
    DimensionReport,
    FakeQuantReport,
    FloatOp,
    QuantizationReport,
    TensorInfo,
    WeightsReport,
)

log = logging.getLogger("qconvert")

DESCRIPTION = f"qconvert {__version__}"
WARN_BELOW_DB = 20.0  # a verified quantized conversion below this warns (without --min-sqnr)
# A quantized model slower than its float model warns from this float time on (below it the
# interpreter's fixed costs of a few microseconds decide; the summary still shows the ratio).
SLOWER_WARNS_FROM_MS = 0.05
SHOWN_UNSUPPORTED = 6  # the ops a target cannot run, named in its error

# write(flatbuffer, finish): puts the model where it goes, calling finish(path of the complete
# file) before it appears there (finish verifies and may raise to keep it from appearing).
Finish = Callable[[str | None], ConversionReport]
Write = Callable[[Flatbuffer, Finish], None]


@dataclass(frozen=True)
class State:
    """A conversion between two stages."""

    source: str  # the ONNX file's path, or what stands for bytes ("<bytes>", "-")
    options: Options
    started: float
    onnx_file: OnnxFile | None = None  # the parsed model, until load has read it
    reference: OnnxFile | None = None  # the model as read, for onnxruntime (None: not needed)
    reads_file: bool = False  # onnxruntime may read `source` itself (a file, not bytes)
    progress: bool = False
    steps: QuantizeOptions | None = None  # the quantize pipeline's options in effect
    qdq: QdqRanges | None = None  # the model's own Q/DQ ranges (qdq/importer.py)
    samples: list | None = None  # the calibration samples
    calibration_run: object = None  # calibrate.CalibrationRun, made before load frees the weights
    calibration_seconds: float = 0.0
    model: Model | None = None
    float_bytes: int = 0  # the weights' bytes before they were quantized or stored smaller
    qdq_tensors: int = 0
    from_pairs: bool = False  # quantized by default: the model arrived with QDQ pairs (options.py)
    quantization: QuantizationReport | None = None
    weights: WeightsReport | None = None
    float_tflite: bytes | None = None  # the float model, timed next to the written one
    leading_dims: dict | None = None  # inputs whose dynamic axis 0 the loader set, and to what
    float16_weights: bool = False  # the ONNX weights are float16: stored as float16 again
    probe_source: OnnxFile | None = None  # the model as loaded, for its dynamic dims' probes


def convert(source: str, options: Options, *, data: bytes | None = None, output_name: str = "",
            progress: bool = False, write: Write | None = None) -> tuple[bytes | None, ConversionReport]:
    """Converts the ONNX file `source` (or `data`, the bytes of one) to a TFLite model as
    `options` ask, verified when they ask (a failed check raises BelowThreshold). `write` puts it
    where it goes (write_and_verify); without one the model's bytes are returned."""
    state = build(source, options, data=data, progress=progress)
    flatbuffer, report = serialize_model(state, output_name)
    return write_and_verify(state, flatbuffer, report, write)


def build(source: str, options: Options, *, data: bytes | None = None, progress: bool = False,
          before_quantizing: Callable[[Model], None] | None = None,
          reference: bool = False) -> State:
    """The stages up to the model ready to write. `before_quantizing` sees the float-transformed
    model just before the quantize steps (fakequant keeps its float weights); `reference` keeps
    a copy of the ONNX model as read even when nothing in `options` needs one."""
    state = read(source, data, options, progress, reference)
    state = import_qdq(state)
    state = start_calibration(state)
    state = load_model(state)
    state = calibrate(state)
    state = run_float_pipeline(state)
    state = keep_dimensions_dynamic(state)
    state = keep_float_model(state)
    state = measure_layer_inputs(state)
    if before_quantizing is not None and state.steps is not None:
        before_quantizing(state.model)
    state = quantize(state)
    state = store_weights(state)
    return state


# --- the stages ---------------------------------------------------------------------------------

def read(source: str, data: bytes | None, options: Options, progress: bool = False,
         reference: bool = False) -> State:
    """Parses the ONNX model (onnx/file.py), keeping a copy for onnxruntime when a later stage
    runs it (verification, planning, fakequant): the loader frees the weights it reads and the
    QDQ import strips the model's pairs."""
    started = time.perf_counter()
    onnx_file = read_onnx(source, data)
    needs_reference = reference or options.verify.enabled or options.plan is not None
    return State(source, options, started, onnx_file=onnx_file,
                 reference=onnx_file.copy() if needs_reference else None,
                 reads_file=data is None, progress=progress,
                 steps=options.quantize.steps if options.quantize is not None else None)


def import_qdq(state: State) -> State:
    """Takes the model's QuantizeLinear/DequantizeLinear pairs out (qdq/importer.py): their
    ranges and precision go into the quantize options; a float conversion keeps their clipping.
    Then the --keep-float patterns pick their nodes."""
    proto = state.onnx_file.proto
    arrived, paired = state.options.arrived_quantized, quantizes_activations(proto.graph)
    if state.steps is None and arrived is not None and paired:
        state = replace(state, options=arrived, steps=arrived.quantize.steps, from_pairs=True)
    steps, request = state.steps, state.options.quantize
    qdq = None
    if has_qdq(proto):
        state.onnx_file.restore_weights()
        if steps is not None and request.calibration is not None and state.reference is None and paired:
            state = replace(state, reference=state.onnx_file.copy())  # calibrated with its pairs
        qdq = strip_qdq(proto, clip=steps is None)
        if state.reference is not None:  # what the .tflite computes in float, the reference does
            unusable_pairs_bypassed(state.reference.proto)
    if (steps is not None and request.calibration is None and steps.default_range is None
            and not (qdq and qdq.activations)):
        raise UsageError("--quantize needs --calibration PATH (or --default-range MIN,MAX for a "
                         "speed study without data), unless the model carries its ranges in "
                         "QuantizeLinear/DequantizeLinear pairs")
    if steps is not None and qdq:
        steps = with_model_precision(steps, qdq)
    if request is not None and request.keep_float:
        steps = replace(steps, keep_float=dict.fromkeys(nodes_matching(proto, request.keep_float),
                                                        KEPT_FLOAT))
    return replace(state, qdq=qdq, steps=steps)


def start_calibration(state: State) -> State:
    """Reads the calibration samples and opens the onnxruntime session that will run them, while
    the ONNX model still holds its weights (load frees them)."""
    request = state.options.quantize
    if request is None or request.calibration is None:
        return state
    from ..calibration.calibrate import CalibrationRun

    started = time.perf_counter()
    samples = calibration_set(request.calibration, state.onnx_file.proto, request.samples,
                              state.options.input.decoding, state.progress)
    # A model with pairs on its activations is calibrated as it computes, pairs and all: the
    # tensors no pair covers see the values the pairs clip and round (without them a clipped
    # feature grew unclipped downstream: a normalization calibrated to 1e12, EfficientWord-Net's
    # QDQ model then wrote NaN).
    source = state.reference if state.qdq and state.qdq.activations else state.onnx_file
    source.restore_weights()  # onnxruntime needs the whole model
    run = CalibrationRun(source.proto, "all")
    return replace(state, samples=samples, calibration_run=run,
                   calibration_seconds=time.perf_counter() - started)


def load_model(state: State) -> State:
    """The IR model (onnx/loader.py); the parsed ONNX model goes, but for a copy when a
    dynamic dimension is to be probed at another size."""
    shapes = state.options.input.shapes
    probe_source = state.onnx_file.copy() if has_symbols(state.onnx_file.proto, shapes) else None
    model = load(state.onnx_file, shapes, sizes=_sample_sizes(state))
    inputs = [i for i in state.onnx_file.proto.graph.input if i.name in set(model.inputs)]
    return replace(state, onnx_file=None, model=model, probe_source=probe_source,
                   leading_dims=defaulted_inputs(inputs, state.options.input.shapes),
                   float16_weights=stores_float16(state.onnx_file.proto))


def calibrate(state: State) -> State:
    """Ranges for the IR's tensors from the calibration run, then the model's own Q/DQ ranges
    over them (the model's params win)."""
    if state.calibration_run is not None:
        from ..calibration.calibrate import calibrate_model

        started = time.perf_counter()
        calibrate_model(state.model, state.calibration_run, state.samples, state.progress,
                        state.options.quantize.method)
        state = replace(state, calibration_run=None,
                        calibration_seconds=state.calibration_seconds + time.perf_counter() - started)
    if state.steps is not None and state.qdq:
        state = replace(state, qdq_tensors=apply_qdq_ranges(state.model, state.qdq))
    return state


def run_float_pipeline(state: State) -> State:
    """The float transformations to their fixed point (transforms/pipeline.py)."""
    run_pipeline(state.model, io_layout=state.options.input.io_layout)
    stores_less = state.steps is not None or state.options.weights is not None
    return replace(state, float_bytes=stored_bytes(state.model) if stores_less else 0)


def _sample_sizes(state: State) -> dict[str, int]:
    """The sizes the calibration samples give the dynamic dimensions (dynamic_dims.py): the model
    is converted, and its int8 ranges measured, at the size of the user's data."""
    if not state.samples or state.onnx_file is None:
        return {}
    sample = next(iter(state.samples))
    proto = state.onnx_file.proto
    dims = symbols_of(proto, state.options.input.shapes)
    if dims is None:
        return {}
    return {symbol: int(np.shape(sample[name])[axis]) for name, axes in dims.inputs.items()
            if name in sample for axis, symbol in axes.items() if axis < np.ndim(sample[name])}


def keep_dimensions_dynamic(state: State) -> State:
    """Each dynamic dimension beyond the batch is probed: the model loaded and float-transformed
    again with that dimension alone at another size, then compared with the model, which keeps
    the dimensions the comparison allows resizable (onnx/dynamic_dims.py). A batch that leaves
    axis 0 (DynamicDims.add_batch) is tried first from the model at BATCH_BASE (at 1 a transpose
    of it is a reshape, and nothing compares); where it cannot stay resizable, or where it fixes a
    dimension the model at batch 1 keeps resizable (a text model's length matters more than its
    batch), the model at batch 1 is probed without it."""
    model, source = state.model, state.probe_source
    if source is None or model.dynamic_dims is None:
        return replace(state, probe_source=None)
    dims, at_base = model.dynamic_dims, None
    if dims.batch:
        based = dims.with_batch_at(dynamic_dims.BATCH_BASE)
        with contextlib.suppress(ConversionError):
            at_base = kept(state.options.input, None, based, source)
        if at_base is not None and at_base.dynamic_dims.batch in at_base.dynamic_dims.fixed_because:
            at_base = None
        if at_base is not None:
            at_base.dynamic_batch = model.dynamic_batch
            if not at_base.dynamic_dims.fixed_because:
                return replace(state, model=at_base, probe_source=None)
        dims.drop_batch()
    at_one = kept(state.options.input, model, dims, source)
    if at_base is not None and (set(at_base.dynamic_dims.fixed_because)
                                <= set(at_one.dynamic_dims.fixed_because)):
        at_one = at_base
    return replace(state, model=at_one, probe_source=None)


def keep_float_model(state: State) -> State:
    """The float model as a .tflite's bytes, when the written one is to be timed against it (a
    quantized or weight-stored conversion that verifies: check/latency.py)."""
    if not state.options.verify.latency or (state.steps is None and state.options.weights is None):
        return state
    return replace(state, float_tflite=bytes(serialize(state.model, DESCRIPTION, release_data=False)))


def measure_layer_inputs(state: State) -> State:
    """The inputs' moments of the weighted ops in the float model on the calibration samples
    (plan/layer_inputs.py); with them the channels between two weighted ops are equalized (a
    float rewrite, transforms/equalize_channel_ranges.py), and the quantize steps round weights
    for each op's output and correct its bias (quantize/rounding.py). Not when all three are off."""
    steps = state.steps
    if steps is None or not state.samples or not (steps.round_for_output or steps.correct_bias
                                                   or steps.equalize):
        return state
    from ..plan.layer_inputs import measure_layer_inputs as measure

    started = time.perf_counter()
    try:
        # The float model as keep_float_model wrote it, when it did (nothing changed it since).
        moments = measure(state.model, state.samples, DESCRIPTION, state.float_tflite)
    except ConversionError as e:  # LiteRT cannot run the float model: round to nearest
        log.warning("warning: layer inputs not measured (%s); weights round to nearest, biases "
                    "and channels stay as they are", first_line(e))
        return state
    if steps.equalize:
        moments = run_equalization(state.model, moments)
    log.debug("layer inputs measured for %d ops in %.2f s", len(moments), time.perf_counter() - started)
    if not (steps.round_for_output or steps.correct_bias):
        moments = {}
    return replace(state, steps=replace(steps, layer_inputs=moments))


def quantize(state: State) -> State:
    """The quantize steps, or the precision planner choosing which regions leave int8
    (plan/planner.py); then the report of what became int8, checked against the target."""
    if state.steps is None:
        return state
    model, plan, request = state.model, None, state.options.quantize
    if state.options.plan is not None and request.calibration is not None:
        model, plan = _planned(state)
    else:
        run_quantize_pipeline(model, state.steps)
    if state.qdq:
        for warning in state.qdq.warnings + changed_params(model, state.qdq):
            log.warning("warning: %s", warning)
    _check_target(model, request.target)
    calibrated = len(state.samples) if state.samples else 0
    quantization = QuantizationReport(
        io_type=state.steps.io_type, calibration_samples=calibrated,
        calibration_source=state.samples.source if calibrated else None,
        calibration_method=str(request.method) if calibrated else "",
        calibration_seconds=round(state.calibration_seconds, 3),
        int8_ops=sum(op.quantized == "int8" for op in model.operators),
        int16_ops=sum(op.quantized == "int16" for op in model.operators),
        float_ops=[FloatOp(op.type, op.source, op.float_reason) for op in model.operators
                   if op.float_reason],
        weights_bytes_float=state.float_bytes, weights_bytes=stored_bytes(model), plan=plan,
        qdq_tensors=state.qdq_tensors, target=request.target.name,
        cost=cost(model, request.target), from_pairs=state.from_pairs)
    _warn_unquantized(quantization, plan)
    return replace(state, model=model, quantization=quantization)


def _check_target(model: Model, target: Target) -> None:
    """ConversionError naming what the quantized model computes that the target cannot run."""
    unsupported = target_unsupported(model, target)
    if unsupported:
        shown = ", ".join(unsupported[:SHOWN_UNSUPPORTED]) + (", ..." if len(unsupported) > SHOWN_UNSUPPORTED else "")
        without = "no float there" if target.integer_only else "its kernel is missing there"
        raise ConversionError(f"--target {target.name} cannot run {len(unsupported)} ops of the "
                              f"quantized model: {shown} ({without}; --target arm64 runs them in float)")


def _warn_unquantized(quantization: QuantizationReport, plan) -> None:
    """A warning when --quantize wrote no integer kernel, and when no plan with int8 in it held
    the target: what was reached and what would trade size or speed for accuracy."""
    hybrid = plan is not None and plan.mix.get(HYBRID)
    if not (quantization.int8_ops or quantization.int16_ops or hybrid):
        why = sorted({f.reason.split(":")[0] for f in quantization.float_ops})
        log.warning("warning: --quantize wrote no integer op: every op stayed float (%s)",
                    "; ".join(why[:3]) or "no op has an int8 kernel")
        return
    if plan is None or plan.reached or not plan.rounds:
        return
    chosen = plan.rounds[plan.chosen_round]
    if plan.float_misses:
        log.warning("warning: the float model misses the target too (%s against onnxruntime): no plan "
                    "can be judged by it; the written plan (%s) is the measured one closest to "
                    "onnxruntime; without --quantize the file is float", plan.float_measure(),
                    ", ".join(f"{n} {k}" for k, n in plan.mix.items() if n) + " ops")
        return
    if plan.metric is None:
        reached = f"{chosen.worst_sqnr_db:.1f} dB"
        # -inf dB (an output int8 cannot carry at all) has no --target-sqnr that accepts it
        lower = (f"; --target-sqnr {math.floor(chosen.worst_sqnr_db)} accepts it"
                 if math.isfinite(chosen.worst_sqnr_db) else "")
    else:
        reached, lower = f"a metric of {plan.metric['score']:.4g} (float {plan.metric['float']:.4g})", ""
    log.warning("warning: no plan with int8 reached the target: the best measured (written) "
                "reaches %s with %s; --keep-float NODE on the first ops of --report's list keeps "
                "more float (bigger, slower, closer to float), --weight-only keeps every activation "
                "float%s", reached, ", ".join(f"{n} {k}" for k, n in plan.mix.items() if n) + " ops",
                lower)


def _planned(state: State):
    """The planner's model and plan (plan/planner.py), on the plan's samples."""
    from ..check.random_draws import fed_compare  # (random ops: their draws fed to both sides)
    from ..check.runtimes import RecordedReference, Reference
    from ..check.verify import compare
    from ..plan.exposed import exposed_selection
    from ..plan.planner import DECISION_SAMPLES, plan_precision

    options, request = state.options.plan, state.options.quantize
    reference = state.reference
    reference.restore_weights()  # onnxruntime's model
    # A metric scores exactly the samples it was given; without one, more samples are read for
    # outputs read by a decision, which the plan uses when the model's work allows (planner.py).
    count = options.samples if options.metric is not None else max(options.samples, DECISION_SAMPLES)
    samples = list(calibration_set(options.data or request.calibration, reference.proto, count,
                                   state.options.input.decoding))
    # a value-sized output (kept boxes) is judged by what its selection reads (plan/exposed.py)
    with exposed_selection(reference.proto, state.model, samples[0]) as exposure:
        session = RecordedReference(Reference(reference.proto))  # one onnxruntime run for all the plans
        return plan_precision(state.model, state.steps, reference.proto, samples, options.target_sqnr,
                              request.target, _write_candidate,
                              fed_compare(compare, reference.proto, samples, session),
                              options.metric, min(options.samples, len(samples)), exposure)


def store_weights(state: State) -> State:
    """--weight-only (int8) or --float16, or a float16 model's float16 weights (the float
    conversion stores them as --float16 does): only the stored weights change."""
    weights = state.options.weights
    if weights is None and state.float16_weights and state.steps is None:
        weights = WeightOptions("float16", 0)
    if weights is None:
        return state
    model = state.model
    floats = {n for n, a in model.arrays.items() if a.is_constant and a.dtype.kind == "f"}
    before = state.float_bytes or stored_bytes(model)
    run_weight_pipeline(model, weights.mode, weights.min_elements)
    stored = np.dtype(np.int8) if weights.mode == "int8" else np.dtype(np.float16)
    return replace(state, weights=WeightsReport(
        weights.mode, sorted(n for n in floats if n in model.arrays and model.arrays[n].dtype == stored),
        before, stored_bytes(model)))


def serialize_model(state: State, output_name: str) -> tuple[Flatbuffer, ConversionReport]:
    """The flatbuffer (its weights go as it is written out) and the conversion's report."""
    model = state.model
    notes = conversion_notes(model)
    mark_batch_tensors(model)
    batch = model.dynamic_batch
    flatbuffer = serialize(model, DESCRIPTION, release_data=True)
    counts = collections.Counter(op.type for op in model.operators)
    report = ConversionReport(
        input=state.source, output=output_name, ops=len(model.operators),
        op_counts=dict(sorted(counts.items())), transposes=counts.get("TRANSPOSE", 0),
        size_bytes=len(flatbuffer), seconds=round(time.perf_counter() - state.started, 3),
        inputs=_tensor_infos(model, model.inputs), outputs=_tensor_infos(model, model.outputs),
        quantization=state.quantization, weights=state.weights, notes=notes,
        batch=None if batch is None else _batch_report(model),
        dimensions=_dimension_reports(model),
        leading_dims=dict(state.leading_dims or {}))
    return flatbuffer, report


def _batch_report(model: Model) -> BatchReport:
    """The batch's: followed on axis 0 (dynamic_batch.py), or, where it leaves axis 0, as a
    dynamic dimension (dynamic_dims.py), else fixed at 1 with why."""
    batch, dims = model.dynamic_batch, model.dynamic_dims
    followed = dims is not None and bool(dims.batch) and dims.batch not in dims.fixed_because
    size = dims.sizes[dims.batch] if followed else 1
    return BatchReport(batch.symbol, size, bool(batch.tensors) or followed,
                       note(batch, size if followed else None))


def _dimension_reports(model: Model) -> list[DimensionReport]:
    """The dynamic dimensions but the batch (_batch_report's)."""
    dims = model.dynamic_dims
    if dims is None:
        return []
    return [DimensionReport(s, size, s not in dims.fixed_because, dims.fixed_because.get(s, ""),
                            s in dims.value_dependent)
            for s, size in dims.sizes.items() if s != dims.batch]


def write_and_verify(state: State, flatbuffer: Flatbuffer, report: ConversionReport,
                     write: Write | None) -> tuple[bytes | None, ConversionReport]:
    """write(flatbuffer, finish) puts the model where it goes (None: in memory, verified from a
    temporary file, and returned as bytes); finish verifies the complete file before it appears,
    when the options ask, and gives the final report."""
    final: list[ConversionReport] = []
    verifying = state.options.verify.enabled

    def finish(path: str | None) -> ConversionReport:
        verification, source, why = (verify_written(state, path, report) if verifying and path
                                     else (None, None, None))
        latency = time_written(state, path, report) if verification is not None else None
        final.append(replace(report, verify=verification, latency=latency, not_verified=why,
                             verify_source=source if verification is not None else None))
        return final[-1]

    if write is not None:
        write(flatbuffer, finish)
        return None, final[-1]
    content = bytes(flatbuffer)
    if not verifying:
        return content, finish(None)
    with _temporary_file(content, "model.tflite") as path:
        return content, finish(path)


@contextlib.contextmanager
def _temporary_file(content: bytes, name: str):
    """The path of a file holding `content`, in a directory of its own gone afterwards."""
    with tempfile.TemporaryDirectory(prefix="qconvert-") as folder:
        path = os.path.join(folder, name)
        with open(path, "wb") as f:
            f.write(content)
        yield path


def verify_written(state: State, path: str, report: ConversionReport
                   ) -> tuple[Verification | None, DataSource | None, str | None]:
    """The written file against onnxruntime (check_written), BelowThreshold when it failed, what
    its samples were read from (None: generated inputs), and why it was not verified. onnxruntime
    failing on the model is an error (the file is not written: --no-verify writes it unchecked),
    an --input-shape against a static dimension a usage error before it runs;
    a check that would run longer than its limit (onnx/can_run.py) writes it unverified, the
    summary saying why (no verification, and that reason)."""
    from ..onnx.can_run import CheckTooCostly, contradicted_shapes

    # (after the conversion, whose own errors name the node an --input-shape breaks)
    contradicted_shapes(state.reference.proto, state.options.input.shapes)
    verify = state.options.verify
    if verify.min_sqnr is None and _rounds_itself(state):
        verify = replace(verify, rounding_bound=True)  # the model's own rounding is the gate
    onnx_path = state.source if state.reads_file else None
    try:
        dims = state.model.dynamic_dims
        sizes = dims.check_shapes() if dims is not None else []
        result, source = check_written(state.reference, onnx_path, path, verify, report.notes,
                                       warn=True, other_shapes=sizes)
    except ReferenceFailed as e:
        raise ConversionError(f"{e} (the verification runs the model in onnxruntime; "
                              "--no-verify converts without it)") from None
    except CheckTooCostly as e:
        return None, None, str(e)
    except ConversionError as e:
        if path not in str(e):
            raise
        # The temporary file is nobody's business: the message names the output.
        raise ConversionError(str(e).replace(path, f"{report.output} (not written)")) from None
    require_passed(result)
    return result, source, None


def _rounds_itself(state: State) -> bool:
    """Whether the file computes the model's own quantization, judged by its rounding bound
    (check/rounding_bound.py): int8 from the model's QDQ pairs, or a dynamically quantized model
    in hybrid kernels (its default conversion) whose every run-time rounding is a
    DynamicQuantizeLinear and whose stored integers are kept. com.microsoft's fused
    DynamicQuantize* nodes round inside themselves, where the bound cannot move them, and
    weights off TFLite's int8 grid are requantized (a warning names them): such a model is judged
    by SQNR, its summary saying why."""
    if state.steps is not None:
        return bool(state.qdq and state.qdq.activations)
    if state.options.weights is not None or state.reference is None or state.model.requantized_weights:
        return False  # (weights requantized: an error of the conversion's, not the model's rounding)
    from ..check.rounding_bound import rounds_movably

    return rounds_movably(state.reference.proto.graph)


def time_written(state: State, path: str, report: ConversionReport) -> Latency | None:
    """The written model timed next to the float model (check/latency.py), with a warning when
    it runs slower and the likely reasons."""
    if state.float_tflite is None:
        return None
    from ..check.latency import measure

    with _temporary_file(state.float_tflite, "float.tflite") as float_path:
        latency = measure(path, float_path)
    if latency.ratio > 1.0 and latency.float_ms >= SLOWER_WARNS_FROM_MS:
        kind = "int8" if report.quantization is not None else report.weights.mode
        log.warning("warning: the %s model runs %.2fx the float model's time in LiteRT on this CPU "
                    "(%s)%s", kind, latency.ratio, latency.cpu, _slower_because(report, latency))
    return latency


def _slower_because(report: ConversionReport, latency: Latency) -> str:
    """The likely reasons a quantized model runs slower than its float model."""
    reasons = []
    if latency.float_ms < 1.0:
        reasons.append("a small graph, where the interpreter's fixed costs weigh")
    q = report.quantization
    if q is not None and q.float_ops:
        reasons.append(f"{len(q.float_ops)} ops stay float, each behind a DEQUANTIZE/QUANTIZE pair")
    if report.weights is not None and report.weights.mode == "int8":
        reasons.append("dynamic-range kernels quantize their float inputs on every run")
    if "no VNNI" in latency.cpu:
        reasons.append("no VNNI or dot-product instructions for int8 on this CPU")
    return ": " + "; ".join(reasons) if reasons else ""


def check_written(reference: OnnxFile, onnx_path: str | None, path: str, options: VerifyOptions,
                  notes: ConversionNotes | None = None, warn: bool = False,
                  other_shapes: list[dict] = ()) -> tuple[Verification, DataSource | None]:
    """Verifies the .tflite at `path` against the ONNX model `reference` and writes the
    per-tensor report if asked; with `warn`, logs a warning when an output is below WARN_BELOW_DB
    and there is no threshold. A float conversion (options.float_check) is judged by the float
    check (check/verify.py) unless the model has Q/DQ pairs on activations, whose rounding a float
    conversion drops (then by SQNR, as a quantized one). onnxruntime reads the file at
    `onnx_path` itself when it can (runtimes.reads_file); else `reference` gets its weights back.
    `other_shapes`: input shapes (ONNX layout, by name) to check the file at besides its own (its
    dynamic dimensions resized: onnx/dynamic_dims.py), on generated inputs or the samples fitted
    to them (runtimes.fitted_samples), each output judged by its worst. A model with random ops
    is checked with their draws fed to both sides (check/random_draws.py). Returns the
    verification and what its samples were read from (options.data; None: generated inputs)."""
    from ..onnx.can_run import check_cost
    from ..check.random_draws import fed_draws, random_nodes
    from ..check.runtimes import fitted_samples, opens_by_name, reads_file
    from ..check.verify import rounding_dropped, verify

    proto = reference.proto
    check_cost(proto)  # before any run: a check that would not end is said
    float_check = options.float_check and not rounding_dropped(proto)
    direct = (onnx_path is not None and options.report is None and not options.rounding_bound
              and opens_by_name(onnx_path) and reads_file(proto) and not random_nodes(proto.graph))
    if not direct:
        reference.restore_weights()
    verify = fed_draws(verify, proto, path)  # random ops: their draws fed to both sides
    data = (None if options.data is None else
            calibration_set(options.data, proto, options.samples, options.decoding))
    samples = None if data is None else list(data)
    result = verify(proto, path, samples, options.samples, options.min_sqnr,
                    data=options.data or "generated", float_check=float_check,
                    onnx_path=onnx_path if direct else None, rounding_bound=options.rounding_bound)
    for shapes in other_shapes:
        fitted = None if samples is None else fitted_samples(samples, shapes)
        result.merge_size(verify(proto, path, fitted, options.samples, options.min_sqnr,
                                 data=options.data or "generated", float_check=float_check,
                                 onnx_path=onnx_path if direct else None,
                                 rounding_bound=options.rounding_bound, shapes=shapes), shapes)
    if options.report is not None:
        from ..check.report import build_report, write_report

        content = build_report(proto, path, samples, options.samples, notes)
        replace_atomically(options.report, lambda tmp: write_report(content, tmp))
    # (a model judged by its own rounding's bound passed or failed by that, said either way)
    judged = options.min_sqnr is not None or options.rounding_bound or result.check == "float"
    low = result.below(WARN_BELOW_DB) if warn and not judged else []
    if low:
        advice = (f"see {options.report}" if options.report else
                  "--report FILE.html shows where the error comes from")
        log.warning("warning: %s below %g dB against onnxruntime; %s", ", ".join(low),
                    WARN_BELOW_DB, advice)
    return result, None if data is None else data.source


def require_passed(result: Verification) -> None:
    """BelowThreshold (exit 4) when the float check failed (a float conversion that does not
    compute what the ONNX model does), an output or slice missed the verification's --min-sqnr,
    or a model that arrived quantized is further from onnxruntime than its own rounding explains."""
    if result.passed:
        return
    parts = []
    failures = result.float_failures()
    if failures:
        parts.append(f"float conversion does not match onnxruntime: {'; '.join(failures)}")
    low = result.below(result.min_sqnr) if result.min_sqnr is not None else []
    if low:
        parts.append(f"{', '.join(low)} below --min-sqnr {result.min_sqnr:g} dB")
    unexplained = result.bound_failures()
    if unexplained:
        parts.append("; ".join(unexplained) + " (--no-verify writes it anyway)")
    raise BelowThreshold(f"verify: {'; '.join(parts)}")


# --- helpers of the stages ----------------------------------------------------------------------

def _tensor_infos(model: Model, names: list[str]) -> list[TensorInfo]:
    infos = []
    for name in names:
        array = model.arrays[name]
        perm = model.io_permutation.get(name)
        infos.append(TensorInfo(name, list(array.shape), str(array.dtype), list(perm) if perm else None))
    return infos


def conversion_notes(model: Model) -> ConversionNotes:
    """What the per-tensor report needs to know of the written model that the file does not say."""
    return ConversionNotes([op.source for op in model.operators],
                           [op.float_reason for op in model.operators],
                           {n: a.minmax.source for n, a in model.arrays.items() if a.minmax},
                           {n: a.channel_scale.astype(np.float32) for n, a in model.arrays.items()
                            if a.channel_scale is not None})


def _write_candidate(model: Model, path: str) -> None:
    """A plan's quantized model as a .tflite (its arrays keep their data)."""
    with open(path, "wb") as f:
        serialize(model, DESCRIPTION, release_data=False).write_to(f)


def calibration_set(calibration: str | Mapping, proto, count: int | None, decoding=None,
                    progress: bool = False):
    """The checked calibration samples for the ONNX model `proto` (the first `count`, all when
    None): `calibration` is a path (an .npz or a directory, see calibration/data.py; `decoding`,
    the options' input.decoding, says how a folder of images or .wav files becomes samples, with
    a progress line on a terminal when `progress`) or a mapping {input name: array} laid out
    like an .npz's arrays (the Python API)."""
    from ..calibration.data import calibration_from_arrays, load_calibration, model_input_specs

    if isinstance(calibration, Mapping):
        return calibration_from_arrays(calibration, model_input_specs(proto), count)
    return load_calibration(calibration, model_input_specs(proto), count, decoding, progress)


def fake_quant(source: str, options: Options, *, data: bytes | None = None, output_name: str = "",
               progress: bool = False) -> tuple[bytes, FakeQuantReport]:
    """`qconvert fakequant`: the ONNX model `source` with QuantizeLinear/DequantizeLinear pairs
    where its int8 conversion with `options` quantizes, holding the params that conversion
    chooses (qdq/fakequant.py). Returns the model's bytes."""
    from ..qdq.fakequant import (
        INT16_OPSET,
        PER_AXIS_OPSET,
        FloatWeights,
        Precision,
        insert_fake_quant,
        with_opset,
    )

    float_weights = FloatWeights()
    state = build(source, options, data=data, progress=progress, before_quantizing=float_weights,
                  reference=True)
    state.reference.restore_weights()
    proto = state.reference.proto
    if has_qdq(proto):  # the model's own pairs give way to the conversion's
        strip_qdq(proto)
    proto = with_opset(proto, INT16_OPSET if state.quantization.int16_ops else PER_AXIS_OPSET)
    steps, plan = state.steps, state.quantization.plan
    promotions = plan.promotions if plan is not None else []
    precision = Precision(  # what no pair says: the ops kept float or promoted, by ONNX node
        float_nodes={**steps.keep_float, **{p.node: p.reason for p in promotions if p.to != "int16"}},
        int16_nodes={**steps.int16_nodes, **{p.node: p.reason for p in promotions if p.to == "int16"}},
        activations=steps.activations)
    graph = insert_fake_quant(proto, state.model, float_weights, precision)
    try:
        written = proto.SerializeToString()
    except ValueError as e:  # protobuf's 2 GiB limit (weights written as external data: not yet)
        raise ConversionError(f"the fake-quant model cannot be written as one protobuf: {e}") from None
    report = FakeQuantReport(
        input=source, output=output_name, activations=graph.activations, weights=graph.weights,
        biases=graph.biases, float_weights=graph.float_weights, ranges_in_metadata=graph.ranges_in_metadata,
        quantization=state.quantization, size_bytes=len(written),
        seconds=round(time.perf_counter() - state.started, 3))
    return written, report
