"""The ai.onnx.ml ops (qconvert/ops/ml.py) against onnxruntime, in the forms skl2onnx and
onnxmltools (LightGBM, XGBoost) write them: Scaler, Normalizer, Binarizer, Imputer,
OneHotEncoder, ArrayFeatureExtractor, LabelEncoder, LinearRegressor/Classifier, SVMRegressor and
SVMClassifier at every kernel, and
tree ensembles (TreeEnsembleRegressor/Classifier, ai.onnx.ml 5's TreeEnsemble) at every node
mode, with NaN tracked either way, several targets, base values and post transforms, on seeded
inputs that include every threshold exactly; float64 inputs and outputs; one-line refusals."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from qconvert.tflite import reader
from tests.harness import assert_matches_onnxruntime, assert_refused_in_one_line

F, D, I64 = TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT64
ML = "ai.onnx.ml"
EXACT = {"rtol": 0, "atol": 0}
CLOSE = {"rtol": 1e-5, "atol": 1e-6}


def ml_model(nodes, inputs, outputs, ml_opset=3, inits=None):
    """A model importing ai.onnx.ml at `ml_opset` (and ai.onnx 17)."""
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, t, list(s)) for n, (t, s) in inputs.items()],
        [helper.make_tensor_value_info(n, t, None) for n, t in outputs.items()],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid(ML, ml_opset)], ir_version=8)


def one_op(op_type, x_type=F, x_shape=(6, 4), outputs=None, ml_opset=3, **attrs):
    node = helper.make_node(op_type, ["x"], list(outputs or {"y": F}), domain=ML, name="ml", **attrs)
    return ml_model([node], {"x": (x_type, x_shape)}, outputs or {"y": F}, ml_opset)


def features(shape=(6, 4), seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


# --- preprocessing ----------------------------------------------------------------------------

@pytest.mark.parametrize("x_type,dtype", [(F, np.float32), (D, np.float64), (I64, np.int64)],
                         ids=["float", "double", "int64"])
@pytest.mark.parametrize("per_feature", [True, False])
def test_scaler(x_type, dtype, per_feature):
    """StandardScaler: offset the means, scale the inverse deviations (float output)."""
    offset, scale = ([0.5, -1.0, 2.0, 0.0], [2.0, 0.25, -1.5, 3.0]) if per_feature else ([0.5], [2.0])
    model = one_op("Scaler", x_type, offset=offset, scale=scale)
    x = features(seed=1) * 3
    assert_matches_onnxruntime(model, {"x": x.astype(dtype) if x_type != I64 else np.round(x).astype(dtype)},
                               **CLOSE)


@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
@pytest.mark.parametrize("x_type,dtype", [(F, np.float32), (D, np.float64)], ids=["float", "double"])
def test_normalizer(norm, x_type, dtype):
    """Rows divided by their max, L1 or L2 norm; an all-zero row left as it is."""
    x = features(seed=2).astype(dtype)
    x[1] = 0
    x[2] = -np.abs(x[2])
    assert_matches_onnxruntime(one_op("Normalizer", x_type, norm=norm), {"x": x}, **CLOSE)


def test_binarizer_at_its_threshold():
    x = features(seed=3)
    x[0, :2] = 0.25
    assert_matches_onnxruntime(one_op("Binarizer", threshold=0.25), {"x": x}, **EXACT)


@pytest.mark.parametrize("replaced", [float("nan"), 0.0, -1.0])
@pytest.mark.parametrize("per_feature", [True, False])
def test_imputer_floats(replaced, per_feature):
    """SimpleImputer: NaN (or a given value) replaced by each feature's statistic."""
    values = [1.5, -2.0, 0.0, 7.0] if per_feature else [3.25]
    x = features(seed=4)
    x[[0, 2, 5], [1, 3, 0]] = replaced
    model = one_op("Imputer", imputed_value_floats=values, replaced_value_float=replaced)
    assert_matches_onnxruntime(model, {"x": x}, **EXACT)


def test_imputer_int64():
    x = np.array([[1, -1, 3], [-1, 5, -1]], np.int64)
    model = one_op("Imputer", I64, (2, 3), {"y": I64}, imputed_value_int64s=[10, 20, 30],
                   replaced_value_int64=-1)
    assert_matches_onnxruntime(model, {"x": x}, **EXACT)


