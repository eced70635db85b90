"""What a .tflite file holds (`qconvert inspect FILE.tflite [--json]`, in cli.py) and what LiteRT's default
delegate (XNNPACK) makes of it. Works on any .tflite, also one another tool wrote.

Read from the flatbuffer with the generated bindings (no weight is read, the file is mapped):
operator codes, every subgraph's ops and tensors, buffers (inline, or appended after the
flatbuffer with an offset and a size: the large-model format), metadata entries, signatures.
Then LiteRT loads the file with its default op resolver, which applies XNNPACK, and each op of the
main subgraph (0) is placed in the delegate partition that runs it, or left to the interpreter
(delegate_partitions says how). When LiteRT cannot load the file, everything read from the
flatbuffer is still shown and the delegation says why it is unknown.

The text output is for a person: long quantization vectors are summarised. --json prints
everything exactly (float32 values as the shortest decimal that reads back to the same float;
NaN and infinities, which JSON lacks, as the strings "nan", "inf", "-inf"), keys in this order:

  file, size          the path as given, the file's size in bytes
  schema_version, description (null when the file has none)
  operator_codes      [{index, op, builtin_code, deprecated_builtin_code, custom_code, version}]
                      builtin_code: the operator number, max(builtin_code,
                      deprecated_builtin_code) of the file (codes above 127 only have the first);
                      op: its BuiltinOperator name (the number as text when this schema does not
                      know it); custom_code: a CUSTOM op's name, else null
  subgraphs           [{index, name, inputs, outputs, operators, tensors}]
    operators         [{index, op, builtin_code, custom_code, version, opcode_index, inputs, outputs,
                      calls, delegate_partition}]; inputs, outputs: tensor indices (-1: an omitted
                      optional input); calls: the subgraphs a control-flow op runs ({"then": 1,
                      "else": 2} for IF, {"cond": .., "body": ..} for WHILE), else null;
                      delegate_partition: the index of the partition (see
                      delegation) that runs the op, null when the interpreter runs it, when the
                      delegation is unknown, and in subgraphs other than 0
    tensors           [{index, name, dtype, shape, shape_signature, buffer, bytes, is_variable,
                      quantization}]; shape_signature: null when the file has none; bytes: the
                      size of the tensor's buffer (0: no data); quantization: null, or {scales,
                      zero_points, quantized_dimension, min, max}
  buffers             [{index, bytes, offset, location}]; offset: the data's offset in the file;
                      location: "inline" (inside the flatbuffer), "appended" (after it), or null
                      with offset null when the buffer holds no data
  metadata            [{name, buffer, bytes}]
  signatures          [{key, subgraph, inputs: [{name, tensor}], outputs: [{name, tensor}]}]
  delegation          {delegate, runtime, known, reason, ops, delegated_ops, partitions,
                      partition_ops}, for subgraph 0: runtime: the LiteRT package and version;
                      ops: the subgraph's op count; partitions: how many DELEGATE nodes XNNPACK
                      made; partition_ops: each one's op indices. known false: LiteRT could not
                      load the file, reason says why, delegated_ops and partitions are null

LiteRT's own log line "Replacing N out of M node(s) with delegate ..., yielding K partitions"
counts in K the runs of ops left to the interpreter too; `partitions` here counts DELEGATE nodes.
"""

from __future__ import annotations

import json
import mmap
import os
import signal
import struct
import subprocess
import sys

from ..errors import ConversionError, first_line
from ..tflite import schema_generated as S
from ..tflite.reader import builtin_code, data_offset, dtype_name, op_name
from .metrics import json_number
from .runtimes import quiet_native_stderr

DELEGATE = "XNNPACK"  # LiteRT's default delegate, applied by its default op resolver
CHILD_TIMEOUT_S = 120  # LiteRT loading a file in inspect's child process
LISTED_VALUES = 3  # the text output lists quantization vectors up to this length, else summarises
# What the bindings raise on bytes that are not a well-formed flatbuffer.
# (TypeError: the flatbuffers runtime's "bad number -28 for type uint32" on a corrupt offset.)
_MALFORMED = (struct.error, IndexError, ValueError, OverflowError, TypeError)


