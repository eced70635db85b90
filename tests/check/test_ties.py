"""Rows at near-tied scores put in onnxruntime's order before the comparison (qconvert/check/
ties.py): RetinaNet's detections, whose scores two runtimes compute a rounding apart, come out
with two boxes and labels traded; rows that do not tie, or outputs that are not sorted scores,
never move (a wrong order still fails)."""

from __future__ import annotations

import numpy as np

from qconvert.check.ties import MAX_GROUP, align_near_ties, tie_groups

TOLERANCE = 2.0 ** -13


def _detections():
    """onnxruntime's rows: scores sorted down, rows 1 and 2 a rounding apart, 3 and 4 not."""
    scores = np.array([0.9, 0.5630818, 0.5630810, 0.4, 0.3], np.float32)
    boxes = np.arange(20, dtype=np.float32).reshape(5, 4)
    labels = np.array([3, 82, 72, 5, 9], np.int64)
    return {"scores": scores, "boxes": boxes, "labels": labels}


def _swapped(values: dict, i: int, j: int, scores=None) -> dict:
    order = np.arange(5)
    order[[i, j]] = order[[j, i]]
    out = {n: v[order] for n, v in values.items()}
    if scores is not None:
        out["scores"] = scores
    return out


def test_rows_traded_at_a_near_tie_are_put_back_and_counted():
    reference = _detections()
    # LiteRT's scores round the other way: still sorted, the boxes and labels traded
    litert = _swapped(reference, 1, 2, np.array([0.9, 0.5630815, 0.5630813, 0.4, 0.3], np.float32))
    aligned, moved = align_near_ties(reference, litert, TOLERANCE)
    assert moved == 2
    np.testing.assert_array_equal(aligned["labels"], reference["labels"])
    np.testing.assert_array_equal(aligned["boxes"], reference["boxes"])


def test_rows_traded_where_the_scores_do_not_tie_stay_traded():
    reference = _detections()
    litert = _swapped(reference, 3, 4, reference["scores"])
    aligned, moved = align_near_ties(reference, litert, TOLERANCE)
    assert moved == 0
    assert not np.array_equal(aligned["labels"], reference["labels"])


def test_unsorted_outputs_have_no_ties():
    assert tie_groups(np.array([0.5, 0.5000001, 0.9, 0.5]), TOLERANCE) == []
    reference = {"y": np.array([0.2, 0.2000001, 0.1], np.float32), "i": np.array([1, 2, 3])}
    litert = {"y": reference["y"], "i": np.array([2, 1, 3])}
    assert align_near_ties(reference, litert, TOLERANCE)[1] == 0


def test_groups_and_their_bounds():
    scores = np.array([5.0, 4.0, 4.0, 4.0, 3.0, 1.0, 1.0])
    assert [g.tolist() for g in tie_groups(scores, TOLERANCE)] == [[1, 2, 3], [5, 6]]
    assert tie_groups(np.zeros(MAX_GROUP + 1), TOLERANCE) == []  # a constant output: left alone


def test_outputs_of_another_length_are_not_rows():
    reference = {**_detections(), "count": np.array([5], np.int64)}
    litert = {**_swapped(_detections(), 1, 2), "count": np.array([5], np.int64)}
    aligned, moved = align_near_ties(reference, litert, TOLERANCE)
    assert moved == 2 and aligned["count"].tolist() == [5]


def test_another_candidate_of_the_same_score_at_the_cut_is_taken():
    """A detector's best 5: the 5th and the 6th candidate near-tie, and each runtime keeps
    another (Faster R-CNN's 100th box): only the scores are compared there."""
    reference = _detections()
    litert = {n: v.copy() for n, v in reference.items()}
    litert["scores"][-1] = 0.3000001
    litert["boxes"][-1] = [50, 60, 70, 80]
    litert["labels"][-1] = 11
    aligned, moved = align_near_ties(reference, litert, TOLERANCE)
    assert moved == 1
    np.testing.assert_array_equal(aligned["boxes"], reference["boxes"])
    np.testing.assert_array_equal(aligned["scores"], litert["scores"])  # still the .tflite's


def test_a_row_at_the_cut_that_onnxruntime_has_elsewhere_still_fails():
    reference = _detections()
    litert = {n: v.copy() for n, v in reference.items()}
    litert["boxes"][-1], litert["labels"][-1] = reference["boxes"][0], reference["labels"][0]
    aligned, moved = align_near_ties(reference, litert, TOLERANCE)
    assert moved == 0 and aligned["labels"][-1] == reference["labels"][0]


def test_a_row_at_the_cut_whose_score_differs_still_fails():
    reference = _detections()
    litert = {n: v.copy() for n, v in reference.items()}
    litert["scores"][-1], litert["labels"][-1] = 0.29, 11
    assert align_near_ties(reference, litert, TOLERANCE)[1] == 0
