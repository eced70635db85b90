"""The ai.onnx.ml ops scikit-learn, LightGBM and XGBoost exporters write (skl2onnx, onnxmltools),
computed as onnxruntime computes them (its CPU kernels are the reference; the ONNX-ML spec leaves
the two-class outputs vague and onnxruntime's choices are kept).

- Scaler (SUB, MUL), Normalizer (MAX / L1 / L2 per row: DIV by the row's max, sum of magnitudes
  or root of squares, a zero norm left as it is), Binarizer (GREATER, CAST), Imputer (SELECT_V2
  where x equals the replaced value, or is NaN when that is NaN), OneHotEncoder (EQUAL against
  the integer categories, CAST), ArrayFeatureExtractor (GATHER along the last axis).
- LinearRegressor, LinearClassifier, SVMRegressor with a linear kernel (the support vectors
  folded into one weight row): FULLY_CONNECTED, then the post transform and, for classifiers,
  the label (ARG_MAX and a GATHER of the labels; one score column: its sign picks the label).
- The tree ensembles: ml_trees.py.

float64 inputs and outputs are cast at the graph's edges (the loader computes float64 as
float32); int64 and int32 features are cast to float, as onnxruntime casts them.

Refused in one line: string categories (TFLite's kernels compute on numbers; a string label
tensor the loader refuses), ZipMap (a sequence of maps; refused.py), the PROBIT post transform
(no inverse error function in TFLite), non-linear SVM kernels and a one-class SVM.
"""

from __future__ import annotations

import numpy as np

from .compose import FLOAT, emit, used_output
from .gemm import fully_connected
from .layout import reshape
from .registry import onnx_op, onnx_types

ML = "ai.onnx.ml."
INT = np.dtype(np.int32)
POST_TRANSFORMS = ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT")


def text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def rows_of(x_shape) -> int:
    """The batch of an ai.onnx.ml input: [N, C] has N rows, [C] one."""
    return int(x_shape[0]) if len(x_shape) == 2 else 1


def matrix(ctx, x: str) -> str:
    """Input `x` as the float32 [N, C] matrix the ML kernels read ([C] is one row; integers are
    cast to float, as onnxruntime does)."""
    shape = ctx.shape(x)
    if len(shape) not in (1, 2):
        raise ctx.error(f"input {x!r} has rank {len(shape)}; ai.onnx.ml ops take [N, C] or [C]")
    if np.dtype(ctx.dtype(x)) != FLOAT:
        x = emit(ctx, "CAST", [x], x + "_float", shape, FLOAT,
                 {"in_data_type": np.dtype(ctx.dtype(x)), "out_data_type": FLOAT})
    return reshape(ctx, x, (1, shape[0])) if len(shape) == 1 else x


def write_into(ctx, inner: str, y: str) -> None:
    """`inner` written into the output `y` (a RESHAPE when the shapes differ, a CAST when the
    dtypes do)."""
    if np.dtype(ctx.dtype(inner)) != np.dtype(ctx.dtype(y)):
        inner = emit(ctx, "CAST", [inner], y + "_cast", ctx.shape(inner), ctx.dtype(y),
                     {"in_data_type": np.dtype(ctx.dtype(inner)), "out_data_type": np.dtype(ctx.dtype(y))})
    if tuple(ctx.shape(inner)) != tuple(ctx.shape(y)):
        reshape(ctx, inner, ctx.shape(y), y)
    else:
        ctx.add_op("RESHAPE", [inner, ctx.constant("shape", np.array(ctx.shape(y), np.int32))], [y])


def float_attr(ctx, node, name: str, default=None) -> np.ndarray | None:
    """A float attribute given as a list (`name`) or a tensor (`name_as_tensor`), as float64."""
    value = node.attr(name + "_as_tensor", node.attr(name, default))
    return None if value is None else np.asarray(value, np.float64).reshape(-1)


def class_labels(node) -> np.ndarray:
    """The int64 class labels (string labels, which the loader refuses where the label tensor
    exists, by their indices)."""
    ints = node.attr("classlabels_int64s", node.attr("classlabels_ints"))
    count = len(node.attr("classlabels_strings") or ints or [])
    return np.asarray(ints, np.int64) if ints else np.arange(count, dtype=np.int64)


