"""The recurrent layers. LSTM: one TFLite UNIDIRECTIONAL_SEQUENCE_LSTM per direction, or an
unrolled cell when the fused kernel cannot express the node. GRU and RNN: unrolled cells (below).

Fused kernel (tensorflow/lite/kernels/unidirectional_sequence_lstm.cc): 24 inputs -- x;
input-to-{input, forget, cell, output} weights [H, I]; recurrent-to-{i, f, c, o} [H, H];
peepholes cell-to-{i, f, o} [H] (optional); gate biases {i, f, c, o} [H]; projection weights and
bias (unused); the output state and cell state, which must be *variable* tensors (no buffer: the
interpreter rejects a variable tensor with data); four layer-norm coefficients (unused). One
output, the hidden sequence. ONNX packs W/R/B as gates i, o, f, c, and P as i, o, f.
layout=0 (time-major X [T, B, I]) is time_major=True, layout=1 is time_major=False. The gate
activation is always sigmoid and fused_activation_function (TANH) serves as both g and h.

State: the kernel reads the initial state from its variable tensors and overwrites them with the
final state, and the interpreter keeps them across invocations (checked: a second invoke of the
same input differs). So every state variable is *written by an op before the LSTM* on each
invocation: FILL for a uniform constant (no `evaluate`, so constant folding never turns it into
a buffer), ADD(value, 0) for any other initial state (a non-uniform constant, or a graph input or
computed initial_h/initial_c). The model is stateless like the ONNX node; no reset is needed.

Outputs: Y is the sequence (reversed back for direction "reverse", concatenated for
"bidirectional", which runs x reversed through a second op); Y_h is the last step of the
sequence (SLICE). The fused kernel has no cell-state output, and ONNX `clip` bounds the gates'
pre-activations while TFLite's cell_clip bounds the cell state, so a node whose Y_c is read, with
clip, with non-default activations or with sequence_lens short of the sequence is unrolled
instead: one FULLY_CONNECTED for all input projections, then per step FULLY_CONNECTED
(recurrent), SPLIT into gates and elementwise ops.

sequence_lens (LSTM, GRU and RNN alike, one mechanism: _run_steps): a graph input, computed at run
time, or a constant short of the sequence masks the unrolled steps. Step t is valid where
t < length (LESS of the step index and the int32 lengths, once per step for both directions; a
constant mask for constant lengths); SELECT_V2 keeps the previous states where it is not and
writes 0 to Y, so the final states are those after step length - 1 as ONNX defines them. The
reverse direction runs its steps last to first through the same mask, which holds the initial
states through the padding and so starts at step length - 1: ONNX's reversal within each
sequence's length, without REVERSE_SEQUENCE (a float-only kernel). An empty sequence's Y_h and Y_c
are 0, as onnxruntime gives them. Constant lengths outside 0..T are refused (onnxruntime refuses
them when it runs); run-time ones are not checked (past T reads as T, below 0 as 0). The fused
kernel cannot mask: full constant lengths keep it.

Activations: every function of ONNX's `activations` list (Relu, Tanh, Sigmoid, Affine, LeakyRelu,
ThresholdedRelu, ScaledTanh, HardSigmoid, Elu, Softsign, Softplus), with the alpha/beta that
`activation_alpha`/`activation_beta` give in order to the functions that take them; composed
from TFLite ops in the unrolled cells (see _activate).
Unsupported (error): input_forget=1, constant sequence_lens outside 0..T or not of the batch's
size, non-constant W/R/B (a computed P is unrolled).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .compose import call_importer
from .registry import SAME16, HybridRule, onnx_op, tflite_op
from .versions import FLOAT32, INT8, INT16, by_input_dtype, input_dtype

_DEFAULT_ACTIVATIONS = ["Sigmoid", "Tanh", "Tanh"]
_ACTIVATION_OPS = {"Sigmoid": "LOGISTIC", "Tanh": "TANH", "Relu": "RELU"}
# The other activations: whether each takes (alpha, beta), and its parameters when the
# activation_alpha/activation_beta lists run out. The spec says "the defaults of the corresponding
# ONNX operators"; these are onnxruntime's (0 for Affine, ThresholdedRelu and ScaledTanh, where the
# spec's ThresholdedRelu and Affine would take 1), which the conversion is checked against.
_PARAMETERS = {"Affine": (True, True), "LeakyRelu": (True, False), "ThresholdedRelu": (True, False),
               "ScaledTanh": (True, True), "HardSigmoid": (True, True), "Elu": (True, False),
               "Softsign": (False, False), "Softplus": (False, False)}
_DEFAULT_PARAMETERS = {"LeakyRelu": (0.01, 0.0), "HardSigmoid": (0.2, 0.5), "Elu": (1.0, 0.0)}
_FUSED_GATES = (0, 2, 3, 1)  # TFLite's i, f, c, o in ONNX's i, o, f, c packing
_F32 = np.float32


def _lstm_version(op, model):
    """op_version.cc's UNIDIRECTIONAL_SEQUENCE_LSTM (input 2 is input_to_forget_weights)."""
    x, w = input_dtype(op, model, 0), input_dtype(op, model, 2)
    y = model.arrays[op.outputs[0]].dtype
    if x == INT16 and w == INT8 and y == INT16:
        return 5
    if op.options.get("diagonal_recurrent_tensors"):
        return 4
    if x == FLOAT32 and w == INT8 and y == FLOAT32:
        return 3 if op.options.get("asymmetric_quantize_inputs") else 2
    return 1


