"""Calibration: the range of every tensor over the representative inputs.

`calibrate_ranges` runs the float ONNX model in onnxruntime, one sample per run, with the tensors
that need a range added as graph outputs, and keeps TOCO's running global min/max per tensor
(NaN values are skipped with a warning, like TFLite's calibration logger; +-inf, such as an
attention mask's -inf, are left out of the range and saturate in int8). That is the default
calibration method, minmax; the methods percentile[:P] and mse run the samples a second time to
fill a histogram per tensor over its min/max and choose the range from it
(calibration_methods.py).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import tempfile
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import onnx
from onnx import helper

from ..errors import ConversionError, ReferenceFailed
from ..ir import Model
from ..onnx.runtime import reproducible_reference, session_options
from ..ops.activations import apply_fused_activation
from ..ops.registry import TFLITE_OPS
from ..transforms.quantization import set_loaded_ranges
from ..quantize.calibration_methods import MINMAX, CalibrationMethod, HistogramRecorder, softmax_floor
from ..quantize.params import snapped_range
from .progress import Progress

log = logging.getLogger("qconvert")

_FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE,
                onnx.TensorProto.BFLOAT16}
# Protobuf cannot serialize a model of 2 GiB or more; such a model goes to onnxruntime via a file.
_PROTO_LIMIT = (2 << 30) - (64 << 20)


def _declared_types(model: onnx.ModelProto) -> dict[str, int]:
    """Element type of the top-level tensors the model declares one for."""
    types: dict[str, int] = {}
    graph = model.graph
    for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            types[vi.name] = vi.type.tensor_type.elem_type
    for t in graph.initializer:
        types[t.name] = t.data_type
    return types


def _tensor_types(model: onnx.ModelProto) -> dict[str, int]:
    """Element type of every top-level tensor, from the model and ONNX shape inference."""
    types = _declared_types(model)
    graph = model.graph
    missing = [o for n in graph.node for o in n.output if o and o not in types]
    if missing:
        try:
            # Inference needs only the initializers' types and shapes; stripping their data keeps
            # the copy small (and under protobuf's 2 GiB) and fast to make.
            light = onnx.ModelProto()
            _copy_without_data(model, light)
            inferred = onnx.shape_inference.infer_shapes(light, strict_mode=False)
            for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
                if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
                    types.setdefault(vi.name, vi.type.tensor_type.elem_type)
        except Exception as e:  # onnx raises several types; a model it cannot infer still runs
            log.warning("calibration: ONNX shape inference failed (%s); tensors without a type in "
                        "the model are calibrated only if requested by name", str(e).splitlines()[0])
    return types


def _copy_fields(source, target, skip=()) -> None:
    for f, value in source.ListFields():
        if f.name in skip:
            continue
        if hasattr(value, "extend"):  # a repeated field
            getattr(target, f.name).extend(value)
        elif f.message_type is not None:
            getattr(target, f.name).CopyFrom(value)
        else:
            setattr(target, f.name, value)


def _copy_without_data(model: onnx.ModelProto, out: onnx.ModelProto) -> None:
    """`out` = `model` with its initializers turned into typed graph inputs (no weight bytes)."""
    _copy_fields(model, out, skip=("graph",))
    _copy_fields(model.graph, out.graph, skip=("initializer", "input"))
    names = {t.name for t in model.graph.initializer}
    out.graph.input.extend(i for i in model.graph.input if i.name not in names)
    for t in model.graph.initializer:
        out.graph.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))


class CalibrationRun:
    """An onnxruntime session over a copy of `model` with the tensors to calibrate exposed as
    outputs. Build it while the ONNX model still holds its weights (the loader frees them); the
    session keeps its own copy. `tensor_names` None means every float tensor that is a graph input
    or a node output; "all" every graph input and node output (fetch numeric ones only); otherwise
    those tensors (of any numeric type). A graph with Q/DQ pairs (a reference for verification)
    runs unoptimized, a float one at onnxruntime's basic level (session_options)."""

    def __init__(self, model: onnx.ModelProto, tensor_names: list[str] | str | None = None):
        from ..onnx.can_run import check_cost

        check_cost(model, "calibration")  # before the session: a Loop of 2^40 trips
        model = reproducible_reference(model) or model  # the same integer sums on every CPU
        graph = model.graph
        initializers = {t.name for t in graph.initializer}
        graph_inputs = [i.name for i in graph.input if i.name not in initializers]
        produced = [o for n in graph.node for o in n.output if o]
        # Every tensor's type takes ONNX shape inference; "all" needs none: whoever fetches from
        # it asks for numeric tensors only (calibrate_model: those the IR has).
        types = _tensor_types(model) if tensor_names is None else _declared_types(model)
        if tensor_names == "all":
            wanted = list(dict.fromkeys(graph_inputs + produced))
        elif tensor_names is None:
            wanted = [n for n in dict.fromkeys(graph_inputs + produced) if types.get(n) in _FLOAT_TYPES]
        else:
            known = set(graph_inputs) | set(produced)
            unknown = [n for n in tensor_names if n not in known]
            if unknown:
                raise ValueError(f"calibrate_ranges: {unknown[0]!r} is not a graph input or node output")
            wanted = list(dict.fromkeys(tensor_names))
        self.from_feeds = [n for n in wanted if n in graph_inputs]
        self.fetched = [n for n in wanted if n not in graph_inputs]
        self.session = self._session(model, types)

    def _session(self, model: onnx.ModelProto, types: dict):
        """onnxruntime's session fetching self.fetched: the wanted tensors become graph outputs
        while it is made, then the caller's model gets its own outputs back (no copy of the
        weights for models under 2 GiB)."""
        import onnxruntime as ort

        outputs = model.graph.output
        kept = len(outputs)
        existing = {o.name for o in outputs}
        for name in self.fetched:
            if name not in existing:
                if name in types:
                    outputs.append(helper.make_tensor_value_info(name, types[name], None))
                else:
                    outputs.add().name = name
        options = session_options(model, ort.GraphOptimizationLevel.ORT_ENABLE_BASIC)
        providers = ["CPUExecutionProvider"]
        try:
            if model.ByteSize() < _PROTO_LIMIT:
                data = model.SerializeToString()
                del outputs[kept:]
                return ort.InferenceSession(data, options, providers=providers)
            else:
                # Saving with external data rewrites the proto's tensors: do it on a copy.
                work = onnx.ModelProto()
                work.CopyFrom(model)
                del outputs[kept:]
                with tempfile.TemporaryDirectory(prefix="qconvert-calib-") as tmp:
                    file = os.path.join(tmp, "model.onnx")
                    onnx.save_model(work, file, save_as_external_data=True, location="weights.bin")
                    del work
                    return ort.InferenceSession(file, options, providers=providers)
        except Exception as e:  # onnxruntime raises its own exception types
            from ..onnx.can_run import onnxruntime_message

            raise ReferenceFailed(f"onnxruntime cannot load the model for calibration: "
                                  f"{onnxruntime_message(e)}") from None
        finally:
            del outputs[kept:]

    def ranges(self, samples: Iterable[dict[str, np.ndarray]], progress: bool = False,
               derive: Callable[[dict[str, np.ndarray]], Iterable[tuple[str, np.ndarray]]]
               | None = None, names: set[str] | None = None,
               method: CalibrationMethod = MINMAX) -> dict[str, tuple[float, float]]:
        """Runs every sample and returns {tensor: (min, max)}, by default (`method` minmax)
        TOCO's global min/max over all samples (NaN skipped). A tensor that never holds a non-NaN
        value (empty, or NaN throughout) has no entry. `names`, if given, limits the tensors
        fetched to those. `derive`, if given, gets each sample's values by name and yields more
        (name, value) pairs whose ranges are recorded too (tensors the ONNX graph does not have).
        Memory is bounded by one sample's activations.

        The methods percentile and mse run every sample twice: once for the min/max, then to fill
        each tensor's histogram over it (16 KiB per tensor, calibration_methods.HistogramRecorder).
        `samples` that is not a sequence (a generator) is then made a list first, so it holds
        every sample's inputs; the progress line counts both passes."""
        input_types = {i.name: i.type for i in self.session.get_inputs()}
        fetched = self.fetched if names is None else [n for n in self.fetched if n in names]
        from_feeds = self.from_feeds if names is None else [n for n in self.from_feeds if n in names]
        if method.name != "minmax" and not isinstance(samples, Sequence):
            samples = list(samples)
        count = len(samples) if hasattr(samples, "__len__") else None
        passes = 1 if method.name == "minmax" else 2
        bar = Progress(progress, None if count is None else passes * count)

        def run(record: Callable[[dict[str, np.ndarray]], None], done: int) -> int:
            for index, sample in enumerate(samples):
                feeds = {n: v for n, v in sample.items() if n in input_types}
                missing = [n for n in input_types if n not in feeds]
                if missing:
                    raise ConversionError(
                        f"calibration sample {index} has no value for model input {missing[0]!r}")
                try:
                    values = self.session.run(fetched, feeds) if fetched else []
                except Exception as e:  # onnxruntime raises its own exception types
                    from ..onnx.can_run import onnxruntime_message, shapes_named

                    reason = shapes_named(onnxruntime_message(e), feeds)
                    raise ConversionError(
                        f"onnxruntime failed on calibration sample {index}: {reason}") from None
                known = {n: feeds[n] for n in from_feeds}
                known.update(zip(fetched, values))
                if derive is not None:
                    known.update(derive(known))
                record(known)
                del values, feeds, sample, known
                done += 1
                bar.update(done)
            return done

        recorder = _RangeRecorder()
        done = run(recorder.record, 0)
        ranges = recorder.result()
        if method.name != "minmax":
            histograms = HistogramRecorder(ranges)
            run(histograms.record, done)
            ranges = histograms.result(method)
        bar.update(done * passes, final=True)
        return ranges


