"""`make demo`: converts the bundled example with the qconvert command, shows what it wrote, and
runs it in the real TFLite interpreter next to onnxruntime."""

import json
import os
import subprocess
import sys

import numpy as np
import onnxruntime as ort
from ai_edge_litert.interpreter import Interpreter

from qconvert.tflite.reader import read

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "tiny_cnn.onnx")
TARGET = os.path.join(HERE, "tiny_cnn.tflite")
QCONVERT = os.path.join(os.path.dirname(sys.executable), "qconvert")


def main() -> None:
    command = [QCONVERT, SOURCE, TARGET, "--json"]
    print("$", " ".join(os.path.relpath(c) if os.path.exists(c) else c for c in command))
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    print(result.stderr.strip())
    report = json.loads(result.stdout)
    data = open(TARGET, "rb").read()
    summary = read(data)
    print(f"\nwrote {os.path.relpath(TARGET)}: {len(data)} bytes, schema version {summary.version}, "
          f"description {summary.description!r}")
    print("ops:", ", ".join(f"{name} v{version}" for name, version in summary.ops))
    for info in report["inputs"]:
        print(f"input  {info['name']}: {info['shape']} {info['dtype']}"
              + (f" (ONNX axes {info['layout_permutation']}: channels-last)" if info["layout_permutation"] else ""))
    for info in report["outputs"]:
        print(f"output {info['name']}: {info['shape']} {info['dtype']}")

    image = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    expected = ort.InferenceSession(SOURCE, providers=["CPUExecutionProvider"]).run(None, {"image": image})[0]
    runner = Interpreter(model_content=data).get_signature_runner()
    actual = runner(image=np.ascontiguousarray(image.transpose(0, 2, 3, 1)))["probabilities"]
    print(f"\nTFLite interpreter vs onnxruntime on a random image: max |difference| = "
          f"{np.abs(actual - expected).max():.2e}, top class {int(actual.argmax())} vs {int(expected.argmax())}")


if __name__ == "__main__":
    main()
