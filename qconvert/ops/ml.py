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
- TreeEnsembleRegressor, TreeEnsembleClassifier (ai.onnx.ml 1 and 3, thresholds and weights as
  floats or tensors) and TreeEnsemble (ai.onnx.ml 5) in the GEMM form of tree inference
  (_emit_trees): each node's feature GATHERed, compared with its threshold (one LESS_EQUAL,
  LESS or EQUAL per comparison kind: GT, GTE and NEQ are the negations of LEQ, LT and EQ with
  their children swapped), NaN sent where missing_value_tracks_true says; the decisions times a
  constant path matrix (BATCH_MATMUL, one block per tree) equal a leaf's count of true turns
  exactly at the leaf reached (EQUAL: a one-hot of leaves); the one-hot times the leaf values
  (FULLY_CONNECTED) is the per-target sum, then the base values and the post transform.

float64 inputs and outputs are cast at the graph's edges (the loader computes float64 as
float32). A float64 threshold is rounded to float32 in the direction that keeps every decision
on a float32 value exact (x <= t is x <= the largest float32 not above t; x == t for a t float32
cannot hold is false): a float64 input that float32 holds is decided as onnxruntime decides it,
another one as its float32 rounding (within half a float32 step of a threshold it may differ).

Refused in one line: string class labels and string categories (TFLite's kernels compute on
numbers), ZipMap (a sequence of maps; refused.py), the PROBIT post transform (no inverse error
function in TFLite), non-linear SVM kernels and SVMClassifier, MIN/MAX tree aggregation and
BRANCH_MEMBER nodes (not converted yet), and two-class tree ensembles whose leaves carry a
class's weight in some paths only (onnxruntime's output then changes form from row to row).
"""

from __future__ import annotations

import numpy as np

from .compose import FLOAT, emit, used_output
from .gemm import fully_connected
from .layout import reshape, transpose
from .registry import onnx_op, onnx_types

ML = "ai.onnx.ml."
INT = np.dtype(np.int32)
_MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ",
          "BRANCH_MEMBER")
# Each mode as (the comparison emitted, whether the children swap): GT is not LEQ, GTE not LT.
_CANONICAL = {"BRANCH_LEQ": ("LESS_EQUAL", False), "BRANCH_GT": ("LESS_EQUAL", True),
              "BRANCH_LT": ("LESS", False), "BRANCH_GTE": ("LESS", True),
              "BRANCH_EQ": ("EQUAL", False), "BRANCH_NEQ": ("EQUAL", True)}
_POST = ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT")
# TreeEnsemble's post_transform codes as onnxruntime reads them (its enum's order: 1 LOGISTIC,
# 2 SOFTMAX; the spec says 1 SOFTMAX, 2 LOGISTIC): the converted model computes what it runs.
_AGGREGATE = ("AVERAGE", "SUM", "MIN", "MAX")


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _rows(x_shape) -> int:
    """The batch of an ai.onnx.ml input: [N, C] has N rows, [C] one."""
    return int(x_shape[0]) if len(x_shape) == 2 else 1


def _matrix(ctx, x: str) -> str:
    """Input `x` as the float32 [N, C] matrix the ML kernels read ([C] is one row; integers are
    cast to float, as onnxruntime does)."""
    shape = ctx.shape(x)
    if len(shape) not in (1, 2):
        raise ctx.error(f"input {x!r} has rank {len(shape)}; ai.onnx.ml ops take [N, C] or [C]")
    if np.dtype(ctx.dtype(x)) != FLOAT:
        x = emit(ctx, "CAST", [x], x + "_float", shape, FLOAT,
                 {"in_data_type": np.dtype(ctx.dtype(x)), "out_data_type": FLOAT})
    return reshape(ctx, x, (1, shape[0])) if len(shape) == 1 else x


def _into(ctx, inner: str, y: str) -> None:
    """`inner` written into the output `y` (a RESHAPE when the shapes differ, a CAST when the
    dtypes do)."""
    if np.dtype(ctx.dtype(inner)) != np.dtype(ctx.dtype(y)):
        inner = emit(ctx, "CAST", [inner], y + "_cast", ctx.shape(inner), ctx.dtype(y),
                     {"in_data_type": np.dtype(ctx.dtype(inner)), "out_data_type": np.dtype(ctx.dtype(y))})
    if tuple(ctx.shape(inner)) != tuple(ctx.shape(y)):
        reshape(ctx, inner, ctx.shape(y), y)
    else:
        ctx.add_op("RESHAPE", [inner, ctx.constant("shape", np.array(ctx.shape(y), np.int32))], [y])


def _floats(ctx, node, name: str, default=None) -> np.ndarray | None:
    """A float attribute given as a list (`name`) or a tensor (`name_as_tensor`), as float64."""
    value = node.attr(name + "_as_tensor", node.attr(name, default))
    return None if value is None else np.asarray(value, np.float64).reshape(-1)


def _labels(node) -> np.ndarray:
    """The int64 class labels (string labels, which the loader refuses where the label tensor
    exists, by their indices)."""
    ints = node.attr("classlabels_int64s", node.attr("classlabels_ints"))
    count = len(node.attr("classlabels_strings") or ints or [])
    return np.asarray(ints, np.int64) if ints else np.arange(count, dtype=np.int64)


def _check_post(ctx, post: str) -> str:
    if post == "PROBIT":
        raise ctx.error("post_transform PROBIT needs an inverse error function, which TFLite has "
                        "no kernel for")
    if post not in _POST:
        raise ctx.error(f"post_transform {post!r} is not one of {', '.join(_POST)}")
    return post


def _post_transform(ctx, scores: str, post: str, hint: str) -> str:
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


def _label_of(ctx, scores: str, labels: np.ndarray, y: str) -> None:
    """y = labels[argmax(scores)] per row (the first of equal maxima, as onnxruntime picks)."""
    index = emit(ctx, "ARG_MAX", [scores, ctx.constant("axis", np.array([1], np.int32))],
                 y + "_index", (ctx.shape(scores)[0],), INT, {"output_type": INT})
    table = ctx.constant("labels", labels)
    picked = emit(ctx, "GATHER", [table, index], y + "_label", (ctx.shape(scores)[0],), INT,
                  {"axis": 0, "batch_dims": 0})
    _into(ctx, picked, y)


def _sign_label(ctx, score: str, threshold: float, labels, y: str) -> None:
    """y = labels[1] where score > threshold, else labels[0] (score a [N, 1] column)."""
    rows = (ctx.shape(score)[0],)
    flat = reshape(ctx, score, rows)
    above = emit(ctx, "GREATER", [flat, ctx.constant("threshold", np.array(threshold, np.float32))],
                 y + "_positive", rows, np.bool_)
    picked = emit(ctx, "SELECT_V2", [above, ctx.constant("positive", np.array(labels[1], np.int64)),
                                     ctx.constant("negative", np.array(labels[0], np.int64))],
                  y + "_label", rows, INT)
    _into(ctx, picked, y)


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
    norm = _text(node.attr("norm", "MAX"))
    x = _matrix(ctx, node.inputs[0])
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
    _into(ctx, emit(ctx, "DIV", [x, safe], x + "_normalized", shape), node.outputs[0])


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


@onnx_types(ML + "ArrayFeatureExtractor", values=True)
def _extractor_types(shapes, dtypes, attrs, values):
    count = np.asarray(values[1]).size if values[1] is not None else None
    if count is None:
        return [None]
    return [(tuple(shapes[0][:-1]) + (count,), dtypes[0])]


@onnx_op(ML + "ArrayFeatureExtractor")
def import_array_feature_extractor(node, ctx):
    """y = x[..., indices] (indices constant, from 0 to C - 1): GATHER along the last axis."""
    x, y = node.inputs[:2], node.outputs[0]
    x, indices = x
    columns = ctx.shape(x)[-1]
    value = ctx.require_const(indices, "its indices")
    value = np.asarray(value, np.int64).reshape(-1)
    if value.size and (value.min() < 0 or value.max() >= columns):
        raise ctx.error(f"indices {value.tolist()} are outside [0, {columns - 1}] (onnxruntime "
                        "fails the run)")
    ctx.add_op("GATHER", [x, ctx.constant("indices", value.astype(np.int32))], [y],
               {"axis": ctx.rank(x) - 1, "batch_dims": 0})


# --- linear models ----------------------------------------------------------------------------

@onnx_types(ML + "LinearRegressor")
def _linear_regressor_types(shapes, dtypes, attrs):
    return [((_rows(shapes[0]), int(attrs.get("targets", 1))), np.float32)]


@onnx_op(ML + "LinearRegressor")
def import_linear_regressor(node, ctx):
    """y = x @ coefficients.T + intercepts: FULLY_CONNECTED (post_transform NONE)."""
    _check_post(ctx, _text(node.attr("post_transform", "NONE")))
    if _text(node.attr("post_transform", "NONE")) != "NONE":
        raise ctx.error("post_transform of a LinearRegressor is NONE or PROBIT; "
                        f"{_text(node.attr('post_transform'))!r} is not defined")
    x = _matrix(ctx, node.inputs[0])
    targets = int(node.attr("targets", 1))
    weights = _weights(ctx, node.attr("coefficients"), targets, ctx.shape(x)[1])
    bias = np.asarray(node.attr("intercepts") or np.zeros(targets), np.float32)
    out = ctx.tensor(node.outputs[0] + "_2d", (ctx.shape(x)[0], targets), FLOAT)
    fully_connected(ctx, x, weights, bias.reshape(-1), out)
    _into(ctx, out, node.outputs[0])


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
    return [((_rows(shapes[0]),), label_type), ((_rows(shapes[0]), width), np.float32)]


@onnx_op(ML + "LinearClassifier")
def import_linear_classifier(node, ctx):
    """scores = x @ coefficients.T + intercepts (FULLY_CONNECTED). Several classes: the label is
    that of the highest score, then the post transform. One score column and two labels (a binary
    model): the label is the second where the score is > 0, the scores [1 - s, s] (LOGISTIC:
    [1 - logistic(s), logistic(s)]; onnxruntime applies no SOFTMAX there)."""
    post = _check_post(ctx, _text(node.attr("post_transform", "NONE")))
    label_out, score_out = used_output(ctx, node, 0), used_output(ctx, node, 1)
    labels = _labels(node)
    x = _matrix(ctx, node.inputs[0])
    intercepts = np.asarray(node.attr("intercepts") or [], np.float32)
    classes = intercepts.size
    weights = _weights(ctx, node.attr("coefficients"), classes, ctx.shape(x)[1])
    rows = ctx.shape(x)[0]
    scores = ctx.tensor(node.name + "_scores", (rows, classes), FLOAT)
    fully_connected(ctx, x, weights, intercepts, scores)
    if classes == 1:
        binary_labels = labels if labels.size == 2 else np.array([0, 1], np.int64)
        if label_out:
            _sign_label(ctx, scores, 0.0, binary_labels, label_out)
        if score_out and labels.size == 2:
            column = _post_transform(ctx, scores, "LOGISTIC" if post == "LOGISTIC" else "NONE", scores)
            _into(ctx, _complement(ctx, column), score_out)
        elif score_out:
            _into(ctx, _post_transform(ctx, scores, post, scores), score_out)
        return
    if label_out:
        _label_of(ctx, scores, labels, label_out)
    if score_out:
        _into(ctx, _post_transform(ctx, scores, post, scores), score_out)


def _complement(ctx, column: str) -> str:
    """[N, 1] p -> [N, 2] [1 - p, p]."""
    rows = ctx.shape(column)[0]
    other = emit(ctx, "SUB", [ctx.constant("one", np.ones((), np.float32)), column], column + "_1m",
                 (rows, 1))
    return emit(ctx, "CONCATENATION", [other, column], column + "_pair", (rows, 2),
                options={"axis": 1})


@onnx_types(ML + "SVMRegressor")
def _svm_regressor_types(shapes, dtypes, attrs):
    return [((_rows(shapes[0]), 1), np.float32)]


@onnx_op(ML + "SVMRegressor")
def import_svm_regressor(node, ctx):
    """A LINEAR kernel: y = sum_i coef_i <sv_i, x> + rho = x @ (coef @ SV) + rho, one
    FULLY_CONNECTED row (no support vectors: the coefficients are the weights themselves)."""
    kernel = _text(node.attr("kernel_type", "LINEAR"))
    if kernel != "LINEAR":
        raise ctx.error(f"kernel_type {kernel} is not converted: only a LINEAR kernel folds into "
                        "one weight matrix (an RBF, POLY or SIGMOID kernel needs every support "
                        "vector at run time)")
    if node.attr("one_class", 0):
        raise ctx.error("a one-class SVM (one_class=1) is not converted yet")
    _check_post(ctx, _text(node.attr("post_transform", "NONE")))
    x = _matrix(ctx, node.inputs[0])
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
    _into(ctx, out, node.outputs[0])


# --- tree ensembles ---------------------------------------------------------------------------

class _Forest:
    """Trees as their decisions and leaves: internal nodes (feature, float64 threshold, mode,
    missing_value_tracks_true) and, per tree, its leaves' paths [(node, required decision of the
    canonical comparison)] with their per-target weights and which targets they carry."""

    def __init__(self, targets: int):
        self.targets = targets
        self.feature, self.threshold, self.mode, self.missing = [], [], [], []
        self.trees: list[list[tuple[list, np.ndarray, np.ndarray]]] = []

    def add_node(self, feature: int, threshold: float, mode: str, missing: bool) -> int:
        self.feature.append(int(feature))
        self.threshold.append(float(threshold))
        self.mode.append(mode)
        self.missing.append(bool(missing))
        return len(self.feature) - 1

    def walk(self, ctx, root, branch, leaf) -> None:
        """One tree from `root`: branch(ref) -> (feature, threshold, mode, missing, true, false)
        for an internal node, None for a leaf; leaf(ref) -> (weights, has) per target."""
        leaves, pending, limit = [], [(root, [])], 1 << 16
        while pending:
            ref, path = pending.pop()
            split = branch(ref)
            if split is None:
                leaves.append((path, *leaf(ref)))
                continue
            if len(path) > limit:
                raise ctx.error("a tree's path is longer than 65536 nodes (a cycle in its node ids?)")
            feature, threshold, mode, missing, true, false = split
            if mode not in _CANONICAL:
                raise ctx.error(f"node mode {mode} is not converted yet" if mode in _MODES
                                else f"node mode {mode!r} is not one of {', '.join(_MODES)}")
            m = self.add_node(feature, threshold, mode, missing)
            swapped = _CANONICAL[mode][1]
            pending.append((false, path + [(m, swapped)]))
            pending.append((true, path + [(m, not swapped)]))
        self.trees.append(leaves)


def _forest_v3(ctx, node, prefix: str, targets: int) -> _Forest:
    """The forest of a TreeEnsembleRegressor (prefix "target") or TreeEnsembleClassifier
    ("class"): nodes by (tree id, node id), each tree's root the node no other one points to."""
    tree_ids = np.asarray(node.attr("nodes_treeids") or [], np.int64)
    node_ids = np.asarray(node.attr("nodes_nodeids") or [], np.int64)
    count = tree_ids.size
    modes = [_text(m) for m in node.attr("nodes_modes") or []]
    values = _floats(ctx, node, "nodes_values", [0.0] * count)
    columns = {"nodes_featureids": node.attr("nodes_featureids") or [],
               "nodes_truenodeids": node.attr("nodes_truenodeids") or [],
               "nodes_falsenodeids": node.attr("nodes_falsenodeids") or [],
               "nodes_values": values, "nodes_modes": modes}
    missing = node.attr("nodes_missing_value_tracks_true") or [0] * count
    columns["nodes_missing_value_tracks_true"] = missing
    for name, column in columns.items():
        if len(column) != count:
            raise ctx.error(f"{name} has {len(column)} values for {count} nodes")
    at = {(int(t), int(n)): i for i, (t, n) in enumerate(zip(tree_ids, node_ids))}
    weights: dict[tuple[int, int], np.ndarray] = {}
    w_trees, w_nodes = node.attr(f"{prefix}_treeids") or [], node.attr(f"{prefix}_nodeids") or []
    w_ids, w_values = node.attr(f"{prefix}_ids") or [], _floats(ctx, node, f"{prefix}_weights", [])
    if not len(w_trees) == len(w_nodes) == len(w_ids) == len(w_values):
        raise ctx.error(f"the {prefix}_* weight attributes differ in length")
    for t, n, k, w in zip(w_trees, w_nodes, w_ids, w_values):
        if not 0 <= k < targets:
            raise ctx.error(f"{prefix}_ids has {k}, outside [0, {targets - 1}]")
        entry = weights.setdefault((int(t), int(n)), np.zeros((2, targets)))
        entry[0, k] += w
        entry[1, k] = 1
    forest = _Forest(targets)
    true_ids, false_ids = columns["nodes_truenodeids"], columns["nodes_falsenodeids"]

    def branch(i):
        if modes[i] == "LEAF":
            return None
        tree = int(tree_ids[i])
        children = [at.get((tree, int(c))) for c in (true_ids[i], false_ids[i])]
        if None in children:
            raise ctx.error(f"tree {tree} node {node_ids[i]} points to a node the tree lacks")
        return (columns["nodes_featureids"][i], values[i], modes[i], missing[i], *children)

    def leaf(i):
        entry = weights.get((int(tree_ids[i]), int(node_ids[i])), np.zeros((2, targets)))
        return entry[0], entry[1].astype(bool)

    for tree in dict.fromkeys(tree_ids.tolist()):
        members = [i for i in range(count) if tree_ids[i] == tree]
        pointed = {at.get((tree, int(c))) for i in members if modes[i] != "LEAF"
                   for c in (true_ids[i], false_ids[i])}
        roots = [i for i in members if i not in pointed]
        if len(roots) != 1:
            raise ctx.error(f"tree {tree} has {len(roots)} roots; a tree has one")
        forest.walk(ctx, roots[0], branch, leaf)
    return forest