@pytest.mark.parametrize("x_type,x", [
    (I64, np.array([[3, 1], [7, 2], [1, 9]], np.int64)),
    (F, np.array([[3.0, 1.7], [7.2, -2.0], [1.0, 9.0]], np.float32)),
    (D, np.array([[3.0, 1.0], [7.0, 2.0], [1.0, 9.0]], np.float64))], ids=["int64", "float", "double"])
def test_one_hot_encoder(x_type, x):
    """Categories matched per element, an unknown one all zeros, a float truncated first."""
    model = one_op("OneHotEncoder", x_type, x.shape, cats_int64s=[1, 3, 7, 2], zeros=1)
    assert_matches_onnxruntime(model, {"x": x}, **EXACT)


def test_array_feature_extractor():
    node = helper.make_node("ArrayFeatureExtractor", ["x", "i"], ["y"], domain=ML)
    model = ml_model([node], {"x": (F, (5, 6))}, {"y": F}, inits={"i": np.array([4, 0, 4, 2], np.int64)})
    assert_matches_onnxruntime(model, {"x": features((5, 6), seed=5)}, **EXACT)


def test_array_feature_extractor_run_time_indices():
    node = helper.make_node("ArrayFeatureExtractor", ["x", "i"], ["y"], domain=ML)
    model = ml_model([node], {"x": (F, (5, 6)), "i": (I64, (3,))}, {"y": F})
    feeds = {"x": features((5, 6), seed=5), "i": np.array([5, 1, 1], np.int64)}
    assert_matches_onnxruntime(model, feeds, **EXACT)


@pytest.mark.parametrize("keys,values,default,x", [
    ([3, -1, 7], [10, 20, 30], {"default_int64": -5}, np.array([[3, 7, 0], [-1, 3, 8]], np.int64)),
    ([3, -1, 7], [0.5, 1.5, -2.0], {"default_float": 9.0}, np.array([[3, 7, 0], [-1, 3, 8]], np.int64)),
    ([0.5, 2.0], [1, 2], {}, np.array([0.5, 2.0, 1.0, -0.5], np.float32)),
    ([0.5, 2.0], [4.0, 8.0], {}, np.array([[0.5], [3.0]], np.float32))],
    ids=["int_int", "int_float", "float_int", "float_float"])
def test_label_encoder_numbers(keys, values, default, x):
    """LabelEncoder on numbers (ai.onnx.ml 2 lists): the first matching key's value, else the
    default (-1 / -0.0 when not given)."""
    def typed(kind, v):
        return {f"{kind}_int64s" if isinstance(v[0], int) else f"{kind}_floats": v}
    out = I64 if isinstance(values[0], int) else F
    model = one_op("LabelEncoder", I64 if x.dtype == np.int64 else F, x.shape, {"y": out}, ml_opset=2,
                   **typed("keys", keys), **typed("values", values), **default)
    assert_matches_onnxruntime(model, {"x": x}, **EXACT)


def test_label_encoder_tensors():
    """ai.onnx.ml 4: keys, values and the default as tensors."""
    tensor = lambda v: numpy_helper.from_array(np.asarray(v))  # noqa: E731
    model = one_op("LabelEncoder", I64, (2, 3), {"y": I64}, ml_opset=4, keys_tensor=tensor([4, 5, 6]),
                   values_tensor=tensor([-4, -5, -6]), default_tensor=tensor([0]))
    assert_matches_onnxruntime(model, {"x": np.array([[4, 6, 9], [5, 5, 4]], np.int64)}, **EXACT)


# --- linear models ----------------------------------------------------------------------------