# FILL reads the value's type (input 1); strings (2) never reach qconvert.
_fill_version = by_input_dtype({np.float16: 4, np.int8: 3, np.int16: 3, np.bool_: 2}, index=1)


def _evaluate_reverse(inputs, op):
    return [np.flip(inputs[0], axis=tuple(int(a) for a in np.ravel(inputs[1])))]


# Hybrid: the eight input-to-gate and recurrent-to-gate weight matrices, per tensor, and with them
# the peepholes and projection weights (the kernel wants every weight int8); gate and projection
# biases and layer-norm coefficients stay float, as the kernel reads them.
tflite_op("UNIDIRECTIONAL_SEQUENCE_LSTM", options="UnidirectionalSequenceLSTMOptions",
          hybrid=HybridRule(weights=tuple(range(1, 9)), asymmetric=True,
                            companions=(9, 10, 11, 16), float_inputs=(12, 13, 14, 15, 17, 20, 21, 22, 23)),
          version=_lstm_version)
# FILL has no `evaluate` on purpose: it (re)initialises LSTM state variables on every invocation.
tflite_op("FILL", version=_fill_version)
tflite_op("REVERSE_V2", quant=SAME16, version=by_input_dtype({np.int8: 3, np.bool_: 2}),
          evaluate=_evaluate_reverse)


@dataclass(frozen=True)
class _Activation:
    """One function of the `activations` list with its alpha and beta (0 where it takes none)."""

    name: str
    alpha: float = 0.0
    beta: float = 0.0


@dataclass
class _Direction:
    """One direction's parameters; initial states are constants or array names of `state`."""

    w: np.ndarray  # [4, H, I], ONNX gate order i, o, f, c
    r: np.ndarray  # [4, H, H]
    b: np.ndarray  # [4, H] (Wb + Rb)
    p: np.ndarray | list | None  # [3, H] constant, or 3 array names; gates i, o, f
    h0: np.ndarray | str
    c0: np.ndarray | str
    reverse: bool
    acts: list[_Activation]


@dataclass
class _Spec:
    x: str
    axis: int  # the time axis of X and Y's per-direction sequence (0 or 1)
    seq: tuple[int, ...]  # one direction's sequence shape: [T, B, H] or [B, T, H]
    state: tuple[int, ...]  # one direction's state shape: [1, B, H] or [B, 1, H]
    clip: float | None
    dirs: list[_Direction]
    node: object = None  # the ONNX node, for the importers that compose activations
    lengths: _Lengths | None = None  # sequence_lens, when the steps are masked


def _op(ctx, op_type: str, inputs: list[str], shape, options=None, activation="NONE", dtype=_F32) -> str:
    """Appends an op with one new output of `shape` (float unless `dtype`); returns its name."""
    y = ctx.tensor(op_type.lower(), shape, dtype)
    ctx.add_op(op_type, inputs, [y], options, activation)
    return y


def _split(ctx, x: str, axis: int, count: int) -> list[str]:
    """SPLIT of x into `count` equal parts along `axis`."""
    shape = list(ctx.shape(x))
    shape[axis] //= count
    parts = [ctx.tensor(f"{x}_{k}", shape, _F32) for k in range(count)]
    ctx.add_op("SPLIT", [ctx.constant("axis", np.array(axis, np.int32)), x], parts,
               {"num_splits": count})
    return parts


def _initial_states(ctx, name: str, spec: _Spec, count: int) -> list:
    """initial_h or initial_c per direction, each of the state shape."""
    if not name:
        return [np.zeros(spec.state, _F32)] * count
    value = ctx.const(name)
    if value is not None:
        return [np.ascontiguousarray(np.take(value, [d], axis=spec.axis), _F32) for d in range(count)]
    return [name] if count == 1 else _split(ctx, name, spec.axis, count)


