"""Runs one fuzz case and lists what it did wrong.

In a forked child of the pytest process running click's CliRunner for model and calibration cases
(tens of milliseconds each: qconvert is imported once), a real subprocess of the console script
for cases whose file descriptors matter (Run.subprocess). Either way: a CPU-time budget
(Run.cpu_seconds, with a load-scaled wall-clock backstop for a child that blocks: tests/processes.py;
a hang fails the case, a busy machine does not), an address-space limit (a memory bomb fails with MemoryError instead of taking the
machine), a crash that fails the case instead of killing pytest, and the checks every case must
pass:

* exit code in the case's allowed set, a subset of {0, 1, 2, 4}: never 3 (internal error);
* no traceback on stderr (in-process: no exception escaping the command either), and an error
  line "qconvert: error: ..." whenever the exit code is not 0;
* every file that was there before (the inputs) unchanged, and OUT untouched after a failure;
  nothing new after a failure (no OUT, no temporary file); a symlink, FIFO or device at OUT still
  one after a success (written through or refused, never silently replaced);
* no unpickling (calibration cases plant a payload that would create PWNED);
* every model written with exit 0 loads, allocates and invokes in LiteRT, with and without
  XNNPACK, in a separate process (litert_check.py).
"""

from __future__ import annotations

import faulthandler
import json
import os
import pickle
import resource
import select
import signal
import stat
import subprocess
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

from click.testing import CliRunner

from tests.fuzz.cases import PWNED, Run
from tests.processes import POLL, Backstop, Hang, cpu_message, limit_cpu, overran_cpu
from tests.processes import run as run_bounded

ROOT = Path(__file__).resolve().parents[2]  # the checkout whose qconvert is under test
QCONVERT = str(Path(sys.executable).parent / "qconvert")
MEMORY_LIMIT = 6 << 30  # address space while a case runs: a bomb fails instead of swapping
CHECKER = Path(__file__).with_name("litert_check.py")


@dataclass
class Outcome:
    exit_code: int | None  # None: timed out; 128 + N: killed by signal N
    stdout: bytes
    stderr: str
    escaped: str | None = None  # in-process: an exception that escaped the command (a traceback)


# --- running --------------------------------------------------------------------------------------
def _command(args: list[str]):
    from qconvert.cli import cli, inspect_cli, verify_cli

    commands = {"inspect": inspect_cli, "verify": verify_cli}
    if args and args[0] in commands:
        return commands[args[0]], args[1:], f"qconvert {args[0]}"
    return cli, args, "qconvert"


def preload() -> None:
    """Imports what a conversion imports lazily, once, before the first fork: each case's child
    then starts with it loaded (no thread is started by these imports; the parent never runs a
    session or an interpreter, so forking it is safe)."""
    import ai_edge_litert.interpreter  # noqa: F401
    import onnxruntime  # noqa: F401

    import qconvert.cli  # noqa: F401
    import qconvert.driver.conversion  # noqa: F401
    import qconvert.check.inspect_tflite  # noqa: F401
    import qconvert.calibration.data  # noqa: F401
    import qconvert.check.report  # noqa: F401


def _invoke(run: Run, directory: Path) -> tuple:
    """In the forked child: runs the command with click's CliRunner."""
    command, args, prog = _command(run.args)
    os.chdir(directory)
    os.environ.update(run.env)
    limit_cpu(run.cpu_seconds)
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, resource.getrlimit(resource.RLIMIT_AS)[1]))
    result = CliRunner().invoke(command, args, input=run.stdin, prog_name=prog)
    escaped = None
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        escaped = f"{type(result.exception).__name__}: {result.exception}"
    return result.exit_code, result.stdout_bytes, result.stderr, escaped


