"""A conversion's options as one frozen object, built and checked once (`options_from_flags`) by
the command line (cli.py, from its flags and their QCONVERT_* variables) and the Python API
(qconvert.convert, from its keywords) alike, so both give the same checks and messages.

A new option is one field of the part it belongs to (input, quantize, weights, verify, plan),
one keyword of options_from_flags with its check, one click option in cli.py (its QCONVERT_*
variable follows from the flag's name there), and its use in the driver. Malformed values and
contradictions are errors.UsageError, worded as click words its own ("Invalid value for ...").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from ..calibration.data import unused_decoding
from ..calibration.files import FileDecoding
from ..errors import UsageError
from ..quantize.calibration_methods import MINMAX, CalibrationMethod, parse_calibration_method
from ..quantize.params import MAX_SCALE, MIN_SCALE
from ..targets import Target, load_target
from ..transforms.pipeline import QuantizeOptions

INT32_MAX = 2**31 - 1  # TFLite shapes are int32
IO_LAYOUTS = ("nhwc", "onnx")
IO_TYPES = ("float", "int8", "uint8")
ACTIVATION_TYPES = ("int8", "int16")
WEIGHT_ROUNDINGS = ("output", "nearest")  # --weight-rounding (quantize/rounding.py)
# --precision: planned (plan/planner.py), all int8, or float (a model that arrives quantized
# converts to its own quantization unless asked for the float file)
PRECISIONS = ("auto", "int8", "float")
MAX_TARGET_SQNR = 200.0
DEFAULT_TARGET_SQNR = 20.0  # the plan's target without --target-sqnr (docs/guide.md "Precision plan": why)
WEIGHT_ONLY_MIN_ELEMENTS = 1024
PLAN_SAMPLES = 8  # the plan's samples (of the calibration data; a metric's: without --verify-samples)
QUANTIZED_VERIFY_SAMPLES = 8  # a quantized conversion's error is statistical
REPORT_SUFFIXES = (".json", ".html", ".htm")


@dataclass(frozen=True)
class InputOptions:
    shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)  # --input-shape
    io_layout: str = "nhwc"  # --io-layout
    # How a folder of images or .wav files (--calibration, --verify-data) becomes samples: --mean,
    # --std, --sample-rate and the --input-shape pins (calibration/files.py).
    decoding: FileDecoding = field(default_factory=FileDecoding)


@dataclass(frozen=True)
class QuantizeRequest:
    """--quantize: how to calibrate, and the quantize pipeline's options (`steps`; their
    keep_float is filled from the model's nodes that `keep_float` patterns pick)."""

    steps: QuantizeOptions = field(default_factory=QuantizeOptions)
    calibration: str | Mapping | None = None  # --calibration: a path, or arrays (the API)
    samples: int | None = None  # --calibration-samples (None: all)
    method: CalibrationMethod = MINMAX  # --calibration-method
    keep_float: tuple[str, ...] = ()  # --keep-float patterns
    target: Target = field(default_factory=lambda: load_target(None))  # --target (targets/)


@dataclass(frozen=True)
class WeightOptions:
    mode: str  # "int8" (--weight-only) or "float16" (--float16)
    min_elements: int = WEIGHT_ONLY_MIN_ELEMENTS  # --weight-only-min-elements


@dataclass(frozen=True)
class VerifyOptions:
    """Whether and how the written model is checked against onnxruntime (check/verify.py)."""

    enabled: bool = False
    asked: bool = False  # a flag asked for it: onnxruntime failing is then an error, not a warning
    samples: int = 1  # --verify-samples, else 1 for a float conversion on generated inputs, else 8
    data: str | None = None  # --verify-data, else the calibration file (None: generated inputs)
    min_sqnr: float | None = None  # --min-sqnr
    report: str | None = None  # --report FILE.json or FILE.html
    float_check: bool = False  # a float conversion: exact against onnxruntime (verify.py)
    latency: bool = False  # time the written model against the float model (check/latency.py)
    # judged by the error the model's own QDQ rounding explains (set by the driver for a model
    # converted with its own pairs, without --min-sqnr; check/rounding_bound.py)
    rounding_bound: bool = False
    # input.decoding, for `data`: the verify command builds VerifyOptions alone.
    decoding: FileDecoding = field(default_factory=FileDecoding)