@pytest.mark.parametrize("targets", [1, 3])
def test_linear_regressor(targets):
    """LinearRegression / Ridge (onnxruntime's kernel takes float32 only)."""
    rng = np.random.default_rng(6)
    model = one_op("LinearRegressor", targets=targets,
                   coefficients=rng.standard_normal(4 * targets).tolist(),
                   intercepts=rng.standard_normal(targets).tolist())
    assert_matches_onnxruntime(model, {"x": features(seed=7)}, **CLOSE)


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"])
@pytest.mark.parametrize("classes", [1, 3])
def test_linear_classifier(post, classes):
    """LogisticRegression / LinearSVC: one score column (binary: [1 - s, s]) or one per class."""
    rng = np.random.default_rng(8)
    labels = [4, 9] if classes == 1 else [2, 5, 11]
    model = one_op("LinearClassifier", outputs={"label": I64, "scores": F}, post_transform=post,
                   coefficients=rng.standard_normal(4 * classes).tolist(),
                   intercepts=rng.standard_normal(classes).tolist(), classlabels_ints=labels)
    x = features(seed=9)
    x[0] = 0  # the score is the intercept
    assert_matches_onnxruntime(model, {"x": x}, **CLOSE)


@pytest.mark.parametrize("kernel", ["LINEAR", "POLY", "RBF", "SIGMOID"])
@pytest.mark.parametrize("one_class", [0, 1])
def test_svm_regressor(kernel, one_class):
    """SVR / NuSVR / OneClassSVM: kernel values against the support vectors, coefficients, rho."""
    rng = np.random.default_rng(10)
    model = one_op("SVMRegressor", kernel_type=kernel, kernel_params=[0.3, 0.5, 3.0], rho=[0.75],
                   n_supports=5, coefficients=rng.standard_normal(5).tolist(), post_transform="NONE",
                   support_vectors=rng.standard_normal(5 * 4).tolist(), one_class=one_class)
    assert_matches_onnxruntime(model, {"x": features(seed=11)}, **CLOSE)


def test_linear_svm_regressor_without_support_vectors():
    """LinearSVR's older form: the coefficients are the weights."""
    model = one_op("SVMRegressor", kernel_type="LINEAR", kernel_params=[0.0, 0.0, 0.0], rho=[0.25],
                   n_supports=0, coefficients=[0.5, -1.0, 2.0, 0.0])
    assert_matches_onnxruntime(model, {"x": features(seed=12)}, **CLOSE)


def svm_classifier(classes, kernel, post, per_class=(2, 3, 1, 2)):
    rng = np.random.default_rng(13)
    per_class = list(per_class[:classes])
    count, pairs = sum(per_class), classes * (classes - 1) // 2
    return one_op("SVMClassifier", x_shape=(16, 4), outputs={"label": I64, "scores": F}, kernel_type=kernel,
                  kernel_params=[0.3, 0.5, 2.0], vectors_per_class=per_class,
                  support_vectors=rng.standard_normal(count * 4).tolist(),
                  coefficients=rng.standard_normal((classes - 1) * count).tolist(),
                  rho=rng.standard_normal(pairs).tolist(), classlabels_ints=list(range(3, 3 + classes)),
                  post_transform=post)


@pytest.mark.parametrize("kernel", ["LINEAR", "POLY", "RBF", "SIGMOID"])
@pytest.mark.parametrize("classes", [2, 3, 4])
def test_svm_classifier(kernel, classes):
    """SVC / NuSVC (probability=False): one-against-one decisions, the label by votes."""
    assert_matches_onnxruntime(svm_classifier(classes, kernel, "NONE"), {"x": features((16, 4), 14)},
                               **CLOSE)


@pytest.mark.parametrize("post", ["LOGISTIC", "SOFTMAX"])
@pytest.mark.parametrize("classes", [2, 3])
def test_svm_classifier_post_transforms(post, classes):
    assert_matches_onnxruntime(svm_classifier(classes, "RBF", post), {"x": features((16, 4), 15)},
                               **CLOSE)


@pytest.mark.parametrize("classes", [2, 3])
@pytest.mark.parametrize("positive", [False, True])
def test_svm_classifier_linear_form(classes, positive):
    """The liblinear form (no support vectors): scores x @ coefficients + rho[0]; two classes
    take the second label where the top score is > 0 (>= 0.5 for positive coefficients)."""
    rng = np.random.default_rng(16)
    coefficients = rng.standard_normal(classes * 4)
    coefficients = np.abs(coefficients) if positive else coefficients
    model = one_op("SVMClassifier", x_shape=(16, 4), outputs={"label": I64, "scores": F}, kernel_type="LINEAR",
                   coefficients=(coefficients / 4).tolist(), rho=[-0.2], kernel_params=[0.0, 0.0, 0.0],
                   classlabels_ints=list(range(5, 5 + classes)))
    assert_matches_onnxruntime(model, {"x": features((16, 4), 17)}, **CLOSE)