def _peepholes(ctx, name: str, count: int, hidden: int) -> list | None:
    """P per direction as [3, H] constants (i, o, f), or three [1, H] arrays when P is computed."""
    if not name:
        return None
    value = ctx.const(name)
    if value is not None:
        return [v.reshape(3, hidden).astype(_F32) for v in value]
    rows = [name] if count == 1 else _split(ctx, name, 0, count)
    return [_split(ctx, row, 1, 3) for row in rows]


def _check_weights(ctx, shapes: dict, count: int, hidden: int, size: int, gates: int = 4) -> None:
    """The shapes the importer assumes, checked first: X [seq, batch, input] (or batch first), W
    [directions, gates * hidden, input], R [directions, gates * hidden, hidden], B [directions,
    2 * gates * hidden] (LSTM: 4 gates, GRU: 3, RNN: 1)."""
    expected = {"W": (count, gates * hidden, size), "R": (count, gates * hidden, hidden),
                "B": (count, 2 * gates * hidden)}
    if len(shapes["X"]) != 3:
        raise ctx.error(f"X has shape {list(shapes['X'])}; a recurrent layer takes a rank-3 input")
    for name in ("W", "R", "B"):
        if hidden < 1 or tuple(shapes[name]) != expected[name]:
            raise ctx.error(f"{name} has shape {list(shapes[name])}; with {count} direction(s), "
                            f"hidden_size {hidden} and input size {size} it must be "
                            f"{list(expected[name])}")


@dataclass
class _Lengths:
    """sequence_lens as the masked steps read it, shaped to broadcast against a state: [1, B, 1]
    time-major, [B, 1, 1] batch-first. `values` holds constant lengths, `tensor` names run-time
    ones (int32); `valid` caches each step's mask, which both directions read."""

    shape: tuple[int, ...]
    values: np.ndarray | None = None
    tensor: str = ""
    valid: dict = field(default_factory=dict)


def _lengths(ctx, name: str, axis: int, steps: int, state: tuple[int, ...]) -> _Lengths | None:
    """sequence_lens for the masked steps, or None when it is absent or a constant of full
    lengths (plain steps, and the fused LSTM kernel, serve). Constant lengths must lie in
    0..steps, as onnxruntime requires when it runs; run-time lengths are not checked: one past
    the sequence reads as a whole sequence, a negative one as an empty one."""
    if not name:
        return None
    batch = state[1 - axis]
    if tuple(ctx.shape(name)) != (batch,):
        raise ctx.error(f"sequence_lens has shape {list(ctx.shape(name))}; for a batch of {batch} "
                        f"it must be [{batch}]")
    shape = tuple(state[:2]) + (1,)
    value = ctx.const(name)
    if value is not None:
        if np.any((value < 0) | (value > steps)):
            raise ctx.error(f"sequence_lens {value.tolist()} outside 0..{steps}, the sequence length")
        return None if np.all(value == steps) else _Lengths(shape, value.reshape(shape))
    if ctx.dtype(name) != np.int32:
        name = _op(ctx, "CAST", [name], (batch,), {"in_data_type": ctx.dtype(name),
                                                  "out_data_type": np.dtype(np.int32)}, dtype=np.int32)
    shape_const = ctx.constant("shape", np.array(shape, np.int32))
    return _Lengths(shape, tensor=_op(ctx, "RESHAPE", [name, shape_const], shape, dtype=np.int32))


def _valid(ctx, lengths: _Lengths, t: int):
    """Where step t lies within its sequence (t < length): True or False when that holds for every
    batch entry alike (constant lengths), else a bool array (a constant, or LESS of the step
    index and the run-time lengths). At t = 0 it says which sequences are not empty."""
    if t not in lengths.valid:
        if lengths.values is not None:
            valid = t < lengths.values
            lengths.valid[t] = (bool(valid.flat[0]) if valid.all() or not valid.any()
                                else ctx.constant("valid", valid))
        else:
            step = ctx.constant("step", np.array(t, np.int32))
            lengths.valid[t] = _op(ctx, "LESS", [step, lengths.tensor], lengths.shape, dtype=np.bool_)
    return lengths.valid[t]