@dataclass(frozen=True)
class PlanOptions:
    """--precision auto (the default with --quantize --calibration): plan precision to
    `target_sqnr` dB (--target-sqnr) on the first `samples` samples of the calibration-format
    file `data` (None: the calibration data; with a SQNR target always); with `metric` (the API's
    evaluate and max_drop, a planner.Metric), to the metric instead, on verify_data's samples."""

    target_sqnr: float = DEFAULT_TARGET_SQNR
    samples: int = PLAN_SAMPLES
    data: str | Mapping | None = None
    metric: object = None


@dataclass(frozen=True)
class Options:
    input: InputOptions = field(default_factory=InputOptions)
    quantize: QuantizeRequest | None = None  # None: float activations
    weights: WeightOptions | None = None  # --weight-only or --float16
    verify: VerifyOptions = field(default_factory=VerifyOptions)
    plan: PlanOptions | None = None
    # The options for a model that arrives quantized (QuantizeLinear/DequantizeLinear pairs on its
    # activations) when none were asked for: --quantize with the model's own params, verified as
    # a quantized conversion (None: --quantize, --weight-only, --float16 or --precision float).
    arrived_quantized: Options | None = None


def options_from_flags(*, input_shapes=(), io_layout="nhwc", quantize=False, calibration=None,
                       calibration_samples=None, calibration_method=None, mean=None, std=None,
                       sample_rate=None, default_range=None,
                       io_type=None, activations=None, per_tensor_fc=False, weight_rounding=None,
                       no_bias_correction=False, no_equalization=False, weight_only=False,
                       weight_only_min_elements=None, float16=False, keep_float=(),
                       precision=None, target_sqnr=None, target=None, evaluate=None, max_drop=None,
                       verify=False, no_verify=False, verify_samples=None, verify_data=None,
                       min_sqnr=None, report=None, latency=False) -> Options:
    """The Options of a conversion from the command line's flags (the keywords are the flags'
    parameter names; the API gives Python values: input_shapes a {name: dims} mapping,
    default_range (MIN, MAX), keep_float a pattern or patterns). The checks run in the command
    line's order, so both report the same first error."""
    calibration_samples = _positive("--calibration-samples", calibration_samples)
    weight_only_min_elements = _positive("--weight-only-min-elements", weight_only_min_elements)
    verify_samples = _positive("--verify-samples", verify_samples)
    io_layout = _choice("--io-layout", io_layout, IO_LAYOUTS)
    io_type = _choice("--io-type", io_type, IO_TYPES)
    activations = _choice("--activations", activations, ACTIVATION_TYPES)
    precision = _choice("--precision", precision, PRECISIONS)
    target_sqnr, min_sqnr = _number("--target-sqnr", target_sqnr), _number("--min-sqnr", min_sqnr)
    weight_rounding = _choice("--weight-rounding", weight_rounding, WEIGHT_ROUNDINGS)
    (quantize, per_tensor_fc, no_bias_correction, no_equalization, weight_only, float16, verify, no_verify,
     latency) = (
        _flag(f, v) for f, v in (("--quantize", quantize), ("--per-tensor-fc", per_tensor_fc),
                                 ("--no-bias-correction", no_bias_correction),
                                 ("--no-equalization", no_equalization),
                                 ("--weight-only", weight_only), ("--float16", float16),
                                 ("--verify", verify), ("--no-verify", no_verify),
                                 ("--latency", latency)))
    keep_float = (keep_float,) if isinstance(keep_float, str) else tuple(keep_float)

    shapes = parse_input_shape(input_shapes)
    decoding = file_decoding(mean, std, sample_rate, shapes, paths=(calibration, verify_data))
    weights = _weight_options(weight_only, weight_only_min_elements, float16, quantize, calibration)
    device = _target(target, quantize)
    steps = _quantize_steps(quantize, calibration, calibration_samples, default_range, io_type,
                            per_tensor_fc, activations, weight_rounding, no_bias_correction,
                            no_equalization, device)
    method = _calibration_method(calibration_method, calibration, quantize)
    if keep_float and steps is None:
        raise UsageError("--keep-float only applies with --quantize")
    plan = _plan_options(precision, target_sqnr, steps, calibration, verify_samples, verify_data,
                         _metric(evaluate, max_drop))
    request = None if steps is None else QuantizeRequest(steps, calibration, calibration_samples,
                                                           method, keep_float, device)
    check_report_path(report)
    verification = _verify_options(verify, no_verify, verify_samples, verify_data, min_sqnr, report,
                                   latency, request, weights, calibration, decoding)
    options = Options(input=InputOptions(shapes, io_layout, decoding), quantize=request, weights=weights,
                      verify=verification, plan=plan)
    if request is None and weights is None and precision != "float":
        options = replace(options, arrived_quantized=_arrived_quantized(options, verify_samples))
    return options


