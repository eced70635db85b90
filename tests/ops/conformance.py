"""The onnx package's node conformance suite, generated in-process, filtered to the ONNX ops
qconvert imports. `python -m tests.ops.conformance --ops docs/ops.md --failing docs/conformance.md`
writes the op table and the failing cases."""

from __future__ import annotations

import functools
import warnings

import numpy as np
import onnx
from onnx import helper, numpy_helper

from qconvert.onnx.control_flow import CONTROL_OPS
from qconvert.ops.registry import ONNX_IMPORTERS

# Cases of supported ops that cannot convert, with the reason (checked: they must keep failing).
EXPECTED_FAILURES: dict[str, str] = {}
EXPECTED_FAILURES["test_range_bfloat16_type_positive_delta"] = "bfloat16 has no TFLite tensor type"
for _case in ("", "_double", "_seed"):  # (qconvert/ops/random.py; guide: Random ops)
    for _form in ("", "_expanded"):
        EXPECTED_FAILURES[f"test_bernoulli{_case}{_form}"] = (
            "the expected outputs are onnxruntime's random draws, which another generator cannot "
            "repeat (the default check feeds the draws to both sides instead: guide, Random ops)")
for _mode in ("linear", "cubic"):  # 4 x 0.8 = 3.2 rows: the spec divides by 2.2, onnxruntime by 2
    EXPECTED_FAILURES[f"test_resize_downsample_scales_{_mode}_align_corners"] = (
        "the ONNX spec and onnxruntime place the samples differently for this scale")
for _crop in ("crop", "pad", "crop_and_pad", "crop_axes_chw", "crop_axes_hwc", "crop_negative_axes_hwc"):
    EXPECTED_FAILURES[f"test_center_crop_pad_{_crop}_expanded"] = (
        "the pads and slice starts are computed from the `shape` graph input at run time")

EXPECTED_FAILURES["test_scan_sum"] = (
    "opset 8 Scan: onnx's version converter (to opset 9) drops its batch axis")
for _nms in ("center_point_box_format", "flipped_coordinates", "identical_boxes",
             "iou_threshold_boundary", "limit_output_size", "single_box", "suppress_by_IOU",
             "suppress_by_IOU_and_scores", "two_batches", "two_classes"):
    EXPECTED_FAILURES[f"test_nonmaxsuppression_{_nms}"] = (
        "max_output_boxes_per_class is a graph input here; TFLite's NON_MAX_SUPPRESSION_V4 fixes "
        "its output size when the model is built")
for _affine in ("2d", "2d_align_corners", "3d", "3d_align_corners"):
    EXPECTED_FAILURES[f"test_affine_grid_{_affine}_expanded"] = (
        "the grid's shape is computed from the `size` graph input at run time")
EXPECTED_FAILURES["test_maxunpool_export_with_output_shape"] = (
    "onnx's reference reads the indices as offsets into the shape kernel and strides give, then pads "
    "to output_shape; onnxruntime (and PyTorch's max_unpool) read them as offsets into output_shape, "
    "as qconvert does")
EXPECTED_FAILURES["test_col2im_5d"] = "a 3-D Col2Im: TFLite's transposed convolution is 2-D"
for _range in ("bfloat16_type_positive_delta", "float16_type_positive_delta",
               "float_type_positive_delta", "int32_type_negative_delta"):
    EXPECTED_FAILURES[f"test_range_{_range}_expanded"] = (
        "the Loop's trip count is computed from graph inputs, so its scan output's shape is "
        "data-dependent")


def expected_failure(case) -> str | None:
    """Why a case of a supported op cannot pass, or None if it must pass."""
    if case.name in EXPECTED_FAILURES:
        return EXPECTED_FAILURES[case.name]
    ops = op_types(case)
    if "_3d" in case.name and ops & {"Conv", "MaxPool", "AveragePool", "ConvTranspose", "LpPool"}:
        return "3-D convolution/pooling: TFLite's kernels are 2-D"
    if "with_argmax" in case.name:
        return "MaxPool's Indices output has no TFLite equivalent"
    from qconvert.onnx.loader import ACTIVATION_DTYPES

    if "training_mode" in case.name or ("training_dropout" in case.name and "zero_ratio" not in case.name):
        return "training mode: qconvert converts inference graphs"
    model, _ = freeze_parameters(case)
    # A graph whose inputs are all frozen folds to constants, whatever its output dtype.
    outputs = list(model.graph.output) if model.graph.input else []
    for value in list(model.graph.input) + outputs:
        if not value.type.HasField("tensor_type"):
            return "non-tensor input or output"
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type))
        if dtype not in ACTIVATION_DTYPES:
            return f"dtype {dtype}: TFLite has no float-model kernels for it"
    return None


def case_array(value) -> np.ndarray:
    """Suite data as numpy (a few cases store TensorProtos)."""
    return numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else np.asarray(value)


@functools.lru_cache(maxsize=1)
def node_cases():
    from onnx.backend.test.case import node

    import qconvert.ops  # noqa: F401

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = node.collect_testcases(None)  # the argument is required before onnx 1.23
    return sorted(cases, key=lambda c: c.name)