def _parse(node, ctx) -> _Spec:
    inputs = node.inputs + [""] * (8 - len(node.inputs))
    x, w_name, r_name, b_name, lens_name, h_name, c_name, p_name = inputs[:8]
    layout = node.attr("layout", 0)
    direction = node.attr("direction", "forward")
    if node.attr("input_forget", 0):
        raise ctx.error("input_forget=1 (coupled input and forget gates) is not supported")
    if direction not in ("forward", "reverse", "bidirectional"):
        raise ctx.error(f"direction {direction!r} is not supported")
    w = ctx.require_const(w_name, "W").astype(_F32)
    r = ctx.require_const(r_name, "R").astype(_F32)
    count = 2 if direction == "bidirectional" else 1
    hidden = node.attr("hidden_size", r.shape[-1] if r.ndim == 3 else 0)
    b = ctx.require_const(b_name, "B").astype(_F32) if b_name else np.zeros((count, 8 * hidden), _F32)
    _check_weights(ctx, {"X": ctx.shape(x), "W": w.shape, "R": r.shape, "B": b.shape}, count,
                   hidden, ctx.shape(x)[-1] if len(ctx.shape(x)) == 3 else -1)
    p = _peepholes(ctx, p_name, count, hidden)
    axis = 1 if layout else 0
    steps = ctx.shape(x)[axis]
    acts = _activations(node, ctx, _DEFAULT_ACTIVATIONS, count)
    batch = ctx.shape(x)[1 - axis]
    seq = (steps, batch, hidden) if axis == 0 else (batch, steps, hidden)
    state = (1, batch, hidden) if axis == 0 else (batch, 1, hidden)
    spec = _Spec(x, axis, seq, state, node.attr("clip"), [], node,
                 _lengths(ctx, lens_name, axis, steps, state))
    h0s = _initial_states(ctx, h_name, spec, count)
    c0s = _initial_states(ctx, c_name, spec, count)
    for d in range(count):
        spec.dirs.append(_Direction(
            w[d].reshape(4, hidden, -1), r[d].reshape(4, hidden, hidden),
            (b[d, :4 * hidden] + b[d, 4 * hidden:]).reshape(4, hidden),
            None if p is None else p[d], h0s[d], c0s[d],
            direction == "reverse" or d == 1, acts[d]))
    return spec


def _activations(node, ctx, defaults: list[str], count: int) -> list[list[_Activation]]:
    """The `activations` of each direction, with activation_alpha/activation_beta handed out in
    order to the functions that take them (onnxruntime's defaults once a list runs out). As in
    onnxruntime, the list must name every function of every direction."""
    names = list(node.attr("activations", defaults * count))
    unknown = [n for n in names if n not in _ACTIVATION_OPS and n not in _PARAMETERS]
    if unknown:
        raise ctx.error(f"activation {unknown[0]!r} is not an ONNX recurrent activation (Relu, Tanh, "
                        f"Sigmoid, {', '.join(_PARAMETERS)})")
    if len(names) != len(defaults) * count:
        raise ctx.error(f"activations {names} has {len(names)} functions; {node.op_type} with "
                        f"{count} direction(s) takes {len(defaults) * count}")
    alphas = [float(v) for v in node.attr("activation_alpha", None) or []]
    betas = [float(v) for v in node.attr("activation_beta", None) or []]
    acts = []
    for name in names:
        takes_alpha, takes_beta = _PARAMETERS.get(name, (False, False))
        alpha, beta = _DEFAULT_PARAMETERS.get(name, (0.0, 0.0))
        alpha = alphas.pop(0) if takes_alpha and alphas else alpha
        beta = betas.pop(0) if takes_beta and betas else beta
        acts.append(_Activation(name, alpha, beta))
    n = len(defaults)
    return [acts[n * d:n * d + n] for d in range(count)]


def _activate(ctx, spec: _Spec, act: _Activation, z: str) -> str:
    """act(z) as TFLite ops: Sigmoid, Tanh and Relu as one op; LeakyRelu, ThresholdedRelu,
    HardSigmoid, Elu, Softsign and Softplus by the importers of the ONNX ops of those names
    (the same functions; ThresholdedRelu gives 0 at z == alpha, as onnxruntime's recurrent ops
    do, where the spec's table says z); Affine as alpha * z + beta, ScaledTanh as
    alpha * TANH(beta * z)."""
    if act.name in _ACTIVATION_OPS:
        return _op(ctx, _ACTIVATION_OPS[act.name], [z], spec.state)
    scalar = (lambda value: ctx.constant("act", np.array(value, _F32)))
    if act.name == "Affine":
        return _op(ctx, "ADD", [_op(ctx, "MUL", [z, scalar(act.alpha)], spec.state), scalar(act.beta)],
                   spec.state)
    if act.name == "ScaledTanh":
        inner = _op(ctx, "TANH", [_op(ctx, "MUL", [z, scalar(act.beta)], spec.state)], spec.state)
        return _op(ctx, "MUL", [inner, scalar(act.alpha)], spec.state)
    takes_alpha, takes_beta = _PARAMETERS[act.name]
    attrs = ({"alpha": act.alpha} if takes_alpha else {}) | ({"beta": act.beta} if takes_beta else {})
    y = ctx.tensor(act.name.lower(), spec.state, _F32)
    call_importer(ctx, spec.node, act.name, [z], [y], **attrs)
    return y


