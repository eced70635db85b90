"""Integer embedding tables in QDQ models (qconvert/qdq/importer.py keeps the DQ, the loader's
onnx/dynamic_quant.py notes the table, transforms/store_integer_weights.py writes it back): an
int8 or uint8 table with one scale and zero point, dequantized then gathered or gathered then
dequantized, is written with the same integers, scale and zero point; GATHER reads them and
DEQUANTIZE gives the rows onnxruntime's DequantizeLinear gives, bit for bit. What does not fit
(per-axis params, a table other ops read) is dequantized as before and still converts."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from qconvert.tflite.reader import buffer_data, read
from qconvert.transforms.pipeline import QuantizeOptions
from tests.harness import convert_proto, make_model, run_onnxruntime, run_tflite

V, D = 1000, 64


def _ids(seed: int) -> dict[str, np.ndarray]:
    return {"ids": np.random.default_rng(seed).integers(-V, V, (3, 5)).astype(np.int64)}


def _table_model(order: str, dtype, zero: int, scale=0.02, axis_scales: bool = False,
                 tied: bool = False) -> onnx.ModelProto:
    """ids [3, 5] -> y [3, 5, D] from an integer [V, D] table: DQ -> Gather ("dq_gather") or
    Gather -> DQ ("gather_dq"); `axis_scales`: one scale per column (axis 1); `tied` (with
    "dq_gather"): the dequantized table also multiplies y (a MatMul by its transpose: logits over
    the tokens)."""
    rng = np.random.default_rng(7)
    info = np.iinfo(dtype)
    q = rng.integers(info.min, info.max + 1, (V, D)).astype(dtype)
    s = (np.linspace(0.01, 0.03, D) if axis_scales else np.array(scale)).astype(np.float32)
    z = np.full(s.shape, zero, dtype)
    attrs = {"axis": 1} if axis_scales else {}
    if order == "dq_gather":
        nodes = [helper.make_node("DequantizeLinear", ["q", "s", "z"], ["table"], **attrs),
                 helper.make_node("Gather", ["table", "ids"], ["y"])]
    else:
        nodes = [helper.make_node("Gather", ["q", "ids"], ["rows"]),
                 helper.make_node("DequantizeLinear", ["rows", "s", "z"], ["y"], **attrs)]
    outputs = {"y": TensorProto.FLOAT}
    if tied:
        nodes += [helper.make_node("Transpose", ["table"], ["tied"]),
                  helper.make_node("MatMul", ["y", "tied"], ["logits"])]
        outputs["logits"] = TensorProto.FLOAT
    return make_model(nodes, {"ids": (TensorProto.INT64, (3, 5))}, outputs,
                      {"q": q, "s": s, "z": z}, opset=13)


def _tables(flatbuffer: bytes) -> list:
    """(tensor, integers) of each 8-bit constant GATHER reads."""
    model = read(flatbuffer)
    gathered = {op.inputs[0] for op in model.operators if op.name == "GATHER"}
    return [(t, buffer_data(flatbuffer, t.buffer).view(np.dtype(t.dtype.lower())).reshape(t.shape))
            for k, t in enumerate(model.tensors)
            if k in gathered and t.data_offset is not None and t.dtype in ("INT8", "UINT8")]


@pytest.mark.parametrize("order", ["dq_gather", "gather_dq"])
@pytest.mark.parametrize("dtype,zero", [(np.int8, 0), (np.int8, -3), (np.uint8, 131), (np.uint8, 0)],
                         ids=["int8", "int8_zp", "uint8", "uint8_zp0"])
def test_table_stays_integer(order, dtype, zero):
    model = _table_model(order, dtype, zero)
    flatbuffer, report = convert_proto(model)
    (tensor, q), = _tables(flatbuffer)
    stored = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    assert tensor.dtype == np.dtype(dtype).name.upper()
    np.testing.assert_array_equal(q, stored["q"])
    assert tensor.zero_points == [zero] and tensor.scales == [pytest.approx(0.02, rel=1e-7)]
    ops = [op.name for op in read(flatbuffer).operators]
    assert ops[-2:] == ["GATHER", "DEQUANTIZE"]
    for seed in (1, 2):
        feeds = _ids(seed)
        np.testing.assert_array_equal(run_tflite(flatbuffer, report, feeds)["y"],
                                      run_onnxruntime(model, feeds)["y"])


@pytest.mark.parametrize("case", ["axis_scales", "tied"])
def test_other_tables_dequantized(case):
    """Per-column params (DEQUANTIZE of the gathered rows would need them along the rows' last
    axis) and a table a MatMul reads too: the table is dequantized at load time, as before."""
    model = _table_model("dq_gather", np.int8, 0, **{case: True})
    flatbuffer, report = convert_proto(model)
    assert _tables(flatbuffer) == []
    for seed in (1, 2):
        feeds = _ids(seed)
        got, expected = run_tflite(flatbuffer, report, feeds), run_onnxruntime(model, feeds)
        np.testing.assert_array_equal(got["y"], expected["y"])
        for name in expected:
            np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, atol=1e-5)


def _static_qdq(tmp_path) -> onnx.ModelProto:
    """onnxruntime's quantize_static (QDQ) of ids -> Gather [V, D] -> Add pos -> MatMul -> y."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    rng = np.random.default_rng(8)
    nodes = [helper.make_node("Gather", ["table", "ids"], ["e"]),
             helper.make_node("Add", ["e", "pos"], ["h"]), helper.make_node("MatMul", ["h", "w"], ["y"])]
    model = make_model(nodes, {"ids": (TensorProto.INT64, (3, 5))}, {"y": TensorProto.FLOAT},
                       {"table": rng.standard_normal((V, D)).astype(np.float32),
                        "pos": rng.standard_normal((5, D)).astype(np.float32) * 0.1,
                        "w": rng.standard_normal((D, 16)).astype(np.float32) * 0.1})

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.samples = iter([_ids(seed) for seed in range(20, 28)])

        def get_next(self):
            return next(self.samples, None)

    onnx.save(model, tmp_path / "float.onnx")
    quantize_static(str(tmp_path / "float.onnx"), str(tmp_path / "qdq.onnx"), Reader(),
                    quant_format=QuantFormat.QDQ)
    return onnx.load(tmp_path / "qdq.onnx")