def check_post(ctx, post: str) -> str:
    if post == "PROBIT":
        raise ctx.error("post_transform PROBIT needs an inverse error function, which TFLite has "
                        "no kernel for")
    if post not in POST_TRANSFORMS:
        raise ctx.error(f"post_transform {post!r} is not one of {', '.join(POST_TRANSFORMS)}")
    return post


def post_transform(ctx, scores: str, post: str, hint: str) -> str:
    """onnxruntime's post transform of a [N, K] score matrix: LOGISTIC elementwise, SOFTMAX per
    row, SOFTMAX_ZERO (exp of the non-zero scores only, zeros kept zero) per row."""
    shape = ctx.shape(scores)
    if post == "LOGISTIC":
        return emit(ctx, "LOGISTIC", [scores], hint + "_logistic", shape)
    if post == "SOFTMAX":
        return emit(ctx, "SOFTMAX", [scores], hint + "_softmax", shape, options={"beta": 1.0})
    if post == "SOFTMAX_ZERO":
        return _softmax_zero(ctx, scores, hint)
    return scores


def _softmax_zero(ctx, scores: str, hint: str) -> str:
    """exp(s - max) where |s| > 1e-7, else s * exp(-max); divided by the sum of the exps."""
    shape, rows = ctx.shape(scores), (ctx.shape(scores)[0], 1)
    peak = emit(ctx, "REDUCE_MAX", [scores, ctx.constant("axis", np.array([1], np.int32))],
                hint + "_max", rows, options={"keep_dims": True})
    shifted = emit(ctx, "SUB", [scores, peak], hint + "_shifted", shape)
    exps = emit(ctx, "EXP", [shifted], hint + "_exp", shape)
    magnitude = emit(ctx, "ABS", [scores], hint + "_abs", shape)
    nonzero = emit(ctx, "GREATER", [magnitude, ctx.constant("eps", np.array(1e-7, np.float32))],
                   hint + "_nonzero", shape, np.bool_)
    zero = ctx.constant("zero", np.zeros((), np.float32))
    counted = emit(ctx, "SELECT_V2", [nonzero, exps, zero], hint + "_counted", shape)
    total = emit(ctx, "SUM", [counted, ctx.constant("axis", np.array([1], np.int32))],
                 hint + "_sum", rows, options={"keep_dims": True})
    neg_peak = emit(ctx, "NEG", [peak], hint + "_neg_max", rows)
    scaled = emit(ctx, "MUL", [scores, emit(ctx, "EXP", [neg_peak], hint + "_exp_neg_max", rows)],
                  hint + "_scaled_zero", shape)
    picked = emit(ctx, "SELECT_V2", [nonzero, exps, scaled], hint + "_picked", shape)
    return emit(ctx, "DIV", [picked, total], hint + "_softmax_zero", shape)


def label_of(ctx, scores: str, labels: np.ndarray, y: str) -> None:
    """y = labels[argmax(scores)] per row (the first of equal maxima, as onnxruntime picks)."""
    index = emit(ctx, "ARG_MAX", [scores, ctx.constant("axis", np.array([1], np.int32))],
                 y + "_index", (ctx.shape(scores)[0],), INT, {"output_type": INT})
    table = ctx.constant("labels", labels)
    picked = emit(ctx, "GATHER", [table, index], y + "_label", (ctx.shape(scores)[0],), INT,
                  {"axis": 0, "batch_dims": 0})
    write_into(ctx, picked, y)


def sign_label(ctx, score: str, threshold: float, labels, y: str) -> None:
    """y = labels[1] where score > threshold, else labels[0] (score a [N, 1] column)."""
    rows = (ctx.shape(score)[0],)
    flat = reshape(ctx, score, rows)
    above = emit(ctx, "GREATER", [flat, ctx.constant("threshold", np.array(threshold, np.float32))],
                 y + "_positive", rows, np.bool_)
    picked = emit(ctx, "SELECT_V2", [above, ctx.constant("positive", np.array(labels[1], np.int64)),
                                     ctx.constant("negative", np.array(labels[0], np.int64))],
                  y + "_label", rows, INT)
    write_into(ctx, picked, y)


# --- preprocessing --------------------------------------------------------------------------

@onnx_types(ML + "Scaler", ML + "Normalizer")
def _float_like_input(shapes, dtypes, attrs):
    return [(shapes[0], np.float32)]