def op_types(case) -> set[str]:
    return {n.op_type for n in case.model.graph.node}


def supported_cases():
    return [c for c in node_cases() if op_types(c) <= set(ONNX_IMPORTERS) | set(CONTROL_OPS)]


# Inputs (by position) that are a layer's parameters rather than data: a static-graph converter
# needs them constant, so the harness turns them into initializers holding the case's values.
PARAMETER_INPUTS: dict[str, tuple[int, ...]] = {
    "Conv": (1, 2), "ConvTranspose": (1, 2), "BatchNormalization": (1, 2, 3, 4),
    "InstanceNormalization": (1, 2), "LayerNormalization": (1, 2), "Clip": (1, 2),
    "GroupNormalization": (1, 2),
    "ReduceMean": (1,), "ReduceSum": (1,), "ReduceMax": (1,), "ReduceMin": (1,),
    "ReduceProd": (1,), "ReduceL2": (1,), "ReduceSumSquare": (1,), "ReduceL1": (1,),
    "ReduceLogSum": (1,), "ReduceLogSumExp": (1,),
    "Reshape": (1,), "Squeeze": (1,), "Unsqueeze": (1,), "Split": (1,), "Slice": (1, 2, 3, 4),
    "Pad": (1, 2, 3), "Resize": (1, 2, 3), "Upsample": (1,), "Expand": (1,), "Tile": (1,),
    "ConstantOfShape": (0,), "Range": (0, 1, 2), "LSTM": (1, 2, 3, 4, 7), "PRelu": (1,),
    "GRU": (1, 2, 3, 4), "RNN": (1, 2, 3, 4),
    "TopK": (1,), "CumSum": (1,), "OneHot": (1, 2), "Gemm": (1, 2), "Trilu": (1,),
    # A Loop's trip count and condition: with them constant its scan outputs have a static shape.
    "Loop": (0, 1),
    # DFT's dft_length and axis, STFT's frame_step and frame_length: they set the output's shape.
    "DFT": (1, 2), "STFT": (1, 3),
    # RotaryEmbedding's cos and sin tables: a model's precomputed constants.
    "RotaryEmbedding": (1, 2),
    # AffineGrid's size: it sets the grid's shape.
    "AffineGrid": (1,),
    # CenterCropPad's target shape: it sets the output's shape.
    "CenterCropPad": (1,),
    # Col2Im's image_shape and block_shape: they set the output's shape.
    "Col2Im": (1, 2),
    # MaxUnpool's output_shape: it sets the output's shape.
    "MaxUnpool": (2,),
    # Compress's condition: a constant one fixes the output's length.
    "Compress": (1,),
}


def freeze_parameters(case):
    """(model, names of the inputs left) with the parameter inputs of the case's first data set
    turned into initializers."""
    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    graph = model.graph
    feeds = dict(zip([i.name for i in graph.input], map(case_array, case.data_sets[0][0])))
    frozen = set()
    for node in graph.node:
        for position in PARAMETER_INPUTS.get(node.op_type, ()):
            if position < len(node.input) and node.input[position] in feeds:
                frozen.add(node.input[position])
    for name in frozen:
        graph.initializer.append(numpy_helper.from_array(np.asarray(feeds[name]), name))
    kept = [i for i in graph.input if i.name not in frozen]
    del graph.input[:]
    graph.input.extend(kept)
    return model, frozen


def run_case(case):
    """Converts the case's model and checks every data set; raises AssertionError on mismatch."""
    from tests.harness import convert_proto, run_tflite

    model, frozen = freeze_parameters(case)
    flatbuffer, report = convert_proto(model, io_layout="onnx")
    inputs = [i.name for i in case.model.graph.input]
    outputs = [o.name for o in case.model.graph.output]
    rtol, atol = max(1e-4, case.rtol), max(1e-5, case.atol)
    for feeds, expected in case.data_sets:
        feeds = {n: case_array(v) for n, v in zip(inputs, feeds) if n not in frozen}
        actual = run_tflite(flatbuffer, report, feeds)
        for name, want in zip(outputs, expected):
            got, want = actual[name], case_array(want)
            assert got.shape == np.asarray(want).shape, f"{name}: shape {got.shape} != {np.shape(want)}"
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=name)


def _summarize(reasons) -> str:
    """'3 × reason; ...' with the dtype reasons folded into one entry listing the dtypes."""
    dtypes, counts = [], {}
    for reason, n in reasons.items():
        if reason.startswith("dtype "):
            dtypes.append(reason.split()[1].rstrip(":"))
            reason = "dtypes without TFLite float kernels"
        counts[reason] = counts.get(reason, 0) + n
    parts = []
    for reason, n in sorted(counts.items(), key=lambda kv: -kv[1]):
        if reason == "dtypes without TFLite float kernels":
            reason += f" ({', '.join(sorted(set(dtypes)))})"
        parts.append(f"{n} × {reason}")
    return "; ".join(parts)


