"""Load-time folding (the loader's _Graph, onnx/loader.py, takes these methods): every node
whose inputs are known is evaluated, numpy where onnx's reference evaluator is wrong or slow
(fold.py); Shape and Size of static tensors too. A value whose shape the values decide
(run_time_shaped: a NonZero's count, what it flows into, or the shape arithmetic behind a
constant dynamic_dims.py could not follow) is never folded: its Shape is computed when the model
runs, and its value at the loader's sizes (_at_sizes) only types what reads it. Each fold is
sized against errors.FOLDED_BYTES before it is computed.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Collection

import numpy as np
import onnx
from onnx import helper

from . import control_flow, fold, node_types
from ..errors import FOLDED_BYTES, ConversionError
from ..ops.refused import RANDOM_OPS
from .graph import GraphIndex

NOT_FOLDABLE = {*RANDOM_OPS, *control_flow.CONTROL_OPS}


class Folding:
    """The folding pass of the loader's _Graph (its constants, shapes, dtypes, nodes, names,
    run_time_shaped, at_sizes, folded: see _Graph.__init__)."""

    def fold_constants(self, guess: bool = False) -> bool:
        """Evaluates every node whose inputs are all known; Shape/Size of static tensors too. A
        node it cannot evaluate gets the types of its outputs that inference left unknown from
        its own inference (node_types), so that what follows it folds in this same pass. A size
        that a node reading a run-time shape cannot tell (a ConstantOfShape of a shape computed
        from one) is taken as one the values decide only when `guess`: loader._settle guesses
        once nothing else is found, as the shape may yet be known at the loader's sizes (a Shape
        of a RoiAlign typed later); the outputs left are in `deferred`. Returns whether anything
        was folded or typed."""
        kept, folded = [], False
        self.deferred: set[str] = set()  # outputs a guess would type
        for node in self.nodes:
            value = self._evaluate(node)
            if value is None:
                kept.append(node)
                varying = self.reads_run_time_shaped(node) or any(o in self.run_time_shaped for o in node.output)
                known = self.constants
                if varying:
                    self._at_sizes(node)
                    known = {**self.constants, **self.at_sizes}
                    for name in node.output:  # typed by their values at these sizes
                        if name in self.at_sizes and name not in self.shapes:
                            self.shapes[name] = self.at_sizes[name].shape
                            self.dtypes.setdefault(name, self.at_sizes[name].dtype)
                typed = set(self.shapes)
                folded |= node_types.infer_node(node, self.shapes, self.dtypes, known, self.opsets,
                                                self._run_time_size if self.sizes_at_run_time() else None,
                                                varying=varying, guess=guess, deferred=self.deferred)
                if varying:
                    self.run_time_shaped.update(o for o in node.output if o)
                    self.guessed.update(o for o in node.output if o in self.shapes and o not in typed)
                continue
            for name, v in zip(node.output, value):
                v = np.asarray(v)
                inferred = self.dtypes.get(name)
                if inferred is not None and v.dtype != inferred and v.dtype.kind in "fiub":
                    v = v.astype(inferred)  # the evaluator's numpy promotion, not ONNX's type
                self.constants[name] = v
                self.shapes[name] = self.constants[name].shape
                self.dtypes[name] = self.constants[name].dtype
            folded = True
        self.nodes = kept
        return folded

    def _at_sizes(self, node: onnx.NodeProto) -> None:
        """The values of `node`'s outputs at the sizes the loader set, when it computes shapes the
        values decide from such values and constants (a Shape, then Gather, Concat, Min): never
        folded (the graph computes them when it runs), they give the ops that read them their
        static shapes here, as a folded shape would (a Reshape to [count, 4])."""
        if node.op_type in ("Shape", "Size"):
            if node.input[0] not in self.shapes:
                return
            shape = np.array(self.shapes[node.input[0]], dtype=np.int64)
            attrs = {a.name: a.i for a in node.attribute}
            start, end = attrs.get("start", 0), attrs.get("end", len(shape))
            value = np.array(np.prod(shape), np.int64) if node.op_type == "Size" else shape[start:end]
            self.at_sizes[node.output[0]] = value
            return
        known = {**self.constants, **self.at_sizes}
        if (node.op_type in NOT_FOLDABLE or node.domain not in ("", "ai.onnx") or not node.output
                or any(n and n not in known for n in node.input)
                or any(np.size(known[n]) > _AT_SIZES_LIMIT for n in node.input if n)):
            return
        feeds = {n: known[n] for n in node.input if n}
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            try:
                results = self._evaluated(node, feeds, f"node {self.names[id(node)]!r} ({node.op_type})")
            except ConversionError:
                return  # typed as a size the values decide instead
        for name, value in zip([o for o in node.output if o], results):
            self.at_sizes[name] = np.asarray(value)

    def reads_run_time_shaped(self, node: onnx.NodeProto) -> bool:
        """Whether `node` reads a value whose shape the values decide, directly or (control
        flow) from inside its subgraphs."""
        shaped = self.run_time_shaped
        return bool(shaped) and (any(n in shaped for n in node.input)
                                 or any(n in shaped for n in control_flow.outer_reads([node])))

    def _evaluate(self, node: onnx.NodeProto) -> list[np.ndarray] | None:
        if node.op_type in NOT_FOLDABLE or node.domain not in ("", "ai.onnx"):
            return None
        if node.op_type in ("Shape", "Size") and (node.input[0] in self.run_time_shaped
                                                  or node.output[0] in self.run_time_shaped):
            return None  # computed when the model runs (folded.py's SHAPE)
        if node.op_type in ("Shape", "Size") and node.input[0] in self.shapes:
            shape = np.array(self.shapes[node.input[0]], dtype=np.int64)
            if node.op_type == "Size":
                return [np.array(np.prod(shape), dtype=np.int64)]
            attrs = {a.name: a.i for a in node.attribute}
            rank = len(shape)
            start, end = attrs.get("start", 0), attrs.get("end", rank)
            return [shape[start:end]]
        if not node.output or any(n and n not in self.constants for n in node.input):
            return None
        if not any(node.input) and node.op_type not in ("Constant", "ConstantOfShape", "Range", "EyeLike"):
            return None
        feeds = {n: self.constants[n] for n in node.input if n}
        key = _fold_key(node, feeds)
        if key is not None and key in self.folded:
            return [v.copy() for v in self.folded[key]]
        where = f"node {self.names[id(node)]!r} ({node.op_type})"
        for size in _fold_sizes(node, [self.constants.get(n) for n in node.input], self.shapes,
                                self.dtypes):
            FOLDED_BYTES.check(size, where)
        # Values the float model computes too (log of 0 in T5's position buckets: -inf, then a
        # cast of it) are the model's, not an error: numpy's warnings about them stay quiet.
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            results = self._evaluated(node, feeds, where)
        for name, value in zip([o for o in node.output if o], results):
            # in the output's dtype (float16 is evaluated in float32, then rounded back)
            dtype = self.dtypes.get(name) or np.asarray(value).dtype
            FOLDED_BYTES.check(np.size(value) * np.dtype(dtype).itemsize, where)
        if key is not None and sum(np.size(v) for v in results) <= node_types.DATA_LIMIT:
            self.folded[key] = [np.array(v) for v in results]
        return results

    def _evaluated(self, node, feeds: dict, where: str) -> list:
        """The node's outputs from its constant inputs: numpy where onnx's reference evaluator is
        wrong or slow (qconvert/onnx/fold.py), else the evaluator, which must see the model's
        opset (ops changed meaning across opsets)."""
        try:
            results = fold.fold(node, [feeds[n] if n else None for n in node.input])
            if results is None:
                # float16 computes in float32, rounded to float16 after the node (fold_constants
                # takes ONNX's type), as onnxruntime's CPU kernels and the .tflite compute it.
                feeds = {n: v.astype(np.float32) if v.dtype == np.float16 else v for n, v in feeds.items()}
                inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype),
                                                        v.shape) for n, v in feeds.items()]
                g = helper.make_graph([node], "fold", inputs,
                                      [helper.make_tensor_value_info(o, 0, None) for o in node.output if o])
                m = helper.make_model(g, opset_imports=list(self.proto.opset_import),
                                      ir_version=self.proto.ir_version)
                from onnx.reference import ReferenceEvaluator
                results = ReferenceEvaluator(m).run(None, feeds)
        except MemoryError:
            raise ConversionError(
                f"{where}: folding its constant inputs needs more memory than this process may "
                f"allocate (each folded constant may take up to {FOLDED_BYTES.value():,} bytes: "
                f"lower {FOLDED_BYTES.variable} to refuse such a fold before it is computed)") from None
        except Exception as e:  # numpy and the evaluator raise anything; the node is at fault
            raise ConversionError(
                f"{where}: cannot evaluate its constant inputs: "
                f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
        return results


# The largest input (in elements) _Graph._at_sizes evaluates a node from: a causal mask of 1024
# positions squared; beyond, the node is typed by inference alone.
_AT_SIZES_LIMIT = 1 << 20


def shapes_behind(names: Collection[str], index: GraphIndex) -> set[str]:
    """The outputs of the Shape and Size nodes that the values `names` are computed from (of
    tensors that are not initializers), through every node between."""
    found, seen, todo = set(), set(), [n for n in names if n in index.producers]
    while todo:
        name = todo.pop()
        node = index.producers.get(name)
        if node is None or name in seen:
            continue
        seen.add(name)
        if node.op_type in ("Shape", "Size"):
            found.add(node.output[0])
            continue
        todo.extend(n for n in node.input if n)
    return found


def _fold_key(node: onnx.NodeProto, feeds: dict) -> tuple | None:
    """What a folded node's value is a function of, when its inputs are small (a shape
    computation): the op, its attributes, which outputs it has, and its inputs' values. Exporters
    repeat the same shape arithmetic in every layer of a model; each distinct one is computed
    once (kept when its values are small too). None for a node reading bigger constants (a
    weight), computed each time."""
    if sum(v.size for v in feeds.values()) > node_types.DATA_LIMIT:
        return None
    return (node.op_type, tuple(a.SerializeToString() for a in node.attribute),
            tuple(bool(o) for o in node.output),
            tuple((bool(n), n and feeds[n].dtype.str, n and feeds[n].shape, n and feeds[n].tobytes())
                  for n in node.input))


def _fold_sizes(node: onnx.NodeProto, inputs: list, shapes: dict, dtypes: dict) -> list[int]:
    """The bytes of each output folding `node` will produce, in the output's own dtype, known
    before computing it (so that a ConstantOfShape or an Expand to gigabytes ends in
    errors.FOLDED_BYTES' error, not in the machine's memory running out): the shape from shape
    inference, else from the inputs of the ops whose output size is a function of their values
    (_computed_elements); the dtype from inference, else the op's (_fold_dtype). Outputs whose
    size is not known beforehand are left out (their value is checked once computed)."""
    sizes = []
    for k, name in enumerate(node.output):
        if not name:
            continue
        elements = math.prod(shapes[name]) if name in shapes else (
            _computed_elements(node, inputs) if k == 0 else None)
        if elements is not None:
            dtype = dtypes.get(name) or _fold_dtype(node, inputs)
            sizes.append(elements * np.dtype(dtype).itemsize)
    return sizes


def _fold_dtype(node: onnx.NodeProto, inputs: list) -> np.dtype:
    """The dtype of the first output of `node` by its op, when inference has not typed it."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    try:
        if node.op_type == "ConstantOfShape":
            value = attrs.get("value")
            return np.dtype(np.float32) if value is None else _np_dtype(value.data_type)
        if node.op_type in ("EyeLike", "Cast") and ("dtype" in attrs or "to" in attrs):
            return _np_dtype(attrs.get("dtype", attrs.get("to")))
    except ConversionError:
        pass  # a type numpy has not: the evaluator says so
    if node.op_type == "OneHot" and len(inputs) == 3 and inputs[2] is not None:
        return inputs[2].dtype
    known = [v for v in inputs if v is not None]
    return known[0].dtype if known else np.dtype(np.float32)