# --- fused kernel ---------------------------------------------------------------------------------
def _state_variable(ctx, value, shape, hint: str) -> str:
    """A variable tensor that an op sets to `value` (constant or array) on every invocation."""
    var = ctx.tensor(hint, shape, _F32)
    ctx.model.arrays[var].is_variable = True
    if isinstance(value, str):
        ctx.add_op("ADD", [value, ctx.constant("zero", np.array(0, _F32))], [var])
        return var
    uniform = bool(np.all(value == value.flat[0]))
    fill = [ctx.constant("dims", np.array(shape, np.int32)),
            ctx.constant("value", np.array(value.flat[0] if uniform else 0, _F32))]
    if uniform:
        ctx.add_op("FILL", fill, [var])
    else:  # the FILL operand, not a constant, keeps the ADD from being folded into a buffer
        ctx.add_op("ADD", [ctx.constant(hint + "_init", value), _op(ctx, "FILL", fill, shape)], [var])
    return var


def _reverse(ctx, x: str, axis: int) -> str:
    return _op(ctx, "REVERSE_V2", [x, ctx.constant("axis", np.array([axis], np.int32))], ctx.shape(x))


def _fused(ctx, spec: _Spec, d: _Direction, index: int):
    """(sequence, last hidden state, None) of one direction through the fused kernel."""
    x = _reverse(ctx, spec.x, spec.axis) if d.reverse else spec.x
    weights = [ctx.constant(f"lstm_w{g}", d.w[g]) for g in _FUSED_GATES]
    weights += [ctx.constant(f"lstm_r{g}", d.r[g]) for g in _FUSED_GATES]
    peep = ["", "", ""] if d.p is None else [ctx.constant(f"lstm_p{g}", d.p[g]) for g in (0, 2, 1)]
    bias = [ctx.constant(f"lstm_b{g}", d.b[g]) for g in _FUSED_GATES]
    h_var = _state_variable(ctx, d.h0, spec.state, f"lstm{index}_h_state")
    c_var = _state_variable(ctx, d.c0, spec.state, f"lstm{index}_c_state")
    out = _op(ctx, "UNIDIRECTIONAL_SEQUENCE_LSTM",
              [x] + weights + peep + bias + ["", "", h_var, c_var] + [""] * 4, spec.seq,
              {"cell_clip": 0.0, "proj_clip": 0.0, "time_major": spec.axis == 0}, "TANH")
    begin = [0, 0, 0]
    begin[spec.axis] = spec.seq[spec.axis] - 1
    last = _op(ctx, "SLICE", [out, ctx.constant("begin", np.array(begin, np.int32)),
                              ctx.constant("size", np.array(spec.state, np.int32))], spec.state)
    return (_reverse(ctx, out, spec.axis) if d.reverse else out), last, None


# --- unrolled cell --------------------------------------------------------------------------------
def _gate(ctx, spec: _Spec, z: str, peephole, c: str | None, act: _Activation) -> str:
    """act(z + peephole * c), with ONNX's clip of the pre-activation."""
    if peephole is not None:
        if isinstance(peephole, np.ndarray):
            peephole = ctx.constant("peephole", peephole)
        z = _op(ctx, "ADD", [z, _op(ctx, "MUL", [c, peephole], spec.state)], spec.state)
    if spec.clip is not None:
        z = _op(ctx, "MINIMUM", [z, ctx.constant("clip", np.array(spec.clip, _F32))], spec.state)
        z = _op(ctx, "MAXIMUM", [z, ctx.constant("clip", np.array(-spec.clip, _F32))], spec.state)
    return _activate(ctx, spec, act, z)