# --- the flatbuffer ------------------------------------------------------------------------------
def map_file(path: str):
    """The file's bytes, mapped read-only (a large model is never read whole); ConversionError
    unless it starts like a TFLite flatbuffer (identifier TFL3, as LiteRT requires)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
    if size < 8 or not S.Model.ModelBufferHasIdentifier(data, 0):
        raise ConversionError(f"{path}: not a TFLite file (no TFL3 flatbuffer identifier)")
    return data


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("utf-8", "replace")


def _vector(table, field: str) -> list:
    """A vector field of a flatbuffer table as a list of Python numbers ([] when absent)."""
    if getattr(table, f"{field}IsNone")():
        return []
    return getattr(table, f"{field}AsNumpy")().tolist()


def _floats(table, field: str) -> list:
    """A float vector field, non-finite values as JSON-safe strings."""
    return [json_number(v) for v in _vector(table, field)]


def _operator_code(code, index: int) -> dict:
    number = builtin_code(code)
    return {"index": index, "op": op_name(number), "builtin_code": number,
            "deprecated_builtin_code": code.DeprecatedBuiltinCode(),
            "custom_code": _text(code.CustomCode()), "version": code.Version()}


def _buffer(buffer, index: int) -> dict:
    """A buffer's size and where its data is: inline, or appended at offset (when offset > 1:
    0 and 1 mean unused)."""
    if buffer.DataLength():
        return {"index": index, "bytes": buffer.DataLength(), "offset": data_offset(buffer),
                "location": "inline"}
    if buffer.Offset() > 1:
        return {"index": index, "bytes": buffer.Size(), "offset": buffer.Offset(),
                "location": "appended"}
    return {"index": index, "bytes": 0, "offset": None, "location": None}


def _quantization(q) -> dict | None:
    """The tensor's quantization parameters, None without any (converters often write an empty
    table for float tensors)."""
    if q is None:
        return None
    params = {"scales": _floats(q, "Scale"), "zero_points": _vector(q, "ZeroPoint"),
              "quantized_dimension": q.QuantizedDimension(), "min": _floats(q, "Min"),
              "max": _floats(q, "Max")}
    return params if any(params[k] for k in ("scales", "zero_points", "min", "max")) else None


def _tensor(t, index: int, buffers: list[dict]) -> dict:
    return {"index": index, "name": _text(t.Name()) or "", "dtype": dtype_name(t.Type()),
            "shape": _vector(t, "Shape"),
            "shape_signature": None if t.ShapeSignatureIsNone() else _vector(t, "ShapeSignature"),
            "buffer": t.Buffer(), "bytes": buffers[t.Buffer()]["bytes"],
            "is_variable": bool(t.IsVariable()), "quantization": _quantization(t.Quantization())}


# The options tables that name subgraphs, with their fields: control-flow ops run other subgraphs.
_CALLS = {"IfOptions": ("then", "else"), "WhileOptions": ("cond", "body")}


def _calls(op) -> dict | None:
    """The subgraphs an IF or WHILE runs, by role ({"then": 1, "else": 2}); None for other ops."""
    kind = next((k for k, v in vars(S.BuiltinOptions).items() if v == op.BuiltinOptionsType()), None)
    if kind not in _CALLS or op.BuiltinOptions() is None:
        return None
    table = getattr(S, kind)()
    table.Init(op.BuiltinOptions().Bytes, op.BuiltinOptions().Pos)
    return {role: getattr(table, role.capitalize() + "SubgraphIndex")() for role in _CALLS[kind]}


def _operator(op, index: int, codes: list[dict]) -> dict:
    code = codes[op.OpcodeIndex()]
    return {"index": index, "op": code["op"], "builtin_code": code["builtin_code"],
            "custom_code": code["custom_code"], "version": code["version"],
            "opcode_index": op.OpcodeIndex(), "inputs": _vector(op, "Inputs"),
            "outputs": _vector(op, "Outputs"), "calls": _calls(op), "delegate_partition": None}


def _subgraph(graph, index: int, codes: list[dict], buffers: list[dict]) -> dict:
    return {"index": index, "name": _text(graph.Name()), "inputs": _vector(graph, "Inputs"),
            "outputs": _vector(graph, "Outputs"),
            "operators": [_operator(graph.Operators(i), i, codes) for i in range(graph.OperatorsLength())],
            "tensors": [_tensor(graph.Tensors(i), i, buffers) for i in range(graph.TensorsLength())]}


def _tensor_maps(signature, field: str) -> list[dict]:
    """A signature's inputs or outputs: [{name, tensor}]."""
    maps = (getattr(signature, field)(i) for i in range(getattr(signature, f"{field}Length")()))
    return [{"name": _text(m.Name()), "tensor": m.TensorIndex()} for m in maps]


