"""Weight rounding for the layer's output and bias correction (quantize/rounding.py, fed by the
float model's measured layer inputs, plan/layer_inputs.py), end to end in LiteRT against
onnxruntime.

- A 1x1 conv whose 63 weights each sit 0.4 of a step above an integer (and one at 127 steps, which
  fixes the scale), on inputs whose mean is 5: round-to-nearest lowers every weight by 0.4 steps,
  so the output's mean moves by 0.4 * step * 63 * 5 -- measured within 10 % of that; bias
  correction takes it back (the mean error falls below 5 % of it).
- A 1x1 conv whose rows each hold one large weight (which sets a coarse step for the rest), on
  inputs that are mostly one shared value (correlated channels, as on the flat background of an
  image): rounded for its output, the int8 output's SQNR is more than 7 dB above
  round-to-nearest's (38 -> 47 dB here; the output's own int8 step bounds it).
- numerics: on random layers the output error is never above round-to-nearest's; every integer
  stays within [-127, 127]; per-row second moments give the shared ones' answer.
"""

import numpy as np
from onnx import TensorProto, helper

from qconvert.quantize.rounding import bias_shift, round_for_output
from tests.harness import convert_quantized, make_model, run_onnxruntime, run_tflite

F = TensorProto.FLOAT
CHANNELS = 64


def biased_conv():
    """(model, calibration, predicted mean shift of round-to-nearest)."""
    rng = np.random.default_rng(0)
    step = 1.0 / 127
    integers = rng.integers(1, 120, CHANNELS).astype(np.float64)
    w = (integers + 0.4) * step
    w[0] = 127 * step  # the largest weight fixes the scale at `step`
    weights = w.astype(np.float32).reshape(1, CHANNELS, 1, 1)
    model = make_model([helper.make_node("Conv", ["x", "w", "b"], ["y"])], {"x": (F, (1, CHANNELS, 4, 4))},
                       {"y": F}, {"w": weights, "b": np.zeros(1, np.float32)})
    calibration = {"x": (5 + 0.5 * rng.standard_normal((32, 1, CHANNELS, 4, 4))).astype(np.float32)}
    shift = -0.4 * step * 5 * (CHANNELS - 1)
    return model, calibration, shift


def _errors(model, calibration, tmp_path, **options):
    flatbuffer, report = convert_quantized(model, calibration, tmp_path, **options)
    errors = []
    for k in range(8):
        feeds = {name: samples[k] for name, samples in calibration.items()}
        want = run_onnxruntime(model, feeds)["y"]
        errors.append(run_tflite(flatbuffer, report, feeds)["y"] - want)
    return np.stack(errors), want


def test_bias_correction_takes_back_the_mean_shift_of_rounding(tmp_path):
    model, calibration, shift = biased_conv()
    nearest, _ = _errors(model, calibration, tmp_path, round_for_output=False, correct_bias=False)
    corrected, _ = _errors(model, calibration, tmp_path, round_for_output=False, correct_bias=True)
    assert abs(nearest.mean() - shift) < 0.1 * abs(shift), (nearest.mean(), shift)
    assert abs(corrected.mean()) < 0.05 * abs(shift), (corrected.mean(), shift)


def correlated_dense():
    """A 1x1 conv (a dense layer at every position of an 8x8 map: enough patches to round for)."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal((16, CHANNELS))
    w[:, 0] = 20 * np.sign(w[:, 0])  # one large weight per row sets a coarse step for the others
    w = w.astype(np.float32).reshape(16, CHANNELS, 1, 1)
    model = make_model([helper.make_node("Conv", ["x", "w"], ["y"])], {"x": (F, (1, CHANNELS, 8, 8))},
                       {"y": F}, {"w": w})
    shared = 1 + 0.05 * rng.standard_normal((32, 1, CHANNELS, 8, 8))
    return model, {"x": shared.astype(np.float32)}


def test_rounding_for_the_output_beats_nearest_on_correlated_inputs(tmp_path):
    model, calibration = correlated_dense()

    def sqnr(**options):
        errors, want = _errors(model, calibration, tmp_path, correct_bias=False, **options)
        reference = np.stack([run_onnxruntime(model, {"x": calibration["x"][k]})["y"] for k in range(8)])
        return 10 * np.log10(np.sum(reference ** 2) / np.sum(errors ** 2))

    nearest, output = sqnr(round_for_output=False), sqnr(round_for_output=True)
    assert output > nearest + 7, (nearest, output)


def test_the_numerics_never_lose_to_nearest_and_stay_in_range():
    rng = np.random.default_rng(2)
    for rows, d in ((8, 9), (32, 144), (16, 300)):
        w = rng.standard_normal((rows, d))
        x = rng.standard_normal((4000, d)) * rng.uniform(0.1, 3, d) + rng.standard_normal(d)
        second = x.T @ x / len(x)
        scales = np.abs(w).max(1) / 127
        nearest = np.clip(np.round(w / scales[:, None]), -127, 127)
        q = round_for_output(w, scales, second, nearest)
        error = lambda ints: np.mean((x @ (ints * scales[:, None] - w).T) ** 2)  # noqa: E731
        assert error(q) <= error(nearest) and np.abs(q).max() <= 127
        np.testing.assert_array_equal(round_for_output(w, scales, np.broadcast_to(second, (rows, d, d)), nearest), q)
        shift = bias_shift(w, q * scales[:, None], x.mean(0))
        np.testing.assert_allclose(shift, -((x @ (q * scales[:, None] - w).T).mean(0)), rtol=1e-9, atol=1e-12)
