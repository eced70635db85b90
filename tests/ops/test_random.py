"""Random ops (qconvert/ops/random.py) and their check (qconvert/check/random_draws.py).

Each op converted through the CLI with the default check, which must pass (exit 0) with the draws
fed to both sides and say so; then the written file itself, its random kernels kept, run in LiteRT
over many invokes: its draws' moments (mean and standard deviation within five standard errors,
uniform draws inside [low, high), Bernoulli's and Multinomial's frequencies) are the op's. The
VITS-style noise (x + noise_scale * RandomNormalLike(x), the scale an input), at a dynamic length
too; a noise scale of zero gives onnxruntime's output exactly; two conversions give the same
bytes; a wrong conversion fails the check."""

from __future__ import annotations

import json
import warnings

import numpy as np
import onnx
import pytest
from ai_edge_litert.interpreter import Interpreter
from click.testing import CliRunner
from onnx import TensorProto, helper

from qconvert.cli import cli, verify_cli
from tests.harness import assert_refused_in_one_line, make_model, run_onnxruntime

F, D, I32, I64, B = (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT32, TensorProto.INT64,
                     TensorProto.BOOL)
SIGMAS = 5  # moments within this many standard errors


def _converted(tmp_path, model: onnx.ModelProto, *flags: str) -> tuple[bytes, dict, str]:
    """The CLI's conversion with its default check: (the file, the --json report, stderr);
    asserts exit 0 and that the check fed the draws of every random node."""
    onnx.save(model, tmp_path / "m.onnx")
    out = tmp_path / "m.tflite"
    result = CliRunner().invoke(cli, [str(tmp_path / "m.onnx"), str(out), "--json", *flags])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    randoms = [n.output[0] for n in model.graph.node if n.op_type.startswith(("Random", "Bern", "Multi"))]
    fed = report["verify"]["fed_draws"]
    assert [name.split()[-1].strip("'") for name in fed] == randoms, fed
    assert report["verify"]["passed"] and (report["verify"]["check"] == "float" or "--quantize" in flags)
    assert "random ops' draws fed to both sides" in result.stderr, result.stderr
    return out.read_bytes(), report, result.stderr


def _draws(data: bytes, feeds: dict[str, np.ndarray], invokes: int) -> dict[str, np.ndarray]:
    """The written file's outputs over `invokes` invokes of one interpreter (each continues the
    kernels' sequences), stacked."""
    runner = Interpreter(model_content=data, num_threads=1).get_signature_runner()
    runs = [runner(**feeds) for _ in range(invokes)]
    return {name: np.stack([r[name] for r in runs]) for name in runs[0]}


def _assert_moments(values: np.ndarray, mean: float, std: float) -> None:
    n = values.size
    values = values.astype(np.float64)
    assert abs(values.mean() - mean) < SIGMAS * std / np.sqrt(n), (values.mean(), mean)
    assert abs(values.std() - std) < SIGMAS * std / np.sqrt(2 * n) + 1e-6, (values.std(), std)


# --- RandomNormal, RandomNormalLike -------------------------------------------------------------
@pytest.mark.parametrize("shape,mean,scale,dtype,seed", [
    ((2, 3), 0.0, 1.0, F, None), ((4, 5, 6), 1.5, 0.5, F, 3.0), ((3, 1, 2, 8), -2.0, 3.0, D, None),
    ((64,), 0.25, 2.0, F, -7.5)])
