"""Every node conformance case that converts in float also converts with --quantize (calibrated on
its own first data set) and runs in ai-edge-litert's interpreter, or is refused with a one-line
ConversionError (onnxruntime cannot run the case, or its data is not calibration data): never an
internal error, a failed self-check, or a model the interpreter aborts on. The same with
--weight-only (every constant, whatever its size) and --float16. Accuracy is the per-op tests'
business (test_ops_int8.py, test_weight_only.py); this sweep guards every op and pattern the
suite has."""

import pytest
from onnx import AttributeProto

from qconvert.errors import ConversionError
from tests.harness import convert_proto, convert_quantized, run_tflite
from tests.ops.conformance import case_array, expected_failure, freeze_parameters, supported_cases

CASES = [c for c in supported_cases() if not expected_failure(c)]


def _graphs(graph):
    yield graph
    for node in graph.node:
        for a in node.attribute:
            yield from _graphs(a.g) if a.type == AttributeProto.GRAPH else ()
            for sub in a.graphs:
                yield from _graphs(sub)


def _has_constants(case) -> bool:
    """Whether the case's model (its parameters frozen) holds a constant that weight storage could
    change: an initializer, a Constant, a tensor attribute, or a Shape or Size that folds. A model
    without one converts with --weight-only or --float16 exactly as in float, which
    tests/ops/test_conformance.py already runs: the stored-weights sweep leaves it out."""
    for graph in _graphs(freeze_parameters(case)[0].graph):
        if graph.initializer or graph.sparse_initializer:
            return True
        for node in graph.node:
            if node.op_type in ("Constant", "Shape", "Size") or any(
                    a.type in (AttributeProto.TENSOR, AttributeProto.SPARSE_TENSOR) for a in node.attribute):
                return True
    return False


WITH_CONSTANTS = [c for c in CASES if _has_constants(c)]
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
@pytest.mark.parametrize("case", WITH_CONSTANTS, ids=[c.name for c in WITH_CONSTANTS])
def test_node_case_with_stored_weights_runs(case, mode):
    model, frozen = freeze_parameters(case)
    inputs = [i.name for i in case.model.graph.input]
    feeds = {n: case_array(v) for n, v in zip(inputs, case.data_sets[0][0]) if n not in frozen}
    flatbuffer, report = convert_proto(model, io_layout="onnx", weights=mode, weight_only_min_elements=1)
    outputs = run_tflite(flatbuffer, report, feeds)
    assert set(outputs) == {o.name for o in case.model.graph.output}
