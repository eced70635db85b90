"""Child processes in tests, bounded by the CPU time they use instead of the wall-clock time they
take (issue 40): a busy machine slows a child down but never fails a test.

A child that spins (a hang that computes: a Loop of 2^40 trips) is stopped by its own
RLIMIT_CPU: the kernel sends SIGXCPU once it has used its CPU budget, SIGKILL a few seconds later.
A child that blocks (a FIFO nobody opens, a read of a pipe nobody writes) uses no CPU, so a
wall-clock backstop catches it too, but one so generous and so scaled to the machine's load that
only a real hang reaches it: BACKSTOP_FACTOR times the budget (at least MIN_BACKSTOP seconds),
times the highest load seen per core while waiting (the kernel's count of runnable tasks and its
one-minute average, so that a load that has just started counts at once). A child that overruns
either bound raises Hang, an AssertionError naming what was run and which bound it passed.

`run` is subprocess.run for tests; `limit_cpu` and `Backstop` are the pieces, for the fuzz
harness's forked children (tests/fuzz/runner.py), which set their own limit after fork.
"""

from __future__ import annotations

import math
import os
import resource
import signal
import subprocess
import time

CPU_GRACE = 5  # seconds of CPU between SIGXCPU (the budget) and SIGKILL
BACKSTOP_FACTOR = 4  # a blocked child may take this many times its CPU budget, per unit of load
MIN_BACKSTOP = 120.0  # seconds: the least wall time a blocked child is given, on an idle machine
POLL = 1.0  # seconds between looks at the load while waiting


class Hang(AssertionError):
    """A child that used its CPU budget, or passed the load-scaled wall-clock backstop."""


def limit_cpu(cpu_seconds: float) -> None:
    """In the child (after fork, before exec): SIGXCPU after `cpu_seconds` of CPU, SIGKILL
    CPU_GRACE seconds later; never above a hard limit already set. No core file: a child stopped
    for spinning is not a crash to keep."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    soft = max(1, math.ceil(cpu_seconds))
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    wanted = soft + CPU_GRACE
    if hard != resource.RLIM_INFINITY:
        wanted, soft = min(wanted, hard), min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, wanted))


def load_per_core() -> float:
    """The machine's load per core now: the larger of the one-minute load average and the
    kernel's count of runnable tasks (which follows a new load at once), over the usable cores."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    load = os.getloadavg()[0]
    try:
        with open("/proc/loadavg") as f:
            load = max(load, float(f.read().split()[3].split("/")[0]))
    except (OSError, ValueError, IndexError):
        pass
    return load / cores


class Backstop:
    """The wall-clock bound of a child with a CPU budget of `cpu_seconds`: it grows with the
    highest load per core seen since the child started (call `expired` while waiting)."""

    def __init__(self, cpu_seconds: float):
        self.cpu_seconds = cpu_seconds
        self.start = time.monotonic()
        self.peak = 1.0

    def seconds(self) -> float:
        """The wall time the child is allowed at the load seen so far."""
        self.peak = max(self.peak, load_per_core())
        return max(MIN_BACKSTOP, BACKSTOP_FACTOR * self.cpu_seconds) * self.peak

    def expired(self) -> bool:
        return time.monotonic() - self.start > self.seconds()

    def message(self, what: str) -> str:
        return (f"{what} blocked for {time.monotonic() - self.start:.0f} s of wall time (the backstop "
                f"at load {self.peak:.1f} per core; its CPU budget is {self.cpu_seconds:g} s)")


def overran_cpu(returncode: int) -> bool:
    """Whether a child's exit status is the CPU limit's SIGXCPU (as subprocess reports it, a
    negative signal number; or a shell's 128 + SIGXCPU for its command killed so). The hard
    limit's SIGKILL only follows where SIGXCPU is ignored: it reads as any other kill."""
    return returncode in (-signal.SIGXCPU, 128 + signal.SIGXCPU)


def cpu_message(what: str, cpu_seconds: float) -> str:
    return f"{what} used its CPU budget of {cpu_seconds:g} s (a hang: SIGXCPU from its RLIMIT_CPU)"


def run(argv, *, cpu_seconds: float = 60.0, input=None, check: bool = False, preexec_fn=None,
        **popen_kwargs) -> subprocess.CompletedProcess:
    """subprocess.run(argv, input=..., **popen_kwargs) with a CPU budget instead of a timeout:
    Hang when the child uses `cpu_seconds` of CPU or blocks past the Backstop; `preexec_fn` runs
    in the child after the CPU limit is set. capture_output=True and text=True work as in
    subprocess.run."""
    if popen_kwargs.pop("capture_output", False):
        popen_kwargs.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if input is not None:
        popen_kwargs["stdin"] = subprocess.PIPE

    def setup():
        limit_cpu(cpu_seconds)
        if preexec_fn is not None:
            preexec_fn()

    what = " ".join(map(str, argv)) if isinstance(argv, (list, tuple)) else str(argv)
    backstop = Backstop(cpu_seconds)
    with subprocess.Popen(argv, preexec_fn=setup, **popen_kwargs) as proc:
        while True:
            try:
                out, err = proc.communicate(input=input, timeout=POLL)
                break
            except subprocess.TimeoutExpired:
                input = None  # already sent: a retried communicate() must not send it again
                if backstop.expired():
                    proc.kill()
                    proc.communicate()
                    raise Hang(backstop.message(what)) from None
    if overran_cpu(proc.returncode):
        raise Hang(cpu_message(what, cpu_seconds))
    result = subprocess.CompletedProcess(argv, proc.returncode, out, err)
    if check:
        result.check_returncode()
    return result
