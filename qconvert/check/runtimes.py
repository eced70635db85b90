"""The two runtimes of a check: the .tflite in LiteRT and the ONNX model in onnxruntime.

TFLiteModel loads any .tflite, also one another tool wrote, in LiteRT (its native messages
silenced: quiet_native_stderr). Its inputs and outputs are paired with the ONNX model's by the
file's signature names, then by order and shape; each pair's layout permutation comes from the
file's `qconvert_io_layout` metadata when qconvert wrote it (see tflite/writer.py), else from the
shapes (equal shapes: none; otherwise the channels-last permutation, or the first permutation that
fits). int8/uint8/int16 inputs and outputs are quantized and dequantized with the tensor's params,
so that both models take and give float values in the ONNX layout.

Reference runs the ONNX model in onnxruntime, from its file when it can (reads_file) or from the
proto; generated_samples makes seeded inputs; run_both runs both models sample by sample.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
from dataclasses import dataclass, field

import numpy as np
import onnx

from ..errors import ConversionError, ReferenceFailed, first_line
from ..tflite.reader import io_layout_metadata
from .float_check import output_rules, step_fetches

INTEGER_INPUT_HIGH = 10  # generated index-like integer inputs (not ids of a table) are uniform in [0, 10)
# Integer inputs that only meet arithmetic (input_ranges.value_inputs) are drawn wide: magnitudes spread
# log-uniformly up to int32's maximum, both signs (int64 computes as int32 inside the graph, so
# int32's range is what the .tflite takes: qconvert/onnx/loader.py); small integer types over
# their whole range.
WIDE_INTEGER_BITS = 31
# --- LiteRT ----------------------------------------------------------------------------------
@dataclass
class Port:
    """One model input or output of the .tflite, paired with an ONNX tensor."""

    onnx_name: str
    name: str  # the signature name in the .tflite
    index: int  # tensor index
    dtype: np.dtype
    shape: tuple[int, ...]
    quantization: tuple[float, int] | None  # (scale, zero point) of int8/uint8/int16 I/O
    permutation: tuple[int, ...] | None = None  # ONNX axes in the .tflite tensor's order

    def onnx_shape(self) -> tuple[int, ...]:
        if self.permutation is None:
            return self.shape
        return tuple(self.shape[k] for k in np.argsort(self.permutation))


@dataclass
class TFLiteModel:
    """A .tflite in LiteRT, with its inputs and outputs paired with the ONNX model's."""

    path: str
    inputs: list[Port] = field(default_factory=list)
    outputs: list[Port] = field(default_factory=list)
    preserve_all: bool = False

    def __post_init__(self):
        from ai_edge_litert.interpreter import Interpreter, OpResolverType

        # With every tensor kept (the report reads them), no delegate: a delegated partition's
        # inner tensors are never written.
        resolver = (OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES if self.preserve_all
                    else OpResolverType.AUTO)
        # LiteRT takes UTF-8 paths only: a name with another byte is read here and passed as bytes
        where = ({"model_path": self.path} if opens_by_name(self.path) else
                 {"model_content": open(self.path, "rb").read()})
        try:
            with quiet_native_stderr():
                self.interpreter = Interpreter(**where, num_threads=1,
                                               experimental_op_resolver_type=resolver,
                                               experimental_preserve_all_tensors=self.preserve_all)
                self.interpreter.allocate_tensors()
        except (ValueError, RuntimeError) as e:
            raise ConversionError(f"{self.path}: LiteRT cannot load it: {first_line(e)}") from None

    def pair(self, inputs: list[OnnxValue] | None = None, outputs: list[OnnxValue] | None = None):
        """Pairs the file's inputs or outputs with the ONNX model's (see _pair)."""
        interpreter = self.interpreter
        signatures = interpreter.get_signature_list()
        if signatures:
            runner = interpreter.get_signature_runner(next(iter(signatures)))
            details = {"inputs": runner.get_input_details(), "outputs": runner.get_output_details()}
        else:
            details = {"inputs": {d["name"]: d for d in interpreter.get_input_details()},
                       "outputs": {d["name"]: d for d in interpreter.get_output_details()}}
        layouts = io_layout_metadata(self.path)
        if inputs is not None:
            self.inputs = _pair("input", inputs, _ports(details["inputs"], layouts.get("inputs", {})))
        if outputs is not None:
            self.outputs = _pair("output", outputs,
                                 _ports(details["outputs"], layouts.get("outputs", {}), signature=True))

    def resize(self, onnx_shapes: dict[str, tuple[int, ...]]) -> None:
        """Gives the paired inputs other shapes (ONNX layout, by ONNX name) where the file's
        dimensions are dynamic (resize_tensor_input), and allocates again."""
        interpreter = self.interpreter
        for port in self.inputs:
            shape = tuple(onnx_shapes.get(port.onnx_name, port.onnx_shape()))
            if port.permutation is not None:
                shape = tuple(shape[k] for k in port.permutation)
            if shape != port.shape:
                interpreter.resize_tensor_input(port.index, list(shape), strict=True)
                port.shape = shape
        try:
            with quiet_native_stderr():
                interpreter.allocate_tensors()
        except (ValueError, RuntimeError) as e:
            raise ConversionError(f"{self.path}: LiteRT cannot run it at other sizes "
                                  f"({onnx_shapes}): {first_line(e)}") from None

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """ONNX-layout float feeds by ONNX name -> ONNX-layout float outputs by ONNX name."""
        interpreter = self.interpreter
        try:
            for port in self.inputs:
                value = np.asarray(feeds[port.onnx_name])
                if port.permutation is not None:
                    value = np.transpose(value, port.permutation)
                # np.require, not np.ascontiguousarray: that makes a scalar one-dimensional.
                interpreter.set_tensor(port.index, np.require(_to_file(value, port), requirements="C"))
            interpreter.invoke()
        except (ValueError, RuntimeError) as e:
            raise ConversionError(f"{self.path}: LiteRT cannot run it: {first_line(e)}") from None
        outputs = {}
        for port in self.outputs:
            value = _from_file(output_value(interpreter, port.index), port)
            if port.permutation is not None:
                value = np.transpose(value, np.argsort(port.permutation))
            outputs[port.onnx_name] = value
        return outputs


