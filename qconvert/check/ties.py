"""Rows ordered by a score that two runtimes compute a rounding apart (a detector's boxes,
scores and labels sorted by score; a TopK's values and indices) may come out in either order
where two scores nearly tie: RetinaNet's 0.0563112 and 0.0563082 in onnxruntime are 0.0563101
and 0.0563095 in LiteRT, and the boxes and labels of the two rows trade places. Both orders are
right to the float check's precision, so the .tflite's rows are put in onnxruntime's order within
each run of near-tied scores before the comparison, and counted.

A score output is a 1-D float output sorted (either way) in onnxruntime's run; scores nearer than
`tolerance` times its largest magnitude are near-tied, and a run of them is a tie group. Every
output whose first axis is as long (in both runs) is a row output; within a group, each of
onnxruntime's rows takes the .tflite's row nearest to it over all row outputs (each scaled by its
largest magnitude), greedily in onnxruntime's order. Rows outside tie groups never move, nor
do the rows of a group longer than MAX_GROUP (a constant output is one group: its cost matrix
would be quadratic in its length).

A list cut at a count (a detector's best 100) ends where the next candidate may tie: the last
row, and those near-tied to it, can be another candidate of the same score in each runtime
(Faster R-CNN's 100th box). There, where the two scores agree within `tolerance` and the
.tflite's row is none of onnxruntime's (a row out of place still fails), its other row outputs
are taken as onnxruntime's (`_at_cut`): the scores are still compared.
"""

from __future__ import annotations

import numpy as np

MAX_GROUP = 1024


def _is_sorted(scores) -> bool:
    """Whether `scores` is a 1-D array of two or more values, sorted either way."""
    scores = np.asarray(scores, np.float64)
    steps = np.diff(scores)
    return scores.ndim == 1 and scores.size >= 2 and (np.all(steps <= 0) or np.all(steps >= 0))


def tie_groups(scores: np.ndarray, tolerance: float) -> list[np.ndarray]:
    """The index runs (of length 2 or more) where consecutive sorted `scores` nearly tie; none
    when the scores are not sorted."""
    if not _is_sorted(scores):
        return []
    scores = np.asarray(scores, np.float64)
    steps = np.diff(scores)
    scale = _scale(scores)
    tied = np.abs(steps) <= tolerance * scale
    groups, start = [], None
    for i, t in enumerate(tied):
        if t and start is None:
            start = i
        if not t and start is not None:
            groups.append(np.arange(start, i + 1))
            start = None
    if start is not None:
        groups.append(np.arange(start, scores.size))
    return [g for g in groups if len(g) <= MAX_GROUP]


def align_near_ties(reference: dict[str, np.ndarray], outputs: dict[str, np.ndarray],
                    tolerance: float) -> tuple[dict[str, np.ndarray], int]:
    """`outputs` with their rows in `reference`'s order within each tie group of each score
    output (module docstring), and how many rows moved."""
    moved = 0
    for name, scores in reference.items():
        ours = outputs.get(name)
        if (ours is None or np.ndim(scores) != 1 or np.shape(ours) != np.shape(scores)
                or np.asarray(scores).dtype.kind != "f"):
            continue
        if not _is_sorted(scores):
            continue
        groups = tie_groups(scores, tolerance)
        rows = [n for n, r in reference.items() if np.ndim(r) >= 1 and n in outputs
                and np.shape(outputs[n]) == np.shape(r) and np.shape(r)[0] == len(scores)]
        if groups:
            order = _order(reference, outputs, rows, groups)
            moved += int(np.count_nonzero(order != np.arange(len(order))))
            outputs = {n: (v[order] if n in rows else v) for n, v in outputs.items()}
        outputs, swapped = _at_cut(reference, outputs, name, [n for n in rows if n != name],
                                   groups, tolerance)
        moved += swapped
    return outputs, moved


def _at_cut(reference: dict, outputs: dict, name: str, rows: list[str], groups: list,
            tolerance: float) -> tuple[dict, int]:
    """`outputs` with the rows at the end of score output `name` (the last, and its tie group)
    taken from `reference` where their scores agree (module docstring); how many rows differed."""
    scores, ours = (np.asarray(x, np.float64) for x in (reference[name], outputs[name]))
    tail = groups[-1] if groups and groups[-1][-1] == len(scores) - 1 else np.arange(len(scores))[-1:]
    agree = tail[np.abs(scores[tail] - ours[tail]) <= tolerance * _scale(scores)]
    if not rows or not agree.size or agree.size * len(scores) > MAX_GROUP ** 2:
        return outputs, 0
    # a row onnxruntime has (there, or elsewhere: out of place, it fails) is no other candidate
    differ = agree[~_known_rows(reference, outputs, rows, agree, tolerance)]
    if not differ.size:
        return outputs, 0
    fixed = dict(outputs)
    for n in rows:
        fixed[n] = np.array(outputs[n], copy=True)
        fixed[n][differ] = reference[n][differ]
    return fixed, len(differ)


def _known_rows(reference: dict, outputs: dict, rows: list[str], tail, tolerance: float) -> np.ndarray:
    """For each of the .tflite's rows `tail`, whether it is one of onnxruntime's rows (anywhere)
    over the `rows` outputs."""
    known = np.ones((len(tail), len(reference[rows[0]])), bool)
    for n in rows:
        ref = np.asarray(reference[n], np.float64).reshape(known.shape[1], -1)
        ours = np.asarray(outputs[n], np.float64)[tail].reshape(len(tail), -1)
        known &= np.all(np.abs(ours[:, None, :] - ref[None, :, :]) <= _scale(ref) * tolerance, axis=2)
    return known.any(axis=1)


def _scale(values) -> float:
    return float(np.max(np.abs(np.asarray(values, np.float64)), initial=0.0)) or 1.0


def _order(reference: dict, outputs: dict, rows: list[str], groups: list[np.ndarray]) -> np.ndarray:
    """The permutation of the .tflite's rows that matches onnxruntime's within each group."""
    order = np.arange(np.shape(reference[rows[0]])[0])
    scaled = []
    for n in rows:
        r, o = (np.asarray(x, np.float64).reshape(len(order), -1) for x in (reference[n], outputs[n]))
        scale = float(np.max(np.abs(r))) or 1.0
        scaled.append((r / scale, o / scale))
    for group in groups:
        # cost[i, j]: onnxruntime's row group[i] against the .tflite's row group[j]
        cost = sum(np.abs(r[group][:, None, :] - o[group][None, :, :]).sum(axis=2) for r, o in scaled)
        cost = np.nan_to_num(cost, nan=np.inf)
        free = np.ones(len(group), bool)
        for i in range(len(group)):
            j = int(np.argmin(np.where(free, cost[i], np.inf)))
            free[j] = False
            order[group[i]] = group[j]
    return order