def _run_steps(ctx, spec: _Spec, initial: list, reverse: bool, step) -> tuple[str, list[str]]:
    """(sequence, final states) of one direction, the steps in order (last to first when
    `reverse`); step(t, states) emits step t and gives the states after it, the first of them
    the hidden state, which is the step's output.

    With sequence_lens (spec.lengths) each step is masked where t >= length: SELECT_V2 keeps the
    previous states and writes 0 to the output, so a forward direction's final states are those
    after step length - 1 and a reverse direction's steps start at length - 1 from the initial
    states, as ONNX's reversal within each sequence's length has it (no REVERSE_SEQUENCE needed:
    the reversed steps hold the initial states through the padding). A step no sequence reaches
    (constant lengths) is not emitted. An empty sequence's final states are 0, as onnxruntime
    gives them, where the masked steps would leave the initial states (_emptied)."""
    steps = spec.seq[spec.axis]
    states = [ctx.constant("rnn_state", s) if isinstance(s, np.ndarray) else s for s in initial]
    zero = ctx.constant("zero", np.array(0, _F32))
    outputs = [""] * steps
    for t in (reversed(range(steps)) if reverse else range(steps)):
        valid = True if spec.lengths is None else _valid(ctx, spec.lengths, t)
        if valid is False:
            outputs[t] = ctx.constant("padding", np.zeros(spec.state, _F32))
            continue
        new = step(t, states)
        if valid is True:
            states, outputs[t] = new, new[0]
            continue
        states = [_op(ctx, "SELECT_V2", [valid, n, s], spec.state) for n, s in zip(new, states)]
        outputs[t] = _op(ctx, "SELECT_V2", [valid, new[0], zero], spec.state)
    final = _emptied(ctx, spec, initial, states, zero)
    if steps == 1:
        return outputs[0], final
    return _op(ctx, "CONCATENATION", outputs, spec.seq, {"axis": spec.axis}), final


def _emptied(ctx, spec: _Spec, initial: list, states: list[str], zero: str) -> list[str]:
    """The final states with 0 where a sequence is empty (length 0): SELECT_V2 on step 0's mask,
    only where the initial state may be nonzero."""
    nonempty = True if spec.lengths is None else _valid(ctx, spec.lengths, 0)
    if nonempty is True:
        return states
    return [s if isinstance(s0, np.ndarray) and not s0.any()
            else ctx.constant("rnn_state", np.zeros(spec.state, _F32)) if nonempty is False
            else _op(ctx, "SELECT_V2", [nonempty, s, zero], spec.state)
            for s0, s in zip(initial, states)]


def _unrolled(ctx, spec: _Spec, d: _Direction, index: int):
    """(sequence, last hidden state, last cell state) of one direction, one step at a time."""
    steps, hidden = spec.seq[spec.axis], spec.state[2]
    xw = _op(ctx, "FULLY_CONNECTED", [spec.x, ctx.constant("lstm_w", d.w.reshape(4 * hidden, -1)),
                                      ctx.constant("lstm_b", d.b.reshape(-1))],
             spec.seq[:2] + (4 * hidden,), {"keep_num_dims": True})
    step_shape = spec.state[:2] + (4 * hidden,)
    pieces = [xw] if steps == 1 else _split(ctx, xw, spec.axis, steps)
    recurrent = ctx.constant("lstm_r", d.r.reshape(4 * hidden, hidden))
    peep = [None] * 3 if d.p is None else list(d.p)
    f_act, g_act, h_act = d.acts

    def step(t, states):
        h, c = states
        rh = _op(ctx, "FULLY_CONNECTED", [h, recurrent, ""], step_shape, {"keep_num_dims": True})
        z = _split(ctx, _op(ctx, "ADD", [pieces[t], rh], step_shape), 2, 4)
        i = _gate(ctx, spec, z[0], peep[0], c, f_act)
        f = _gate(ctx, spec, z[2], peep[2], c, f_act)
        g = _gate(ctx, spec, z[3], None, None, g_act)
        c = _op(ctx, "ADD", [_op(ctx, "MUL", [f, c], spec.state),
                             _op(ctx, "MUL", [i, g], spec.state)], spec.state)
        o = _gate(ctx, spec, z[1], peep[1], c, f_act)
        return [_op(ctx, "MUL", [o, _activate(ctx, spec, h_act, c)], spec.state), c]

    sequence, (h, c) = _run_steps(ctx, spec, [d.h0, d.c0], d.reverse, step)
    return sequence, h, c


# --- importer -------------------------------------------------------------------------------------
def _join(ctx, parts: list[str], y: str, axis: int) -> None:
    """Writes `y` as the parts reshaped to y's rank (one direction) or concatenated on `axis`."""
    if len(parts) == 1:
        ctx.add_op("RESHAPE", [parts[0], ctx.constant("shape", np.array(ctx.shape(y), np.int32))], [y])
        return
    shape = list(ctx.shape(y))
    shape[axis] = 1
    shape_const = ctx.constant("shape", np.array(shape, np.int32))
    ctx.add_op("CONCATENATION", [_op(ctx, "RESHAPE", [p, shape_const], shape) for p in parts], [y],
               {"axis": axis})