@onnx_types(ML + "Binarizer", ML + "Imputer")
def _like_input(shapes, dtypes, attrs):
    return [(shapes[0], dtypes[0])]


def _per_feature(ctx, values, x: str, what: str) -> np.ndarray:
    """A per-feature attribute of length 1 or C (the last axis of x)."""
    values = np.asarray(values, np.float32).reshape(-1)
    features = ctx.shape(x)[-1]
    if values.size not in (1, features):
        raise ctx.error(f"{what} has {values.size} values for {features} features")
    return values


@onnx_op(ML + "Scaler")
def import_scaler(node, ctx):
    """y = (x - offset) * scale per feature: SUB and MUL (float output for every input type)."""
    x, y = node.inputs[0], node.outputs[0]
    source = x if np.dtype(ctx.dtype(x)) == FLOAT else emit(
        ctx, "CAST", [x], x + "_float", ctx.shape(x), FLOAT,
        {"in_data_type": np.dtype(ctx.dtype(x)), "out_data_type": FLOAT})
    offset = _per_feature(ctx, node.attr("offset", [0.0]), x, "offset")
    scale = _per_feature(ctx, node.attr("scale", [1.0]), x, "scale")
    shifted = emit(ctx, "SUB", [source, ctx.constant("offset", offset)], y + "_shifted", ctx.shape(x))
    ctx.add_op("MUL", [shifted, ctx.constant("scale", scale)], [y])


@onnx_op(ML + "Normalizer")
def import_normalizer(node, ctx):
    """Each row divided by its max (MAX), its sum of magnitudes (L1) or its root of squares (L2);
    a row whose norm is 0 stays as it is (onnxruntime divides only by a non-zero norm)."""
    norm = text(node.attr("norm", "MAX"))
    x = matrix(ctx, node.inputs[0])
    shape, rows, axis = ctx.shape(x), (ctx.shape(x)[0], 1), ctx.constant("axis", np.array([1], np.int32))
    if norm == "MAX":
        total = emit(ctx, "REDUCE_MAX", [x, axis], x + "_max", rows, options={"keep_dims": True})
    elif norm in ("L1", "L2"):
        parts = emit(ctx, "ABS", [x], x + "_parts", shape) if norm == "L1" else \
            emit(ctx, "MUL", [x, x], x + "_parts", shape)
        total = emit(ctx, "SUM", [parts, axis], x + "_sum", rows, options={"keep_dims": True})
        if norm == "L2":
            total = emit(ctx, "SQRT", [total], x + "_l2", rows)
    else:
        raise ctx.error(f"norm {norm!r} is not MAX, L1 or L2")
    zero = emit(ctx, "EQUAL", [total, ctx.constant("zero", np.zeros((), np.float32))], x + "_zero",
                rows, np.bool_)
    safe = emit(ctx, "SELECT_V2", [zero, ctx.constant("one", np.ones((), np.float32)), total],
                x + "_norm", rows)
    write_into(ctx, emit(ctx, "DIV", [x, safe], x + "_normalized", shape), node.outputs[0])


@onnx_op(ML + "Binarizer")
def import_binarizer(node, ctx):
    """y = 1 where x > threshold, else 0, in x's type: GREATER, then CAST of the booleans."""
    x, y = node.inputs[0], node.outputs[0]
    threshold = ctx.constant("threshold", np.array(node.attr("threshold", 0.0), ctx.dtype(x)))
    above = emit(ctx, "GREATER", [x, threshold], y + "_above", ctx.shape(x), np.bool_)
    ctx.add_op("CAST", [above], [y], {"in_data_type": np.dtype(np.bool_), "out_data_type": np.dtype(ctx.dtype(y))})


