"""`qconvert inspect`, through the installed console script: --json reproduces the flatbuffer
exactly (checked against flatc's object API, not qconvert's reader), its delegate partitions agree
with what LiteRT logs, files LiteRT cannot load are still listed, errors are one line."""

from __future__ import annotations

import copy
import importlib.util
import json
import re
import shutil
import sys
from pathlib import Path

import flatbuffers
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from qconvert.tflite import schema_generated as S
from tests import processes
from tests.harness import calibration_set, convert_proto, convert_quantized, grid_weights, make_model

QCONVERT = str(Path(sys.executable).parent / "qconvert")
OP_NAMES = {v: k for k, v in vars(S.BuiltinOperator).items() if not k.startswith("_")}
TYPE_NAMES = {v: k for k, v in vars(S.TensorType).items() if not k.startswith("_")}
ALIGNMENT = 16
# A file TensorFlow's converter wrote (shape signatures, empty quantization tables, its metadata),
# shipped with tflite-micro, a test dependency.
_MICRO = importlib.util.find_spec("tflite_micro")
TF_WRITTEN = Path(_MICRO.origin if _MICRO else "-").parent / "python/tflite_micro/sine_float.tflite"


def qconvert(*args, cwd=None):
    return processes.run([QCONVERT, *map(str, args)], capture_output=True, text=True, cwd=cwd,
                         cpu_seconds=120)


def inspect_json(path: Path) -> dict:
    run = qconvert("inspect", path, "--json")
    assert run.returncode == 0, run.stderr
    assert run.stderr == ""  # LiteRT's "INFO: Created TensorFlow Lite XNNPACK delegate" silenced
    return json.loads(run.stdout)


def three_convs(middle: str) -> onnx.ModelProto:
    """x -> Conv -> `middle` -> Conv -> `middle` -> Conv -> y: a chain where `middle` (an op
    XNNPACK lacks) splits the graph into three delegate partitions."""
    def node(source, target):
        if middle == "Cast":  # to int32 and back: two CASTs
            return [helper.make_node("Cast", [source], [source + "i"], to=TensorProto.INT32),
                    helper.make_node("Cast", [source + "i"], [target], to=TensorProto.FLOAT)]
        if middle == "LRN":
            return [helper.make_node("LRN", [source], [target], size=3)]
        return [helper.make_node(middle, [source], [target])]

    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]), *node("a", "b"),
             helper.make_node("Conv", ["b", "w2"], ["c"], pads=[1, 1, 1, 1]), *node("c", "d"),
             helper.make_node("Conv", ["d", "w3"], ["y"], pads=[1, 1, 1, 1])]
    weights = {"w1": grid_weights((4, 3, 3, 3)), "w2": grid_weights((4, 4, 3, 3), 1),
               "w3": grid_weights((4, 4, 3, 3), 2)}
    return make_model(nodes, {"x": (TensorProto.FLOAT, (1, 3, 8, 8))}, {"y": TensorProto.FLOAT},
                      weights)


