"""Verification: the ONNX model in onnxruntime and a .tflite in LiteRT on the same inputs.

Works for any .tflite, also one another tool wrote. Inputs and outputs are paired by the file's
signature names, then by order and shape; each pair's layout permutation comes from the file's
`qconvert_io_layout` metadata when qconvert wrote it (see tflite/writer.py), else from the shapes
(equal shapes: none; otherwise the channels-last permutation, or the first permutation that fits).
int8/uint8/int16 inputs and outputs are quantized and dequantized with the tensor's params.

Per model output, over all samples: SQNR (10 log10 of the reference's energy over the error's),
max and mean absolute error, cosine similarity, top-1 agreement when the output is
classifier-shaped (one axis longer than 1), and the worst slice along the output's feature axis
(the shortest axis longer than 1 after the first, when two are): the SQNR of every slice, the
lowest one named, so that a collapsed score channel inside a tensor that box coordinates dominate
shows. In a slice, differences within SLICE_TOLERANCE of the output's largest magnitude do not
count: two float runtimes differ by that much from summation order alone, and a slice of small
values would otherwise look broken in a faithful float conversion.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import sys
from dataclasses import asdict, dataclass, field

import numpy as np
import onnx

from .errors import ConversionError
from .tflite.writer import IO_LAYOUT_METADATA

INTEGER_INPUT_HIGH = 10  # generated integer inputs are uniform in [0, 10)
SLICE_TOLERANCE = 2.0 ** -16  # relative to the output's largest magnitude (128 float32 steps)


@dataclass
class OutputCheck:
    """How one model output of the .tflite compares with onnxruntime's."""

    name: str
    sqnr_db: float
    worst_slice_sqnr_db: float | None  # None: no feature axis (or no slice with a signal)
    worst_slice: str | None  # "axis 1, index 5" of that slice
    max_abs_error: float
    mean_abs_error: float
    cosine: float
    top1_agreement: float | None  # None: not classifier-shaped


@dataclass
class Verification:
    outputs: list[OutputCheck]
    samples: int
    min_sqnr: float | None = None
    passed: bool = True
    data: str = "generated"  # where the inputs came from

    @property
    def worst(self) -> OutputCheck:
        return min(self.outputs, key=lambda o: o.sqnr_db)

    @property
    def worst_slice(self) -> OutputCheck | None:
        sliced = [o for o in self.outputs if o.worst_slice_sqnr_db is not None]
        return min(sliced, key=lambda o: o.worst_slice_sqnr_db) if sliced else None

    def below(self, threshold: float) -> list[str]:
        """The outputs (or their worst slice) below `threshold` dB, described."""
        low = []
        for o in self.outputs:
            if o.sqnr_db < threshold:
                low.append(f"{o.name} {_db(o.sqnr_db)}")
            elif o.worst_slice_sqnr_db is not None and o.worst_slice_sqnr_db < threshold:
                low.append(f"{o.name} ({o.worst_slice}) {_db(o.worst_slice_sqnr_db)}")
        return low

    def summary(self) -> str:
        """`verify: worst output 'y' 41.2 dB, worst slice 'y' axis 1, index 4 22.0 dB (8 samples)`."""
        worst = self.worst
        text = f"verify: worst output {worst.name!r} {_db(worst.sqnr_db)}"
        sliced = self.worst_slice
        if sliced is not None:
            text += f", worst slice {sliced.name!r} {sliced.worst_slice} {_db(sliced.worst_slice_sqnr_db)}"
        return text + f" ({self.samples} samples)"

    def as_dict(self) -> dict:
        result = asdict(self)
        result["outputs"] = [{k: json_number(v) for k, v in o.items()} for o in result["outputs"]]
        return result


def _db(value: float) -> str:
    return "inf dB" if value == math.inf else f"{value:.1f} dB"


def json_number(value):
    """JSON has no infinity: an exact match's SQNR is written as the string "inf"."""
    if isinstance(value, float) and not math.isfinite(value):
        return "inf" if value > 0 else "-inf" if value < 0 else "nan"
    return value


