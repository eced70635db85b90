"""The ai.onnx.ml tree ensembles (skl2onnx's trees, forests and gradient boosting; onnxmltools'
LightGBM and XGBoost), computed as onnxruntime computes them.

TreeEnsembleRegressor, TreeEnsembleClassifier (ai.onnx.ml 1 and 3, thresholds and weights as
floats or tensors) and TreeEnsemble (ai.onnx.ml 5) in the GEMM form of tree inference
(_leaf_hot): each node's feature GATHERed, compared with its threshold (one LESS_EQUAL,
LESS or EQUAL per comparison kind: GT, GTE and NEQ are the negations of LEQ, LT and EQ with
their children swapped), NaN sent where missing_value_tracks_true says; the decisions times a
constant path matrix (BATCH_MATMUL, one block per tree) equal a leaf's count of true turns
exactly at the leaf reached (EQUAL: a one-hot of leaves); the one-hot times the leaf values
(FULLY_CONNECTED) is the per-target sum, then the base values and the post transform.

A float64 graph input read by a tree ensemble is compared exactly, as onnxruntime compares it
in double: its bits BITCAST to int64 and mirrored for negative values are keys in the order of
the values, compared with the thresholds' keys (LESS_EQUAL, LESS, EQUAL on int64; NaN keys lie
beyond infinity's). Any other input is float32 inside (a float64 one computed by the graph, or
cast at its edge) and compared in float32 with each float64 threshold rounded in the direction
that keeps every decision on a float32 value exact (x <= t as x <= the largest float32 not above
t; x == t as never when float32 cannot hold t). The outputs leave as the graph declares them
(float64 cast at the edge).

BRANCH_MEMBER nodes (ai.onnx.ml 5) test x against their set of values: EQUAL against the sets
padded with a value nothing equals, REDUCE_ANY (the spec's membership; onnxruntime takes integer
members only and, on an x between integers, answers otherwise: 1.25 is in {1} there).

MIN and MAX aggregation reduce the trees' reached weights (REDUCE_MIN / REDUCE_MAX over the trees
that carry the target).

The constant path matrix holds trees x internal nodes x leaves of the largest tree (a LightGBM
model of 100 trees of 31 leaves: 370 KB).

Refused in one line: the PROBIT post transform, two classes with two base values, and two-class
ensembles whose leaves carry a class's weight on some paths only (onnxruntime's output then
changes form from row to row).
"""

from __future__ import annotations

import numpy as np

from .compose import FLOAT, emit, used_output
from .gemm import fully_connected
from .layout import reshape, transpose
from .ml import (ML, POST_TRANSFORMS, check_post, class_labels, complement, float_attr, label_of,
                 matrix, post_transform, rows_of, sign_label, text, write_into)
from .registry import onnx_op, onnx_types, tflite_op

_MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ",
          "BRANCH_MEMBER")
# Each mode as (the comparison emitted, whether the children swap): GT is not LEQ, GTE not LT.
_CANONICAL = {"BRANCH_LEQ": ("LESS_EQUAL", False), "BRANCH_GT": ("LESS_EQUAL", True),
              "BRANCH_LT": ("LESS", False), "BRANCH_GTE": ("LESS", True),
              "BRANCH_EQ": ("EQUAL", False), "BRANCH_NEQ": ("EQUAL", True),
              "BRANCH_MEMBER": ("MEMBER", False)}
_AGGREGATE = ("AVERAGE", "SUM", "MIN", "MAX")
# BITCAST float64 -> int64 (the exact comparison of a float64 input, _double_keys); op_version.cc: 1.
tflite_op("BITCAST", evaluate=lambda inputs, op: [inputs[0].view(np.int64)])