def _signature(signature) -> dict:
    return {"key": _text(signature.SignatureKey()), "subgraph": signature.SubgraphIndex(),
            "inputs": _tensor_maps(signature, "Inputs"), "outputs": _tensor_maps(signature, "Outputs")}


def read_structure(data) -> dict:
    """Everything the flatbuffer says (see the module docstring's keys, schema_version to
    signatures); raises the bindings' errors (_MALFORMED) on a broken file."""
    model = S.Model.GetRootAs(data, 0)
    codes = [_operator_code(model.OperatorCodes(i), i) for i in range(model.OperatorCodesLength())]
    buffers = [_buffer(model.Buffers(i), i) for i in range(model.BuffersLength())]
    metadata = (model.Metadata(i) for i in range(model.MetadataLength()))
    return {"schema_version": model.Version(), "description": _text(model.Description()),
            "operator_codes": codes,
            "subgraphs": [_subgraph(model.Subgraphs(i), i, codes, buffers)
                          for i in range(model.SubgraphsLength())],
            "buffers": buffers,
            "metadata": [{"name": _text(m.Name()), "buffer": m.Buffer(),
                          "bytes": buffers[m.Buffer()]["bytes"]} for m in metadata],
            "signatures": [_signature(model.SignatureDefs(i))
                           for i in range(model.SignatureDefsLength())]}


# --- delegation ----------------------------------------------------------------------------------
class DelegationUnknown(Exception):
    """LiteRT could not tell which ops its delegate takes; the message says why."""


def delegate_partitions(nodes: list[dict]) -> list[list[int]]:
    """The op indices each delegate partition runs, from LiteRT's node list (the private
    `Interpreter._get_ops_details()`: LiteRT has no public view of delegation).

    Once a delegate is applied, the node list is the main subgraph's ops, in the file's order,
    followed by one DELEGATE node per partition, whose inputs and outputs are the tensors that
    cross the partition's boundary. A partition's ops are found by walking back from the DELEGATE
    node's outputs through the op that writes each tensor, stopping at its inputs: every tensor
    met on the way that is not an input is written inside the partition. Ops in no partition are
    the interpreter's (an op whose result no output of its partition needs would count as the
    interpreter's; converters do not write such ops)."""
    writer = {int(t): node["index"] for node in nodes if node["op_name"] != "DELEGATE"
              for t in node["outputs"]}
    by_index = {node["index"]: node for node in nodes}
    partitions = []
    for delegate in (node for node in nodes if node["op_name"] == "DELEGATE"):
        boundary = {int(t) for t in delegate["inputs"]}
        pending = [int(t) for t in delegate["outputs"]]
        members = set()
        while pending:
            tensor = pending.pop()
            op = writer.get(tensor)
            if tensor in boundary or op is None or op in members:
                continue
            members.add(op)
            pending.extend(int(t) for t in by_index[op]["inputs"] if t >= 0)
        partitions.append(sorted(members))
    return partitions