def op_states() -> list[tuple[str, int, str, str]]:
    """(op, the opset that introduced it, state, reason) for every ai.onnx op onnx knows and every
    other domain's op qconvert imports: state "converted", "refused" (with why, ops/refused.py) or
    "not applicable" (no float inference graph computes it: strings, training losses, optional
    values, image decoding)."""
    import onnx.defs

    from qconvert.ops import refused

    not_applicable = {refused.STRINGS, refused.TRAINING}
    first: dict[str, int] = {}
    for schema in onnx.defs.get_all_schemas_with_history():
        if schema.domain in ("", "ai.onnx") and not schema.deprecated:
            first[schema.name] = min(first.get(schema.name, schema.since_version), schema.since_version)
    rows = []
    for op in sorted(first):
        reason = refused.refusal(op) or ""
        if op in ONNX_IMPORTERS or op in CONTROL_OPS:
            state = "converted"
        elif reason in not_applicable or op.startswith("Optional") or op == "ImageDecoder":
            state = "not applicable"
        else:
            state = "refused"
            reason = reason or "not converted yet"
        rows.append((op, first[op], state, reason))
    rows += [(op, 1, "converted", "") for op in sorted(ONNX_IMPORTERS) if "." in op
             and not op.startswith("qconvert.")]
    return rows


def _write_ops(path: str, totals, passed, reasons, suite_passed: int, suite_total: int) -> None:
    import collections

    rows = op_states()
    onnx_rows = [r for r in rows if "." not in r[0] and r[1] <= 22]
    counts = collections.Counter(state for _, _, state, _ in onnx_rows)
    later = [r for r in rows if "." not in r[0] and r[1] > 22]
    lines = [
        "# ONNX operators", "",
        "Generated by `python -m tests.ops.conformance --ops docs/ops.md` from the importer "
        "registry (`qconvert/ops/registry.py`), the refusals (`qconvert/ops/refused.py`) and the "
        "onnx package's node conformance suite, run through LiteRT.", "",
        f"**The ai.onnx operator set through opset 22 ({len(onnx_rows)} ops): "
        f"{counts['converted']} converted, {counts['refused']} refused with the reason, "
        f"{counts['not applicable']} not applicable** (no float inference graph computes them). "
        f"Of the {len(later)} ops added in opsets 23 and later, "
        f"{sum(r[2] == 'converted' for r in later)} are converted.", "",
        f"**Node suite: {suite_passed} of {suite_total} cases pass** (every case, whatever its "
        "ops; 876 of 1,884 before issue 29). A case counts below for every op in its graph; the "
        "cases that cannot pass are counted by reason (dtypes without TFLite kernels, data-dependent "
        "shapes, 3-D convolutions), and [conformance.md](conformance.md) lists each.", "",
        "| op | since opset | state | node suite cases passing | why not, or what fails |",
        "|---|---|---|---|---|"]
    for op, since, state, reason in rows:
        cases = f"{passed[op]}/{totals[op]}" if totals[op] else "no case"
        why = "; ".join(x for x in (reason, _summarize(reasons[op])) if x)
        lines.append(f"| {op} | {since if '.' not in op else '-'} | {state} | {cases} | {why} |")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main() -> None:
    """Runs the node suite: prints the pass count, and writes docs/ops.md (--ops PATH) and the
    list of the cases of imported ops that do not pass (--failing PATH)."""
    import argparse
    import collections

    parser = argparse.ArgumentParser()
    parser.add_argument("--ops", help="write the op table (docs/ops.md)")
    parser.add_argument("--failing", help="write the failing cases (docs/conformance.md)")
    args = parser.parse_args()
    totals, passed = collections.Counter(), collections.Counter()
    reasons = collections.defaultdict(collections.Counter)
    failing, supported = [], {id(c) for c in supported_cases()}
    suite_passed = 0
    for case in node_cases():
        reason = expected_failure(case) if id(case) in supported else None
        try:
            run_case(case)
            ok = True
        except Exception as e:  # noqa: BLE001  (counting, not testing)
            ok = False
            reason = reason or f"FAILS: {str(e).splitlines()[0][:100]}"
        suite_passed += ok
        if id(case) not in supported:
            for op in op_types(case):
                totals[op] += 1
            continue
        if not ok:
            failing.append(f"- `{case.name}` ({', '.join(sorted(op_types(case)))}): {reason}")
        for op in sorted(op_types(case)):
            totals[op] += 1
            passed[op] += ok
            if not ok:
                reasons[op][reason] += 1
    print(f"node suite: {suite_passed} of {len(node_cases())} cases pass")
    if args.ops:
        _write_ops(args.ops, totals, passed, reasons, suite_passed, len(node_cases()))
    if args.failing:
        with open(args.failing, "w") as f:
            f.write("# Conformance cases that do not pass\n\nGenerated by "
                    "`python -m tests.ops.conformance --failing docs/conformance.md`: every case of "
                    "the onnx node suite whose ops qconvert imports but which cannot pass, with the "
                    "reason (a case counts for every op in its graph).\n\n")
            f.write("\n".join(failing) + "\n")


if __name__ == "__main__":
    main()
