"""Command line: qconvert IN.onnx OUT.tflite [options]. '-' reads stdin / writes stdout.
Also `qconvert verify IN.onnx OUT.tflite` (qconvert/verify.py), `qconvert inspect FILE.tflite`
(qconvert/inspect_tflite.py) and `qconvert fakequant IN.onnx OUT.onnx` (qconvert/qdq/fakequant.py).

Exit codes:
  0  success: one summary line on stderr (and the JSON report on stdout with --json).
  1  conversion error: the input cannot be converted as asked (not an ONNX file, missing or
     unreadable file, unsupported op, unpinned dynamic dimension, output not writable). An
     --input-shape that does not fit the model (unknown input name, wrong rank) is also exit 1:
     it can only be judged against the model, like any other mismatch between model and request.
  2  usage error: the command line is malformed on its own (bad option value such as
     --input-shape x:1,a, missing argument, contradictory options, OUT that is IN).
  3  internal error: a bug in qconvert (rerun with --debug for the traceback; --debug keeps
     every exit code, it only adds the traceback).
  4  verification failed: a float conversion whose written model does not compute what the ONNX
     model computes in onnxruntime (verify.py's float check), or an output (or an output's
     slice) below --min-sqnr; a conversion then leaves no file.

Every error is exactly one line on stderr starting with "qconvert: error:" (internal errors:
"qconvert: internal error:"), never a traceback unless --debug.

Files:
  IN     a regular file, or '-' for standard input (read up to limits.MODEL_BYTES). A FIFO, a
         device or a socket is refused (exit 1) rather than opened: a FIFO would block, /dev/zero
         never ends.
  OUT    never IN, nor --calibration, --verify-data or --report (same path after normalisation,
         or the same file by device and inode: a hard link, a symlink): exit 2, nothing touched.
         A regular file (or a new name) is written to a temporary file beside it and renamed into
         place once the conversion, the verification, the --report file and the --json report all
         succeeded, so a failed run (any exit code but 0) leaves no file and an existing output
         untouched. A symlink is followed: its target is replaced that way and the link kept. A
         character device or a FIFO is written through, once the model is complete, like '-' (a
         FIFO without a reader and a terminal are refused); any other kind of file is refused.
  stdin/stdout  closed (`<&-`, `>&-`) or failing (/dev/full) when needed: a one-line exit 1.

Environment: every option of a command can also be given as an environment variable named
after its long flag, QCONVERT_<FLAG> (--input-shape: QCONVERT_INPUT_SHAPE; QCONVERT_VERIFY_<FLAG>
for `qconvert verify`, QCONVERT_INSPECT_<FLAG> for `qconvert inspect`), shown in --help. A flag
is on for 1/true/yes/on and off for 0/false/no/off or empty; a repeatable option takes
space-separated values. A flag on the command line wins over its variable. Usage errors name the
variables that were used, since the command line alone does not show them.
"""

from __future__ import annotations

import copy
import functools
import json
import logging
import os
import sys
import traceback

import click
import numpy as np
from click.core import ParameterSource

from . import __version__
from .errors import BelowThreshold, ConversionError, ReferenceFailed, UsageError
from .files import (
    check_distinct_files,
    check_input_file,
    fill_closed_standard_fds,
    output_kind,
    print_stdout,
    read_stdin,
    replace_atomically,
    write_output,
)

EXIT_CONVERSION_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3
EXIT_BELOW_THRESHOLD = 4
WARN_BELOW_DB = 20.0  # a verified conversion below this warns (without --min-sqnr)
INT32_MAX = 2**31 - 1  # TFLite shapes are int32


def _one_line(message: str) -> str:
    """Collapses a (possibly multi-line) message so every error stays one line on stderr."""
    return " ".join(part.strip() for part in str(message).splitlines() if part.strip())


class _OneLineUsageError(click.ClickException):
    """A click usage error shown as one line (click's default prints usage and a hint too)."""

    exit_code = EXIT_USAGE

    def show(self, file=None) -> None:
        click.echo(f"qconvert: error: {_one_line(self.format_message())} "
                   "(see 'qconvert --help')", err=True)


def _from_environment(ctx: click.Context | None) -> str:
    """" (set in the environment: QCONVERT_X, ...)" when options came from variables, else "":
    a usage error about an option the command line does not show must say where it came from."""
    if ctx is None:
        return ""
    names = [p.envvar for p in ctx.command.params if isinstance(p, click.Option) and p.name
             and ctx.get_parameter_source(p.name) == ParameterSource.ENVIRONMENT]
    return f" (set in the environment: {', '.join(names)})" if names else ""


