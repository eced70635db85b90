"""Every node conformance case of the onnx package whose ops qconvert imports converts, runs in
ai-edge-litert's interpreter, and matches the suite's expected outputs."""

import pytest

from tests.ops.conformance import expected_failure, run_case, supported_cases

CASES = supported_cases()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_node_case(case):
    reason = expected_failure(case)
    if reason:
        with pytest.raises(Exception):
            run_case(case)
        pytest.xfail(reason)
    run_case(case)
