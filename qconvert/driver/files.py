"""How qconvert reads its input and writes its outputs: the "Files" rules of qconvert/cli.py's
docstring (and docs/guide.md, "The command line in depth"), in one place.

An input is a regular file or standard input, never a FIFO or a device that would block or never
end; an output never overwrites an input; a regular output appears only complete (a temporary file
renamed into place once everything succeeded), a symlink's target is replaced and the link kept, a
character device or FIFO is written through; a closed or failing standard stream is a one-line
ConversionError, never a traceback at exit.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import sys
import tempfile

from ..errors import ConversionError, UsageError
from ..errors import MODEL_BYTES


def _file_kind(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "directory"), (stat.S_ISFIFO, "FIFO"), (stat.S_ISCHR, "character device"),
             (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket"))
    return next((name for test, name in kinds if test(mode)), "special file")


def check_input_file(path: str) -> None:
    """Refuses an input path that is a FIFO, a device or a socket before anything opens it:
    opening a FIFO blocks until a writer comes, and /dev/zero never ends. A missing file or a
    directory is left to the reader, which names it; '-' (standard input) is not a path."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return
    if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        raise ConversionError(f"{path}: a {_file_kind(mode)}, not a regular file; give a file, or "
                              "'-' to read standard input")


def check_distinct_files(inputs: dict[str, str | None], outputs: dict[str, str | None]) -> None:
    """A UsageError when an output would overwrite an input or another output: the same path after
    normalisation, or the same existing file (device and inode: a hard link, a symlink).
    `inputs` and `outputs` map a role ("IN.onnx", "--report") to a path (None or '-': none)."""

    def same(a: str, b: str) -> bool:
        if os.path.normpath(os.path.abspath(a)) == os.path.normpath(os.path.abspath(b)):
            return True
        try:
            return os.path.samefile(a, b)
        except (OSError, ValueError):  # one of them does not exist (yet)
            return False

    given_inputs = [(role, path) for role, path in inputs.items() if path and path != "-"]
    given_outputs = [(role, path) for role, path in outputs.items() if path and path != "-"]
    for k, (role, path) in enumerate(given_outputs):
        for other_role, other in given_inputs + given_outputs[:k]:
            if same(path, other):
                why = ("qconvert never overwrites its input" if (other_role, other) in given_inputs
                       else "two outputs cannot share a file")
                raise UsageError(f"{role} {path!r} is {other_role} {other!r} (the same file): {why}; "
                                 "give another name")


def output_kind(dest: str) -> str:
    """How OUT is written, decided before converting: "-" (standard output), "file" (a regular
    file or a new name, replaced atomically; a symlink's target) or "stream" (an existing
    character device or FIFO, written through once the model is complete). Any other kind of file
    is a ConversionError naming `dest`."""
    if dest == "-":
        return "-"
    if dest.endswith(os.sep):  # `out.tflite/`: a directory was meant, or the name is a typo
        raise ConversionError(f"{dest}: ends in {os.sep!r}, a directory; OUT names a file")
    target = os.path.realpath(dest)
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as e:
        raise ConversionError(f"{dest}: {e.strerror}") from None
    if mode is not None and stat.S_ISDIR(mode):
        raise ConversionError(f"{dest}: is a directory")
    if mode is not None and (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)):
        return "stream"
    if mode is not None and not stat.S_ISREG(mode):
        raise ConversionError(f"{dest}: a {_file_kind(mode)}; qconvert writes a regular file, a "
                              "character device or a FIFO")
    directory = os.path.dirname(target)
    if not os.path.isdir(directory):
        raise ConversionError(f"{dest}: directory {directory} does not exist")
    return "file"