def output_value(interpreter, index: int) -> np.ndarray:
    """The tensor's value after a run; an empty one (a count of zero: no box kept), whose data
    LiteRT's Python API cannot read ("Invalid tensor size"), as an empty array of its shape."""
    try:
        return interpreter.get_tensor(index)
    except ValueError:
        detail = next(d for d in interpreter.get_tensor_details() if d["index"] == index)
        if np.prod(detail["shape"]) != 0:
            raise
        return np.zeros(detail["shape"], detail["dtype"])


@contextlib.contextmanager
def quiet_native_stderr():
    """Silences what native code prints on file descriptor 2 meanwhile (LiteRT's "INFO: Created
    TensorFlow Lite XNNPACK delegate"): qconvert prints one summary line. Errors still arrive as
    exceptions."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as devnull:
            os.dup2(devnull.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _to_file(value: np.ndarray, port: Port) -> np.ndarray:
    if port.quantization is not None:
        scale, zero_point = port.quantization
        info = np.iinfo(port.dtype)
        value = np.clip(np.round(value / scale) + zero_point, info.min, info.max)
    return value.astype(port.dtype)


def _from_file(value: np.ndarray, port: Port) -> np.ndarray:
    if port.quantization is not None:
        scale, zero_point = port.quantization
        return (value.astype(np.float64) - zero_point) * scale
    return value


def _ports(details: dict[str, dict], layouts: dict[str, list[int]], signature: bool = False) -> list[Port]:
    """The file's inputs or outputs; with `signature`, their shapes as shape_signature gives them
    (-1 where the interpreter resizes them: an output whose size the values decide)."""
    ports = []
    for name, d in details.items():
        params = d.get("quantization_parameters", {})
        scales = params.get("scales", np.zeros(0))
        dtype = np.dtype(d["dtype"])
        quantization = None
        if len(scales) and dtype.kind in "iu":
            quantization = (float(scales[0]), int(params["zero_points"][0]))
        perm = layouts.get(name)
        shape = d["shape_signature"] if signature and len(d.get("shape_signature", ())) else d["shape"]
        ports.append(Port(name, name, int(d["index"]), dtype, tuple(int(x) for x in shape),
                          quantization, tuple(perm) if perm else None))
    return ports


def _pair(kind: str, values: list[OnnxValue], ports: list[Port]) -> list[Port]:
    """Each ONNX value's port: the one of the same name, else the next unpaired one (in order)
    whose shape fits; its permutation detected from the shapes when the file had none."""
    names = {v.name for v in values}
    by_name = {p.name: p for p in ports}
    unpaired = [p for p in ports if p.name not in names]
    paired = []
    for value in values:
        port = by_name.get(value.name)
        if port is None:
            port = next((p for p in unpaired if _permutation(value.shape, p.shape) is not None), None)
            if port is None:
                raise ConversionError(f"the .tflite has no {kind} for the ONNX model's {kind} "
                                      f"{value.name!r} (shape {_shown(value.shape)})")
            unpaired.remove(port)
        if port.permutation is None:
            perm = _permutation(value.shape, port.shape)
            if perm is None:
                raise ConversionError(f"{kind} {value.name!r}: the .tflite's shape "
                                      f"{list(port.shape)} does not fit the ONNX shape "
                                      f"{_shown(value.shape)}")
            port.permutation = None if perm == tuple(range(len(perm))) else perm
        port.onnx_name = value.name
        paired.append(port)
    return paired


def _shown(shape: tuple | None) -> str:
    return "unknown" if shape is None else str(list(shape))


def _permutation(onnx_shape: tuple | None, tflite_shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """The axes of the ONNX tensor in the .tflite tensor's order that the shapes allow: identity
    first, then channels-last, then the first that fits (None: none). Symbolic ONNX dims (also
    0 and -1), a .tflite dimension its shape_signature leaves dynamic (-1), and an ONNX shape the
    model does not give, fit anything."""
    rank = len(tflite_shape)
    if onnx_shape is None:
        return tuple(range(rank))
    if len(onnx_shape) != rank:
        return None

    def fits(perm) -> bool:  # 0 and -1 (Paddle's exports) are dynamic too
        return all(not isinstance(onnx_shape[p], int) or onnx_shape[p] <= 0 or tflite_shape[k] < 0
                   or onnx_shape[p] == tflite_shape[k] for k, p in enumerate(perm))

    candidates = [tuple(range(rank))]
    if rank >= 3:
        candidates.append((0,) + tuple(range(2, rank)) + (1,))
    candidates += list(itertools.permutations(range(rank))) if rank <= 6 else []
    return next((c for c in candidates if fits(c)), None)


# --- the ONNX model in onnxruntime ------------------------------------------------------------
@dataclass
class OnnxValue:
    """A graph input or output of the ONNX model: its shape (a symbolic dim is its name; None
    when the model does not say) and dtype."""

    name: str
    shape: tuple | None
    dtype: np.dtype


def onnx_values(proto: onnx.ModelProto, outputs: bool = False) -> list[OnnxValue]:
    """The graph's inputs (not initializers, nor an old exporter's input that a node computes:
    the loader drops those) or outputs."""
    graph = proto.graph
    skipped = {t.name for t in graph.initializer} | _produced(graph) if not outputs else set()
    values = graph.output if outputs else [i for i in graph.input if i.name not in skipped]
    result = []
    for value in values:
        tensor = value.type.tensor_type
        shape = None
        if tensor.HasField("shape"):
            shape = tuple(d.dim_value if d.HasField("dim_value") else d.dim_param for d in tensor.shape.dim)
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)) if tensor.elem_type else None
        result.append(OnnxValue(value.name, shape, dtype))
    return result


def generated_samples(model: TFLiteModel, proto: onnx.ModelProto, count: int,
                      seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Seeded inputs in the ONNX layout and dtypes (check/input_ranges.py says what the graph
    allows): float inputs standard normal, or uniform over their QuantizeLinear's grid
    (NonMaxSuppression's boxes over [0, 1]; an input the graph normalizes by a constant mean and
    std over the span normalized_spans gives); booleans random; integer ids uniform below the size
    of the table they index, lengths within the dimension they mask; integer inputs that only
    meet arithmetic over a wide range
    (_wide_integers); the others (shapes, counts, divisors: not value_inputs) uniform in
    [0, INTEGER_INPUT_HIGH), which keeps shapes small."""
    from .input_ranges import (box_spans, id_bounds, length_bounds, normalized_spans, pair_spans,
                               value_inputs)

    dtypes = {v.name: v.dtype for v in onnx_values(proto)}
    values, ids = value_inputs(proto.graph), id_bounds(proto.graph)
    spans = {**normalized_spans(proto.graph), **box_spans(proto.graph), **pair_spans(proto.graph)}
    lengths = length_bounds(proto.graph, {port.onnx_name: port.onnx_shape() for port in model.inputs})
    rng = np.random.default_rng(seed)
    samples = []
    for _ in range(count):
        sample = {}
        for port in model.inputs:
            name = port.onnx_name
            shape, dtype = port.onnx_shape(), dtypes[name] or np.dtype(np.float32)
            if dtype.kind == "f" and name in spans:
                sample[name] = rng.uniform(*spans[name], shape).astype(dtype)
            elif dtype.kind == "f":
                sample[name] = rng.standard_normal(shape).astype(dtype)
            elif dtype.kind == "b":
                sample[name] = np.asarray(rng.random(shape) > 0.5)  # 0-d too
            elif name in ids:
                sample[name] = rng.integers(0, ids[name], shape).astype(dtype)
            elif name in lengths:
                sample[name] = rng.integers(1, lengths[name] + 1, shape).astype(dtype)
            elif name in values:
                sample[name] = _wide_integers(rng, shape, dtype)
            else:
                sample[name] = rng.integers(0, INTEGER_INPUT_HIGH, shape).astype(dtype)
        samples.append(sample)
    return samples


