"""onnxruntime's contrib ops (com.microsoft, and SimplifiedLayerNormalization in the ONNX domain)
against onnxruntime, which implements them: each op alone with a plain op behind it (so that
shape inference has to go through it), then a BERT-like encoder through onnxruntime's transformer
optimizer."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.harness import (
    assert_matches_onnxruntime,
    assert_refused_in_one_line,
    convert_proto,
    run_onnxruntime,
    run_tflite,
)

RNG = np.random.default_rng(29)
F = TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits=None, opset=14):
    """A model over com.microsoft version 1 and the ONNX domain at `opset`; outputs {name: type}."""
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(n, t, list(s)) for n, (t, s) in inputs.items()],
        [helper.make_tensor_value_info(n, t, None) for n, t in outputs.items()],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()])
    return helper.make_model(graph, ir_version=8, opset_imports=[
        helper.make_opsetid("", opset), helper.make_opsetid("com.microsoft", 1)])


def _ms(op_type, inputs, outputs, **attrs):
    return helper.make_node(op_type, inputs, outputs, domain="com.microsoft", **attrs)


def _normal(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _then_relu(node, x_shape, inits=None, opset=14, extra_inputs=None):
    """x -> node -> t -> Relu -> y: the Relu's shape comes from the contrib op's."""
    nodes = [node, helper.make_node("Relu", ["t"], ["y"])]
    inputs = {"x": (F, x_shape), **(extra_inputs or {})}
    return _model(nodes, inputs, {"y": F}, inits, opset)


@pytest.mark.parametrize("op_type,bias", [("Gelu", False), ("FastGelu", False), ("FastGelu", True),
                                          ("BiasGelu", True)])
def test_gelu_family(op_type, bias):
    inputs = ["x", "b"] if bias else ["x"]
    model = _then_relu(_ms(op_type, inputs, ["t"]), [2, 5, 8], {"b": _normal(8)} if bias else None)
    _, report = assert_matches_onnxruntime(model, {"x": _normal(2, 5, 8, scale=2)})
    assert report.op_counts.get("GELU") == 1


@pytest.mark.parametrize("alpha", [1.702, 1.0])
def test_quick_gelu(alpha):
    model = _then_relu(_ms("QuickGelu", ["x"], ["t"], alpha=alpha), [2, 3, 8])
    assert_matches_onnxruntime(model, {"x": _normal(2, 3, 8, scale=3)})


def _matches_plain_model(model, plain, feeds):
    """For ops onnxruntime runs on GPU only: LiteRT on the converted `model` against onnxruntime
    on `plain`, the op's definition in plain ONNX ops."""
    flatbuffer, report = convert_proto(model)
    actual, expected = run_tflite(flatbuffer, report, feeds), run_onnxruntime(plain, feeds)
    np.testing.assert_allclose(actual["y"], expected["y"], rtol=1e-4, atol=1e-5)
    return report


def test_bias_add():
    inits = {"b": _normal(8)}
    model = _then_relu(_ms("BiasAdd", ["x", "b", "s"], ["t"]), [2, 6, 8], inits,
                       extra_inputs={"s": (F, [2, 6, 8])})
    plain = _model([helper.make_node("Add", ["x", "b"], ["xb"]), helper.make_node("Add", ["xb", "s"], ["t"]),
                    helper.make_node("Relu", ["t"], ["y"])], {"x": (F, [2, 6, 8]), "s": (F, [2, 6, 8])},
                   {"y": F}, inits)
    _matches_plain_model(model, plain, {"x": _normal(2, 6, 8), "s": _normal(2, 6, 8)})


def test_bias_split_gelu():
    inits = {"b": _normal(8), "halves": np.array([4, 4], np.int64)}
    model = _then_relu(_ms("BiasSplitGelu", ["x", "b"], ["t"]), [2, 6, 8], inits)
    plain = _model([helper.make_node("Add", ["x", "b"], ["xb"]),
                    helper.make_node("Split", ["xb", "halves"], ["left", "right"], axis=-1),
                    helper.make_node("Gelu", ["right"], ["gate"]),
                    helper.make_node("Mul", ["left", "gate"], ["t"]),
                    helper.make_node("Relu", ["t"], ["y"])], {"x": (F, [2, 6, 8])}, {"y": F}, inits, opset=20)
    report = _matches_plain_model(model, plain, {"x": _normal(2, 6, 8, scale=2)})
    assert report.op_counts.get("GELU") == 1