@pytest.mark.parametrize("quantize", [False, True], ids=["float", "quantize"])
def test_quantize_static_table(tmp_path, quantize):
    """quantize_static's DQ(int8 table) -> Gather: the float conversion keeps the table's
    integers (its other weights float, its activation pairs dropped: judged by SQNR); --quantize
    starts from the float table and writes it int8 again, on the pair's grid: the same integers."""
    model = _static_qdq(tmp_path)
    options = {"quantize": QuantizeOptions()} if quantize else {}
    flatbuffer, report = convert_proto(model, **options)
    (tensor, q), = _tables(flatbuffer)
    stored = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    assert tensor.dtype == "INT8" and tensor.zero_points == [int(stored["table_zero_point"])]
    np.testing.assert_array_equal(q, stored["table_quantized"])
    from qconvert.check.metrics import sqnr_db

    for seed in (1, 2):
        feeds = _ids(seed)
        got, expected = run_tflite(flatbuffer, report, feeds), run_onnxruntime(model, feeds)
        assert sqnr_db(expected["y"], got["y"]) > 25, sqnr_db(expected["y"], got["y"])


def test_fakequant_keeps_the_table(tmp_path):
    """`qconvert fakequant` of such a model keeps the table's DequantizeLinear (the model's own
    integers: the conversion writes the same ones), and onnxruntime runs the fake-quant model
    as LiteRT runs the --quantize conversion."""
    from qconvert.check.metrics import sqnr_db
    from tests.harness import fake_quant

    model = _static_qdq(tmp_path)
    written, _ = fake_quant("<test>", data=model.SerializeToString(), quantize=QuantizeOptions())
    fake = onnx.load_from_string(written)
    stored = {t.name: numpy_helper.to_array(t) for t in fake.graph.initializer}
    dequantized = [n for n in fake.graph.node if n.op_type == "DequantizeLinear"
                   and n.input[0] == "table_quantized"]
    assert len(dequantized) == 1 and stored["table_quantized"].dtype == np.int8
    flatbuffer, report = convert_proto(model, quantize=QuantizeOptions())
    for seed in (1, 2):
        feeds = _ids(seed)
        got, expected = run_tflite(flatbuffer, report, feeds), run_onnxruntime(fake, feeds)
        assert sqnr_db(expected["y"], got["y"]) > 30, sqnr_db(expected["y"], got["y"])
