"""Regenerates the digits example: a small CNN trained here, in numpy, on scikit-learn's 8x8
handwritten digits, exported as ONNX, plus the data to calibrate and score it.

The files it writes are committed, so neither the tests nor `make demo` need scikit-learn; the
quantization tests use the model to show that --quantize keeps a real classifier's accuracy.

    pip install scikit-learn   # only to regenerate
    .venv/bin/python examples/digits/make_digits.py

Writes, next to this script:
  digits_cnn.onnx          Conv(8) Relu MaxPool Conv(16) Relu MaxPool Flatten Gemm(10) -> "logits",
                           input "image" [1,1,8,8] float in [0, 1] (pixel / 16), opset 13, ir 8
  digits_calibration.npz   {"image": [100,1,1,8,8]}: the first 100 training images, for --calibration
  digits_test.npz          "images" [360,1,1,8,8], "labels" [360]: the held-out test split

Training (about 5 s) is plain minibatch Adam on cross-entropy with a fixed seed, so a rerun gives the
same files (up to the platform's float rounding); it reaches 100% train and 99.44% test accuracy.
"""

import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
SEED = 7
TEST_COUNT = 360
CALIBRATION_COUNT = 100
EPOCHS = 40
BATCH = 32
C1, C2 = 8, 16


def patches(x: np.ndarray) -> np.ndarray:
    """3x3 pad-1 patches of NCHW `x` as [N, H, W, C*9] (im2col)."""
    n, c, h, w = x.shape
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))  # N,C,H,W,3,3
    return windows.transpose(0, 2, 3, 1, 4, 5).reshape(n, h, w, c * 9)


def unpatch(grad: np.ndarray, c: int) -> np.ndarray:
    """Adjoint of patches(): sums [N, H, W, C*9] patch gradients back into an NCHW image."""
    n, h, w, _ = grad.shape
    grad = grad.reshape(n, h, w, c, 3, 3)
    out = np.zeros((n, c, h + 2, w + 2), grad.dtype)
    for i in range(3):  # nine shifted adds, one per kernel tap
        for j in range(3):
            out[:, :, i:i + h, j:j + w] += grad[:, :, :, :, i, j].transpose(0, 3, 1, 2)
    return out[:, :, 1:-1, 1:-1]


def conv(x, w, b):
    """3x3 pad-1 convolution, NCHW; returns (output, patches for the backward pass)."""
    cols = patches(x)
    out = cols @ w.reshape(w.shape[0], -1).T + b  # N,H,W,O
    return out.transpose(0, 3, 1, 2), cols


def conv_backward(grad, cols, w, x_channels):
    """(dx, dw, db) of conv() for the output gradient `grad` (NCHW)."""
    g = grad.transpose(0, 2, 3, 1)  # N,H,W,O
    dw = (g.reshape(-1, g.shape[-1]).T @ cols.reshape(-1, cols.shape[-1])).reshape(w.shape)
    db = g.sum(axis=(0, 1, 2))
    dx = unpatch(g @ w.reshape(w.shape[0], -1), x_channels)
    return dx, dw, db