_EXIT_CODES = ((ConversionError, EXIT_CONVERSION_ERROR), (UsageError, EXIT_USAGE),
               (BelowThreshold, EXIT_BELOW_THRESHOLD))


class _Command(click.Command):
    """Every failure of a command becomes one line on stderr and its documented exit code:
    click's parsing and parameter errors and qconvert's UsageError exit 2, ConversionError and
    OSError 1, BelowThreshold 4, anything else is a bug, exit 3. --debug adds the traceback to an
    internal error and keeps its exit code; a user's error stays one line (its message names what
    is at fault; a traceback of qconvert's code would not help)."""

    def make_context(self, info_name, args, parent=None, **extra):
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as e:
            raise _OneLineUsageError(e.format_message() + _from_environment(e.ctx)) from None

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except click.UsageError as e:
            raise _OneLineUsageError(e.format_message() + _from_environment(ctx)) from None
        except (click.exceptions.Exit, click.Abort, click.ClickException):
            raise
        except Exception as e:
            internal = not isinstance(e, (UsageError, ConversionError, BelowThreshold, OSError))
            if internal and ctx.params.get("debug"):
                traceback.print_exc()
            _fail(e, ctx)


def _fail(e: Exception, ctx: click.Context):
    """Prints `e` as one line and exits with its code (see _Command)."""
    if isinstance(e, UsageError):
        click.echo(f"qconvert: error: {_one_line(e)}{_from_environment(ctx)}", err=True)
        sys.exit(EXIT_USAGE)
    if isinstance(e, (ConversionError, BelowThreshold)):
        click.echo(f"qconvert: error: {_one_line(e)}", err=True)
        sys.exit(next(code for kind, code in _EXIT_CODES if isinstance(e, kind)))
    if isinstance(e, OSError):
        where = f"{e.filename}: " if e.filename else ""
        click.echo(f"qconvert: error: {where}{e.strerror or _one_line(e)}", err=True)
        sys.exit(EXIT_CONVERSION_ERROR)
    click.echo(f"qconvert: internal error: {type(e).__name__}: {_one_line(e)} (rerun with "
               "--debug for a traceback and report it)", err=True)
    sys.exit(EXIT_INTERNAL)


class _Option(click.Option):
    """An option whose error names the flag only: the environment variable, when one was used, is
    named once by _from_environment (click would name it whether used or not)."""

    def get_error_hint(self, ctx) -> str:
        return click.Parameter.get_error_hint(self, ctx)


_option = functools.partial(click.option, cls=_Option)


def _with_environment_variables(command: click.Command, prefix: str) -> click.Command:
    """Makes each option of `command` readable from PREFIX_<LONG FLAG> (--input-shape:
    PREFIX_INPUT_SHAPE) and shows the name in --help. Named after the flag, not the Python
    parameter (--json's is as_json), so the variable is what a user would guess."""
    for param in command.params:
        if isinstance(param, click.Option) and param.name != "version":
            flag = max(param.opts, key=len).lstrip("-")
            param.envvar = f"{prefix}_{flag.upper().replace('-', '_')}"
            param.show_envvar = True
    return command


def parse_input_shape(values: tuple[str, ...]) -> dict[str, tuple[int, ...]]:
    """--input-shape NAME:D1,D2,... values -> {name: shape}; malformed values are usage errors."""
    shapes = {}
    for value in values:
        name, sep, dims = value.rpartition(":")
        try:
            shape = tuple(int(d) for d in dims.split(",")) if dims else ()
        except ValueError:
            shape = None
        if not sep or not name or shape is None or any(not 0 < d <= INT32_MAX for d in shape):
            raise click.BadParameter(f"{value!r}: expected NAME:D1,D2,... with positive integers "
                                     f"up to {INT32_MAX} (TFLite shapes are int32)",
                                     param_hint="--input-shape")
        if name in shapes:
            raise click.BadParameter(f"{name!r} is given twice", param_hint="--input-shape")
        shapes[name] = shape
    return shapes


