"""The fuzz cases: a fixed, seeded list of hostile inputs for the qconvert command line.

Every case has an id (``case_0123``), a kind (what it attacks) and a builder that writes the
case's files into an empty directory and returns the Run to make there: the command line, what
stdin and stdout are, the environment, the CPU budget and, for the few cases where the issue
names the answer, the exit codes allowed. The list and every file are a pure function of SEED
and the case's index, so a failure is reproduced by its id:

    pytest tests/fuzz -k case_0123                     # the case as a test
    python -m tests.fuzz.cases case_0123 /tmp/c123     # its files on disk, and the command

Kinds (counts in KINDS): byte-level corruption of the seed models (models.py), structural
mutations of their protos, hostile calibration files, command-line and output-path abuse, real
file descriptors (closed stdin/stdout, /dev/full, FIFOs, devices: run in a subprocess), and
corrupted .tflite files for `qconvert inspect` / `qconvert verify`, and fake-quant graphs whose
Q/DQ params or metadata lie (QDQ import).
"""

from __future__ import annotations

import io
import json
import os
import pickle
import stat
import struct
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.fuzz import models as M

SEED = 20241111
MODEL = "model.onnx"
OUT = "out.tflite"
PWNED = "PWNED"  # a pickle payload creates this file if qconvert ever unpickles calibration data
EXIT_ANY = frozenset({0, 1, 2, 4})


@dataclass
class Run:
    """What to run in a case's directory (the working directory; paths are relative to it)."""

    args: list[str]  # after "qconvert" (a subcommand, "inspect" or "verify", comes first)
    out: str | None = OUT  # the OUT argument ("-": stdout; None: the command writes no model)
    inputs: tuple[str, ...] = (MODEL,)  # files that must never change, even when OUT names one
    through: str | None = None  # the file OUT, a symlink, leads to: replaced on success only
    stdin: bytes | None = b""  # what "-" reads (in-process), or stdin's bytes (subprocess)
    subprocess: bool = False  # real process: its fds and exit path matter
    stdin_mode: str = "bytes"  # subprocess: "bytes" or "closed"
    stdout_mode: str = "pipe"  # subprocess: "pipe", "closed", "full" (/dev/full), "broken"
    env: dict[str, str] = field(default_factory=dict)
    cpu_seconds: float = 20.0  # the child's CPU budget (tests/processes.py): more is a hang
    allowed: frozenset[int] = EXIT_ANY  # exit codes this case may end with


@dataclass(frozen=True)
class Case:
    id: str
    kind: str
    index: int  # the case's number within its kind: builders enumerate variants with it

    def build(self, directory: Path) -> Run:
        """Writes the case's files into `directory` (existing, empty) and returns its Run."""
        number = int(self.id.split("_")[1])
        rng = np.random.default_rng([SEED, number])
        return BUILDERS[self.kind](rng, self.index, Path(directory))


# --- helpers --------------------------------------------------------------------------------------
def _pick(rng, values):
    return values[int(rng.integers(len(values)))]


def write_proto(model: onnx.ModelProto, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(model.SerializeToString())


def write_seed(name: str, d: Path) -> str:
    """Writes seed model `name` as MODEL (the external one with its data file); returns MODEL."""
    if name == "external":
        M.save_external(M.seed_model(name), str(d / MODEL))
    else:
        write_proto(M.seed_model(name), d / MODEL)
    return MODEL


def model_inputs(d: Path) -> tuple[str, ...]:
    """Every file of the case so far: all of them are inputs that must stay unchanged."""
    return tuple(str(p.relative_to(d)) for p in sorted(d.rglob("*")) if p.is_file() or p.is_symlink())


def mode_flags(rng, d: Path, seed: str, p_float: float = 0.6) -> list[str]:
    """Float, int8 with --default-range, or int8 calibrated on valid data (written as calib.npz)."""
    x = rng.random()
    if x < p_float:
        return _pick(rng, [[], [], ["--io-layout", "onnx"], ["--weight-only"], ["--float16"]])
    if x < p_float + (1 - p_float) / 2:
        return ["--quantize", "--default-range", "-2,2"]
    np.savez(d / "calib.npz", **M.calibration_arrays(seed, samples=3))
    return ["--quantize", "--calibration", "calib.npz"] + _pick(rng, [[], ["--io-type", "int8"]])


def model_run(rng, d: Path, model: onnx.ModelProto | None, seed: str, p_float=0.6,
              extra=(), allowed=EXIT_ANY) -> Run:
    """Writes `model` as MODEL (None: already written) and converts it in some mode."""
    if model is not None:
        write_proto(model, d / MODEL)
    inputs = model_inputs(d)
    flags = mode_flags(rng, d, seed, p_float)
    if rng.random() < 0.1:
        flags.append("--debug")  # --debug must keep the exit codes
    return Run([MODEL, OUT, *flags, *extra], inputs=inputs, allowed=allowed)


def node(model: onnx.ModelProto, name: str) -> onnx.NodeProto:
    return next(n for n in model.graph.node if n.name == name)


def init(model: onnx.ModelProto, name: str) -> onnx.TensorProto:
    return next(t for t in model.graph.initializer if t.name == name)


def set_attr(n: onnx.NodeProto, attr: onnx.AttributeProto) -> None:
    """Replaces (or adds) the attribute of attr's name."""
    for i, a in enumerate(n.attribute):
        if a.name == attr.name:
            n.attribute[i].CopyFrom(attr)
            return
    n.attribute.append(attr)


def rename_tensor(model: onnx.ModelProto, old: str, new: str) -> None:
    g = model.graph
    for n in g.node:
        n.input[:] = [new if x == old else x for x in n.input]
        n.output[:] = [new if x == old else x for x in n.output]
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        if vi.name == old:
            vi.name = new
    for t in g.initializer:
        if t.name == old:
            t.name = new


def _device(path: Path, name: str) -> None:
    """A character device at `path` behaving like /dev/`name` (null or zero): our own node when
    we may create one (root), so that nothing can touch the system's; else a symlink to it."""
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, {"null": 3, "zero": 5}[name]))
    except PermissionError:
        os.symlink(f"/dev/{name}", path)


EXTREME_INTS = [0, -1, -7, 100, 2**31 - 1, 2**31, 2**32 + 4, 2**40, 2**62, 2**63 - 1, -2**31 - 1, -2**63]


# --- byte-level corruption ------------------------------------------------------------------------
def _target_file(rng, d: Path, seed: str) -> Path:
    """The file to corrupt: the model, or for the external seed its data file half the time."""
    if seed == "external" and rng.random() < 0.5:
        return d / M.EXTERNAL_DATA
    return d / MODEL


def _corrupted_seed(rng, j, d, corrupt) -> Run:
    """Seed model j % 3 written, its file (or its external data) replaced by corrupt(its bytes),
    converted in some mode."""
    seed = M.SEED_MODELS[j % 3]
    write_seed(seed, d)
    target = _target_file(rng, d, seed)
    target.write_bytes(corrupt(target.read_bytes()))
    return model_run(rng, d, None, seed)


def bytes_flip(rng, j, d):
    def corrupt(data: bytes) -> bytes:
        data = bytearray(data)
        for _ in range(int(rng.integers(1, 9))):
            data[int(rng.integers(len(data)))] ^= int(rng.integers(1, 256))
        return bytes(data)

    return _corrupted_seed(rng, j, d, corrupt)


def bytes_truncate(rng, j, d):
    return _corrupted_seed(rng, j, d, lambda data: data[:0 if j < 3 else int(rng.integers(len(data)))])


def bytes_splice(rng, j, d):
    def corrupt(data: bytes) -> bytes:
        a, b = sorted(int(v) for v in rng.integers(0, len(data), 2))
        op = j // 3 % 6
        if op == 0:  # delete a chunk
            return data[:a] + data[b:]
        if op == 1:  # duplicate a chunk
            return data[:b] + data[a:b] + data[b:]
        if op == 2:  # insert random bytes
            inserted = rng.integers(0, 256, int(rng.integers(1, 64)), dtype=np.uint8).tobytes()
            return data[:a] + inserted + data[a:]
        if op == 3:  # the head of this model, the tail of another
            other = M.seed_model(M.SEED_MODELS[(j + 1) % 2]).SerializeToString()
            return data[:a] + other[int(rng.integers(len(other))):]
        if op == 4:  # garbage appended
            return data + rng.integers(0, 256, int(rng.integers(1, 200)), dtype=np.uint8).tobytes()
        run = bytes([_pick(rng, [0xFF, 0x80])]) * int(rng.integers(1, 12))  # varints that never end
        return data[:a] + run + data[a + len(run):]

    return _corrupted_seed(rng, j, d, corrupt)


# --- structural mutations -------------------------------------------------------------------------
def _seed_for(j):
    return ("convnet", "dense")[j % 2]


