"""The selection a value-sized output is judged by, while the plan measures its candidates.

A detector's kept boxes (NonMaxSuppression, NonZero, Compress, a TopK of a computed k, and what
reads them) have as many rows as the values decide. When a candidate's int8 keeps one box more
or less than float on one sample, its rows cannot be compared entry by entry and the output reads
as -inf dB: no candidate holds, whatever its error. What decides the rows can be compared: the
tensors the selection reads (NMS's boxes and scores: sensitivity.value_sized_selection). So while
the plan runs, every candidate writes those tensors as extra outputs, onnxruntime fetches them
too, and each candidate is judged by them and by the other outputs, not by the value-sized ones.
The written file has the model's own outputs only; its check compares them as always.

A selection tensor is exposed where the float IR holds it under its ONNX name with the ONNX shape
(not a layout rewrite's NHWC copy, not a constant), else the first tensor before it, through ops
that only move values (an Identity the float pipeline removed, a Transpose it folded), that the IR
holds so; where none is, nothing changes.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from ..ir import Model
from .sensitivity import PASSING, value_sized_selection


@dataclass(frozen=True)
class Exposure:
    """`tensors` written as extra outputs of every candidate; `sized` the model's outputs whose
    shape the values decide, left out of the candidates' judgement."""

    sized: frozenset[str]
    tensors: tuple[str, ...]


@contextlib.contextmanager
def exposed_selection(proto: onnx.ModelProto, model: Model, sample: dict):
    """An Exposure (None when there is nothing to expose), with `proto`'s graph outputs holding
    its tensors while the block runs (restored after: the proto is the conversion's reference).
    `sample` is one of the plan's inputs, at the size `model` was converted at."""
    from ..check.runtimes import Reference

    sized, selection = value_sized_selection(proto.graph)
    producer = {o: node for node in proto.graph.node for o in node.output}
    chains = [_held(t, producer, model) for t in selection]
    fetched = list(dict.fromkeys(t for chain in chains for t in chain))
    values = Reference(proto, fetched).run(sample) if fetched else {}
    found = (next((t for t in chain if np.shape(values[t]) == tuple(model.arrays[t].shape)), None)
             for chain in chains)
    tensors = tuple(dict.fromkeys(t for t in found if t))
    if not tensors:
        yield None
        return
    kept = len(proto.graph.output)
    proto.graph.output.extend(
        helper.make_tensor_value_info(t, helper.np_dtype_to_tensor_dtype(np.asarray(values[t]).dtype), None)
        for t in tensors)
    try:
        yield Exposure(frozenset(sized), tensors)
    finally:
        del proto.graph.output[kept:]


def _held(name: str, producer: dict, model: Model) -> list[str]:
    """`name` and the tensors it is moved from (sensitivity.PASSING ops), those the IR computes."""
    chain, node = [name], producer.get(name)
    while node is not None and node.op_type in PASSING:
        chain.append(node.input[0])
        node = producer.get(node.input[0])
    return [t for t in chain if model.producer(t) is not None and not model.arrays[t].is_constant]
