"""Command line: qconvert IN.onnx OUT.tflite [options]. '-' reads stdin / writes stdout.
Also `qconvert verify IN.onnx OUT.tflite` (qconvert/check/verify.py), `qconvert inspect FILE.tflite`
(qconvert/check/inspect_tflite.py), `qconvert fakequant IN.onnx OUT.onnx` (qconvert/qdq/fakequant.py)
and `qconvert batch JOBS`, many conversions in one process (qconvert/driver/batch.py; `qconvert worker
--persistent_worker` is the same for Bazel's persistent-worker protocol).

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
  IN     a regular file, or '-' for standard input (read up to errors.MODEL_BYTES). A FIFO, a
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
from click.core import ParameterSource

from .version import __version__
from .errors import BelowThreshold, ConversionError, UsageError
from .driver.files import (
    check_distinct_files,
    check_input_file,
    fill_closed_standard_fds,
    output_kind,
    print_stdout,
    read_stdin,
    write_output,
)

EXIT_CONVERSION_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3
EXIT_BELOW_THRESHOLD = 4


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
    click's parsing and parameter errors and qconvert's UsageError exit 2, ConversionError,
    OSError and MemoryError 1, BelowThreshold 4, anything else is a bug, exit 3. --debug adds the traceback to an
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
            internal = not isinstance(e, (UsageError, ConversionError, BelowThreshold, OSError,
                                          MemoryError))
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
    if isinstance(e, MemoryError):  # the machine's limit, met where no size check foresaw it
        click.echo(f"qconvert: error: out of memory ({_one_line(e) or 'MemoryError'}): the model needs "
                   "more memory than this process can get", err=True)
        sys.exit(EXIT_CONVERSION_ERROR)
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
# What every command has: -h as well as --help; and (most of them) --debug.
_command = click.command(cls=_Command, context_settings={"help_option_names": ["-h", "--help"]})
_debug_option = _option("--debug", is_flag=True, help="Show the traceback of an error (the exit code stays).")


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


# The parameters of a command that are not options of the conversion.
_NOT_CONVERSION_OPTIONS = ("source", "dest", "as_json", "verbose", "debug")


def _options(**fixed):
    """The conversion's Options (driver/options.py) from the running command's parameters (named
    as options_from_flags's keywords; --verify's is verify_flag) and `fixed`; their usage errors
    are click's, so they print as click's own do (with the variables used and the --help hint)."""
    from .driver.options import options_from_flags

    params = click.get_current_context().params
    flags = {"verify" if name == "verify_flag" else name: value for name, value in params.items()
             if name not in _NOT_CONVERSION_OPTIONS}
    try:
        return options_from_flags(**flags, **fixed)
    except UsageError as e:
        raise click.UsageError(str(e)) from None


def _check_report_file(report_path: str | None) -> None:
    if report_path is not None and output_kind(report_path) != "file":
        raise ConversionError(f"{report_path}: --report writes a regular file")


def _print_json(report, report_path: str | None = None) -> None:
    """The JSON report on stdout; when stdout fails, the --report file written just before goes
    too (the run fails, so it leaves nothing)."""
    try:
        print_stdout(json.dumps(report.as_dict(), indent=2))
    except ConversionError:
        if report_path is not None:
            os.unlink(os.path.realpath(report_path))
        raise


@_command
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
                   "(first axis = samples), a directory of .npz/.npy files, or, for a model with "
                   "one input, a directory of images (.png .jpg .jpeg .bmp .webp; see --mean) or "
                   "of .wav files (see --sample-rate).")
@_option("--calibration-samples", type=click.IntRange(min=1), metavar="N",
              help="Use the first N calibration samples (default: all).")
@_option("--calibration-method", metavar="METHOD",
              help="How calibration turns values into ranges: minmax (the global min and max), "
                   "percentile[:P] (the P and 100-P percentiles, P default 99.99) or mse (the "
                   "range with the least int8 error); percentile and mse run the samples twice "
                   "[default: minmax].")
@_option("--mean", metavar="M[,M,M]",
              help="For a folder of images as calibration or verification data and a float "
                   "input: pixels scaled to 0..1 have M subtracted, one value or one per channel, "
                   "e.g. 0.485,0.456,0.406 [default: 0]; an integer input takes the pixels 0..255 "
                   "as they are. For a folder of .wav files: one value, subtracted from the "
                   "samples in -1..1.")
@_option("--std", metavar="S[,S,S]",
              help="For a folder of images: the pixels (after --mean) are divided by S, one "
                   "value or one per channel, e.g. 0.229,0.224,0.225 [default: 1]; for .wav files "
                   "one value (1/32768 gives int16-valued samples).")
@_option("--sample-rate", type=click.IntRange(min=1), metavar="HZ",
              help="For a folder of .wav files: the rate every file must have (a file of "
                   "another rate is an error) [default: any one rate; files of two rates are an "
                   "error].")
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
@_option("--weight-rounding", type=click.Choice(["output", "nearest"]), default=None,
              help="With --quantize --calibration: output rounds each int8 weight for its layer's "
                   "output error on the calibration inputs (GPTQ-style); nearest rounds each to "
                   "nearest [default: output].")
@_option("--no-bias-correction", is_flag=True,
              help="With --quantize --calibration: keep each int8 layer's bias as is, rather than "
                   "taking back the mean output shift its rounded weights cause.")
@_option("--no-equalization", is_flag=True,
              help="With --quantize --calibration: do not rescale the channels between two "
                   "weighted layers (cross-layer equalization) so one int8 scale fits them all.")
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
              help="Verification inputs in the calibration-data format (an .npz, or a directory "
                   "as --calibration takes) [default: the calibration data, else seeded standard "
                   "normal inputs].")
@_option("--latency", is_flag=True,
              help="Time the verified quantized or weight-stored model against its float model in "
                   "LiteRT on this CPU, in alternating rounds (about a second), and print it: a "
                   "report on this machine, never an input to the conversion.")
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
@_option("--precision", type=click.Choice(["auto", "int8", "float"]), default=None,
              help="With --quantize: auto makes every op int8 but the regions measured not to "
                   "hold --target-sqnr on the calibration data, which go to the target's other "
                   "precisions (int16, hybrid, float) at the least cost there; int8 makes every op "
                   "int8 that can be [default: auto with --calibration]. Without --quantize: float "
                   "writes the float file of a model that arrives quantized (QDQ pairs on its "
                   "activations), which otherwise converts to int8 with its own params.")
@_option("--target-sqnr", type=float, metavar="DB",
              help="The plan's target: every output reaches DB dB SQNR against onnxruntime and "
                   "every output slice DB-10 dB, on the first 8 samples of the calibration data "
                   "[default: 20]; 0 is --precision int8.")
@_option("--target", metavar="NAME|FILE",
              help="With --quantize: the device the model is for, which kernels it has and what "
                   "they cost: arm64 (a phone's CPU with XNNPACK), x86 (AVX2, XNNPACK), micro "
                   "(TFLite Micro: int8, int16, int8 I/O), npu (integer-only accelerator: no "
                   "float, int8 I/O), or a target file (.json, see docs/guide.md) [default: arm64].")
@_option("--json", "as_json", is_flag=True, help="Print a JSON report on stdout.")
@_option("-v", "--verbose", is_flag=True, help="Log what the transformations do.")
@_debug_option
@click.version_option(__version__, prog_name="qconvert")
def cli(source, dest, as_json, verbose, debug, **flags):
    """Convert the float ONNX model IN.onnx to the TFLite model OUT.tflite.

    '-' as IN.onnx reads standard input; '-' as OUT.tflite writes standard output.
    Exit codes: 0 success, 1 conversion error, 2 usage error, 3 internal error, 4 verification
    failed (a float conversion that does not match onnxruntime, or below --min-sqnr). Also:
    qconvert verify IN.onnx OUT.tflite, qconvert inspect FILE.tflite, qconvert fakequant IN.onnx
    OUT.onnx, qconvert batch JOBS (many conversions in one process; see their --help). Every
    option can also be set by the environment variable shown with it (a flag given here wins; a
    repeatable option takes space-separated values).
    """
    _log_to_stderr(verbose)
    options = _options()  # from `flags`, the conversion's options
    report = options.verify.report
    job = _batch_job()
    if job is not None and (as_json or "-" in (source, dest)):
        raise click.UsageError("a batch job reads and writes files, and --json is qconvert "
                               "batch's own option: no '-' and no --json in a job's line")
    if as_json and dest == "-":
        raise click.UsageError("--json prints on stdout, so OUT.tflite cannot be '-' with it")
    check_distinct_files({"IN.onnx": source, "--calibration": flags["calibration"],
                          "--verify-data": flags["verify_data"]},
                         {"OUT.tflite": dest, "--report": report})
    if (dest == "-" or as_json) and sys.stdout is None:
        raise ConversionError("-: standard output is closed")
    if dest == "-" and sys.stdout.isatty():
        raise click.UsageError("refusing to write a binary model to a terminal; redirect "
                               "standard output or give a file name")
    if source != "-":
        check_input_file(source)
    output_kind(dest)  # refuses before converting what cannot be written
    _check_report_file(report)
    from .driver.conversion import convert

    def write(flatbuffer, finish) -> None:
        """OUT appears only after the verification (and the --report file), then the JSON
        report: a failure of either leaves nothing at OUT."""
        if not (options.verify.enabled or as_json):
            write_output(dest, flatbuffer)
            finish(None)
            return

        def before_the_output_appears(path):
            summary = finish(path)
            if as_json:
                _print_json(summary, report if options.verify.enabled else None)

        write_output(dest, flatbuffer, before_the_output_appears)

    data = read_stdin() if source == "-" else None
    _, summary = convert(source, options, data=data, output_name=dest, progress=True, write=write)
    if job is not None:
        job.report = summary.as_dict()
    click.echo(summary.summary(), err=True)


def _batch_job():
    """The driver/batch.py Job this conversion runs as (click's context object), else None."""
    from .driver.batch import Job

    obj = click.get_current_context().obj
    return obj if isinstance(obj, Job) else None


@_command
@click.argument("source", metavar="IN.onnx")
@click.argument("tflite", metavar="MODEL.tflite")
@_option("--data", metavar="PATH",
              help="Inputs in the calibration-data format (an .npz, or a directory of .npz/.npy "
                   "files, images or .wav files; see --mean, --std, --sample-rate) [default: "
                   "seeded inputs, standard normal for float inputs, 0..9 for integer ones].")
@_option("--samples", type=click.IntRange(min=1), default=8, show_default=True, metavar="N",
              help="How many samples to run (the first N of --data).")
@_option("--min-sqnr", type=float, metavar="DB",
              help="Exit 4 when an output (or an output's slice) is below DB dB SQNR.")
@_option("--report", metavar="FILE",
              help="Also write the per-tensor report, FILE.json or FILE.html.")
@_option("--json", "as_json", is_flag=True, help="Print the results as JSON on stdout.")
@_debug_option
def verify_cli(source, tflite, data, samples, min_sqnr, report, as_json, debug, mean, std,
               sample_rate):
    """Run IN.onnx in onnxruntime and MODEL.tflite (written by any tool) in LiteRT on the same
    inputs and compare every output: SQNR, errors, cosine, top-1 agreement, worst slice.

    Exit codes: 0 passed (or no --min-sqnr), 1 error, 2 usage error, 3 internal error, 4 an
    output or slice below --min-sqnr.
    """
    from .driver.options import VerifyOptions, check_report_path, file_decoding

    try:
        check_report_path(report)
        decoding = file_decoding(mean, std, sample_rate, paths=(data,), data_flags="--data")
    except UsageError as e:
        raise click.UsageError(str(e)) from None
    check_distinct_files({"IN.onnx": source, "MODEL.tflite": tflite, "--data": data},
                         {"--report": report})
    if source != "-":
        check_input_file(source)
    check_input_file(tflite)
    _check_report_file(report)
    from .onnx.can_run import check_cost
    from .check.inspect_tflite import litert_crash
    from .driver.conversion import check_written, require_passed
    from .onnx.file import read_onnx

    stdin = read_stdin() if source == "-" else None
    onnx_file = read_onnx(source, stdin)
    check_cost(onnx_file.proto)  # before LiteRT's trial run too: a Loop of 2^40 trips is one line
    crash = litert_crash(tflite)  # any tool's file: LiteRT tries it in a child process first
    if crash is not None:
        raise ConversionError(f"{tflite}: {crash}; it cannot be verified")
    options = VerifyOptions(True, True, samples, data, min_sqnr, report, decoding=decoding)
    result, read_from = check_written(onnx_file, source if stdin is None else None, tflite, options)
    print_stdout(json.dumps(result.as_dict(), indent=2) if as_json else _verification_table(result))
    require_passed(result)
    unscaled = read_from.unscaled_images() if read_from is not None else ""
    click.echo(f"qconvert: {'data: ' + unscaled + '; ' if unscaled else ''}{result.summary()}", err=True)


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


@_command
@click.argument("path", metavar="FILE.tflite")
@_option("--json", "as_json", is_flag=True,
              help="Print everything as JSON on stdout, exact values (keys: see "
                   "qconvert/check/inspect_tflite.py).")
@_debug_option
def inspect_cli(path, as_json, debug):
    """Show what FILE.tflite (written by any tool) holds: ops with builtin code and version,
    which of them LiteRT's default XNNPACK delegate takes and in how many partitions, tensors
    with dtype, shape, shape signature and quantization, buffer sizes, metadata, signatures.

    Exit codes: 0 shown, 1 not a readable .tflite, 2 usage error, 3 internal error.
    """

    from .check.inspect_tflite import format_text, inspect_file

    check_input_file(path)
    report = inspect_file(path)
    print_stdout(json.dumps(report, indent=2) if as_json else format_text(report))


FILE_DECODING_OPTIONS = ("mean", "std", "sample_rate")
# The conversion's options that decide where and how the int8 model quantizes, shared with cli.
FAKEQUANT_OPTIONS = ("input_shapes", "calibration", "calibration_samples", "calibration_method",
                     "mean", "std", "sample_rate", "default_range", "activations", "per_tensor_fc", "weight_rounding",
                     "no_bias_correction", "no_equalization", "keep_float", "precision", "target_sqnr", "target",
                     "as_json", "verbose", "debug")


@_command
@click.argument("source", metavar="IN.onnx")
@click.argument("dest", metavar="OUT.onnx")
def fakequant_cli(source, dest, as_json, verbose, debug, **flags):
    """Write OUT.onnx: IN.onnx with QuantizeLinear/DequantizeLinear pairs exactly where
    `qconvert IN.onnx OUT.tflite --quantize` with the same options quantizes, holding the params it
    chooses (int8 weights per channel, int32 biases; int16 pairs for --activations int16, opset 21);
    the ops kept float or promoted (--keep-float, --target-sqnr) are named in its metadata.
    onnxruntime runs it: measure the int8
    model's accuracy in your own evaluation loop. `qconvert OUT.onnx X.tflite --quantize` (no
    calibration) gives back the same params.

    Exit codes: 0 written, 1 conversion error, 2 usage error, 3 internal error.
    """
    _log_to_stderr(verbose)
    options = _options(quantize=True, no_verify=True)  # from `flags`, the conversion's options
    if as_json and dest == "-":
        raise click.UsageError("--json prints on stdout, so OUT.onnx cannot be '-' with it")
    check_distinct_files({"IN.onnx": source, "--calibration": flags["calibration"]}, {"OUT.onnx": dest})
    if source != "-":
        check_input_file(source)
    output_kind(dest)
    from .driver.conversion import fake_quant

    data = read_stdin() if source == "-" else None
    written, summary = fake_quant(source, options, data=data, output_name=dest, progress=True)
    show = (lambda path: print_stdout(json.dumps(summary.as_dict(), indent=2))) if as_json else None
    write_output(dest, written, show)
    click.echo(summary.summary(), err=True)


@_command
@click.argument("jobs", metavar="JOBS")
@_option("--json", "as_json", is_flag=True,
              help="Print one JSON object per job on stdout, one line each: job (JOBS:LINE), args, "
                   "exit, error (its message, or null), report (its --json report, or null).")
@_debug_option
def batch_cli(jobs, as_json, debug):
    """Run the conversions listed in JOBS (a file, or '-' for standard input) in this one process:
    one per line, each written as `qconvert IN.onnx OUT.tflite [options]` would be without the
    `qconvert`, shell-quoted; '#' starts a comment, blank lines are skipped. Each job converts
    exactly as its own command would (the same file, bytes for bytes; the same checks and exit
    code), with every line it prints naming it as JOBS:LINE; a failed job does not stop the
    others. A job takes file names, never '-', and no --json (give it to the batch).

    Exit codes: the first failed job's (0 when every job converted); 1 JOBS unreadable, 2 usage
    error, 3 internal error.
    """
    from .driver.batch import read_jobs, run_jobs

    code = run_jobs(jobs, read_jobs(jobs), _run_job, as_json, EXIT_USAGE)
    if code:
        sys.exit(code)


def _run_job(job) -> int:
    """One batch job: the conversion command on `job.args`, as `qconvert ARGS` runs it (its own
    parsing, options and one-line errors); its exit code. The job is click's context object,
    which cli() fills with its report. The previous job's log handler goes first: each job's
    --verbose and stderr are its own (only a batch's jobs configure logging again)."""
    for handler in logging.root.handlers[:]:
        logging.root.removeHandler(handler)
    try:
        cli.main(args=job.args, prog_name="qconvert", obj=job, standalone_mode=True)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else EXIT_CONVERSION_ERROR)
    return 0