def init_size(rng, j, d):
    """An initializer whose data does not match its dims (or its dtype's size)."""
    seed = _seed_for(j)
    m = M.seed_model(seed)
    t = _pick(rng, list(m.graph.initializer))
    op = j // 2 % 6
    if op == 0:
        t.dims.append(2)
    elif op == 1 and len(t.dims) > 0:
        t.dims[int(rng.integers(len(t.dims)))] += int(rng.integers(1, 4))
    elif op == 2:
        t.raw_data = t.raw_data[:-int(rng.integers(1, 5))]
    elif op == 3:
        t.raw_data = t.raw_data + b"\0" * int(rng.integers(1, 9))
    elif op == 4:  # the data in the typed field, one value short
        values = numpy_helper.to_array(t).ravel()
        t.ClearField("raw_data")
        if t.data_type == TensorProto.INT64:
            t.int64_data[:] = [int(v) for v in values[:-1]]
        else:
            t.float_data[:] = [float(v) for v in values[:-1]]
    else:  # raw_data and a typed field both set
        t.float_data[:] = [1.0] * 3
    return model_run(rng, d, m, seed)


def init_dims_extreme(rng, j, d):
    seed = _seed_for(j)
    m = M.seed_model(seed)
    t = _pick(rng, list(m.graph.initializer))
    value = EXTREME_INTS[j % len(EXTREME_INTS)]
    if len(t.dims) == 0 or rng.random() < 0.2:
        t.dims.append(value)
    else:
        t.dims[int(rng.integers(len(t.dims)))] = value
    return model_run(rng, d, m, seed)


DTYPE_ENUMS = [0, TensorProto.STRING, TensorProto.BOOL, TensorProto.COMPLEX64, TensorProto.BFLOAT16,
               TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.UINT8, TensorProto.INT32, 17, 19, 21,
               22, 23, 24, 25, 40, 99, 1000, -1, 2**31 - 1]


def dtype_enum(rng, j, d):
    """Data-type enums, known and unknown, on initializers, graph inputs and outputs."""
    seed = _seed_for(j)
    m = M.seed_model(seed)
    value = DTYPE_ENUMS[j % len(DTYPE_ENUMS)]
    where = j // len(DTYPE_ENUMS) % 3 if j >= len(DTYPE_ENUMS) else int(rng.integers(3))
    if where == 0:
        _pick(rng, list(m.graph.initializer)).data_type = value
    elif where == 1:
        m.graph.input[0].type.tensor_type.elem_type = value
    else:
        m.graph.output[0].type.tensor_type.elem_type = value
    return model_run(rng, d, m, seed)


def input_dims(rng, j, d):
    """Graph input shapes: zero, negative, beyond int32, symbolic on other axes, rank changes."""
    seed = _seed_for(j)
    m = M.seed_model(seed)
    dims = m.graph.input[0].type.tensor_type.shape.dim
    op = j % 8
    axis = int(rng.integers(len(dims)))
    if op == 0:
        dims[axis].dim_value = 0
    elif op == 1:
        dims[axis].dim_value = int(_pick(rng, [-3, -1, 2**31, 2**40, 2**63 - 1, 2**31 - 1]))
    elif op == 2:
        dims[axis].dim_param = _pick(rng, ["N", "", "batch size", "h\nw", "-1"])
    elif op == 3:
        dims.add().dim_value = 1
    elif op == 4:
        del dims[axis]
    elif op == 5:
        m.graph.input[0].type.tensor_type.ClearField("shape")
    elif op == 6:  # a lying output shape
        out = m.graph.output[0].type.tensor_type
        out.shape.dim.add().dim_value = int(_pick(rng, [0, 7, 2**33]))
    else:
        m.graph.input[0].ClearField("type")
    return model_run(rng, d, m, seed)


INT_ATTRS = {"convnet": [("conv1", "kernel_shape"), ("conv1", "pads"), ("conv1", "strides"),
                         ("conv1", "dilations"), ("conv1", "group"), ("pool1", "kernel_shape"),
                         ("pool1", "strides"), ("dwconv", "group"), ("dwconv", "pads"),
                         ("flatten", "axis"), ("fc", "transB")],
             "dense": [("concat", "axis"), ("transpose", "perm")]}


def _int_attribute(rng, seed: str):
    """(a fresh seed model, one of its nodes, the name of an integer attribute of it)."""
    m = M.seed_model(seed)
    name, attr = _pick(rng, INT_ATTRS[seed])
    return m, node(m, name), attr


def attr_ints_extreme(rng, j, d):
    seed = "convnet" if j % 4 else "dense"
    m, n, attr = _int_attribute(rng, seed)
    a = next(a for a in n.attribute if a.name == attr)
    value = EXTREME_INTS[j % len(EXTREME_INTS)]
    if a.type == onnx.AttributeProto.INTS:
        a.ints[int(rng.integers(len(a.ints)))] = value
    else:
        a.i = value
    return model_run(rng, d, m, seed)


def attr_type(rng, j, d):
    """An attribute of the wrong type (a Conv group as a string, 0, UNDEFINED...)."""
    seed = "convnet" if j % 4 else "dense"
    m, n, attr = _int_attribute(rng, seed)
    kind = j % 9
    if kind == 0:
        new = helper.make_attribute(attr, "2")
    elif kind == 1:
        new = helper.make_attribute(attr, 2.0)
    elif kind == 2:
        new = helper.make_attribute(attr, [1.5, 2.5])
    elif kind == 3:
        new = helper.make_attribute(attr, numpy_helper.from_array(np.array([1], np.int64)))
    elif kind == 4:  # type UNDEFINED with a value
        new = onnx.AttributeProto(name=attr, i=1)
    elif kind == 5:  # ints where an int is expected, and the other way round
        new = helper.make_attribute(attr, [1, 1]) if attr in ("group", "axis", "transB") \
            else helper.make_attribute(attr, 2)
    elif kind == 6:  # an empty list
        new = onnx.AttributeProto(name=attr, type=onnx.AttributeProto.INTS)
    elif kind == 7:  # a graph
        new = helper.make_attribute(attr, helper.make_graph([], "sub", [], []))
    else:  # a declared type that does not match the value set
        new = onnx.AttributeProto(name=attr, type=onnx.AttributeProto.STRING, i=3)
    set_attr(n, new)
    return model_run(rng, d, m, seed)


def attr_dup_unknown(rng, j, d):
    seed = "convnet" if j % 3 else "dense"
    m, n, attr = _int_attribute(rng, seed)
    op = j % 3
    if op == 0:  # the same attribute twice, different values
        a = next(a for a in n.attribute if a.name == attr)
        dup = onnx.AttributeProto()
        dup.CopyFrom(a)
        if dup.type == onnx.AttributeProto.INTS:
            dup.ints[0] += 1
        else:
            dup.i += 1
        n.attribute.append(dup)
    elif op == 1:
        n.attribute.append(helper.make_attribute(_pick(rng, ["bogus", "", "auto_pad"]), "SAME_LOWER"))
    else:
        for i, a in enumerate(n.attribute):
            if a.name == attr:
                del n.attribute[i]
                break
    return model_run(rng, d, m, seed)


def conv_weights(rng, j, d):
    """Conv weights of the wrong rank, channel count, group split, kernel or bias size."""
    m = M.seed_model("convnet")
    op = j % 7
    if op == 0:  # rank 3 in a 2-D conv
        w = init(m, "w1")
        w.CopyFrom(numpy_helper.from_array(np.ones((4, 3, 9), np.float32), "w1"))
    elif op == 1:  # rank 5
        init(m, "w1").CopyFrom(numpy_helper.from_array(np.ones((4, 3, 3, 3, 1), np.float32), "w1"))
    elif op == 2:  # input channels 2 for a 3-channel input
        init(m, "w1").CopyFrom(numpy_helper.from_array(np.ones((4, 2, 3, 3), np.float32), "w1"))
    elif op == 3:  # group 3 does not divide 4 channels
        set_attr(node(m, "dwconv"), helper.make_attribute("group", int(_pick(rng, [3, 8, 5]))))
    elif op == 4:  # kernel_shape does not match the weights
        set_attr(node(m, "conv1"), helper.make_attribute("kernel_shape", [5, 5]))
    elif op == 5:  # bias of the wrong length
        init(m, "b1").CopyFrom(numpy_helper.from_array(np.ones(int(_pick(rng, [3, 5, 1])), np.float32), "b1"))
    else:  # kernel larger than the (unpadded) input
        init(m, "w2").CopyFrom(numpy_helper.from_array(np.ones((4, 1, 9, 9), np.float32), "w2"))
        set_attr(node(m, "dwconv"), helper.make_attribute("kernel_shape", [9, 9]))
        set_attr(node(m, "dwconv"), helper.make_attribute("pads", [0, 0, 0, 0]))
    return model_run(rng, d, m, "convnet")