def _forest_v5(ctx, node) -> _Forest:
    """The forest of an ai.onnx.ml 5 TreeEnsemble: each tree from its root in tree_roots, a
    child either a node or (nodes_trueleafs / nodes_falseleafs) a leaf with one target and weight."""
    targets = int(node.attr("n_targets", 1))
    splits = np.asarray(node.attr("nodes_splits"), np.float64).reshape(-1)
    modes = np.asarray(node.attr("nodes_modes"), np.int64).reshape(-1)
    features = node.attr("nodes_featureids") or []
    true_ids, false_ids = node.attr("nodes_truenodeids") or [], node.attr("nodes_falsenodeids") or []
    true_leafs, false_leafs = node.attr("nodes_trueleafs") or [], node.attr("nodes_falseleafs") or []
    missing = node.attr("nodes_missing_value_tracks_true") or [0] * splits.size
    leaf_targets = node.attr("leaf_targetids") or []
    leaf_weights = np.asarray(node.attr("leaf_weights"), np.float64).reshape(-1)
    if node.attr("membership_values") is not None:
        raise ctx.error("BRANCH_MEMBER nodes (membership_values) are not converted yet")
    forest = _Forest(targets)

    def branch(ref):
        is_leaf, i = ref
        if is_leaf:
            return None
        mode = _MODES[modes[i]] if 0 <= modes[i] < len(_MODES) else str(modes[i])
        return (features[i], splits[i], mode, missing[i],
                (bool(true_leafs[i]), int(true_ids[i])), (bool(false_leafs[i]), int(false_ids[i])))

    def leaf(ref):
        weights, has = np.zeros(targets), np.zeros(targets, bool)
        k = int(leaf_targets[ref[1]])
        if not 0 <= k < targets:
            raise ctx.error(f"leaf_targetids has {k}, outside [0, {targets - 1}]")
        weights[k], has[k] = leaf_weights[ref[1]], True
        return weights, has

    for root in node.attr("tree_roots") or []:
        forest.walk(ctx, (False, int(root)), branch, leaf)
    return forest