def pack(model) -> bytes:
    builder = flatbuffers.Builder(0)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def _aligned(position: int) -> int:
    return -(-position // ALIGNMENT) * ALIGNMENT


def appended_buffers(data: bytes) -> bytes:
    """The same model in the large-model format: every buffer's data after the flatbuffer, found
    by the buffer's offset and size."""
    model = S.ModelT.InitFromPackedBuf(data, 0)
    moved = [(b, bytes(b.data)) for b in model.buffers if b.data is not None and len(b.data)]
    for buffer, blob in moved:
        buffer.data, buffer.offset, buffer.size = None, 1 << 40, len(blob)  # final field widths
    position = _aligned(len(pack(model)))
    for buffer, blob in moved:
        buffer.offset, position = position, _aligned(position + len(blob))
    out = bytearray(pack(model))
    for buffer, blob in moved:
        out += bytes(buffer.offset - len(out)) + blob
    return bytes(out)


def unloadable(data: bytes) -> bytes:
    """A file LiteRT cannot load: the SIN is a custom op "MySin"; also a GELU (code 150, above the
    deprecated field's 127) and a second subgraph."""
    model = S.ModelT.InitFromPackedBuf(data, 0)
    for code in model.operatorCodes:
        name = OP_NAMES[max(code.builtinCode, code.deprecatedBuiltinCode)]
        if name == "SIN":
            code.builtinCode = code.deprecatedBuiltinCode = S.BuiltinOperator.CUSTOM
            code.customCode = b"MySin"
        elif name == "FLOOR":
            code.builtinCode, code.deprecatedBuiltinCode = S.BuiltinOperator.GELU, 127
    second = copy.deepcopy(model.subgraphs[0])
    second.name = b"second"
    model.subgraphs.append(second)
    return pack(model)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    """float.tflite (Conv, Sin, Conv, Floor, Conv: XNNPACK takes all), lrn.tflite (float, LRN
    between the convs), lrn_int8.tflite and cast_int8.tflite (int8 convs around float LRN /
    CAST pairs), appended.tflite (float.tflite in the large-model format), custom.tflite
    (see unloadable), and sine_float.tflite (TensorFlow's converter wrote it) when tflite-micro
    is installed."""
    root = tmp_path_factory.mktemp("inspect")
    plain = three_convs("Sin")
    plain.graph.node[3].op_type = "Floor"
    (root / "float.tflite").write_bytes(convert_proto(plain)[0])
    (root / "lrn.tflite").write_bytes(convert_proto(three_convs("LRN"))[0])
    for middle in ("LRN", "Cast"):
        model = three_convs(middle)
        data = convert_quantized(model, calibration_set(model), root)[0]
        (root / f"{middle.lower()}_int8.tflite").write_bytes(data)
    float_data = (root / "float.tflite").read_bytes()
    (root / "appended.tflite").write_bytes(appended_buffers(float_data))
    (root / "custom.tflite").write_bytes(unloadable(float_data))
    if TF_WRITTEN.exists():
        shutil.copy(TF_WRITTEN, root / "sine_float.tflite")
    return root


# --- the JSON against an independent read ---------------------------------------------------------
def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode()


def _list(values) -> list:
    return [] if values is None else np.asarray(values).tolist()


def _buffer_bytes(buffer) -> int:
    if buffer.data is not None and len(buffer.data):
        return len(buffer.data)
    return buffer.size if buffer.offset > 1 else 0


def flatc_view(data: bytes) -> dict:
    """The facts --json must reproduce, read with flatc's object API."""
    model = S.ModelT.InitFromPackedBuf(data, 0)
    sizes = [_buffer_bytes(b) for b in model.buffers]
    subgraphs = []
    for graph in model.subgraphs:
        ops = []
        for op in graph.operators:
            code = model.operatorCodes[op.opcodeIndex]
            number = max(code.builtinCode, code.deprecatedBuiltinCode)
            ops.append((OP_NAMES[number], number, _text(code.customCode), code.version,
                        _list(op.inputs), _list(op.outputs)))
        tensors = []
        for t in graph.tensors:
            q = t.quantization
            scales = _list(q.scale) if q is not None else []
            tensors.append((t.name.decode(), TYPE_NAMES[t.type], _list(t.shape),
                            None if t.shapeSignature is None else _list(t.shapeSignature),
                            sizes[t.buffer], scales, _list(q.zeroPoint) if q is not None else [],
                            q.quantizedDimension if scales else None))
        subgraphs.append((_text(graph.name), _list(graph.inputs), _list(graph.outputs), ops, tensors))
    signatures = [(_text(s.signatureKey), s.subgraphIndex,
                   [(_text(m.name), m.tensorIndex) for m in s.inputs],
                   [(_text(m.name), m.tensorIndex) for m in s.outputs]) for s in model.signatureDefs or []]
    metadata = [(_text(m.name), sizes[m.buffer]) for m in model.metadata or []]
    return {"version": model.version, "description": _text(model.description),
            "subgraphs": subgraphs, "buffers": sizes, "signatures": signatures, "metadata": metadata}


def json_view(report: dict) -> dict:
    """The same facts, from the --json output."""
    subgraphs = []
    for graph in report["subgraphs"]:
        ops = [(op["op"], op["builtin_code"], op["custom_code"], op["version"], op["inputs"],
                op["outputs"]) for op in graph["operators"]]
        tensors = []
        for t in graph["tensors"]:
            q = t["quantization"] or {"scales": [], "zero_points": []}
            tensors.append((t["name"], t["dtype"], t["shape"], t["shape_signature"], t["bytes"],
                            q["scales"], q["zero_points"],
                            q["quantized_dimension"] if q["scales"] else None))
        subgraphs.append((graph["name"], graph["inputs"], graph["outputs"], ops, tensors))
    signatures = [(s["key"], s["subgraph"], [(m["name"], m["tensor"]) for m in s["inputs"]],
                   [(m["name"], m["tensor"]) for m in s["outputs"]]) for s in report["signatures"]]
    return {"version": report["schema_version"], "description": report["description"],
            "subgraphs": subgraphs, "buffers": [b["bytes"] for b in report["buffers"]],
            "signatures": signatures, "metadata": [(m["name"], m["bytes"]) for m in report["metadata"]]}


@pytest.mark.parametrize("name", ["float", "lrn_int8", "cast_int8", "appended", "custom",
                                  "sine_float"])
def test_json_round_trips_the_flatbuffer(files, name):
    path = files / f"{name}.tflite"
    if not path.exists():
        pytest.skip(f"{TF_WRITTEN} is missing")
    report = inspect_json(path)
    assert report["file"] == str(path) and report["size"] == path.stat().st_size
    assert json_view(report) == flatc_view(path.read_bytes())


def test_json_details(files):
    """Quantization vectors are exact and per channel; appended buffers say where they are;
    the output is the same on every run."""
    report = inspect_json(files / "lrn_int8.tflite")
    weights = [t for t in report["subgraphs"][0]["tensors"] if t["dtype"] == "INT8" and t["bytes"]]
    assert weights and all(len(t["quantization"]["scales"]) == 4 for t in weights)
    assert report["signatures"][0]["key"] == "serving_default"
    again = qconvert("inspect", files / "lrn_int8.tflite", "--json").stdout
    assert again == json.dumps(report, indent=2) + "\n"
    appended = inspect_json(files / "appended.tflite")
    data = (files / "appended.tflite").read_bytes()
    moved = [b for b in appended["buffers"] if b["bytes"]]
    assert moved and all(b["location"] == "appended" and b["offset"] % ALIGNMENT == 0 for b in moved)
    flatbuffer_end = min(b["offset"] for b in moved)
    assert all(b["offset"] >= flatbuffer_end and b["offset"] + b["bytes"] <= len(data) for b in moved)
    assert appended["delegation"]["known"] and appended["delegation"]["partitions"] == 1


def test_a_file_litert_cannot_load(files):
    report = inspect_json(files / "custom.tflite")
    delegation = report["delegation"]
    assert not delegation["known"] and delegation["partitions"] is None
    assert "MySin" in delegation["reason"]
    ops = report["subgraphs"][0]["operators"]
    assert (ops[1]["op"], ops[1]["custom_code"]) == ("CUSTOM", "MySin")
    assert (ops[3]["op"], ops[3]["builtin_code"]) == ("GELU", 150)
    gelu = next(c for c in report["operator_codes"] if c["op"] == "GELU")
    assert gelu["deprecated_builtin_code"] == 127
    assert [g["name"] for g in report["subgraphs"]] == ["main", "second"]
    text = qconvert("inspect", files / "custom.tflite")
    assert text.returncode == 0 and "MySin (custom)/1" in text.stdout
    assert ("XNNPACK: unknown: LiteRT cannot load the file: Encountered unresolved custom op: "
            "MySin") in text.stdout
    assert "subgraph 1 second: 5 ops" in text.stdout


# --- delegation against LiteRT's own count --------------------------------------------------------
# Child process: loads argv[1] in LiteRT with its log level lowered to VERBOSE, so that it prints
# "Replacing N out of M node(s) with delegate (...) node, yielding K partitions for subgraph 0".
# LiteRT logs that line below its default minimum level (INFO) and has no API to lower it: the
# level is a static variable of its library, found through the library's ELF symbol table.
_LITERT_LOG = r"""
import ctypes, struct, sys
from pathlib import Path
import ai_edge_litert.interpreter as litert

VERBOSE = 0  # tflite::TFLITE_LOG_VERBOSE
library = (Path(litert.__file__).parent / "libpywrap_litert_common.so").resolve()

def symbol_values(path, suffix):
    data = path.read_bytes()
    (start,) = struct.unpack_from("<Q", data, 0x28)
    size, count = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, start + k * size) for k in range(count)]
    values = []
    for _, kind, _, _, offset, length, link, _, _, entry in sections:
        if kind == 2:  # SHT_SYMTAB
            names = sections[link][4]
            for at in range(offset, offset + length, entry):
                name, _, _, _, value, _ = struct.unpack_from("<IBBHQQ", data, at)
                end = data.index(b"\0", names + name)
                if data[names + name:end].endswith(suffix):
                    values.append(value)
    return values

base = next(int(line.split("-")[0], 16) for line in open("/proc/self/maps")
            if line.split()[-1] == str(library) and int(line.split()[2], 16) == 0)
levels = symbol_values(library, b"MinimalLogger21minimum_log_severity_E")
if not levels:
    sys.exit(f"no minimum_log_severity_ symbol in {library}")
for value in levels:
    ctypes.c_int.from_address(base + value).value = VERBOSE
interpreter = litert.Interpreter(model_path=sys.argv[1], num_threads=1)
interpreter.allocate_tensors()
"""
_REPLACING = re.compile(r"Replacing (\d+) out of (\d+) node\(s\) with delegate \(\w+\) node, "
                        r"yielding (\d+) partitions for subgraph 0\b")


def litert_log(path: Path) -> tuple[int, int, int]:
    """(N, M, K) of LiteRT's "Replacing N out of M node(s) ... yielding K partitions" line."""
    run = processes.run([sys.executable, "-c", _LITERT_LOG, str(path)], capture_output=True,
                        text=True, cpu_seconds=120)
    assert run.returncode == 0, run.stderr
    found = _REPLACING.search(run.stderr)
    assert found, run.stderr
    return tuple(int(v) for v in found.groups())


def runs(values: list) -> list:
    """The values with consecutive repeats collapsed: [a, a, b, a] -> [a, b, a]."""
    return [v for k, v in enumerate(values) if k == 0 or v != values[k - 1]]


@pytest.mark.parametrize("name, partitions, interpreter_ops", [
    ("float", 1, []), ("lrn", 3, ["LOCAL_RESPONSE_NORMALIZATION"] * 2),
    ("lrn_int8", 3, ["LOCAL_RESPONSE_NORMALIZATION"] * 2), ("cast_int8", 3, ["CAST"] * 4)])
def test_partitions_match_litert(files, name, partitions, interpreter_ops):
    """K in LiteRT's line counts every node subset it cut the graph into: the delegated ones and
    the runs of ops left to the interpreter (float LRN: "Replacing 3 out of 5 node(s) ...,
    yielding 5 partitions", three DELEGATE nodes). In these chains the ops run in file order, so
    K is the partitions plus the runs of interpreter ops, and each partition's ops are one run."""
    report = inspect_json(files / f"{name}.tflite")
    delegation = report["delegation"]
    ops = report["subgraphs"][0]["operators"]
    replaced, nodes, subsets = litert_log(files / f"{name}.tflite")
    assert delegation["known"] and delegation["partitions"] == partitions
    assert (delegation["delegated_ops"], delegation["ops"]) == (replaced, nodes) == (
        sum(map(len, delegation["partition_ops"])), len(ops))
    order = runs([op["delegate_partition"] for op in ops])
    assert len(order) == subsets
    assert [p for p in order if p is not None] == list(range(partitions))
    assert [op["op"] for op in ops if op["delegate_partition"] is None] == interpreter_ops
    for number, members in enumerate(delegation["partition_ops"]):
        assert members == [op["index"] for op in ops if op["delegate_partition"] == number]


def test_bench_counts_delegated_ops_the_same_way(files):
    from ai_edge_litert.interpreter import Interpreter

    from bench.runners import delegated_ops
    from qconvert.check.runtimes import quiet_native_stderr

    with quiet_native_stderr():
        interpreter = Interpreter(model_path=str(files / "lrn_int8.tflite"), num_threads=1)
        interpreter.allocate_tensors()
    assert delegated_ops(interpreter) == (9, 11)


# --- text and errors -----------------------------------------------------------------------------
def test_text_output(files):
    run = qconvert("inspect", files / "lrn_int8.tflite")
    assert run.returncode == 0 and run.stderr == ""
    lines = run.stdout.splitlines()
    assert lines[0].startswith(f"{files / 'lrn_int8.tflite'}: ") and "schema version 3" in lines[0]
    assert "signature serving_default on subgraph 0: inputs x (tensor 0); outputs y (tensor 17)" in lines
    assert "XNNPACK: 9 of 11 ops in 3 partitions" in lines
    assert re.search(r"^  3 +LOCAL_RESPONSE_NORMALIZATION/1 +interpreter +5 +6$", run.stdout, re.M)
    assert re.search(r"^  1 +CONV_2D/3 +XNNPACK 0 +1,2,3 +4$", run.stdout, re.M)
    # per-channel scales: 4 values are summarised as a range; one scale is shown as it is
    assert re.search(r"^  2 +INT8 +\[4,3,3,3\] +108 +scale \S+\.\.\S+ \(4 values\) zp 0 axis 0 +w1",
                     run.stdout, re.M)
    assert re.search(r"^  1 +INT8 +\[1,8,8,3\] +0 +scale \S+ zp -?\d+ +x_int8$", run.stdout, re.M)
    float_run = qconvert("inspect", files / "float.tflite")
    assert "XNNPACK: 5 of 5 ops in 1 partition" in float_run.stdout.splitlines()


def test_errors_are_one_line(files, tmp_path):
    (tmp_path / "model.onnx").write_bytes(three_convs("Sin").SerializeToString())
    (tmp_path / "truncated.tflite").write_bytes((files / "float.tflite").read_bytes()[:64])
    for name, message in [("missing.tflite", "missing.tflite: No such file or directory"),
                          ("model.onnx", "model.onnx: not a TFLite file"),
                          ("truncated.tflite", "truncated.tflite: not a valid TFLite flatbuffer"),
                          (".", ".: Is a directory")]:
        run = qconvert("inspect", name, "--json", cwd=tmp_path)
        assert run.returncode == 1, run.stderr
        assert run.stdout == "" and run.stderr.count("\n") == 1 and "Traceback" not in run.stderr
        assert run.stderr.startswith(f"qconvert: error: {message}"), run.stderr
    usage = qconvert("inspect")
    assert usage.returncode == 2 and usage.stderr.startswith("qconvert: error: ")
    assert usage.stderr.count("\n") == 1


def test_a_file_litert_crashes_on_is_inspected_with_the_delegation_unknown(tmp_path, monkeypatch):
    """LiteRT aborts (in ADD's prepare) on requantization multipliers near 1e30, which qconvert's
    check_quantization refuses to write; written here without that check, the file must not take
    `inspect` down: LiteRT runs in a child process, and the crash becomes the reason."""
    from tests.harness import crashing_tflite

    _, path = crashing_tflite(tmp_path, monkeypatch)
    result = qconvert("inspect", str(path), "--json")
    assert result.returncode == 0, result.stderr
    delegation = json.loads(result.stdout)["delegation"]
    assert delegation["known"] is False and "LiteRT crashed loading the file" in delegation["reason"]
