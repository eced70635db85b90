"""Command line: qconvert IN.onnx OUT.tflite [options]. '-' reads stdin / writes stdout.

Exit codes: 0 success, 1 conversion error (bad input, unsupported op), 2 usage error,
3 internal error (a bug in qconvert). Errors are one line on stderr, never a traceback
(unless --debug).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile

import click

from . import __version__
from .errors import ConversionError, UsageError

EXIT_CONVERSION_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3


def parse_input_shape(values: tuple[str, ...]) -> dict[str, tuple[int, ...]]:
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
        shapes[name] = shape
    return shapes


def write_atomically(path: str, data) -> None:
    """Writes to a temporary file beside `path`, then renames: never a half-written output."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".qconvert-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("source", metavar="IN.onnx")
@click.argument("dest", metavar="OUT.tflite")
@click.option("--input-shape", "input_shapes", multiple=True, metavar="NAME:D1,D2,...",
              help="Pin an input's shape (repeatable), e.g. images:1,3,224,224.")
@click.option("--io-layout", type=click.Choice(["nhwc", "onnx"]), default="nhwc", show_default=True,
              help="nhwc: image inputs/outputs become channels-last (no TRANSPOSE at the edges); "
                   "onnx: keep the ONNX layout of every input and output.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON report on stdout.")
@click.option("-v", "--verbose", is_flag=True, help="Log what the transformations do.")
@click.option("--debug", is_flag=True, help="Show a traceback on internal errors.")
@click.version_option(__version__, prog_name="qconvert")
def cli(source, dest, input_shapes, io_layout, as_json, verbose, debug):
    """Convert the float ONNX model IN.onnx to the TFLite model OUT.tflite."""
    from .converter import convert

    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING,
                        format="qconvert: %(message)s", stream=sys.stderr)
    shapes = parse_input_shape(input_shapes)
    if as_json and dest == "-":
        raise click.UsageError("--json prints on stdout, so OUT.tflite cannot be '-' with it")
    if dest != "-" and os.path.isdir(dest):
        raise click.UsageError(f"{dest}: is a directory")
    try:
        data = sys.stdin.buffer.read() if source == "-" else None
        flatbuffer, report = convert(source, data=data, input_shapes=shapes, io_layout=io_layout,
                                     output_name=dest)
        if dest == "-":
            sys.stdout.buffer.write(flatbuffer)
            sys.stdout.buffer.flush()
        else:
            write_atomically(dest, flatbuffer)
    except ConversionError as e:
        click.echo(f"qconvert: error: {e}", err=True)
        sys.exit(EXIT_CONVERSION_ERROR)
    except UsageError as e:
        click.echo(f"qconvert: usage error: {e}", err=True)
        sys.exit(EXIT_USAGE)
    except OSError as e:
        click.echo(f"qconvert: error: {e.filename or dest}: {e.strerror}", err=True)
        sys.exit(EXIT_CONVERSION_ERROR)
    except Exception as e:  # a bug: still one line unless --debug
        if debug:
            raise
        click.echo(f"qconvert: internal error: {type(e).__name__}: {e} (rerun with --debug for a "
                   "traceback and report it)", err=True)
        sys.exit(EXIT_INTERNAL)
    if as_json:
        click.echo(json.dumps(report.as_dict(), indent=2))
    click.echo(report.summary(), err=True)


def main() -> None:
    cli(prog_name="qconvert")
