"""Elementwise binary ops with numpy broadcasting: Add, Sub, Mul, Div, Max, Min, Sum, Pow, Mean,
Mod, BitShift, BitwiseAnd/Or/Xor/Not.

TFLite's binary kernels broadcast like numpy, so the ONNX node maps one to one; n-ary Sum/Max/Min
become a chain. Mod is FLOOR_MOD (fmod=0) or C's fmod built from it (fmod=1). BitShift is
RIGHT_SHIFT, or a multiplication wrapped at the type's width (TFLite has no left shift); the
bitwise ops work on the int32 values every integer type computes as (BITWISE_XOR; And from sums
and xors, which TFLite lacks).
"""

from __future__ import annotations

import numpy as np

from .layout import reshape
from .registry import FREE_BINARY, FREE_BINARY16, TFLITE_OPS, QuantRule, onnx_op, tflite_op
from .tile import broadcast_to
from .versions import (
    INT8,
    INT16,
    INT64,
    UINT32,
    broadcast_beyond_4d,
    by_input_dtype,
    has_quantization,
    input_dtype,
    is_type,
)


def _binary(fn):
    def evaluate(inputs, op):
        a, b = inputs
        return [fn(a, b).astype(np.result_type(a, b), copy=False)]
    return evaluate


def _int_div(a, b):
    if a.dtype.kind in "iu":
        return np.trunc(a / b).astype(a.dtype)  # TFLite DIV truncates like C
    return a / b


def _add_version(op, model):
    """op_version.cc's ADD (no rank rule: ADD broadcasts to rank 6 from version 1)."""
    dtype = input_dtype(op, model)
    if dtype == INT16 and not has_quantization(model.arrays[op.inputs[0]]):
        return 5
    if dtype == INT64:
        return 4
    if is_type(op, model, (INT16,), (INT16,)) and not op.options.get("pot_scale_int16", True):
        return 3
    return 2 if dtype == INT8 else 1


def _sub_version(op, model):
    if is_type(op, model, (INT16,), (INT16,)) and not op.options.get("pot_scale_int16", True):
        return 5
    if input_dtype(op, model) == INT64:
        return 4
    if broadcast_beyond_4d(op, model):
        return 3
    return 2 if input_dtype(op, model) == INT8 else 1


def _mul_version(op, model):
    dtype = input_dtype(op, model)
    a, b = (model.arrays[n] for n in op.inputs[:2])
    out = model.arrays[op.outputs[0]]
    if (dtype == INT16 and not (has_quantization(a) or has_quantization(b))) or dtype == UINT32:
        return 7
    if dtype == np.complex64:
        return 6
    if dtype == INT64:
        return 5
    if dtype == INT16:
        return 4
    scales = [float(np.ravel(x.quant.scale)[0]) if x.quant is not None and np.size(x.quant.scale)
              else 0.0 for x in (a, b, out)]
    if all(scales) and scales[0] * scales[1] / scales[2] >= 1.0:
        return 3
    return 2 if dtype == INT8 else 1


def _div_version(op, model):
    return 2 if broadcast_beyond_4d(op, model) else 1


def _max_min_version(op, model):
    if is_type(op, model, (INT16,), (INT16,)):
        return 4
    if broadcast_beyond_4d(op, model):
        return 3
    return 2 if input_dtype(op, model) == INT8 else 1


# ADD and SUB's 16x8 kernels rescale any input and output scales when written with
# pot_scale_int16 false (the schema's default, true, is a power-of-two-scales-only variant).
GENERAL_SCALES16 = QuantRule(activations=(0, 1), int16=True, int16_options=(("pot_scale_int16", False),))

tflite_op("ADD", options="AddOptions", quant=GENERAL_SCALES16, evaluate=_binary(np.add), layout="elementwise",
          version=_add_version)
tflite_op("SUB", options="SubOptions", quant=GENERAL_SCALES16, evaluate=_binary(np.subtract), layout="elementwise",
          version=_sub_version)
tflite_op("MUL", options="MulOptions", quant=FREE_BINARY16, evaluate=_binary(np.multiply), layout="elementwise",
          version=_mul_version)
tflite_op("DIV", options="DivOptions", evaluate=_binary(_int_div), layout="elementwise",
          version=_div_version)
tflite_op("MAXIMUM", evaluate=_binary(np.maximum), layout="elementwise", version=_max_min_version,
          quant=QuantRule(activations=(0, 1), output="same", int16=True))
