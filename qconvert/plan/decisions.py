"""The outputs a decision reads, and how many of float's decisions a quantized model keeps.

An output read by a decision is judged by the decisions it leads to besides its SQNR: by argmax,
a classifier's probabilities or logits, a CTC recognizer's, a token model's; against 0.5, a
LOGISTIC's probabilities (a voice-activity flag, a mask). Integer outputs (decoded ids, classes)
are decisions themselves. A near tie in float (its top two classes, or its value and 0.5, closer
than the error the target allows) is no decision and does not count.
"""

from __future__ import annotations

import numpy as np

from ..ir import Model


def decision_agreement(outputs: dict, reference: dict, argmax: list[str], thresholded: list[str],
                       target_db: float) -> float | None:
    """The lowest share, over the outputs read by a decision, of float's decisions the model
    keeps: for `argmax` outputs the class along the last axis at each position (samples and every
    index but the last axis), for `thresholded` ones (a LOGISTIC's probabilities) each value
    against 0.5. Only decisions float makes clearly count: its top class ahead of the next, or its
    value away from 0.5, by more than the error the target allows (the output's RMS times
    10^(-target/20)); a near tie is no decision. Integer outputs (decoded ids, classes) are
    decisions themselves: each value equal to float's. None: no such output."""
    shares = [float(np.mean(np.asarray(outputs[name]) == value)) for name, value in reference.items()
              if np.asarray(value).dtype.kind in "iub" and name in outputs and np.size(value)]
    for name in argmax + thresholded:
        if name not in outputs or name not in reference:
            continue
        ref, got = np.asarray(reference[name], np.float64), np.asarray(outputs[name], np.float64)
        noise = np.sqrt(np.mean(ref ** 2)) * 10 ** (-target_db / 20)
        if name in thresholded:
            decided, same = np.abs(ref - 0.5) > noise, (ref > 0.5) == (got > 0.5)
        else:
            top2 = np.partition(ref, -2, axis=-1)[..., -2:]
            decided = (top2[..., 1] - top2[..., 0]) > noise
            same = np.argmax(got, -1) == np.argmax(ref, -1)
        shares.append(float(np.mean(same[decided])) if decided.any() else 1.0)
    return min(shares) if shares else None


# The ops whose output is read by a decision when it is a model output (through ops that only
# move values): by argmax, a classifier's probabilities or logits, a CTC recognizer's, a token
# model's (at least 2 classes); against 0.5, a LOGISTIC's probabilities (a voice-activity flag).
ARGMAX_PRODUCERS = ("SOFTMAX", "LOG_SOFTMAX", "FULLY_CONNECTED")
PROBABILITY_PRODUCERS = ("SOFTMAX", "LOG_SOFTMAX")
THRESHOLD_PRODUCERS = ("LOGISTIC",)
MOVES_VALUES = ("RESHAPE", "SQUEEZE", "EXPAND_DIMS", "TRANSPOSE", "DEQUANTIZE", "QUANTIZE")


def decision_outputs(model: Model, producers: tuple[str, ...], classes: int = 1) -> list[str]:
    """The model's float outputs that one of `producers` computes (through ops that only move
    values), of at least `classes` values along their last axis (argmax needs 2, of rank 2)."""
    found = []
    for name in model.outputs:
        array = model.arrays[name]
        if array.dtype.kind != "f" or (classes > 1 and (len(array.shape) < 2 or array.shape[-1] < classes)):
            continue
        producer = model.producer(name)
        while producer is not None and producer.type in MOVES_VALUES:
            producer = model.producer(producer.inputs[0])
        if producer is not None and producer.type in producers:
            found.append(name)
    return found


def read_by_argmax(reference: dict, outputs: list[str], probabilities: set[str]) -> list[str]:
    """Of `outputs` (decision_outputs' guess from the producing op), those an argmax reads: a
    softmax's probabilities always; a FULLY_CONNECTED's values only when float's top index
    differs between the positions of the plan's samples. A head whose top index never changes
    (a quality scorer's [signal, background, overall] scores) gives no decision to keep: its
    values are judged by SQNR alone, as any regression output."""
    kept = []
    for name in outputs:
        value = reference.get(name)
        top = None if value is None else np.argmax(np.asarray(value), axis=-1)
        if name in probabilities or (top is not None and top.size and np.any(top != top.flat[0])):
            kept.append(name)
    return kept


def decisions_per_sample(reference: dict, argmax: list[str], thresholded: list[str]) -> int:
    """The fewest decisions one sample brings among the outputs read by one: an argmax output's
    positions (every index but the last axis), a thresholded output's values, an integer
    output's values; 0 when there is no such output. `reference` holds each output's samples
    along its first axis."""
    counts = []
    for name, value in reference.items():
        value = np.asarray(value)
        if not value.size or not value.shape:
            continue
        per_sample = value.size // value.shape[0]
        if value.dtype.kind in "iub" or name in thresholded:
            counts.append(per_sample)
        elif name in argmax and value.ndim >= 2:
            counts.append(per_sample // max(value.shape[-1], 1))
    return min(counts, default=0)