@onnx_op(ML + "Imputer")
def import_imputer(node, ctx):
    """x with the replaced value (NaN by the floats' default: x != x) set to the imputed value of
    its feature: SELECT_V2."""
    x, y = node.inputs[0], node.outputs[0]
    floats = np.dtype(ctx.dtype(x)).kind == "f"
    imputed = node.attr("imputed_value_floats" if floats else "imputed_value_int64s")
    if not imputed:
        raise ctx.error(f"it has no imputed values for its {np.dtype(ctx.dtype(x))} input")
    imputed = np.asarray(imputed, ctx.dtype(x)).reshape(-1)
    if imputed.size not in (1, ctx.shape(x)[-1]):
        raise ctx.error(f"it has {imputed.size} imputed values for {ctx.shape(x)[-1]} features")
    replaced = node.attr("replaced_value_float", 0.0) if floats else node.attr("replaced_value_int64", 0)
    if floats and np.isnan(replaced):
        hit = emit(ctx, "NOT_EQUAL", [x, x], y + "_missing", ctx.shape(x), np.bool_)
    else:
        hit = emit(ctx, "EQUAL", [x, ctx.constant("replaced", np.array(replaced, ctx.dtype(x)))],
                   y + "_missing", ctx.shape(x), np.bool_)
    ctx.add_op("SELECT_V2", [hit, ctx.constant("imputed", imputed), x], [y])


@onnx_types(ML + "OneHotEncoder")
def _one_hot_types(shapes, dtypes, attrs):
    count = len(attrs.get("cats_int64s") or attrs.get("cats_strings") or [])
    return [(tuple(shapes[0]) + (count,), np.float32)]


@onnx_op(ML + "OneHotEncoder")
def import_one_hot_encoder(node, ctx):
    """y[..., k] = 1 where x equals category k (a float x truncated to an integer first, as
    onnxruntime casts it): EQUAL against the categories, CAST to float. An unknown category is all
    zeros (with zeros=0 onnxruntime fails the run instead)."""
    x, y = node.inputs[0], node.outputs[0]
    if node.attr("cats_strings"):
        raise ctx.error("its categories are strings, which TFLite's kernels cannot compare: encode "
                        "them as integers before the model")
    cats = np.asarray(node.attr("cats_int64s") or [], np.int64)
    if not cats.size:
        raise ctx.error("it has no categories (cats_int64s)")
    shape = tuple(ctx.shape(x))
    if np.dtype(ctx.dtype(x)) != INT:
        x = emit(ctx, "CAST", [x], x + "_int", shape, INT,
                 {"in_data_type": np.dtype(ctx.dtype(x)), "out_data_type": INT})
    column = reshape(ctx, x, shape + (1,))
    hits = emit(ctx, "EQUAL", [column, ctx.constant("categories", cats)], y + "_hits",
                shape + (cats.size,), np.bool_)
    ctx.add_op("CAST", [hits], [y], {"in_data_type": np.dtype(np.bool_), "out_data_type": FLOAT})


@onnx_types(ML + "ArrayFeatureExtractor")
def _extractor_types(shapes, dtypes, attrs):
    return [(tuple(shapes[0][:-1]) + (int(np.prod(shapes[1], dtype=np.int64)),), dtypes[0])]


@onnx_op(ML + "ArrayFeatureExtractor")
def import_array_feature_extractor(node, ctx):
    """y = x[..., indices] along the last axis: GATHER (constant indices checked within
    [0, C - 1]; run-time ones must be, as onnxruntime fails the run on others)."""
    x, indices = node.inputs[:2]
    columns = ctx.shape(x)[-1]
    value = ctx.const(indices)
    if value is not None:
        value = np.asarray(value, np.int64).reshape(-1)
        if value.size and (value.min() < 0 or value.max() >= columns):
            raise ctx.error(f"indices {value.tolist()} are outside [0, {columns - 1}] (onnxruntime "
                            "fails the run)")
        indices = ctx.constant("indices", value.astype(np.int32))
    elif ctx.rank(indices) != 1:
        indices = reshape(ctx, indices, (int(np.prod(ctx.shape(indices))),))
    ctx.add_op("GATHER", [x, indices], node.outputs[:1], {"axis": ctx.rank(x) - 1, "batch_dims": 0})


def _encoder_table(node, kind: str):
    """LabelEncoder's keys or values (kind "keys" / "values"), from its tensor (ai.onnx.ml 4) or
    its typed lists; None when they are strings."""
    tensor = node.attr(f"{kind}_tensor")
    if tensor is not None:
        tensor = np.asarray(tensor).reshape(-1)
        return None if tensor.dtype.kind in "OSU" else tensor
    for suffix, dtype in (("int64s", np.int64), ("floats", np.float32)):
        if node.attr(f"{kind}_{suffix}") is not None:
            return np.asarray(node.attr(f"{kind}_{suffix}"), dtype)
    return None


