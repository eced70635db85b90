"""`qconvert batch JOBS`: many conversions in one process, for build systems (issue 40).

A build converting 50 small models pays Python's, numpy's, onnx's, onnxruntime's and LiteRT's
start-up 50 times with one process per model; a batch pays it once. JOBS (a file, or '-' for
standard input) holds one conversion per line, written as its `qconvert IN OUT [flags]` command
line would be without the `qconvert` (shell-quoted: shlex; `#` starts a comment; blank lines are
skipped). Each job runs the command line's own parsing and conversion (qconvert/cli.py), so its
options are fresh, its file is byte-identical to a separate run's and its errors and exit code are
a separate run's; every line it writes on stderr names its place in JOBS (`qconvert: jobs.txt:3:
error: ...`). The batch's exit code is the first failed job's (0 when every job converted).

`qconvert worker --persistent_worker` is the same for Bazel: its persistent-worker protocol in JSON
(one WorkRequest object after another on stdin, one WorkResponse line each on stdout, the job's
stderr lines as its `output`); `@FILE` arguments are flag files, one argument per line.
"""

from __future__ import annotations

import io
import json
import os
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import ConversionError
from .files import check_input_file, print_stdout, read_stdin

PREFIX = "qconvert: "


@dataclass
class Job:
    """One line of JOBS: where it is (`jobs.txt:3`), its arguments, and what running it gave: its
    exit code, the message of its error line, and its --json report (cli.py fills `report`)."""

    where: str
    args: list[str]
    exit_code: int = 0
    error: str | None = None
    report: dict | None = None
    lines: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"job": self.where, "args": self.args, "exit": self.exit_code, "error": self.error,
                "report": self.report}


class _JobStderr:
    """Standard error while one job runs: each line starting "qconvert: " gets the job's place
    after it, and its error message is kept for the --json line. Whole lines only, so a message
    written in pieces (click writes the newline apart) is still one line."""

    def __init__(self, out, job: Job):
        self.out, self.job, self.pending = out, job, ""
        self.encoding = getattr(out, "encoding", "utf-8")  # click asks a text stream for both
        self.errors = getattr(out, "errors", "strict")

    def write(self, text: str) -> int:
        self.pending += text
        *lines, self.pending = self.pending.split("\n")
        for line in lines:
            self._emit(line)
        return len(text)

    def _emit(self, line: str) -> None:
        if line.startswith(PREFIX):
            rest = line[len(PREFIX):]
            for kind in ("error: ", "internal error: "):
                if rest.startswith(kind):
                    self.job.error = rest[len(kind):]
            line = f"{PREFIX}{self.job.where}: {rest}" if self.job.where else line
        self.out.write(line + "\n")
        self.out.flush()

    def finish(self) -> None:
        if self.pending:
            self._emit(self.pending)
            self.pending = ""

    def flush(self) -> None:
        self.out.flush()

    def isatty(self) -> bool:
        return self.out.isatty()

    def fileno(self) -> int:
        return self.out.fileno()


def read_jobs(path: str) -> str:
    """JOBS' text: the file at `path`, or standard input for '-' (UTF-8)."""
    if path != "-":
        check_input_file(path)
    data = read_stdin() if path == "-" else open(path, "rb").read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConversionError(f"{path}: not UTF-8 text (byte {e.start}); JOBS holds one "
                              "qconvert command line per line") from None


def parse_jobs(name: str, text: str) -> list[Job | tuple[str, str]]:
    """The jobs of JOBS' `text`, in order: a Job per command line, or (where, message) for a
    line shlex cannot split (an unclosed quote). Comments and blank lines are no job."""
    jobs = []
    shown = "<stdin>" if name == "-" else name
    for number, line in enumerate(text.splitlines(), 1):
        where = f"{shown}:{number}"
        try:
            args = shlex.split(line, comments=True)
        except ValueError as e:
            jobs.append((where, f"cannot split the line: {e}"))
            continue
        if args:
            jobs.append(Job(where, args))
    return jobs