def graph_struct(rng, j, d):
    """Duplicate producers, outputs nobody produces, no outputs, no ops, cycles, undefined inputs."""
    seed = _seed_for(j)
    m = M.seed_model(seed)
    g = m.graph
    op = j // 2 % 13
    allowed = EXIT_ANY
    if op == 0:  # two nodes produce the same tensor
        a, b = sorted(int(v) for v in rng.choice(len(g.node) - 1, 2, replace=False))
        g.node[b].output[0] = g.node[a].output[0]
    elif op == 1:  # a graph output nobody produces
        g.output.add().CopyFrom(helper.make_tensor_value_info("ghost", TensorProto.FLOAT, None))
        allowed = frozenset({1})
    elif op == 2:  # the only output renamed to nothing produced
        g.output[0].name = "nobody"
        del g.output[1:]
        allowed = frozenset({1})
    elif op == 3:
        g.ClearField("output")
        allowed = frozenset({1})
    elif op == 4:  # no ops, the output named after the input
        g.ClearField("node")
        allowed = frozenset({1}) if rng.random() < 0.5 else EXIT_ANY
        if allowed == EXIT_ANY:
            g.output[0].name = g.input[0].name
            del g.output[1:]
    elif op == 5:  # a cycle: an early node reads a later node's output
        a = int(rng.integers(1, len(g.node) - 1))
        b = int(rng.integers(a, len(g.node)))
        g.node[a].input[0] = g.node[b].output[0]
        allowed = frozenset({1})
    elif op == 6:  # a self-loop
        n = g.node[int(rng.integers(1, len(g.node)))]
        n.input[0] = n.output[0]
        allowed = frozenset({1})
    elif op == 7:  # an input nobody defines
        g.node[int(rng.integers(len(g.node)))].input[0] = "undefined_tensor"
        allowed = frozenset({1})
    elif op == 8:  # an empty name for a required input
        g.node[int(rng.integers(len(g.node)))].input[0] = ""
    elif op == 9:  # a node producing nothing
        del g.node[int(rng.integers(len(g.node)))].output[:]
    elif op == 10:  # a node output named like the graph input or an initializer
        g.node[int(rng.integers(len(g.node)))].output[0] = _pick(rng, ["x", g.initializer[0].name])
    elif op == 11:  # duplicated graph input / initializer / output
        what = int(rng.integers(3))
        if what == 0:
            g.input.add().CopyFrom(g.input[0])
        elif what == 1:
            g.initializer.add().CopyFrom(g.initializer[int(rng.integers(len(g.initializer)))])
        else:
            g.output.add().CopyFrom(g.output[0])
    else:  # nodes out of topological order (acyclic)
        nodes = list(g.node)
        order = rng.permutation(len(nodes))
        g.ClearField("node")
        g.node.extend(nodes[i] for i in order)
    return model_run(rng, d, m, seed, allowed=allowed)


def names(rng, j, d):
    """Non-UTF-8, empty, huge and odd (newline, NUL, '/') names of nodes, tensors, ops, attributes."""
    seed = _seed_for(j)
    m = M.seed_model(seed)
    g = m.graph
    op = j % 8
    marker = "QQNAMEQQ"
    if op <= 3:  # non-UTF-8 bytes, patched into the serialized proto
        n = g.node[int(rng.integers(len(g.node)))]
        if op == 0:
            n.name = marker
        elif op == 1:
            rename_tensor(m, n.output[0], marker)
        elif op == 2:
            rename_tensor(m, g.input[0].name, marker)
        else:
            if n.attribute:
                n.attribute[0].name = marker
            else:
                n.op_type = marker
        bad = _pick(rng, [b"\xff\xfe\xfdname", b"abc\xc3(xyz", b"\x80\x80\x80\x80\x80\x80\x80\x80"])
        data = m.SerializeToString().replace(marker.encode(), bad[:len(marker)].ljust(len(marker), b"\xff"))
        (d / MODEL).write_bytes(data)
        return model_run(rng, d, None, seed)
    n = g.node[int(rng.integers(len(g.node)))]
    odd = _pick(rng, ["", "a\nb", "a\0b", "../../etc/x", "x" * 100_000, "ü" * 10, "a\rb\tc"])
    if op == 4:
        n.name = odd
    elif op == 5:
        rename_tensor(m, n.output[0], odd)
    elif op == 6:
        rename_tensor(m, g.input[0].name, odd)
    else:
        n.op_type = odd
    return model_run(rng, d, m, seed)


def external_data(rng, j, d):
    """External data that must be refused (outside the folder, absolute, symlinks, missing, bad
    offsets) or read safely (a FIFO)."""
    sub = d / "m"
    sub.mkdir()
    M.save_external(M.seed_model("convnet"), str(sub / "model.onnx"))
    (d / "outside.bin").write_bytes((sub / M.EXTERNAL_DATA).read_bytes())
    m = onnx.load(str(sub / "model.onnx"), load_external_data=False)
    t = _pick(rng, list(m.graph.initializer))
    entries = {e.key: e for e in t.external_data}
    op = j % 14
    allowed = frozenset({1})
    if op == 0:
        entries["location"].value = "../outside.bin"
    elif op == 1:
        entries["location"].value = str(d / "outside.bin")
    elif op == 2:
        entries["location"].value = "missing.bin"
    elif op == 3:
        os.symlink("../outside.bin", sub / "link.bin")
        entries["location"].value = "link.bin"
    elif op == 4:
        os.symlink(str(d / "outside.bin"), sub / "link.bin")
        entries["location"].value = "link.bin"
    elif op == 5:
        entries["location"].value = _pick(rng, [".", "", "./", "sub"])
        (sub / "sub").mkdir()
    elif op == 6:
        t.external_data.add(key="offset", value=str(_pick(rng, [10**6, 2**62, 2**64])))
    elif op == 7:
        t.external_data.add(key="length", value=str(_pick(rng, [10**6, 2**40, 0])))
    elif op == 8:
        t.external_data.add(key="offset", value=_pick(rng, ["-8", "abc", "1e3", ""]))
    elif op == 9:
        entries["location"].value = "a\0b.bin"
    elif op == 10:  # a FIFO where the data file should be (no writer: reading would block)
        os.mkfifo(sub / "fifo.bin")
        entries["location"].value = "fifo.bin"
    elif op == 11:
        entries["location"].value = "../" * 20 + "etc/hostname"
    elif op == 12:  # a data location on a model without external data
        m2 = M.seed_model("dense")
        t2 = m2.graph.initializer[0]
        t2.data_location = TensorProto.EXTERNAL
        t2.external_data.add(key="location", value=_pick(rng, ["nothing.bin", "../outside.bin"]))
        m = m2
    else:  # data_location EXTERNAL without any entries
        t.ClearField("external_data")
    write_proto(m, sub / "model.onnx")
    run = model_run(rng, d, None, "convnet", allowed=allowed)
    run.args[0] = "m/model.onnx"
    run.inputs = tuple(p for p in run.inputs if p != MODEL)
    return run


def broadcast_reshape(rng, j, d):
    """Shapes that do not broadcast, reshapes to impossible sizes, bad axes and permutations."""
    op = j % 13
    if op <= 1:  # convnet: residual Add of [1,4,8,8] and [1,4,4,4]; Mul by a [3] constant
        m = M.seed_model("convnet")
        if op == 0:
            node(m, "residual").input[1] = "r1"
        else:
            node(m, "residual").input[1] = "k3"
            m.graph.initializer.append(numpy_helper.from_array(np.ones(3, np.float32), "k3"))
        return model_run(rng, d, m, "convnet")
    m = M.seed_model("dense")
    g = m.graph
    if op == 2:
        init(m, "m").CopyFrom(numpy_helper.from_array(np.ones(_pick(rng, [5, 3, 7]), np.float32), "m"))
    elif op == 3:
        init(m, "m").CopyFrom(numpy_helper.from_array(np.ones((2, 1, 1, 4), np.float32), "m"))
    else:
        target = {4: [1, 5, 4], 5: [-1, -1, 4], 6: [1, 0, 0, 0], 7: [-2, 4, 4], 8: [1, 2**40, 4],
                  9: [1, 4, 4]}.get(op)
        if target is not None:
            dtype = np.float32 if op == 9 else np.int64
            init(m, "shape3").CopyFrom(numpy_helper.from_array(np.array(target, dtype), "shape3"))
        elif op == 10:
            set_attr(node(m, "concat"), helper.make_attribute("axis", int(_pick(rng, [3, 5, -4, -9]))))
        elif op == 11:
            set_attr(node(m, "transpose"),
                     helper.make_attribute("perm", _pick(rng, [[0, 0, 1], [0, 1, 3], [0, 1], [2, 1, 0, 3]])))
        else:  # the Gemm's inner dimension does not match
            init(m, "wd").CopyFrom(numpy_helper.from_array(np.ones((11, 16), np.float32), "wd"))
    del g
    return model_run(rng, d, m, "dense")


VALUES = [np.nan, np.inf, -np.inf, 1e30, -1e30, 1e-42, 3e38, 0.0, 1e-30, 65504.0 * 1e20]


def weight_values(rng, j, d):
    """Weights of NaN, inf, denormal or huge values (mostly with --quantize)."""
    seed = _seed_for(j)
    m = M.seed_model(seed)
    floats = [t for t in m.graph.initializer if t.data_type == TensorProto.FLOAT]
    t = _pick(rng, floats)
    a = numpy_helper.to_array(t).copy()
    value = np.float32(VALUES[j % len(VALUES)])
    if rng.random() < 0.5:
        a[...] = value
    else:
        a.flat[int(rng.integers(a.size))] = value
    t.CopyFrom(numpy_helper.from_array(a, t.name))
    return model_run(rng, d, m, seed, p_float=0.3)