@onnx_op("LSTM")
def import_lstm(node, ctx):
    spec = _parse(node, ctx)
    outputs = node.outputs + [""] * (3 - len(node.outputs))
    y, y_h, y_c = outputs[:3]
    fused = (spec.lengths is None and spec.clip is None and not ctx.is_used(y_c) and all(
        [a.name for a in d.acts] == _DEFAULT_ACTIVATIONS and not isinstance(d.p, list)
        for d in spec.dirs))
    build = _fused if fused else _unrolled
    results = [build(ctx, spec, d, i) for i, d in enumerate(spec.dirs)]
    if y:
        _join(ctx, [r[0] for r in results], y, 1 + spec.axis)
    if y_h:
        _join(ctx, [r[1] for r in results], y_h, spec.axis)
    if y_c and not fused:
        _join(ctx, [r[2] for r in results], y_c, spec.axis)


# --- GRU and RNN: unrolled cells ------------------------------------------------------------------
# TFLite has no GRU kernel; its UNIDIRECTIONAL_SEQUENCE_RNN would need the state variables the
# LSTM's fused path keeps, for one op per step saved: both are unrolled like the LSTM's fallback.
# One FULLY_CONNECTED projects every step's input at once (with the biases that add outside the
# reset gate), then per step a FULLY_CONNECTED of the previous state and elementwise ops.
_GRU_ACTIVATIONS = ["Sigmoid", "Tanh"]
_RNN_ACTIVATIONS = ["Tanh"]


@dataclass
class _Cell:
    """One direction of a GRU (gates z, r, h) or an RNN (one gate)."""

    w: np.ndarray  # [gates, H, I]
    r: np.ndarray  # [gates, H, H]
    wb: np.ndarray  # [gates, H]
    rb: np.ndarray  # [gates, H]
    h0: np.ndarray | str
    reverse: bool
    acts: list[_Activation]