@pytest.mark.parametrize("bias,beta", [(True, True), (False, True), (False, False)])
def test_skip_layer_norm(bias, beta):
    inits = {"gamma": _normal(16), "beta": _normal(16), "bias": _normal(16)}
    inputs = ["x", "skip", "gamma", "beta" if beta else "", "bias" if bias else ""]
    node = _ms("SkipLayerNormalization", inputs, ["t"], epsilon=1e-5)
    model = _then_relu(node, [2, 4, 16], inits, extra_inputs={"skip": (F, [2, 4, 16])})
    assert_matches_onnxruntime(model, {"x": _normal(2, 4, 16, scale=2), "skip": _normal(2, 4, 16)})


def test_skip_layer_norm_sum_output():
    """input_skip_bias_sum (output 3) read by the next layer, as the optimizer writes it."""
    inits = {"gamma": _normal(16), "beta": _normal(16), "bias": _normal(16)}
    nodes = [_ms("SkipLayerNormalization", ["x", "skip", "gamma", "beta", "bias"],
                 ["y", "", "", "sum"], epsilon=1e-5),
             helper.make_node("Relu", ["sum"], ["s"])]
    model = _model(nodes, {"x": (F, [2, 4, 16]), "skip": (F, [2, 4, 16])}, {"y": F, "s": F}, inits)
    assert_matches_onnxruntime(model, {"x": _normal(2, 4, 16), "skip": _normal(2, 4, 16)})


@pytest.mark.parametrize("bias,epsilon", [(True, {"epsilon": 1e-6}), (False, {})])
def test_skip_simplified_layer_norm(bias, epsilon):
    """epsilon 1e-6, and its default (1e-12): inputs of small magnitude tell them apart."""
    inits = {"gamma": _normal(16), "bias": _normal(16, scale=1e-3)}
    node = _ms("SkipSimplifiedLayerNormalization", ["x", "skip", "gamma"] + (["bias"] if bias else []),
               ["t"], **epsilon)
    model = _then_relu(node, [2, 4, 16], inits, extra_inputs={"skip": (F, [2, 4, 16])})
    assert_matches_onnxruntime(model, {"x": _normal(2, 4, 16, scale=1e-3),
                                       "skip": _normal(2, 4, 16, scale=1e-3)})


def test_simplified_layer_norm():
    """onnxruntime's RMSNorm, written in the ONNX domain."""
    node = helper.make_node("SimplifiedLayerNormalization", ["x", "scale"], ["t"], axis=-1,
                            epsilon=1e-6)
    model = _then_relu(node, [2, 5, 12], {"scale": _normal(12)})
    assert_matches_onnxruntime(model, {"x": _normal(2, 5, 12, scale=3)})


def test_layer_norm_before_opset_17():
    """onnxruntime's own LayerNormalization (ONNX domain) in an opset-14 model: onnx's shape
    inference does not know it there."""
    node = helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["t"], axis=-1, epsilon=1e-5)
    model = _then_relu(node, [2, 5, 12], {"gamma": _normal(12), "beta": _normal(12)})
    assert_matches_onnxruntime(model, {"x": _normal(2, 5, 12, scale=3)})


@pytest.mark.parametrize("attrs,a_shape,b_shape", [
    ({"alpha": 0.5}, [2, 3, 4, 5], [5, 6]),
    ({"transB": 1, "alpha": 0.125}, [2, 4, 5], [6, 5]),
    ({"transA": 1}, [2, 5, 4], [5, 6]),
    ({"transBatchA": 1}, [4, 2, 3, 5], [2, 3, 5, 6]),
    ({"transBatchA": 1, "transA": 1, "transB": 1}, [5, 2, 3, 4], [2, 3, 6, 5]),
])
def test_fused_matmul_constant_b(attrs, a_shape, b_shape):
    model = _then_relu(_ms("FusedMatMul", ["x", "w"], ["t"], **attrs), a_shape, {"w": _normal(*b_shape)})
    assert_matches_onnxruntime(model, {"x": _normal(*a_shape)})


@pytest.mark.parametrize("attrs,a_shape,b_shape", [
    ({"transB": 1, "alpha": 0.25}, [2, 3, 4, 5], [2, 3, 6, 5]),
    ({"transBatchA": 1, "transBatchB": 1}, [4, 2, 3, 5], [5, 2, 3, 6]),
    ({"transBatchB": 1, "transB": 1, "alpha": 2.0}, [2, 3, 4, 5], [6, 2, 3, 5]),
])
def test_fused_matmul_computed_b(attrs, a_shape, b_shape):
    model = _then_relu(_ms("FusedMatMul", ["x", "b"], ["t"], **attrs), a_shape,
                       extra_inputs={"b": (F, b_shape)})
    assert_matches_onnxruntime(model, {"x": _normal(*a_shape), "b": _normal(*b_shape)})


@pytest.mark.parametrize("activation,params,with_z", [
    ("Relu", [], False), ("Tanh", [], False), ("Sigmoid", [], True), ("LeakyRelu", [0.1], False),
    ("Clip", [-1.0, 2.5], False), ("Clip", [0.0, 6.0], True), ("HardSigmoid", [0.3, 0.4], False),
    ("", [], False)])