def opset_meta(rng, j, d):
    """Opset versions, domains, IR versions, op types qconvert does not know."""
    seed = _seed_for(j)
    m = M.seed_model(seed)
    op = j % 9
    if op == 0:
        m.opset_import[0].version = int(_pick(rng, [0, 1, 6, 99, 10**6, -1]))
    elif op == 1:
        m.ClearField("opset_import")
    elif op == 2:
        m.opset_import.add(domain="", version=7)
    elif op == 3:
        m.graph.node[int(rng.integers(len(m.graph.node)))].domain = _pick(rng, ["com.evil", "ai.onnx.ml"])
    elif op == 4:
        m.ir_version = int(_pick(rng, [0, 1, 3, 99, -1]))
    elif op == 5:
        n = m.graph.node[int(rng.integers(len(m.graph.node)))]
        n.op_type = _pick(rng, ["conv", "", "NoSuchOp", "Loop"])
    elif op == 6:  # a local function shadowing a node
        n = m.graph.node[0]
        n.domain = "local"
        m.opset_import.add(domain="local", version=1)
        m.functions.add().CopyFrom(helper.make_function("local", n.op_type, list(n.input), list(n.output),
                                                        [], [helper.make_opsetid("", 13)]))
    elif op == 7:
        m.graph.ClearField("input")
    else:  # an initializer also listed as a graph input (allowed by ONNX: a default)
        t = m.graph.initializer[0]
        m.graph.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    return model_run(rng, d, m, seed)


def zero_sized(rng, j, d):
    seed = _seed_for(j)
    m = M.seed_model(seed)
    op = j % 3
    if op == 0:
        dims = m.graph.input[0].type.tensor_type.shape.dim
        dims[int(rng.integers(len(dims)))].dim_value = 0
    elif op == 1:
        t = _pick(rng, list(m.graph.initializer))
        shape = list(t.dims) or [1]
        shape[int(rng.integers(len(shape)))] = 0
        t.CopyFrom(numpy_helper.from_array(np.zeros(shape, numpy_helper.to_array(t).dtype), t.name))
    else:
        m.graph.initializer.append(numpy_helper.from_array(np.zeros((0,), np.float32), "empty"))
        m.graph.node[int(rng.integers(len(m.graph.node)))].input.append("empty")
    return model_run(rng, d, m, seed)


def _int_fields(m: onnx.ModelProto) -> list[Callable[[int], None]]:
    """Setters for every integer in the graph a user's file controls: dims, attributes, types."""
    setters = []

    def seq_setter(seq, i):
        def set_(v):
            seq[i] = v
        return set_

    def attr_setter(obj, name):
        return lambda v: setattr(obj, name, v)

    for t in m.graph.initializer:
        setters += [seq_setter(t.dims, i) for i in range(len(t.dims))]
        setters.append(attr_setter(t, "data_type"))
    for n in m.graph.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.INTS:
                setters += [seq_setter(a.ints, i) for i in range(len(a.ints))]
            elif a.type == onnx.AttributeProto.INT:
                setters.append(attr_setter(a, "i"))
    for vi in list(m.graph.input) + list(m.graph.output):
        for dim in vi.type.tensor_type.shape.dim:
            setters.append(attr_setter(dim, "dim_value"))
        setters.append(attr_setter(vi.type.tensor_type, "elem_type"))
    return setters


def random_field(rng, j, d):
    """One to three random integers of the graph set to random extremes, or a tensor rewired."""
    seed = _seed_for(j)
    m = M.seed_model(seed)
    for _ in range(int(rng.integers(1, 4))):
        if rng.random() < 0.8:
            setters = _int_fields(m)
            value = int(_pick(rng, EXTREME_INTS + [1, 2, 3, -2]))
            setter = setters[int(rng.integers(len(setters)))]
            try:
                setter(value)
            except ValueError:  # an int32 field (a data type): its extreme instead
                setter(-2**31 if value < 0 else 2**31 - 1)
        else:
            names_ = [x for n in m.graph.node for x in list(n.input) + list(n.output)]
            n = m.graph.node[int(rng.integers(len(m.graph.node)))]
            n.input[int(rng.integers(len(n.input)))] = _pick(rng, names_)
    return model_run(rng, d, m, seed)


# --- calibration data -----------------------------------------------------------------------------
def _calib_run(rng, d, seed, path="calib.npz", extra=(), flag="--calibration", allowed=EXIT_ANY,
               env=None, cpu_seconds=20.0):
    write_seed(seed, d)
    inputs = model_inputs(d)
    if flag == "--calibration":
        flags = ["--quantize", "--calibration", path]
    else:  # the verification data (same loader) of a --float16 or verified float conversion
        flags = [_pick(rng, ["--float16", "--verify"]), "--verify-data", path]
    if rng.random() < 0.1:
        flags.append("--debug")
    return Run([MODEL, OUT, *flags, *extra], inputs=inputs, allowed=allowed, env=env or {},
               cpu_seconds=cpu_seconds)


def _shape(seed, n):
    return (n,) + M.input_shape(seed)[1:]


def calib_values(rng, j, d):
    """NaN, inf, denormal, huge or constant calibration values."""
    seed = _seed_for(j)
    kind = j // 2 % 12
    x = rng.standard_normal(_shape(seed, 3)).astype(np.float32)
    if kind == 0:
        x.flat[int(rng.integers(x.size))] = np.nan
    elif kind == 1:
        x.flat[int(rng.integers(x.size))] = _pick(rng, [np.inf, -np.inf])
    elif kind == 2:
        x[...] = 1e-42
    elif kind == 3:
        x[...] = _pick(rng, [1e30, -1e30])
    elif kind == 4:
        x[...] = 3.4e38
    elif kind == 5:
        x[...] = 0.0
    elif kind == 6:
        x[...] = 5.0
    elif kind == 7:
        x = x.astype(np.float64) * 1e300  # beyond float32
    elif kind == 8:
        x = (x * 1e-38).astype(np.float32)  # denormal spread
    elif kind == 9:
        x = x[:1]
    elif kind == 10:
        x = x.astype(np.float16)
    else:
        x = (x * _pick(rng, [1e20, 1e-20])).astype(np.float32)
    np.savez(d / "calib.npz", x=x)
    return _calib_run(rng, d, seed, flag=_pick(rng, ["--calibration"] * 4 + ["--verify-data"]))


def calib_schema(rng, j, d):
    """Calibration arrays of the wrong dtype, rank, dims, names or count."""
    seed = _seed_for(j)
    good = rng.standard_normal(_shape(seed, 3)).astype(np.float32)
    kind = j // 2 % 16
    arrays: dict | None = None
    if kind == 0:
        arrays = {"x": good.astype(_pick(rng, [np.int32, np.int64, np.uint8]))}
    elif kind == 1:
        arrays = {"x": good > 0}
    elif kind == 2:
        arrays = {"x": good.astype(np.complex64)}
    elif kind == 3:
        arrays = {"x": np.array(["a", "b", "c"])}
    elif kind == 4:
        arrays = {"x": good[..., None]}
    elif kind == 5:
        arrays = {"x": good.reshape(3, -1)[:, :-1]}
    elif kind == 6:
        arrays = {"x": good, "extra": good}
    elif kind == 7:
        arrays = {"y": good}
    elif kind == 8:
        arrays = {"x": good[:0]}
    elif kind == 9:
        arrays = {"x": np.float32(1.0)}
    elif kind == 10:
        arrays = {}
    elif kind == 11:
        (d / "calib.npz").write_bytes(b"")
    elif kind == 12:
        np.save(d / "calib.npz.npy", good)
        os.rename(d / "calib.npz.npy", d / "calib.npz")
    elif kind == 13:
        arrays = {"x": np.zeros((3, 2), dtype=[("a", "<f4"), ("b", "<i4")])}
    elif kind == 14:
        arrays = {"x": good.astype(">f4")}  # big-endian: valid data
    else:
        arrays = {"x": np.asfortranarray(good)}
    if arrays is not None:
        (np.savez_compressed if rng.random() < 0.5 else np.savez)(d / "calib.npz", **arrays)
    return _calib_run(rng, d, seed, flag=_pick(rng, ["--calibration"] * 4 + ["--verify-data"]))


class _Payload:
    """Unpickling this creates the PWNED file in the working directory."""

    def __reduce__(self):
        return (open, (PWNED, "w"))


def calib_pickle(rng, j, d):
    """Pickles: object arrays, and a payload that creates a file when unpickled."""
    seed = _seed_for(j)
    kind = j % 4
    if kind == 0:
        np.savez(d / "calib.npz", x=np.array([_Payload(), 1], dtype=object))
    elif kind == 1:  # a raw pickle as an .npz member
        with zipfile.ZipFile(d / "calib.npz", "w") as z:
            z.writestr("x.npy", pickle.dumps(_Payload()))
    elif kind == 2:  # an object-array .npy in a directory
        (d / "calib").mkdir()
        np.save(d / "calib" / "x.npy", np.array([_Payload()], dtype=object), allow_pickle=True)
    else:  # a pickle file at PATH
        (d / "calib.npz").write_bytes(pickle.dumps({"x": _Payload()}))
    path = "calib" if kind == 2 else "calib.npz"
    return _calib_run(rng, d, seed, path=path)