def parse_default_range(value: str) -> tuple[float, float]:
    """--default-range MIN,MAX -> (min, max); anything else is a usage error (exit 2).

    Two finite numbers, MIN < MAX, and a range an int8 kernel can represent: its scale (the range
    widened to contain 0, over 255 steps) within [2^-60, 2^60] (quantize/params.py MIN_SCALE,
    MAX_SCALE). An empty value is malformed too, never "no range"."""
    from .quantize.params import MAX_SCALE, MIN_SCALE

    try:
        lo, hi = (float(v) for v in value.split(","))
    except ValueError:
        lo = hi = None
    if lo is None or not (np.isfinite(lo) and np.isfinite(hi)) or lo >= hi:
        raise click.BadParameter(f"{value!r}: expected MIN,MAX with finite MIN < MAX",
                                 param_hint="--default-range")
    scale = (max(hi, 0.0) - min(lo, 0.0)) / 255
    if not MIN_SCALE <= scale <= MAX_SCALE:
        raise click.BadParameter(f"{value!r}: a range of {hi - lo:.3g} gives int8 scale {scale:.3g}, "
                                 "outside [2^-60, 2^60], the scales int8 kernels represent",
                                 param_hint="--default-range")
    return lo, hi


def weight_mode_from_flags(weight_only: bool, min_elements, float16: bool, quantize: bool,
                           calibration) -> str | None:
    """"int8" (--weight-only), "float16" (--float16) or None; contradictions are usage errors."""
    if min_elements is not None and not weight_only:
        raise click.UsageError("--weight-only-min-elements only applies with --weight-only")
    chosen = [flag for flag, on in (("--weight-only", weight_only), ("--float16", float16)) if on]
    if len(chosen) > 1:
        raise click.UsageError("--weight-only and --float16 are two ways to store the weights: pick one")
    if chosen and (quantize or calibration):
        other = "--quantize" if quantize else "--calibration"
        raise click.UsageError(f"{chosen[0]} keeps activations float and needs no calibration; it "
                               f"cannot be combined with {other} (full int8)")
    return {"--weight-only": "int8", "--float16": "float16"}[chosen[0]] if chosen else None


def quantize_options_from_flags(quantize: bool, calibration, calibration_samples, default_range,
                                io_type, per_tensor_fc, activations=None):
    """The QuantizeOptions the flags ask for (None: float); contradictions are usage errors."""
    from .transforms.pipeline import QuantizeOptions

    if not quantize:
        used = [flag for flag, value in (("--calibration", calibration),
                                         ("--calibration-samples", calibration_samples),
                                         ("--default-range", default_range), ("--io-type", io_type),
                                         ("--per-tensor-fc", per_tensor_fc),
                                         ("--activations", activations))
                if value is not None and value is not False]  # an empty value was given too
        if used:
            raise click.UsageError(f"{used[0]} only applies with --quantize")
        return None
    # --quantize without --calibration or --default-range: converter.convert decides (a model
    # with QuantizeLinear/DequantizeLinear pairs carries its own ranges).
    if calibration_samples is not None and calibration is None:
        raise click.UsageError("--calibration-samples needs --calibration")
    if activations == "int16" and io_type == "uint8":
        raise click.UsageError("--activations int16 takes --io-type float or int8")
    default = None if default_range is None else parse_default_range(default_range)
    return QuantizeOptions(io_type=io_type or "float", per_tensor_fc=per_tensor_fc, default_range=default,
                           activations=activations or "int8")


def _calibration_method(text, calibration, quantize):
    """The --calibration-method (minmax when not given); it needs --quantize --calibration."""
    from .quantize.calibration_methods import MINMAX, parse_calibration_method

    if text is None:
        return MINMAX
    if not quantize or calibration is None:
        raise click.UsageError("--calibration-method only applies with --quantize --calibration")
    try:
        return parse_calibration_method(text)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--calibration-method") from None


def _verification_samples(proto, path: str | None, count: int):
    """`count` samples from the calibration-format data at `path`, or None (generate them)."""
    if path is None:
        return None
    from .quantize.calibration_data import first_samples

    return first_samples(path, proto, count)


def check_written(source: str, data: bytes | None, path: str, data_path: str | None, count: int,
                  min_sqnr: float | None, report_path: str | None = None, notes=None,
                  warn: bool = False, float_check: bool = False):
    """Verifies the .tflite at `path` against the ONNX model and writes the per-tensor report to
    `report_path` if asked; with `warn`, prints a warning line when an output is below
    WARN_BELOW_DB and there is no threshold. `float_check`: a float conversion, judged by the
    float check (verify.py) unless the model has Q/DQ pairs on activations, whose rounding a
    float conversion drops (then by SQNR, as a quantized one). Returns the Verification (see
    require_passed).

    The ONNX file is parsed without its big weights (onnx_file.read_onnx), enough for the
    samples and the float check's rules; onnxruntime reads the file itself when it can
    (verify.reads_file), else gets the model with its weights from here."""
    from .onnx_file import read_onnx
    from .verify import reads_file, rounding_dropped, verify

    onnx_file = read_onnx(source, data)
    proto = onnx_file.proto
    float_check = float_check and not rounding_dropped(proto)
    direct = data is None and report_path is None and reads_file(proto)
    if not direct:
        onnx_file.restore_weights()
    samples = _verification_samples(proto, data_path, count)
    result = verify(proto, path, samples, count, min_sqnr, data=data_path or "generated",
                    float_check=float_check, onnx_path=source if direct else None)
    if report_path is not None:
        from .report import build_report, write_report

        content = build_report(proto, path, samples, count, notes)
        replace_atomically(report_path, lambda tmp: write_report(content, tmp))
    low = result.below(WARN_BELOW_DB) if warn and min_sqnr is None and result.check != "float" else []
    if low:
        advice = (f"see {report_path}" if report_path else
                  "--report FILE.html shows where the error comes from")
        click.echo(f"qconvert: warning: {', '.join(low)} below {WARN_BELOW_DB:g} dB against "
                   f"onnxruntime; {advice}", err=True)
    return result


