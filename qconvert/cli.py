"""Command line: qconvert IN.onnx OUT.tflite [options]. '-' reads stdin / writes stdout.

Exit codes:
  0  success: one summary line on stderr (and the JSON report on stdout with --json).
  1  conversion error: the input cannot be converted as asked (not an ONNX file, missing or
     unreadable file, unsupported op, unpinned dynamic dimension, output not writable). An
     --input-shape that does not fit the model (unknown input name, wrong rank) is also exit 1:
     it can only be judged against the model, like any other mismatch between model and request.
  2  usage error: the command line is malformed on its own (bad option value such as
     --input-shape x:1,a, missing argument, contradictory options).
  3  internal error: a bug in qconvert (rerun with --debug for the traceback).

Every error is exactly one line on stderr starting with "qconvert: error:" (internal errors:
"qconvert: internal error:"), never a traceback unless --debug. The output file is written only
after a successful conversion, via a temporary file renamed into place, so a failed run leaves no
file behind and an existing output untouched.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile

import click
import numpy as np

from . import __version__
from .errors import ConversionError, UsageError

EXIT_CONVERSION_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3


def _one_line(message: str) -> str:
    """Collapses a (possibly multi-line) message so every error stays one line on stderr."""
    return " ".join(part.strip() for part in str(message).splitlines() if part.strip())


class _OneLineUsageError(click.ClickException):
    """A click usage error shown as one line (click's default prints usage and a hint too)."""

    exit_code = EXIT_USAGE

    def show(self, file=None) -> None:
        click.echo(f"qconvert: error: {_one_line(self.format_message())} "
                   "(see 'qconvert --help')", err=True)


class _Command(click.Command):
    """Turns click's parsing and parameter errors into one-line usage errors (exit 2)."""

    def make_context(self, info_name, args, parent=None, **extra):
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as e:
            raise _OneLineUsageError(e.format_message()) from None

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except click.UsageError as e:
            raise _OneLineUsageError(e.format_message()) from None


def parse_input_shape(values: tuple[str, ...]) -> dict[str, tuple[int, ...]]:
    """--input-shape NAME:D1,D2,... values -> {name: shape}; malformed values are usage errors."""
    shapes = {}
    for value in values:
        name, sep, dims = value.rpartition(":")
        try:
            shape = tuple(int(d) for d in dims.split(",")) if dims else ()
        except ValueError:
            shape = None
        if not sep or not name or shape is None or any(d <= 0 for d in shape):
            raise click.BadParameter(f"{value!r}: expected NAME:D1,D2,... with positive integers",
                                     param_hint="--input-shape")
        if name in shapes:
            raise click.BadParameter(f"{name!r} is given twice", param_hint="--input-shape")
        shapes[name] = shape
    return shapes


def parse_default_range(value: str) -> tuple[float, float]:
    """--default-range MIN,MAX -> (min, max): finite, MIN < MAX; anything else is a usage error."""
    try:
        lo, hi = (float(v) for v in value.split(","))
    except ValueError:
        lo = hi = None
    if lo is None or not (np.isfinite(lo) and np.isfinite(hi)) or lo >= hi:
        raise click.BadParameter(f"{value!r}: expected MIN,MAX with finite MIN < MAX",
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
                                io_type, per_tensor_fc):
    """The QuantizeOptions the flags ask for (None: float); contradictions are usage errors."""
    from .transforms.pipeline import QuantizeOptions

    if not quantize:
        used = [flag for flag, value in (("--calibration", calibration),
                                         ("--calibration-samples", calibration_samples),
                                         ("--default-range", default_range), ("--io-type", io_type),
                                         ("--per-tensor-fc", per_tensor_fc)) if value]
        if used:
            raise click.UsageError(f"{used[0]} only applies with --quantize")
        return None
    if calibration is None and default_range is None:
        raise click.UsageError("--quantize needs --calibration PATH (or --default-range MIN,MAX "
                               "for a speed study without data)")
    if calibration_samples is not None and calibration is None:
        raise click.UsageError("--calibration-samples needs --calibration")
    return QuantizeOptions(io_type=io_type or "float", per_tensor_fc=per_tensor_fc,
                           default_range=parse_default_range(default_range) if default_range else None)


def check_output_path(path: str) -> None:
    """Fails before converting when `path` cannot be an output file (exit 1, naming `path`)."""
    if os.path.isdir(path):
        raise ConversionError(f"{path}: is a directory")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise ConversionError(f"{path}: directory {directory} does not exist")


def write_atomically(path: str, flatbuffer) -> None:
    """Writes to a temporary file beside `path`, then renames: never a half-written output.

    Errors name `path` (not the temporary file) and leave no temporary file behind."""
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".qconvert-", suffix=".tmp", dir=directory)
    except OSError as e:
        raise ConversionError(f"{path}: cannot write: {e.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            flatbuffer.write_to(f)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            raise ConversionError(f"{path}: cannot write: {e.strerror}") from None
        raise


def _write_stdout(flatbuffer) -> None:
    try:
        flatbuffer.write_to(sys.stdout.buffer)
        sys.stdout.buffer.flush()
    except BrokenPipeError:
        # The reader went away (`qconvert m.onnx - | head`): keep Python quiet at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise ConversionError("-: broken pipe (the reader closed standard output)") from None


@click.command(cls=_Command, context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("source", metavar="IN.onnx")
@click.argument("dest", metavar="OUT.tflite")
@click.option("--input-shape", "input_shapes", multiple=True, metavar="NAME:D1,D2,...",
              help="Pin an input's shape (repeatable), e.g. images:1,3,224,224.")
@click.option("--io-layout", type=click.Choice(["nhwc", "onnx"]), default="nhwc", show_default=True,
              help="nhwc: image inputs/outputs become channels-last (no TRANSPOSE at the edges); "
                   "onnx: keep the ONNX layout of every input and output.")
@click.option("--quantize", is_flag=True,
              help="Write a full-integer int8 model (needs --calibration or --default-range).")
@click.option("--calibration", metavar="PATH",
              help="Calibration data for --quantize: an .npz with one array per model input "
                   "(first axis = samples), or a directory of .npz/.npy files.")
@click.option("--calibration-samples", type=click.IntRange(min=1), metavar="N",
              help="Use the first N calibration samples (default: all).")
@click.option("--default-range", metavar="MIN,MAX",
              help="Range for tensors without calibration data (speed studies only: the int8 "
                   "model's accuracy is meaningless).")
@click.option("--io-type", type=click.Choice(["float", "int8", "uint8"]), default=None,
              help="Type of the quantized model's inputs and outputs [default: float].")
@click.option("--per-tensor-fc", is_flag=True,
              help="Quantize FULLY_CONNECTED weights per tensor, for runtimes without per-channel "
                   "dense layers (TFLite Micro before 2024).")
@click.option("--weight-only", is_flag=True,
              help="Store large weights as int8 (TFLite's dynamic-range mode); activations stay "
                   "float, no calibration data needed.")
@click.option("--weight-only-min-elements", type=click.IntRange(min=1), metavar="N",
              help="With --weight-only: quantize weights of at least N elements [default: 1024].")
@click.option("--float16", is_flag=True, help="Store every float weight as float16.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON report on stdout.")
@click.option("-v", "--verbose", is_flag=True, help="Log what the transformations do.")
@click.option("--debug", is_flag=True, help="Show a traceback on internal errors.")
@click.version_option(__version__, prog_name="qconvert")
def cli(source, dest, input_shapes, io_layout, quantize, calibration, calibration_samples,
        default_range, io_type, per_tensor_fc, weight_only, weight_only_min_elements, float16,
        as_json, verbose, debug):
    """Convert the float ONNX model IN.onnx to the TFLite model OUT.tflite.

    '-' as IN.onnx reads standard input; '-' as OUT.tflite writes standard output.
    Exit codes: 0 success, 1 conversion error, 2 usage error, 3 internal error.
    """
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING,
                        format="qconvert: %(message)s", stream=sys.stderr)
    shapes = parse_input_shape(input_shapes)
    weights = weight_mode_from_flags(weight_only, weight_only_min_elements, float16, quantize,
                                     calibration)
    quantize_options = quantize_options_from_flags(quantize, calibration, calibration_samples,
                                                   default_range, io_type, per_tensor_fc)
    if as_json and dest == "-":
        raise click.UsageError("--json prints on stdout, so OUT.tflite cannot be '-' with it")
    if dest == "-" and sys.stdout.isatty():
        raise click.UsageError("refusing to write a binary model to a terminal; redirect "
                               "standard output or give a file name")
    try:
        if dest != "-":
            check_output_path(dest)
        from .converter import convert

        data = sys.stdin.buffer.read() if source == "-" else None
        flatbuffer, report = convert(source, data=data, input_shapes=shapes, io_layout=io_layout,
                                     output_name=dest, quantize=quantize_options,
                                     calibration=calibration, calibration_samples=calibration_samples,
                                     progress=True, weights=weights,
                                     weight_only_min_elements=weight_only_min_elements or 1024)
        if dest == "-":
            _write_stdout(flatbuffer)
        else:
            write_atomically(dest, flatbuffer)
    except ConversionError as e:
        click.echo(f"qconvert: error: {_one_line(e)}", err=True)
        sys.exit(EXIT_CONVERSION_ERROR)
    except UsageError as e:
        click.echo(f"qconvert: error: {_one_line(e)}", err=True)
        sys.exit(EXIT_USAGE)
    except OSError as e:
        click.echo(f"qconvert: error: {e.filename or dest}: {e.strerror}", err=True)
        sys.exit(EXIT_CONVERSION_ERROR)
    except Exception as e:  # a bug: still one line unless --debug
        if debug:
            raise
        click.echo(f"qconvert: internal error: {type(e).__name__}: {_one_line(e)} (rerun with "
                   "--debug for a traceback and report it)", err=True)
        sys.exit(EXIT_INTERNAL)
    if as_json:
        click.echo(json.dumps(report.as_dict(), indent=2))
    click.echo(report.summary(), err=True)


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
    _return_freed_memory_to_the_system()
    cli(prog_name="qconvert")