def _arrived_quantized(options: Options, verify_samples: int | None) -> Options:
    """`options` (a float conversion's) as --quantize for a model with its own QDQ pairs: the
    default target, no calibration, and the verification a quantized conversion gets (8 samples,
    judged by the bound the pairs' rounding explains, not the float check)."""
    target = load_target(None)
    steps = _quantize_steps(True, None, None, None, None, False, None, target=target)
    verify = replace(options.verify, float_check=False,
                     samples=verify_samples or QUANTIZED_VERIFY_SAMPLES)
    return replace(options, quantize=QuantizeRequest(steps, target=target), verify=verify)


def _verify_options(verify, no_verify, samples, data, min_sqnr, report, latency, request, weights,
                    calibration, decoding) -> VerifyOptions:
    """The verification the flags ask for (every conversion verifies but --quantize without
    --calibration; 1 generated sample for a float conversion, else 8)."""
    asked = _verification_flags(verify, samples, data, min_sqnr, report)
    enabled = _verification_wanted(no_verify, request, asked)
    float_conversion = request is None and weights is None
    if samples is None:
        generated = data is None and calibration is None
        samples = 1 if float_conversion and generated else QUANTIZED_VERIFY_SAMPLES
    return VerifyOptions(enabled, bool(asked), samples,
                         data or (calibration if isinstance(calibration, str) else None),
                         min_sqnr, report, float_conversion,
                         latency=_latency(latency, enabled, float_conversion), decoding=decoding)


def fake_quant_options(**flags) -> Options:
    """The Options of `qconvert fakequant` (and qconvert.fake_quant): --quantize with the
    conversion's flags that decide where and how the int8 model quantizes; nothing verified."""
    return options_from_flags(quantize=True, no_verify=True, **flags)


# --- the checks ---------------------------------------------------------------------------------

def _invalid(flag: str, message: str, quoted: bool = True) -> UsageError:
    """click's wording of a bad value (quoted flag: a type's check; unquoted: qconvert's own)."""
    return UsageError(f"Invalid value for {repr(flag) if quoted else flag}: {message}")


def _positive(flag: str, value) -> int | None:
    if value is None:
        return None
    try:
        number = int(value) if not isinstance(value, (bool, float)) else None
    except (TypeError, ValueError):
        number = None
    if number is None:
        raise _invalid(flag, f"{value!r} is not a valid integer range.")
    if number < 1:
        raise _invalid(flag, f"{number} is not in the range x>=1.")
    return number


def _choice(flag: str, value, choices: tuple[str, ...]) -> str | None:
    if value is None or value in choices:
        return value
    raise _invalid(flag, f"{value!r} is not one of {', '.join(repr(c) for c in choices)}.")


def _number(flag: str, value) -> float | None:
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        raise _invalid(flag, f"{value!r} is not a valid float.") from None


_TRUE, _FALSE = ("1", "true", "t", "yes", "y", "on"), ("0", "false", "f", "no", "n", "off", "")


def _flag(flag: str, value) -> bool:
    if isinstance(value, (bool, np.bool_)) or value in (0, 1):
        return bool(value)
    text = str(value).strip().lower()
    if text in _TRUE or text in _FALSE:
        return text in _TRUE
    raise _invalid(flag, f"{value!r} is not a valid boolean.")


