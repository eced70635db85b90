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
"""

from __future__ import annotations

import numpy as np

MAX_GROUP = 1024


def tie_groups(scores: np.ndarray, tolerance: float) -> list[np.ndarray]:
    """The index runs (of length 2 or more) where consecutive sorted `scores` nearly tie; none
    when the scores are not sorted."""
    scores = np.asarray(scores, np.float64)
    steps = np.diff(scores)
    if scores.ndim != 1 or scores.size < 2 or not (np.all(steps <= 0) or np.all(steps >= 0)):
        return []
    scale = float(np.max(np.abs(scores))) or 1.0
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
        groups = tie_groups(scores, tolerance)
        if not groups:
            continue
        rows = [n for n, r in reference.items() if np.ndim(r) >= 1 and n in outputs
                and np.shape(outputs[n]) == np.shape(r) and np.shape(r)[0] == len(scores)]
        order = _order(reference, outputs, rows, groups)
        moved += int(np.count_nonzero(order != np.arange(len(order))))
        outputs = {n: (v[order] if n in rows else v) for n, v in outputs.items()}
    return outputs, moved


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
