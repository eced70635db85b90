"""The ai.onnx.ml ops scikit-learn, LightGBM and XGBoost exporters write (skl2onnx, onnxmltools),
computed as onnxruntime computes them (its CPU kernels are the reference; the ONNX-ML spec leaves
the two-class outputs vague and onnxruntime's choices are kept).

- Scaler (SUB, MUL), Normalizer (MAX / L1 / L2 per row: DIV by the row's max, sum of magnitudes
  or root of squares, a zero norm left as it is), Binarizer (GREATER, CAST), Imputer (SELECT_V2
  where x equals the replaced value, or is NaN when that is NaN), OneHotEncoder (EQUAL against
  the integer categories, CAST), ArrayFeatureExtractor (GATHER along the last axis).
- LabelEncoder on numbers (EQUAL against the keys, ARG_MAX, GATHER of the values),
  FeatureVectorizer (CONCATENATION).
- LinearRegressor, LinearClassifier: FULLY_CONNECTED, then the post transform and, for
  classifiers, the label (ARG_MAX and a GATHER of the labels; one score column: its sign).
- SVMRegressor and SVMClassifier (SVR, NuSVR, OneClassSVM, SVC, NuSVC; every kernel: LINEAR,
  POLY, RBF, SIGMOID): the kernel values against the support vectors (_kernel), times the
  coefficients (FULLY_CONNECTED); a classifier's one-against-one decisions vote (a second
  FULLY_CONNECTED of the wins), the label the class of most votes.
- The tree ensembles: ml_trees.py.

float64 inputs and outputs are cast at the graph's edges (the loader computes float64 as
float32); int64 and int32 features are cast to float, as onnxruntime casts them.

Refused in one line: string categories (TFLite's kernels compute on numbers; a string label
tensor the loader refuses), ZipMap (a sequence of maps; refused.py), the PROBIT post transform
(no inverse error function in TFLite), an SVC's probability estimates (libsvm's pairwise
coupling, an iterative solve per row).
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


@onnx_types(ML + "FeatureVectorizer")
def _vectorizer_types(shapes, dtypes, attrs):
    return [((rows_of(shapes[0]), int(sum(attrs.get("inputdimensions") or []))), np.float32)]


@onnx_op(ML + "FeatureVectorizer")
def import_feature_vectorizer(node, ctx):
    """The inputs' features side by side, as floats: CONCATENATION along the features (each
    input as wide as its inputdimensions entry says)."""
    widths = [int(w) for w in node.attr("inputdimensions") or []]
    columns = [matrix(ctx, name) for name in node.inputs]
    if len(widths) != len(columns):
        raise ctx.error(f"inputdimensions has {len(widths)} entries for {len(columns)} inputs")
    for name, width in zip(columns, widths):
        if ctx.shape(name)[1] != width:
            raise ctx.error(f"an input of {ctx.shape(name)[1]} features is declared {width} wide "
                            "(onnxruntime truncates or pads it); not converted yet")
    joined = emit(ctx, "CONCATENATION", columns, node.outputs[0] + "_joined",
                  (ctx.shape(columns[0])[0], sum(widths)), options={"axis": 1})
    write_into(ctx, joined, node.outputs[0])


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
    weights = weights_of(ctx, node.attr("coefficients"), targets, ctx.shape(x)[1])
    bias = np.asarray(node.attr("intercepts") or np.zeros(targets), np.float32)
    out = ctx.tensor(node.outputs[0] + "_2d", (ctx.shape(x)[0], targets), FLOAT)
    fully_connected(ctx, x, weights, bias.reshape(-1), out)
    write_into(ctx, out, node.outputs[0])


def weights_of(ctx, coefficients, rows: int, features: int) -> np.ndarray:
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
    weights = weights_of(ctx, node.attr("coefficients"), classes, ctx.shape(x)[1])
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


def _kernel(ctx, node, x: str, vectors: np.ndarray, hint: str) -> str:
    """[N, V] kernel values of the rows of x against the vectors, as onnxruntime's SVMs compute
    them: LINEAR <x, v> (FULLY_CONNECTED), POLY (gamma <x, v> + coef0) ^ degree, SIGMOID
    tanh(gamma <x, v> + coef0), RBF exp(-gamma |x - v|^2) (SQUARED_DIFFERENCE summed per vector,
    not the expanded form, whose cancellation onnxruntime does not have)."""
    kernel = text(node.attr("kernel_type", "LINEAR"))
    gamma, coef0, degree = (list(node.attr("kernel_params") or []) + [0.0] * 3)[:3]
    rows, count = ctx.shape(x)[0], vectors.shape[0]
    shape = (rows, count)
    if kernel == "RBF":
        wide = reshape(ctx, x, (rows, 1, ctx.shape(x)[1]))
        squares = emit(ctx, "SQUARED_DIFFERENCE", [wide, ctx.constant("vectors", vectors[None].astype(np.float32))],
                       hint + "_squares", (rows, count, vectors.shape[1]))
        distance = emit(ctx, "SUM", [squares, ctx.constant("axis", np.array([2], np.int32))],
                        hint + "_distance", shape, options={"keep_dims": False})
        scaled = emit(ctx, "MUL", [distance, ctx.constant("gamma", np.array(-gamma, np.float32))],
                      hint + "_scaled", shape)
        return emit(ctx, "EXP", [scaled], hint + "_kernel", shape)
    if kernel not in ("LINEAR", "POLY", "SIGMOID"):
        raise ctx.error(f"kernel_type {kernel!r} is not LINEAR, POLY, RBF or SIGMOID")
    dots = ctx.tensor(hint + "_dots", shape, FLOAT)
    fully_connected(ctx, x, vectors.astype(np.float32), None, dots)
    if kernel == "LINEAR":
        return dots
    scaled = emit(ctx, "MUL", [dots, ctx.constant("gamma", np.array(gamma, np.float32))], hint + "_scaled", shape)
    shifted = emit(ctx, "ADD", [scaled, ctx.constant("coef0", np.array(coef0, np.float32))], hint + "_shifted", shape)
    if kernel == "SIGMOID":
        return emit(ctx, "TANH", [shifted], hint + "_kernel", shape)
    return emit(ctx, "POW", [shifted, ctx.constant("degree", np.array(degree, np.float32))], hint + "_kernel", shape)


def _support_vectors(ctx, node, count: int, features: int) -> np.ndarray:
    vectors = np.asarray(node.attr("support_vectors") or [], np.float32)
    if vectors.size != count * features:
        raise ctx.error(f"{vectors.size} support vector values are not {count} vectors of {features} "
                        "features")
    return vectors.reshape(count, features)


@onnx_op(ML + "SVMRegressor")
def import_svm_regressor(node, ctx):
    """SVR / NuSVR (support vectors): the kernel values (_kernel) times the coefficients plus
    rho, FULLY_CONNECTED; LinearSVR's form (no support vectors): x @ coefficients + rho. A
    one-class SVM's output is 1 where that is > 0, else -1 (SELECT_V2)."""
    x = matrix(ctx, node.inputs[0])
    features = ctx.shape(x)[1]
    coefficients = np.asarray(node.attr("coefficients") or [], np.float32)
    rho = np.asarray(node.attr("rho") or [0.0], np.float32).reshape(-1)[:1]
    count = int(node.attr("n_supports", 0))
    out = ctx.tensor(node.outputs[0] + "_2d", (ctx.shape(x)[0], 1), FLOAT)
    if count:
        if coefficients.size != count:
            raise ctx.error(f"it has {coefficients.size} coefficients for {count} support vectors")
        kernels = _kernel(ctx, node, x, _support_vectors(ctx, node, count, features), node.name)
        fully_connected(ctx, kernels, coefficients.reshape(1, count), rho, out)
    else:
        fully_connected(ctx, x, weights_of(ctx, coefficients.tolist(), 1, features), rho, out)
    if node.attr("one_class", 0):
        above = emit(ctx, "GREATER", [out, ctx.constant("zero", np.zeros((), np.float32))],
                     out + "_inlier", ctx.shape(out), np.bool_)
        out = emit(ctx, "SELECT_V2", [above, ctx.constant("inlier", np.ones((), np.float32)),
                                      ctx.constant("outlier", -np.ones((), np.float32))],
                   out + "_class", ctx.shape(out))
    write_into(ctx, out, node.outputs[0])


