"""NonMaxSuppression (qconvert/ops/nms.py) is refused in one line: its output's length is known
only at run time, which TFLite's fixed-size NON_MAX_SUPPRESSION_V4/V5 cannot return; and the
refused model does run in onnxruntime (the refusal is not of a broken model)."""

import numpy as np
from onnx import TensorProto, helper

from tests.harness import assert_refused_in_one_line, make_model, run_onnxruntime

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def nms_model(declared=None):
    node = helper.make_node("NonMaxSuppression", ["boxes", "scores", "max", "iou", "threshold"],
                            ["selected"], name="nms")
    model = make_model([node], {"boxes": (F, (1, 6, 4)), "scores": (F, (1, 1, 6))}, {"selected": I64},
                       {"max": np.array([3], np.int64), "iou": np.array([0.5], np.float32),
                        "threshold": np.array([0.0], np.float32)}, opset=11)
    if declared is not None:
        model.graph.output[0].CopyFrom(helper.make_tensor_value_info("selected", I64, declared))
    return model


def feeds():
    rng = np.random.default_rng(3)
    corners = rng.uniform(0, 1, (1, 6, 2)).astype(np.float32)
    return {"boxes": np.concatenate([corners, corners + 0.3], axis=-1),
            "scores": rng.uniform(0, 1, (1, 1, 6)).astype(np.float32)}


def test_nms_is_refused_as_data_dependent():
    assert run_onnxruntime(nms_model(), feeds())["selected"].shape[1] == 3
    assert_refused_in_one_line(nms_model(), "'selected'.*no static shape.*run time")


def test_nms_with_a_declared_static_output_is_refused_naming_the_tflite_limit():
    assert_refused_in_one_line(nms_model(declared=[3, 3]), "NON_MAX_SUPPRESSION_V4/V5", node="nms")