tflite_op("MINIMUM", evaluate=_binary(np.minimum), layout="elementwise", version=_max_min_version,
          quant=QuantRule(activations=(0, 1), output="same", int16=True))
tflite_op("POW", evaluate=_binary(np.power), layout="elementwise")
# FLOOR_MOD: C's remainder, plus the divisor where the two signs differ (numpy's np.mod computes
# the same way, to the bit); int32, int64 and float32 kernels, broadcasting up to rank 4.
tflite_op("FLOOR_MOD", options="FloorModOptions", evaluate=_binary(np.mod), layout="elementwise",
          version=by_input_dtype({np.int8: 2, np.int16: 2}))
tflite_op("SQUARED_DIFFERENCE", quant=FREE_BINARY, evaluate=_binary(lambda a, b: (a - b) ** 2), layout="elementwise",
          version=by_input_dtype({np.int8: 2}))

_BINARY = {"Add": "ADD", "Sub": "SUB", "Mul": "MUL", "Div": "DIV", "Pow": "POW"}
_NARY = {"Sum": "ADD", "Max": "MAXIMUM", "Min": "MINIMUM"}


def _pow_exponent(ctx, base: str, b: str, exponent) -> str:
    """The exponent in the base's dtype (ONNX allows them to differ, TFLite POW does not): a
    constant is converted with numpy, an activation goes through a CAST."""
    dtype = ctx.dtype(base)
    if ctx.dtype(b) == dtype:
        return b
    if exponent is not None:
        return ctx.constant("exponent", exponent.astype(dtype))
    cast = ctx.tensor(b + "_cast", ctx.shape(b), dtype)
    ctx.add_op("CAST", [b], [cast], {"in_data_type": ctx.dtype(b), "out_data_type": dtype})
    return cast


@onnx_op(*_BINARY)
def import_binary(node, ctx):
    a, b = node.inputs[:2]
    ctx.check_broadcast([a, b], node.outputs[0])
    if node.op_type == "Pow":
        exponent = ctx.const(b)
        if exponent is not None and exponent.size == 1 and float(exponent.reshape(())) == 2.0:
            ctx.add_op("MUL", [a, a], node.outputs)  # x*x: exact, and MUL has an int8 kernel
            return
        b = _pow_exponent(ctx, a, b, exponent)
    ctx.add_op(_BINARY[node.op_type], [a, b], node.outputs)


@onnx_op(*_NARY, "Mean")
def import_nary(node, ctx):
    """Sum/Max/Min/Mean of n inputs: a left-to-right chain of binary ops (Mean divides after)."""
    y = node.outputs[0]
    inputs = [n for n in node.inputs if n]
    ctx.check_broadcast(inputs, y)
    op_type = _NARY.get(node.op_type, "ADD")
    if len(inputs) == 1:
        ctx.add_op("IDENTITY", inputs, [y])
        return
    final = y if node.op_type != "Mean" else ctx.tensor(y + "_sum", ctx.shape(y), ctx.dtype(y))
    current = inputs[0]
    for k, other in enumerate(inputs[1:]):
        last = k == len(inputs) - 2
        out = final if last else ctx.tensor(y + f"_{k}", np.broadcast_shapes(ctx.shape(current), ctx.shape(other)), ctx.dtype(y))
        ctx.add_op(op_type, [current, other], [out])
        current = out
    if node.op_type == "Mean":
        ctx.add_op("MUL", [final, ctx.constant("inv_count", np.array(1.0 / len(inputs), ctx.dtype(y)))], [y])


def _broadcast_within_rank_4(ctx, inputs: list[str], y: str) -> list[str]:
    """FLOOR_MOD broadcasts up to rank 4: beyond, unequal shapes are first made the output's
    (BROADCAST_TO, after a RESHAPE adding leading 1s to a lower rank)."""
    shape = tuple(ctx.shape(y))
    if len(shape) <= 4 or all(tuple(ctx.shape(n)) == shape for n in inputs):
        return inputs
    made = []
    for name in inputs:
        if tuple(ctx.shape(name)) != shape:
            full = (1,) * (len(shape) - ctx.rank(name)) + tuple(ctx.shape(name))
            name = broadcast_to(ctx, reshape(ctx, name, full) if full != ctx.shape(name) else name, shape)
        made.append(name)
    return made