def _computed_elements(node: onnx.NodeProto, inputs: list) -> int | None:
    """How many elements the first output of `node` has, from its constant inputs, for the ops
    that make a big constant from small ones; None when not known beforehand."""
    op, given = node.op_type, [v for v in inputs if v is not None]
    try:
        if op == "ConstantOfShape" and inputs and inputs[0] is not None:
            return math.prod(int(d) for d in np.ravel(inputs[0]))
        if op == "Expand" and len(given) == 2:
            shape = [int(d) for d in np.ravel(inputs[1])]
            return math.prod(np.broadcast_shapes(inputs[0].shape, tuple(shape)))
        if op == "Tile" and len(given) == 2:
            repeats = [int(r) for r in np.ravel(inputs[1])]
            return math.prod(d * r for d, r in zip(inputs[0].shape, repeats))
        if op == "Range" and len(given) == 3:
            start, limit, delta = (float(np.ravel(v)[0]) for v in inputs)
            return max(math.ceil((limit - start) / delta), 0)
        if op == "EyeLike" and given:
            return math.prod(given[0].shape)
        if op == "OneHot" and len(given) == 3:
            return math.prod(inputs[0].shape) * int(np.ravel(inputs[1])[0])
        if op == "Concat" and given:
            return sum(v.size for v in given)
        if op in ("Resize", "Upsample", "Pad") and given:
            return _resized_elements(node, inputs)
    except (ValueError, TypeError, IndexError, ZeroDivisionError, OverflowError):
        return None  # malformed inputs: the reference evaluator says what is wrong
    return None