def _parse_cell(node, ctx, gates: int, default_acts: list[str]) -> tuple[_Spec, list[_Cell]]:
    inputs = node.inputs + [""] * (6 - len(node.inputs))
    x, w_name, r_name, b_name, lens_name, h_name = inputs[:6]
    direction = node.attr("direction", "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        raise ctx.error(f"direction {direction!r} is not supported")
    count = 2 if direction == "bidirectional" else 1
    w = ctx.require_const(w_name, "W").astype(_F32)
    r = ctx.require_const(r_name, "R").astype(_F32)
    hidden = node.attr("hidden_size", r.shape[-1] if r.ndim == 3 else 0)
    b = (ctx.require_const(b_name, "B").astype(_F32) if b_name
         else np.zeros((count, 2 * gates * hidden), _F32))
    size = ctx.shape(x)[-1] if len(ctx.shape(x)) == 3 else -1
    _check_weights(ctx, {"X": ctx.shape(x), "W": w.shape, "R": r.shape, "B": b.shape}, count,
                   hidden, size, gates)
    axis = 1 if node.attr("layout", 0) else 0
    steps, batch = ctx.shape(x)[axis], ctx.shape(x)[1 - axis]
    acts = _activations(node, ctx, default_acts, count)
    seq = (steps, batch, hidden) if axis == 0 else (batch, steps, hidden)
    state = (1, batch, hidden) if axis == 0 else (batch, 1, hidden)
    spec = _Spec(x, axis, seq, state, node.attr("clip"), [], node,
                 _lengths(ctx, lens_name, axis, steps, state))
    cells = [_Cell(w[d].reshape(gates, hidden, -1), r[d].reshape(gates, hidden, hidden),
                   b[d, :gates * hidden].reshape(gates, hidden), b[d, gates * hidden:].reshape(gates, hidden),
                   h0, direction == "reverse" or d == 1, acts[d])
             for d, h0 in enumerate(_initial_states(ctx, h_name, spec, count))]
    return spec, cells


def _projected_steps(ctx, spec: _Spec, w: np.ndarray, bias: np.ndarray) -> list[str]:
    """x @ w.T + bias for every step at once, split into the steps."""
    width = w.shape[0]
    xw = _op(ctx, "FULLY_CONNECTED", [spec.x, ctx.constant("rnn_w", w), ctx.constant("rnn_b", bias)],
             spec.seq[:2] + (width,), {"keep_num_dims": True})
    steps = spec.seq[spec.axis]
    return [xw] if steps == 1 else _split(ctx, xw, spec.axis, steps)


def _recurrent(ctx, spec: _Spec, h: str, r: np.ndarray, bias: np.ndarray | None) -> str:
    """h @ r.T (+ bias) for one step."""
    inputs = [h, ctx.constant("rnn_r", r), "" if bias is None else ctx.constant("rnn_rb", bias)]
    return _op(ctx, "FULLY_CONNECTED", inputs, spec.state[:2] + (r.shape[0],), {"keep_num_dims": True})


def _run_cell(ctx, spec: _Spec, cell: _Cell, step) -> tuple[str, str]:
    """(sequence, last state) of one GRU or RNN direction; step(t, h) gives the state after t."""
    sequence, (h,) = _run_steps(ctx, spec, [cell.h0], cell.reverse, lambda t, states: [step(t, states[0])])
    return sequence, h


def _gru_direction(ctx, spec: _Spec, cell: _Cell, linear_before_reset: bool) -> tuple[str, str]:
    """ONNX's GRU (gates z, r, h): z = f(x Wz + h Rz + b), r = f(x Wr + h Rr + b),
    h~ = g(x Wh + (r * h) Rh + Rbh + Wbh), or g(x Wh + r * (h Rh + Rbh) + Wbh) with
    linear_before_reset; h' = h~ + z * (h - h~)."""
    hidden = spec.state[2]
    f, g = cell.acts
    in_bias = cell.wb + cell.rb
    if linear_before_reset:
        in_bias[2] = cell.wb[2]
    pieces = _projected_steps(ctx, spec, cell.w.reshape(3 * hidden, -1), in_bias.reshape(-1))

    def step(t, h):
        x_z, x_r, x_h = _split(ctx, pieces[t], 2, 3)
        if linear_before_reset:
            rec_bias = np.concatenate([np.zeros(2 * hidden, _F32), cell.rb[2]])
            h_z, h_r, h_h = _split(ctx, _recurrent(ctx, spec, h, cell.r.reshape(3 * hidden, hidden),
                                                   rec_bias), 2, 3)
            z = _gate(ctx, spec, _op(ctx, "ADD", [x_z, h_z], spec.state), None, None, f)
            r = _gate(ctx, spec, _op(ctx, "ADD", [x_r, h_r], spec.state), None, None, f)
            candidate = _op(ctx, "ADD", [x_h, _op(ctx, "MUL", [r, h_h], spec.state)], spec.state)
        else:
            h_z, h_r = _split(ctx, _recurrent(ctx, spec, h, cell.r[:2].reshape(2 * hidden, hidden),
                                              None), 2, 2)
            z = _gate(ctx, spec, _op(ctx, "ADD", [x_z, h_z], spec.state), None, None, f)
            r = _gate(ctx, spec, _op(ctx, "ADD", [x_r, h_r], spec.state), None, None, f)
            reset = _op(ctx, "MUL", [r, h], spec.state)
            candidate = _op(ctx, "ADD", [x_h, _recurrent(ctx, spec, reset, cell.r[2], None)], spec.state)
        h_new = _gate(ctx, spec, candidate, None, None, g)
        keep = _op(ctx, "MUL", [z, _op(ctx, "SUB", [h, h_new], spec.state)], spec.state)
        return _op(ctx, "ADD", [h_new, keep], spec.state)

    return _run_cell(ctx, spec, cell, step)


def _rnn_direction(ctx, spec: _Spec, cell: _Cell) -> tuple[str, str]:
    """ONNX's RNN: h' = f(x Wi + h Ri + Wbi + Rbi)."""
    hidden = spec.state[2]
    pieces = _projected_steps(ctx, spec, cell.w.reshape(hidden, -1), (cell.wb + cell.rb).reshape(-1))

    def step(t, h):
        z = _op(ctx, "ADD", [pieces[t], _recurrent(ctx, spec, h, cell.r[0], None)], spec.state)
        return _gate(ctx, spec, z, None, None, cell.acts[0])

    return _run_cell(ctx, spec, cell, step)


def _import_cells(node, ctx, results) -> None:
    y, y_h = (node.outputs + ["", ""])[:2]
    axis = 0 if not node.attr("layout", 0) else 1
    if y:
        _join(ctx, [r[0] for r in results], y, 1 + axis)
    if y_h:
        _join(ctx, [r[1] for r in results], y_h, axis)


@onnx_op("GRU")
def import_gru(node, ctx):
    spec, cells = _parse_cell(node, ctx, 3, _GRU_ACTIVATIONS)
    lbr = bool(node.attr("linear_before_reset", 0))
    _import_cells(node, ctx, [_gru_direction(ctx, spec, cell, lbr) for cell in cells])


@onnx_op("RNN")
def import_rnn(node, ctx):
    spec, cells = _parse_cell(node, ctx, 1, _RNN_ACTIVATIONS)
    _import_cells(node, ctx, [_rnn_direction(ctx, spec, cell) for cell in cells])