# --- metrics ---------------------------------------------------------------------------------
def sqnr_db(reference: np.ndarray, actual: np.ndarray, tolerance: float = 0.0) -> float:
    """10 log10(sum ref^2 / sum (actual - ref)^2), errors first reduced by `tolerance`: inf for
    a match, -inf for an error on a zero reference or a value that is not finite (a NaN or an
    infinity where the reference is finite)."""
    ref = reference.astype(np.float64)
    error = np.abs(actual.astype(np.float64) - ref)
    if tolerance:
        error = np.maximum(error - tolerance, 0.0)
    noise = float(np.sum(error ** 2))
    signal = float(np.sum(ref ** 2))
    if noise == 0:
        return math.inf
    if signal == 0 or not math.isfinite(noise):
        return -math.inf
    return 10 * math.log10(signal / noise)


def feature_axis(shape: tuple[int, ...]) -> int | None:
    """The output's channel/feature axis. A rank-4 output is an NCHW map (the ONNX layout): its
    channels, axis 1, or none for a single-channel map (a segmenter's probabilities: its rows or
    columns are no features). Otherwise the shortest axis longer than 1 after the first (the last
    of equals); None unless two axes after the first are longer than 1 (a classifier's
    [1, classes] has no slices: each would hold one value per sample, and top-1 agreement
    speaks for it)."""
    if len(shape) == 4:
        return 1 if shape[1] > 1 else None
    axes = [a for a in range(1, len(shape)) if shape[a] > 1]
    return min(reversed(axes), key=lambda a: shape[a]) if len(axes) >= 2 else None


def check_output(name: str, reference: np.ndarray, actual: np.ndarray) -> OutputCheck:
    """The metrics of one output; both are [samples, *shape] in the ONNX layout. Where the
    reference itself is not finite (onnxruntime overflowed), there is nothing to compare: those
    values count as matching; a non-finite value of the .tflite elsewhere is an infinite error."""
    ref = reference.astype(np.float64)
    got = actual.astype(np.float64)
    if ref.shape != got.shape:
        raise ConversionError(f"output {name!r}: the .tflite gives shape {list(got.shape[1:])}, "
                              f"onnxruntime {list(ref.shape[1:])}")
    unknown = ~np.isfinite(ref)
    if unknown.any():
        ref, got = np.where(unknown, 0.0, ref), np.where(unknown, 0.0, got)
    error = np.where(np.isfinite(got), np.abs(got - ref), np.inf)
    if np.isfinite(got).all():
        norms = float(np.linalg.norm(ref)) * float(np.linalg.norm(got))
        cosine = float(np.sum(ref * got)) / norms if norms else (1.0 if not error.any() else 0.0)
    else:
        cosine = math.nan
    check = OutputCheck(name, sqnr_db(ref, got), None, None, float(error.max(initial=0.0)),
                        float(error.mean()) if error.size else 0.0, cosine, None)
    per_sample = ref.shape[1:]
    if sum(d > 1 for d in per_sample) == 1 and ref.size:
        count = len(ref)
        check.top1_agreement = float(np.mean(ref.reshape(count, -1).argmax(1)
                                             == got.reshape(count, -1).argmax(1)))
    axis = feature_axis(ref.shape[1:])
    if axis is not None:
        moved_ref = np.moveaxis(ref, axis + 1, 0).reshape(ref.shape[axis + 1], -1)
        moved_got = np.moveaxis(got, axis + 1, 0).reshape(ref.shape[axis + 1], -1)
        tolerance = float(np.abs(ref).max()) * SLICE_TOLERANCE
        slices = [(sqnr_db(r, g, tolerance), k) for k, (r, g) in enumerate(zip(moved_ref, moved_got))
                  if np.any(r)]
        if slices:
            worst, index = min(slices)
            check.worst_slice_sqnr_db, check.worst_slice = worst, f"axis {axis}, index {index}"
    return check