def run_jobs(name: str, text: str, run_one: Callable[[Job], int], as_json: bool,
             usage_exit: int) -> int:
    """Runs every job of `text` (JOBS named `name`) with `run_one` (cli.py's: the job's command
    line, in this process), each with its stderr lines naming it, and with `as_json` one JSON
    object per job on stdout, one line each; a line shlex cannot split exits `usage_exit` (the
    command line's code for a usage error). Returns the first non-zero exit code, else 0."""
    failed = []
    jobs = parse_jobs(name, text)
    for job in jobs:
        if isinstance(job, tuple):  # a line that is no command line: a usage error of its own
            job = Job(job[0], [], usage_exit, job[1])
            sys.stderr.write(f"{PREFIX}{job.where}: error: {job.error}\n")
        else:
            real, sys.stderr = sys.stderr, _JobStderr(sys.stderr, job)
            try:
                job.exit_code = run_one(job)
            finally:
                sys.stderr.finish()
                sys.stderr = real
        if job.exit_code:
            failed.append(job)
        if as_json:
            print_stdout(json.dumps(job.as_dict()))
    sys.stderr.write(_total(name, len(jobs), failed) + "\n")
    return failed[0].exit_code if failed else 0


def _total(name: str, count: int, failed: list[Job]) -> str:
    """The batch's last line: how many jobs, how many converted, which failed with which code."""
    shown = "<stdin>" if name == "-" else name
    line = f"{PREFIX}batch {shown}: {count} job{'s' * (count != 1)}, {count - len(failed)} converted"
    if failed:
        listed = ", ".join(f"{job.where} exit {job.exit_code}" for job in failed[:10])
        more = f" and {len(failed) - 10} more" if len(failed) > 10 else ""
        line += f", {len(failed)} failed ({listed}{more})"
    return line


def _expand_flag_files(args: list[str]) -> list[str]:
    """`args` with each `@FILE` replaced by FILE's lines, one argument each (Bazel's flag files:
    a worker action's arguments arrive that way)."""
    expanded = []
    for arg in args:
        if arg.startswith("@") and len(arg) > 1:
            with open(arg[1:], encoding="utf-8") as f:
                expanded += [line for line in f.read().splitlines() if line]
        else:
            expanded.append(arg)
    return expanded


def run_worker_request(request: dict, run_one: Callable[[Job], int]) -> dict:
    """One WorkRequest ({"arguments": [...], "requestId": N}) run as a job; its WorkResponse
    ({"exitCode", "output": the job's stderr lines, "requestId"})."""
    captured = io.StringIO()
    job = Job("", [])
    real, sys.stderr = sys.stderr, _JobStderr(captured, job)
    try:
        job.args = _expand_flag_files([str(a) for a in request.get("arguments", [])])
        job.exit_code = run_one(job)
    except OSError as e:  # a flag file that cannot be read
        sys.stderr.write(f"{PREFIX}error: {e.filename}: {e.strerror}\n")
        job.exit_code = 1
    finally:
        sys.stderr.finish()
        sys.stderr = real
    return {"exitCode": job.exit_code, "output": captured.getvalue(),
            "requestId": request.get("requestId", 0)}


def serve_worker(run_one: Callable[[Job], int]) -> int:
    """Bazel's persistent worker (JSON): reads WorkRequests from stdin until it ends, answers each
    with one WorkResponse line. Standard output carries nothing else: fd 1 is pointed at stderr
    for the jobs (a native library's print included), the responses go to a copy of it."""
    responses = os.fdopen(os.dup(1), "w", encoding="utf-8")
    sys.stdout.flush()
    os.dup2(2, 1)
    decoder, pending = json.JSONDecoder(), ""
    for line in sys.stdin:
        pending += line
        while pending.strip():
            try:
                request, end = decoder.raw_decode(pending.lstrip())
            except json.JSONDecodeError:
                break  # the object goes on in the next line
            pending = pending.lstrip()[end:]
            responses.write(json.dumps(run_worker_request(request, run_one)) + "\n")
            responses.flush()
    return 0


def run_worker(args: list[str], run_one: Callable[[Job], int]) -> int:
    """`qconvert worker ARGS`: with --persistent_worker, serve Bazel's requests; without, one job
    of ARGS (flag files expanded) and its exit code, as Bazel runs a worker action when workers
    are off."""
    if "--persistent_worker" in args:
        return serve_worker(run_one)
    response = run_worker_request({"arguments": args}, run_one)
    sys.stderr.write(response["output"])
    return response["exitCode"]
