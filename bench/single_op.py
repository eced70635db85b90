"""Single-op .tflite files and their timing in LiteRT, for bench/target_profile.py.

single_op() copies one op of a written file into a file of its own: the flatbuffer's operator
table (options included), its tensors with their quantization, its constant buffers (16-byte
aligned, as qconvert's writer aligns them) and the values its inputs took when the whole model ran.
timed_ops() times such files in alternating rounds beside two reference ops that do no work, one
that XNNPACK takes (a float ADD of one element) and one it leaves to the interpreter (an int32 ADD
of one): the op's time is its median less the median of the reference that runs where it runs,
i.e. without the interpreter's and the Python call's fixed cost. chain() and one_op() make the
models partition_ns is measured with.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass

import flatbuffers
import numpy as np

from qconvert.tflite import schema_generated as S

ALIGNMENT = 16  # constant data in a single-op file, as qconvert's writer aligns it
CHAIN = 9  # ops in partition_ns's chains
NUMPY = {S.TensorType.FLOAT32: np.float32, S.TensorType.FLOAT16: np.float16,
         S.TensorType.INT32: np.int32, S.TensorType.UINT8: np.uint8, S.TensorType.INT64: np.int64,
         S.TensorType.BOOL: np.bool_, S.TensorType.INT16: np.int16, S.TensorType.INT8: np.int8,
         S.TensorType.FLOAT64: np.float64, S.TensorType.UINT32: np.uint32,
         S.TensorType.UINT16: np.uint16, S.TensorType.UINT64: np.uint64}


# --- single-op files -----------------------------------------------------------------------------
class _AlignedBuffer(S.BufferT):
    """A Buffer whose data is ALIGNMENT-aligned in the file (the generated Pack aligns bytes to 1)."""

    def __init__(self, raw: bytes = b""):
        super().__init__()
        self.raw = raw

    def Pack(self, builder):  # noqa: N802 (the generated API's name)
        data = None
        if self.raw:
            builder.StartVector(1, len(self.raw), ALIGNMENT)
            builder.head -= len(self.raw)
            builder.Bytes[builder.head:builder.head + len(self.raw)] = self.raw
            data = builder.EndVector()
        S.BufferStart(builder)
        if data is not None:
            S.BufferAddData(builder, data)
        return S.BufferEnd(builder)


def packed(code, op, tensors: list, raws: list[bytes], inputs: list[int], outputs: list[int]) -> bytes:
    """A one-subgraph .tflite of `op` (an OperatorT whose opcodeIndex is 0, `code` its
    OperatorCodeT) over `tensors` (TensorT, buffer k + 1 holding raws[k] for a constant)."""
    graph = S.SubGraphT()
    graph.tensors, graph.inputs, graph.outputs, graph.name = tensors, inputs, outputs, "main"
    graph.operators = op if isinstance(op, list) else [op]
    model = S.ModelT()
    model.version, model.description = 3, "bench/target_profile.py"
    model.operatorCodes = code if isinstance(code, list) else [code]
    model.subgraphs = [graph]
    model.buffers = [_AlignedBuffer()] + [_AlignedBuffer(raw) for raw in raws]
    builder = flatbuffers.Builder(1024 + sum(len(r) for r in raws))
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def _buffer_bytes(fm: FileModel, index: int) -> bytes:
    buffer = fm.root.Buffers(index)
    if buffer.DataLength():
        return buffer.DataAsNumpy().tobytes()
    return fm.data[buffer.Offset():buffer.Offset() + buffer.Size()] if buffer.Offset() > 1 else b""


def single_op(fm: FileModel, index: int, values: dict) -> tuple[bytes, list[np.ndarray]]:
    """The file's op `index` alone in a .tflite (its operator table, options, tensors with their
    quantization, and constant data, copied), and the values to feed its inputs: those the
    whole model gave them (`values`, intermediates()), zeros when missing."""
    op = S.OperatorT.InitFromObj(fm.graph.Operators(index))
    code = S.OperatorCodeT.InitFromObj(fm.root.OperatorCodes(op.opcodeIndex))
    op.opcodeIndex = 0
    old = list(dict.fromkeys(i for i in list(op.inputs) + list(op.outputs) + list(op.intermediates or [])
                             if i >= 0))
    new = {t: k for k, t in enumerate(old)}
    tensors, raws = [], []
    for t in old:
        tensor = S.TensorT.InitFromObj(fm.graph.Tensors(t))
        raw = _buffer_bytes(fm, tensor.buffer)
        tensor.buffer = 0
        if raw:
            raws.append(raw)
            tensor.buffer = len(raws)
        tensor.name = f"t{new[t]}"
        tensors.append(tensor)
    outputs = [i for i in op.outputs if i >= 0]
    inputs = [t for t in dict.fromkeys(i for i in op.inputs if i >= 0)
              if not tensors[new[t]].buffer and not tensors[new[t]].isVariable and t not in outputs]
    op.inputs = [new[i] if i >= 0 else -1 for i in op.inputs]
    op.outputs = [new[i] if i >= 0 else -1 for i in op.outputs]
    op.intermediates = [new[i] for i in op.intermediates] if op.intermediates is not None else None
    feeds = [_feed(values.get(t), fm.ir.arrays[f"t{t}"]) for t in inputs]
    return packed(code, op, tensors, raws, [new[t] for t in inputs], [new[t] for t in outputs]), feeds


def _feed(value, array) -> np.ndarray:
    if value is not None and tuple(value.shape) == array.shape and value.dtype == array.dtype:
        return value
    return np.zeros(array.shape, array.dtype)


def _tensor(shape, dtype, buffer: int = 0, name: str = "") -> object:
    tensor = S.TensorT()
    tensor.shape, tensor.buffer, tensor.name = list(shape), buffer, name
    tensor.type = {np.dtype(v): k for k, v in NUMPY.items()}[np.dtype(dtype)]
    return tensor


def _code(name: str):
    code = S.OperatorCodeT()
    code.builtinCode = getattr(S.BuiltinOperator, name)
    code.deprecatedBuiltinCode, code.version = min(code.builtinCode, 127), 1
    return code


def _operator(opcode: int, name: str, inputs: list[int], outputs: list[int]):
    op = S.OperatorT()
    op.opcodeIndex, op.inputs, op.outputs = opcode, inputs, outputs
    options = {"ADD": (S.BuiltinOptions.AddOptions, S.AddOptionsT),
               "CUMSUM": (S.BuiltinOptions.CumsumOptions, S.CumsumOptionsT)}.get(name)
    if options:
        op.builtinOptionsType, op.builtinOptions = options[0], options[1]()
    return op


def chain(size: int, undelegated: bool) -> tuple[bytes, list[np.ndarray]]:
    """CHAIN float ADDs (x + c) in a row over [1, size]; with `undelegated`, the middle one a float
    CUMSUM over axis 0 (of size 1: a copy), which XNNPACK does not take."""
    tensors = [_tensor((1, size), np.float32, name=f"x{k}") for k in range(CHAIN + 1)]
    tensors += [_tensor((1, size), np.float32, 1, "c"), _tensor((), np.int32, 2, "axis")]
    c, axis = CHAIN + 1, CHAIN + 2
    ops = []
    for k in range(CHAIN):
        cumsum = undelegated and k == CHAIN // 2
        ops.append(_operator(int(cumsum), "CUMSUM" if cumsum else "ADD", [k, axis if cumsum else c], [k + 1]))
    raws = [np.full((1, size), 0.5, np.float32).tobytes(), np.zeros((), np.int32).tobytes()]
    content = packed([_code("ADD"), _code("CUMSUM")], ops, tensors, raws, [0], [CHAIN])
    return content, [np.ones((1, size), np.float32)]


def one_op(name: str, size: int, dtype) -> tuple[bytes, list[np.ndarray]]:
    """`name` (ADD or CUMSUM) alone over [1, size] of `dtype`: the reference ops, and the
    chains' ops measured alone."""
    tensors = [_tensor((1, size), dtype, name="x"), _tensor((1, size), dtype, name="y"),
               _tensor((), np.int32, 1, "axis")]
    second = 2 if name == "CUMSUM" else 0
    op = _operator(0, name, [0, second], [1])
    return packed(_code(name), op, tensors, [np.zeros((), np.int32).tobytes()], [0], [1]), \
        [np.ones((1, size), dtype)]