def interpreter_partitions(interpreter) -> tuple[list[list[int]], int]:
    """(each delegate partition's op indices, the main subgraph's op count) of a LiteRT
    interpreter whose tensors are allocated (delegates are applied then)."""
    nodes = interpreter._get_ops_details()
    return delegate_partitions(nodes), sum(node["op_name"] != "DELEGATE" for node in nodes)


def litert_partitions(path: str, op_count: int) -> list[list[int]]:
    """Each delegate partition's op indices once LiteRT has loaded `path` with its default
    delegate; DelegationUnknown when it cannot load it or its nodes do not match the file's
    `op_count` ops of subgraph 0.

    LiteRT runs in a child process (`_child_partitions`): inspect takes any .tflite, also a
    hostile one, and a file LiteRT crashes on (a SIGSEGV in allocate_tensors, a heap abort) must
    end in "the delegation is unknown, LiteRT crashed", not take qconvert down with it."""
    try:
        child = _child(path)
    except subprocess.TimeoutExpired:
        raise DelegationUnknown(f"LiteRT did not load the file within {CHILD_TIMEOUT_S} s") from None
    if child.returncode < 0:
        raise DelegationUnknown(f"LiteRT crashed loading the file ({signal.Signals(-child.returncode).name})")
    try:
        answer = json.loads(child.stdout.decode().strip().splitlines()[-1])
    except (ValueError, IndexError, UnicodeDecodeError):
        raise DelegationUnknown(f"LiteRT's child process ended with exit {child.returncode} and "
                                "no answer") from None
    if "error" in answer:
        raise DelegationUnknown(answer["error"])
    if answer["listed"] != op_count:
        raise DelegationUnknown(f"LiteRT lists {answer['listed']} ops in the main subgraph, the file "
                                f"has {op_count}")
    return answer["partitions"]


def _child(*args: str) -> subprocess.CompletedProcess:
    """`python -m qconvert.check.inspect_tflite ARGS` (this module's child process) with this qconvert
    importable, its output captured; TimeoutExpired after CHILD_TIMEOUT_S."""
    package_root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))  # above qconvert/
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (package_root, os.environ.get("PYTHONPATH")) if p))
    return subprocess.run([sys.executable, "-m", "qconvert.check.inspect_tflite", *args],
                          capture_output=True, env=env, timeout=CHILD_TIMEOUT_S)


def _child_partitions(path: str) -> dict:
    """In the child process: {"partitions", "listed"} (interpreter_partitions), or {"error"}."""
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError as e:
        return {"error": f"LiteRT is not installed ({e})"}
    try:
        with quiet_native_stderr():
            interpreter = Interpreter(model_path=path, num_threads=1)
            interpreter.allocate_tensors()
    except (ValueError, RuntimeError) as e:
        return {"error": f"LiteRT cannot load the file: {first_line(e)}"}
    try:
        partitions, listed = interpreter_partitions(interpreter)
    except (AttributeError, KeyError, TypeError) as e:  # a private API that may change
        return {"error": f"this LiteRT does not list its nodes ({e!r})"}
    return {"partitions": partitions, "listed": listed}


def _runtime() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"ai-edge-litert {version('ai-edge-litert')}"
    except PackageNotFoundError:
        return None


def delegation(path: str, subgraphs: list[dict]) -> dict:
    """The "delegation" entry for the file at `path`; also sets delegate_partition on the ops of
    subgraph 0 that a partition runs."""
    operators = subgraphs[0]["operators"] if subgraphs else []
    result = {"delegate": DELEGATE, "runtime": _runtime(), "known": False, "reason": None,
              "ops": len(operators), "delegated_ops": None, "partitions": None, "partition_ops": []}
    try:
        if not subgraphs:
            raise DelegationUnknown("the file has no subgraph")
        partitions = litert_partitions(path, len(operators))
    except DelegationUnknown as e:
        result["reason"] = str(e)
        return result
    for number, members in enumerate(partitions):
        for index in members:
            operators[index]["delegate_partition"] = number
    result.update(known=True, delegated_ops=sum(map(len, partitions)), partitions=len(partitions),
                  partition_ops=partitions)
    return result