class _Forest:
    """Trees as their decisions and leaves: internal nodes (feature, float64 threshold, mode,
    missing_value_tracks_true) and, per tree, its leaves' paths [(node, required decision of the
    canonical comparison)] with their per-target weights and which targets they carry."""

    def __init__(self, targets: int):
        self.targets = targets
        self.feature, self.threshold, self.mode, self.missing = [], [], [], []
        self.members: dict[int, np.ndarray] = {}  # a BRANCH_MEMBER node's set of values
        self.trees: list[list[tuple[list, np.ndarray, np.ndarray]]] = []

    def add_node(self, feature: int, threshold, mode: str, missing: bool) -> int:
        """A node; a BRANCH_MEMBER node's threshold is its set of values."""
        if mode == "BRANCH_MEMBER":
            self.members[len(self.feature)] = np.asarray(threshold, np.float64)
            threshold = 0.0
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
    modes = [text(m) for m in node.attr("nodes_modes") or []]
    values = float_attr(ctx, node, "nodes_values", [0.0] * count)
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
    w_ids, w_values = node.attr(f"{prefix}_ids") or [], float_attr(ctx, node, f"{prefix}_weights", [])
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

    by_tree: dict[int, list[int]] = {}
    for i, tree in enumerate(tree_ids.tolist()):
        by_tree.setdefault(tree, []).append(i)
    for tree, members in by_tree.items():
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
    sets = _membership_sets(ctx, node, modes)
    forest = _Forest(targets)

    def branch(ref):
        is_leaf, i = ref
        if is_leaf:
            return None
        mode = _MODES[modes[i]] if 0 <= modes[i] < len(_MODES) else str(modes[i])
        return (features[i], sets.get(i, splits[i]), mode, missing[i],
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


def _membership_sets(ctx, node, modes: np.ndarray) -> dict[int, np.ndarray]:
    """Each BRANCH_MEMBER node's values: membership_values split at its NaNs, in node order."""
    values = node.attr("membership_values")
    members = [i for i, m in enumerate(modes) if m == _MODES.index("BRANCH_MEMBER")]
    if not members:
        return {}
    values = np.asarray(values if values is not None else [], np.float64).reshape(-1)
    cuts = np.flatnonzero(np.isnan(values))
    sets = np.split(values, cuts)
    sets = [sets[0]] + [part[1:] for part in sets[1:]]  # each part after the first opens on a NaN
    if sets and not sets[-1].size and len(sets) == len(members) + 1:
        sets = sets[:-1]  # a trailing NaN
    if len(sets) != len(members):
        raise ctx.error(f"membership_values holds {len(sets)} sets for {len(members)} "
                        "BRANCH_MEMBER nodes")
    return dict(zip(members, sets))


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
    for padding), NaN features decided as missing_value_tracks_true (or NEQ) says. A float64
    graph input is compared exactly, as ordered int64 keys of its bits (_double_keys); any other
    input in float32 against thresholds rounded for it (_float32_thresholds)."""
    real = np.maximum(slots, 0)
    modes = [forest.mode[i] if s >= 0 else "BRANCH_LEQ" for i, s in zip(real, slots)]
    kinds = [_CANONICAL[m][0] for m in modes]
    features = np.asarray(forest.feature, np.int64)[real]
    if features.size and (features.min() < 0 or features.max() >= ctx.shape(x)[1]):
        raise ctx.error(f"a node reads feature {int(features.max())}, outside the input's "
                        f"{ctx.shape(x)[1]} features")
    shape = (ctx.shape(x)[0], slots.size)
    double = _double_source(ctx, x)
    source = _double_keys(ctx, double, hint) if double else x
    picked = emit(ctx, "GATHER", [source, ctx.constant("features", features.astype(np.int32))],
                  hint + "_features", shape, ctx.dtype(source), {"axis": 1, "batch_dims": 0})
    values = np.asarray(forest.threshold)[real]
    thresholds = (ctx.model.add_constant("threshold_keys", _keys(values)) if double
                  else ctx.constant("thresholds", _float32_thresholds(values, kinds)))
    decided = None
    for kind in dict.fromkeys(kinds):
        result = (_membership(ctx, picked, forest, slots, bool(double), hint) if kind == "MEMBER" else
                  emit(ctx, kind, [picked, thresholds], f"{hint}_{kind.lower()}", shape, np.bool_))
        if decided is not None:
            mask = ctx.constant("kind", np.asarray(kinds) == kind)
            result = emit(ctx, "SELECT_V2", [mask, result, decided], hint + "_decided", shape, np.bool_)
        decided = result
    # NaN goes to the true child where it tracks true (NEQ: NaN != t is true), in canonical terms.
    nan_true = np.array([(forest.missing[i] or m == "BRANCH_NEQ") != _CANONICAL[m][1]
                         for i, m in zip(real, modes)])
    decided = emit(ctx, "SELECT_V2", [_is_nan(ctx, picked, bool(double)),
                                      ctx.constant("nan_decisions", nan_true), decided],
                   hint + "_decisions", shape, np.bool_)
    return emit(ctx, "CAST", [decided], hint + "_decisions_float", shape, FLOAT,
                {"in_data_type": np.dtype(np.bool_), "out_data_type": FLOAT})


def _membership(ctx, picked: str, forest: _Forest, slots: np.ndarray, keys: bool, hint: str) -> str:
    """[N, S] x in the slot's set (BRANCH_MEMBER; other slots' sets are empty): EQUAL against
    the sets padded with a value nothing equals, REDUCE_ANY."""
    width = max(s.size for s in forest.members.values())
    table = np.full((slots.size, width), np.nan)
    for j, m in enumerate(slots):
        if m in forest.members:
            table[j, :forest.members[m].size] = forest.members[m]
    table = (ctx.model.add_constant("member_keys", _keys(table)) if keys else
             ctx.constant("members", _float32_thresholds(table.reshape(-1), ["EQUAL"] * table.size)
                          .reshape(table.shape)))
    shape = ctx.shape(picked)
    column = reshape(ctx, picked, tuple(shape) + (1,))
    hits = emit(ctx, "EQUAL", [column, table], hint + "_member_hits", tuple(shape) + (width,), np.bool_)
    return emit(ctx, "REDUCE_ANY", [hits, ctx.constant("axis", np.array([2], np.int32))],
                hint + "_member", shape, np.bool_, {"keep_dims": False})


_INT64_MIN = np.iinfo(np.int64).min
_INF_KEY = int(np.array(np.inf).view(np.int64))  # the key of +inf; NaN keys lie beyond +-it


def _keys(values: np.ndarray) -> np.ndarray:
    """float64 values as int64 keys in the same order (IEEE bits, negatives mirrored: -0 and 0
    are one key); a NaN threshold the lowest key, which no comparison with x reaches."""
    values = np.asarray(values, np.float64)
    bits = values.view(np.int64)
    keys = np.where(bits < 0, _INT64_MIN - bits, bits)
    return np.where(np.isnan(values), _INT64_MIN, keys).astype(np.int64)


def _double_source(ctx, x: str) -> str | None:
    """The float64 graph input `x` is the loader's float32 CAST of, or None."""
    producer = ctx.model.producer(x)
    if producer is None or producer.type != "CAST" or producer.source != f"input {producer.inputs[0]}":
        return None
    return producer.inputs[0] if np.dtype(ctx.dtype(producer.inputs[0])) == np.float64 else None