def _channel_values(flag: str, value, positive: bool = False) -> tuple[float, ...] | None:
    """--mean or --std: a number or comma-separated numbers (the API: a number or a sequence too),
    finite; --std's above 0."""
    if value is None:
        return None
    if isinstance(value, str):
        parts = value.split(",")
    elif isinstance(value, (int, float, np.number)) and not isinstance(value, bool):
        parts = [value]
    else:
        parts = list(value) if hasattr(value, "__iter__") else []
    try:
        values = tuple(float(part) for part in parts)
    except (TypeError, ValueError):
        values = ()
    if not values or not all(np.isfinite(values)) or (positive and min(values) <= 0):
        above = ", each above 0" if positive else ""
        raise _invalid(flag, f"{value!r}: expected a number, or comma-separated numbers one per "
                       f"channel{above}", quoted=False)
    return values


def file_decoding(mean=None, std=None, sample_rate=None, shapes=None, *, paths=(),
                  data_flags: str = "--calibration or --verify-data") -> FileDecoding:
    """The FileDecoding of --mean, --std and --sample-rate and the --input-shape pins, for the
    data `paths` (the flags `data_flags`; the verify command's is --data). The three apply to a
    folder only, so without a path among `paths` (the API's arrays are no path) they are a usage
    error, as is one that no path's data would read (calibration/data.py's unused_decoding)."""
    mean, std = _channel_values("--mean", mean), _channel_values("--std", std, positive=True)
    sample_rate = _positive("--sample-rate", sample_rate)
    given = [flag for flag, value in (("--mean", mean), ("--std", std), ("--sample-rate", sample_rate))
             if value is not None]
    if given and not any(isinstance(path, str) for path in paths):
        raise UsageError(f"{given[0]} applies to a folder of images or .wav files given by {data_flags}")
    decoding = FileDecoding(mean, std, sample_rate, dict(shapes or {}))
    unused = unused_decoding(decoding, paths) if given else None
    if unused:
        raise UsageError(unused)
    return decoding


def parse_input_shape(values) -> dict[str, tuple[int, ...]]:
    """--input-shape NAME:D1,D2,... values (or the API's {name: dims}) -> {name: shape}."""
    if isinstance(values, Mapping):
        values = _shape_flags(values)
    shapes = {}
    for value in values:
        name, sep, dims = value.rpartition(":")
        try:
            shape = tuple(int(d) for d in dims.split(",")) if dims else ()
        except ValueError:
            shape = None
        if not sep or not name or shape is None or any(not 0 < d <= INT32_MAX for d in shape):
            raise _invalid("--input-shape", f"{value!r}: expected NAME:D1,D2,... with positive "
                           f"integers up to {INT32_MAX} (TFLite shapes are int32)", quoted=False)
        if name in shapes:
            raise _invalid("--input-shape", f"{name!r} is given twice", quoted=False)
        shapes[name] = shape
    return shapes


def _shape_flags(shapes: Mapping) -> tuple[str, ...]:
    """{name: dims} as --input-shape values, checked by the flag's parser."""
    try:
        return tuple(f"{name}:{','.join(str(d) for d in dims)}" for name, dims in shapes.items())
    except TypeError:
        raise UsageError("input_shapes: every value must be a sequence of dimensions") from None


def parse_default_range(value) -> tuple[float, float]:
    """--default-range MIN,MAX (or the API's (MIN, MAX)) -> (min, max).

    Two finite numbers, MIN < MAX, and a range an int8 kernel can represent: its scale (the range
    widened to contain 0, over 255 steps) within [2^-60, 2^60] (quantize/params.py MIN_SCALE,
    MAX_SCALE). An empty value is malformed too, never "no range"."""
    if not isinstance(value, str):
        try:
            low, high = (float(v) for v in value)
        except (TypeError, ValueError):
            raise UsageError(f"default_range: expected (MIN, MAX) or 'MIN,MAX', not {value!r}") from None
        value = f"{low!r},{high!r}"
    try:
        lo, hi = (float(v) for v in value.split(","))
    except ValueError:
        lo = hi = None
    if lo is None or not (np.isfinite(lo) and np.isfinite(hi)) or lo >= hi:
        raise _invalid("--default-range", f"{value!r}: expected MIN,MAX with finite MIN < MAX",
                       quoted=False)
    scale = (max(hi, 0.0) - min(lo, 0.0)) / 255
    if not MIN_SCALE <= scale <= MAX_SCALE:
        raise _invalid("--default-range", f"{value!r}: a range of {hi - lo:.3g} gives int8 scale "
                       f"{scale:.3g}, outside [2^-60, 2^60], the scales int8 kernels represent",
                       quoted=False)
    return lo, hi


