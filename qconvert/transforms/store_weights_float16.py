"""store_weights_float16: --float16 (TFLite's float16 mode). Every float32 constant an op reads
is stored as float16 (round to nearest even) and read through one DEQUANTIZE to float32, shared
by its readers: half the size, and runtimes with float16 arithmetic (GPU delegates) can use the
weights directly. Like TFLite, every float32 constant: biases and small tensors too, except one
that float16 would change beyond its rounding (values beyond its range, or flushed to zero
against the constant's own scale, like an epsilon of 1e-12): it stays float32.
"""

from __future__ import annotations

import numpy as np

from ..ir import Model, Operator
from .helpers import dequantize_for
from .quantization import FLOAT32

FLOAT16_MAX = float(np.finfo(np.float16).max)
FLOAT32_MAX = float(np.finfo(np.float32).max)
# float16's rounding step relative to a value: a constant whose float16 error exceeds this much of
# its largest value is kept float32.
HALF_STEP = 2.0 ** -11


def _as_float16(data: np.ndarray) -> np.ndarray | None:
    """`data` in float16, or None when float16 would change it beyond its own rounding: a value
    beyond float16's range other than float32's own extremes (max-pool's lowest-float padding,
    which become float16's infinities and keep their meaning), or values so small against the
    constant's largest that they flush to zero or lose their digits (a LayerNorm epsilon of 1e-12
    becomes 0, and the model divides by zero)."""
    if not data.size:
        return data.astype(np.float16)
    magnitude = np.abs(data)
    largest = float(magnitude.max())
    if largest > FLOAT16_MAX and not np.all(magnitude[magnitude > FLOAT16_MAX] >= FLOAT32_MAX):
        return None
    with np.errstate(over="ignore"):  # float32 sentinels become float16 infinities
        half = data.astype(np.float16)
    with np.errstate(invalid="ignore"):  # a sentinel's inf - inf
        error = np.abs(half.astype(np.float32) - data)
    if largest > FLOAT16_MAX:  # the sentinels' own error is not rounding
        error = error[magnitude <= FLOAT16_MAX]
    if error.size and float(error.max()) > min(largest, FLOAT16_MAX) * HALF_STEP:
        return None
    return half


def store_weights_float16(model: Model) -> bool:
    uses: dict[str, list[tuple[Operator, int]]] = {}
    for op in model.operators:
        for index, name in enumerate(op.inputs):
            array = model.arrays.get(name) if name else None
            if array is not None and array.is_constant and array.dtype == FLOAT32:
                uses.setdefault(name, []).append((op, index))
    for name, readers in uses.items():
        array = model.arrays[name]
        half = None if name in model.outputs else _as_float16(array.data)
        if half is None:
            continue
        array.data, array.dtype = half, np.dtype(np.float16)
        dequantize_for(model, name, readers)
    return bool(uses)
