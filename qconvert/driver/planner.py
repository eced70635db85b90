"""The precision planner, on by default with --quantize --calibration: which ops stay float (or
16x8, --target integer) so that the written model holds an accuracy target, chosen from what
each quantization is measured to cost.

1. The all-int8 model is written and run in LiteRT on the plan's samples (the first 8 of the
   calibration data). When every output reaches the target (--target-sqnr) and every output slice
   the target less SLICE_MARGIN_DB, it is the plan: nothing else runs, and the bytes are those of
   `--precision int8`.
   Otherwise, when the weights were rounded for the output and biases corrected
   (quantize/rounding.py), the all-int8 model with weights rounded to nearest and biases as they
   are is measured too, and the better of the two arithmetics is the starting point (Plan's
   `arithmetic` says when that is round-to-nearest).
2. Then each quantization's cost is measured in the gated fake-quant graph
   (check/sensitivity.py): alone (only it quantized) and poisoned (after everything before it).
3. The candidate plans keep float the units that cost the most alone, the first 1, 2, 3, 4, 6,
   ... of them (PLAN_SIZES). A unit stays unquantized only when all the ONNX nodes around it (an
   activation's producer and readers, only the producer when its kernel fixes the params; a
   weight's node) stay float, so what is kept float grows as connected regions; an int8 op with
   no weight whose every neighbour is float joins them (it would cost a QUANTIZE and a DEQUANTIZE
   to save nothing). Each candidate is measured whole in the gated graph (costs do not add up once
   errors are large), up to one within HEADROOM * MARGIN of the allowed error, or MAX_SHARE of the
   int8 ops (MIN_LIMIT nodes in a small graph).
4. The candidates within HEADROOM, smallest first (the fewest float ops: the lowest latency we
   can rank without timing each), then the closest others, are written and run in LiteRT, up to
   MAX_ROUNDS. The first that holds the target is chosen; when none does, the one that missed by
   the least if it at least halves the all-int8 model's excess error, else the all-int8 model.

With a metric (the API's `evaluate` and `max_drop`), steps 1 and 4 judge by the metric's drop from
the float model's score instead, and the smallest candidate that holds it is found by bisection.

Promotion is to float for LiteRT's default CPU path (--target cpu): XNNPACK runs float ops, so a
float region stays inside the delegate, where int16 kernels would leave it (XNNPACK delegates no
int16 tensor at all). For a model that must stay all-integer (--target integer) it is to the op's
16x8 kernel, and only ops that have one are promoted.

Everything depends only on the model, the samples and the options: the same input gives the same
plan and the same bytes.
"""

from __future__ import annotations

import logging
import math
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
import onnx

from ..errors import ConversionError, ReferenceFailed, first_line
from ..ir import Model
from ..ops.registry import TFLITE_OPS
from ..transforms.pipeline import QuantizeOptions, run_quantize_pipeline

log = logging.getLogger("qconvert")

# What a promoted op becomes, by --target.
PROMOTE_TO = {"cpu": "float", "integer": "int16"}

SLICE_MARGIN_DB = 10.0  # an output's slices are held to the target less this
HEADROOM = 0.8  # a plan measured in the gated graph aims at this share of the allowed error
MARGIN = 0.25  # plans keep growing (measured) until this share of HEADROOM, for LiteRT's misses
MAX_ROUNDS = 4  # plans written and measured in LiteRT after the all-int8 one
# The plans measured in the gated graph keep float the costliest 1, 2, 3, ... units.
PLAN_SIZES = frozenset([1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512])
MAX_SHARE = 0.2  # at most this share of the int8 ops goes float,
MIN_LIMIT = 8  # or this many nodes in a small graph
SHOWN_UNITS = 12  # the plan lists the costliest units


@dataclass
class Promotion:
    node: str
    op: str  # the ONNX op type
    reason: str