def require_passed(result) -> None:
    """BelowThreshold (exit 4) when the float check failed (a float conversion that does not
    compute what the ONNX model does) or an output or slice missed the verification's --min-sqnr."""
    if result.passed:
        return
    parts = []
    failures = result.float_failures()
    if failures:
        parts.append(f"float conversion does not match onnxruntime: {'; '.join(failures)}")
    low = result.below(result.min_sqnr) if result.min_sqnr is not None else []
    if low:
        parts.append(f"{', '.join(low)} below --min-sqnr {result.min_sqnr:g} dB")
    raise BelowThreshold(f"verify: {'; '.join(parts)}")


def _verification_flags(verify_flag, verify_samples, verify_data, min_sqnr, report) -> list[str]:
    """The flags given that ask for a verification."""
    return [flag for flag, value in (("--verify", verify_flag or None), ("--report", report),
                                     ("--verify-samples", verify_samples),
                                     ("--verify-data", verify_data), ("--min-sqnr", min_sqnr))
            if value is not None]


def _verification_request(no_verify, quantize_options, calibration, given: list[str]) -> bool:
    """Whether the conversion verifies itself: every one does (--no-verify skips it) but
    --quantize without --calibration (--default-range, or the model's Q/DQ ranges), which
    verifies with --verify or --report (`given`: _verification_flags). Contradictions are usage
    errors."""
    if no_verify:
        if given:
            raise click.UsageError(f"{given[0]} and --no-verify contradict each other")
        return False
    wanted = (quantize_options is None or calibration is not None
              or "--verify" in given or "--report" in given)
    if not wanted and given:
        raise click.UsageError(f"{given[0]} needs a verified conversion: --quantize without "
                               "--calibration verifies only with --verify or --report")
    return wanted


def verification_samples(verify_samples: int | None, verify_data: str | None, calibration,
                         float_conversion: bool) -> int:
    """How many samples a conversion's verification runs: --verify-samples, else one generated
    sample for a float conversion (its check is exact: one sample shows a wrong conversion), else
    8 (a quantized conversion's error is statistical; data files give their first 8)."""
    if verify_samples is not None:
        return verify_samples
    return 1 if float_conversion and verify_data is None and calibration is None else 8


def _plan_request(target_sqnr, quantize_options, calibration, verify_samples, verify_data, runtime):
    """The planner's request for --target-sqnr (None: no planning, or 0: the all-int8 plan)."""
    if target_sqnr is None or target_sqnr == 0:
        if runtime is not None:
            raise click.UsageError("--target only applies with --target-sqnr")
        return None
    if quantize_options is None or calibration is None:
        raise click.UsageError("--target-sqnr needs --quantize with --calibration")
    from .converter import PlanRequest

    return PlanRequest(target_sqnr, verify_samples or 8, verify_data, runtime or "cpu")


def _report_path(report: str | None) -> str | None:
    if report is not None and not report.endswith((".json", ".html", ".htm")):
        raise click.BadParameter(f"{report!r}: the file name must end in .json or .html",
                                 param_hint="--report")
    return report


