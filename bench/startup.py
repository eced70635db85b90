"""Start-up and per-stage CPU time (issue 40): what one qconvert process costs before and while it
converts, and what a build spends converting many small models one process each against one
`qconvert batch`.

Rows, each a fresh process (the median of --runs; CPU = user + sys of the child, from
resource.getrusage(RUSAGE_CHILDREN)): `qconvert --version`, `--help`, a tiny float conversion
(MatMul 16x8 + Relu, with its default check), a tiny `--quantize --calibration` (a seeded .npz of 8
samples), and the conversion's own seconds from the --json report ("seconds": load, transforms,
write), the rest of the process being start-up and the check. Then --models tiny models (seeded,
each its own weights) through a generated Makefile with `make -j2`, one qconvert per model,
against one `qconvert batch` of the same conversions: wall and CPU seconds, and whether the files
are byte-identical.

    .venv/bin/python bench/startup.py                 # the rows and the 50-model comparison
    .venv/bin/python bench/startup.py --models 0      # the rows only
    .venv/bin/python bench/bench.py --tables startup --out /tmp/bench-startup
"""

from __future__ import annotations

import argparse
import json
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

QCONVERT = str(Path(sys.executable).with_name("qconvert"))
COLUMNS = ("command", "CPU s (user+sys)", "wall s", "conversion s (--json)")


def tiny_model(path: Path, seed: int) -> None:
    """A MatMul (16x8, seeded weights) + Relu float model at `path`."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = np.random.default_rng(seed).standard_normal((16, 8)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["a"]), helper.make_node("Relu", ["a"], ["y"])],
        "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
        [numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              str(path))


def calibration_file(path: Path) -> None:
    """8 seeded standard-normal samples for the tiny model's input x."""
    np.savez(path, x=np.random.default_rng(0).standard_normal((8, 1, 16)).astype(np.float32))


def run_measured(command: list[str], cwd: Path | None = None) -> tuple[float, float, str]:
    """Runs `command` to its end; its CPU seconds (user + sys of it and its waited-for children),
    wall seconds and stdout. A failure is an error: a row must time a run that worked."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{shlex.join(command)}: exit {done.returncode}: {done.stderr.strip()[-300:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, done.stdout


def median_row(name: str, command: list[str], runs: int) -> dict:
    """The median CPU and wall seconds of `runs` fresh runs of `command`; with --json in it, the
    median of the report's conversion seconds too."""
    measured = [run_measured(command) for _ in range(runs)]
    seconds = "-"
    if "--json" in command:
        seconds = f"{statistics.median(json.loads(out)['seconds'] for _, _, out in measured):.3f}"
    return {"command": name, "CPU s (user+sys)": f"{statistics.median(m[0] for m in measured):.2f}",
            "wall s": f"{statistics.median(m[1] for m in measured):.2f}",
            "conversion s (--json)": seconds}


def startup_rows(work: Path, runs: int) -> list[dict]:
    """The single-process rows (see the module's docstring)."""
    tiny, npz = work / "tiny.onnx", work / "calibration.npz"
    tiny_model(tiny, 0)
    calibration_file(npz)
    out = str(work / "out.tflite")
    commands = [("qconvert --version", [QCONVERT, "--version"]),
                ("qconvert --help", [QCONVERT, "--help"]),
                ("tiny float (default check)", [QCONVERT, str(tiny), out, "--json"]),
                ("tiny --quantize --calibration (8 samples)",
                 [QCONVERT, str(tiny), out, "--quantize", "--calibration", str(npz), "--json"])]
    return [median_row(name, command, runs) for name, command in commands]


def many_models(work: Path, count: int) -> list[tuple[str, str]]:
    """`count` tiny models in work/models; their (input, output) paths."""
    models = work / "models"
    models.mkdir(exist_ok=True)
    pairs = []
    for k in range(count):
        tiny_model(models / f"m{k:03d}.onnx", k)
        pairs.append((f"models/m{k:03d}.onnx", f"out/m{k:03d}.tflite"))
    return pairs


def make_versus_batch(work: Path, count: int) -> list[dict]:
    """`count` models through `make -j2` (one qconvert per model) and one `qconvert batch`:
    wall and CPU seconds each, and whether the two sets of files are byte-identical."""
    pairs = many_models(work, count)
    rules = [f"{dst}: {src}\n\t{shlex.quote(QCONVERT)} $< $@ 2>/dev/null\n" for src, dst in pairs]
    (work / "Makefile").write_text(f"all: {' '.join(d for _, d in pairs)}\n\n" + "\n".join(rules))
    (work / "jobs.txt").write_text("".join(f"{s} {d}\n" for s, d in pairs))
    rows, files = [], {}
    for name, command in (("make -j2, one qconvert per model", ["make", "-s", "-j2"]),
                          ("one qconvert batch", [QCONVERT, "batch", "jobs.txt"])):
        shutil.rmtree(work / "out", ignore_errors=True)
        (work / "out").mkdir()
        cpu, wall, _ = run_measured(command, cwd=work)
        files[name] = [(work / d).read_bytes() for _, d in pairs]
        rows.append({"command": f"{count} tiny models: {name}", "CPU s (user+sys)": f"{cpu:.2f}",
                     "wall s": f"{wall:.2f}", "conversion s (--json)": "-"})
    same = len({tuple(v) for v in files.values()}) == 1
    rows[-1]["command"] += " (files byte-identical to make's)" if same else " (FILES DIFFER)"
    return rows


def header(runs: int) -> str:
    return (f"\nStart-up and per-stage CPU time (bench/startup.py): fresh processes, median of {runs}; "
            "CPU = user + sys (getrusage of the children); conversion s = the --json report's seconds "
            "(load, transforms, write), the rest is start-up and the check\n")


def markdown(rows: list[dict]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(str(row[c]) for c in COLUMNS) + " |" for row in rows]
    return "\n".join(lines)


def rows(work: Path, runs: int = 5, models: int = 50) -> list[dict]:
    """Every row of the table, measured in `work`."""
    work.mkdir(parents=True, exist_ok=True)
    found = startup_rows(work, runs)
    return found + (make_versus_batch(work, models) if models else [])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="fresh processes per row (median)")
    parser.add_argument("--models", type=int, default=50, help="models for make -j2 vs batch (0: none)")
    parser.add_argument("--work", type=Path, help="working folder [default: a temporary one]")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="qconvert-startup-") as tmp:
        found = rows(args.work or Path(tmp), args.runs, args.models)
    print(header(args.runs))
    print(markdown(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