# Tensors up to this many elements get their min/max together, in one numpy call per dtype (a
# model has thousands of small tensors, and a call per tensor would cost more than the inference).
_SMALL = 1 << 14


class _RangeRecorder:
    """The running global min and max of each tensor over the samples recorded.

    Every sample usually brings the same tensors with the same dtypes and sizes, so the work is
    planned once: small tensors of one dtype are reduced together (one concatenation, then
    np.minimum/maximum.reduceat over the segments) and the running ranges are numpy vectors,
    merged per sample in one call. A tensor holding NaN or +-inf takes the per-tensor path for
    that sample: NaN is counted (and warned about, like TFLite's calibration logger) and +-inf
    (an attention mask's -inf, which saturates in int8) is left out of the range."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.layout: list | None = None  # (dtype, size) of each tensor of the current plan
        self.groups: list[tuple[np.ndarray, np.ndarray]] = []  # (tensor indices, segment starts)
        self.large: list[int] = []
        self.lows = self.highs = np.zeros(0)
        self.done: dict[str, tuple[float, float]] = {}  # ranges of tensors of earlier plans
        self.nan_counts: dict[str, int] = {}

    def record(self, values: dict[str, np.ndarray]) -> None:
        """One sample's values by tensor name."""
        names = list(values)
        arrays = [np.asarray(v) for v in values.values()]
        layout = [(a.dtype, a.size) for a in arrays]
        if names != self.names or layout != self.layout:
            self._plan(names, layout)
        for indices, starts in self.groups:
            flat = np.concatenate([arrays[i] for i in indices.tolist()], axis=None)
            self._merge(indices, np.minimum.reduceat(flat, starts), np.maximum.reduceat(flat, starts),
                        arrays)
        for i in self.large:
            value = arrays[i]
            self._merge(np.array([i]), value.min(keepdims=True).reshape(1),
                        value.max(keepdims=True).reshape(1), arrays)

    def _plan(self, names: list[str], layout: list) -> None:
        self._flush()
        self.names, self.layout = names, layout
        by_dtype: dict[np.dtype, list[int]] = {}
        self.large = []
        for i, (dtype, size) in enumerate(layout):
            if size == 0 or dtype.kind not in "fiub":
                continue
            if size > _SMALL:
                self.large.append(i)
            else:
                by_dtype.setdefault(dtype, []).append(i)
        self.groups = []
        for indices in by_dtype.values():
            sizes = [layout[i][1] for i in indices]
            self.groups.append((np.array(indices), np.cumsum([0] + sizes[:-1])))
        self.lows = np.full(len(names), np.inf)
        self.highs = np.full(len(names), -np.inf)

    def _merge(self, indices: np.ndarray, lows: np.ndarray, highs: np.ndarray, arrays) -> None:
        lows, highs = lows.astype(np.float64), highs.astype(np.float64)
        finite = np.isfinite(lows) & np.isfinite(highs)
        for k in np.flatnonzero(~finite).tolist():
            lows[k], highs[k] = self._finite_range(int(indices[k]), arrays[int(indices[k])])
        np.minimum.at(self.lows, indices, lows)
        np.maximum.at(self.highs, indices, highs)

    def _finite_range(self, index: int, value: np.ndarray) -> tuple[float, float]:
        """(min, max) of the finite values; (inf, -inf) when there are none."""
        nans = int(np.count_nonzero(np.isnan(value)))
        if nans:
            name = self.names[index]
            self.nan_counts[name] = self.nan_counts.get(name, 0) + nans
        finite = value[np.isfinite(value)]
        if not finite.size:
            return np.inf, -np.inf
        return float(finite.min()), float(finite.max())

    def _flush(self) -> None:
        """Moves the current plan's ranges into `done` (merged with earlier plans')."""
        for name, lo, hi in zip(self.names, self.lows.tolist(), self.highs.tolist()):
            if lo > hi:
                continue  # no finite value seen
            if name in self.done:
                old_lo, old_hi = self.done[name]
                lo, hi = min(old_lo, lo), max(old_hi, hi)
            self.done[name] = (lo, hi)
        self.names, self.layout = [], None
        self.lows = self.highs = np.zeros(0)

    def result(self) -> dict[str, tuple[float, float]]:
        self._flush()
        if self.nan_counts:  # one line, however many tensors: the first names where it starts
            (name, n), count = next(iter(self.nan_counts.items())), len(self.nan_counts)
            others = f" and {count - 1} more tensor{'s' if count > 2 else ''}" if count > 1 else ""
            log.warning("calibration: the model computes NaN on the calibration data: tensor %r "
                        "(%d value%s)%s; skipped in their ranges", name, n, "" if n == 1 else "s",
                        others)
        return self.done