def _float32_thresholds(values: np.ndarray, kinds: list[str]) -> np.ndarray:
    """float64 thresholds as float32 ones deciding every float32 x the same: x <= t as x <= the
    largest float32 not above t, x < t as x < the smallest float32 not below t, x == t as never
    (NaN) when float32 cannot hold t."""
    with np.errstate(over="ignore"):
        rounded = values.astype(np.float32)
    wide = rounded.astype(np.float64)
    down = np.where(wide > values, np.nextafter(rounded, np.float32(-np.inf)), rounded)
    up = np.where(wide < values, np.nextafter(rounded, np.float32(np.inf)), rounded)
    kinds = np.asarray(kinds)
    exact = np.where(wide == values, rounded, np.float32(np.nan))
    return np.where(kinds == "LESS_EQUAL", down, np.where(kinds == "LESS", up, exact)).astype(np.float32)


def _decisions(ctx, x: str, forest: _Forest, slots: np.ndarray, hint: str) -> str:
    """[N, S] float 0/1: the canonical comparison of each slot's node (slots: node indices, -1
    for padding), NaN features decided as missing_value_tracks_true (or NEQ) says."""
    rows, width = ctx.shape(x)[0], slots.size
    real = np.maximum(slots, 0)
    modes = [forest.mode[i] if s >= 0 else "BRANCH_LEQ" for i, s in zip(real, slots)]
    kinds = [_CANONICAL[m][0] for m in modes]
    values = _float32_thresholds(np.asarray(forest.threshold)[real], kinds)
    features = np.asarray(forest.feature, np.int64)[real]
    if features.size and (features.min() < 0 or features.max() >= ctx.shape(x)[1]):
        raise ctx.error(f"a node reads feature {int(features.max())}, outside the input's "
                        f"{ctx.shape(x)[1]} features")
    shape = (rows, width)
    picked = emit(ctx, "GATHER", [x, ctx.constant("features", features.astype(np.int32))],
                  hint + "_features", shape, options={"axis": 1, "batch_dims": 0})
    thresholds = ctx.constant("thresholds", values)
    decided = None
    for kind in dict.fromkeys(kinds):
        result = emit(ctx, kind, [picked, thresholds], f"{hint}_{kind.lower()}", shape, np.bool_)
        if decided is not None:
            mask = ctx.constant("kind", np.asarray(kinds) == kind)
            result = emit(ctx, "SELECT_V2", [mask, result, decided], hint + "_decided", shape, np.bool_)
        decided = result
    # NaN goes to the true child where it tracks true (NEQ: NaN != t is true), in canonical terms.
    nan_true = np.array([(forest.missing[i] or m == "BRANCH_NEQ") != _CANONICAL[m][1]
                         for i, m in zip(real, modes)])
    missing = emit(ctx, "NOT_EQUAL", [picked, picked], hint + "_nan", shape, np.bool_)
    decided = emit(ctx, "SELECT_V2", [missing, ctx.constant("nan_decisions", nan_true), decided],
                   hint + "_decisions", shape, np.bool_)
    return emit(ctx, "CAST", [decided], hint + "_decisions_float", shape, FLOAT,
                {"in_data_type": np.dtype(np.bool_), "out_data_type": FLOAT})