def run_in_process(run: Run, directory: Path) -> Outcome:
    """Runs the case in a forked child of this process: as fast as in-process (qconvert is already
    imported), but a crash, a hang or a memory bomb ends the child, not pytest, and no state
    (cwd, environment, logging, limits) leaks from one case into the next."""
    read_end, write_end = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads: see preload()
        pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 0
        faulthandler.disable()  # a crash is reported by the parent, without pytest's stack dump
        try:
            os.close(read_end)
            payload = pickle.dumps(_invoke(run, directory))
            with os.fdopen(write_end, "wb") as pipe:
                pipe.write(payload)
        except BaseException:
            code = 70
        finally:
            os._exit(code)
    os.close(write_end)
    chunks, backstop = [], Backstop(run.cpu_seconds)
    with os.fdopen(read_end, "rb") as pipe:
        while True:
            if not select.select([pipe], [], [], POLL)[0]:
                if backstop.expired():
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    return Outcome(None, b"", backstop.message("the case"))
                continue
            chunk = os.read(pipe.fileno(), 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if overran_cpu(code):
        return Outcome(None, b"", cpu_message("the case", run.cpu_seconds))
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        return Outcome(128 + sig, b"", f"qconvert crashed: killed by {signal.Signals(sig).name}")
    if not chunks:
        return Outcome(70, b"", "the harness's child failed before reporting")
    exit_code, stdout, stderr, escaped = pickle.loads(b"".join(chunks))
    return Outcome(exit_code, stdout, stderr, escaped)


def _child_setup(run: Run):
    def setup():
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
        if run.stdin_mode == "closed":
            os.close(0)
        if run.stdout_mode == "closed":
            os.close(1)
    return setup


def run_subprocess(run: Run, directory: Path) -> Outcome:
    env = {**os.environ, **run.env, "PYTHONPATH": str(ROOT)}
    stdout = subprocess.PIPE
    opened = []
    if run.stdout_mode == "full":
        stdout = open("/dev/full", "wb")
        opened.append(stdout)
    elif run.stdout_mode == "broken":
        read_end, write_end = os.pipe()
        os.close(read_end)
        stdout = write_end
        opened.append(write_end)
    stdin = None if run.stdin_mode == "closed" else subprocess.PIPE
    try:
        proc = run_bounded([QCONVERT, *run.args], cpu_seconds=run.cpu_seconds, cwd=directory, env=env,
                           stdin=stdin, input=run.stdin if stdin else None, stdout=stdout,
                           stderr=subprocess.PIPE, preexec_fn=_child_setup(run))
    except Hang as hang:
        return Outcome(None, b"", str(hang))
    finally:
        for f in opened:
            f.close() if hasattr(f, "close") else os.close(f)
    out, err = proc.stdout, proc.stderr
    code = proc.returncode
    return Outcome(code if code >= 0 else 128 - code, out or b"", err.decode(errors="replace"))


# --- LiteRT, in another process -------------------------------------------------------------------
class LiteRTChecker:
    """One litert_check.py process per pytest worker, fed one file at a time: files are checked in
    a batch without paying an interpreter start each, and a crash is pinned to the file it
    happened on. After a crash the file is rerun alone in a fresh process (a heap corruption by an
    earlier file must not be blamed on it) and the next file gets a fresh process too."""

    def __init__(self):
        self.proc = None

    def _start(self):
        env = {**os.environ, "MALLOC_CHECK_": "3", "PYTHONPATH": str(ROOT)}
        # the address-space limit: a model with a 40 GB tensor fails to allocate instead of
        # taking the machine; stderr (LiteRT's INFO lines) is not needed
        return subprocess.Popen([sys.executable, str(CHECKER)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True,
                                bufsize=1, preexec_fn=lambda: resource.setrlimit(
                                    resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT)))

    def check(self, path: Path) -> str | None:
        """None when `path` ran under both resolvers; else what went wrong."""
        verdict = self._ask(path)
        if verdict == "crashed":
            alone = self._ask(path)  # a fresh process, after the crash
            if alone == "crashed":
                return "LiteRT crashed on it (the interpreter process died)"
            return alone
        return verdict

    def _ask(self, path: Path) -> str | None:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self._start()
        try:
            self.proc.stdin.write(f"{path}\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except (BrokenPipeError, OSError):
            line = ""
        if not line:
            self.proc.kill()
            self.proc.wait()
            self.proc = None
            return "crashed"
        result = json.loads(line)
        return None if result["ok"] else f"LiteRT refused it: {result['error']}"

    def close(self):
        if self.proc is not None:
            self.proc.stdin.close()
            try:  # it exits at the end of its input; one that does not is killed, not waited on
                self.proc.wait(timeout=Backstop(10).seconds())
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None


# --- checks ---------------------------------------------------------------------------------------
def snapshot(directory: Path) -> dict[str, tuple]:
    """Every entry under `directory`: its kind and, for a regular file, its bytes; for a
    symlink, its target."""
    entries = {}
    for root, dirs, files in os.walk(directory):
        for name in dirs + files:
            p = Path(root) / name
            st = os.lstat(p)
            rel = str(p.relative_to(directory))
            if stat.S_ISREG(st.st_mode):
                entries[rel] = ("file", p.read_bytes())
            elif stat.S_ISLNK(st.st_mode):
                entries[rel] = ("symlink", os.readlink(p))
            else:
                entries[rel] = (stat.filemode(st.st_mode)[0],)
    return entries


def _norm(directory: Path, path: str | None) -> str | None:
    if path in (None, "-", ""):
        return None
    return os.path.relpath(os.path.normpath(directory / path), directory)


def check(run: Run, outcome: Outcome, before: dict, directory: Path, litert: LiteRTChecker) -> list[str]:
    """The problems of a finished case (empty: it passed)."""
    problems = []
    code = outcome.exit_code
    err_lines = [line for line in outcome.stderr.splitlines() if line.strip()]
    if code is None:
        return [f"hang: {outcome.stderr}"]
    crashed = code > 128
    if crashed:
        problems.append(f"crash: {outcome.stderr.strip().splitlines()[-1]}")
    elif code not in run.allowed:
        last = next((line for line in reversed(err_lines) if "error" in line),
                    err_lines[-1] if err_lines else "")
        what = "internal error" if code == 3 else f"exit {code} (allowed {sorted(run.allowed)})"
        problems.append(f"{what}: {last[:300]}")
    if "Traceback" in outcome.stderr:
        problems.append("traceback on stderr: " + " | ".join(err_lines[-3:])[:400])
    if outcome.escaped:
        problems.append(f"internal error escaped the command (a real run prints a traceback and "
                        f"exits {code}): {outcome.escaped[:300]}")
    if code != 0 and not crashed and not outcome.escaped and not any(
            line.startswith(("qconvert: error:", "qconvert: internal error:")) for line in err_lines):
        problems.append(f"exit {code} without a 'qconvert: error:' line: "
                        f"{' | '.join(err_lines[-3:])[:300]!r}")
    if (directory / PWNED).exists():
        problems.append("calibration data was unpickled (the payload ran)")

    after = snapshot(directory)
    out = _norm(directory, run.out)
    inputs = {_norm(directory, p) for p in run.inputs}
    through = _norm(directory, run.through) if run.through else None
    for path, entry in before.items():
        if (path == out and path not in inputs) or (path == through and code == 0):
            continue
        if after.get(path) != entry:
            problems.append(f"{path} changed (an input must stay as it was)" if path in after
                            else f"{path} was removed")
    if out is not None and out not in inputs:
        was, now = before.get(out), after.get(out)
        if code != 0 and was != now:
            problems.append(f"failure left OUT {out} {'changed' if was else 'behind'}")
        if code == 0 and was is not None and was[0] != "file" and now is not None and now[0] != was[0]:
            problems.append(f"OUT {out} was a {was[0]} and is now a {now[0]} (silently replaced)")
    new = set(after) - set(before) - {out}  # OUT: checked above
    stray = sorted(p for p in new if code != 0 or ".qconvert-" in p)
    if stray:
        problems.append(f"left behind: {', '.join(stray)}")

    if code == 0:
        written = None
        if run.out == "-":
            if run.stdout_mode == "pipe":
                written = directory / "stdout.tflite"  # after the snapshot: not a stray file
                written.write_bytes(outcome.stdout)
        elif out is not None:
            target = directory / out
            if target.is_file():
                written = target.resolve()
        if written is not None:
            verdict = litert.check(written)
            if verdict:
                problems.append(f"exit 0 but {verdict}")
    return problems