def _wide_integers(rng: np.random.Generator, shape, dtype: np.dtype) -> np.ndarray:
    """Integers of `dtype` over its range, capped at int32's (WIDE_INTEGER_BITS): magnitudes
    log-uniform, so that small and large values both occur, with both signs for signed types."""
    info = np.iinfo(dtype)
    bits = min(WIDE_INTEGER_BITS, int(np.log2(float(info.max) + 1)))
    magnitude = np.floor(np.exp2(rng.uniform(0, bits, shape))).astype(np.int64) - 1
    sign = np.where(rng.random(shape) < 0.5, -1, 1) if info.min < 0 else 1
    return np.asarray(np.clip(sign * magnitude, info.min, info.max)).astype(dtype)


class Reference:
    """onnxruntime's side of a verification: one session over the ONNX model that gives its graph
    outputs and the `extra` tensors (graph inputs or node outputs). With `path`, the file `proto`
    was read from, onnxruntime reads the model itself (`proto`'s weights may then be missing);
    that takes a model whose `extra` are all graph outputs (see reads_file). Otherwise the session is made from `proto` (CalibrationRun), which must hold its
    weights."""

    def __init__(self, proto: onnx.ModelProto, extra=(), path: str | None = None):
        from ..onnx.runtime import cpu_dependent_ops

        if cpu_dependent_ops(proto.graph):
            path = None  # CalibrationRun makes the session of its reproducible_reference
        outputs = [value.name for value in onnx_values(proto, outputs=True)]
        names = list(dict.fromkeys(outputs + list(extra)))
        if path is not None and set(names) <= set(outputs) and _no_computed_inputs(proto):
            graph_inputs = {value.name for value in onnx_values(proto)}
            self.session = _session_from_file(path, proto)
            self.from_feeds = [n for n in names if n in graph_inputs]
            self.fetched = [n for n in names if n not in graph_inputs]
        else:
            from ..calibration.calibrate import CalibrationRun

            graph = proto.graph
            produced = _produced(graph)
            inputs = list(graph.input)
            try:  # onnxruntime refuses a graph input that a node computes: the model without it
                if any(i.name in produced for i in inputs):
                    del graph.input[:]
                    graph.input.extend(i for i in inputs if i.name not in produced)
                run = CalibrationRun(proto, names)
            finally:
                if len(graph.input) != len(inputs):
                    del graph.input[:]
                    graph.input.extend(inputs)
            self.session, self.fetched, self.from_feeds = run.session, run.fetched, run.from_feeds

    def run(self, feeds: dict[str, np.ndarray], k: int = 0) -> dict[str, np.ndarray]:
        """The values by name on one sample (`k`: its number, for the error message)."""
        try:
            values = dict(zip(self.fetched, self.session.run(self.fetched, feeds)))
        except Exception as e:  # onnxruntime raises its own exception types
            from ..onnx.can_run import onnxruntime_message, shapes_named

            raise ReferenceFailed(f"onnxruntime cannot run the model on sample {k}: "
                                  f"{shapes_named(onnxruntime_message(e), feeds)}") from None
        values.update((name, feeds[name]) for name in self.from_feeds)
        return values