def write_output(dest: str, flatbuffer, check=None) -> None:
    """Writes the model (a writer's Flatbuffer, or bytes) to `dest` as output_kind says.
    `check(path)`, if given, is run on the complete file before the model appears at `dest`
    (renamed into place, or streamed) and may raise to keep it from appearing."""
    if isinstance(flatbuffer, bytes):
        flatbuffer = _Bytes(flatbuffer)
    if output_kind(dest) == "file":
        def fill(path):
            with open(path, "wb") as f:
                flatbuffer.write_to(f)
            if check is not None:
                check(path)

        replace_atomically(dest, fill)
    elif check is None:
        _write_stream(dest, flatbuffer.write_to)
    else:
        with tempfile.TemporaryDirectory(prefix="qconvert-") as tmp:
            path = os.path.join(tmp, "model.tflite")
            with open(path, "wb") as f:
                flatbuffer.write_to(f)
            check(path)
            with open(path, "rb") as f:
                _write_stream(dest, lambda out: shutil.copyfileobj(f, out, 1 << 20))


class _Bytes:
    """Bytes written like a Flatbuffer."""

    def __init__(self, data: bytes):
        self.data = data

    def write_to(self, f) -> None:
        f.write(self.data)


def replace_atomically(path: str, fill) -> None:
    """Runs fill(temporary path) on a new file beside `path` (beside a symlink's target), then
    renames it to `path` (the target, keeping the link): never a half-written file, and nothing
    new at `path` when fill raises. Errors name `path`; no temporary file is left behind. The
    temporary name ends like `path` (the report writer picks the format by the suffix)."""
    target = os.path.realpath(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=".qconvert-", suffix=os.path.splitext(target)[1],
                                   dir=os.path.dirname(target))
        os.close(fd)
    except OSError as e:
        raise ConversionError(f"{path}: cannot write: {e.strerror}") from None
    try:
        fill(tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            raise ConversionError(f"{path}: cannot write: {e.strerror}") from None
        raise


def _write_stream(dest: str, write) -> None:
    """Runs write(binary file) on standard output ('-') or on the character device or FIFO
    `dest`; a closed, full or broken stream, a FIFO without a reader and a terminal are
    ConversionErrors naming `dest`."""
    if dest == "-":
        _to_stdout(write)
        return
    try:
        fd = os.open(dest, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY)  # a FIFO: never block here
    except OSError as e:
        reason = "a FIFO without a reader" if e.errno == errno.ENXIO else e.strerror
        raise ConversionError(f"{dest}: cannot write: {reason}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            if os.isatty(fd):
                raise ConversionError(f"{dest}: refusing to write a binary model to a terminal")
            os.set_blocking(fd, True)
            write(f)
    except OSError as e:
        raise ConversionError(f"{dest}: cannot write: {e.strerror}") from None


def _to_stdout(write) -> None:
    """Runs write(binary standard output) and flushes it at once, so that a closed, full or
    broken stdout is a one-line ConversionError now (before any output file is renamed into
    place), not a traceback when Python exits."""
    if sys.stdout is None:
        raise ConversionError("-: standard output is closed")
    try:
        sys.stdout.flush()
        write(sys.stdout.buffer)
        sys.stdout.buffer.flush()
    except OSError as e:
        try:  # Python flushes what is left at exit: let that go to /dev/null, quietly
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        if isinstance(e, BrokenPipeError):  # `qconvert m.onnx - | head`
            raise ConversionError("-: broken pipe (the reader closed standard output)") from None
        raise ConversionError(f"-: cannot write standard output: {e.strerror}") from None


def print_stdout(text: str) -> None:
    """`text` and a newline on standard output, now (see _to_stdout)."""
    _to_stdout(lambda out: out.write(text.encode() + b"\n"))


def read_stdin() -> bytes:
    """Standard input's bytes (IN '-'), at most errors.MODEL_BYTES of them."""
    if sys.stdin is None:
        raise ConversionError("-: standard input is closed")
    try:
        return MODEL_BYTES.read(sys.stdin.buffer, "<stdin>")
    except OSError as e:
        raise ConversionError(f"-: cannot read standard input: {e.strerror}") from None


def fill_closed_standard_fds() -> None:
    """Opens /dev/null on a closed fd 0, 1 or 2. Python has already set sys.stdin/stdout/stderr
    to None for them (that is how read_stdin and _to_stdout see them closed); without this, the
    next file opened (the temporary output) would get the number, and a library writing to
    fd 2 would write into it."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDONLY if fd == 0 else os.O_WRONLY)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