def _leaf_hot(ctx, x: str, forest: _Forest, hint: str) -> tuple[str, list]:
    """[N, T * K] float one-hot of the leaf each tree reaches (K its most leaves; padding never
    hot), and the leaves in that order (None for padding)."""
    trees = forest.trees
    nodes = [sorted({m for path, _, _ in tree for m, _ in path}) for tree in trees]
    inner, width = max(1, max(map(len, nodes))), max(map(len, trees))
    slots = np.full((len(trees), inner), -1, np.int64)
    paths = np.zeros((len(trees), inner, width), np.float32)
    needed = np.full((len(trees), 1, width), -1.0, np.float32)
    order = [None] * (len(trees) * width)
    for t, (tree, members) in enumerate(zip(trees, nodes)):
        slots[t, :len(members)] = members
        position = {m: j for j, m in enumerate(members)}
        for k, leaf in enumerate(tree):
            for m, turn in leaf[0]:
                paths[t, position[m], k] += 1.0 if turn else -1.0
            needed[t, 0, k] = sum(1 for _, turn in leaf[0] if turn)
            order[t * width + k] = leaf
    rows = ctx.shape(x)[0]
    decided = _decisions(ctx, x, forest, slots.reshape(-1), hint)
    by_tree = transpose(ctx, reshape(ctx, decided, (rows, len(trees), inner)), (1, 0, 2))
    counts = emit(ctx, "BATCH_MATMUL", [by_tree, ctx.constant("paths", paths)], hint + "_counts",
                  (len(trees), rows, width), options={"adj_x": False, "adj_y": False})
    hot = emit(ctx, "EQUAL", [counts, ctx.constant("path_lengths", needed)], hint + "_reached",
               ctx.shape(counts), np.bool_)
    hot = emit(ctx, "CAST", [hot], hint + "_reached_float", ctx.shape(counts), FLOAT,
               {"in_data_type": np.dtype(np.bool_), "out_data_type": FLOAT})
    by_row = transpose(ctx, hot, (1, 0, 2))
    return reshape(ctx, by_row, (rows, len(trees) * width)), order