REFERENCES = {"delegated": (lambda: one_op("ADD", 1, np.float32)),
              "interpreter": (lambda: one_op("ADD", 1, np.int32))}


# --- timing --------------------------------------------------------------------------------------
@dataclass
class Loaded:
    """A LiteRT interpreter (1 thread, default resolver) ready to invoke, and whether XNNPACK
    took its ops."""

    interpreter: object
    delegated: bool
    content: bytes


def load(content: bytes, feeds: list[np.ndarray]) -> Loaded:
    from ai_edge_litert.interpreter import Interpreter

    from qconvert.check.inspect_tflite import interpreter_partitions
    from qconvert.check.runtimes import quiet_native_stderr

    with quiet_native_stderr():
        interpreter = Interpreter(model_content=content, num_threads=1)
        interpreter.allocate_tensors()
    details = interpreter.get_input_details()
    if isinstance(feeds, dict):  # by name, else by position
        feeds = [feeds.get(d["name"], list(feeds.values())[k]) for k, d in enumerate(details)]
    for detail, value in zip(details, feeds):
        interpreter.set_tensor(detail["index"], value)
    interpreter.invoke()
    partitions, _ = interpreter_partitions(interpreter)
    return Loaded(interpreter, bool(partitions), content)


def _once(interpreter) -> float:
    best = math.inf
    for _ in range(3):
        start = time.perf_counter()
        interpreter.invoke()
        best = min(best, time.perf_counter() - start)
    return best


