"""Start-up imports only what a path needs (issue 40): structural checks in fresh interpreters,
never timings. `import qconvert` and `import qconvert.cli` load no runtime (onnxruntime, LiteRT),
no Pillow, no numpy or onnx; `qconvert --version` and `--help` none either; a float conversion of
an .onnx file loads onnxruntime and LiteRT for its check but not Pillow (images only) nor TFLite
Micro or torch. bench/startup.py measures what these cost.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests import processes

HEAVY = ("onnxruntime", "ai_edge_litert", "PIL", "tflite_micro", "torch", "numpy", "onnx")

# Runs the CLI's main() with sys.argv[1:], then prints which of HEAVY are loaded (as JSON).
RUN_MAIN = """
import json, sys
names = json.loads(sys.argv[1])
sys.argv = ["qconvert", *sys.argv[2:]]
try:
    import qconvert.cli
    if len(sys.argv) > 1:
        qconvert.cli.main()
except SystemExit as e:
    assert not e.code, e.code
print(json.dumps(sorted(n for n in names if n in sys.modules)))
"""


def _loaded(*args: str, cwd=None) -> list[str]:
    """Which of HEAVY a fresh interpreter has loaded after importing qconvert.cli and running
    `qconvert ARGS` (none: the import alone)."""
    run = processes.run([sys.executable, "-c", RUN_MAIN, json.dumps(HEAVY), *args], capture_output=True,
                        cwd=cwd, cpu_seconds=120)
    assert run.returncode == 0, run.stderr.decode()
    return json.loads(run.stdout.decode().splitlines()[-1])


def test_importing_the_cli_loads_no_heavy_module():
    assert _loaded() == []


def test_importing_the_api_loads_no_heavy_module():
    run = processes.run([sys.executable, "-c", "import sys, json, qconvert; print(json.dumps("
                         f"sorted(n for n in {HEAVY!r} if n in sys.modules)))"], capture_output=True,
                        cpu_seconds=60)
    assert run.returncode == 0, run.stderr.decode()
    assert json.loads(run.stdout) == []


def test_version_and_help_load_no_heavy_module():
    assert _loaded("--version") == []
    assert _loaded("--help") == []
    assert _loaded("batch", "--help") == []


def test_a_float_conversion_loads_the_runtimes_it_checks_with_only(tmp_path):
    """onnx and numpy to convert, onnxruntime and LiteRT for the default check; no Pillow, TFLite
    Micro or torch. Written to /dev/null: the file is not this test's subject (its check, which
    this test is about, runs all the same and passed: exit 0)."""
    w = np.random.default_rng(0).standard_normal((16, 8)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
                              [numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8),
              tmp_path / "m.onnx")
    loaded = _loaded("m.onnx", os.devnull, cwd=tmp_path)
    assert loaded == ["ai_edge_litert", "numpy", "onnx", "onnxruntime"], loaded