def _double_keys(ctx, x64: str, hint: str) -> str:
    """_keys in the graph: BITCAST to int64, then INT64_MIN - bits where the sign bit is set."""
    shape, wide = ctx.shape(x64), np.dtype(np.int64)
    bits = emit(ctx, "BITCAST", [x64], hint + "_bits", shape, wide)
    negative = emit(ctx, "LESS", [bits, ctx.model.add_constant("zero", np.zeros((), wide))],
                    hint + "_negative", shape, np.bool_)
    mirrored = emit(ctx, "SUB", [ctx.model.add_constant("int64_min", np.array(_INT64_MIN)), bits],
                    hint + "_mirrored", shape, wide)
    return emit(ctx, "SELECT_V2", [negative, mirrored, bits], hint + "_keys", shape, wide)


def _is_nan(ctx, picked: str, keys: bool) -> str:
    """Where `picked` is NaN: x != x, or for keys beyond +-inf's."""
    shape = ctx.shape(picked)
    if not keys:
        return emit(ctx, "NOT_EQUAL", [picked, picked], picked + "_nan", shape, np.bool_)
    above = emit(ctx, "GREATER", [picked, ctx.model.add_constant("inf_key", np.array(_INF_KEY))],
                 picked + "_above_inf", shape, np.bool_)
    below = emit(ctx, "LESS", [picked, ctx.model.add_constant("minus_inf_key", np.array(-_INF_KEY))],
                 picked + "_below_inf", shape, np.bool_)
    return emit(ctx, "LOGICAL_OR", [above, below], picked + "_nan", shape, np.bool_)


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
    """The factor of the summed leaf weights: 1 (SUM) or 1 / trees (AVERAGE); MIN and MAX: 1."""
    if aggregate not in _AGGREGATE:
        raise ctx.error(f"aggregate_function {aggregate!r} is not one of {', '.join(_AGGREGATE)}")
    if not forest.trees:
        raise ctx.error("it has no trees")
    return 1.0 / len(forest.trees) if aggregate == "AVERAGE" else 1.0