def _leaf_sums(ctx, hot: str, order: list, table: np.ndarray, bias, hint: str) -> str:
    """hot @ table (table [leaves, columns] in `order`, padding 0) + bias: FULLY_CONNECTED."""
    rows, columns = ctx.shape(hot)[0], table.shape[1]
    out = ctx.tensor(hint, (rows, columns), FLOAT)
    bias = None if bias is None else np.asarray(bias, np.float32).reshape(columns)
    fully_connected(ctx, hot, np.ascontiguousarray(table.T, np.float32), bias, out)
    return out


def _leaf_table(forest: _Forest, order: list, field: int) -> np.ndarray:
    """[slots, targets]: each leaf's weights (field 1) or which targets it carries (field 2)."""
    table = np.zeros((len(order), forest.targets))
    for j, leaf in enumerate(order):
        if leaf is not None:
            table[j] = leaf[field]
    return table


def _aggregate(ctx, forest: _Forest, aggregate: str) -> float:
    """The factor of the summed leaf weights: 1 (SUM) or 1 / trees (AVERAGE)."""
    if aggregate in ("MIN", "MAX"):
        raise ctx.error(f"aggregate_function {aggregate} is not converted yet (SUM and AVERAGE are)")
    if aggregate not in _AGGREGATE:
        raise ctx.error(f"aggregate_function {aggregate!r} is not one of {', '.join(_AGGREGATE)}")
    if not forest.trees:
        raise ctx.error("it has no trees")
    return 1.0 / len(forest.trees) if aggregate == "AVERAGE" else 1.0