@dataclass
class Round:
    promoted: int  # nodes kept float in this round's plan
    worst_sqnr_db: float  # the lowest output SQNR
    worst_slice_sqnr_db: float | None = None


@dataclass
class TensorCost:
    """What quantizing one unit costs at the worst output or slice, in SQNR there."""

    tensors: list[str]
    kind: str  # "activation", "weight", or "region" (a block of several)
    alone_db: float  # the worst output's SQNR with only it quantized
    poisoned_db: float | None  # ... with it and everything before it in the graph quantized
    poisoned_loss_db: float | None  # what it takes off that SQNR (None: nothing before it)
    kept_float: bool


NEAREST = "nearest, no bias correction"


@dataclass
class Plan:
    target_sqnr_db: float
    reached: bool
    promoted_to: str = "float"  # or "int16"
    promotions: list[Promotion] = field(default_factory=list)
    rounds: list[Round] = field(default_factory=list)
    costs: list[TensorCost] = field(default_factory=list)  # the costliest units, measured
    sensitivity_runs: int = 0
    seconds: float = 0.0
    metric: dict | None = None  # with a metric: float, score (the chosen plan's), max_drop, scores
    note: str = ""  # why the plan could not measure
    # NEAREST: the plan's int8 weights round to nearest, biases uncorrected (that measured better
    # than rounding for the output with bias correction); "": as the options say
    arithmetic: str = ""

    def summary(self) -> str:
        if not self.promotions and self.reached:
            return "plan: all int8"
        text = f"plan: {len(self.promotions)} ops {self.promoted_to}"
        if self.metric is not None:
            text += f", metric {self.metric['score']:.4g} (float {self.metric['float']:.4g})"
        if not self.reached:
            text += (f", target {self.target_sqnr_db:g} dB not reached" if self.metric is None
                     else f", drop above {self.metric['max_drop']:g}")
        if self.note:
            text += f" ({self.note})"
        return text


@dataclass(frozen=True)
class Metric:
    """The API's metric hook: evaluate({output name: [samples, ...]}) -> score (higher is
    better), and the drop from the float model's score that is tolerated."""

    evaluate: Callable
    max_drop: float


def allowed_error(slices: np.ndarray, target_db: float) -> np.ndarray:
    """The error energy allowed at each output (target) and slice (target less SLICE_MARGIN_DB)."""
    return np.where(slices, 10.0 ** (-(target_db - SLICE_MARGIN_DB) / 10), 10.0 ** (-target_db / 10))


def _worst(verification) -> tuple[float, float | None]:
    """The worst output's SQNR and the worst slice's (None: no output has slices)."""
    worst_slice = verification.worst_slice
    return verification.worst.sqnr_db, worst_slice.worst_slice_sqnr_db if worst_slice else None


def _margin(verification, target_db: float) -> float:
    """How many times over the allowed error the worst output or slice is (<= 1: within)."""
    worst = 0.0
    for o in verification.outputs:
        worst = max(worst, 10 ** ((target_db - o.sqnr_db) / 10))
        if o.worst_slice_sqnr_db is not None:
            worst = max(worst, 10 ** ((target_db - SLICE_MARGIN_DB - o.worst_slice_sqnr_db) / 10))
    return worst


def _quantized(model: Model, options: QuantizeOptions, promoted: dict[str, str], to: str) -> Model:
    candidate = model.copy()
    if to == "int16":
        options = replace(options, int16_nodes={**promoted, **options.int16_nodes})
    else:
        options = replace(options, keep_float={**promoted, **options.keep_float})
    run_quantize_pipeline(candidate, options)
    return candidate


CONVERSIONS = ("QUANTIZE", "DEQUANTIZE")  # ops that move a tensor between types, computing nothing


def float_nodes(model: Model) -> set[str]:
    """The ONNX nodes that run float: some op computes for them, none of theirs is quantized (a
    node whose only ops are QUANTIZE or DEQUANTIZE, a graph input's conversion that takes the
    node's name, is not: its tensor is quantized)."""
    quantized = {op.source for op in model.operators if op.quantized in ("int8", "int16")}
    return {op.source for op in model.operators
            if op.type not in CONVERSIONS and op.source not in quantized}


