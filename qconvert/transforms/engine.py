"""Runs a list of named transformation steps over the IR until none of them changes anything.

A step is a function `step(model) -> bool` that rewrites what it can and says whether it changed
the model. Steps need not be ordered cleverly: one that finds its preconditions unmet (a shape not
yet known, a transpose not yet moved) simply does nothing, and a later round brings it back
(TOCO's fixed point). After every change, dead ops and arrays are dropped and invariants checked.

Steps compute on the model's constants in float32 as the runtime would (inf * 0 is NaN there
too), so numpy's floating-point warnings are silenced while steps run: a damaged model that
converts must not print them.
"""

from __future__ import annotations

import logging
from typing import Callable

import numpy as np

from ..errors import ConversionError
from ..ir import Model

log = logging.getLogger("qconvert")

Step = Callable[[Model], bool]
MAX_ROUNDS = 1000


def _after_change(model: Model, name: str) -> None:
    log.debug("step %s changed the model", name)
    model.remove_unused()
    model.check_invariants()


def run_once(model: Model, steps: list[tuple[str, Step]]) -> None:
    """Runs each step once, in order: for phases whose steps build on each other's decisions
    (the quantize steps), where a second round would have nothing left to do."""
    with np.errstate(all="ignore"):
        for name, step in steps:
            if step(model):
                _after_change(model, name)


def run_to_fixed_point(model: Model, steps: list[tuple[str, Step]]) -> None:
    with np.errstate(all="ignore"):
        _run_to_fixed_point(model, steps)


def _run_to_fixed_point(model: Model, steps: list[tuple[str, Step]]) -> None:
    for _ in range(MAX_ROUNDS):
        changed = False
        for name, step in steps:
            if step(model):
                _after_change(model, name)
                changed = True
        if not changed:
            return
    raise ConversionError(f"transformations did not reach a fixed point in {MAX_ROUNDS} rounds")