@onnx_op("Mod")
def import_mod(node, ctx):
    """fmod=0: FLOOR_MOD (the result takes the divisor's sign). fmod=1: C's fmod (the dividend's
    sign). For floats it is sign(x) * FLOOR_MOD(|x|, |y|): on non-negative operands FLOOR_MOD is
    C's fmod itself, and abs and negation are exact (a correction by adding y would round). For
    integers it is FLOOR_MOD minus y where the remainder is non-zero and its sign differs from
    x's, exact over the whole int32 range (|x| would overflow at its minimum); an integer divisor
    of -1 becomes 1 (same remainder, 0) so that the kernel never computes int32's minimum % -1.
    An integer divisor that is a constant with a zero is refused: TFLite's kernel fails on it,
    ONNX leaves it undefined."""
    a, b = node.inputs[:2]
    y = node.outputs[0]
    ctx.check_broadcast([a, b], y)
    dtype = np.dtype(ctx.dtype(a))
    if dtype != np.dtype(ctx.dtype(b)):
        raise ctx.error(f"inputs have dtypes {dtype} and {np.dtype(ctx.dtype(b))}; Mod needs one")
    if dtype.kind not in "fi":
        raise ctx.error(f"inputs have dtype {dtype}; FLOOR_MOD computes int32, int64 and float32")
    fmod = bool(node.attr("fmod", 0))
    if dtype.kind == "f" and not fmod and ctx.opset < 28:
        raise ctx.error(f"fmod=0 with float inputs is invalid before opset 28 (this model: "
                        f"opset {ctx.opset}); float inputs need fmod=1")
    divisor = ctx.const(b)
    if dtype.kind == "i" and divisor is not None and np.any(divisor == 0):
        raise ctx.error(f"the integer divisor (input {b!r}) holds a 0: the remainder is undefined")
    float_fmod = fmod and dtype.kind == "f"
    if float_fmod:  # |b|, before any broadcast (a constant's is computed here)
        b = _absolute(ctx, b, divisor)
    elif dtype.kind == "i":
        b = _minus_one_as_one(ctx, b, divisor)
    a, b = _broadcast_within_rank_4(ctx, [a, b], y)
    if not fmod:
        ctx.add_op("FLOOR_MOD", [a, b], [y])
    elif float_fmod:
        _float_fmod(ctx, a, b, y)
    else:
        _int_fmod(ctx, a, b, y)


def _minus_one_as_one(ctx, b: str, value) -> str:
    """An integer divisor with -1 made 1: any x modulo either is 0, and TFLite's FLOOR_MOD
    computes C's % first, which traps (SIGFPE, the process dies) on int32's minimum % -1."""
    if value is not None:
        return ctx.constant("divisor", np.where(value == -1, 1, value).astype(value.dtype))
    dtype = ctx.dtype(b)
    is_minus_one = ctx.tensor(b + "_is_minus_one", ctx.shape(b), np.bool_)
    ctx.add_op("EQUAL", [b, ctx.constant("minus_one", np.array(-1, dtype))], [is_minus_one])
    safe = ctx.tensor(b + "_safe", ctx.shape(b), dtype)
    ctx.add_op("SELECT_V2", [is_minus_one, ctx.constant("one", np.array(1, dtype)), b], [safe])
    return safe


def _absolute(ctx, x: str, value) -> str:
    """|x|: computed here for a constant `value`, else an ABS."""
    if value is not None:
        return ctx.constant("divisor_abs", np.abs(value))
    out = ctx.tensor(x + "_abs", ctx.shape(x), ctx.dtype(x))
    ctx.add_op("ABS", [x], [out])
    return out


def _float_fmod(ctx, a: str, b_magnitude: str, y: str) -> None:
    """sign(a) * FLOOR_MOD(|a|, |b|) as SELECT_V2(a < 0, -m, m); b_magnitude is |b|."""
    shape, dtype = ctx.shape(y), ctx.dtype(y)
    magnitude = _absolute(ctx, a, None)
    m = ctx.tensor(y + "_magnitude", shape, dtype)
    ctx.add_op("FLOOR_MOD", [magnitude, b_magnitude], [m])
    negative = ctx.tensor(a + "_negative", ctx.shape(a), np.bool_)
    ctx.add_op("LESS", [a, ctx.constant("zero", np.zeros((), dtype))], [negative])
    negated = ctx.tensor(y + "_negated", shape, dtype)
    ctx.add_op("NEG", [m], [negated])
    ctx.add_op("SELECT_V2", [negative, negated, m], [y])


