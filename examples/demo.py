"""`make demo`: converts the bundled example with the qconvert command, shows what it wrote, and
runs it in the real TFLite interpreter next to onnxruntime; then quantizes the bundled digits CNN
(examples/digits) to int8, calibrated on a folder of digit pictures (examples/digits/images), and
compares float and int8 size and test accuracy in the interpreter."""

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
DIGITS = os.path.join(HERE, "digits")


def shown(command: list[str]) -> str:
    return "$ " + " ".join(os.path.relpath(c) if os.path.isabs(c) else c for c in command)


def main() -> None:
    command = [QCONVERT, os.path.relpath(SOURCE), os.path.relpath(TARGET), "--json"]
    print(shown(command))
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
              + (f" (ONNX axes {info['layout_permutation']}: channels-last)"
                 if info["layout_permutation"] else ""))
    for info in report["outputs"]:
        print(f"output {info['name']}: {info['shape']} {info['dtype']}")

    image = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    expected = ort.InferenceSession(SOURCE, providers=["CPUExecutionProvider"]).run(None, {"image": image})[0]
    runner = Interpreter(model_content=data).get_signature_runner()
    actual = runner(image=np.ascontiguousarray(image.transpose(0, 2, 3, 1)))["probabilities"]
    print(f"\nTFLite interpreter vs onnxruntime on a random image: max |difference| = "
          f"{np.abs(actual - expected).max():.2e}, "
          f"top class {int(actual.argmax())} vs {int(expected.argmax())}")

    quantization()


def test_accuracy(path: str, images: np.ndarray, labels: np.ndarray) -> float:
    """Top-1 accuracy (%) of a converted digits model in the TFLite interpreter, one image at a
    time (the model's batch is 1); an int8 input is fed quantized with its own scale/zero point."""
    interpreter = Interpreter(model_path=path, num_threads=1)
    interpreter.allocate_tensors()
    source, target = interpreter.get_input_details()[0], interpreter.get_output_details()[0]
    feeds = images.transpose(0, 1, 3, 4, 2)  # NCHW -> NHWC per sample
    if source["dtype"] == np.int8:
        scale, zero_point = source["quantization"]
        feeds = np.clip(np.round(feeds / scale) + zero_point, -128, 127)
    correct = 0
    for feed, label in zip(feeds.astype(source["dtype"]), labels):
        interpreter.set_tensor(source["index"], np.ascontiguousarray(feed))
        interpreter.invoke()
        correct += int(interpreter.get_tensor(target["index"]).argmax() == label)
    return 100.0 * correct / len(labels)


def quantization() -> None:
    source = os.path.join(DIGITS, "digits_cnn.onnx")
    calibration = os.path.join(DIGITS, "images")  # 100 PNGs (make_images.py): a user's pictures
    float_path = os.path.join(HERE, "digits_cnn.tflite")
    int8_path = os.path.join(HERE, "digits_cnn_int8.tflite")
    subprocess.run([QCONVERT, source, float_path], capture_output=True, check=True)
    command = [QCONVERT, *map(os.path.relpath, (source, int8_path)), "--quantize", "--calibration",
               os.path.relpath(calibration)]
    print("\nint8: a CNN trained on scikit-learn's 8x8 digits (examples/digits/make_digits.py), "
          "calibrated on a folder of 100 digit pictures")
    print(shown(command))
    print(subprocess.run(command, capture_output=True, text=True, check=True).stderr.strip())
    with np.load(os.path.join(DIGITS, "digits_test.npz")) as data:
        images, labels = data["images"], data["labels"]
    print(f"TFLite interpreter on the {len(labels)} held-out test digits:")
    for kind, path in (("float32", float_path), ("int8", int8_path)):
        size, correct = os.path.getsize(path) / 1024, test_accuracy(path, images, labels)
        print(f"  {kind:8s}{size:5.1f} KB  accuracy {correct:.2f}%")


if __name__ == "__main__":
    main()