def median_seconds(loaded: list[Loaded], rounds: int, sample_s: float) -> list[float]:
    """Each interpreter's median time per invoke: `rounds` rounds, each timing every interpreter
    in turn for one sample of as many invokes as fill `sample_s` (at least one)."""
    repeats = [min(10000, max(1, int(sample_s / max(_once(x.interpreter), 1e-7)))) for x in loaded]
    samples: list[list[float]] = [[] for _ in loaded]
    for _ in range(rounds):
        for x, n, out in zip(loaded, repeats, samples):
            invoke = x.interpreter.invoke
            start = time.perf_counter()
            for _ in range(n):
                invoke()
            out.append((time.perf_counter() - start) / n)
    return [statistics.median(s) for s in samples]


def timed_ops(models: list[tuple[bytes, list]], rounds: int, sample_s: float,
              batch: int = 12) -> list[dict]:
    """Each single-op model's {"seconds" (its median less its reference's), "delegated",
    "raw", "reference"}, timed in batches of `batch` beside the two reference ops; a model LiteRT
    cannot load or run gets {"error"}."""
    results = []
    for start in range(0, len(models), batch):
        refs = {kind: load(*make()) for kind, make in REFERENCES.items()}
        group, errors = [], {}
        for k, (content, feeds) in enumerate(models[start:start + batch]):
            try:
                group.append(load(content, feeds))
            except (ValueError, RuntimeError) as e:
                errors[k] = str(e).splitlines()[0] if str(e) else type(e).__name__
        times = median_seconds(list(refs.values()) + group, rounds, sample_s)
        ref_times = dict(zip(refs, times[:len(refs)]))
        measured = iter(zip(group, times[len(refs):]))
        for k in range(len(models[start:start + batch])):
            if k in errors:
                results.append({"error": errors[k]})
                continue
            x, t = next(measured)
            ref = ref_times["delegated" if x.delegated else "interpreter"]
            results.append({"seconds": max(t - ref, 0.0), "raw": t, "reference": ref,
                            "delegated": x.delegated})
    return results


class Crashed(Exception):
    """The child process died (LiteRT aborted or crashed on a file)."""


def in_child(function, *args):
    """function(*args) in a forked child process, its result sent back (pickled); Crashed when
    the child dies without one: a file LiteRT aborts on must not end the whole measurement."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=_child, args=(sender, function, args))
    process.start()
    sender.close()
    try:
        result = receiver.recv()
    except EOFError:
        result = None
    process.join()
    if result is None:
        code = process.exitcode
        raise Crashed(f"killed by signal {-code}" if code and code < 0 else f"exit {code}")
    if isinstance(result, BaseException):
        raise result
    return result


def _child(sender, function, args) -> None:
    try:
        result = function(*args)
    except Exception as e:  # sent back, raised in the parent
        result = RuntimeError(f"{type(e).__name__}: {e}")
    sender.send(result)
    sender.close()