def _regression(ctx, node, forest: _Forest, aggregate: str, post: str, base) -> None:
    """Sums (or averages) per target plus the base values, then the post transform; one target
    takes none but PROBIT (onnxruntime's single-target path)."""
    factor = _aggregate(ctx, forest, aggregate)
    x = matrix(ctx, node.inputs[0])
    hot, order = _leaf_hot(ctx, x, forest, node.name)
    targets = forest.targets
    base = np.zeros(targets) if base is None or not base.size else base
    if targets == 1 and base.size == 1 or base.size == targets:
        bias = base.reshape(-1)[:targets] if base.size == targets else np.zeros(targets)
    else:
        bias = np.zeros(targets)
    if aggregate in ("MIN", "MAX"):
        extreme = _extreme(ctx, hot, forest, order, aggregate, bias, node.name)
        write_into(ctx, extreme if targets == 1 else post_transform(ctx, extreme, post, extreme),
                   node.outputs[0])
        return
    sums = _leaf_sums(ctx, hot, order, _leaf_table(forest, order, 1) * factor, bias, node.name + "_sums")
    if targets > 1:  # a target no reached leaf carries is 0, its base value not added
        sums = _scored_only(ctx, sums, [_carried(ctx, forest, order, hot, k, 0) for k in range(targets)],
                            0.0, node.name)
    write_into(ctx, sums if targets == 1 else post_transform(ctx, sums, post, sums), node.outputs[0])


def _extreme(ctx, hot: str, forest: _Forest, order: list, aggregate: str, bias, hint: str) -> str:
    """MIN / MAX aggregation: each tree's reached weight per target (the one-hot times the
    weights, summed over the tree's leaves), the trees that carry the target reduced by
    REDUCE_MIN / REDUCE_MAX, plus the base value; a target no tree carries is 0 (onnxruntime
    adds no base value there, as with SUM)."""
    rows, trees, targets = ctx.shape(hot)[0], len(forest.trees), forest.targets
    width = len(order) // trees
    per_tree = reshape(ctx, hot, (rows, trees, width, 1))
    shape = (rows, trees, targets)

    def reached(field: int, name: str) -> str:
        table = _leaf_table(forest, order, field).reshape(1, trees, width, targets)
        products = emit(ctx, "MUL", [per_tree, ctx.constant(name, table.astype(np.float32))],
                        f"{hint}_{name}_products", (rows, trees, width, targets))
        return emit(ctx, "SUM", [products, ctx.constant("axis", np.array([2], np.int32))],
                    f"{hint}_{name}_reached", shape, options={"keep_dims": False})

    values, carried = reached(1, "weights"), reached(2, "carried")
    carries = emit(ctx, "GREATER", [carried, ctx.constant("half", np.array(0.5, np.float32))],
                   hint + "_carries", shape, np.bool_)
    fill = np.inf if aggregate == "MIN" else -np.inf
    masked = emit(ctx, "SELECT_V2", [carries, values, ctx.constant("fill", np.array(fill, np.float32))],
                  hint + "_masked", shape)
    axis = ctx.constant("axis", np.array([1], np.int32))
    extreme = emit(ctx, "REDUCE_MIN" if aggregate == "MIN" else "REDUCE_MAX", [masked, axis],
                   hint + "_extreme", (rows, targets), options={"keep_dims": False})
    scored = emit(ctx, "REDUCE_ANY", [carries, axis], hint + "_scored", (rows, targets), np.bool_,
                  {"keep_dims": False})
    based = emit(ctx, "ADD", [extreme, ctx.constant("base", np.asarray(bias, np.float32))],
                 hint + "_based", (rows, targets))
    zero = ctx.constant("zero", np.zeros((), np.float32))
    return emit(ctx, "SELECT_V2", [scored, based, zero], hint + "_aggregated", (rows, targets))


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
    return [((rows_of(shapes[0]), int(attrs.get("n_targets", 1))), np.float32)]


@onnx_op(ML + "TreeEnsembleRegressor")
def import_tree_ensemble_regressor(node, ctx):
    """The GEMM form of the trees (_leaf_hot), the leaf weights summed per target (_regression)."""
    post = check_post(ctx, text(node.attr("post_transform", "NONE")))
    forest = _forest_v3(ctx, node, "target", int(node.attr("n_targets", 1)))
    _regression(ctx, node, forest, text(node.attr("aggregate_function", "SUM")), post,
                float_attr(ctx, node, "base_values"))