@onnx_op(ML + "LabelEncoder")
def import_label_encoder(node, ctx):
    """y = values[k] where x equals keys[k] (the first such k), else the default: EQUAL against
    the keys, ARG_MAX of the matches, GATHER from the values followed by the default. Numeric
    keys and values (string ones are tensors the loader refuses)."""
    x, y = node.inputs[0], node.outputs[0]
    keys, values = _encoder_table(node, "keys"), _encoder_table(node, "values")
    if keys is None or values is None or keys.size != values.size or not keys.size:
        raise ctx.error("its keys and values are not numbers of equal count")
    if keys.dtype.kind == "f" and np.isnan(keys).any():
        raise ctx.error("a NaN key is not converted yet (EQUAL never matches NaN)")
    default = node.attr("default_tensor")
    if default is None:
        default = node.attr("default_int64", -1) if values.dtype.kind in "iu" else \
            node.attr("default_float", -0.0)
    table = np.append(values, np.asarray(default, values.dtype).reshape(-1)[:1])
    shape = tuple(ctx.shape(x))
    column = reshape(ctx, x, shape + (1,))
    matches = emit(ctx, "EQUAL", [column, ctx.constant("keys", keys.astype(ctx.dtype(x)))],
                   y + "_matches", shape + (keys.size,), np.bool_)
    as_int = emit(ctx, "CAST", [matches], y + "_matches_int", shape + (keys.size,), INT,
                  {"in_data_type": np.dtype(np.bool_), "out_data_type": INT})
    axis = ctx.constant("axis", np.array([len(shape)], np.int32))
    first = emit(ctx, "ARG_MAX", [as_int, axis], y + "_first", shape, INT, {"output_type": INT})
    found = emit(ctx, "REDUCE_ANY", [matches, axis], y + "_found", shape, np.bool_,
                 {"keep_dims": False})
    index = emit(ctx, "SELECT_V2", [found, first, ctx.constant("default", np.array(keys.size, np.int32))],
                 y + "_index", shape, INT)
    ctx.add_op("GATHER", [ctx.constant("values", table), index], [y], {"axis": 0, "batch_dims": 0})


# --- linear models ----------------------------------------------------------------------------

@onnx_types(ML + "LinearRegressor")
def _linear_regressor_types(shapes, dtypes, attrs):
    return [((rows_of(shapes[0]), int(attrs.get("targets", 1))), np.float32)]


@onnx_op(ML + "LinearRegressor")
def import_linear_regressor(node, ctx):
    """y = x @ coefficients.T + intercepts: FULLY_CONNECTED (post_transform NONE)."""
    check_post(ctx, text(node.attr("post_transform", "NONE")))
    if text(node.attr("post_transform", "NONE")) != "NONE":
        raise ctx.error("post_transform of a LinearRegressor is NONE or PROBIT; "
                        f"{text(node.attr('post_transform'))!r} is not defined")
    x = matrix(ctx, node.inputs[0])
    targets = int(node.attr("targets", 1))
    weights = _weights(ctx, node.attr("coefficients"), targets, ctx.shape(x)[1])
    bias = np.asarray(node.attr("intercepts") or np.zeros(targets), np.float32)
    out = ctx.tensor(node.outputs[0] + "_2d", (ctx.shape(x)[0], targets), FLOAT)
    fully_connected(ctx, x, weights, bias.reshape(-1), out)
    write_into(ctx, out, node.outputs[0])


def _weights(ctx, coefficients, rows: int, features: int) -> np.ndarray:
    coefficients = np.asarray(coefficients or [], np.float32)
    if coefficients.size != rows * features:
        raise ctx.error(f"it has {coefficients.size} coefficients for {rows} rows of {features} "
                        "features")
    return coefficients.reshape(rows, features)


@onnx_types(ML + "LinearClassifier")
def _linear_classifier_types(shapes, dtypes, attrs):
    classes = len(attrs.get("intercepts") or [])
    labels = len(attrs.get("classlabels_ints") or attrs.get("classlabels_strings") or [])
    width = 2 if classes == 1 and labels == 2 else classes
    label_type = np.str_ if attrs.get("classlabels_strings") else np.int64
    return [((rows_of(shapes[0]),), label_type), ((rows_of(shapes[0]), width), np.float32)]