def _int_fmod(ctx, a: str, b: str, y: str) -> None:
    """r = FLOOR_MOD(a, b); SELECT_V2(r != 0 and (r < 0) != (a < 0), r - b, r)."""
    shape, dtype = ctx.shape(y), ctx.dtype(y)
    zero = ctx.constant("zero", np.zeros((), dtype))
    r = ctx.tensor(y + "_floor_mod", shape, dtype)
    ctx.add_op("FLOOR_MOD", [a, b], [r])
    nonzero = ctx.tensor(y + "_nonzero", shape, np.bool_)
    ctx.add_op("NOT_EQUAL", [r, zero], [nonzero])
    r_negative = ctx.tensor(y + "_negative", shape, np.bool_)
    ctx.add_op("LESS", [r, zero], [r_negative])
    a_negative = ctx.tensor(a + "_negative", ctx.shape(a), np.bool_)
    ctx.add_op("LESS", [a, zero], [a_negative])
    signs_differ = ctx.tensor(y + "_signs_differ", shape, np.bool_)
    ctx.add_op("NOT_EQUAL", [r_negative, a_negative], [signs_differ])
    fix = ctx.tensor(y + "_fix", shape, np.bool_)
    ctx.add_op("LOGICAL_AND", [nonzero, signs_differ], [fix])
    fixed = ctx.tensor(y + "_fixed", shape, dtype)
    ctx.add_op("SUB", [r, b], [fixed])
    ctx.add_op("SELECT_V2", [fix, fixed, r], [y])


# RIGHT_SHIFT: int8/16/32 and uint8/16/32 kernels, broadcasting; a signed input shifts
# arithmetically.
tflite_op("RIGHT_SHIFT", options="RightShiftOptions", evaluate=_binary(np.right_shift), layout="elementwise")

# The integer types that compute as int32 inside the graph and whose width a left shift wraps at.
_SMALL_INTS = {np.dtype(t) for t in (np.int8, np.uint8, np.int16, np.uint16)}


def _integer_type(ctx, name: str) -> np.dtype | None:
    """The ONNX integer type of `name` as far as its origin shows it inside the graph: a
    constant keeps a small type; a graph input or a Cast to a small type comes through a CAST
    from it (loader, ops/cast.py); int32 for an int32 graph input or constant and a CAST from any
    other type (int32 and int64 values are both int32 inside); None when nothing shows it."""
    dtype = np.dtype(ctx.dtype(name))
    if dtype in _SMALL_INTS:
        return dtype
    producer = ctx.model.producer(name)
    if producer is not None and producer.type == "CAST":
        source = np.dtype(ctx.dtype(producer.inputs[0]))
        return source if source in _SMALL_INTS else np.dtype(np.int32)
    if ctx.const(name) is not None or name in ctx.model.inputs:
        return np.dtype(np.int32)
    return None


def _as_int32(ctx, name: str) -> str:
    """A small-type constant as int32, like the activations it meets."""
    value = ctx.const(name)
    if value is not None and value.dtype != np.int32:
        return ctx.constant("bitshift_operand", value.astype(np.int32))
    return name


def _cast(ctx, x: str, dtype, hint: str) -> str:
    out = ctx.tensor(hint, ctx.shape(x), dtype)
    ctx.add_op("CAST", [x], [out], {"in_data_type": np.dtype(ctx.dtype(x)), "out_data_type": np.dtype(dtype)})
    return out


def _right_shift_amount(ctx, shift: str) -> str:
    """The shift with every amount outside [0, 31] made 31: x >> 31 is x's sign fill, which is
    ONNX's result for those (and for amounts from the type's width on, which x >> s gives by
    itself since the values fit the type)."""
    value = ctx.const(shift)
    if value is not None:
        return ctx.constant("shift", np.where((value < 0) | (value > 31), 31, value).astype(np.int32))
    shape = ctx.shape(shift)
    below = ctx.tensor(shift + "_clamped", shape, np.int32)
    ctx.add_op("MINIMUM", [shift, ctx.constant("max_shift", np.array(31, np.int32))], [below])
    negative = ctx.tensor(shift + "_negative", shape, np.bool_)
    ctx.add_op("LESS", [shift, ctx.constant("zero", np.array(0, np.int32))], [negative])
    amount = ctx.tensor(shift + "_amount", shape, np.int32)
    ctx.add_op("SELECT_V2", [negative, ctx.constant("max_shift", np.array(31, np.int32)), below], [amount])
    return amount