def _weight_options(weight_only: bool, min_elements, float16: bool, quantize: bool,
                    calibration) -> WeightOptions | None:
    """--weight-only (int8) or --float16 (None: neither); contradictions are usage errors."""
    if min_elements is not None and not weight_only:
        raise UsageError("--weight-only-min-elements only applies with --weight-only")
    chosen = [flag for flag, on in (("--weight-only", weight_only), ("--float16", float16)) if on]
    if len(chosen) > 1:
        raise UsageError("--weight-only and --float16 are two ways to store the weights: pick one")
    if chosen and (quantize or calibration):
        other = "--quantize" if quantize else "--calibration"
        raise UsageError(f"{chosen[0]} keeps activations float and needs no calibration; it "
                         f"cannot be combined with {other} (full int8)")
    if not chosen:
        return None
    mode = {"--weight-only": "int8", "--float16": "float16"}[chosen[0]]
    return WeightOptions(mode, min_elements or WEIGHT_ONLY_MIN_ELEMENTS)


def _target(spec, quantize: bool) -> Target | None:
    """The --target device (targets/: a name or a file; None: not quantizing)."""
    if not quantize:
        if spec is not None:
            raise UsageError("--target only applies with --quantize")
        return None
    return load_target(spec)


def _latency(latency: bool, verified: bool, float_conversion: bool) -> bool:
    """--latency: the written model timed against its float model, after its verification."""
    if latency and (float_conversion or not verified):
        raise UsageError("--latency times a verified quantized or weight-stored model against its "
                         "float model" + ("" if float_conversion else "; it cannot with --no-verify"))
    return latency


def _quantize_steps(quantize: bool, calibration, calibration_samples, default_range, io_type,
                    per_tensor_fc, activations, weight_rounding=None, no_bias_correction=False,
                    no_equalization=False, target: Target | None = None) -> QuantizeOptions | None:
    """The quantize pipeline's options the flags ask for (None: float); the inputs' and
    outputs' type is the target's first unless --io-type names another it takes."""
    if not quantize:
        used = [flag for flag, value in (("--calibration", calibration),
                                         ("--calibration-samples", calibration_samples),
                                         ("--default-range", default_range), ("--io-type", io_type),
                                         ("--per-tensor-fc", per_tensor_fc),
                                         ("--activations", activations),
                                         ("--weight-rounding", weight_rounding),
                                         ("--no-bias-correction", no_bias_correction),
                                         ("--no-equalization", no_equalization))
                if value is not None and value is not False]  # an empty value was given too
        if used:
            raise UsageError(f"{used[0]} only applies with --quantize")
        return None
    # --quantize without --calibration or --default-range: the driver decides (a model with
    # QuantizeLinear/DequantizeLinear pairs carries its own ranges).
    if calibration_samples is not None and calibration is None:
        raise UsageError("--calibration-samples needs --calibration")
    if io_type is not None and io_type not in target.io_types:
        raise UsageError(f"--target {target.name} takes {' or '.join(target.io_types)} inputs and "
                         f"outputs, not --io-type {io_type}")
    io_type = io_type or target.io_types[0]
    if activations == "int16" and io_type == "uint8":
        raise UsageError("--activations int16 takes --io-type float or int8")
    if activations == "int16" and "int16" not in target.precisions:
        raise UsageError(f"--target {target.name} has no 16x8 kernels (--activations int16)")
    default = None if default_range is None else parse_default_range(default_range)
    return QuantizeOptions(io_type=io_type, per_tensor_fc=per_tensor_fc,
                           default_range=default, activations=activations or "int8",
                           round_for_output=(weight_rounding or "output") == "output",
                           correct_bias=not no_bias_correction, equalize=not no_equalization,
                           float_ops=not target.integer_only)