def _regression(ctx, node, forest: _Forest, aggregate: str, post: str, base) -> None:
    """Sums (or averages) per target plus the base values, then the post transform; one target
    takes none but PROBIT (onnxruntime's single-target path)."""
    factor = _aggregate(ctx, forest, aggregate)
    x = _matrix(ctx, node.inputs[0])
    hot, order = _leaf_hot(ctx, x, forest, node.name)
    targets = forest.targets
    base = np.zeros(targets) if base is None or not base.size else base
    if targets == 1 and base.size == 1 or base.size == targets:
        bias = base.reshape(-1)[:targets] if base.size == targets else np.zeros(targets)
    else:
        bias = np.zeros(targets)
    sums = _leaf_sums(ctx, hot, order, _leaf_table(forest, order, 1) * factor, bias, node.name + "_sums")
    if targets > 1:  # a target no reached leaf carries is 0, its base value not added
        sums = _scored_only(ctx, sums, [_carried(ctx, forest, order, hot, k, 0) for k in range(targets)],
                            0.0, node.name)
    _into(ctx, sums if targets == 1 else _post_transform(ctx, sums, post, sums), node.outputs[0])


def _scored_only(ctx, scores: str, carried: list, fill: float, hint: str) -> str:
    """scores where their class or target has a score in the row (_carried), else `fill`."""
    if all(c is True for c in carried):
        return scores
    columns = [ctx.constant("scored", np.full((1, 1), c, bool)) if isinstance(c, bool) else c
               for c in carried]
    mask = _broadcast_columns(ctx, columns, ctx.shape(scores)[0], hint)
    return emit(ctx, "SELECT_V2", [mask, scores, ctx.constant("unscored", np.array(fill, np.float32))],
                hint + "_scored_only", ctx.shape(scores))


