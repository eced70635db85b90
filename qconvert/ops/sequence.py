"""ReverseSequence: REVERSE_V2 along the time axis when every sequence is whole (the lengths a
constant equal to the time axis' size: what a Keras bidirectional layer exported by tf2onnx
writes), else REVERSE_SEQUENCE, which reads the lengths as a tensor.

REVERSE_V2 is the common case's better form: XNNPACK and the int8 kernels take it (a same-scale
op), REVERSE_SEQUENCE runs float in the interpreter.
"""

from __future__ import annotations

import numpy as np

from .registry import onnx_op, tflite_op

tflite_op("REVERSE_SEQUENCE", options="ReverseSequenceOptions", version=lambda op, model: 1,
          evaluate=lambda inputs, op: [_reverse_sequence(inputs[0], inputs[1], op.options["seq_dim"],
                                                         op.options["batch_dim"])])


def _reverse_sequence(x: np.ndarray, lengths: np.ndarray, time: int, batch: int) -> np.ndarray:
    """numpy's ReverseSequence: for each batch entry b, the first lengths[b] steps reversed."""
    out = np.array(x, copy=True)
    for b, length in enumerate(np.asarray(lengths).reshape(-1).tolist()):
        index = [slice(None)] * x.ndim
        index[batch] = b
        index[time] = slice(0, int(length))
        part = out[tuple(index)]
        out[tuple(index)] = np.flip(part, axis=time - (1 if batch < time else 0))
    return out


@onnx_op("ReverseSequence")
def import_reverse_sequence(node, ctx):
    x, lengths_name = node.inputs[:2]
    y = node.outputs[0]
    rank = ctx.rank(x)
    time, batch = node.attr("time_axis", 0), node.attr("batch_axis", 1)
    if rank < 2 or {time, batch} != {0, 1}:
        raise ctx.error(f"time_axis {time} and batch_axis {batch} of a rank-{rank} input: ONNX "
                        "takes 0 and 1 (in either order) of an input of rank 2 or more")
    shape = ctx.shape(x)
    if tuple(ctx.shape(lengths_name)) != (shape[batch],):
        raise ctx.error(f"sequence_lens of shape {list(ctx.shape(lengths_name))} for a batch of "
                        f"{shape[batch]}")
    lengths = ctx.const(lengths_name)
    if lengths is not None and np.any((lengths < 0) | (lengths > shape[time])):
        raise ctx.error(f"sequence_lens {lengths.tolist()} outside 0..{shape[time]}, the time axis")
    if lengths is not None and np.all(lengths == shape[time]):
        ctx.add_op("REVERSE_V2", [x, ctx.constant("axis", np.array([time], np.int32))], [y])
        return
    lengths_i32 = lengths_name
    if ctx.dtype(lengths_name) != np.int32:
        lengths_i32 = ctx.tensor(lengths_name + "_int32", shape[batch:batch + 1], np.int32)
        ctx.add_op("CAST", [lengths_name], [lengths_i32],
                   {"in_data_type": ctx.dtype(lengths_name), "out_data_type": np.dtype(np.int32)})
    ctx.add_op("REVERSE_SEQUENCE", [x, lengths_i32], [y], {"seq_dim": time, "batch_dim": batch})