def pool(x):
    """2x2 stride-2 max pooling, NCHW; returns (output, mask of the maxima)."""
    n, c, h, w = x.shape
    blocks = x.reshape(n, c, h // 2, 2, w // 2, 2)
    out = blocks.max(axis=(3, 5))
    mask = blocks == out[:, :, :, None, :, None]
    return out, mask


def pool_backward(grad, mask):
    n, c, h, _, w, _ = mask.shape
    return (mask * grad[:, :, :, None, :, None]).reshape(n, c, h * 2, w * 2)


def forward(params, x):
    """Logits and the intermediates the backward pass needs."""
    w1, b1, w2, b2, w3, b3 = params
    a1, cols1 = conv(x, w1, b1)
    r1 = np.maximum(a1, 0)
    p1, m1 = pool(r1)
    a2, cols2 = conv(p1, w2, b2)
    r2 = np.maximum(a2, 0)
    p2, m2 = pool(r2)
    flat = p2.reshape(len(x), -1)  # C,H,W order: what ONNX Flatten gives
    logits = flat @ w3.T + b3
    return logits, (cols1, a1, m1, cols2, a2, m2, flat, p2.shape)


def gradients(params, x, labels):
    """Mean cross-entropy gradients for every parameter."""
    w1, b1, w2, b2, w3, b3 = params
    logits, (cols1, a1, m1, cols2, a2, m2, flat, p2_shape) = forward(params, x)
    prob = np.exp(logits - logits.max(axis=1, keepdims=True))
    prob /= prob.sum(axis=1, keepdims=True)
    prob[np.arange(len(x)), labels] -= 1
    d_logits = prob / len(x)
    dw3, db3 = d_logits.T @ flat, d_logits.sum(axis=0)
    d_p2 = (d_logits @ w3).reshape(p2_shape)
    d_a2 = pool_backward(d_p2, m2) * (a2 > 0)
    d_p1, dw2, db2 = conv_backward(d_a2, cols2, w2, C1)
    d_a1 = pool_backward(d_p1, m1) * (a1 > 0)
    _, dw1, db1 = conv_backward(d_a1, cols1, w1, 1)
    return [dw1, db1, dw2, db2, dw3, db3]


def train(x, labels, rng):
    """Minibatch Adam; He-initialised weights, zero biases."""
    params = [rng.standard_normal((C1, 1, 3, 3)) * np.sqrt(2 / 9), np.zeros(C1),
              rng.standard_normal((C2, C1, 3, 3)) * np.sqrt(2 / (C1 * 9)), np.zeros(C2),
              rng.standard_normal((10, C2 * 4)) * np.sqrt(1 / (C2 * 4)), np.zeros(10)]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    lr, beta1, beta2, step = 0.005, 0.9, 0.999, 0
    for epoch in range(EPOCHS):
        order = rng.permutation(len(x))
        for start in range(0, len(x), BATCH):
            batch = order[start:start + BATCH]
            step += 1
            for k, g in enumerate(gradients(params, x[batch], labels[batch])):
                m[k] = beta1 * m[k] + (1 - beta1) * g
                v[k] = beta2 * v[k] + (1 - beta2) * g * g
                m_hat, v_hat = m[k] / (1 - beta1 ** step), v[k] / (1 - beta2 ** step)
                params[k] -= lr * m_hat / (np.sqrt(v_hat) + 1e-8)
        if epoch == EPOCHS * 3 // 4:
            lr /= 5
    return params


def export(params, path):
    """The trained CNN as an ONNX model (opset 13, ir_version 8, batch 1)."""
    w1, b1, w2, b2, w3, b3 = (np.asarray(p, np.float32) for p in params)
    inits = [numpy_helper.from_array(v, n) for n, v in
             [("conv1.w", w1), ("conv1.b", b1), ("conv2.w", w2), ("conv2.b", b2), ("fc.w", w3), ("fc.b", b3)]]
    same = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
    pool2 = {"kernel_shape": [2, 2], "strides": [2, 2]}
    nodes = [
        helper.make_node("Conv", ["image", "conv1.w", "conv1.b"], ["conv1"], **same),
        helper.make_node("Relu", ["conv1"], ["relu1"]),
        helper.make_node("MaxPool", ["relu1"], ["pool1"], **pool2),
        helper.make_node("Conv", ["pool1", "conv2.w", "conv2.b"], ["conv2"], **same),
        helper.make_node("Relu", ["conv2"], ["relu2"]),
        helper.make_node("MaxPool", ["relu2"], ["pool2"], **pool2),
        helper.make_node("Flatten", ["pool2"], ["flat"]),
        helper.make_node("Gemm", ["flat", "fc.w", "fc.b"], ["logits"], transB=1),
    ]
    graph = helper.make_graph(
        nodes, "digits_cnn", [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8,
                              producer_name="qconvert examples/digits/make_digits.py")
    onnx.checker.check_model(model)
    onnx.save(model, path)


def main() -> None:
    from sklearn.datasets import load_digits  # only needed here: pip install scikit-learn

    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[:, None, None]  # N,1,1,8,8: one model input each
    labels = digits.target.astype(np.int64)
    rng = np.random.default_rng(SEED)
    order = rng.permutation(len(images))
    test, training = order[:TEST_COUNT], order[TEST_COUNT:]

    params = train(images[training, 0].astype(np.float64), labels[training], rng)
    for name, split in (("train", training), ("test", test)):
        logits, _ = forward(params, images[split, 0].astype(np.float64))
        print(f"{name} accuracy: {100 * np.mean(logits.argmax(axis=1) == labels[split]):.2f}%")

    export(params, os.path.join(HERE, "digits_cnn.onnx"))
    calibration = images[training[:CALIBRATION_COUNT]]
    np.savez_compressed(os.path.join(HERE, "digits_calibration.npz"), image=calibration)
    np.savez_compressed(os.path.join(HERE, "digits_test.npz"), images=images[test], labels=labels[test])


if __name__ == "__main__":
    main()
