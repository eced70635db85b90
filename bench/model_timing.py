"""Whole models against the cost model, for bench/target_profile.py (--agreement, --breakdown).

agreement_row: a model's all-int8 and float files (target_profile.convert) timed whole in LiteRT
(1 thread, default resolver) in alternating rounds, next to qconvert.targets.cost(int8) /
cost(float) on a target. breakdown_row: every distinct op of both files timed alone
(target_profile.time_instances), summed per op type, with the switches between XNNPACK and the
interpreter: where the int8 file spends its time next to the float one. Each in child processes
(single_op.in_child): LiteRT aborts on some files.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

import runners
from qconvert import targets
from single_op import in_child, load, median_seconds
from target_profile import (FileModel, Instance, Source, convert, delegated_ops, instances,
                            read_file, time_instances)


def _feeds(fm: FileModel, src: Source) -> dict:
    report = json.loads(fm.path.with_suffix(".json").read_text())
    with np.load(src.calibration) as samples:
        return runners._tflite_feeds(report, {k: samples[k][:1] for k in samples.files})[0]


def _loadable(path: Path) -> FileModel | None:
    """The file read, its delegation found; None when LiteRT cannot load it."""
    fm = read_file(path)
    fm.delegated = delegated_ops(path, len(fm.ops))
    return None if fm.delegated is None else fm


def _whole_seconds(int8: FileModel, float_: FileModel, src: Source, args) -> list[float]:
    """The two files' median times, whole, in alternating rounds (in a child process)."""
    loaded = [load(fm.data, _feeds(fm, src)) for fm in (int8, float_)]
    return median_seconds(loaded, args.model_rounds, args.model_sample_ms / 1e3)


def _timed_pair(src: Source, args):
    """(int8 file, float file, their whole seconds) of the model, or None when either does not
    convert or load."""
    pair = [convert(src, p, args.work, args.timeout) for p in ("int8", "float")]
    if None in pair:
        return None
    int8, float_ = (_loadable(path) for path, _ in pair)
    if int8 is None or float_ is None:
        return None
    return (int8, float_, *in_child(_whole_seconds, int8, float_, src, args))


def agreement_row(src: Source, target, args) -> dict | None:
    """The model's int8 and float files timed whole in alternating rounds, next to their cost
    ratio on `target`."""
    timed = _timed_pair(src, args)
    if timed is None:
        return None
    int8, float_, t8, tf = timed
    c8, cf = targets.cost(int8.ir, target), targets.cost(float_.ir, target)
    return {"model": src.name, "float ms": tf * 1e3, "int8 ms": t8 * 1e3, "measured": t8 / tf,
            "cost": c8.ns / cf.ns if cf.ns else math.inf, "switches": c8.switches,
            "xnnpack": f"{len(int8.delegated)}/{len(int8.ops)}",
            "delegation": {fm.path.name: sorted(fm.delegated) for fm in (int8, float_)}}


def agreement_table(rows: list[dict]) -> str:
    lines = ["| model | float (ms) | all int8 (ms) | measured int8 / float | cost int8 / float | "
             "switches (cost) | XNNPACK int8 ops |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['float ms']:.3g} | {r['int8 ms']:.3g} | {r['measured']:.2f} | "
                     f"{r['cost']:.2f} | {r['switches']} | {r['xnnpack']} |")
    measured, cost = (np.log([r[k] for r in rows]) for k in ("measured", "cost"))
    if len(rows) > 2:
        lines.append(f"\n{len(rows)} models; correlation of log ratios "
                     f"{np.corrcoef(measured, cost)[0, 1]:.2f}; median |log2(cost / measured)| "
                     f"{np.median(np.abs(cost - measured)) / np.log(2):.2f}; "
                     f"same side of 1 (int8 faster or slower): "
                     f"{int(np.sum(np.sign(measured) == np.sign(cost)))} of {len(rows)}")
    return "\n".join(lines)


def per_type(name: str, fm: FileModel, src: Source, args) -> dict:
    """Every distinct op of the file timed alone: {op type: {"seconds": count x time summed,
    "ops", "interpreter": ops XNNPACK leaves}}, and the switches in the whole file."""
    found = instances(name, fm)
    distinct: dict[str, list[Instance]] = {}
    for x in found:
        distinct.setdefault(x.signature, []).append(x)
    firsts = [group[0] for group in distinct.values()]
    rows = time_instances(firsts, {name: src}, args)
    types: dict[str, dict] = {}
    for group, row in zip(distinct.values(), rows):
        entry = types.setdefault(group[0].type, {"seconds": 0.0, "ops": 0, "interpreter": 0})
        entry["seconds"] += row.get("seconds", 0.0) * len(group)
        entry["ops"] += len(group)
        entry["interpreter"] += sum(not x.delegated for x in group)
    flags = [x.delegated for x in found]
    return {"types": types, "switches": sum(a != b for a, b in zip(flags, flags[1:]))}


def breakdown_row(src: Source, args, partition_ns: float) -> dict | None:
    timed = _timed_pair(src, args)
    if timed is None:
        return None
    int8, float_, t8, tf = timed
    parts = [per_type(src.name, fm, src, args) for fm in (int8, float_)]
    sums = [sum(e["seconds"] for e in p["types"].values()) + p["switches"] * partition_ns * 1e-9
            for p in parts]
    return {"model": src.name, "measured": t8 / tf, "int8 ms": t8 * 1e3, "float ms": tf * 1e3,
            "sum int8 ms": sums[0] * 1e3, "sum float ms": sums[1] * 1e3, "int8": parts[0],
            "float": parts[1]}


def breakdown_table(rows: list[dict], top: int = 3) -> str:
    """Per model: the measured ratio, the ops' sums, and the op types that cost int8 the most over
    float (int8 vs float time summed over the type's ops; how many the interpreter runs in each),
    those adding 2 % of the int8 sum or more."""
    lines = ["| model | all int8 / float | int8 (ms): whole / sum of ops | "
             "float (ms): whole / sum of ops | "
             "switches int8 / float | op types costing int8 the most: int8 vs float ms (ops, in the "
             "interpreter int8 vs float) |", "|---|---:|---:|---:|---:|---|"]
    for r in rows:
        i8, fl = r["int8"]["types"], r["float"]["types"]
        none = {"seconds": 0.0, "ops": 0, "interpreter": 0}
        excess = {t: i8[t]["seconds"] - fl.get(t, none)["seconds"] for t in i8}
        worst = [t for t in sorted(excess, key=excess.get, reverse=True)[:top]
                 if excess[t] >= 0.02 * r["sum int8 ms"] / 1e3]
        cells = [f"{t} {i8[t]['seconds'] * 1e3:.3g} vs {fl.get(t, none)['seconds'] * 1e3:.3g} "
                 f"({i8[t]['ops']}, {i8[t]['interpreter']} vs {fl.get(t, none)['interpreter']})"
                 for t in worst]
        lines.append(f"| {r['model']} | {r['measured']:.2f} | "
                     f"{r['int8 ms']:.3g} / {r['sum int8 ms']:.3g} | "
                     f"{r['float ms']:.3g} / {r['sum float ms']:.3g} | {r['int8']['switches']} / "
                     f"{r['float']['switches']} | {'; '.join(cells) or '-'} |")
    return "\n".join(lines)
