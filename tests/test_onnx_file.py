"""Reading an ONNX file with its big weights left in the file (qconvert/onnx/file.py)."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.harness import convert
from qconvert.errors import ConversionError
from qconvert.onnx.loader import load
from qconvert.onnx.file import STORED_MIN_BYTES, read_onnx

RNG = np.random.default_rng(3)
BIG = RNG.standard_normal((64, 32)).astype(np.float32)  # 8 KB: stays in the file
SMALL = RNG.standard_normal(8).astype(np.float32)  # parsed with the model
INDEX = np.arange(4096, dtype=np.int64).reshape(1, 4096) % 64  # int64, narrowed by the loader


def make_model() -> onnx.ModelProto:
    """y = Gather(Gemm(x, big, bias), index): float and int64 initializers, big and small."""
    nodes = [helper.make_node("Gemm", ["x", "big", "bias"], ["h"], transB=1, name="gemm"),
             helper.make_node("Gather", ["h", "index"], ["y"], axis=1, name="gather")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(BIG, "big"), numpy_helper.from_array(np.resize(SMALL, 64), "bias"),
         numpy_helper.from_array(INDEX, "index")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    model.graph.initializer[1].doc_string = "fields after raw data survive"
    return model


def test_big_initializers_stay_in_the_file(tmp_path):
    model = make_model()
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    source = read_onnx(str(path))
    assert set(source.stored) == {"big", "index"}
    assert np.resize(SMALL, 64).nbytes < STORED_MIN_BYTES  # so "bias" is parsed
    parsed = {t.name: t for t in source.proto.graph.initializer}
    assert not parsed["big"].HasField("raw_data") and list(parsed["big"].dims) == [64, 32]
    assert parsed["bias"].doc_string == "fields after raw data survive"
    ir = load(source)
    expected = load(onnx.load(str(path)))
    for name, array in expected.arrays.items():
        if array.is_constant:
            np.testing.assert_array_equal(ir.arrays[name].data, array.data)
            assert ir.arrays[name].data.dtype == array.data.dtype
    source = read_onnx(str(path))
    source.restore_weights()
    assert source.proto == onnx.load(str(path)) and not source.stored


def test_file_and_stdin_bytes_convert_alike(tmp_path):
    model = make_model()
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    from_file, _ = convert(str(path))
    from_bytes, _ = convert(str(path), data=path.read_bytes())
    assert bytes(from_file) == bytes(from_bytes)


def test_duplicate_initializer_names_are_one_line(tmp_path):
    """protobuf keeps both; onnx.checker refuses them ("initializer name is not unique") and
    onnxruntime takes the last with a warning: one line naming it (issue 32)."""
    model = make_model()
    model.graph.initializer.append(numpy_helper.from_array(BIG * 2, "big"))
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    with pytest.raises(ConversionError, match="graph initializer 'big' is listed twice"):
        read_onnx(str(path))


@pytest.mark.parametrize("cut", [10, 200, -100, -3])
def test_truncated_file_is_one_clear_error(tmp_path, cut):
    data = make_model().SerializeToString()
    path = tmp_path / "m.onnx"
    path.write_bytes(data[:cut])
    with pytest.raises(ConversionError) as error:
        load(read_onnx(str(path)))
    assert "\n" not in str(error.value) and "m.onnx" in str(error.value)


def test_file_changed_before_its_weights_are_read(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(make_model(), str(path))
    source = read_onnx(str(path))
    path.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(ConversionError, match="changed while being read"):
        load(source)