class _Regions:
    """The ONNX graph's neighbourhoods (the gated graph's), for growing float regions."""

    def __init__(self, graph, candidate: Model, to: str):
        self.graph = graph
        self.float_already = float_nodes(candidate)
        self.weighted = {g.node for g in graph.gates.values() if g.kind == "weight"}
        ir_types: dict[str, set[str]] = {}
        for op in candidate.operators:
            ir_types.setdefault(op.source, set()).add(op.type)
        self.ir_types = ir_types
        self.to = to
        self.int8_nodes = sorted({op.source for op in candidate.operators if op.quantized == "int8"},
                                 key=lambda n: graph.position.get(n, -1))

    def promotable(self, node: str) -> bool:
        """To float, any node; to int16, one whose every op has a 16x8 kernel."""
        return self.to == "float" or all(getattr(TFLITE_OPS[t].quant, "int16", False)
                                         for t in self.ir_types.get(node, ()))

    def neighbours(self, node: str) -> list[str]:
        k = self.graph.position.get(node)
        if k is None:
            return []
        found = [self.graph.producer[i] for i in self.graph.node_inputs[k] if i in self.graph.producer]
        for o in self.graph.node_outputs[k]:
            found += self.graph.readers.get(o, [])
        return found

    def bridged(self, kept: set[str]) -> list[str]:
        """The int8 nodes with no weight whose every neighbour is float (kept or float already)."""
        joined = []
        for node in self.int8_nodes:
            if node in kept or node in self.weighted or not self.promotable(node):
                continue
            around = self.neighbours(node)
            if around and all(n in kept or n in self.float_already for n in around):
                joined.append(node)
        return joined


@dataclass
class _Candidate:
    """A plan measured in the gated graph: the nodes kept float with why, and its error there
    over the allowed one (the worst output or slice)."""

    kept: dict[str, str]
    off: float


def _candidates(sensitivity, graph, regions: _Regions, allowed: np.ndarray, limit: int) -> list[_Candidate]:
    """The plans keeping float the units that cost the most alone, the first 1, 2, 3, 4, 6, 8,
    12, ... of them (PLAN_SIZES), each measured in the gated graph with the gates of every unit
    left without an int8 neighbour closed (the costs do not add up once errors are large: a
    unit's cost depends on what else is quantized, so each plan is measured whole). Stops at the
    first within HEADROOM * MARGIN of the allowed error (the larger plans within HEADROOM are
    there for LiteRT, whose kernels round their own way, when the smallest misses), or at `limit`
    nodes."""
    from ..check.sensitivity import sqnr_db

    units = sensitivity.units
    ranked = sorted(range(len(units)), key=lambda k: (-float(np.max(units[k].alone / allowed)), k))
    every = [g for unit in units for g in unit.gates]
    kept: dict[str, str] = {}
    found: list[_Candidate] = []
    for count, k in enumerate(ranked, 1):
        unit = units[k]
        promoted = {n for n in unit.nodes if regions.promotable(n)}  # to int16: those with a kernel
        if not promoted:
            continue
        what = unit.tensors[0] if len(unit.tensors) == 1 else f"{len(unit.tensors)} tensors from {unit.tensors[0]}"
        reason = f"quantizing {what} alone gives {sqnr_db(unit.alone[~graph.slices]):.1f} dB at the outputs"
        if graph.slices.any():
            reason += f", {sqnr_db(unit.alone[graph.slices]):.1f} dB at the worst slice"
        for node in sorted(promoted - kept.keys() - regions.float_already):
            kept[node] = reason
        if len(kept) > limit:
            break
        if count not in PLAN_SIZES and count < len(ranked):
            continue
        plan = dict(kept)
        for node in regions.bridged(set(plan)):
            plan[node] = "joins the float ops around it (saves a QUANTIZE and a DEQUANTIZE)"
        floating = plan.keys() | regions.float_already
        closed = {g for u in units if u.nodes <= floating for g in u.gates}
        sensitivity.runs += 1
        error = graph.error([g for g in every if g not in closed])
        found.append(_Candidate(plan, float(np.max(error / allowed))))
        if found[-1].off <= HEADROOM * MARGIN:
            break
    return found