def _svm_pairs(classes: int) -> list[tuple[int, int]]:
    """libsvm's one-against-one classifiers, in its order: (i, j) for i < j."""
    return [(i, j) for i in range(classes - 1) for j in range(i + 1, classes)]


@onnx_types(ML + "SVMClassifier")
def _svm_classifier_types(shapes, dtypes, attrs):
    classes = len(attrs.get("classlabels_ints") or attrs.get("classlabels_strings") or [])
    pairs = len(_svm_pairs(classes))
    one_against_one = sum(attrs.get("vectors_per_class") or []) > 0 and not attrs.get("prob_a")
    width = (pairs if classes > 2 else 2) if one_against_one else classes
    label = None if attrs.get("classlabels_strings") else ((rows_of(shapes[0]),), np.int64)
    return [label, ((rows_of(shapes[0]), width), np.float32)]


@onnx_op(ML + "SVMClassifier")
def import_svm_classifier(node, ctx):
    """SVC / NuSVC (support vectors; probability=False): each pair's decision from the kernel
    values (_kernel, then FULLY_CONNECTED), the label the class of most votes (the first of
    equal counts), the scores the decisions (two classes: [-d, d]; LOGISTIC: [1 - s, s] of
    s = logistic(d)). The linear form (no support vectors): scores x @ coefficients + rho[0],
    as LinearClassifier's, the label as onnxruntime picks it (_svm_linear_label)."""
    post = check_post(ctx, text(node.attr("post_transform", "NONE")))
    labels = class_labels(node)
    if labels.size < 2:
        raise ctx.error(f"it has {labels.size} class labels; a classifier has at least 2")
    x = matrix(ctx, node.inputs[0])
    per_class = [int(v) for v in node.attr("vectors_per_class") or []]
    if sum(per_class) == 0:
        _svm_linear(ctx, node, x, labels, post)
        return
    if node.attr("prob_a"):
        raise ctx.error("probability estimates (prob_a, prob_b: libsvm's pairwise coupling, an "
                        "iterative solve per row) are not converted; export with probability=False")
    if len(per_class) != labels.size:
        raise ctx.error(f"vectors_per_class has {len(per_class)} counts for {labels.size} classes")
    decisions = _svm_decisions(ctx, node, x, per_class)
    label_out, score_out = used_output(ctx, node, 0), used_output(ctx, node, 1)
    if label_out:
        label_of(ctx, _svm_votes(ctx, decisions, labels.size), labels, label_out)
    if score_out and labels.size > 2:
        write_into(ctx, post_transform(ctx, decisions, post, decisions), score_out)
    elif score_out:
        if post == "LOGISTIC":
            write_into(ctx, complement(ctx, post_transform(ctx, decisions, post, decisions)), score_out)
        elif post == "NONE":
            negated = emit(ctx, "NEG", [decisions], decisions + "_neg", ctx.shape(decisions))
            write_into(ctx, emit(ctx, "CONCATENATION", [negated, decisions], decisions + "_pair",
                                 (ctx.shape(decisions)[0], 2), options={"axis": 1}), score_out)
        else:
            write_into(ctx, complement(ctx, decisions), score_out)