def conversion_arguments(*, input_shapes=(), io_layout="nhwc", quantize=False, calibration=None,
                         calibration_samples=None, calibration_method=None, default_range=None,
                         io_type=None, activations=None, per_tensor_fc=False, weight_only=False,
                         weight_only_min_elements=None, float16=False, keep_float=(),
                         target_sqnr=None, target=None, verify_samples=None, verify_data=None) -> dict:
    """converter.convert's keyword arguments for the conversion flags (named as the flags'
    parameters; the Python API's keywords are the same). Malformed values and contradictions are
    click usage errors."""
    shapes = parse_input_shape(input_shapes)
    weights = weight_mode_from_flags(weight_only, weight_only_min_elements, float16, quantize,
                                     calibration)
    options = quantize_options_from_flags(quantize, calibration, calibration_samples, default_range,
                                          io_type, per_tensor_fc, activations)
    method = _calibration_method(calibration_method, calibration, quantize)
    if keep_float and options is None:
        raise click.UsageError("--keep-float only applies with --quantize")
    plan = _plan_request(target_sqnr, options, calibration, verify_samples, verify_data, target)
    return dict(input_shapes=shapes, io_layout=io_layout, quantize=options, calibration=calibration,
                calibration_samples=calibration_samples, calibration_method=method, weights=weights,
                weight_only_min_elements=weight_only_min_elements or 1024, keep_float=keep_float,
                plan=plan)


def typed_like_flags(values: dict) -> dict:
    """`values` ({option parameter name: value}) converted and checked by the types of the
    conversion's options (click.IntRange, click.Choice...), so that the Python API's keywords get
    the command line's checks and messages; None stays None."""
    ctx = click.Context(cli)
    params = {p.name: p for p in cli.params}
    return {name: value if value is None else params[name].type_cast_value(ctx, value)
            for name, value in values.items()}