def _calibration_method(text, calibration, quantize: bool) -> CalibrationMethod:
    """The --calibration-method (minmax when not given); it needs --quantize --calibration."""
    if text is None:
        return MINMAX
    if not quantize or calibration is None:
        raise UsageError("--calibration-method only applies with --quantize --calibration")
    try:
        return parse_calibration_method(text)
    except ValueError as e:
        raise _invalid("--calibration-method", str(e), quoted=False) from None


def _plan_options(precision, target_sqnr, steps, calibration, verify_samples, verify_data,
                  metric) -> PlanOptions | None:
    """The planner's request: on with --quantize --calibration, unless --precision int8 or
    --target-sqnr 0 ask for the all-int8 model (None: no planning)."""
    asked = "--target-sqnr" if target_sqnr else "evaluate" if metric is not None else None
    if precision == "float":
        if steps is not None:
            raise UsageError("--precision float writes the float file: it cannot be combined with "
                             "--quantize")
        if asked:
            raise UsageError(f"{asked} needs --quantize with --calibration")
        return None
    if precision is not None and steps is None:
        raise UsageError("--precision only applies with --quantize (but --precision float)")
    if target_sqnr is not None and not 0 <= target_sqnr <= MAX_TARGET_SQNR:
        raise _invalid("--target-sqnr", f"{target_sqnr:g} is not in 0..{MAX_TARGET_SQNR:g} dB (0: every op "
                       "int8; float32 itself holds about 140 dB)", quoted=False)
    if precision == "int8" or target_sqnr == 0:
        if asked:
            raise UsageError(f"{asked} plans precision: it does not apply to the all-int8 model "
                             "(--precision int8 or --target-sqnr 0)")
        return None
    if steps is None or calibration is None:
        if asked:
            raise UsageError(f"{asked} needs --quantize with --calibration")
        return None
    # The plan measures on the calibration data, so that the verification's data (--verify-data)
    # stays data the plan never saw; a metric scores the user's data, labels lined up with it.
    if metric is None:
        return PlanOptions(target_sqnr or DEFAULT_TARGET_SQNR, PLAN_SAMPLES, None)
    return PlanOptions(target_sqnr or DEFAULT_TARGET_SQNR, verify_samples or PLAN_SAMPLES,
                       verify_data, metric)


def _metric(evaluate, max_drop):
    """The API's metric hook (planner.Metric), or None."""
    if evaluate is None and max_drop is None:
        return None
    if evaluate is None or max_drop is None:
        raise UsageError("evaluate and max_drop go together: a function scoring the model's "
                         "outputs, and the drop from the float model's score it tolerates")
    if not callable(evaluate):
        raise UsageError(f"evaluate must be a function of the outputs, not {type(evaluate).__name__}")
    drop = _number("max_drop", max_drop)
    if drop < 0:
        raise UsageError(f"max_drop must be 0 or more, not {drop:g}")
    from ..plan.planner import Metric

    return Metric(evaluate, drop)


def check_report_path(report: str | None) -> None:
    if report is not None and not report.endswith(REPORT_SUFFIXES):
        raise _invalid("--report", f"{report!r}: the file name must end in .json or .html",
                       quoted=False)


def _verification_flags(verify, verify_samples, verify_data, min_sqnr, report) -> list[str]:
    """The flags given that ask for a verification."""
    return [flag for flag, value in (("--verify", verify or None), ("--report", report),
                                     ("--verify-samples", verify_samples),
                                     ("--verify-data", verify_data), ("--min-sqnr", min_sqnr))
            if value is not None]


def _verification_wanted(no_verify: bool, request: QuantizeRequest | None, given: list[str]) -> bool:
    """Whether the conversion verifies itself: every one does (--no-verify skips it) but
    --quantize without --calibration (--default-range, or the model's Q/DQ ranges), which
    verifies with --verify or --report (`given`: _verification_flags)."""
    if no_verify:
        if given:
            raise UsageError(f"{given[0]} and --no-verify contradict each other")
        return False
    wanted = (request is None or request.calibration is not None
              or "--verify" in given or "--report" in given)
    if not wanted and given:
        raise UsageError(f"{given[0]} needs a verified conversion: --quantize without "
                         "--calibration verifies only with --verify or --report")
    return wanted