def _svm_decisions(ctx, node, x: str, per_class: list[int]) -> str:
    """[N, pairs] one-against-one decisions: the kernel values times each pair's coefficients
    (class i's vectors weighted by row j - 1, class j's by row i) plus rho."""
    count, classes = sum(per_class), len(per_class)
    vectors = _support_vectors(ctx, node, count, ctx.shape(x)[1])
    coefficients = np.asarray(node.attr("coefficients") or [], np.float64)
    if coefficients.size < (classes - 1) * count:
        raise ctx.error(f"it has {coefficients.size} coefficients for {classes - 1} rows of {count}")
    coefficients = coefficients[:(classes - 1) * count].reshape(classes - 1, count)
    starts = np.concatenate([[0], np.cumsum(per_class)])
    pairs = _svm_pairs(classes)
    weights = np.zeros((len(pairs), count))
    for p, (i, j) in enumerate(pairs):
        weights[p, starts[i]:starts[i + 1]] = coefficients[j - 1, starts[i]:starts[i + 1]]
        weights[p, starts[j]:starts[j + 1]] = coefficients[i, starts[j]:starts[j + 1]]
    rho = np.asarray(node.attr("rho") or [], np.float32)
    if rho.size < len(pairs):
        raise ctx.error(f"it has {rho.size} rho values for {len(pairs)} class pairs")
    kernels = _kernel(ctx, node, x, vectors, node.name)
    decisions = ctx.tensor(node.name + "_decisions", (ctx.shape(x)[0], len(pairs)), FLOAT)
    fully_connected(ctx, kernels, weights.astype(np.float32), rho[:len(pairs)], decisions)
    return decisions