def inspect_file(path: str) -> dict:
    """The whole inspection of the .tflite at `path` (the --json output)."""
    data = map_file(path)
    try:
        structure = read_structure(data)
    except _MALFORMED as e:
        raise ConversionError(f"{path}: not a valid TFLite flatbuffer ({type(e).__name__}: "
                              f"{first_line(e)})") from None
    report = {"file": path, "size": len(data), **structure}
    report["delegation"] = delegation(path, report["subgraphs"])
    return report


# --- text ----------------------------------------------------------------------------------------
def _number(value) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _brief(values: list) -> str:
    """A vector for a person: one value, a short list, or its range and length."""
    if len(values) == 1:
        return _number(values[0])
    if len(values) <= LISTED_VALUES or not all(isinstance(v, (int, float)) for v in values):
        return "[" + ", ".join(map(_number, values)) + "]"
    return f"{_number(min(values))}..{_number(max(values))} ({len(values)} values)"


def quantization_text(q: dict | None) -> str:
    """`scale 0.0235 zp -3`; per channel with the axis; "-" when not quantized."""
    if q is None:
        return "-"
    parts = []
    if q["scales"]:
        parts.append(f"scale {_brief(q['scales'])}")
    if q["zero_points"]:
        zero_points = q["zero_points"]
        same = len(set(zero_points)) == 1
        parts.append(f"zp {_number(zero_points[0]) if same else _brief(zero_points)}")
    if len(q["scales"]) > 1:
        parts.append(f"axis {q['quantized_dimension']}")
    if q["min"] or q["max"]:
        parts.append(f"min {_brief(q['min'])} max {_brief(q['max'])}")
    return " ".join(parts)


