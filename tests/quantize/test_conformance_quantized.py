"""Every node conformance case that converts in float also converts with --quantize (calibrated on
its own first data set) and runs in ai-edge-litert's interpreter, or is refused with a one-line
ConversionError (onnxruntime cannot run the case, or its data is not calibration data): never an
internal error, a failed self-check, or a model the interpreter aborts on. The same with
--weight-only (every constant, whatever its size) and --float16. Accuracy is the per-op tests'
business (test_ops_int8.py, test_weight_only.py); this sweep guards every op and pattern the
suite has."""

import pytest

from qconvert.errors import ConversionError
from tests.harness import convert_proto, convert_quantized, run_tflite
from tests.ops.conformance import case_array, expected_failure, freeze_parameters, supported_cases

CASES = [c for c in supported_cases() if not expected_failure(c)]
# A numpy warning while converting is a value going wrong quietly (a NaN scale, an overflow).
pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_node_case_quantizes_and_runs(case, tmp_path):
    model, frozen = freeze_parameters(case)
    inputs = [i.name for i in case.model.graph.input]
    feeds = {n: case_array(v) for n, v in zip(inputs, case.data_sets[0][0]) if n not in frozen}
    try:
        flatbuffer, report = convert_quantized(model, {n: v[None] for n, v in feeds.items()}, tmp_path,
                                               io_layout="onnx")
    except ConversionError as e:
        assert "\n" not in str(e)
        pytest.skip(f"refused: {e}")
    outputs = run_tflite(flatbuffer, report, feeds)
    assert set(outputs) == {o.name for o in case.model.graph.output}


@pytest.mark.parametrize("mode", ["int8", "float16"])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_node_case_with_stored_weights_runs(case, mode):
    model, frozen = freeze_parameters(case)
    inputs = [i.name for i in case.model.graph.input]
    feeds = {n: case_array(v) for n, v in zip(inputs, case.data_sets[0][0]) if n not in frozen}
    flatbuffer, report = convert_proto(model, io_layout="onnx", weights=mode, weight_only_min_elements=1)
    outputs = run_tflite(flatbuffer, report, feeds)
    assert set(outputs) == {o.name for o in case.model.graph.output}