# --- the two runtimes ------------------------------------------------------------------------
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
        try:
            with quiet_native_stderr():
                self.interpreter = Interpreter(model_path=self.path, num_threads=1,
                                               experimental_op_resolver_type=resolver,
                                               experimental_preserve_all_tensors=self.preserve_all)
                self.interpreter.allocate_tensors()
        except (ValueError, RuntimeError) as e:
            raise ConversionError(f"{self.path}: LiteRT cannot load it: {_first_line(e)}") from None

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
        layouts = _layout_metadata(self.path)
        if inputs is not None:
            self.inputs = _pair("input", inputs, _ports(details["inputs"], layouts.get("inputs", {})))
        if outputs is not None:
            self.outputs = _pair("output", outputs,
                                 _ports(details["outputs"], layouts.get("outputs", {})))

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """ONNX-layout float feeds by ONNX name -> ONNX-layout float outputs by ONNX name."""
        interpreter = self.interpreter
        for port in self.inputs:
            value = np.asarray(feeds[port.onnx_name])
            if port.permutation is not None:
                value = np.transpose(value, port.permutation)
            interpreter.set_tensor(port.index, np.ascontiguousarray(_to_file(value, port)))
        interpreter.invoke()
        outputs = {}
        for port in self.outputs:
            value = _from_file(interpreter.get_tensor(port.index), port)
            if port.permutation is not None:
                value = np.transpose(value, np.argsort(port.permutation))
            outputs[port.onnx_name] = value
        return outputs


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


def _first_line(error: Exception) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


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


def _ports(details: dict[str, dict], layouts: dict[str, list[int]]) -> list[Port]:
    ports = []
    for name, d in details.items():
        params = d.get("quantization_parameters", {})
        scales = params.get("scales", np.zeros(0))
        dtype = np.dtype(d["dtype"])
        quantization = None
        if len(scales) and dtype.kind in "iu":
            quantization = (float(scales[0]), int(params["zero_points"][0]))
        perm = layouts.get(name)
        ports.append(Port(name, name, int(d["index"]), dtype, tuple(int(x) for x in d["shape"]),
                          quantization, tuple(perm) if perm else None))
    return ports


def _layout_metadata(path: str) -> dict[str, dict[str, list[int]]]:
    """The permutations qconvert recorded in the file, {"inputs": {...}, "outputs": {...}}."""
    from .tflite import schema_generated as S

    with open(path, "rb") as f:
        data = f.read()
    model = S.Model.GetRootAs(data, 0)
    for i in range(model.MetadataLength()):
        entry = model.Metadata(i)
        if entry.Name() and entry.Name().decode() == IO_LAYOUT_METADATA:
            raw = model.Buffers(entry.Buffer()).DataAsNumpy()
            return json.loads(bytes(raw).decode())
    return {"inputs": {}, "outputs": {}}


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
    first, then channels-last, then the first that fits (None: none). Symbolic ONNX dims, and an
    ONNX shape the model does not give, fit anything."""
    rank = len(tflite_shape)
    if onnx_shape is None:
        return tuple(range(rank))
    if len(onnx_shape) != rank:
        return None

    def fits(perm) -> bool:
        return all(not isinstance(onnx_shape[p], int) or onnx_shape[p] in (tflite_shape[k], 0)
                   for k, p in enumerate(perm))

    candidates = [tuple(range(rank))]
    if rank >= 3:
        candidates.append((0,) + tuple(range(2, rank)) + (1,))
    candidates += list(itertools.permutations(range(rank))) if rank <= 6 else []
    return next((c for c in candidates if fits(c)), None)


# --- verification ----------------------------------------------------------------------------
@dataclass
class OnnxValue:
    """A graph input or output of the ONNX model: its shape (a symbolic dim is its name; None
    when the model does not say) and dtype."""

    name: str
    shape: tuple | None
    dtype: np.dtype


def onnx_values(proto: onnx.ModelProto, outputs: bool = False) -> list[OnnxValue]:
    """The graph's inputs (not initializers) or outputs."""
    graph = proto.graph
    initializers = {t.name for t in graph.initializer}
    values = graph.output if outputs else [i for i in graph.input if i.name not in initializers]
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
    """Seeded inputs in the ONNX layout and dtypes: standard normal for float inputs, uniform in
    [0, INTEGER_INPUT_HIGH) for integer ones, random for booleans."""
    dtypes = {v.name: v.dtype for v in onnx_values(proto)}
    rng = np.random.default_rng(seed)
    samples = []
    for _ in range(count):
        sample = {}
        for port in model.inputs:
            shape, dtype = port.onnx_shape(), dtypes[port.onnx_name] or np.dtype(np.float32)
            if dtype.kind == "f":
                sample[port.onnx_name] = rng.standard_normal(shape).astype(dtype)
            elif dtype.kind == "b":
                sample[port.onnx_name] = rng.random(shape) > 0.5
            else:
                sample[port.onnx_name] = rng.integers(0, INTEGER_INPUT_HIGH, shape).astype(dtype)
        samples.append(sample)
    return samples


