"""store_weights_float16: --float16 (TFLite's float16 mode). Every float32 constant an op reads
is stored as float16 (round to nearest even) and read through one DEQUANTIZE to float32, shared
by its readers: half the size, and runtimes with float16 arithmetic (GPU delegates) can use the
weights directly. Like TFLite, every float32 constant: biases and small tensors too, except one
whose values do not fit float16 (it stays float32).
"""

from __future__ import annotations

import numpy as np

from ..ir import Model, Operator
from .helpers import dequantize_for
from .quantization import FLOAT32

FLOAT16_MAX = float(np.finfo(np.float16).max)
FLOAT32_MAX = float(np.finfo(np.float32).max)


def _fits_float16(data: np.ndarray) -> bool:
    """No value beyond float16's range except float32's own extremes (max-pool's lowest-float
    padding), which become float16's infinities and keep their meaning. A constant with other
    such values stays float32 rather than turning into infinities."""
    magnitude = np.abs(data)
    if not data.size or magnitude.max() <= FLOAT16_MAX:
        return True
    beyond = magnitude[magnitude > FLOAT16_MAX]
    return bool(np.all(beyond >= FLOAT32_MAX))


def store_weights_float16(model: Model) -> bool:
    uses: dict[str, list[tuple[Operator, int]]] = {}
    for op in model.operators:
        for index, name in enumerate(op.inputs):
            array = model.arrays.get(name) if name else None
            if array is not None and array.is_constant and array.dtype == FLOAT32:
                uses.setdefault(name, []).append((op, index))
    for name, readers in uses.items():
        array = model.arrays[name]
        if name in model.outputs or not _fits_float16(array.data):
            continue
        with np.errstate(over="ignore"):  # float32 sentinels become float16 infinities
            array.data, array.dtype = array.data.astype(np.float16), np.dtype(np.float16)
        dequantize_for(model, name, readers)
    return bool(uses)