def _npy_bytes(header: str | bytes, data: bytes = b"", version=(1, 0), magic=b"\x93NUMPY") -> bytes:
    """An .npy file with a hand-written header."""
    h = header.encode("latin1") if isinstance(header, str) else header
    pad = (64 - (len(magic) + 4 + len(h) + 1) % 64) % 64
    h = h + b" " * pad + b"\n"
    return magic + bytes(version) + struct.pack("<H", len(h)) + h + data


def calib_npy_header(rng, j, d):
    """.npy headers that lie: more data than present, 2^40 samples, negative or overflowing shapes,
    unknown dtypes, bad magic or version, a header that is not a dict."""
    seed = _seed_for(j)
    per = int(np.prod(M.input_shape(seed)[1:]))
    rest = ", ".join(str(v) for v in M.input_shape(seed)[1:])
    data = rng.standard_normal(3 * per).astype(np.float32).tobytes()
    kind = j // 2 % 14
    shape3 = f"(3, {rest})"
    headers = {
        0: f"{{'descr': '<f4', 'fortran_order': False, 'shape': (1000, {rest}), }}",
        1: f"{{'descr': '<f4', 'fortran_order': False, 'shape': ({2**40}, {rest}), }}",
        2: f"{{'descr': '<f4', 'fortran_order': False, 'shape': (-3, {rest}), }}",
        3: f"{{'descr': '<f4', 'fortran_order': False, 'shape': ({2**62}, {2**62}, {rest}), }}",
        4: f"{{'descr': '<f3', 'fortran_order': False, 'shape': {shape3}, }}",
        5: f"{{'descr': '|O', 'fortran_order': False, 'shape': {shape3}, }}",
        6: f"{{'descr': '<f4', 'fortran_order': True, 'shape': {shape3}, }}",
        7: "[1, 2, 3]",
        8: "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 'a'), }",
        9: f"{{'descr': '<f4', 'fortran_order': False, 'shape': {shape3}, 'extra': 1}}",
        10: "{'descr': '<f4', 'fortran_order': False, 'shape': " + "(" * 200 + ")" * 200 + "}",
        11: f"{{'descr': '<V4', 'fortran_order': False, 'shape': {shape3}, }}",
    }
    if kind in headers:
        blob = _npy_bytes(headers[kind], data)
    elif kind == 12:
        blob = _npy_bytes(f"{{'descr': '<f4', 'fortran_order': False, 'shape': {shape3}, }}", data,
                          version=_pick(rng, [(9, 9), (0, 0), (3, 0)]))
    else:  # header length field beyond the file
        blob = b"\x93NUMPY\x01\x00" + struct.pack("<H", 65000) + b"{'descr'"
    form = j % 2
    if form == 0:  # x.npy in a calibration directory
        (d / "calib").mkdir()
        (d / "calib" / "x.npy").write_bytes(blob)
        path = "calib"
    else:  # x.npy as a member of an uncompressed or compressed .npz
        method = _pick(rng, [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
        with zipfile.ZipFile(d / "calib.npz", "w", compression=method) as z:
            z.writestr("x.npy", blob)
        path = "calib.npz"
    return _calib_run(rng, d, seed, path=path)


def _zip_bytes(seed, compressed=True) -> bytes:
    buf = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(buf, **M.calibration_arrays(seed, samples=3))
    return buf.getvalue()


def calib_zip(rng, j, d):
    """Corrupt archives: deflate streams, encrypted-member flags, unknown methods, lying sizes and
    CRCs, truncation, duplicate or odd member names."""
    seed = _seed_for(j)
    kind = j // 2 % 11
    data = bytearray(_zip_bytes(seed, compressed=kind != 5))
    if kind == 0:  # bytes flipped inside the deflate stream (after the 30-byte local header + name)
        for _ in range(int(rng.integers(1, 6))):
            data[int(rng.integers(40, len(data) - 120))] ^= int(rng.integers(1, 256))
    elif kind == 1:  # the encrypted flag in the local and central headers
        data[6] |= 1
        c = data.find(b"PK\x01\x02")
        data[c + 8] |= 1
    elif kind == 2:  # compression method 99
        data[8] = 99
        c = data.find(b"PK\x01\x02")
        data[c + 10] = 99
    elif kind == 3:  # the central directory claims 2^32-2 bytes uncompressed
        c = data.find(b"PK\x01\x02")
        data[c + 24:c + 28] = struct.pack("<I", 0xFFFFFFFE)
    elif kind == 4:  # wrong CRC
        c = data.find(b"PK\x01\x02")
        data[c + 16:c + 20] = struct.pack("<I", int(rng.integers(2**32)))
        data[14:18] = data[c + 16:c + 20]
    elif kind == 5:  # stored: bytes flipped in the array data
        for _ in range(int(rng.integers(1, 6))):
            data[int(rng.integers(30, len(data) - 100))] ^= int(rng.integers(1, 256))
    elif kind == 6:
        data = data[:int(rng.integers(1, len(data)))]
    elif kind == 7:  # two members of the same name
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            a = M.calibration_arrays(seed, samples=3)["x"]
            for arr in (a, a[:1, ..., :1]):
                b = io.BytesIO()
                np.save(b, arr)
                z.writestr("x.npy", b.getvalue())
        data = bytearray(buf.getvalue())
    elif kind == 8:  # member names with ../, a directory entry, and no .npy suffix
        buf = io.BytesIO()
        b = io.BytesIO()
        np.save(b, M.calibration_arrays(seed, samples=3)["x"])
        with zipfile.ZipFile(buf, "w") as z:
            z.writestr(_pick(rng, ["../x.npy", "/x.npy", "x.npy/", "x", "dir/x.npy"]), b.getvalue())
        data = bytearray(buf.getvalue())
    elif kind == 9:  # an empty archive
        buf = io.BytesIO()
        zipfile.ZipFile(buf, "w").close()
        data = bytearray(buf.getvalue())
    else:  # the local header's name length lies
        data[26:28] = struct.pack("<H", 60000)
    (d / "calib.npz").write_bytes(bytes(data))
    return _calib_run(rng, d, seed, flag=_pick(rng, ["--calibration"] * 4 + ["--verify-data"]))


def calib_dir(rng, j, d):
    """Calibration directories: mixed forms, hidden files, subdirectories, symlink loops, FIFOs."""
    seed = _seed_for(j)
    c = d / "calib"
    c.mkdir()
    a = M.calibration_arrays(seed, samples=4)["x"]
    kind = j % 11
    if kind == 0:  # an input from an .npy and from shards
        np.save(c / "x.npy", a)
        np.savez(c / "part-0.npz", x=a)
    elif kind == 1:  # only hidden and foreign files
        np.save(c / ".x.npy", a)
        (c / "x.txt").write_text("1 2 3")
    elif kind == 2:  # a directory named like a shard
        (c / "x.npy").mkdir()
    elif kind == 3:  # a symlink loop
        os.symlink("x.npy", c / "x.npy")
    elif kind == 4:  # a dangling symlink
        os.symlink("nowhere.npy", c / "x.npy")
    elif kind == 5:  # a FIFO named x.npy (no writer: reading blocks)
        os.mkfifo(c / "x.npy")
    elif kind == 6:  # shards with different inputs
        np.savez(c / "part-0.npz", x=a)
        np.savez(c / "part-1.npz", y=a)
    elif kind == 7:  # shards with different sample shapes
        np.savez(c / "part-0.npz", x=a)
        np.savez(c / "part-1.npz", x=a[..., :1])
    elif kind == 8:  # an empty directory
        pass
    elif kind == 9:  # a symlink to a file outside the directory (allowed: the user named it)
        np.save(d / "elsewhere.npy", a)
        os.symlink("../elsewhere.npy", c / "x.npy")
    else:  # many small shards
        for i in range(50):
            np.savez(c / f"part-{i:03d}.npz", x=a[:1])
    run = _calib_run(rng, d, seed, path="calib")
    run.cpu_seconds = 15.0
    return run


def calib_bomb(rng, j, d):
    """Calibration files that claim or inflate to more than the limits allow."""
    seed = "dense"
    kind = j % 4
    env = {}
    if kind == 0:  # 200,000 samples of [1, 12] zeros: 9.6 MB inflated from ~10 KB
        np.savez_compressed(d / "calib.npz", x=np.zeros((200_000, 12), np.float32))
    elif kind == 1:  # 64 MB inflated, against a lowered byte limit
        np.savez_compressed(d / "calib.npz", x=np.zeros((1_400_000, 12), np.float32))
        env = {"QCONVERT_MAX_CALIBRATION_BYTES": "1000000"}
    elif kind == 2:  # 50 samples against a lowered sample limit
        np.savez(d / "calib.npz", x=np.ones((50, 12), np.float32))
        env = {"QCONVERT_MAX_CALIBRATION_SAMPLES": "10"}
    else:  # a garbage limit variable is a usage error, not a crash
        np.savez(d / "calib.npz", x=np.ones((3, 12), np.float32))
        env = {_pick(rng, ["QCONVERT_MAX_CALIBRATION_SAMPLES", "QCONVERT_MAX_CALIBRATION_BYTES"]):
               _pick(rng, ["abc", "0", "-5", "1e9", "99999999999999999999999"])}
    return _calib_run(rng, d, seed, env=env, cpu_seconds=15.0,
                      allowed=frozenset({1, 2}) if kind in (0, 1, 2) else EXIT_ANY)


# --- command line ---------------------------------------------------------------------------------
INPUT_SHAPES = ["x:99999999999999999999", "x:0", "x:-1", "x:1e3", "x:", ":1", "x:1,,2", "x:2147483648",
                "x:" + ",".join(["1"] * 64), "x:\u0661,3,8,8", "x:1,3,8,8,1", "x:1,3,8", "y:1,3,8,8",
                "x:1,3,9,8", "x:2,3,8,8", "x:1,3,2147483647,1", "x:1,3,100000,100000", "x:1, 3, 8, 8",
                "x:1,3,8,8", "x:+1,3,8,8", "x:0x1,3,8,8", "x:1_0,3,8,8", "x:9223372036854775808,3,8,8",
                "x:1,3,8,8:", "x:1,3,65536,65536", "x:1,3,1,1", "x:1,3,8,8\n", "x:1,3,8,8x"]


def cli_input_shape(rng, j, d):
    write_seed("convnet", d)
    value = INPUT_SHAPES[j % len(INPUT_SHAPES)]
    flags = ["--input-shape", value]
    if rng.random() < 0.3:
        flags += ["--quantize", "--default-range", "-1,1"]
    return Run([MODEL, OUT, *flags], inputs=model_inputs(d), cpu_seconds=20.0)


DEFAULT_RANGES = ["", ",", "nan,1", "0,nan", "inf,1", "-inf,inf", "1,0", "0,0", "1,2,3", "a,b",
                  "0,1e-45", "0,1e-38", "-1e-40,1e-40", "1e-300,1e-299", "-1e38,1e38", "-3e38,3e38",
                  "0,1e30", "-1e30,-1e29", "5,6", "0,1", "-0,0", " -1 , 1 ", "1e308,1.0000001e308",
                  "-1,1\x00"]


def cli_default_range(rng, j, d):
    seed = _seed_for(j)
    write_seed(seed, d)
    value = DEFAULT_RANGES[j % len(DEFAULT_RANGES)]
    allowed = frozenset({2}) if value.strip() in ("", ",", "0,1e-45") else EXIT_ANY
    return Run([MODEL, OUT, "--quantize", "--default-range", value,
                *_pick(rng, [[], ["--io-type", "int8"], ["--activations", "int16"]])],
               inputs=model_inputs(d), allowed=allowed)


NUMBER_FLAGS = [
    ["--calibration-samples", "0"], ["--calibration-samples", "-1"],
    ["--calibration-samples", "99999999999999999999999"], ["--verify-samples", "99999999999999999999"],
    ["--verify-samples", "100000"], ["--min-sqnr", "nan"], ["--min-sqnr", "inf"], ["--min-sqnr", "-inf"],
    ["--min-sqnr", "1e308"], ["--target-sqnr", "nan"], ["--target-sqnr", "-5"], ["--target-sqnr", "1e308"],
    ["--target-sqnr", "inf"], ["--weight-only-min-elements", str(2**70)],
    ["--calibration-method", "percentile:nan"], ["--calibration-method", "percentile:200"],
    ["--calibration-method", "percentile:-1"], ["--calibration-method", "mse:3"],
    ["--calibration-method", ""], ["--calibration-method", "percentile:1e-320"],
    ["--keep-float", "("], ["--keep-float", ""], ["--keep-float", "a" * 10000], ["--keep-float", "(a+)+$"],
    ["--report", "nodir/r.json"], ["--report", "r.txt"], ["--report", "."], ["--report", ".json"],
    ["--io-type", "int4"], ["--no-such-flag"], ["--input-shape"], ["--quantize", "--weight-only"],
]


def cli_numbers(rng, j, d):
    write_seed("convnet", d)
    np.savez(d / "calib.npz", **M.calibration_arrays("convnet", samples=3))
    flags = list(NUMBER_FLAGS[j % len(NUMBER_FLAGS)])
    if flags[0] in ("--calibration-samples", "--calibration-method", "--keep-float", "--target-sqnr",
                    "--report", "--verify-samples", "--min-sqnr") and rng.random() < 0.8:
        flags += ["--quantize", "--calibration", "calib.npz"]
    env = {}
    if rng.random() < 0.15:
        env = {"QCONVERT_MAX_MODEL_BYTES": _pick(rng, ["1", "abc", "0", "100"])}
    return Run([MODEL, OUT, *flags], inputs=model_inputs(d), env=env, cpu_seconds=30.0)


def cli_paths(rng, j, d):
    """OUT that is IN, OUT a directory, symlink, device or missing folder; odd INs; an existing OUT
    that a failure must leave untouched."""
    write_seed("convnet", d)
    inputs = model_inputs(d)
    kind = j % 20
    out = OUT
    src = MODEL
    allowed = EXIT_ANY
    through = None
    if kind == 0:
        out = MODEL
        allowed = frozenset({2})
    elif kind == 1:
        (d / "sub").mkdir()
        out = "./sub/../model.onnx"
        allowed = frozenset({2})
    elif kind == 2:
        out = str(d / MODEL)
        allowed = frozenset({2})
    elif kind == 3:  # a hard link to IN
        os.link(d / MODEL, d / "hard.onnx")
        out = "hard.onnx"
        inputs += ("hard.onnx",)
        allowed = frozenset({2})
    elif kind == 4:  # a symlink to IN
        os.symlink(MODEL, d / "link.tflite")
        out = "link.tflite"
        allowed = frozenset({2})
    elif kind == 5:
        (d / "dir.tflite").mkdir()
        out = "dir.tflite"
    elif kind == 6:
        out = "missing/out.tflite"
    elif kind == 7:
        out = ""
    elif kind == 8:  # an existing OUT, a model that fails: OUT untouched
        (d / OUT).write_bytes(b"previous output")
        data = bytearray((d / MODEL).read_bytes())
        data[int(rng.integers(len(data)))] ^= 0xFF
        (d / MODEL).write_bytes(bytes(data[: len(data) // 2]))
    elif kind == 9:  # OUT a symlink to another file: its target is replaced, the link kept
        (d / "target.tflite").write_bytes(b"old")
        os.symlink("target.tflite", d / OUT)
        through = "target.tflite"
    elif kind == 10:  # OUT a dangling symlink
        os.symlink("nowhere/x.tflite", d / OUT)
    elif kind == 11:  # OUT a character device (a /dev/null of our own)
        _device(d / OUT, "null")
    elif kind == 12:
        src = "."
    elif kind == 13:
        src = "missing.onnx"
    elif kind == 14:
        (d / "empty.onnx").write_bytes(b"")
        src = "empty.onnx"
        inputs += ("empty.onnx",)
    elif kind == 15:
        src = ""
    elif kind == 16:
        src = MODEL + "/"
    elif kind == 17:  # a --report that is IN's folder, and one next to OUT
        return Run([MODEL, OUT, "--report", _pick(rng, ["r.json", "sub/r.html", "model.onnx.json"])],
                   inputs=inputs)
    elif kind == 18:  # OUT in a folder that is a file
        out = "model.onnx/out.tflite"
    else:  # IN a symlink to the model; OUT an existing file (replaced on success)
        os.symlink(MODEL, d / "in.onnx")
        (d / OUT).write_bytes(b"old")
        src = "in.onnx"
    flags = mode_flags(rng, d, "convnet", p_float=0.7)
    return Run([src, out, *flags], out=out, inputs=inputs, allowed=allowed, through=through)


def cli_stdio(rng, j, d):
    """Real file descriptors, in a subprocess: closed stdin or stdout, /dev/full, a broken pipe,
    FIFOs at IN or OUT, a device at IN, stdin that is empty or garbage."""
    write_seed(_seed_for(j), d)
    inputs = model_inputs(d)
    model = (d / MODEL).read_bytes()
    kind = j % 14
    json_flag = ["--json"] if rng.random() < 0.3 else []
    run = Run([MODEL, OUT], inputs=inputs, subprocess=True, cpu_seconds=10.0)
    if kind == 0:
        run.args, run.out, run.stdin_mode = ["-", OUT], OUT, "closed"
    elif kind == 1:
        run.args, run.out, run.stdout_mode = [MODEL, "-"], "-", "closed"
    elif kind == 2:
        run.args, run.stdout_mode = [MODEL, OUT, "--json"], "closed"
    elif kind == 3:
        run.args, run.out, run.stdout_mode = [MODEL, "-"], "-", "full"
    elif kind == 4:
        run.args, run.stdout_mode = [MODEL, OUT, "--json"], "full"
    elif kind == 5:
        run.args, run.out, run.stdout_mode = [MODEL, "-"], "-", "broken"
    elif kind == 6:
        run.args, run.stdout_mode = [MODEL, OUT, "--json"], "broken"
    elif kind == 7:
        run.args, run.stdin = ["-", OUT, *json_flag], b""
    elif kind == 8:
        run.args, run.stdin = ["-", OUT, *json_flag], model[: len(model) // 3] + b"\xff" * 20
    elif kind == 9:  # a FIFO as IN, nobody writing
        os.mkfifo(d / "in.fifo")
        run.args = ["in.fifo", OUT]
    elif kind == 10:  # a FIFO as OUT, nobody reading
        os.mkfifo(d / "out.fifo")
        run.args, run.out = [MODEL, "out.fifo"], "out.fifo"
    elif kind == 11:  # a /dev/zero of our own as IN: endless bytes
        _device(d / "zero.onnx", "zero")
        run.args = ["zero.onnx", OUT]
    elif kind == 12:  # --json and a model on stdin, OUT a file; stdout /dev/full
        run.args, run.stdin, run.stdout_mode = ["-", OUT, "--json"], model, "full"
    else:  # the whole pipe: stdin to stdout
        run.args, run.out, run.stdin = ["-", "-", *_pick(rng, [[], ["--io-layout", "onnx"]])], "-", model
    run.args += _pick(rng, [[], [], ["--debug"]])
    return run


# --- inspect and verify on corrupted .tflite files ------------------------------------------------
def _tflite_seed(seed: str, quantized: bool) -> bytes:
    """A valid .tflite of a seed model, written by qconvert in-process."""
    from tests.harness import convert
    from qconvert.transforms.pipeline import QuantizeOptions

    quant = QuantizeOptions(io_type="float", per_tensor_fc=False, default_range=(-2.0, 2.0),
                            activations="int8") if quantized else None
    flatbuffer, _ = convert("<seed>", data=M.seed_model(seed).SerializeToString(), quantize=quant)
    return bytes(flatbuffer)


def tflite_corrupt(rng, j, d):
    """`qconvert inspect` and `qconvert verify` on byte-corrupted and truncated .tflite files."""
    seed = _seed_for(j)
    data = bytearray(_tflite_seed(seed, quantized=j % 4 >= 2))
    if j % 3 == 0:
        data = data[: int(rng.integers(len(data)))]
    else:
        for _ in range(int(rng.integers(1, 9))):
            data[int(rng.integers(len(data)))] ^= int(rng.integers(1, 256))
    (d / "model.tflite").write_bytes(bytes(data))
    if j % 2 == 0:
        return Run(["inspect", "model.tflite", *_pick(rng, [[], ["--json"]])], out=None,
                   inputs=("model.tflite",))
    write_seed(seed, d)
    return Run(["verify", MODEL, "model.tflite", "--samples", "2"], out=None, inputs=model_inputs(d))


# --- QDQ models: a seed's fake-quant graph with hostile params --------------------------------------
def _fake_quant_seed(seed: str) -> onnx.ModelProto:
    """The seed model's `qconvert fakequant` graph (written in-process, --default-range -2,2)."""
    from tests.harness import fake_quant
    from qconvert.transforms.pipeline import QuantizeOptions

    quant = QuantizeOptions(io_type="float", per_tensor_fc=False, default_range=(-2.0, 2.0),
                            activations="int8")
    written, _ = fake_quant("<seed>", data=M.seed_model(seed).SerializeToString(), quantize=quant)
    return onnx.ModelProto.FromString(written)


_BAD_SCALES = [0.0, -1.0, float("nan"), float("inf"), 1e-45, 1e38, 2.0 ** -70, 2.0 ** 70]
_RANGE_KEY = "qconvert.fakequant.ranges"
_PRECISION_KEY = "qconvert.fakequant.precision"
_ACTIVATIONS_KEY = "qconvert.fakequant.activations"


def qdq_model(rng, j, d):
    """QDQ import (qdq/importer.py) of a fake-quant graph whose pairs, weights or metadata lie:
    non-positive, tiny, huge or NaN scales, zero points of other types or out of their grid,
    per-axis params on an activation, an axis out of range, a Q without its DQ, garbage in the
    metadata's ranges; converted with --quantize (and sometimes --calibration)."""
    seed = _seed_for(j)
    model = _fake_quant_seed(seed)
    inits = {t.name: t for t in model.graph.initializer}
    qdq = [n for n in model.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
    victim = qdq[int(rng.integers(len(qdq)))]
    how = j % 8
    if how == 0:  # a bad scale (per tensor or per axis: every element)
        scale = inits[victim.input[1]]
        value = numpy_helper.to_array(scale).astype(np.float32)
        scale.CopyFrom(numpy_helper.from_array(np.full_like(value, _pick(rng, _BAD_SCALES)), scale.name))
    elif how == 1:  # a zero point of another type, or at the edge of its grid
        zero = inits[victim.input[2]]
        value = numpy_helper.to_array(zero)
        dtype = _pick(rng, [np.int16, np.uint16, np.int32, np.uint8, np.int8])
        info = np.iinfo(value.dtype)
        fill = _pick(rng, [info.min, info.max, 0])
        zero.CopyFrom(numpy_helper.from_array(np.full(value.shape, fill).astype(dtype), zero.name))
    elif how == 2:  # per-axis params where there were per-tensor ones
        for k in (1, 2):
            t = inits[victim.input[k]]
            t.CopyFrom(numpy_helper.from_array(np.repeat(numpy_helper.to_array(t).reshape(-1), 3), t.name))
        set_attr(victim, helper.make_attribute("axis", int(rng.integers(-6, 6))))
    elif how == 3:  # an axis anywhere
        set_attr(victim, helper.make_attribute("axis", int(_pick(rng, [-100, -5, 4, 7, 2**31 - 1]))))
    elif how == 4:  # a Q whose DQ is gone: its readers read the integers
        quantizers = [n for n in qdq if n.op_type == "QuantizeLinear"]
        q = quantizers[int(rng.integers(len(quantizers)))]
        dq = next(n for n in model.graph.node
                  if n.op_type == "DequantizeLinear" and n.input[0] == q.output[0])
        for n in model.graph.node:
            for k, name in enumerate(n.input):
                if name == dq.output[0]:
                    n.input[k] = q.output[0]
        model.graph.node.remove(dq)
    else:  # the metadata: ranges, precision decisions, activation type
        key = _pick(rng, [_RANGE_KEY, _RANGE_KEY, _PRECISION_KEY, _ACTIVATIONS_KEY])
        kept = [p for p in model.metadata_props if p.key != key]
        del model.metadata_props[:]
        model.metadata_props.extend(kept)
        entry = model.metadata_props.add(key=key)
        names = [n.output[0] for n in model.graph.node] + ["nowhere", ""]
        nodes = [n.name for n in model.graph.node] + ["nowhere", ""]
        wide = [-(10.0 ** int(rng.integers(0, 60))), 10.0 ** int(rng.integers(-60, 60))]
        entry.value = _pick(rng, {
            _RANGE_KEY: [
                "", "[", "null", "[1, 2]", '{"x": 1}', '{"x": [1]}', '{"x": [2, 1]}', '{"x": ["a", "b"]}',
                '{"x": [true, false]}', '{"x": [-1e999, 1e999]}', '{"x": [NaN, 1]}',
                "{" + '"a": [0, 1], ' * 3000 + "}", json.dumps({_pick(rng, names): wide}),
                json.dumps({name: [0.0, 0.0] for name in names})],
            _PRECISION_KEY: [
                "", "[]", '{"float": []}', '{"int16": {}}', '{"float": {"x": 1}}',
                json.dumps({"float": {_pick(rng, nodes): "why"}}), json.dumps({"int16": nodes}),
                json.dumps({"float": dict.fromkeys(nodes, "all"), "int16": nodes})],
            _ACTIVATIONS_KEY: ["", "int4", "int16", "INT16", "int8" * 1000]}[key])
    write_proto(model, d / MODEL)
    flags = ["--quantize"]
    if rng.random() < 0.3:
        np.savez(d / "calib.npz", **M.calibration_arrays(seed, samples=3))
        flags += ["--calibration", "calib.npz"]
    return Run([MODEL, OUT, *flags], inputs=model_inputs(d))


# --- files of a few bytes, integers at their extremes, matrix ops whose inner sizes differ --------
TINY_FILES = [b"", b"\x00", b"\x08", b"\x0a", b"\xff", b"\x3a", b"\x08\x07", b"\x3a\x00",
              b"\x3a\x7f", b"\x3a\xff\xff\xff\xff\x0f", b"\x08" + b"\xff" * 10, b"\x12\x00\x3a\x02\x0a\x00"]


def tiny_files(rng, j, d):
    """A model of zero, one or a few bytes: from a file, from stdin in-process, and from a real
    stdin in a subprocess (under the harness's address-space limit, as every case)."""
    data = TINY_FILES[(j // 3) % len(TINY_FILES)]
    if j % 3 == 0:
        (d / MODEL).write_bytes(data)
        return Run([MODEL, OUT], inputs=(MODEL,))
    return Run(["-", OUT], inputs=(), stdin=data, subprocess=j % 3 == 2, cpu_seconds=10.0)


def _model_int_fields(m: onnx.ModelProto) -> list[tuple[str, Callable[[int], None]]]:
    """Every integer of the model a user's file controls, named: the graph's (_int_fields), the
    opsets', the IR and model versions, value_info dims and the initializers' int64 data."""
    fields = [(f"graph field {k}", setter) for k, setter in enumerate(_int_fields(m))]
    fields += [("ir_version", lambda v: setattr(m, "ir_version", v)),
               ("model_version", lambda v: setattr(m, "model_version", v))]
    fields += [(f"opset {o.domain or 'ai.onnx'}", lambda v, o=o: setattr(o, "version", v))
               for o in m.opset_import]
    for vi in m.graph.value_info:
        for dim in vi.type.tensor_type.shape.dim:
            fields.append((f"value_info {vi.name}", lambda v, dim=dim: setattr(dim, "dim_value", v)))
    for t in m.graph.initializer:
        if t.data_type == TensorProto.INT64:
            values = numpy_helper.to_array(t).reshape(-1)
            for k in range(values.size):
                def set_(v, t=t, k=k):
                    data = numpy_helper.to_array(t).copy()
                    data.reshape(-1)[k] = np.int64(v)
                    t.CopyFrom(numpy_helper.from_array(data, t.name))
                fields.append((f"{t.name}[{k}]", set_))
    return fields


INT64_EXTREMES = [-2**63, -2**31 - 1, -2**31, -1, 0, 2**31 - 1, 2**31, 2**32, 2**63 - 1]


def int_extremes(rng, j, d):
    """One integer of a seed model at an extreme of its type (int64, or int32 for the fields
    protobuf stores as int32), every field in turn."""
    seed = M.SEED_MODELS[j % 2]  # convnet, dense: the external model's data is a file of its own
    m = M.seed_model(seed)
    fields = _model_int_fields(m)
    _, setter = fields[(j // 2) % len(fields)]
    value = INT64_EXTREMES[(j // 2 // len(fields) + j) % len(INT64_EXTREMES)]
    try:
        setter(value)
    except ValueError:  # an int32 field
        setter(max(-2**31, min(2**31 - 1, value)))
    return model_run(rng, d, m, seed)


def _matrix_case(k: int) -> tuple[onnx.ModelProto, list[str]]:
    """A model whose matrix op reads operands with inner sizes one apart, and the flags."""
    rng = np.random.default_rng(k)
    f32 = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    cases = [
        ("MatMul", [8, 16], {"w": f32(17, 4)}, {}),
        ("MatMul", [2, 8, 16], {"w": f32(15, 4)}, {}),
        ("MatMul", [2, 8, 16], {"w": f32(3, 16, 4)}, {}),  # batch 2 against 3
        ("Gemm", [4, 16], {"w": f32(17, 4)}, {}),
        ("Gemm", [4, 16], {"w": f32(4, 17)}, {"transB": 1}),
        ("Gemm", [16, 4], {"w": f32(17, 4)}, {"transA": 1}),
        ("Gemm", [4, 16], {"w": f32(16, 4), "c": f32(5)}, {}),  # bias does not broadcast
        ("Conv", [1, 3, 8, 8], {"w": f32(4, 2, 3, 3)}, {"kernel_shape": [3, 3]}),
        ("Conv", [1, 4, 8, 8], {"w": f32(4, 1, 3, 3)}, {"kernel_shape": [3, 3], "group": 3}),
        ("Conv", [1, 3, 8, 8], {"w": f32(4, 3, 3, 3), "b": f32(5)}, {"kernel_shape": [3, 3]}),
        ("ConvTranspose", [1, 3, 8, 8], {"w": f32(4, 2, 3, 3)}, {"kernel_shape": [3, 3]}),
        ("ConvTranspose", [1, 4, 8, 8], {"w": f32(4, 2, 3, 3), "b": f32(3)}, {"kernel_shape": [3, 3]}),
        ("Conv1d", [1, 3, 8], {"w": f32(4, 5, 3)}, {"kernel_shape": [3]}),
        ("LSTM", [5, 1, 6], {"w": f32(1, 32, 7), "r": f32(1, 32, 8)}, {"hidden_size": 8}),
        ("LSTM", [5, 1, 6], {"w": f32(1, 32, 6), "r": f32(1, 32, 7)}, {"hidden_size": 8}),
        ("LSTM", [5, 1, 6], {"w": f32(1, 28, 6), "r": f32(1, 28, 7)}, {"hidden_size": 7}),
        ("MatMulFlatten", [1, 3, 8, 8], {"w": f32(190, 4)}, {}),
    ]
    op, x_shape, inits, attrs = cases[k % len(cases)]
    flags = []
    if op == "MatMulFlatten":
        nodes = [helper.make_node("Flatten", ["x"], ["f"], name="flatten"),
                 helper.make_node("MatMul", ["f", "w"], ["y"], name="matmul")]
    elif op == "Conv1d":
        nodes = [helper.make_node("Conv", ["x", *inits], ["y"], name="conv1d", **attrs)]
    elif op == "LSTM":
        nodes = [helper.make_node("LSTM", ["x", "w", "r"], ["y"], name="lstm", **attrs)]
    else:
        nodes = [helper.make_node(op, ["x", *inits], ["y"], name=op.lower(), **attrs)]
    if k >= len(cases):  # the second round: the input pinned with its last dimension one larger
        flags = ["--input-shape", "x:" + ",".join(str(s + (1 if i == len(x_shape) - 1 else 0))
                                                   for i, s in enumerate(x_shape))]
    return M._model(nodes, {"x": x_shape}, ["y"], inits), flags


def matrix_inner(rng, j, d):
    """Every matrix op (MatMul, Gemm, Conv, ConvTranspose, LSTM, Flatten into MatMul) with
    operands whose inner sizes differ by one, from the file or through --input-shape."""
    model, flags = _matrix_case(j)
    return model_run(rng, d, model, "dense", p_float=1.0, extra=flags)


# --- the list -------------------------------------------------------------------------------------
KINDS: list[tuple[str, Callable, int]] = [
    ("bytes_flip", bytes_flip, 90),
    ("bytes_truncate", bytes_truncate, 60),
    ("bytes_splice", bytes_splice, 72),
    ("init_size", init_size, 24),
    ("init_dims", init_dims_extreme, 24),
    ("dtype_enum", dtype_enum, 42),
    ("input_dims", input_dims, 32),
    ("attr_ints", attr_ints_extreme, 36),
    ("attr_type", attr_type, 36),
    ("attr_dup", attr_dup_unknown, 12),
    ("conv_weights", conv_weights, 21),
    ("graph_struct", graph_struct, 52),
    ("names", names, 32),
    ("external", external_data, 42),
    ("broadcast_reshape", broadcast_reshape, 39),
    ("weight_values", weight_values, 30),
    ("opset_meta", opset_meta, 27),
    ("zero_sized", zero_sized, 12),
    ("random_field", random_field, 60),
    ("calib_values", calib_values, 48),
    ("calib_schema", calib_schema, 32),
    ("calib_pickle", calib_pickle, 8),
    ("calib_npy_header", calib_npy_header, 28),
    ("calib_zip", calib_zip, 33),
    ("calib_dir", calib_dir, 22),
    ("calib_bomb", calib_bomb, 8),
    ("cli_input_shape", cli_input_shape, 28),
    ("cli_default_range", cli_default_range, 24),
    ("cli_numbers", cli_numbers, 32),
    ("cli_paths", cli_paths, 40),
    ("cli_stdio", cli_stdio, 28),
    ("tflite_corrupt", tflite_corrupt, 48),
    ("qdq_model", qdq_model, 48),
    ("tiny_files", tiny_files, 36),
    ("int_extremes", int_extremes, 120),
    ("matrix_inner", matrix_inner, 34),
]
BUILDERS = {kind: builder for kind, builder, _ in KINDS}


def all_cases() -> list[Case]:
    cases = []
    for kind, _, count in KINDS:
        cases += [Case(f"case_{len(cases) + i:04d}", kind, i) for i in range(count)]
    return cases


def main(argv: list[str]) -> None:
    """python -m tests.fuzz.cases CASE_ID [DIR]: writes the case's files into DIR and prints how
    to run it."""
    import shlex
    import tempfile

    case = next(c for c in all_cases() if c.id == argv[0])
    directory = Path(argv[1]) if len(argv) > 1 else Path(tempfile.mkdtemp(prefix=f"{case.id}-"))
    directory.mkdir(parents=True, exist_ok=True)
    run = case.build(directory)
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in run.env.items())
    print(f"# {case.id} ({case.kind}); allowed exit codes {sorted(run.allowed)}")
    redirect = {"closed": " <&-"}.get(run.stdin_mode, "")
    redirect += {"closed": " >&-", "full": " >/dev/full", "broken": " | true"}.get(run.stdout_mode, "")
    feed = " < stdin.bin" if run.stdin else ""
    if run.stdin:
        (directory / "stdin.bin").write_bytes(run.stdin)
    print(f"cd {shlex.quote(str(directory))} && {env + ' ' if env else ''}qconvert "
          f"{' '.join(shlex.quote(a) for a in run.args)}{feed}{redirect}")


if __name__ == "__main__":
    main(sys.argv[1:])
