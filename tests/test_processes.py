"""tests/processes.py: a child is bounded by the CPU it uses, not the wall time it takes."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests import processes


def test_a_child_that_waits_longer_than_its_cpu_budget_passes():
    """Three seconds asleep on a budget of one CPU second: wall time is not CPU time."""
    result = processes.run([sys.executable, "-c", "import time; time.sleep(3); print('done')"],
                           cpu_seconds=1, capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout == "done\n", result.stderr


def test_a_child_that_spins_is_a_hang_at_its_cpu_budget():
    with pytest.raises(processes.Hang, match="used its CPU budget of 1 s"):
        processes.run([sys.executable, "-c", "while True: pass"], cpu_seconds=1,
                      capture_output=True)


def test_a_spinning_command_in_a_shell_is_a_hang_too():
    """sh reports its command's SIGXCPU as exit 128 + 24."""
    with pytest.raises(processes.Hang, match="CPU budget"):
        processes.run(f"{sys.executable} -c 'while True: pass'", shell=True, cpu_seconds=1)


def test_a_blocked_child_is_a_hang_at_the_backstop(monkeypatch):
    """A child that uses no CPU (a read of a pipe it never writes) is caught by the wall-clock backstop, which
    is at least MIN_BACKSTOP and grows with the load (here made small to keep the test short)."""
    monkeypatch.setattr(processes, "MIN_BACKSTOP", 2.0)
    monkeypatch.setattr(processes, "BACKSTOP_FACTOR", 0)
    with pytest.raises(processes.Hang, match="blocked for"):
        processes.run([sys.executable, "-c", "import os; r, w = os.pipe(); os.read(r, 1)"],
                      cpu_seconds=1)


def test_input_and_check_work_as_in_subprocess_run():
    result = processes.run([sys.executable, "-c", "import sys; print(sys.stdin.read()[::-1])"],
                           input="abc", capture_output=True, text=True)
    assert result.stdout == "cba\n"
    with pytest.raises(subprocess.CalledProcessError):
        processes.run([sys.executable, "-c", "raise SystemExit(3)"], check=True)


def test_the_backstop_grows_with_the_load(monkeypatch):
    monkeypatch.setattr(processes, "load_per_core", lambda: 10.0)
    assert processes.Backstop(60).seconds() == 10 * processes.BACKSTOP_FACTOR * 60
    monkeypatch.setattr(processes, "load_per_core", lambda: 0.2)  # idle: never below the minimum
    assert processes.Backstop(1).seconds() == processes.MIN_BACKSTOP