def _shape_text(tensor: dict) -> str:
    shape = "[" + ",".join(map(str, tensor["shape"])) + "]"
    signature = tensor["shape_signature"]
    if signature is not None and signature != tensor["shape"]:
        shape += " sig [" + ",".join(map(str, signature)) + "]"
    return shape


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    """Rows as lines of left-aligned columns, indented under their heading."""
    widths = [max(len(row[k]) for row in rows) for k in range(len(rows[0]))]
    return ["  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]


def _runner(op: dict, subgraph: int, delegation: dict) -> str:
    """Who runs an op: the delegate partition, the interpreter, "?" when delegation is unknown,
    "-" outside the main subgraph."""
    if subgraph != 0:
        return "-"
    if not delegation["known"]:
        return "?"
    partition = op["delegate_partition"]
    return "interpreter" if partition is None else f"{delegation['delegate']} {partition}"


def _op_rows(graph: dict, delegation: dict) -> list[tuple[str, ...]]:
    rows = [("op", "name/version", "runs on", "inputs", "outputs")]
    for op in graph["operators"]:
        name = f"{op['custom_code']} (custom)" if op["custom_code"] is not None else op["op"]
        calls = op.get("calls")
        runs = f" ({', '.join(f'{role} {k}' for role, k in calls.items())})" if calls else ""
        rows.append((str(op["index"]), f"{name}/{op['version']}{runs}", _runner(op, graph["index"], delegation),
                     ",".join(map(str, op["inputs"])), ",".join(map(str, op["outputs"]))))
    return rows


def _tensor_rows(graph: dict) -> list[tuple[str, ...]]:
    rows = [("tensor", "dtype", "shape", "bytes", "quantization", "name")]
    for t in graph["tensors"]:
        rows.append((str(t["index"]), t["dtype"], _shape_text(t), str(t["bytes"]),
                     quantization_text(t["quantization"]), t["name"]))
    return rows


def delegation_text(delegation: dict) -> str:
    """`XNNPACK: 9 of 11 ops in 3 partitions`, or why it is unknown."""
    if not delegation["known"]:
        return f"{delegation['delegate']}: unknown: {delegation['reason']}"
    count = delegation["partitions"]
    return (f"{delegation['delegate']}: {delegation['delegated_ops']} of {delegation['ops']} ops "
            f"in {count} partition{'' if count == 1 else 's'}")


def _header(report: dict) -> list[str]:
    buffers = report["buffers"]
    appended = sum(b["bytes"] for b in buffers if b["location"] == "appended")
    lines = [f"{report['file']}: {report['size']} bytes, schema version {report['schema_version']}, "
             f"subgraphs {len(report['subgraphs'])}",
             f"description: {report['description'] if report['description'] is not None else '-'}",
             f"buffers: {len(buffers)}, {sum(b['bytes'] for b in buffers)} bytes of data"
             + (f" ({appended} appended after the flatbuffer)" if appended else "")]
    if report["metadata"]:
        lines.append("metadata: " + ", ".join(f"{m['name']} ({m['bytes']} bytes)"
                                              for m in report["metadata"]))
    for s in report["signatures"]:
        inputs, outputs = (", ".join(f"{m['name']} (tensor {m['tensor']})" for m in s[side]) or "-"
                           for side in ("inputs", "outputs"))
        lines.append(f"signature {s['key']} on subgraph {s['subgraph']}: inputs {inputs}; "
                     f"outputs {outputs}")
    return lines


def format_text(report: dict) -> str:
    """The inspection for a person: header, signatures, then per subgraph its ops (with the
    delegation line for subgraph 0) and tensors."""
    lines = _header(report)
    if not report["subgraphs"]:
        lines.append(delegation_text(report["delegation"]))
    for graph in report["subgraphs"]:
        lines += ["", f"subgraph {graph['index']} {graph['name'] or '-'}: "
                      f"{len(graph['operators'])} ops, {len(graph['tensors'])} tensors, "
                      f"inputs {graph['inputs']}, outputs {graph['outputs']}"]
        lines += _table(_op_rows(graph, report["delegation"]))
        if graph["index"] == 0:
            lines.append(delegation_text(report["delegation"]))
        lines += _table(_tensor_rows(graph))
    return "\n".join(lines)


def litert_crash(path: str) -> str | None:
    """Why running the .tflite at `path` would take this process down, or None: LiteRT loads,
    allocates and invokes it once on zeros, with its default delegate and without, in a child
    process; a signal or a hang there is the answer. (A file LiteRT refuses with an exception is
    not a crash: the caller meets that exception itself.) `qconvert verify` asks before it runs a
    file in-process that any tool may have written."""
    try:
        child = _child("--run", path)
    except subprocess.TimeoutExpired:
        return f"LiteRT did not run the file within {CHILD_TIMEOUT_S} s"
    if child.returncode < 0:
        return f"LiteRT crashed running the file ({signal.Signals(-child.returncode).name})"
    return None


def _child_run(path: str) -> None:
    """In the child process: load, allocate and invoke on zeros, with and without the default
    delegate; an exception ends the child normally (only a crash matters to the parent)."""
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    for resolver in (OpResolverType.AUTO, OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES):
        try:
            with quiet_native_stderr():
                interpreter = Interpreter(model_path=path, num_threads=1,
                                          experimental_op_resolver_type=resolver)
                interpreter.allocate_tensors()
                for detail in interpreter.get_input_details():
                    interpreter.set_tensor(detail["index"], np.zeros(detail["shape"], detail["dtype"]))
                interpreter.invoke()
        except Exception:  # refused or failed without crashing: the parent runs into it itself
            return


if __name__ == "__main__":  # the child process of litert_partitions, or of litert_crash (--run)
    if sys.argv[1] == "--run":
        _child_run(sys.argv[2])
    else:
        print(json.dumps(_child_partitions(sys.argv[1])))