def _svm_votes(ctx, decisions: str, classes: int) -> str:
    """[N, classes] votes: each pair's decision > 0 votes for i, else for j (FULLY_CONNECTED of
    the wins with +1 / -1 per pair, j's votes as the bias)."""
    pairs = _svm_pairs(classes)
    table, bias = np.zeros((classes, len(pairs)), np.float32), np.zeros(classes, np.float32)
    for p, (i, j) in enumerate(pairs):
        table[i, p], table[j, p] = 1.0, -1.0
        bias[j] += 1.0
    wins = emit(ctx, "GREATER", [decisions, ctx.constant("zero", np.zeros((), np.float32))],
                decisions + "_wins", ctx.shape(decisions), np.bool_)
    wins = emit(ctx, "CAST", [wins], decisions + "_wins_float", ctx.shape(decisions), FLOAT,
                {"in_data_type": np.dtype(np.bool_), "out_data_type": FLOAT})
    votes = ctx.tensor(decisions + "_votes", (ctx.shape(decisions)[0], classes), FLOAT)
    fully_connected(ctx, wins, table, bias, votes)
    return votes


def _svm_linear(ctx, node, x: str, labels: np.ndarray, post: str) -> None:
    """The liblinear form: scores = x @ coefficients.T + rho[0], the post transform; the label
    that of the highest score, but with two classes the second where the highest score is
    >= 0.5 (coefficients all >= 0) or > 0 (others), unless prob_a is given."""
    classes, features = labels.size, ctx.shape(x)[1]
    coefficients = np.asarray(node.attr("coefficients") or [], np.float32)
    weights = weights_of(ctx, coefficients.tolist(), classes, features)
    rho = float((node.attr("rho") or [0.0])[0])
    scores = ctx.tensor(node.name + "_scores", (ctx.shape(x)[0], classes), FLOAT)
    fully_connected(ctx, x, weights, np.full(classes, rho, np.float32), scores)
    label_out, score_out = used_output(ctx, node, 0), used_output(ctx, node, 1)
    if label_out and classes == 2 and not node.attr("prob_a"):
        positive = bool(np.all(coefficients >= 0))
        peak = emit(ctx, "REDUCE_MAX", [scores, ctx.constant("axis", np.array([1], np.int32))],
                    scores + "_max", (ctx.shape(x)[0], 1), options={"keep_dims": True})
        index = emit(ctx, "ARG_MAX", [scores, ctx.constant("axis", np.array([1], np.int32))],
                     scores + "_index", (ctx.shape(x)[0],), INT, {"output_type": INT})
        comparison = "GREATER_EQUAL" if positive else "GREATER"
        second = emit(ctx, comparison, [reshape(ctx, peak, (ctx.shape(x)[0],)),
                                        ctx.constant("threshold", np.array(0.5 if positive else 0.0, np.float32))],
                      scores + "_second", (ctx.shape(x)[0],), np.bool_)
        chosen = emit(ctx, "SELECT_V2", [second, ctx.constant("one", np.array(1, np.int32)), index],
                      scores + "_chosen", (ctx.shape(x)[0],), INT)
        picked = emit(ctx, "GATHER", [ctx.constant("labels", labels), chosen], label_out + "_label",
                      (ctx.shape(x)[0],), INT, {"axis": 0, "batch_dims": 0})
        write_into(ctx, picked, label_out)
    elif label_out:
        label_of(ctx, scores, labels, label_out)
    if score_out:
        write_into(ctx, post_transform(ctx, scores, post, scores), score_out)