class RecordedReference:
    """A Reference whose values of each sample number are computed once: the same samples checked
    against several .tflite files (the precision planner's plans) need onnxruntime once."""

    def __init__(self, reference: Reference):
        self.reference = reference
        self.values: dict[int, dict[str, np.ndarray]] = {}

    def run(self, feeds: dict[str, np.ndarray], k: int = 0) -> dict[str, np.ndarray]:
        if k not in self.values:
            self.values[k] = self.reference.run(feeds, k)
        return self.values[k]


def reads_file(proto: onnx.ModelProto) -> bool:
    """Whether Reference can read the model from its file: no near-ties to look into (no tensor
    but the outputs to fetch), no graph input that a node computes (onnxruntime refuses it), no
    integer product to compute exactly (reproducible_reference)."""
    from ..onnx.runtime import cpu_dependent_ops

    return (not step_fetches(proto, output_rules(proto)) and _no_computed_inputs(proto)
            and not cpu_dependent_ops(proto.graph))  # (rewritten in Reference: needs the weights)


def opens_by_name(path: str) -> bool:
    """Whether onnxruntime (or LiteRT) can open the file at `path` by name: they take UTF-8 paths
    only (a name with a byte that is not UTF-8 goes through the model in memory instead)."""
    try:
        path.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def _no_computed_inputs(proto: onnx.ModelProto) -> bool:
    produced = _produced(proto.graph)
    return not any(i.name in produced for i in proto.graph.input)