def calibrate_ranges(model: onnx.ModelProto, samples: Iterable[dict[str, np.ndarray]],
                     tensor_names: list[str] | None = None, progress: bool = False,
                     method: CalibrationMethod = MINMAX) -> dict[str, tuple[float, float]]:
    """Runs the float model on every sample and returns {tensor: (min, max)} by `method` (see
    CalibrationRun: `tensor_names` None means every float graph input and node output). `model`
    is not modified."""
    return CalibrationRun(model, tensor_names).ranges(samples, progress, method=method)


def _derived_ops(model: Model, onnx_names: set[str], values_needed: set[str]
                 ) -> tuple[dict[str, str], list, set[str]]:
    """The IR ops with an output the ONNX model does not have and a numpy `evaluate`, as
    calibrate_model uses them: ({output: input} of each TRANSPOSE or RESHAPE of a non-constant
    that no other such op reads, which holds its input's values, unless its values are needed
    (`values_needed`: a SOFTMAX's input, whose rows count); the other ops, to compute; the
    tensors all of them read)."""
    derived = [op for op in model.operators
               if TFLITE_OPS[op.type].evaluate is not None and any(o not in onnx_names for o in op.outputs)]
    read_by_derived = {n for op in derived for n in op.inputs}
    same_values: dict[str, str] = {}  # derived tensor -> the tensor holding the same values
    computed = []
    for op in derived:
        out = op.outputs[0]
        if (op.type in ("TRANSPOSE", "RESHAPE") and out not in read_by_derived and out not in values_needed
                and model.constant(op.inputs[0]) is None):
            same_values[out] = op.inputs[0]
        else:
            computed.append(op)
    return same_values, computed, read_by_derived