# --- tree ensembles ---------------------------------------------------------------------------

MODES = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"]


def random_trees(seed, trees=3, depth=3, features_count=4, modes=("BRANCH_LEQ",), missing=False,
                 grid=False):
    """Trees as node lists: (tree, node, feature, threshold, mode, true, false, missing) per
    internal node, (tree, node) per leaf in `leaves`; node ids shuffled within each tree. Grid
    thresholds (quarters) make EQ/NEQ nodes meet inputs drawn from the same grid."""
    rng = np.random.default_rng(seed)
    internal, leaves = [], []
    for t in range(trees):
        count = 2 ** (depth + 1) - 1
        ids = rng.permutation(count)
        for k in range(count):
            if k >= 2 ** depth - 1 or (k > 0 and rng.random() < 0.15 and 2 * k + 2 < count // 2):
                leaves.append((t, int(ids[k])))
                continue
            threshold = float(rng.integers(-4, 5) / 4) if grid else float(rng.standard_normal())
            internal.append((t, int(ids[k]), int(rng.integers(features_count)), threshold,
                             str(rng.choice(modes)), int(ids[2 * k + 1]), int(ids[2 * k + 2]),
                             int(missing and rng.random() < 0.5)))
    reachable = _reachable(internal, leaves)
    return [n for n in internal if (n[0], n[1]) in reachable], [l for l in leaves if l in reachable]


def _reachable(internal, leaves):
    """The (tree, node) pairs reachable from each tree's root (node at position 0 of the tree)."""
    children = {(n[0], n[1]): (n[5], n[6]) for n in internal}
    roots = {}
    for n in internal:
        roots.setdefault(n[0], n[1])
    seen, pending = set(), [(t, r) for t, r in roots.items()]
    while pending:
        key = pending.pop()
        seen.add(key)
        pending += [(key[0], c) for c in children.get(key, ())]
    return seen


def tree_attrs(internal, leaves, prefix, weights, doubles=False):
    """ai.onnx.ml 1/3 attributes: nodes_* over internal nodes and leaves, tree by tree, `prefix`_* weights
    [(tree, node, id, weight)]; thresholds and weights as double tensors with `doubles`."""
    nodes = internal + [(t, n, 0, 0.0, "LEAF", 0, 0, 0) for t, n in leaves]
    nodes.sort(key=lambda n: n[0])  # each tree's nodes together, its root first (as exporters write)
    attrs = {"nodes_treeids": [n[0] for n in nodes], "nodes_nodeids": [n[1] for n in nodes],
             "nodes_featureids": [n[2] for n in nodes], "nodes_modes": [n[4] for n in nodes],
             "nodes_truenodeids": [n[5] for n in nodes], "nodes_falsenodeids": [n[6] for n in nodes],
             "nodes_missing_value_tracks_true": [n[7] for n in nodes],
             f"{prefix}_treeids": [w[0] for w in weights], f"{prefix}_nodeids": [w[1] for w in weights],
             f"{prefix}_ids": [w[2] for w in weights]}
    values, leaf_weights = [n[3] for n in nodes], [w[3] for w in weights]
    if doubles:
        attrs["nodes_values_as_tensor"] = numpy_helper.from_array(np.array(values, np.float64))
        attrs[f"{prefix}_weights_as_tensor"] = numpy_helper.from_array(np.array(leaf_weights, np.float64))
    else:
        attrs["nodes_values"], attrs[f"{prefix}_weights"] = values, leaf_weights
    return attrs


def at_thresholds(internal, rows=24, seed=0, features_count=4, grid=False, nan=True, dtype=np.float32):
    """Seeded inputs with every threshold of `internal` met exactly somewhere, NaN in some."""
    rng = np.random.default_rng(seed)
    x = (rng.integers(-5, 6, (rows, features_count)) / 4 if grid
         else rng.standard_normal((rows, features_count))).astype(np.float64)
    for k, node in enumerate(internal):
        x[k % rows, node[2]] = node[3]
    if nan:
        x[rng.integers(rows, size=4), rng.integers(features_count, size=4)] = np.nan
    return x.astype(dtype)


def leaf_weights(leaves, targets, seed, every=True):
    """[(tree, node, target, weight)]: each leaf a weight for every target (or one of them)."""
    rng = np.random.default_rng(seed)
    out = []
    for t, n in leaves:
        for k in (range(targets) if every else [int(rng.integers(targets))]):
            out.append((t, n, k, float(np.round(rng.standard_normal(), 3))))
    return out


@pytest.mark.parametrize("aggregate", ["SUM", "MIN", "MAX"])
@pytest.mark.parametrize("base", [[], [0.5]])
def test_tree_regressor_one_target(aggregate, base):
    internal, leaves = random_trees(18, trees=4, depth=3, modes=MODES[:4], missing=True)
    attrs = tree_attrs(internal, leaves, "target", leaf_weights(leaves, 1, 19))
    if base:
        attrs["base_values"] = base
    model = one_op("TreeEnsembleRegressor", x_shape=(24, 4), n_targets=1, aggregate_function=aggregate,
                   **attrs)
    assert_matches_onnxruntime(model, {"x": at_thresholds(internal)}, **CLOSE)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("missing", [False, True])
def test_tree_regressor_modes(mode, missing):
    grid = mode in ("BRANCH_EQ", "BRANCH_NEQ")
    internal, leaves = random_trees(12, modes=(mode, "BRANCH_LEQ"), missing=missing, grid=grid)
    attrs = tree_attrs(internal, leaves, "target", leaf_weights(leaves, 1, 13))
    model = one_op("TreeEnsembleRegressor", x_shape=(24, 4), n_targets=1, **attrs)
    assert_matches_onnxruntime(model, {"x": at_thresholds(internal, grid=grid)}, **CLOSE)


@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE", "MIN", "MAX"])
@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX"])
def test_tree_regressor_targets(aggregate, post):
    """A random forest / gradient boosting regressor of 3 targets, base values, every mode."""
    internal, leaves = random_trees(14, trees=5, depth=4, modes=MODES[:4], missing=True)
    attrs = tree_attrs(internal, leaves, "target", leaf_weights(leaves, 3, 15, every=False))
    model = one_op("TreeEnsembleRegressor", x_shape=(24, 4), n_targets=3, aggregate_function=aggregate,
                   post_transform=post, base_values=[0.5, -1.0, 2.0], **attrs)
    assert_matches_onnxruntime(model, {"x": at_thresholds(internal)}, **CLOSE)


@pytest.mark.parametrize("doubles", [True, False], ids=["double_tensors", "float_attributes"])
def test_tree_regressor_float64_input_is_compared_exactly(doubles):
    """skl2onnx on float64 data: a float64 input, thresholds as double tensors (ai.onnx.ml 3) or
    floats; onnxruntime compares in double. Inputs at each threshold and one float64 step either
    side of it (float32 cannot tell them apart), -0.0, 0.0, +-inf and NaN."""
    internal, leaves = random_trees(16, trees=2, depth=4, modes=MODES[:4], missing=True)
    internal = [n[:3] + (0.0 if k == 0 else n[3],) + n[4:] for k, n in enumerate(internal)]
    attrs = tree_attrs(internal, leaves, "target", leaf_weights(leaves, 1, 17), doubles=doubles)
    model = one_op("TreeEnsembleRegressor", D, (24, 4), n_targets=1, **attrs)
    x = at_thresholds(internal, dtype=np.float64)
    x[-3:, 0], x[-4, 1:] = [-0.0, np.inf, -np.inf], 0.0
    for step in (-np.inf, None, np.inf):
        shifted = x if step is None else np.nextafter(x, step)
        flatbuffer, _ = assert_matches_onnxruntime(model, {"x": shifted}, **CLOSE)
    assert ("BITCAST", 1) in reader.read(flatbuffer).ops  # compared as int64 keys


def classifier(internal, leaves, weights, labels, x_type=F, rows=24, **attrs):
    tree = tree_attrs(internal, leaves, "class", weights)
    return one_op("TreeEnsembleClassifier", x_type, (rows, 4), {"label": I64, "probabilities": F},
                  classlabels_int64s=labels, **tree, **attrs)


def per_tree_class(leaves, classes, seed):
    """LightGBM / XGBoost multiclass: tree t carries class t % classes at every leaf."""
    rng = np.random.default_rng(seed)
    return [(t, n, t % classes, float(np.round(rng.standard_normal(), 3))) for t, n in leaves]


def probabilities(leaves, classes, seed):
    """scikit-learn's trees: every leaf the class frequencies (they sum to 1)."""
    rng = np.random.default_rng(seed)
    out = []
    for t, n in leaves:
        p = rng.dirichlet(np.ones(classes))
        out += [(t, n, k, float(np.float32(p[k]))) for k in range(classes)]
    return out


@pytest.mark.parametrize("form", ["sklearn_forest", "lightgbm", "xgboost", "sparse"])
@pytest.mark.parametrize("labels", [[0, 1, 2], [5, -3, 40, 7]], ids=["three", "four_labels"])
def test_tree_classifier_multiclass(form, labels):
    """A random forest (class frequencies, NONE), LightGBM (a tree per class, SOFTMAX), XGBoost
    (base values, SOFTMAX) and leaves carrying one class each (a class unscored in some rows is
    never the label)."""
    classes = len(labels)
    internal, leaves = random_trees(20, trees=2 * classes, depth=3, modes=MODES[:4], missing=True)
    attrs = {}
    if form == "sklearn_forest":
        weights = probabilities(leaves, classes, 21)
    elif form == "sparse":
        weights = leaf_weights(leaves, classes, 21, every=False)
    else:
        weights = per_tree_class(leaves, classes, 21)
        attrs["post_transform"] = "SOFTMAX"
        if form == "xgboost":
            attrs["base_values"] = [0.5] * classes
    model = classifier(internal, leaves, weights, labels, **attrs)
    assert_matches_onnxruntime(model, {"x": at_thresholds(internal)}, **CLOSE)


@pytest.mark.parametrize("form", ["lightgbm", "xgboost", "sklearn_gbm", "sklearn_tree",
                                  "positive_class_1"])
@pytest.mark.parametrize("post", ["NONE", "LOGISTIC"])
def test_tree_classifier_two_classes(form, post):
    """Binary forms: one class's raw scores (LightGBM, XGBoost with its base score, scikit-learn's
    gradient boosting with its prior), both classes' frequencies (a decision tree: onnxruntime
    labels 1 where class 1 has any weight), class 1 with positive weights (> 0.5 picks it)."""
    internal, leaves = random_trees(22, trees=3, depth=3, modes=MODES[:4], missing=True)
    attrs, labels = {"post_transform": post}, [0, 1]
    if form == "sklearn_tree":
        weights = probabilities(leaves, 2, 23)
    elif form == "positive_class_1":
        weights = [(t, n, 1, abs(w) / 3) for t, n, _, w in leaf_weights(leaves, 1, 23)]
        labels = [10, 20]
    else:
        weights = leaf_weights(leaves, 1, 23)
    if form in ("xgboost", "sklearn_gbm"):
        attrs["base_values"] = [-0.25]
    model = classifier(internal, leaves, weights, labels, **attrs)
    assert_matches_onnxruntime(model, {"x": at_thresholds(internal)}, **CLOSE)


def tree_ensemble_v5(internal, leaves, weights, targets, dtype=np.float32, **attrs):
    """ai.onnx.ml 5's TreeEnsemble from the same trees: nodes and leaves by index, a child a
    node or (nodes_*leafs) a leaf, modes as uint8 codes, splits and weights as tensors."""
    node_at = {(n[0], n[1]): i for i, n in enumerate(internal)}
    leaf_at = {leaf: i for i, leaf in enumerate(leaves)}
    weight_of = {(t, n): (k, w) for t, n, k, w in weights}

    def child(tree, node):
        return (0, node_at[(tree, node)]) if (tree, node) in node_at else (1, leaf_at[(tree, node)])

    trues = [child(n[0], n[5]) for n in internal]
    falses = [child(n[0], n[6]) for n in internal]
    roots = []
    for i, n in enumerate(internal):
        if not roots or internal[roots[-1]][0] != n[0]:
            roots.append(i)
    tensor = lambda values, t: numpy_helper.from_array(np.asarray(values, t))  # noqa: E731
    return one_op("TreeEnsemble", D if dtype == np.float64 else F, (24, 4),
                  {"y": D if dtype == np.float64 else F}, ml_opset=5, n_targets=targets,
                  tree_roots=roots, nodes_featureids=[n[2] for n in internal],
                  nodes_splits=tensor([n[3] for n in internal], dtype),
                  nodes_modes=tensor([MODES.index(n[4]) for n in internal], np.uint8),
                  nodes_truenodeids=[c[1] for c in trues], nodes_trueleafs=[c[0] for c in trues],
                  nodes_falsenodeids=[c[1] for c in falses], nodes_falseleafs=[c[0] for c in falses],
                  nodes_missing_value_tracks_true=[n[7] for n in internal],
                  leaf_targetids=[weight_of[leaf][0] for leaf in leaves],
                  leaf_weights=tensor([weight_of[leaf][1] for leaf in leaves], dtype), **attrs)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float", "double"])
@pytest.mark.parametrize("targets,post,aggregate", [(1, 0, 1), (2, 0, 1), (3, 2, 1), (3, 1, 0), (2, 0, 3)],
                         ids=["one_target", "two_targets", "softmax", "logistic_average", "max"])
def test_tree_ensemble_opset5(dtype, targets, post, aggregate):
    """LightGBM through onnxmltools' newer converter: TreeEnsemble (ai.onnx.ml 5), float32 or
    float64 in and out with splits of that type, every mode but EQ/NEQ, NaN tracked either way;
    float64 inputs at each split and a float64 step either side of it."""
    internal, leaves = random_trees(30, trees=4, depth=3, modes=MODES[:4], missing=True)
    internal.sort(key=lambda n: n[0])
    internal = _root_first(internal)
    weights = leaf_weights(leaves, targets, 31, every=False)
    model = tree_ensemble_v5(internal, leaves, weights, targets, dtype, post_transform=post,
                             aggregate_function=aggregate)
    x = at_thresholds(internal, dtype=dtype)  # float64: the double splits exactly
    assert_matches_onnxruntime(model, {"x": x}, **CLOSE)
    if dtype == np.float64:  # a float64 step either side of each split
        assert_matches_onnxruntime(model, {"x": np.nextafter(x, np.inf)}, **CLOSE)
        assert_matches_onnxruntime(model, {"x": np.nextafter(x, -np.inf)}, **CLOSE)


def _root_first(internal):
    """Each tree's nodes with its root (the node no other one points to) first."""
    out = []
    for t in dict.fromkeys(n[0] for n in internal):
        nodes = [n for n in internal if n[0] == t]
        pointed = {c for n in nodes for c in (n[5], n[6])}
        out += sorted(nodes, key=lambda n: n[1] in pointed)
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float", "double"])
def test_tree_ensemble_set_membership(dtype):
    """BRANCH_MEMBER (a categorical split, as LightGBM's): x in the node's set of values, on
    integer inputs (category codes). onnxruntime takes integer members only, and on a value
    between integers it does not test membership as the spec says (1.25 is in {1, -1} there)."""
    internal, leaves = random_trees(34, trees=3, depth=3, modes=("BRANCH_LEQ", "BRANCH_LT"), grid=True)
    internal = _root_first(sorted(internal, key=lambda n: n[0]))
    member = [k for k in range(len(internal)) if k % 3 == 0]
    sets = [[-1.0, 1.0], [0.0], [1.0, 2.0, -2.0]]  # onnxruntime takes integer members only
    values = []
    for j, k in enumerate(member):
        values += sets[j % 3] + [np.nan]
    model = tree_ensemble_v5(internal, leaves, leaf_weights(leaves, 1, 35), 1, dtype,
                             membership_values=numpy_helper.from_array(np.array(values, dtype)))
    modes = numpy_helper.to_array(next(a.t for a in model.graph.node[0].attribute if a.name == "nodes_modes"))
    modes = modes.copy()
    modes[member] = 6
    for a in model.graph.node[0].attribute:
        if a.name == "nodes_modes":
            a.t.CopyFrom(numpy_helper.from_array(modes.astype(np.uint8)))
    x = np.round(at_thresholds(internal, grid=True, dtype=dtype))
    assert_matches_onnxruntime(model, {"x": x}, **CLOSE)


def test_scaler_into_linear_regressor_in_float64():
    """StandardScaler + LinearRegression on float64 data: the input cast at the edge, float out."""
    nodes = [helper.make_node("Scaler", ["x"], ["s"], domain=ML, offset=[1.0, -2.0, 0.5, 0.0],
                              scale=[0.5, 2.0, 1.0, 4.0]),
             helper.make_node("LinearRegressor", ["s"], ["y"], domain=ML,
                              coefficients=[0.25, -1.0, 2.0, 0.5], intercepts=[1.5])]
    model = ml_model(nodes, {"x": (D, (6, 4))}, {"y": F})
    assert_matches_onnxruntime(model, {"x": features(seed=32, dtype=np.float64)}, **CLOSE)


# --- refusals ---------------------------------------------------------------------------------

def test_zipmap_is_refused():
    internal, leaves = random_trees(40, trees=1, depth=2)
    tree = classifier(internal, leaves, probabilities(leaves, 3, 41), [0, 1, 2])
    zipmap = helper.make_node("ZipMap", ["probabilities"], ["z"], domain=ML, classlabels_int64s=[0, 1, 2])
    tree.graph.node.append(zipmap)
    map_type = helper.make_map_type_proto(I64, helper.make_tensor_type_proto(F, []))
    tree.graph.output.append(helper.make_value_info("z", helper.make_sequence_type_proto(map_type)))
    assert_refused_in_one_line(tree, "ZipMap.*zipmap")


def test_string_labels_are_refused():
    """A string label tensor (classlabels_strings) is refused by the loader, naming it."""
    internal, leaves = random_trees(42, trees=1, depth=2)
    attrs = tree_attrs(internal, leaves, "class", probabilities(leaves, 2, 43))
    model = one_op("TreeEnsembleClassifier", outputs={"label": TensorProto.STRING, "p": F},
                   x_shape=(4, 4), classlabels_strings=["no", "yes"], **attrs)
    assert_refused_in_one_line(model, "'label'.*dtype object", "ml")


def test_svc_probabilities_are_refused():
    model = svm_classifier(3, "RBF", "NONE")
    model.graph.node[0].attribute.extend([helper.make_attribute("prob_a", [1.0, 0.5, 2.0]),
                                          helper.make_attribute("prob_b", [0.0, 0.1, -0.1])])
    assert_refused_in_one_line(model, "probability=False", "ml")


def test_two_base_values_of_two_classes_are_refused():
    internal, leaves = random_trees(44, trees=1, depth=2)
    model = classifier(internal, leaves, leaf_weights(leaves, 1, 45), [0, 1], base_values=[0.25, 0.25])
    assert_refused_in_one_line(model, "2 base values for 2 classes", "ml")


@pytest.mark.parametrize("op,attrs,match", [
    ("LinearRegressor", {"coefficients": [1.0] * 4, "post_transform": "PROBIT"}, "PROBIT"),
    ("OneHotEncoder", {"cats_strings": ["a", "b"]}, "strings"),
    ("TreeEnsembleRegressor", {"post_transform": "PROBIT", "n_targets": 2,
                               **tree_attrs([(0, 0, 0, 0.5, "BRANCH_LEQ", 1, 2, 0)], [(0, 1), (0, 2)],
                                            "target", [(0, 1, 0, 1.0), (0, 2, 1, 2.0)])}, "PROBIT")],
    ids=["probit", "string_categories", "tree_probit"])
def test_refusals(op, attrs, match):
    assert_refused_in_one_line(one_op(op, **attrs), match, "ml")


def test_feature_vectorizer():
    """Inputs side by side as floats (onnxmltools joins feature groups so)."""
    node = helper.make_node("FeatureVectorizer", ["a", "b"], ["y"], domain=ML, inputdimensions=[3, 2])
    model = ml_model([node], {"a": (I64, (4, 3)), "b": (I64, (4, 2))}, {"y": F})
    feeds = {"a": np.arange(12, dtype=np.int64).reshape(4, 3) - 5, "b": np.arange(8, dtype=np.int64).reshape(4, 2) - 3}
    assert_matches_onnxruntime(model, feeds, **EXACT)