@onnx_types(ML + "TreeEnsemble")
def _tree_ensemble_types(shapes, dtypes, attrs):
    return [((rows_of(shapes[0]), int(attrs.get("n_targets", 1))), dtypes[0])]


@onnx_op(ML + "TreeEnsemble")
def import_tree_ensemble(node, ctx):
    """ai.onnx.ml 5's TreeEnsemble (tensor thresholds and weights, integer codes for the
    aggregation and the post transform): as TreeEnsembleRegressor, output in the input's type.
    post_transform's codes are read as onnxruntime reads them (its enum's order: 1 LOGISTIC,
    2 SOFTMAX, where the spec says 1 SOFTMAX, 2 LOGISTIC): the file computes what it runs."""
    post = int(node.attr("post_transform", 0))
    aggregate = int(node.attr("aggregate_function", 1))
    post = check_post(ctx, POST_TRANSFORMS[post] if 0 <= post < len(POST_TRANSFORMS) else str(post))
    aggregate = _AGGREGATE[aggregate] if 0 <= aggregate < len(_AGGREGATE) else str(aggregate)
    _regression(ctx, node, _forest_v5(ctx, node), aggregate, post, None)


@onnx_types(ML + "TreeEnsembleClassifier")
def _tree_classifier_types(shapes, dtypes, attrs):
    strings = attrs.get("classlabels_strings")
    count = len(strings or attrs.get("classlabels_int64s") or [])
    label = None if strings else ((rows_of(shapes[0]),), np.int64)
    return [label, ((rows_of(shapes[0]), count), np.float32)]


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
        label_of(ctx, ranked, labels, label_out)
    if score_out:
        write_into(ctx, post_transform(ctx, scores, post, scores), score_out)


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
    positive = all(w >= 0 for w in float_attr(ctx, node, "class_weights", []))
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
        sign_label(ctx, pos, threshold, shown, label_out)
    if not score_out:
        return
    if h1:
        write_into(ctx, post_transform(ctx, pair, post, pair), score_out)
        return
    if added == -1:
        raise ctx.error("two classes, one base value and no weight for class 1: onnxruntime "
                        "writes one probability column of the two, which is not converted")
    p = _column(ctx, pair, 0)
    if added == 0:
        write_into(ctx, complement(ctx, p), score_out)
    elif post == "LOGISTIC":
        negated = emit(ctx, "NEG", [p], p + "_neg", (rows, 1))
        low = emit(ctx, "LOGISTIC", [negated], p + "_low", (rows, 1))
        high = emit(ctx, "LOGISTIC", [p], p + "_high", (rows, 1))
        write_into(ctx, emit(ctx, "CONCATENATION", [low, high], p + "_pair", (rows, 2), options={"axis": 1}),
              score_out)
    else:
        negated = emit(ctx, "NEG", [p], p + "_neg", (rows, 1))
        write_into(ctx, emit(ctx, "CONCATENATION", [negated, p], p + "_pair", (rows, 2), options={"axis": 1}),
              score_out)


def _column(ctx, matrix: str, k: int) -> str:
    """Column k of a [N, K] matrix as [N, 1]: GATHER."""
    return emit(ctx, "GATHER", [matrix, ctx.constant("column", np.array([k], np.int32))],
                f"{matrix}_column{k}", (ctx.shape(matrix)[0], 1), options={"axis": 1, "batch_dims": 0})


@onnx_op(ML + "TreeEnsembleClassifier")
def import_tree_ensemble_classifier(node, ctx):
    """The GEMM form of the trees (_leaf_hot); more than two classes: _multiclass, two:
    _two_classes (onnxruntime's binary rules)."""
    post = check_post(ctx, text(node.attr("post_transform", "NONE")))
    labels = class_labels(node)
    if labels.size < 2:
        raise ctx.error(f"it has {labels.size} class labels; a classifier has at least 2")
    forest = _forest_v3(ctx, node, "class", labels.size)
    _aggregate(ctx, forest, "SUM")
    base = float_attr(ctx, node, "base_values")
    base = np.zeros(0) if base is None else base
    x = matrix(ctx, node.inputs[0])
    hot, order = _leaf_hot(ctx, x, forest, node.name)
    convert = _multiclass if labels.size > 2 else _two_classes
    convert(ctx, node, forest, order, hot, labels, base, post)