def _produced(graph: onnx.GraphProto) -> set[str]:
    return {o for node in graph.node for o in node.output if o}


def _session_from_file(path: str, proto: onnx.ModelProto):
    """An onnxruntime session reading the model file (and its external data) itself, with the
    options CalibrationRun gives the model (onnx/runtime.py session_options: the basic level for a
    float graph, none for one with Q/DQ pairs)."""
    import onnxruntime as ort

    from ..onnx.runtime import session_options

    options = session_options(proto, ort.GraphOptimizationLevel.ORT_ENABLE_BASIC)
    options.log_severity_level = 4  # fatal only: a model it refuses is one line from qconvert
    try:
        return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime raises its own exception types
        from ..onnx.can_run import onnxruntime_message

        raise ReferenceFailed(f"onnxruntime cannot load the model for verification: "
                              f"{onnxruntime_message(e)}") from None


# --- both ------------------------------------------------------------------------------------
def run_both(proto: onnx.ModelProto, model: TFLiteModel, samples: list[dict[str, np.ndarray]],
             extra: list[str] = (), reference: Reference | None = None):
    """For each sample: (onnxruntime's values of the graph outputs and of the `extra` tensors by
    ONNX name, the .tflite's outputs by ONNX name). `model`'s inputs are paired; its outputs are
    paired on the first sample, whose reference gives their shapes when the model does not.
    `reference` (made from `proto` and `extra` when None) runs the ONNX model."""
    outputs = onnx_values(proto, outputs=True)
    reference = reference or Reference(proto, extra)
    for k, sample in enumerate(samples):
        feeds = {port.onnx_name: sample[port.onnx_name] for port in model.inputs}
        values = reference.run(feeds, k)
        if k == 0:
            try:
                model.pair(outputs=[OnnxValue(v.name, np.shape(values[v.name]), v.dtype) for v in outputs])
            except ConversionError:
                _check_declared_shapes(outputs, values)  # the likelier cause, said when it is
                raise
        yield values, model.run(feeds)


def _check_declared_shapes(outputs: list[OnnxValue], values: dict[str, np.ndarray]) -> None:
    """ConversionError when onnxruntime gives an output another shape than the model declares
    (where the outputs could not be paired): the inputs do not fit the model (a Slice whose starts are fed, declared for the values it
    expects), and the .tflite, built to the declared shape, cannot be compared on them."""
    for v in outputs:
        got = np.shape(values[v.name])
        if v.shape is None or len(v.shape) != len(got):
            continue
        if any(isinstance(d, int) and d > 0 and d != g for d, g in zip(v.shape, got)):
            raise ConversionError(
                f"output {v.name!r}: onnxruntime gives it the shape {list(got)} on the check's "
                f"inputs, but the model declares {_shown(v.shape)}: the output's shape depends on "
                "input values; check with inputs that fit it (--verify-data) or convert with "
                "--no-verify")


def fitted_samples(samples: list[dict[str, np.ndarray]],
                   shapes: dict[str, tuple[int, ...]]) -> list[dict[str, np.ndarray]]:
    """The samples at other input shapes (ONNX layout, by name): each axis cut to the new size,
    or repeated from its start to reach it, so that the values are the data's own (a file
    checked at sizes its data was not recorded at)."""
    fitted = []
    for sample in samples:
        sample = dict(sample)
        for name, shape in shapes.items():
            value = sample[name]
            for axis, size in enumerate(shape):
                if value.shape[axis] != size:
                    value = np.take(value, np.arange(size), axis=axis, mode="wrap")
            sample[name] = value
        fitted.append(sample)
    return fitted


def prepare(proto: onnx.ModelProto, tflite_path: str, samples, count: int,
            preserve_all: bool = False,
            shapes: dict[str, tuple[int, ...]] | None = None) -> tuple[TFLiteModel, list[dict[str, np.ndarray]]]:
    """The .tflite in LiteRT with its inputs paired (resized to `shapes`, ONNX-layout input
    shapes by name, where they are given), and the samples (`count` generated ones when
    `samples` is None)."""
    model = TFLiteModel(tflite_path, preserve_all=preserve_all)
    model.pair(inputs=onnx_values(proto))
    if shapes:
        model.resize(shapes)
    return model, samples if samples is not None else generated_samples(model, proto, count)