def test_random_normal(tmp_path, shape, mean, scale, dtype, seed):
    attrs = {"shape": list(shape), "mean": mean, "scale": scale, "dtype": dtype}
    attrs.update({} if seed is None else {"seed": seed})
    model = make_model([helper.make_node("RandomNormal", [], ["r"], **attrs),
                        helper.make_node("Relu", ["r"], ["y"])], {}, {"y": dtype, "r": dtype})
    data, report, _ = _converted(tmp_path, model)
    assert report["op_counts"]["RANDOM_STANDARD_NORMAL"] == 1
    r = _draws(data, {}, 20000 // int(np.prod(shape)) + 1)["r"]
    assert r.dtype == onnx.helper.tensor_dtype_to_np_dtype(dtype)
    _assert_moments(r, mean, scale)


@pytest.mark.parametrize("x_shape,attrs", [
    ((16,), {}), ((3, 40), {"mean": -1.0}), ((2, 4, 50), {"scale": 0.1, "seed": 1.0}),
    ((1, 3, 8, 8), {"mean": 2.0, "scale": 4.0, "dtype": F})])
def test_random_normal_like(tmp_path, x_shape, attrs):
    """The shape (and type) of its input."""
    model = make_model([helper.make_node("RandomNormalLike", ["x"], ["n"], **attrs),
                        helper.make_node("Add", ["x", "n"], ["y"])], {"x": (F, x_shape)}, {"y": F})
    data, report, _ = _converted(tmp_path, model)
    x = np.zeros(report["inputs"][0]["shape"], np.float32)  # (in the file's layout)
    y = _draws(data, {"x": x}, 20000 // int(np.prod(x_shape)) + 1)["y"]
    _assert_moments(y, attrs.get("mean", 0.0), attrs.get("scale", 1.0))


def test_random_normal_like_of_float16(tmp_path):
    """A float16 model's noise: drawn and scaled in float32, the output float16."""
    model = make_model([helper.make_node("RandomNormalLike", ["x"], ["n"], scale=0.5),
                        helper.make_node("Add", ["x", "n"], ["y"])],
                       {"x": (TensorProto.FLOAT16, (4, 64))}, {"y": TensorProto.FLOAT16})
    data, _, _ = _converted(tmp_path, model)
    y = _draws(data, {"x": np.zeros((4, 64), np.float16)}, 80)["y"]
    assert y.dtype == np.float16
    _assert_moments(y, 0.0, 0.5)


# --- RandomUniform, RandomUniformLike -----------------------------------------------------------
@pytest.mark.parametrize("shape,low,high,dtype,seed", [
    ((2, 3), 0.0, 1.0, F, None), ((5, 7), -1.0, 3.0, F, 2.0), ((4, 2, 6), 2.0, 2.5, D, None),
    ((100,), -10.0, -9.0, F, 0.0)])
def test_random_uniform(tmp_path, shape, low, high, dtype, seed):
    attrs = {"shape": list(shape), "low": low, "high": high, "dtype": dtype}
    attrs.update({} if seed is None else {"seed": seed})
    model = make_model([helper.make_node("RandomUniform", [], ["u"], **attrs),
                        helper.make_node("Abs", ["u"], ["y"])], {}, {"y": dtype, "u": dtype})
    data, report, _ = _converted(tmp_path, model)
    assert report["op_counts"]["RANDOM_UNIFORM"] == 1
    u = _draws(data, {}, 20000 // int(np.prod(shape)) + 1)["u"]
    assert u.min() >= low and u.max() < high
    _assert_moments(u, (low + high) / 2, (high - low) / np.sqrt(12))


@pytest.mark.parametrize("x_shape,x_type,attrs", [
    ((10,), F, {}), ((2, 3, 40), F, {"low": -5.0, "high": 5.0}),
    ((6, 9), D, {"low": 1.0, "high": 4.0, "seed": 11.0}), ((3, 50), I32, {"dtype": F})])
def test_random_uniform_like(tmp_path, x_shape, x_type, attrs):
    """Its input's shape, and its type unless `dtype` names one (an int32 input's, float)."""
    model = make_model([helper.make_node("RandomUniformLike", ["x"], ["u"], **attrs),
                        helper.make_node("Neg", ["u"], ["y"])],
                       {"x": (x_type, x_shape)}, {"y": F if x_type == I32 else x_type})
    data, _, _ = _converted(tmp_path, model)
    x = np.zeros(x_shape, onnx.helper.tensor_dtype_to_np_dtype(x_type))
    u = -_draws(data, {"x": x}, 20000 // int(np.prod(x_shape)) + 1)["y"]
    low, high = attrs.get("low", 0.0), attrs.get("high", 1.0)
    assert u.min() >= low and u.max() < high
    _assert_moments(u, (low + high) / 2, (high - low) / np.sqrt(12))


# --- Bernoulli, Multinomial ---------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [None, F, I32, B])
def test_bernoulli_of_constant_probabilities(tmp_path, dtype):
    p = np.array([[0.0, 0.25, 0.5], [0.75, 0.9, 1.0]], np.float32)
    attrs = {} if dtype is None else {"dtype": dtype}
    model = make_model([helper.make_node("Add", ["p0", "x"], ["p"]),
                        helper.make_node("Bernoulli", ["p"], ["b"], **attrs)],
                       {"x": (F, (2, 3))}, {"b": F if dtype is None else dtype}, {"p0": p}, opset=15)
    data, _, _ = _converted(tmp_path, model)
    b = _draws(data, {"x": np.zeros((2, 3), np.float32)}, 4000)["b"].astype(np.float64)
    assert set(np.unique(b)) <= {0.0, 1.0}
    frequency = b.mean(axis=0)
    assert np.all(np.abs(frequency - p) <= SIGMAS * np.sqrt(p * (1 - p) / len(b))), frequency


def test_bernoulli_of_computed_probabilities(tmp_path):
    """Dropout-like: x * Bernoulli(Sigmoid(x)), checked on the check's own inputs."""
    model = make_model([helper.make_node("Sigmoid", ["x"], ["p"]),
                        helper.make_node("Bernoulli", ["p"], ["b"], seed=5.0),
                        helper.make_node("Mul", ["x", "b"], ["y"])],
                       {"x": (F, (4, 32))}, {"y": F}, opset=15)
    _converted(tmp_path, model)


@pytest.mark.parametrize("batch,classes,samples,dtype", [(1, 2, 1, None), (2, 5, 9, I64), (3, 4, 16, I32)])
def test_multinomial(tmp_path, batch, classes, samples, dtype):
    attrs = {"sample_size": samples, **({} if dtype is None else {"dtype": dtype})}
    model = make_model([helper.make_node("Multinomial", ["logits"], ["c"], **attrs)],
                       {"logits": (F, (batch, classes))}, {"c": dtype or I32})
    data, report, _ = _converted(tmp_path, model)
    assert report["op_counts"]["MULTINOMIAL"] == 1
    logits = np.linspace(-1, 1.5, batch * classes, dtype=np.float32).reshape(batch, classes)
    invokes = 20000 // (batch * samples) + 1
    c = _draws(data, {"logits": logits}, invokes)["c"]
    assert c.shape == (invokes, batch, samples) and c.min() >= 0 and c.max() < classes
    p = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    for row in range(batch):
        frequency = np.bincount(c[:, row].ravel(), minlength=classes) / c[:, row].size
        assert np.all(np.abs(frequency - p[row]) <= SIGMAS * np.sqrt(p[row] * (1 - p[row]) / c[:, row].size))


def test_multinomial_classes_index_a_table(tmp_path):
    """The drawn classes gather rows of a table: the integer draws fed to both sides."""
    table = np.arange(15, dtype=np.float32).reshape(5, 3)
    model = make_model([helper.make_node("Multinomial", ["logits"], ["c"], sample_size=4),
                        helper.make_node("Gather", ["table", "c"], ["y"], axis=0)],
                       {"logits": (F, (2, 5))}, {"y": F}, {"table": table})
    _converted(tmp_path, model)


# --- a VITS-style voice: noise scaled by an input --------------------------------------------------
def _vits_style(length) -> onnx.ModelProto:
    """Piper/VITS's sampling: text features x [1, 16, T] and scales [noise_scale, length_scale,
    noise_scale_w] (Piper's inputs); the prior's mean and log-std by 1-D convs, z = m + eps *
    exp(logs) * noise_scale with eps = RandomNormalLike(m); the duration predictor's noise
    RandomNormalLike(d) * noise_scale_w; a decoder conv and Tanh for the audio."""
    rng = np.random.default_rng(0)
    weights = {"w_m": rng.standard_normal((8, 16, 1)), "w_logs": 0.1 * rng.standard_normal((8, 16, 1)),
               "w_d": rng.standard_normal((2, 16, 1)), "w_dec": 0.3 * rng.standard_normal((1, 8, 3)),
               "i0": np.array(0, np.int64), "i2": np.array(2, np.int64)}
    weights = {k: v.astype(np.float32) if v.dtype == np.float64 else v for k, v in weights.items()}
    nodes = [helper.make_node("Conv", ["x", "w_m"], ["m"]), helper.make_node("Conv", ["x", "w_logs"], ["logs"]),
             helper.make_node("Gather", ["scales", "i0"], ["noise_scale"]),
             helper.make_node("Gather", ["scales", "i2"], ["noise_scale_w"]),
             helper.make_node("RandomNormalLike", ["m"], ["eps"]),
             helper.make_node("Exp", ["logs"], ["std"]), helper.make_node("Mul", ["eps", "std"], ["e1"]),
             helper.make_node("Mul", ["e1", "noise_scale"], ["e2"]), helper.make_node("Add", ["m", "e2"], ["z"]),
             helper.make_node("Conv", ["z", "w_dec"], ["dec"], pads=[1, 1]),
             helper.make_node("Tanh", ["dec"], ["audio"]),
             helper.make_node("Conv", ["x", "w_d"], ["d"]),
             helper.make_node("RandomNormalLike", ["d"], ["eps_w"]),
             helper.make_node("Mul", ["eps_w", "noise_scale_w"], ["dn"]), helper.make_node("Add", ["d", "dn"], ["dw"]),
             helper.make_node("ReduceMean", ["dw"], ["durations"], keepdims=0, axes=[1])]
    return make_model(nodes, {"x": (F, (1, 16, length)), "scales": (F, (3,))},
                      {"audio": F, "durations": F}, weights)


@pytest.mark.parametrize("length", [32, "T"])
def test_a_vits_style_voice_is_checked_with_its_draws_fed(tmp_path, length):
    """The default check passes (exit 0), says how it handled the randomness; with a dynamic
    length T, at every size it checks."""
    data, report, stderr = _converted(tmp_path, _vits_style(length))
    assert "RandomNormalLike 'eps', RandomNormalLike 'eps_w'" in stderr
    assert report["op_counts"]["RANDOM_STANDARD_NORMAL"] == 2
    assert len(report["verify"]["other_sizes"]) == (0 if length == 32 else 2)
    from qconvert.tflite.reader import read

    assert read(data).op_counts["RANDOM_STANDARD_NORMAL"] == 2  # the written file draws


@pytest.mark.parametrize("length", [32, "T"])
def test_a_noise_scale_of_zero_gives_onnxruntimes_output(tmp_path, length):
    """The written file itself, its kernels drawing, against onnxruntime's own random run: with
    the noise scales at zero the draws drop out and the outputs agree; at one they differ from
    run to run (each invoke continues the sequence)."""
    model = _vits_style(length)
    data, report, _ = _converted(tmp_path, model)
    x = np.random.default_rng(1).standard_normal((1, 16, 32 if length == 32 else 48)).astype(np.float32)
    still = {"x": x, "scales": np.array([0.0, 1.0, 0.0], np.float32)}
    runner = Interpreter(model_content=data, num_threads=1).get_signature_runner()
    layout = {i["name"]: i["layout_permutation"] for i in report["inputs"]}
    feeds = {k: v.transpose(layout[k]) if layout[k] else v for k, v in still.items()}
    got, want = runner(**feeds), run_onnxruntime(model, still)
    for name in ("audio", "durations"):
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6, err_msg=name)
    noisy = {**feeds, "scales": np.ones(3, np.float32)}
    first, second = runner(**noisy)["audio"], runner(**noisy)["audio"]
    assert not np.allclose(first, second) and not np.allclose(first, got["audio"])


def test_two_conversions_write_the_same_bytes(tmp_path):
    """No seed in the model: the file's seeds are fixed all the same (ops/random.py)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first, _, _ = _converted(tmp_path / "a", _vits_style(32))
    second, _, _ = _converted(tmp_path / "b", _vits_style(32))
    assert first == second


def test_seeds_follow_onnx(tmp_path):
    """Two nodes of one seed draw the same values (ONNX: the same seed, the same sequence); a node
    of another seed, or of none, others; every fresh interpreter draws the file's sequence again."""
    nodes = [helper.make_node("RandomUniform", [], [name], shape=[4, 64], **attrs)
             for name, attrs in (("a", {"seed": 2.0}), ("b", {"seed": 2.0}), ("c", {"seed": 3.0}),
                                 ("d", {}), ("e", {}))]
    model = make_model(nodes, {}, dict.fromkeys("abcde", F))
    data, _, _ = _converted(tmp_path, model)
    once, again = _draws(data, {}, 2), _draws(data, {}, 2)
    assert np.array_equal(once["a"], once["b"]) and np.array_equal(once["a"], again["a"])
    assert not np.array_equal(once["a"][0], once["a"][1])  # each invoke draws on
    for x, y in (("a", "c"), ("a", "d"), ("d", "e")):
        assert not np.allclose(once[x], once[y]), (x, y)


def test_qconvert_verify_feeds_the_draws_too(tmp_path):
    _converted(tmp_path, _vits_style(32))
    result = CliRunner().invoke(verify_cli, [str(tmp_path / "m.onnx"), str(tmp_path / "m.tflite")])
    assert result.exit_code == 0, result.output
    assert "random ops' draws fed to both sides: RandomNormalLike 'eps'" in result.stderr


def test_a_wrong_conversion_of_the_draws_fails_the_check(tmp_path, monkeypatch):
    """The check compares what follows the draw: a mean off by 0.01 is a failed float check."""
    from qconvert.ops import random as random_ops

    affine = random_ops._affine
    monkeypatch.setattr(random_ops, "_affine", lambda ctx, node, kernel, scale, offset:
                        affine(ctx, node, kernel, scale, offset + 0.01))
    model = make_model([helper.make_node("RandomNormalLike", ["x"], ["n"], mean=1.0),
                        helper.make_node("Add", ["x", "n"], ["y"])], {"x": (F, (2, 8))}, {"y": F})
    onnx.save(model, tmp_path / "m.onnx")
    result = CliRunner().invoke(cli, [str(tmp_path / "m.onnx"), str(tmp_path / "m.tflite")])
    assert result.exit_code == 4, result.output
    assert "does not match onnxruntime" in result.stderr


@pytest.mark.parametrize("node,shape,match", [
    (helper.make_node("RandomUniform", [], ["y"], shape=[2], low=1.0, high=0.5), None, "below its low"),
    (helper.make_node("Multinomial", ["x"], ["y"], sample_size=0), (2, 3), "draws nothing"),
    (helper.make_node("Multinomial", ["x"], ["y"], sample_size=2), (2, 0), "no classes")])
def test_what_tflite_cannot_draw_is_refused(node, shape, match):
    inputs = {"x": (F, shape)} if node.input else {}
    output = I32 if node.op_type == "Multinomial" else F
    assert_refused_in_one_line(make_model([node], inputs, {"y": output}), match)


def test_int8_keeps_the_kernels_float_and_plans_with_the_draws_fed(tmp_path):
    """--quantize: the random kernels stay float (TFLite has no int8 one); the precision plan's
    measurements and the check feed the draws, so the plan is judged on the graph, not on two
    generators' differences."""
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "cal.npz", x=rng.standard_normal((16, 1, 16, 32)).astype(np.float32),
             scales=np.tile(np.array([0.667, 1.0, 0.8], np.float32), (16, 1)))
    _, report, stderr = _converted(tmp_path, _vits_style(32), "--quantize", "--calibration",
                                   str(tmp_path / "cal.npz"))
    assert "plan: all int8" in stderr and "2 RANDOM_STANDARD_NORMAL" in stderr, stderr
    assert report["verify"]["check"] == "sqnr" and report["verify"]["outputs"][0]["sqnr_db"] > 20


def test_a_torch_exported_voice(tmp_path):
    """torch.onnx.export's RandomNormalLike (torch.randn_like, its dtype spelled out) in a small
    VITS-shaped voice: text convs, the prior sampled with the scales input's noise scales, a
    decoder with a transposed conv; its length T dynamic, checked at every size."""
    torch = pytest.importorskip("torch")

    class Voice(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.enc, self.proj = torch.nn.Conv1d(16, 16, 3, padding=1), torch.nn.Conv1d(16, 16, 1)
            self.dp = torch.nn.Conv1d(16, 2, 1)
            self.dec = torch.nn.Sequential(torch.nn.Conv1d(8, 8, 5, padding=2), torch.nn.LeakyReLU(0.1),
                                           torch.nn.ConvTranspose1d(8, 4, 4, stride=2, padding=1),
                                           torch.nn.Tanh())

        def forward(self, x, scales):
            h = torch.relu(self.enc(x))
            m, logs = self.proj(h).split(8, dim=1)
            z = m + torch.randn_like(m) * torch.exp(logs) * scales[0]
            w = self.dp(h) + torch.randn_like(h[:, :2]) * scales[2]
            return self.dec(z), w.sum(1)

    torch.manual_seed(0)
    path = tmp_path / "voice.onnx"
    with warnings.catch_warnings():  # (the TorchScript exporter's deprecation: no onnxscript here)
        warnings.simplefilter("ignore")
        torch.onnx.export(Voice().eval(), (torch.randn(1, 16, 40), torch.tensor([0.667, 1.0, 0.8])),
                          str(path), input_names=["x", "scales"], output_names=["audio", "w"],
                          dynamo=False, opset_version=17,
                          dynamic_axes={"x": {2: "T"}, "audio": {2: "T2"}, "w": {1: "T"}})
    _, report, _ = _converted(tmp_path, onnx.load(path))
    assert len(report["verify"]["other_sizes"]) == 2
    assert report["op_counts"]["RANDOM_STANDARD_NORMAL"] == 2


def test_a_random_node_no_output_reads_is_left_out(tmp_path):
    """The loader drops it, the file draws nothing, and the check has nothing to feed."""
    model = make_model([helper.make_node("RandomNormalLike", ["x"], ["n"]), helper.make_node("Relu", ["x"], ["y"])],
                       {"x": (F, (2, 8))}, {"y": F})
    onnx.save(model, tmp_path / "m.onnx")
    result = CliRunner().invoke(cli, [str(tmp_path / "m.onnx"), str(tmp_path / "m.tflite")])
    assert result.exit_code == 0, result.output
    assert "draws" not in result.stderr