@onnx_op(ML + "LinearClassifier")
def import_linear_classifier(node, ctx):
    """scores = x @ coefficients.T + intercepts (FULLY_CONNECTED). Several classes: the label is
    that of the highest score, then the post transform. One score column and two labels (a binary
    model): the label is the second where the score is > 0, the scores [1 - s, s] (LOGISTIC:
    [1 - logistic(s), logistic(s)]; onnxruntime applies no SOFTMAX there)."""
    post = check_post(ctx, text(node.attr("post_transform", "NONE")))
    label_out, score_out = used_output(ctx, node, 0), used_output(ctx, node, 1)
    labels = class_labels(node)
    x = matrix(ctx, node.inputs[0])
    intercepts = np.asarray(node.attr("intercepts") or [], np.float32)
    classes = intercepts.size
    weights = _weights(ctx, node.attr("coefficients"), classes, ctx.shape(x)[1])
    rows = ctx.shape(x)[0]
    scores = ctx.tensor(node.name + "_scores", (rows, classes), FLOAT)
    fully_connected(ctx, x, weights, intercepts, scores)
    if classes == 1:
        binary_labels = labels if labels.size == 2 else np.array([0, 1], np.int64)
        if label_out:
            sign_label(ctx, scores, 0.0, binary_labels, label_out)
        if score_out and labels.size == 2:
            column = post_transform(ctx, scores, "LOGISTIC" if post == "LOGISTIC" else "NONE", scores)
            write_into(ctx, complement(ctx, column), score_out)
        elif score_out:
            write_into(ctx, post_transform(ctx, scores, post, scores), score_out)
        return
    if label_out:
        label_of(ctx, scores, labels, label_out)
    if score_out:
        write_into(ctx, post_transform(ctx, scores, post, scores), score_out)


def complement(ctx, column: str) -> str:
    """[N, 1] p -> [N, 2] [1 - p, p]."""
    rows = ctx.shape(column)[0]
    other = emit(ctx, "SUB", [ctx.constant("one", np.ones((), np.float32)), column], column + "_1m",
                 (rows, 1))
    return emit(ctx, "CONCATENATION", [other, column], column + "_pair", (rows, 2),
                options={"axis": 1})


@onnx_types(ML + "SVMRegressor")
def _svm_regressor_types(shapes, dtypes, attrs):
    return [((rows_of(shapes[0]), 1), np.float32)]


@onnx_op(ML + "SVMRegressor")
def import_svm_regressor(node, ctx):
    """A LINEAR kernel: y = sum_i coef_i <sv_i, x> + rho = x @ (coef @ SV) + rho, one
    FULLY_CONNECTED row (no support vectors: the coefficients are the weights themselves)."""
    kernel = text(node.attr("kernel_type", "LINEAR"))
    if kernel != "LINEAR":
        raise ctx.error(f"kernel_type {kernel} is not converted: only a LINEAR kernel folds into "
                        "one weight matrix (an RBF, POLY or SIGMOID kernel needs every support "
                        "vector at run time)")
    if node.attr("one_class", 0):
        raise ctx.error("a one-class SVM (one_class=1) is not converted yet")
    check_post(ctx, text(node.attr("post_transform", "NONE")))
    x = matrix(ctx, node.inputs[0])
    features = ctx.shape(x)[1]
    coefficients = np.asarray(node.attr("coefficients") or [], np.float64)
    count = int(node.attr("n_supports", 0))
    if count:
        vectors = np.asarray(node.attr("support_vectors") or [], np.float64)
        if vectors.size != count * features or coefficients.size != count:
            raise ctx.error(f"{count} support vectors of {features} features do not fit "
                            f"{vectors.size} values and {coefficients.size} coefficients")
        row = coefficients @ vectors.reshape(count, features)
    else:
        row = _weights(ctx, coefficients.tolist(), 1, features)[0]
    rho = np.asarray(node.attr("rho") or [0.0], np.float32).reshape(-1)[:1]
    out = ctx.tensor(node.outputs[0] + "_2d", (ctx.shape(x)[0], 1), FLOAT)
    fully_connected(ctx, x, row.reshape(1, features).astype(np.float32), rho, out)
    write_into(ctx, out, node.outputs[0])