def _left_shift_factor(ctx, shift: str, bits: int, dtype) -> str:
    """2^s in `dtype` where 0 <= s < bits, 0 elsewhere (ONNX's left shift out of range is 0). A
    run-time one is POW(2.0, s) in float32 (exact, 2^31 included) cast to `dtype`."""
    value = ctx.const(shift)
    if value is not None:
        valid = (value >= 0) & (value < bits)
        return ctx.model.add_constant("factor", np.where(valid, 2.0 ** np.where(valid, value, 0), 0).astype(dtype))
    shape = ctx.shape(shift)
    power = ctx.tensor(shift + "_power", shape, np.float32)
    ctx.add_op("POW", [ctx.constant("two", np.array(2, np.float32)), _cast(ctx, shift, np.float32, shift + "_float")],
               [power])
    below = ctx.tensor(shift + "_in_width", shape, np.bool_)
    ctx.add_op("LESS", [shift, ctx.constant("width", np.array(bits, np.int32))], [below])
    above = ctx.tensor(shift + "_non_negative", shape, np.bool_)
    ctx.add_op("GREATER_EQUAL", [shift, ctx.constant("zero", np.array(0, np.int32))], [above])
    valid = ctx.tensor(shift + "_valid", shape, np.bool_)
    ctx.add_op("LOGICAL_AND", [below, above], [valid])
    factor = ctx.tensor(shift + "_factor", shape, np.float32)
    ctx.add_op("SELECT_V2", [valid, power, ctx.constant("zero", np.array(0, np.float32))], [factor])
    return _cast(ctx, factor, dtype, shift + "_factor_int")


@onnx_op("BitShift")
def import_bitshift(node, ctx):
    """Every integer type computes as int32 inside the graph. RIGHT: RIGHT_SHIFT (arithmetic,
    as ONNX's for signed types) by the amount, 31 where it is outside [0, 31]. LEFT: x * 2^s
    wrapped at the type's width -- through a CAST to the small type and back, or for int32 and
    int64 a multiplication in int64 CAST to int32 -- and 0 where s is outside [0, width) (TFLite
    has no left shift). The width must show inside the graph (_integer_type)."""
    a, b = node.inputs[:2]
    y = node.outputs[0]
    ctx.check_broadcast([a, b], y)
    direction = node.attr("direction")
    if direction not in ("LEFT", "RIGHT"):
        raise ctx.error(f"direction is {direction!r}; ONNX wants 'LEFT' or 'RIGHT'")
    dtype = _integer_type(ctx, a) or _integer_type(ctx, b)
    x, shift = _as_int32(ctx, a), _as_int32(ctx, b)
    if np.dtype(ctx.dtype(x)) != np.int32 or np.dtype(ctx.dtype(shift)) != np.int32:
        raise ctx.error(f"inputs have dtypes {np.dtype(ctx.dtype(a))} and {np.dtype(ctx.dtype(b))}; "
                        "BitShift takes integers")
    if direction == "RIGHT":
        ctx.add_op("RIGHT_SHIFT", [x, _right_shift_amount(ctx, shift)], [y])
        return
    if dtype is None:
        raise ctx.error(f"a left shift wraps at its type's width, and nothing inside the graph "
                        f"shows the integer type of {a!r} (a constant operand, a graph input or "
                        "a Cast to the type does)")
    shape = np.broadcast_shapes(ctx.shape(x), ctx.shape(shift))
    if dtype in _SMALL_INTS:
        product = ctx.tensor(y + "_product", shape, np.int32)
        ctx.add_op("MUL", [x, _left_shift_factor(ctx, shift, dtype.itemsize * 8, np.int32)], [product])
        ctx.add_op("CAST", [_cast(ctx, product, dtype, y + "_wrapped")], [y],
                   {"in_data_type": dtype, "out_data_type": np.dtype(np.int32)})
        return
    product = ctx.tensor(y + "_product", shape, np.int64)
    ctx.add_op("MUL", [_cast(ctx, x, np.int64, x + "_int64"), _left_shift_factor(ctx, shift, 32, np.int64)],
               [product])
    ctx.add_op("CAST", [product], [y], {"in_data_type": np.dtype(np.int64), "out_data_type": np.dtype(np.int32)})


# BITWISE_XOR: int8/16/32 and uint8/16/32 kernels, broadcasting.
tflite_op("BITWISE_XOR", options="BitwiseXorOptions", evaluate=_binary(np.bitwise_xor), layout="elementwise")


def _integer_operands(node, ctx) -> list[str]:
    names = [_as_int32(ctx, n) for n in node.inputs if n]
    for original, name in zip(node.inputs, names):
        if np.dtype(ctx.dtype(name)) != np.int32:
            raise ctx.error(f"input {original!r} has dtype {np.dtype(ctx.dtype(original))}; "
                            f"{node.op_type} takes integers")
    return names