def test_fused_conv(activation, params, with_z):
    attrs = {"activation": activation} if activation else {}
    if params:
        attrs["activation_params"] = params
    attrs.update(pads=[1, 0, 1, 2], strides=[2, 1])
    inputs = ["x", "w", "b"] + (["z"] if with_z else [])
    model = _then_relu(_ms("FusedConv", inputs, ["t"], **attrs), [1, 3, 9, 8],
                       {"w": _normal(4, 3, 3, 3), "b": _normal(4)},
                       extra_inputs={"z": (F, [1, 4, 5, 8])} if with_z else None)
    feeds = {"x": _normal(1, 3, 9, 8, scale=2)}
    if with_z:
        feeds["z"] = _normal(1, 4, 5, 8)
    assert_matches_onnxruntime(model, feeds)


I = TensorProto.INT32
B, S, HIDDEN, HEADS = 2, 5, 16, 4


def _attention_model(mask_shape=None, attrs=None, sizes=(HIDDEN, HIDDEN, HIDDEN), bias=True,
                     attention_bias=False):
    """x [B, S, HIDDEN] -> Attention (mask_index an int32 input of `mask_shape`) -> Relu."""
    inits = {"w": _normal(HIDDEN, sum(sizes), scale=0.3)}
    inputs = ["x", "w", "b" if bias else "", "mask" if mask_shape else "", "",
              "ab" if attention_bias else ""]
    if bias:
        inits["b"] = _normal(sum(sizes), scale=0.3)
    extra = {"mask": (I, mask_shape)} if mask_shape else {}
    if attention_bias:
        extra["ab"] = (F, [1, HEADS, S, S])
    attrs = dict(attrs or {}, num_heads=HEADS)
    if sizes[0] != sizes[2]:
        attrs["qkv_hidden_sizes"] = list(sizes)
    while inputs[-1] == "":
        inputs.pop()
    return _then_relu(_ms("Attention", inputs, ["t"], **attrs), [B, S, HIDDEN], inits, extra_inputs=extra)


def _lengths_mask(rng_lengths=(3, 5)):
    return np.array(rng_lengths, np.int32)


def _binary_mask(*shape):
    mask = (RNG.random(shape) > 0.3).astype(np.int32)
    mask[..., 0] = 1  # no sequence fully masked
    return mask


@pytest.mark.parametrize("mask_shape,mask", [
    (None, None),
    ([B], np.array([3, 5], np.int32)),
    ([2 * B], np.array([4, 5, 1, 0], np.int32)),
    ([B, S], "binary"),
    ([B, S, S], "binary"),
])
def test_attention_masks(mask_shape, mask):
    model = _attention_model(mask_shape)
    feeds = {"x": _normal(B, S, HIDDEN)}
    if mask_shape:
        feeds["mask"] = _binary_mask(*mask_shape) if isinstance(mask, str) else mask
    _, report = assert_matches_onnxruntime(model, feeds)
    assert report.op_counts.get("SOFTMAX") == 1


@pytest.mark.parametrize("attrs,kwargs", [
    ({"unidirectional": 1}, {}),
    ({"unidirectional": 1}, {"mask_shape": [B, S]}),
    ({"scale": 0.3, "mask_filter_value": -5000.0}, {"mask_shape": [B, S]}),
    ({}, {"sizes": (8, 8, 12)}),
    ({}, {"bias": False, "attention_bias": True}),
])
def test_attention_options(attrs, kwargs):
    model = _attention_model(attrs=attrs, **kwargs)
    feeds = {"x": _normal(B, S, HIDDEN)}
    if kwargs.get("mask_shape"):
        feeds["mask"] = _binary_mask(*kwargs["mask_shape"])
    if kwargs.get("attention_bias"):
        feeds["ab"] = _normal(1, HEADS, S, S)
    assert_matches_onnxruntime(model, feeds)