# Copies: each command names its own environment variables.
fakequant_cli.params += [copy.copy(p) for p in cli.params if p.name in FAKEQUANT_OPTIONS]
# How verify's --data folder of images or .wav files becomes samples, as the conversion's.
verify_cli.params[-1:-1] = [copy.copy(p) for p in cli.params if p.name in FILE_DECODING_OPTIONS]
_with_environment_variables(cli, "QCONVERT")
_with_environment_variables(verify_cli, "QCONVERT_VERIFY")
_with_environment_variables(inspect_cli, "QCONVERT_INSPECT")
_with_environment_variables(fakequant_cli, "QCONVERT_FAKEQUANT")
_with_environment_variables(batch_cli, "QCONVERT_BATCH")
COMMANDS = {"verify": verify_cli, "inspect": inspect_cli, "fakequant": fakequant_cli,
            "batch": batch_cli}


def _log_to_stderr(verbose: bool) -> None:
    """The driver's warnings (and with --verbose what the transformations do) on stderr, each
    line starting with "qconvert: "."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING,
                        format="qconvert: %(message)s", stream=sys.stderr)


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
    if sys.argv[1:2] == ["worker"]:  # Bazel's persistent worker (driver/batch.py)
        from .driver.batch import run_worker

        sys.exit(run_worker(sys.argv[2:], _run_job))
    if len(sys.argv) > 1 and sys.argv[1] in COMMANDS:
        name = sys.argv[1]
        COMMANDS[name](args=sys.argv[2:], prog_name=f"qconvert {name}")
    else:
        cli(prog_name="qconvert")