def _binary_op(ctx, op_type: str, a: str, b: str, hint: str, out: str | None = None) -> str:
    value_a, value_b = ctx.const(a), ctx.const(b)
    if out is None and value_a is not None and value_b is not None:
        return ctx.constant(hint, TFLITE_OPS[op_type].evaluate([value_a, value_b], None)[0])
    out = out or ctx.tensor(hint, np.broadcast_shapes(ctx.shape(a), ctx.shape(b)), np.int32)
    ctx.add_op(op_type, [a, b], [out])
    return out


def _and_of_halves(ctx, a: str, b: str, hint: str) -> str:
    """a & b for operands within [-2^16, 2^16]: (a + b - (a ^ b)) / 2 (the sum is the xor plus
    twice the and; no overflow at this size; the halving is exact, the difference even)."""
    total = _binary_op(ctx, "ADD", a, b, hint + "_sum")
    twice = _binary_op(ctx, "SUB", total, _binary_op(ctx, "BITWISE_XOR", a, b, hint + "_xor"), hint + "_twice")
    return _binary_op(ctx, "RIGHT_SHIFT", twice, ctx.constant("one", np.array(1, np.int32)), hint + "_and")


def _halves(ctx, x: str) -> tuple[str, str]:
    """(x >> 16, x mod 2^16): x = high * 2^16 + low, high in [-2^15, 2^15), low in [0, 2^16)."""
    return (_binary_op(ctx, "RIGHT_SHIFT", x, ctx.constant("sixteen", np.array(16, np.int32)), x + "_high"),
            _binary_op(ctx, "FLOOR_MOD", x, ctx.constant("two_16", np.array(1 << 16, np.int32)), x + "_low"))


def _bitwise_and(ctx, a: str, b: str, hint: str, out: str | None = None) -> str:
    """a & b on int32 (every integer type's values, sign-extended): on the 16-bit halves, which
    the and keeps apart, reassembled as high * 2^16 + low (in int32's range, no overflow)."""
    (a_high, a_low), (b_high, b_low) = _halves(ctx, a), _halves(ctx, b)
    high = _and_of_halves(ctx, a_high, b_high, hint + "_high")
    low = _and_of_halves(ctx, a_low, b_low, hint + "_low")
    shifted = _binary_op(ctx, "MUL", high, ctx.constant("two_16", np.array(1 << 16, np.int32)), hint + "_shifted")
    return _binary_op(ctx, "ADD", shifted, low, hint, out)


@onnx_op("BitwiseXor", "BitwiseAnd", "BitwiseOr")
def import_bitwise(node, ctx):
    """On the int32 values every integer type computes as (sign-extended, so the bits of the
    type's width are its own): Xor is BITWISE_XOR; And, which TFLite lacks, comes from sums and
    xors of 16-bit halves (_bitwise_and); Or is xor + and (disjoint bits: no carry)."""
    a, b = _integer_operands(node, ctx)
    y = node.outputs[0]
    ctx.check_broadcast([a, b], y)
    if node.op_type == "BitwiseXor":
        ctx.add_op("BITWISE_XOR", [a, b], [y])
    elif node.op_type == "BitwiseAnd":
        _bitwise_and(ctx, a, b, y + "_and", out=y)
    else:
        xor = _binary_op(ctx, "BITWISE_XOR", a, b, y + "_xor")
        _binary_op(ctx, "ADD", xor, _bitwise_and(ctx, a, b, y + "_and"), y, out=y)


@onnx_op("BitwiseNot")
def import_bitwise_not(node, ctx):
    """x ^ m: m = -1 (every bit) for the signed types, 2^width - 1 for uint8 and uint16 (whose
    values have no sign extension to flip); the type must show inside the graph."""
    (x,) = _integer_operands(node, ctx)
    dtype = _integer_type(ctx, node.inputs[0])
    if dtype is None:
        raise ctx.error(f"nothing inside the graph shows the integer type of {node.inputs[0]!r} "
                        "(signed or unsigned, and its width), which its complement depends on "
                        "(a constant, a graph input or a Cast to the type does)")
    mask = -1 if dtype.kind == "i" else (1 << (8 * dtype.itemsize)) - 1
    ctx.add_op("BITWISE_XOR", [x, ctx.constant("mask", np.array(mask, np.int32))], node.outputs)