def test_attention_past_is_refused():
    model = _attention_model()
    node = model.graph.node[0]
    node.input.extend(["", "past"])
    model.graph.input.append(helper.make_tensor_value_info("past", F, [2, B, HEADS, 1, HIDDEN // HEADS]))
    assert_refused_in_one_line(model, "past and present")
    present = _attention_model()
    present.graph.node[0].output.append("present")
    present.graph.output.append(helper.make_tensor_value_info("present", F, None))
    assert_refused_in_one_line(present, "past and present")


@pytest.mark.parametrize("mask_shape,bias,attrs", [
    (None, True, {}), ([B, 7], True, {}), ([B], False, {"unidirectional": 0, "scale": 0.2}),
])
def test_multi_head_attention(mask_shape, bias, attrs):
    """Cross-attention: 5 queries, 7 keys; value width 12."""
    inputs = ["q", "k", "v", "b" if bias else "", "mask" if mask_shape else ""]
    while inputs[-1] == "":
        inputs.pop()
    extra = {"k": (F, [B, 7, HIDDEN]), "v": (F, [B, 7, 12])}
    if mask_shape:
        extra["mask"] = (I, mask_shape)
    nodes = [_ms("MultiHeadAttention", inputs, ["t"], num_heads=HEADS, **attrs),
             helper.make_node("Relu", ["t"], ["y"])]
    model = _model(nodes, {"q": (F, [B, S, HIDDEN]), **extra}, {"y": F},
                   {"b": _normal(2 * HIDDEN + 12)} if bias else None)
    feeds = {"q": _normal(B, S, HIDDEN), "k": _normal(B, 7, HIDDEN), "v": _normal(B, 7, 12)}
    if mask_shape:
        feeds["mask"] = _binary_mask(*mask_shape) if len(mask_shape) == 2 else np.array([4, 7], np.int32)
    assert_matches_onnxruntime(model, feeds)


@pytest.mark.parametrize("segments,position_ids,mask", [
    (True, False, True), (False, False, False), (True, True, True)])
def test_embed_layer_norm(segments, position_ids, mask):
    inits = {"words": _normal(30, HIDDEN), "positions": _normal(12, HIDDEN), "types": _normal(2, HIDDEN),
             "gamma": _normal(HIDDEN), "beta": _normal(HIDDEN)}
    inputs = ["ids", "segment" if segments else "", "words", "positions", "types" if segments else "",
              "gamma", "beta", "mask" if mask else "", "pos" if position_ids else ""]
    while inputs[-1] == "":
        inputs.pop()
    outputs = ["t", "index"]
    nodes = [_ms("EmbedLayerNormalization", inputs, outputs, epsilon=1e-5),
             helper.make_node("Relu", ["t"], ["y"])]
    graph_inputs = {"ids": (I, [B, S])}
    feeds = {"ids": RNG.integers(0, 30, (B, S)).astype(np.int32)}
    for used, name, shape, high in ((segments, "segment", [B, S], 2), (mask, "mask", [B, S], 2),
                                    (position_ids, "pos", [B, S], 12)):
        if used:
            graph_inputs[name] = (I, shape)
            feeds[name] = RNG.integers(0, high, shape).astype(np.int32)
    model = _model(nodes, graph_inputs, {"y": F, "index": I}, inits)
    assert_matches_onnxruntime(model, feeds)


def _bert_like(batch=2, seq=6, hidden=16, heads=4, layers=2, vocab=40, ffn=32, masked=True,
               gelu="erf"):
    """A BERT encoder in plain ONNX ops as PyTorch exports it (embeddings and LayerNormalization,
    per layer Q/K/V MatMul + Add + Reshape + Transpose, Div by sqrt(size), the extended mask
    (1 - mask) * -10000, Softmax, output projection, residual Add + LayerNormalization, the erf
    GELU feed-forward, or CLIP's x * sigmoid(1.702 x)), random weights; `masked` False: no
    attention mask input."""
    inits, nodes = {}, []

    def w(name, *shape, scale=0.2):
        inits[name] = (RNG.standard_normal(shape) * scale).astype(np.float32)
        return name

    def node(op, inputs, out, **attrs):
        nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    size = hidden // heads
    inits.update(one=np.float32(1.0), neg=np.float32(-10000.0), root=np.float32(np.sqrt(size)),
                 split=np.array([0, 0, heads, size], np.int64), merge=np.array([0, 0, hidden], np.int64),
                 ax1=np.array([1], np.int64), ax2=np.array([2], np.int64), sqrt2=np.float32(np.sqrt(2.0)),
                 half=np.float32(0.5), quick=np.float32(1.702),
                 position_ids=np.arange(seq, dtype=np.int64)[None])
    s = node("Add", [node("Gather", [w("word", vocab, hidden), "input_ids"], "word_e"),
                     node("Gather", [w("pos", 32, hidden), "position_ids"], "pos_e")], "emb0")
    s = node("Add", [s, node("Gather", [w("types", 2, hidden), "token_type_ids"], "type_e")], "emb")
    h = node("LayerNormalization", [s, w("emb_g", hidden, scale=1.0), w("emb_b", hidden)], "emb_ln",
             epsilon=1e-12)
    if masked:
        m = node("Unsqueeze", [node("Unsqueeze", ["attention_mask", "ax1"], "mask_u1"), "ax2"], "mask_u2")
        m = node("Sub", ["one", node("Cast", [m], "mask_f", to=F)], "mask_inv")
        mask = node("Mul", [m, "neg"], "mask_bias")
    for n in range(layers):
        def projection(tag, perm):
            x = node("MatMul", [h, w(f"w{tag}{n}", hidden, hidden)], f"{tag}{n}_mm")
            x = node("Reshape", [node("Add", [x, w(f"b{tag}{n}", hidden)], f"{tag}{n}_add"), "split"],
                     f"{tag}{n}_r")
            return node("Transpose", [x], f"{tag}{n}_t", perm=perm)

        q, k, v = projection("q", [0, 2, 1, 3]), projection("k", [0, 2, 3, 1]), projection("v", [0, 2, 1, 3])
        x = node("Div", [node("MatMul", [q, k], f"qk{n}"), "root"], f"qk{n}_scaled")
        x = node("Softmax", [node("Add", [x, mask], f"qk{n}_masked") if masked else x], f"probs{n}", axis=-1)
        x = node("Transpose", [node("MatMul", [x, v], f"ctx{n}")], f"ctx{n}_t", perm=[0, 2, 1, 3])
        x = node("MatMul", [node("Reshape", [x, "merge"], f"ctx{n}_r"), w(f"wo{n}", hidden, hidden)], f"o{n}")
        x = node("Add", [node("Add", [x, w(f"bo{n}", hidden)], f"o{n}_add"), h], f"res{n}")
        h1 = node("LayerNormalization", [x, w(f"g1{n}", hidden, scale=1.0), w(f"e1{n}", hidden)],
                  f"ln1{n}", epsilon=1e-12)
        x = node("Add", [node("MatMul", [h1, w(f"w1{n}", hidden, ffn)], f"f1{n}"), w(f"b1{n}", ffn)],
                 f"f1{n}_add")
        if gelu == "quick":
            gate = node("Sigmoid", [node("Mul", [x, "quick"], f"gelu{n}_scaled")], f"gelu{n}_gate")
            x = node("Mul", [x, gate], f"gelu{n}")
        else:
            erf = node("Erf", [node("Div", [x, "sqrt2"], f"gelu{n}_div")], f"gelu{n}_erf")
            x = node("Mul", [node("Mul", [x, node("Add", [erf, "one"], f"gelu{n}_1p")], f"gelu{n}_mul"),
                             "half"], f"gelu{n}")
        x = node("Add", [node("MatMul", [x, w(f"w2{n}", ffn, hidden)], f"f2{n}"), w(f"b2{n}", hidden)],
                 f"f2{n}_add")
        h = node("LayerNormalization", [node("Add", [x, h1], f"res2{n}"), w(f"g2{n}", hidden, scale=1.0),
                                        w(f"e2{n}", hidden)], f"ln2{n}", epsilon=1e-12)
    nodes.append(helper.make_node("Identity", [h], ["last_hidden_state"]))
    inputs = {name: (TensorProto.INT64, [batch, seq])
              for name in ("input_ids", "token_type_ids") + (("attention_mask",) if masked else ())}
    return _model(nodes, inputs, {"last_hidden_state": F}, inits, opset=17)


@pytest.mark.parametrize("model_type,options,fused_ops", [
    ("bert", {}, {"EmbedLayerNormalization", "Attention", "SkipLayerNormalization", "BiasGelu"}),
    ("bert", {"masked": False}, {"EmbedLayerNormalization", "Attention", "BiasGelu"}),
    ("bert", {"gelu": "quick"}, {"Attention", "SkipLayerNormalization", "QuickGelu"}),
    ("clip", {"masked": False, "gelu": "quick"}, {"SkipLayerNormalization", "QuickGelu"}),
    ("gpt2", {}, {"EmbedLayerNormalization", "SkipLayerNormalization", "BiasGelu"}),
])
def test_encoder_through_onnxruntime_transformer_optimizer(model_type, options, fused_ops):
    """onnxruntime's optimizer fuses the plain encoder (EmbedLayerNormalization's mask_index
    feeding Attention, SkipLayerNormalization, BiasGelu or QuickGelu, as far as its patterns for
    the model type reach); the fused model converts and matches onnxruntime."""
    from onnxruntime.transformers.optimizer import optimize_model

    fused = optimize_model(_bert_like(**options), model_type=model_type, num_heads=4, hidden_size=16,
                           opt_level=0).model
    kinds = {n.op_type for n in fused.graph.node if n.domain == "com.microsoft"}
    assert fused_ops <= kinds, kinds
    feeds = {"input_ids": RNG.integers(0, 40, (2, 6)), "token_type_ids": RNG.integers(0, 2, (2, 6))}
    if options.get("masked", True):
        feeds["attention_mask"] = np.ones((2, 6), np.int64)
        feeds["attention_mask"][1, 4:] = 0
    _, report = assert_matches_onnxruntime(fused, feeds)
    assert report.op_counts.get("SOFTMAX") == 2


def test_encoder_through_onnxruntime_graph_optimizations(tmp_path):
    """The optimizer with onnxruntime's own graph optimizations (opt_level 1) writes Gelu and
    the Gemm forms of the projections next to Attention and SkipLayerNormalization."""
    from onnxruntime.transformers.optimizer import optimize_model

    path = tmp_path / "encoder.onnx"
    onnx.save(_bert_like(), str(path))
    fused = optimize_model(str(path), model_type="bert", num_heads=4, hidden_size=16, opt_level=1).model
    kinds = {n.op_type for n in fused.graph.node if n.domain == "com.microsoft"}
    assert {"Attention", "SkipLayerNormalization", "Gelu"} <= kinds, kinds
    feeds = {"input_ids": RNG.integers(0, 40, (2, 6)), "token_type_ids": RNG.integers(0, 2, (2, 6)),
             "attention_mask": np.array([[1] * 6, [1] * 3 + [0] * 3], np.int64)}
    assert_matches_onnxruntime(fused, feeds)


def test_shape_inference_runs_do_not_grow_with_depth(monkeypatch):
    """Ten layers of FastGelu -> MatMul: the contrib outputs' types and the plain nodes between
    them are found in one pass, so the loader runs onnx's inference a fixed number of times."""
    from qconvert.onnx import loader

    runs = []
    inference = loader._Graph._inference
    monkeypatch.setattr(loader._Graph, "_inference", lambda self, declared: runs.append(declared)
                        or inference(self, declared))
    nodes, inits, x = [], {}, "x"
    for k in range(10):
        inits[f"w{k}"] = _normal(8, 8, scale=0.3)
        nodes += [_ms("FastGelu", [x], [f"g{k}"]), helper.make_node("MatMul", [f"g{k}", f"w{k}"], [f"m{k}"])]
        x = f"m{k}"
    nodes.append(helper.make_node("Relu", [x], ["y"]))
    model = _model(nodes, {"x": (F, [2, 3, 8])}, {"y": F}, inits)
    assert_matches_onnxruntime(model, {"x": _normal(2, 3, 8)})
    assert len(runs) <= 3, runs


@pytest.mark.parametrize("mask_shape", [None, [B, S, S]])
def test_multi_head_self_attention_causal_with_bias(mask_shape):
    """Self-attention (5 queries, 5 keys), unidirectional, attention_bias [1, N, S, S]."""
    inputs = ["q", "k", "v", "", "mask" if mask_shape else "", "ab"]
    extra = {"k": (F, [B, S, HIDDEN]), "v": (F, [B, S, HIDDEN]), "ab": (F, [1, HEADS, S, S])}
    if mask_shape:
        extra["mask"] = (I, mask_shape)
    nodes = [_ms("MultiHeadAttention", inputs, ["t"], num_heads=HEADS, unidirectional=1),
             helper.make_node("Relu", ["t"], ["y"])]
    model = _model(nodes, {"q": (F, [B, S, HIDDEN]), **extra}, {"y": F})
    feeds = {"q": _normal(B, S, HIDDEN), "k": _normal(B, S, HIDDEN), "v": _normal(B, S, HIDDEN),
             "ab": _normal(1, HEADS, S, S)}
    if mask_shape:
        feeds["mask"] = _binary_mask(*mask_shape)
    assert_matches_onnxruntime(model, feeds)


@pytest.mark.parametrize("packed,kv_heads,attrs,seqlens", [
    (False, 2, {}, [4, 2]), (False, 4, {"causal": 0}, [4, 4]), (True, 1, {"scale": 0.2}, [3, 4]),
    (False, 2, {"do_rotary": 1}, [4, 4]), (False, 2, {"do_rotary": 1, "rotary_interleaved": 1}, [2, 4])])
def test_group_query_attention(packed, kv_heads, attrs, seqlens):
    """A prompt without a cache: 4 query heads sharing 4, 2 or 1 K/V heads; keys
    past seqlens_k masked; present_key and present_value read (rotary: heads of 16 features,
    onnxruntime's minimum)."""
    size = 16 if attrs.get("do_rotary") else 8
    width = (HEADS + 2 * kv_heads) * size if packed else HEADS * size
    inputs = {"q": (F, [B, S, width]), "seqlens": (I, [B]), "total": (I, [])}
    feeds = {"q": _normal(B, S, width), "seqlens": np.array(seqlens, np.int32),
             "total": np.array(S, np.int32)}
    if not packed:
        inputs.update(k=(F, [B, S, kv_heads * size]), v=(F, [B, S, kv_heads * size]))
        feeds.update(k=_normal(B, S, kv_heads * size), v=_normal(B, S, kv_heads * size))
    names = ["q", "" if packed else "k", "" if packed else "v", "", "", "seqlens", "total"]
    inits = {}
    if attrs.get("do_rotary"):
        angles = np.arange(16)[:, None] * (1e-2 ** (np.arange(8) / 8))[None]
        inits = {"cos": np.cos(angles).astype(np.float32), "sin": np.sin(angles).astype(np.float32)}
        names += ["cos", "sin"]
    nodes = [_ms("GroupQueryAttention", names, ["t", "pk", "pv"], num_heads=HEADS, kv_num_heads=kv_heads,
                 **attrs), helper.make_node("Relu", ["t"], ["y"])]
    model = _model(nodes, inputs, {"y": F, "pk": F, "pv": F}, inits)
    assert_matches_onnxruntime(model, feeds)


def test_group_query_attention_with_cache_is_refused():
    inputs = {"q": (F, [B, S, 32]), "k": (F, [B, S, 16]), "v": (F, [B, S, 16]), "pk": (F, [B, 2, 3, 8]),
              "pv": (F, [B, 2, 3, 8]), "seqlens": (I, [B]), "total": (I, [])}
    nodes = [_ms("GroupQueryAttention", ["q", "k", "v", "pk", "pv", "seqlens", "total"], ["t", "ok", "ov"],
                 num_heads=HEADS, kv_num_heads=2, name="gqa"), helper.make_node("Relu", ["t"], ["y"])]
    assert_refused_in_one_line(_model(nodes, inputs, {"y": F}), "past_key is not supported", node="gqa")


@pytest.mark.parametrize("op_type", ["SkipLayerNormalization", "SkipSimplifiedLayerNormalization"])
def test_optional_outputs_named_but_unread(op_type):
    """Statistics outputs nothing reads are not computed (nor refused)."""
    inputs = ["x", "skip", "gamma"]
    model = _then_relu(_ms(op_type, inputs, ["t", "mean", "inv_std", "sum"], epsilon=1e-5), [2, 4, 16],
                       {"gamma": _normal(16)}, extra_inputs={"skip": (F, [2, 4, 16])})
    _, report = assert_matches_onnxruntime(model, {"x": _normal(2, 4, 16), "skip": _normal(2, 4, 16)})
    assert report.op_counts.get("RSQRT") == 1


@pytest.mark.parametrize("activation,params", [
    ("Relu", {}), ("Sigmoid", {}), ("Tanh", {}), ("LeakyRelu", {"activation_alpha": 0.2}),
    ("HardSigmoid", {"activation_alpha": 0.3, "activation_beta": 0.6}), ("Elu", {"activation_alpha": 0.7}),
    ("Selu", {"activation_alpha": 1.5, "activation_gamma": 1.1})])
def test_fused_gemm(activation, params):
    """FusedGemm (onnxruntime's graph optimizer writes it): Gemm with transB, alpha and beta,
    then the activation."""
    attrs = dict(params, activation=activation, transB=1, alpha=0.5, beta=2.0)
    model = _then_relu(_ms("FusedGemm", ["x", "w", "c"], ["t"], **attrs), [3, 6],
                       {"w": _normal(5, 6), "c": _normal(5)})
    assert_matches_onnxruntime(model, {"x": _normal(3, 6, scale=2)})


def test_transpose_matmul():
    """FusedMatMul's older name."""
    model = _then_relu(_ms("TransposeMatMul", ["x", "w"], ["t"], transB=1, alpha=0.5), [2, 4, 5],
                       {"w": _normal(6, 5)})
    assert_matches_onnxruntime(model, {"x": _normal(2, 4, 5)})


@pytest.mark.parametrize("op_type", ["SkipLayerNormalization", "SkipSimplifiedLayerNormalization"])
def test_skip_layer_norm_statistics(op_type):
    """The optional mean and inv_std_var outputs, read as graph outputs."""
    simplified = op_type.startswith("SkipSimplified")
    inits = {"gamma": _normal(16), "beta": _normal(16)}
    inputs = ["x", "skip", "gamma"] + ([] if simplified else ["beta"])
    outputs = ["y", "", "inv_std"] if simplified else ["y", "mean", "inv_std"]
    model = _model([_ms(op_type, inputs, outputs, epsilon=1e-5)],
                   {"x": (F, [2, 4, 16]), "skip": (F, [2, 4, 16])},
                   {o: F for o in outputs if o}, inits)
    assert_matches_onnxruntime(model, {"x": _normal(2, 4, 16, scale=2), "skip": _normal(2, 4, 16)})


def test_refusals_name_the_node():
    conv = _then_relu(_ms("FusedConv", ["x", "w"], ["t"], activation="Softsign", name="fc"), [1, 3, 6, 6],
                      {"w": _normal(4, 3, 3, 3)})
    assert_refused_in_one_line(conv, "activation 'Softsign' is not supported", node="fc")
    attention = _attention_model([B, S, S, 1])
    assert_refused_in_one_line(attention, r"mask_index 'mask' of shape \[2, 5, 5, 1\] is not supported")
    packed = _model([_ms("MultiHeadAttention", ["qkv"], ["t"], num_heads=HEADS, name="mha"),
                     helper.make_node("Relu", ["t"], ["y"])], {"qkv": (F, [B, S, HEADS, 3, 4])}, {"y": F})
    assert_refused_in_one_line(packed, "only separate 3-D query, key and value", node="mha")
    odd = _model([_ms("Attention", ["x", "w"], ["y"], num_heads=HEADS, name="att")],
                 {"x": (F, [B, S, HIDDEN])}, {"y": F}, {"w": _normal(HIDDEN, 47)})
    assert_refused_in_one_line(odd, r"weights \[16, 47\] with qkv_hidden_sizes \[15, 15, 15\]", node="att")
    computed = _model([_ms("Attention", ["x", "w"], ["y"], num_heads=HEADS, name="att")],
                      {"x": (F, [B, S, HIDDEN]), "w": (F, [HIDDEN, 48])}, {"y": F})
    assert_refused_in_one_line(computed, r"weights \(input 'w'\): a graph input", node="att")
    headless = _model([_ms("Attention", ["x", "w"], ["y"], name="att")], {"x": (F, [B, S, HIDDEN])},
                      {"y": F}, {"w": _normal(HIDDEN, 48)})
    assert_refused_in_one_line(headless, "num_heads is missing", node="att")


@pytest.mark.parametrize("layout,interleaved,rotary,positions", [
    ("bsd", 0, 0, "ids"), ("bsd", 1, 0, "ids"), ("bnsh", 0, 0, "ids"), ("bnsh", 1, 4, "offset"),
    ("bsd", 0, 4, "offset"), ("bsd", 1, 0, "constant")])
def test_rotary_embedding(layout, interleaved, rotary, positions):
    """Heads of 8 features (4 heads), a rotary dim of 8 or 4 (the rest passes), position_ids a
    [B, S] input, a [1] offset input, or a constant."""
    half = (rotary or 8) // 2
    angles = np.arange(20)[:, None] * (1e-2 ** (np.arange(half) / half))[None]
    inits = {"cos": np.cos(angles).astype(np.float32), "sin": np.sin(angles).astype(np.float32)}
    x_shape = [B, S, 32] if layout == "bsd" else [B, 4, S, 8]
    attrs = {"interleaved": interleaved, "num_heads": 4 if layout == "bsd" or rotary else 0}
    if rotary:
        attrs["rotary_embedding_dim"] = rotary
    feeds = {"x": _normal(*x_shape)}
    extra = {}
    if positions == "constant":
        inits["pos"] = RNG.integers(0, 20, (B, S)).astype(np.int64)
    else:
        shape = [B, S] if positions == "ids" else [1]
        extra["pos"] = (TensorProto.INT64, shape)
        feeds["pos"] = RNG.integers(0, 20 - S, shape).astype(np.int64)
    node = _ms("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["t"], **attrs)
    model = _then_relu(node, x_shape, inits, extra_inputs=extra)
    assert_matches_onnxruntime(model, feeds)


def test_int8_feed_forward(tmp_path):
    """A transformer feed-forward block as the optimizer fuses it (MatMul, BiasGelu, MatMul,
    SkipLayerNormalization) quantizes like the plain ops: int8 FULLY_CONNECTED and GELU, only the
    normalization's statistics float, within 4 output steps of onnxruntime (three layers of int8
    rounding, the normalization dividing the last by the row's spread: up to 3.3 steps over 16
    weight seeds)."""
    from tests.harness import assert_int8_matches_onnxruntime

    rng = np.random.default_rng(5)
    inits = {name: (rng.standard_normal(shape) * scale).astype(np.float32) for name, shape, scale in (
        ("gamma", (16,), 1.0), ("beta", (16,), 1.0), ("w1", (16, 32), 0.3), ("b1", (32,), 1.0),
        ("w2", (32, 16), 0.3))}
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), _ms("BiasGelu", ["h", "b1"], ["g"]),
             helper.make_node("MatMul", ["g", "w2"], ["o"]),
             _ms("SkipLayerNormalization", ["o", "x", "gamma", "beta"], ["y"], epsilon=1e-5)]
    model = _model(nodes, {"x": (F, [1, 8, 16])}, {"y": F}, inits)
    _, report = assert_int8_matches_onnxruntime(model, tmp_path, steps=4.0,
                                                allow_float=("MUL", "MEAN", "ADD", "RSQRT"))
    assert report.op_counts.get("GELU") == 1 and report.op_counts.get("FULLY_CONNECTED") == 2
