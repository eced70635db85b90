"""The README's worked example, run as written (from the repository's root, on the digits model
and pictures it ships): each command exits 0 and prints the line the README shows but for the
conversion's time; the int8 step writes an int8 file."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from qconvert.tflite.reader import read

ROOT = Path(__file__).resolve().parent.parent.parent
README = ROOT / "README.md"
SECONDS = re.compile(r"\d+\.\d+ s;")  # the conversion's time: the one part that differs


def _worked_example() -> list[tuple[str, str]]:
    """(command, the summary line the README shows after it, None when it shows none) of the
    worked example."""
    text = README.read_text()
    section = text[text.index("## A worked example"):text.index("## Options")]
    lines = [line[4:] for line in section.splitlines() if line.startswith("    ")]
    pairs = []
    for k, line in enumerate(lines):
        if line.startswith("qconvert examples/") or line.startswith("qconvert verify examples/"):
            after = [later for later in lines[k + 1:] if later.startswith(("qconvert ", "qconvert: "))]
            shown = after[0] if after and after[0].startswith("qconvert: ") else None
            pairs.append((line, shown))
    return pairs


EXAMPLE = _worked_example()


def test_the_worked_example_has_its_steps():
    commands = [command for command, _ in EXAMPLE]
    assert len(commands) == 4 and "--quantize" in commands[1] and "--report" in commands[3]


@pytest.mark.parametrize("command, shown", EXAMPLE[:3], ids=["float", "int8", "verify"])
def test_a_worked_example_step_prints_what_the_readme_shows(tmp_path, command, shown):
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    if "verify" in command:  # it checks the int8 step's file
        int8 = next(c for c, _ in EXAMPLE if "--quantize" in c)
        subprocess.run([sys.executable, "-m", "qconvert", *shlex.split(int8)[1:]], cwd=tmp_path, check=True,
                       capture_output=True)
    run = subprocess.run([sys.executable, "-m", "qconvert", *shlex.split(command)[1:]], cwd=tmp_path,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    printed = run.stderr.strip().splitlines()[-1]
    assert SECONDS.sub("", printed) == SECONDS.sub("", shown), printed
    if "--quantize" in command:
        written = read((tmp_path / shlex.split(command)[2]).read_bytes())
        assert any(t.dtype == "INT8" and t.data_offset is None for t in written.tensors)
        assert "plan: all int8" in printed and "int8: 6 ops" in printed