def _softmax_inputs(model: Model) -> dict[str, float]:
    """{input: beta} of the model's SOFTMAX ops that read a float activation."""
    return {op.inputs[0]: float(op.options.get("beta", 1.0)) for op in model.operators
            if op.type == "SOFTMAX" and model.arrays[op.inputs[0]].dtype.kind == "f"
            and model.constant(op.inputs[0]) is None}


class _SoftmaxFloors:
    """The running softmax_floor of each SOFTMAX input over the samples: the least floor, and
    whether any sample's rows held a masked value."""

    def __init__(self, inputs: dict[str, float]):
        self.inputs = inputs
        self.found: dict[str, tuple[float, bool]] = {}

    def record(self, values: dict[str, np.ndarray]) -> None:
        for name, beta in self.inputs.items():
            found = softmax_floor(np.asarray(values[name]), beta) if name in values else None
            if found is not None:
                floor, masked = self.found.get(name, found)
                self.found[name] = (min(floor, found[0]), masked or found[1])

    def apply(self, model: Model) -> None:
        """The floor of each input whose rows held masked values goes on its range."""
        for name, (floor, masked) in self.found.items():
            array = model.arrays[name]
            if masked and array.minmax is not None:
                # On the range's grid, as the calibrated ends are (quantize/params.py).
                low = snapped_range(floor, array.minmax.max)[0]
                array.minmax = dataclasses.replace(array.minmax, softmax_floor=low)