@click.command(cls=_Command, context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("source", metavar="IN.onnx")
@click.argument("dest", metavar="OUT.tflite")
@_option("--input-shape", "input_shapes", multiple=True, metavar="NAME:D1,D2,...",
              help="Pin an input's shape (repeatable), e.g. images:1,3,224,224.")
@_option("--io-layout", type=click.Choice(["nhwc", "onnx"]), default="nhwc", show_default=True,
              help="nhwc: image inputs/outputs become channels-last (no TRANSPOSE at the edges); "
                   "onnx: keep the ONNX layout of every input and output.")
@_option("--quantize", is_flag=True,
              help="Write a full-integer int8 model (needs --calibration or --default-range).")
@_option("--calibration", metavar="PATH",
              help="Calibration data for --quantize: an .npz with one array per model input "
                   "(first axis = samples), or a directory of .npz/.npy files.")
@_option("--calibration-samples", type=click.IntRange(min=1), metavar="N",
              help="Use the first N calibration samples (default: all).")
@_option("--calibration-method", metavar="METHOD",
              help="How calibration turns values into ranges: minmax (the global min and max), "
                   "percentile[:P] (the P and 100-P percentiles, P default 99.99) or mse (the "
                   "range with the least int8 error); percentile and mse run the samples twice "
                   "[default: minmax].")
@_option("--default-range", metavar="MIN,MAX",
              help="Range for tensors without calibration data (speed studies only: the int8 "
                   "model's accuracy is meaningless).")
@_option("--io-type", type=click.Choice(["float", "int8", "uint8"]), default=None,
              help="Type of the quantized model's inputs and outputs [default: float].")
@_option("--activations", type=click.Choice(["int8", "int16"]), default=None,
              help="With --quantize: the activation type; int16 runs TFLite's 16x8 kernels (int16 "
                   "activations, int8 weights) where they exist, other ops stay float "
                   "[default: int8].")
@_option("--per-tensor-fc", is_flag=True,
              help="Quantize FULLY_CONNECTED weights per tensor, for runtimes without per-channel "
                   "dense layers (TFLite Micro before 2024).")
@_option("--weight-only", is_flag=True,
              help="Store large weights as int8 (TFLite's dynamic-range mode); activations stay "
                   "float, no calibration data needed.")
@_option("--weight-only-min-elements", type=click.IntRange(min=1), metavar="N",
              help="With --weight-only: quantize weights of at least N elements [default: 1024].")
@_option("--float16", is_flag=True, help="Store every float weight as float16.")
@_option("--verify", "verify_flag", is_flag=True,
              help="Verify the conversion: the default, but for --quantize without --calibration.")
@_option("--no-verify", is_flag=True,
              help="Skip the verification every conversion runs: float ones must match onnxruntime "
                   "(exit 4 otherwise), quantized ones report their SQNR.")
@_option("--verify-samples", type=click.IntRange(min=1), metavar="N",
              help="Samples the verification runs [default: 1 for a float conversion on generated "
                   "inputs, else 8].")
@_option("--verify-data", metavar="PATH",
              help="Verification inputs in the calibration-data format [default: the calibration "
                   "data, else seeded standard normal inputs].")
@_option("--min-sqnr", type=float, metavar="DB",
              help="Exit 4 and write nothing when an output (or an output's slice) of the "
                   "written model is below DB dB SQNR against onnxruntime (a float conversion: "
                   "besides its float check).")
@_option("--report", metavar="FILE",
              help="Write the per-tensor report, FILE.json or FILE.html (a page with a plot): "
                   "every tensor and op of the written model against onnxruntime's values.")
@_option("--keep-float", multiple=True, metavar="PATTERN",
              help="With --quantize: keep the ops of these ONNX nodes float (repeatable: a node "
                   "name, an op type, or a regular expression over node names).")
@_option("--target-sqnr", type=float, metavar="DB",
              help="With --quantize and --calibration: promote the ops that lose the most (to "
                   "float or int16, see --target) until every output and output slice reaches DB "
                   "dB on the verification samples (or a budget is spent); 0 keeps the all-int8 "
                   "plan.")
@_option("--target", type=click.Choice(["cpu", "integer"]), default=None,
              help="With --target-sqnr: what the planner promotes an op to. cpu: float (LiteRT's "
                   "CPU path, XNNPACK, runs float ops well); integer: its 16x8 kernel (int16 "
                   "activations), for runtimes that must stay all-integer [default: cpu].")
@_option("--json", "as_json", is_flag=True, help="Print a JSON report on stdout.")
@_option("-v", "--verbose", is_flag=True, help="Log what the transformations do.")
@_option("--debug", is_flag=True, help="Show the traceback of an error (the exit code stays).")
@click.version_option(__version__, prog_name="qconvert")
def cli(source, dest, input_shapes, io_layout, quantize, calibration, calibration_samples,
        calibration_method, default_range, io_type, activations, per_tensor_fc, weight_only,
        weight_only_min_elements, float16, verify_flag, no_verify, verify_samples, verify_data,
        min_sqnr, report, keep_float, target_sqnr, target, as_json, verbose, debug):
    """Convert the float ONNX model IN.onnx to the TFLite model OUT.tflite.

    '-' as IN.onnx reads standard input; '-' as OUT.tflite writes standard output.
    Exit codes: 0 success, 1 conversion error, 2 usage error, 3 internal error, 4 verification
    failed (a float conversion that does not match onnxruntime, or below --min-sqnr). Also:
    qconvert verify IN.onnx OUT.tflite, qconvert inspect FILE.tflite, qconvert fakequant IN.onnx
    OUT.onnx (see their --help). Every option can also be set by the environment variable shown
    with it (a flag given here wins; a repeatable option takes space-separated values).
    """
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING,
                        format="qconvert: %(message)s", stream=sys.stderr)
    arguments = conversion_arguments(
        input_shapes=input_shapes, io_layout=io_layout, quantize=quantize, calibration=calibration,
        calibration_samples=calibration_samples, calibration_method=calibration_method,
        default_range=default_range, io_type=io_type, activations=activations,
        per_tensor_fc=per_tensor_fc, weight_only=weight_only,
        weight_only_min_elements=weight_only_min_elements, float16=float16, keep_float=keep_float,
        target_sqnr=target_sqnr, target=target, verify_samples=verify_samples, verify_data=verify_data)
    report_path = _report_path(report)
    float_conversion = arguments["quantize"] is None and arguments["weights"] is None
    asked_to_verify = _verification_flags(verify_flag, verify_samples, verify_data, min_sqnr,
                                          report_path)
    verifying = _verification_request(no_verify, arguments["quantize"], calibration, asked_to_verify)
    if as_json and dest == "-":
        raise click.UsageError("--json prints on stdout, so OUT.tflite cannot be '-' with it")
    check_distinct_files({"IN.onnx": source, "--calibration": calibration,
                          "--verify-data": verify_data}, {"OUT.tflite": dest, "--report": report_path})
    if (dest == "-" or as_json) and sys.stdout is None:
        raise ConversionError("-: standard output is closed")
    if dest == "-" and sys.stdout.isatty():
        raise click.UsageError("refusing to write a binary model to a terminal; redirect "
                               "standard output or give a file name")
    if source != "-":
        check_input_file(source)
    output_kind(dest)  # refuses before converting what cannot be written
    if report_path is not None and output_kind(report_path) != "file":
        raise ConversionError(f"{report_path}: --report writes a regular file")
    from .converter import convert

    data = read_stdin() if source == "-" else None
    flatbuffer, summary = convert(source, data=data, output_name=dest, progress=True, **arguments)

    def before_the_output_appears(path):
        """Verification (and the --report file), then the JSON report: a failure of either
        leaves nothing at OUT. The report stays when only the threshold failed: it says why."""
        if verifying:
            summary.verify = verify_written(path)
            if summary.verify is not None:
                require_passed(summary.verify)
        if as_json:
            try:
                print_stdout(json.dumps(summary.as_dict(), indent=2))
            except ConversionError:
                if report_path is not None and verifying:
                    os.unlink(os.path.realpath(report_path))
                raise

    def verify_written(path):
        """The Verification; None when onnxruntime, not the conversion, failed on a float
        conversion that verifies by default (written unverified, with a warning; when the
        verification was asked for, that is an error)."""
        try:
            return check_written(
                source, data, path, verify_data or calibration,
                verification_samples(verify_samples, verify_data, calibration, float_conversion),
                min_sqnr, report_path, summary.notes, warn=True, float_check=float_conversion)
        except ReferenceFailed as e:
            if not float_conversion or asked_to_verify:
                raise ConversionError(f"{e} (the verification runs the model in onnxruntime; "
                                      "--no-verify converts without it)") from None
            click.echo(f"qconvert: warning: not verified: {_one_line(e)}", err=True)
            return None
        except ConversionError as e:
            if path not in str(e):
                raise
            # The temporary file is nobody's business: the message names OUT.
            raise ConversionError(str(e).replace(path, f"{dest} (not written)")) from None

    write_output(dest, flatbuffer, before_the_output_appears if verifying or as_json else None)
    click.echo(summary.summary(), err=True)