def _resized_elements(node: onnx.NodeProto, inputs: list) -> int | None:
    """The output size of a Resize/Upsample (by its sizes or scales) or a Pad (by its pads) of a
    constant, for the input's every axis (an `axes` attribute leaves it unknown: None)."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    dims = inputs[0].shape
    if "axes" in attrs:
        return None
    if node.op_type == "Pad":
        pads = attrs.get("pads") if len(inputs) < 2 or inputs[1] is None else np.ravel(inputs[1])
        if pads is None or len(pads) != 2 * len(dims):
            return None
        return math.prod(max(d + int(pads[k]) + int(pads[k + len(dims)]), 0) for k, d in enumerate(dims))
    sizes = inputs[3] if len(inputs) > 3 and inputs[3] is not None and inputs[3].size else None
    if sizes is not None:
        return math.prod(int(d) for d in np.ravel(sizes))
    scales = attrs.get("scales") if node.op_type == "Upsample" and len(inputs) < 2 else None
    for k in (2, 1):  # Resize's scales are input 2 (input 1 before opset 11), Upsample's input 1
        if scales is None and len(inputs) > k and inputs[k] is not None and inputs[k].size == len(dims):
            scales = np.ravel(inputs[k])
    if scales is None or len(scales) != len(dims):
        return None
    return math.prod(math.floor(d * float(s)) for d, s in zip(dims, scales))