def calibrate_model(model: Model, run: CalibrationRun, samples: Iterable[dict[str, np.ndarray]],
                    progress: bool = False, method: CalibrationMethod = MINMAX) -> int:
    """Sets `minmax` on the float activation arrays of `model`, the IR freshly loaded from the
    ONNX model `run` was built on (before any transformation, so its arrays are still in the ONNX
    layout), from `run` over `samples` by `method`; its source is "calibration", or
    "calibration (percentile:99.99)" and the like for other methods than minmax. Returns how many
    arrays got a range. `run` must expose
    every numeric tensor (CalibrationRun(proto, "all")); only those the IR still has as float
    arrays, or that the derived ops below read, are fetched.

    Arrays named after an ONNX tensor get that tensor's range. Arrays an importer added (a
    decomposition's intermediate, a layout TRANSPOSE's output) are computed per sample with the
    IR ops' own numpy `evaluate` from the ONNX values, except the output of a TRANSPOSE or
    RESHAPE that no other such op reads: it holds its input's values, so it takes its input's
    range without being computed. Arrays without either (CONV_2D's NHWC output) get their range
    later through the same-scale ops around them (propagate_minmax).

    A SOFTMAX's input whose rows hold masked values (an attention mask's) also gets its
    softmax_floor (quantize/calibration_methods.py), the least over the samples.
    """
    onnx_names = set(run.from_feeds) | set(run.fetched)
    floors = _SoftmaxFloors(_softmax_inputs(model))
    same_values, computed, read_by_derived = _derived_ops(model, onnx_names, set(floors.inputs))
    needed = {n for n, a in model.arrays.items() if a.dtype.kind == "f"} | read_by_derived
    # Which ops can be computed is the same for every sample: those whose inputs are fetched,
    # constant or computed before them. Each input is taken from the sample's values when it is
    # there, else it is the constant.
    available = (set(run.from_feeds) | set(run.fetched)) & needed
    plan = []
    for op in computed:
        if all(not n or n in available or model.constant(n) is not None for n in op.inputs):
            sources = [(n, None if n in available else model.constant(n)) for n in op.inputs]
            plan.append((op, TFLITE_OPS[op.type].evaluate, sources))
            available.update(o for o in op.outputs if o not in onnx_names)

    def derive(values: dict[str, np.ndarray]):
        local = dict(values)
        for op, evaluate, sources in plan:
            # A composition's intermediates may leave float's range where the float model's do too
            # (LOG of 0 in a masked Asinh, EXP of a masked score): their range says so and keeps
            # them float (keep_unrepresentable_float), no warning needed.
            with np.errstate(all="ignore"):
                outputs = evaluate([local[n] if constant is None and n else constant
                                    for n, constant in sources], op)
            for name, value in zip(op.outputs, outputs):
                if name not in onnx_names:
                    local[name] = value = apply_fused_activation(np.asarray(value), op.fused_activation)
                    yield name, value
        floors.record(local)

    ranges = run.ranges(samples, progress, derive=derive if plan or floors.inputs else None,
                        names=needed, method=method)
    for name, source in same_values.items():  # in execution order, so chains resolve
        if source in ranges:
            ranges[name] = ranges[source]
    source = "calibration" if method.name == "minmax" else f"calibration ({method})"
    snapped = {name: snapped_range(*extremes) for name, extremes in ranges.items()}
    count = set_loaded_ranges(model, snapped, source)
    floors.apply(model)
    return count