@click.command(cls=_Command, context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("source", metavar="IN.onnx")
@click.argument("tflite", metavar="MODEL.tflite")
@_option("--data", metavar="PATH",
              help="Inputs in the calibration-data format [default: seeded inputs, standard "
                   "normal for float inputs, 0..9 for integer ones].")
@_option("--samples", type=click.IntRange(min=1), default=8, show_default=True, metavar="N",
              help="How many samples to run (the first N of --data).")
@_option("--min-sqnr", type=float, metavar="DB",
              help="Exit 4 when an output (or an output's slice) is below DB dB SQNR.")
@_option("--report", metavar="FILE",
              help="Also write the per-tensor report, FILE.json or FILE.html.")
@_option("--json", "as_json", is_flag=True, help="Print the results as JSON on stdout.")
@_option("--debug", is_flag=True, help="Show the traceback of an error (the exit code stays).")
def verify_cli(source, tflite, data, samples, min_sqnr, report, as_json, debug):
    """Run IN.onnx in onnxruntime and MODEL.tflite (written by any tool) in LiteRT on the same
    inputs and compare every output: SQNR, errors, cosine, top-1 agreement, worst slice.

    Exit codes: 0 passed (or no --min-sqnr), 1 error, 2 usage error, 3 internal error, 4 an
    output or slice below --min-sqnr.
    """
    report_path = _report_path(report)
    check_distinct_files({"IN.onnx": source, "MODEL.tflite": tflite, "--data": data},
                         {"--report": report_path})
    if source != "-":
        check_input_file(source)
    check_input_file(tflite)
    if report_path is not None and output_kind(report_path) != "file":
        raise ConversionError(f"{report_path}: --report writes a regular file")
    from .inspect_tflite import litert_crash

    crash = litert_crash(tflite)  # any tool's file: LiteRT tries it in a child process first
    if crash is not None:
        raise ConversionError(f"{tflite}: {crash}; it cannot be verified")
    stdin = read_stdin() if source == "-" else None
    result = check_written(source, stdin, tflite, data, samples, min_sqnr, report_path)
    print_stdout(json.dumps(result.as_dict(), indent=2) if as_json else _verification_table(result))
    require_passed(result)
    click.echo(f"qconvert: {result.summary()}", err=True)


def _verification_table(result) -> str:
    """One line per output, for a person."""
    rows = [("output", "SQNR dB", "worst slice", "slice dB", "max error", "mean error", "cosine",
             "top-1")]
    for o in result.outputs:
        rows.append((o.name, f"{o.sqnr_db:.1f}", o.worst_slice or "-",
                     "-" if o.worst_slice_sqnr_db is None else f"{o.worst_slice_sqnr_db:.1f}",
                     f"{o.max_abs_error:.3g}", f"{o.mean_abs_error:.3g}", f"{o.cosine:.6f}",
                     "-" if o.top1_agreement is None else f"{o.top1_agreement:.0%}"))
    widths = [max(len(row[k]) for row in rows) for k in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)


@click.command(cls=_Command, context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("path", metavar="FILE.tflite")
@_option("--json", "as_json", is_flag=True,
              help="Print everything as JSON on stdout, exact values (keys: see "
                   "qconvert/inspect_tflite.py).")
@_option("--debug", is_flag=True, help="Show the traceback of an error (the exit code stays).")
def inspect_cli(path, as_json, debug):
    """Show what FILE.tflite (written by any tool) holds: ops with builtin code and version,
    which of them LiteRT's default XNNPACK delegate takes and in how many partitions, tensors
    with dtype, shape, shape signature and quantization, buffer sizes, metadata, signatures.

    Exit codes: 0 shown, 1 not a readable .tflite, 2 usage error, 3 internal error.
    """

    from .inspect_tflite import format_text, inspect_file

    check_input_file(path)
    report = inspect_file(path)
    print_stdout(json.dumps(report, indent=2) if as_json else format_text(report))


# The conversion's options that decide where and how the int8 model quantizes, shared with cli.
FAKEQUANT_OPTIONS = ("input_shapes", "calibration", "calibration_samples", "calibration_method",
                     "default_range", "activations", "per_tensor_fc", "keep_float", "target_sqnr", "target",
                     "as_json", "verbose", "debug")


@click.command(cls=_Command, context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("source", metavar="IN.onnx")
@click.argument("dest", metavar="OUT.onnx")
def fakequant_cli(source, dest, input_shapes, calibration, calibration_samples, calibration_method,
                  default_range, activations, per_tensor_fc, keep_float, target_sqnr, target, as_json,
                  verbose, debug):
    """Write OUT.onnx: IN.onnx with QuantizeLinear/DequantizeLinear pairs exactly where
    `qconvert IN.onnx OUT.tflite --quantize` with the same options quantizes, holding the params it
    chooses (int8 weights per channel, int32 biases; int16 pairs for --activations int16, opset 21);
    the ops kept float or promoted (--keep-float, --target-sqnr) are named in its metadata.
    onnxruntime runs it: measure the int8
    model's accuracy in your own evaluation loop. `qconvert OUT.onnx X.tflite --quantize` (no
    calibration) gives back the same params.

    Exit codes: 0 written, 1 conversion error, 2 usage error, 3 internal error.
    """
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING,
                        format="qconvert: %(message)s", stream=sys.stderr)
    arguments = conversion_arguments(
        input_shapes=input_shapes, quantize=True, calibration=calibration,
        calibration_samples=calibration_samples, calibration_method=calibration_method,
        default_range=default_range, activations=activations, per_tensor_fc=per_tensor_fc,
        keep_float=keep_float, target_sqnr=target_sqnr, target=target)
    del arguments["weights"]
    if as_json and dest == "-":
        raise click.UsageError("--json prints on stdout, so OUT.onnx cannot be '-' with it")
    check_distinct_files({"IN.onnx": source, "--calibration": calibration}, {"OUT.onnx": dest})
    if source != "-":
        check_input_file(source)
    output_kind(dest)
    from .converter import fake_quant

    data = read_stdin() if source == "-" else None
    written, summary = fake_quant(source, data=data, output_name=dest, progress=True, **arguments)
    show = (lambda path: print_stdout(json.dumps(summary.as_dict(), indent=2))) if as_json else None
    write_output(dest, written, show)
    click.echo(summary.summary(), err=True)


# Copies: each command names its own environment variables.
fakequant_cli.params += [copy.copy(p) for p in cli.params if p.name in FAKEQUANT_OPTIONS]
_with_environment_variables(cli, "QCONVERT")
_with_environment_variables(verify_cli, "QCONVERT_VERIFY")
_with_environment_variables(inspect_cli, "QCONVERT_INSPECT")
_with_environment_variables(fakequant_cli, "QCONVERT_FAKEQUANT")
COMMANDS = {"verify": verify_cli, "inspect": inspect_cli, "fakequant": fakequant_cli}


def _return_freed_memory_to_the_system() -> None:
    """Weights are freed one by one while the file is built; glibc's default raises its mmap
    threshold after such frees and then keeps freed memory in the heap, so peak memory would
    hold the weights twice. A fixed threshold keeps every large array in its own mapping."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        M_MMAP_THRESHOLD = -3
        libc.mallopt(M_MMAP_THRESHOLD, 128 * 1024)
    except (OSError, AttributeError):
        pass  # not glibc: nothing to tune


def main() -> None:
    """`qconvert IN OUT ...` converts; `qconvert verify ...` (COMMANDS) runs a subcommand. A
    model file named like a subcommand is given as ./verify."""
    fill_closed_standard_fds()
    _return_freed_memory_to_the_system()
    if len(sys.argv) > 1 and sys.argv[1] in COMMANDS:
        name = sys.argv[1]
        COMMANDS[name](args=sys.argv[2:], prog_name=f"qconvert {name}")
    else:
        cli(prog_name="qconvert")