@onnx_types(ML + "TreeEnsembleRegressor")
def _tree_regressor_types(shapes, dtypes, attrs):
    return [((_rows(shapes[0]), int(attrs.get("n_targets", 1))), np.float32)]


@onnx_op(ML + "TreeEnsembleRegressor")
def import_tree_ensemble_regressor(node, ctx):
    """The GEMM form of the trees (_leaf_hot), the leaf weights summed per target (_regression)."""
    post = _check_post(ctx, _text(node.attr("post_transform", "NONE")))
    forest = _forest_v3(ctx, node, "target", int(node.attr("n_targets", 1)))
    _regression(ctx, node, forest, _text(node.attr("aggregate_function", "SUM")), post,
                _floats(ctx, node, "base_values"))


@onnx_types(ML + "TreeEnsemble")
def _tree_ensemble_types(shapes, dtypes, attrs):
    return [((_rows(shapes[0]), int(attrs.get("n_targets", 1))), dtypes[0])]


@onnx_op(ML + "TreeEnsemble")
def import_tree_ensemble(node, ctx):
    """ai.onnx.ml 5's TreeEnsemble (tensor thresholds and weights, integer codes for the
    aggregation and the post transform): as TreeEnsembleRegressor, output in the input's type."""
    post = int(node.attr("post_transform", 0))
    aggregate = int(node.attr("aggregate_function", 1))
    post = _check_post(ctx, _POST[post] if 0 <= post < len(_POST) else str(post))
    aggregate = _AGGREGATE[aggregate] if 0 <= aggregate < len(_AGGREGATE) else str(aggregate)
    _regression(ctx, node, _forest_v5(ctx, node), aggregate, post, None)


@onnx_types(ML + "TreeEnsembleClassifier")
def _tree_classifier_types(shapes, dtypes, attrs):
    strings = attrs.get("classlabels_strings")
    count = len(strings or attrs.get("classlabels_int64s") or [])
    label = None if strings else ((_rows(shapes[0]),), np.int64)
    return [label, ((_rows(shapes[0]), count), np.float32)]


def _carried(ctx, forest: _Forest, order: list, hot: str, k: int, base_size: int):
    """Whether class k has a score in every row (True), in none (False), or a [N, 1] boolean
    of the rows where a reached leaf carries it: onnxruntime skips unscored classes."""
    if k < base_size or any(all(leaf[2][k] for leaf in tree) for tree in forest.trees):
        return True
    if not any(leaf[2][k] for tree in forest.trees for leaf in tree):
        return False
    table = _leaf_table(forest, order, 2)[:, k:k + 1]
    count = _leaf_sums(ctx, hot, order, table, None, f"{hot}_carries_{k}")
    return emit(ctx, "GREATER", [count, ctx.constant("half", np.array(0.5, np.float32))],
                f"{hot}_scored_{k}", ctx.shape(count), np.bool_)


def _multiclass(ctx, node, forest, order, hot, labels, base, post) -> None:
    """Scores: the summed weights plus base_values[k] (for the k it lists); the label: the
    highest score among the classes scored; probabilities: the post transform of the scores."""
    classes = labels.size
    if base.size > classes:
        raise ctx.error(f"it has {base.size} base values for {classes} classes")
    bias = np.concatenate([base, np.zeros(classes - base.size)])
    scores = _leaf_sums(ctx, hot, order, _leaf_table(forest, order, 1), bias, node.name + "_scores")
    label_out, score_out = used_output(ctx, node, 0), used_output(ctx, node, 1)
    if label_out:
        carried = [_carried(ctx, forest, order, hot, k, base.size) for k in range(classes)]
        ranked = _scored_only(ctx, scores, carried, -np.inf, node.name)
        _label_of(ctx, ranked, labels, label_out)
    if score_out:
        _into(ctx, _post_transform(ctx, scores, post, scores), score_out)