@dataclass
class _Attempt:
    off: float  # how many times over the allowed error, or the tolerated drop (<= 1: it holds)
    model: Model
    kept: dict[str, str]
    score: float | None = None


def _chosen(tried: list[_Attempt]) -> _Attempt:
    """The first plan that holds; else the one missing by the least when it at least halves the
    all-int8 model's excess error (what is kept float costs time: a plan that gains little is
    not worth it), else the all-int8 model."""
    holding = [a for a in tried if a.off <= 1]
    if holding:
        return holding[0]
    best = min(tried, key=lambda a: a.off)
    return best if best.off <= tried[0].off / 2 else tried[0]


def plan_precision(model: Model, options: QuantizeOptions, proto: onnx.ModelProto, samples: list,
                   target: float, write, check, runtime: str = "cpu",
                   metric: Metric | None = None) -> tuple[Model, Plan]:
    """The quantized model of the chosen plan, and the plan. `model` is the calibrated float model
    after the float pipeline (left as it is); `proto` the ONNX model with its weights; `samples`
    the plan's inputs; write(model, path) writes a quantized model as a .tflite; check(path) runs
    it in LiteRT next to onnxruntime on the samples: (its Verification, LiteRT's outputs,
    onnxruntime's outputs, each {output name: [samples, ...]}); `runtime` the --target."""
    from ..check.sensitivity import GatedGraph
    from ..qdq.fakequant import FloatWeights

    started = time.perf_counter()
    to = PROMOTE_TO[runtime]
    plan = Plan(target, False, to)
    float_weights = FloatWeights()
    float_weights(model)
    tried: list[_Attempt] = []
    with tempfile.TemporaryDirectory(prefix="qconvert-plan-") as folder:
        path = os.path.join(folder, "plan.tflite")

        def measured(candidate: Model, kept: dict[str, str]) -> _Attempt:
            """The quantized `candidate` written and run in LiteRT: how far off it is (<= 1: it holds)."""
            write(candidate, path)
            verification, outputs, reference = check(path)
            plan.rounds.append(Round(len(kept), *_worst(verification)))
            if metric is None:
                return _Attempt(_margin(verification, target), candidate, kept)
            if plan.metric is None:
                plan.metric = {"float": float(metric.evaluate(reference)), "max_drop": metric.max_drop,
                               "scores": []}
            score = float(metric.evaluate(outputs))
            plan.metric["scores"].append(score)  # per round
            drop = plan.metric["float"] - score
            off = drop / metric.max_drop if metric.max_drop > 0 else (0.0 if drop <= 0 else math.inf)
            return _Attempt(max(off, 0.0), candidate, kept, score)

        def attempt(kept: dict[str, str]) -> float:
            """Writes and measures the plan keeping `kept`; how far off it is (<= 1: it holds)."""
            for earlier in tried:
                if earlier.kept == kept:
                    return earlier.off
            tried.append(measured(_quantized(model, options, kept, to), kept))
            return tried[-1].off

        graph = sensitivity = None
        if attempt({}) > 1 and options.layer_inputs:
            # The int8 arithmetic measured too: all int8 with its weights rounded to nearest and
            # its biases as they are; the better of the two is the plan's starting point (the
            # rounding for the output and bias correction lose on some models, measured).
            plain = replace(options, layer_inputs={})
            other = measured(_quantized(model, plain, {}, to), {})
            if other.off < tried[0].off:
                options, tried[0], plan.arithmetic = plain, other, NEAREST
        if tried[0].off > 1:
            try:  # a model the gated graph cannot run keeps the all-int8 plan, with a warning
                graph = GatedGraph(proto, tried[0].model, float_weights, samples)
                sensitivity = _search(graph, tried[0].model, to, target, metric, attempt)
            except (ConversionError, ReferenceFailed) as e:
                plan.note = f"sensitivity not measured: {first_line(e)}"
                log.warning("warning: the precision plan keeps every op int8: %s", plan.note)
                graph, sensitivity = None, None
                del tried[1:]
            if sensitivity is not None:
                plan.sensitivity_runs = sensitivity.runs
    chosen = _chosen(tried)
    plan.reached = chosen.off <= 1
    if metric is not None:
        plan.metric["score"] = chosen.score
    if sensitivity is not None:
        floating = set(chosen.kept) | float_nodes(chosen.model)
        plan.costs = _costs(sensitivity, graph, floating, allowed_error(graph.slices, target))
        types = dict(zip(graph.nodes, graph.types))
        plan.promotions = [Promotion(node, types.get(node, ""), f"kept {to}: {reason}")
                           for node, reason in sorted(chosen.kept.items(),
                                                      key=lambda item: graph.position.get(item[0], -1))]
    plan.seconds = round(time.perf_counter() - started, 3)
    return chosen.model, plan


