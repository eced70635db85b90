"""The two op registries: ONNX importers and TFLite op definitions.

An op module (one per ONNX op family, in this package) registers
- `@onnx_op("Conv", ...)` functions that turn one ONNX node into IR operators (TFLite builtins), and
- `tflite_op("CONV_2D", ...)` entries that say how a TFLite builtin is written (options table,
  version), computed on constants (`evaluate`, used by constant folding), and moved through by
  the layout transformation (`layout`).
The generic stages (loader, transformations, writer) consult only these registries.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..ir import Model, Operator

# How a TRANSPOSE in front of an op can move behind it (see transforms/sink_transposes.py):
#   "elementwise": output[i] depends on inputs[i] only (broadcasting constants allowed);
#   "axis":        like elementwise, plus an `axis` option (or constant axes input) to remap;
#   None:          the op is layout-sensitive or shape-changing; transposes stop here.
LAYOUTS = ("elementwise", "axis", None)


def _version_1(op: Operator, model: Model) -> int:
    return 1


# How an op's output params relate to its inputs' in the int8 kernel (quantization-spec.md (e)):
#   "free":  the output gets its own params from its calibrated range (CONV_2D, ADD, ...);
#   "same":  every quantized input and the output share one (scale, zero point) -- the kernel
#            copies or compares raw int8 values (RESHAPE, MAX_POOL_2D, CONCATENATION, ...);
#   "fixed": the kernel requires `fixed_params` on the output (SOFTMAX, LOGISTIC, TANH, ...);
#   "none":  the output is not a quantized tensor (ARG_MAX's indices, a comparison's booleans).
OUTPUT_RULES = ("free", "same", "fixed", "none")


@dataclass(frozen=True)
class QuantRule:
    """How an op runs its int8 kernel; an OpDef without one stays float under --quantize.

    activations: the input indices quantized as asymmetric int8 activations (None: all inputs).
                 A constant there is quantized like an activation, over its own range ("free"
                 ops) or with the output's params ("same" ops). Inputs not listed (shapes, axes,
                 indices) are left as they are.
    weight:      the input holding constant weights: symmetric int8, narrow range, zero point 0,
                 per channel along `weight_axis` (None: per tensor).
    bias:        the input holding the constant bias: int32, scale input_scale * weight_scale.
    output:      one of OUTPUT_RULES; `fixed_params` (scale, zero_point) for "fixed".
    input_scale_below: the kernel aborts unless every quantized input's scale is below this
                 (TFLite's int8 comparisons turn each input scale itself into a multiplier < 1);
                 an op whose inputs' ranges exceed it stays float.
    int16:       the op also has a 16x8 kernel: int16 activations (symmetric, zero point 0) with
                 the same int8 weights and an int64 bias (--activations int16); a function of the
                 op when only some of its variants have one (or are exact enough to use).
    fixed_params_int16: the 16x8 kernel's required output params, for "fixed" ops.
    int16_options: options the op must be written with to run its 16x8 kernel (ADD's general
                 scales rather than power-of-two ones).
    """

    activations: tuple[int, ...] | None = (0,)
    weight: int | None = None
    weight_axis: int | None = None
    bias: int | None = None
    output: str = "free"
    fixed_params: tuple[float, int] | None = None
    input_scale_below: float | None = None
    int16: bool | Callable[[Operator], bool] = False
    fixed_params_int16: tuple[float, int] | None = None
    int16_options: tuple[tuple[str, object], ...] = ()

    def has_int16(self, op: Operator) -> bool:
        return self.int16(op) if callable(self.int16) else self.int16

    def activation_inputs(self, op: Operator) -> list[int]:
        indices = range(len(op.inputs)) if self.activations is None else self.activations
        return [i for i in indices if i < len(op.inputs) and op.inputs[i]]


@dataclass(frozen=True)
class HybridRule:
    """How an op runs TFLite's hybrid kernel under --weight-only: float activations, int8 weights
    (symmetric, zero point 0), the activations quantized on the fly at run time.

    weights:    the input indices that hold the weights; the op runs hybrid only when every one
                of them is a float constant big enough to be quantized (the kernel wants them all
                int8), otherwise its weights reach it through DEQUANTIZE.
    axis:       the per-channel axis of the weights (None: per tensor only).
    asymmetric: the op has `asymmetric_quantize_inputs` (it quantizes each input row with its own
                zero point rather than symmetrically: better for inputs not centred on 0).
    float_inputs: inputs that stay float32 whatever their size (biases, besides QuantRule.bias).
    companions: weight inputs the hybrid kernel also wants int8 when present, whatever their size
                (an LSTM's peepholes and projection); they do not decide whether it runs hybrid.
    """

    weights: tuple[int, ...] = (1,)
    axis: int | None = None
    asymmetric: bool = False
    float_inputs: tuple[int, ...] = ()
    companions: tuple[int, ...] = ()


# The rules most ops share; the *16 ones for ops that also have a 16x8 kernel.
FREE = QuantRule()
SAME = QuantRule(output="same")
FREE_BINARY = QuantRule(activations=(0, 1))
FREE16 = QuantRule(int16=True)
SAME16 = QuantRule(output="same", int16=True)
FREE_BINARY16 = QuantRule(activations=(0, 1), int16=True)
# The 16x8 fixed-output kernels (LOGISTIC, TANH, SOFTMAX) write steps of 1/32768 from zero point 0.
FIXED_INT16 = (1 / 32768, 0)


@dataclass(frozen=True)
class OpDef:
    """How one TFLite builtin is written, versioned, evaluated and moved through.

    name:     the BuiltinOperator name ("CONV_2D").
    options:  the schema's options table ("Conv2DOptions"), or None when the op has none.
    version:  op_version.cc's rule for the op as emitted (never above it).
    evaluate: numpy implementation over constant inputs, returning the outputs; None if the op
              is never folded.
    layout:   one of LAYOUTS.
    layout_inputs: indices of the inputs that carry the layout (None: all of them); the others
              (axes, paddings) are remapped by `remap_axes`.
    remap_axes: for layout "axis": (op, model, perm) -> out_perm | None. The op read
              transpose(x, perm); rewrite its axis options/inputs so it reads x instead, and return
              the permutation that turns its new output into the old one (None: cannot).
    quant:    the QuantRule of the op's int8 kernel, or None when TFLite has none (the op then
              stays float under --quantize, between DEQUANTIZE and QUANTIZE).
    hybrid:   the HybridRule of the op's hybrid kernel (--weight-only), or None when it has none.
    """

    name: str
    options: str | None = None
    version: Callable[[Operator, Model], int] = _version_1
    evaluate: Callable[[list[np.ndarray], Operator], list[np.ndarray]] | None = None
    layout: str | None = None
    layout_inputs: tuple[int, ...] | None = None
    remap_axes: Callable | None = None
    quant: QuantRule | None = None
    hybrid: HybridRule | None = None


def evaluate_unary(fn: Callable[[np.ndarray], np.ndarray]):
    """An `evaluate` for a one-input op: fn over input 0, in input 0's dtype."""
    return lambda inputs, op: [np.asarray(fn(inputs[0])).astype(inputs[0].dtype)]


TFLITE_OPS: dict[str, OpDef] = {}
ONNX_IMPORTERS: dict[str, Callable] = {}
# Output types of the ops onnx's shape inference does not know (contrib ops, function ops it does
# not expand, ops whose shape follows from a constant input's values), by op key:
# fn(input shapes, input dtypes, attrs) -> [(shape, dtype) or None per output], inputs omitted or
# unknown None; an op registered with values=True also gets the constant inputs' values (None for
# the others). qconvert/onnx/node_types.py uses them.
OUTPUT_TYPES: dict[str, Callable] = {}
VALUE_TYPED: set[str] = set()
# A dimension an OUTPUT_TYPES function returns in place of a size that the values decide (NonZero's
# count): the loader sets it, as it sets a dynamic input dimension (onnx/dynamic_dims.py), and
# the .tflite resizes it when it runs. RUN_TIME_SIZED: the op keys whose types may return it.
RUN_TIME = "run time"
# ... and one in place of a size that a value not known yet decides (a ConstantOfShape of a shape
# computed from a tensor typed later): the loader takes it as RUN_TIME only once nothing else
# types the graph further (loader._settle), since the value may yet be known at its sizes.
UNKNOWN = "not known yet"
RUN_TIME_SIZED: set[str] = set()


def op_key(node) -> str:
    """The registries' key of an ONNX node: its op type, prefixed by its domain outside ai.onnx
    ("com.microsoft.Attention")."""
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"


def onnx_types(*keys: str, values: bool = False, run_time: bool = False):
    """Registers the decorated function as the output types of the given op keys (given the
    constant inputs' values too with `values`; dimensions RUN_TIME may be returned with
    `run_time`)."""

    def register(fn: Callable) -> Callable:
        for key in keys:
            OUTPUT_TYPES[key] = fn
            if values:
                VALUE_TYPED.add(key)
            if run_time:
                RUN_TIME_SIZED.add(key)
        return fn

    return register


def tflite_op(name: str, **fields) -> OpDef:
    if name in TFLITE_OPS:
        raise ValueError(f"TFLite op {name} registered twice")
    TFLITE_OPS[name] = OpDef(name, **fields)
    return TFLITE_OPS[name]


def onnx_op(*onnx_types: str):
    """Registers the decorated function as the importer of the given ONNX op types."""

    def register(fn: Callable) -> Callable:
        for onnx_type in onnx_types:
            if onnx_type in ONNX_IMPORTERS:
                raise ValueError(f"ONNX op {onnx_type} registered twice")
            ONNX_IMPORTERS[onnx_type] = fn
        return fn

    return register


def onnx_ops_as(mapping: dict[str, str], inputs: int) -> None:
    """Registers importers for ONNX ops that are exactly one TFLite builtin reading the node's
    first `inputs` inputs (Relu -> RELU, Where -> SELECT_V2, ...)."""

    def import_direct(node, ctx) -> None:
        ctx.check_broadcast(node.inputs[:inputs], node.outputs[0])
        ctx.add_op(mapping[node.op_type], node.inputs[:inputs], node.outputs)

    onnx_op(*mapping)(import_direct)