def _broadcast_columns(ctx, columns: list[str], rows: int, hint: str) -> str:
    """[N, K] booleans from columns that are [N, 1] tensors or [1, 1] constants."""
    full = []
    for column in columns:
        if ctx.shape(column)[0] != rows:
            column = emit(ctx, "LOGICAL_AND", [column, ctx.constant("rows", np.ones((rows, 1), bool))],
                          hint + "_column", (rows, 1), np.bool_)
        full.append(column)
    return emit(ctx, "CONCATENATION", full, hint + "_scored", (rows, len(columns)), np.bool_,
                {"axis": 1})


def _two_classes(ctx, node, forest, order, hot, labels, base, post) -> None:
    """onnxruntime's two-class aggregation (TreeAggregatorClassifier), its per-row choices fixed
    here because every row scores each class or none does: the pair of sums (base_values[0]
    added to class 0's), the label by the sign (> 0.5 for one class of positive weights) of the
    positive score, the probabilities the post transform of the pair or, with class 0's score p
    alone, [1 - p, p] / [logistic(-p), logistic(p)] / [-p, p]."""
    class_ids = set(node.attr("class_ids") or [])
    one_class = len(class_ids) == 1
    positive = all(w >= 0 for w in _floats(ctx, node, "class_weights", []))
    if base.size > 1:
        raise ctx.error(f"it has {base.size} base values for 2 classes: onnxruntime's two-class "
                        "rule for them is undocumented (it drops base_values[0]); not converted")
    carried = [_carried(ctx, forest, order, hot, k, 0) for k in (0, 1)]
    if any(c is not True and c is not False for c in carried):
        raise ctx.error("two classes whose weights only some leaves carry: onnxruntime's output "
                        "changes form from row to row there, which is not converted")
    h0, h1 = carried
    b = np.concatenate([base, np.zeros(1 - base.size)])
    pair = _leaf_sums(ctx, hot, order, _leaf_table(forest, order, 1), [b[0], 0.0], node.name + "_pair")
    rows = ctx.shape(pair)[0]
    if not h0 and not h1:
        raise ctx.error("no leaf carries a class weight")
    pos = _column(ctx, pair, 1 if h1 else 0)
    if one_class:
        threshold, added = (0.5, 0) if positive else (0.0, 2)
        shown = labels
    else:
        threshold, added, shown = 0.0, 3 if base.size == 0 else -1, np.array([0, 1], np.int64)
    label_out, score_out = used_output(ctx, node, 0), used_output(ctx, node, 1)
    if label_out:
        _sign_label(ctx, pos, threshold, shown, label_out)
    if not score_out:
        return
    if h1:
        _into(ctx, _post_transform(ctx, pair, post, pair), score_out)
        return
    if added == -1:
        raise ctx.error("two classes, one base value and no weight for class 1: onnxruntime "
                        "writes one probability column of the two, which is not converted")
    p = _column(ctx, pair, 0)
    if added == 0:
        _into(ctx, _complement(ctx, p), score_out)
    elif post == "LOGISTIC":
        negated = emit(ctx, "NEG", [p], p + "_neg", (rows, 1))
        low = emit(ctx, "LOGISTIC", [negated], p + "_low", (rows, 1))
        high = emit(ctx, "LOGISTIC", [p], p + "_high", (rows, 1))
        _into(ctx, emit(ctx, "CONCATENATION", [low, high], p + "_pair", (rows, 2), options={"axis": 1}),
              score_out)
    else:
        negated = emit(ctx, "NEG", [p], p + "_neg", (rows, 1))
        _into(ctx, emit(ctx, "CONCATENATION", [negated, p], p + "_pair", (rows, 2), options={"axis": 1}),
              score_out)


def _column(ctx, matrix: str, k: int) -> str:
    """Column k of a [N, K] matrix as [N, 1]: GATHER."""
    return emit(ctx, "GATHER", [matrix, ctx.constant("column", np.array([k], np.int32))],
                f"{matrix}_column{k}", (ctx.shape(matrix)[0], 1), options={"axis": 1, "batch_dims": 0})


@onnx_op(ML + "TreeEnsembleClassifier")
def import_tree_ensemble_classifier(node, ctx):
    """The GEMM form of the trees (_leaf_hot); more than two classes: _multiclass, two:
    _two_classes (onnxruntime's binary rules)."""
    post = _check_post(ctx, _text(node.attr("post_transform", "NONE")))
    labels = _labels(node)
    if labels.size < 2:
        raise ctx.error(f"it has {labels.size} class labels; a classifier has at least 2")
    forest = _forest_v3(ctx, node, "class", labels.size)
    _aggregate(ctx, forest, "SUM")
    base = _floats(ctx, node, "base_values")
    base = np.zeros(0) if base is None else base
    x = _matrix(ctx, node.inputs[0])
    hot, order = _leaf_hot(ctx, x, forest, node.name)
    convert = _multiclass if labels.size > 2 else _two_classes
    convert(ctx, node, forest, order, hot, labels, base, post)