def _search(graph, all_int8: Model, to: str, target: float, metric: Metric | None, attempt):
    """Measures the sensitivity, then tries the growing plans in LiteRT (attempt(kept)): the
    smallest within the headroom first, then the closest ones; with a metric, by bisection."""
    from ..check.sensitivity import measure

    regions = _Regions(graph, all_int8, to)
    limit = max(MIN_LIMIT, int(MAX_SHARE * len(regions.int8_nodes)))
    allowed = allowed_error(graph.slices, target)
    sensitivity = measure(graph, allowed)
    candidates = _candidates(sensitivity, graph, regions, allowed, limit)
    if metric is None:
        # Those within the headroom, smallest first; then the closest of the others.
        ordered = sorted(candidates, key=lambda c: (c.off > HEADROOM, 0 if c.off <= HEADROOM else c.off))
        for candidate in ordered[:MAX_ROUNDS]:
            if attempt(candidate.kept) <= 1:
                break
    else:
        _bisect_metric(candidates, attempt)
    return sensitivity


def _bisect_metric(candidates: list[_Candidate], attempt) -> None:
    """With a metric: the smallest of the growing plans that holds it, by bisection (each step
    one LiteRT run of the samples), then the largest if none did."""
    low, high = 0, len(candidates) - 1
    while low <= high:
        middle = (low + high) // 2
        if attempt(candidates[middle].kept) <= 1:
            high = middle - 1
        else:
            low = middle + 1


def _costs(sensitivity, graph, kept: set[str], allowed: np.ndarray) -> list[TensorCost]:
    """The SHOWN_UNITS costliest units, alone and poisoned, in SQNR at the worst output."""
    from ..check.sensitivity import sqnr_db

    outputs = ~graph.slices
    ranked = sorted(range(len(sensitivity.units)),
                    key=lambda k: (-float(np.max(sensitivity.units[k].alone / allowed)), k))[:SHOWN_UNITS]
    costs = []
    for k in ranked:
        unit = sensitivity.units[k]
        poisoned = loss = None
        if unit.poisoned is not None:
            before, after = (sqnr_db(e[outputs]) for e in unit.poisoned)
            poisoned = round(after, 1)
            loss = round(before - after, 1) if math.isfinite(before - after) else None
        costs.append(TensorCost(unit.tensors, unit.kinds[0] if len(unit.kinds) == 1 else "region",
                                round(sqnr_db(unit.alone[outputs]), 1), poisoned, loss,
                                bool(unit.nodes) and unit.nodes <= kept))
    return costs