def run_both(proto: onnx.ModelProto, model: TFLiteModel, samples: list[dict[str, np.ndarray]],
             extra: list[str] = ()):
    """For each sample: (onnxruntime's values of the graph outputs and of the `extra` tensors by
    ONNX name, the .tflite's outputs by ONNX name). `model`'s inputs are paired; its outputs are
    paired on the first sample, whose reference gives their shapes when the model does not."""
    from .quantize.calibrate import CalibrationRun

    outputs = onnx_values(proto, outputs=True)
    names = list(dict.fromkeys([value.name for value in outputs] + list(extra)))
    run = CalibrationRun(proto, names)
    for k, sample in enumerate(samples):
        feeds = {port.onnx_name: sample[port.onnx_name] for port in model.inputs}
        try:
            reference = dict(zip(run.fetched, run.session.run(run.fetched, feeds)))
        except Exception as e:  # onnxruntime raises its own exception types
            raise ConversionError(f"onnxruntime failed on sample {k}: {_first_line(e)}") from None
        reference.update((name, feeds[name]) for name in run.from_feeds)
        if k == 0:
            model.pair(outputs=[OnnxValue(v.name, np.shape(reference[v.name]), v.dtype) for v in outputs])
        yield reference, model.run(feeds)


def prepare(proto: onnx.ModelProto, tflite_path: str, samples, count: int,
            preserve_all: bool = False) -> tuple[TFLiteModel, list[dict[str, np.ndarray]]]:
    """The .tflite in LiteRT with its inputs paired, and the samples (`count` generated ones when
    `samples` is None)."""
    model = TFLiteModel(tflite_path, preserve_all=preserve_all)
    model.pair(inputs=onnx_values(proto))
    return model, samples if samples is not None else generated_samples(model, proto, count)


class OutputStacks:
    """Both models' outputs gathered sample by sample (run_both's pairs), then compared."""

    def __init__(self, proto: onnx.ModelProto):
        self.names = [value.name for value in onnx_values(proto, outputs=True)]
        self.expected: dict[str, list] = {name: [] for name in self.names}
        self.actual: dict[str, list] = {name: [] for name in self.names}

    def add(self, reference: dict[str, np.ndarray], outputs: dict[str, np.ndarray]) -> None:
        for name in self.names:
            self.expected[name].append(reference[name])
            self.actual[name].append(outputs[name])

    def verification(self, samples: int, min_sqnr: float | None = None,
                     data: str = "generated") -> Verification:
        checks = [check_output(name, np.stack(self.expected[name]), np.stack(self.actual[name]))
                  for name in self.names]
        result = Verification(checks, samples, min_sqnr, data=data)
        result.passed = min_sqnr is None or not result.below(min_sqnr)
        return result


def verify(proto: onnx.ModelProto, tflite_path: str, samples: list[dict[str, np.ndarray]] | None = None,
           count: int = 8, min_sqnr: float | None = None, data: str = "generated") -> Verification:
    """Runs both models on `samples` (ONNX-layout inputs by name; None: `count` generated ones)
    and compares every output. `proto` must hold its weights."""
    model, samples = prepare(proto, tflite_path, samples, count)
    stacks = OutputStacks(proto)
    for reference, outputs in run_both(proto, model, samples):
        stacks.add(reference, outputs)
    return stacks.verification(len(samples), min_sqnr, data)
