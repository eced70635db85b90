"""ONNX Attention and RotaryEmbedding (qconvert/ops/attention.py) against onnxruntime: 3-D and 4-D
inputs, masks (bool and float, computed at run time or constant), causal, GQA, a past key/value
with the present outputs, scale, softcap, qk_matmul_output; the rotary embedding with and without
position ids."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.harness import assert_matches_onnxruntime, assert_refused_in_one_line, make_model

RNG = np.random.default_rng(23)
F, B = TensorProto.FLOAT, TensorProto.BOOL


def _attention(inputs: dict, outputs, attrs=None, inits=None, opset=23):
    names = ["Q", "K", "V", "attn_mask", "past_key", "past_value"]
    used = [n if n in inputs or n in (inits or {}) else "" for n in names]
    while used and not used[-1]:
        used.pop()
    node = helper.make_node("Attention", used, list(outputs), **(attrs or {}))
    return make_model([node], inputs, {o: F for o in outputs if o}, inits, opset=opset)


def _feeds(model, bool_mask=None):
    feeds = {}
    for value in model.graph.input:
        dims = [d.dim_value for d in value.type.tensor_type.shape.dim]
        if value.type.tensor_type.elem_type == B:
            feeds[value.name] = bool_mask if bool_mask is not None else RNG.random(dims) > 0.3
        else:
            feeds[value.name] = RNG.standard_normal(dims).astype(np.float32)
    return feeds


def _bool_mask(shape):
    """A random bool mask with key 0 attended in every row (no fully masked row)."""
    mask = RNG.random(shape) > 0.4
    mask[..., 0] = True
    return mask


@pytest.mark.parametrize("causal", [0, 1])
@pytest.mark.parametrize("heads,kv_heads", [(2, 2), (4, 2)])
def test_3d_with_a_bool_mask(causal, heads, kv_heads):
    model = _attention({"Q": (F, (2, 5, heads * 4)), "K": (F, (2, 5, kv_heads * 4)),
                        "V": (F, (2, 5, kv_heads * 3)), "attn_mask": (B, (5, 5))}, ["Y"],
                       {"is_causal": causal, "q_num_heads": heads, "kv_num_heads": kv_heads})
    feeds = _feeds(model, _bool_mask((5, 5)))
    _, report = assert_matches_onnxruntime(model, feeds)
    assert report.op_counts.get("SOFTMAX") == 1 and report.op_counts.get("BATCH_MATMUL") == 2


@pytest.mark.parametrize("mask_shape", [(2, 1, 3, 7), (3, 7)])
def test_4d_with_past_and_present_and_a_float_mask(mask_shape):
    """present_key/present_value are the past concatenated with K/V."""
    model = _attention({"Q": (F, (2, 2, 3, 4)), "K": (F, (2, 2, 3, 4)), "V": (F, (2, 2, 3, 6)),
                        "attn_mask": (F, mask_shape), "past_key": (F, (2, 2, 4, 4)),
                        "past_value": (F, (2, 2, 4, 6))}, ["Y", "present_key", "present_value"])
    assert_matches_onnxruntime(model, _feeds(model))


def test_causal_with_past_is_aligned_after_it():
    model = _attention({"Q": (F, (1, 2, 3, 4)), "K": (F, (1, 2, 3, 4)), "V": (F, (1, 2, 3, 4)),
                        "past_key": (F, (1, 2, 2, 4)), "past_value": (F, (1, 2, 2, 4))},
                       ["Y", "present_key", "present_value"], {"is_causal": 1}, opset=24)
    assert_matches_onnxruntime(model, _feeds(model))


@pytest.mark.parametrize("mode", [0, 1, 2, 3])
def test_scale_softcap_and_qk_matmul_output(mode):
    """qk_matmul_output at each stage: the scaled Q K^T (mode 0), after the softcap (1), after the
    mask (2), after the softmax (3)."""
    attrs = {"scale": 0.3, "qk_matmul_output_mode": mode, "softcap": 1.5}
    model = _attention({"Q": (F, (1, 2, 3, 4)), "K": (F, (1, 2, 5, 4)), "V": (F, (1, 2, 5, 4)),
                        "attn_mask": (F, (3, 5))}, ["Y", "", "", "qk"], attrs)
    assert_matches_onnxruntime(model, _feeds(model))
    softcapped = _attention({"Q": (F, (1, 2, 3, 4)), "K": (F, (1, 2, 5, 4)), "V": (F, (1, 2, 5, 4))},
                            ["Y"], {"softcap": 2.0})
    assert_matches_onnxruntime(softcapped, _feeds(softcapped))


def test_constant_mask_folds_into_one_bias():
    mask = _bool_mask((4, 4))
    model = _attention({"Q": (F, (1, 2, 4, 4)), "K": (F, (1, 2, 4, 4)), "V": (F, (1, 2, 4, 4))}, ["Y"],
                       {"is_causal": 1}, inits={"attn_mask": mask})
    _, report = assert_matches_onnxruntime(model, _feeds(model))
    assert "SELECT_V2" not in report.op_counts and "REDUCE_MAX" not in report.op_counts


def test_refusals_name_the_node():
    model = _attention({"Q": (F, (1, 5, 8)), "K": (F, (1, 5, 8)), "V": (F, (1, 5, 8))}, ["Y"],
                       {"q_num_heads": 3, "kv_num_heads": 3})
    assert_refused_in_one_line(model, "does not split into 3 heads")
    model = _attention({"Q": (F, (1, 5, 8)), "K": (F, (1, 5, 8)), "V": (F, (1, 5, 8))}, ["Y"])
    assert_refused_in_one_line(model, "q_num_heads")
    node = helper.make_node("Attention", ["Q", "K", "V", "", "pk", "pv", "n"], ["Y"])
    model = make_model([node], {"Q": (F, (1, 1, 2, 4)), "K": (F, (1, 1, 2, 4)), "V": (F, (1, 1, 2, 4)),
                                "pk": (F, (1, 1, 2, 4)), "pv": (F, (1, 1, 2, 4)),
                                "n": (TensorProto.INT64, (1,))}, {"Y": F}, opset=24)
    assert_refused_in_one_line(model, "nonpad_kv_seqlen and past_key/past_value")


@pytest.mark.parametrize("causal", [0, 1])
@pytest.mark.parametrize("with_mask", [False, True])
def test_nonpad_kv_seqlen(causal, with_mask):
    """An external cache (opset 24): keys past each batch's length are masked and the causal
    frontier sits at that length; computed at run time from nonpad_kv_seqlen."""
    inputs = {"Q": (F, (2, 2, 3, 4)), "K": (F, (2, 2, 6, 4)), "V": (F, (2, 2, 6, 4))}
    names = ["Q", "K", "V", "attn_mask" if with_mask else "", "", "", "n"]
    if with_mask:
        inputs["attn_mask"] = (F, (3, 6))
    inputs["n"] = (TensorProto.INT64, (2,))
    node = helper.make_node("Attention", names, ["Y"], is_causal=causal)
    model = make_model([node], inputs, {"Y": F}, opset=24)
    feeds = _feeds(model)
    feeds["n"] = np.array([4, 6], np.int64)
    assert_matches_onnxruntime(model, feeds)


# --- RotaryEmbedding ----------------------------------------------------------------------------
def _rotary(x_shape, attrs, positions: bool, cache_rows=16, half=4):
    inputs = {"x": (F, x_shape)}
    if positions:
        inputs["position_ids"] = (TensorProto.INT64, (x_shape[0], x_shape[-2] if len(x_shape) == 4
                                                      else x_shape[1]))
        cache_shape = (cache_rows, half)
    else:
        cache_shape = (x_shape[0], x_shape[-2] if len(x_shape) == 4 else x_shape[1], half)
    angles = RNG.uniform(-3, 3, cache_shape)
    inits = {"cos": np.cos(angles).astype(np.float32), "sin": np.sin(angles).astype(np.float32)}
    node = helper.make_node("RotaryEmbedding", ["x", "cos", "sin"] + (["position_ids"] if positions else []),
                            ["y"], **attrs)
    return make_model([node], inputs, {"y": F}, inits, opset=23)


@pytest.mark.parametrize("positions", [True, False])
@pytest.mark.parametrize("attrs", [{}, {"interleaved": 1}, {"rotary_embedding_dim": 4},
                                   {"interleaved": 1, "rotary_embedding_dim": 4}])
def test_rotary_embedding_4d(attrs, positions):
    half = 2 if attrs.get("rotary_embedding_dim") else 4
    model = _rotary((2, 3, 5, 8), attrs, positions, half=half)
    feeds = _feeds(model)
    if positions:
        feeds["position_ids"] = RNG.integers(0, 16, (2, 5)).astype(np.int64)
    assert_matches_onnxruntime(model, feeds)


def test_rotary_embedding_3d():
    model = _rotary((2, 5, 24), {"num_heads": 3}, True)
    feeds = _feeds(model)
    feeds["position_ids"] = RNG.integers(0, 16, (2, 5)).astype(np.int64)
    assert_matches_onnxruntime(model, feeds)


def test_rotary_embedding_with_computed_tables_is_refused():
    node = helper.make_node("RotaryEmbedding", ["x", "cos", "sin"], ["y"])
    model = make_model([node], {"x": (F, (1, 2, 3, 8)), "cos": (F, (1, 3, 4)), "sin": (F, (1, 3, 4))},
                       {"y": F}, opset=23)
    assert_refused_in_one_line(model, "cos_cache .*a graph input")


@pytest.mark.parametrize("attrs", [{"is_causal": 1, "left_window_size": 2},
                                   {"left_window_size": 1, "right_window_size": 2}])
def test_sliding_window(attrs):
    """Opset 25's windows: each query attends the keys within left/right of its position."""
    model = _attention({"Q": (F, (1, 2, 5, 4)), "K": (F, (1, 2, 5, 4)), "V": (F, (1, 2, 5, 4))}, ["Y"],
                       attrs, opset=25)
    assert_matches_onnxruntime(model, _feeds(model))


@pytest.mark.parametrize("constant", [False, True])
def test_a_fully_masked_row_gives_zeros(constant):
    """A query whose keys are all masked attends nothing: zeros, as onnxruntime gives (SOFTMAX of
    -inf alone would give NaN); decided at run time for a computed mask, at import for a constant."""
    mask = np.array([[True, False, True], [False, False, False]])
    inputs = {"Q": (F, (1, 2, 2, 4)), "K": (F, (1, 2, 3, 4)), "V": (F, (1, 2, 3, 4))}
    if not constant:
        inputs["attn_mask"] = (B, (2, 3))
    model = _attention(inputs, ["Y"], inits={"attn_mask": mask} if constant else None)
    feeds = _feeds(model, mask)
    _, report = assert_matches_onnxruntime(model, feeds)
    assert ("REDUCE_MAX" in report.op_counts) != constant
