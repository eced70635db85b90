"""quantize_weights_only: --weight-only (TFLite's dynamic-range mode). Constant float32 weights
of at least `min_elements` elements are stored as symmetric int8 (zero point 0, narrow range);
activations stay float.

- An op with a hybrid kernel (OpDef.hybrid: CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED,
  BATCH_MATMUL, UNIDIRECTIONAL_SEQUENCE_LSTM) reads the int8 weights directly when every one of
  its weight inputs is quantized; the kernel quantizes its float input on the fly (per row and
  asymmetrically where the op has `asymmetric_quantize_inputs`, which is set). Weights are per
  output channel where the hybrid kernel takes that, else per tensor.
- Any other reader (a GATHER's table, a TRANSPOSE_CONV's weights, an ADD's big constant, or a
  hybrid op whose other weights stayed float) reads the weights through one DEQUANTIZE, inserted
  before the first such reader and shared by all of them.
- Biases, and weights below the threshold, stay float32: they are small, and the hybrid
  kernels want a float bias. Exception: a hybrid op's companion weights (an LSTM's peepholes)
  become int8 with its big weights whatever their size, since its kernel wants all weights int8.

In an int8 model the precision planner's hybrid regions (`sources`, the ONNX nodes it runs
hybrid) get the same treatment after the quantize steps: only the float ops of those nodes are
considered, so the weights of every other float op stay float32.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet

import numpy as np

from ..ir import Model, Operator, QuantParams, typed_name
from ..ops.registry import TFLITE_OPS
from ..quantize.params import quantize_weights_per_channel, quantize_weights_per_tensor
from .helpers import dequantize_for

FLOAT32 = np.dtype(np.float32)


def _is_candidate(model: Model, name: str, min_elements: int) -> bool:
    """A float32 constant of at least min_elements finite values (an attention mask's -inf has
    no int8 code: such a constant stays float32)."""
    array = model.arrays.get(name) if name else None
    return (array is not None and array.is_constant and array.dtype == FLOAT32
            and array.data.size >= min_elements and name not in model.outputs
            and bool(np.isfinite(array.data).all()))


def _stays_float(op: Operator, index: int) -> bool:
    """A bias (QuantRule.bias, HybridRule.float_inputs) stays float32 whatever its size."""
    quant, hybrid = TFLITE_OPS[op.type].quant, TFLITE_OPS[op.type].hybrid
    return ((quant is not None and quant.bias == index)
            or (hybrid is not None and index in hybrid.float_inputs))


def _runs_hybrid(op: Operator, model: Model, min_elements: int) -> bool:
    rule = TFLITE_OPS[op.type].hybrid
    return (rule is not None and model.arrays[op.inputs[0]].dtype == FLOAT32
            and all(i < len(op.inputs) and _is_candidate(model, op.inputs[i], min_elements)
                    for i in rule.weights))


def quantize_weights_only(model: Model, min_elements: int = 1024,
                          sources: AbstractSet[str] | None = None) -> bool:
    """`sources`: only the weights that float ops of these ONNX nodes read through a hybrid
    kernel (None: every weight)."""
    chosen = [op for op in model.operators
              if sources is None or (op.source in sources and not op.quantized)]
    hybrid = {id(op) for op in chosen if _runs_hybrid(op, model, min_elements)}
    if sources is not None and not hybrid:  # no hybrid region in this plan
        return False
    uses: dict[str, list[tuple[Operator, int]]] = {}
    read_as_bias: set[str] = set()  # constants some op reads as a float bias
    for op in model.operators:
        companions = TFLITE_OPS[op.type].hybrid.companions if id(op) in hybrid else ()
        for index, name in enumerate(op.inputs):
            if _stays_float(op, index):
                read_as_bias.add(name)
                continue
            if _is_candidate(model, name, min_elements) or (
                    index in companions and _is_candidate(model, name, 1)):
                uses.setdefault(name, []).append((op, index))
    for name, readers in uses.items():
        direct = [(op, i) for op, i in readers if id(op) in hybrid
                  and i in TFLITE_OPS[op.type].hybrid.weights + TFLITE_OPS[op.type].hybrid.companions]
        if sources is not None and not direct:
            continue
        axes = {TFLITE_OPS[op.type].hybrid.axis for op, _ in direct}
        axis = axes.pop() if len(axes) == 1 else None
        if name in read_as_bias:  # the bias stays float32: the int8 weight is a copy
            copy = model.add_array(typed_name(name, np.int8), model.arrays[name].shape, FLOAT32,
                                  model.arrays[name].data)
            for op, i in readers:
                model.set_input(op, i, copy)
            name = copy
        array = model.arrays[name]
        if axis is None:
            q, scale = quantize_weights_per_tensor(array.data)
            params = QuantParams(np.array([scale], np.float32), np.zeros(1, np.int64))
        else:
            q, scales = quantize_weights_per_channel(array.data, axis)
            params = QuantParams(scales, np.zeros(scales.size, np.int64), axis % array.data.ndim)
        array.data, array.dtype, array.quant, array.narrow_range = q, np.dtype(np.int8), params, True
        direct_ids = {(id(op), i) for op, i in direct}
        others = [(op, i) for op, i in readers if (id(op), i) not in direct_ids]
        if others:
            dequantize_for(model, name, others)
    for op in chosen:
        if id(op) in hybrid and TFLITE_OPS[op.type].hybrid.asymmetric:
            op.options["asymmetric_quantize_inputs"] = True
    return bool(hybrid) if sources is not None else bool(uses)
