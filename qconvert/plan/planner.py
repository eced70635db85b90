"""The precision planner, on by default with --quantize --calibration: which ops run int8, which
run TFLite's hybrid kernels (int8 weights, float activations) and which stay float (or 16x8,
--target integer), so that the written model holds an accuracy target at the least latency,
chosen from what each quantization is measured to cost and what each plan is measured to take.

1. The all-int8 model is written and run in LiteRT on the plan's samples (the first 8 of the
   calibration data). It holds the target when every output reaches --target-sqnr, every output
   slice the target less SLICE_MARGIN_DB, and every output read by a decision (decision_outputs:
   by argmax, a classifier's, a CTC recognizer's, a token model's, when float's top class varies
   over the samples (read_by_argmax); against 0.5, a LOGISTIC's probabilities) keeps float's clear decisions at DECISIONS_KEPT of its positions. When it
   misses and the weights were rounded for the output and biases corrected
   (quantize/rounding.py), the all-int8 model with weights rounded to nearest and biases as they
   are is measured too, and the better of the two arithmetics is the starting point (Plan's
   `arithmetic` says when that is round-to-nearest).
2. When it misses, each quantization's cost is measured in the gated fake-quant graph
   (sensitivity.py): alone (only it quantized) and poisoned (after everything before it).
3. The candidate plans take out of int8 the units that cost the most alone, the first 1, 2, 3,
   4, 6, ... of them (plan_size), with no cap: until one is within HEADROOM * MARGIN of the
   allowed error in the gated graph, or no int8 is left. A unit leaves int8 only when all the
   ONNX nodes around it (an activation's producer and readers, only the producer when its kernel
   fixes the params; a weight's node) do, so what leaves grows as connected regions; an int8 op
   with no weight whose every neighbour is out joins them (it would cost a QUANTIZE and a
   DEQUANTIZE to save nothing). A node that left for its activations runs hybrid where it has a
   hybrid kernel (CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED, BATCH_MATMUL, the sequence LSTM:
   its weights stay int8, which cost little), float otherwise; one that left for its weights runs
   float. Each candidate is measured whole in the gated graph (costs do not add up once errors
   are large).
4. The candidates within HEADROOM, smallest first, then the closest others, are written and run
   in LiteRT, up to MAX_ROUNDS, until one holds (the first one whose hybrid nodes miss is tried
   with them float too: hybrid kernels quantize their inputs at run time, which the gated graph
   does not model). On LiteRT's CPU path (--target cpu) the weight-only plan (what --weight-only
   writes: every weighted op hybrid, the rest float) and the float model are candidates too,
   measured like the others (the float model holds unless the ONNX model's own QDQ or dynamic
   int8 rounding is the reference). When all int8 misses, the weight-only plan comes first: if
   it holds and runs as fast as all int8, no mix can gain and steps 2 to 4 are skipped.
5. The plans that hold are timed in LiteRT on this CPU, in alternating rounds (check/latency.py),
   and the fastest wins; a plan with more int8 is kept unless another is faster by more than TIE
   of its time, never one slower than the float model. A model whose float time is under
   TIMED_FROM_MS is not chosen by time (the interpreter's fixed costs decide there, and the
   smaller int8 file is what such a model wants): the most int8 plan that holds is chosen. With
   --target integer, the first that holds. When none holds, the one that missed by the least;
   when no plan with int8 in it holds, the plan says int8 cannot hold the target.

With a metric (the API's `evaluate` and `max_drop`), steps 1 and 4 judge by the metric's drop from
the float model's score instead, and the smallest candidate that holds it is found by bisection.

Promotion is to float or hybrid for LiteRT's default CPU path (--target cpu): XNNPACK runs float
ops, so a float region stays inside the delegate, where int16 kernels would leave it (XNNPACK
delegates no int16 tensor at all). For a model that must stay all-integer (--target integer) it
is to the op's 16x8 kernel, and only ops that have one are promoted.

Everything but step 5 depends only on the model, the samples and the options; step 5 changes a
choice only on a clear difference in time, so the same input on the same machine gives the same
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

from ..check.latency import speed
from ..errors import ConversionError, ReferenceFailed, first_line
from ..ir import Model
from ..onnx.loader import node_names
from ..ops.registry import TFLITE_OPS
from ..transforms.pipeline import QuantizeOptions, run_quantize_pipeline, run_weight_pipeline

log = logging.getLogger("qconvert")

# What a promoted op becomes, by --target.
PROMOTE_TO = {"cpu": "float", "integer": "int16"}

SLICE_MARGIN_DB = 10.0  # an output's slices are held to the target less this
HEADROOM = 0.8  # a plan measured in the gated graph aims at this share of the allowed error
MARGIN = 0.25  # plans keep growing (measured) until this share of HEADROOM, for LiteRT's misses
MAX_ROUNDS = 4  # plans written and measured in LiteRT after the all-int8 one
SHOWN_UNITS = 12  # the plan lists the costliest units
DECISIONS_KEPT = 0.99  # an output read by a decision keeps float's clear ones at this share
TIE = 0.05  # a plan with less int8 wins on time only when faster by more than this share
# Outputs read by a decision are checked on up to DECISION_SAMPLES samples (a classifier's 8
# decisions cannot show a 1.5 % loss) when that many cost under CHEAP_CHECK_S in LiteRT.
DECISION_SAMPLES = 32
CHEAP_CHECK_S = 0.5
TIMED_FROM_MS = 0.02  # plans of a model whose float time is below this are not chosen by time
# The float_reason of the ops the plan keeps out of int8 starts so: the summary groups them by it.
PLAN_KEEPS = "the precision plan keeps it out of int8"
HYBRID = "hybrid"  # a promoted node that runs TFLite's hybrid kernels (Promotion.to)


def plan_size(count: int) -> bool:
    """The plans measured in the gated graph take out the costliest 1, 2, 3, 4, 6, 8, 12, ...
    units: powers of two and three times powers of two."""
    while count % 2 == 0:
        count //= 2
    return count in (1, 3)


@dataclass
class Promotion:
    node: str
    op: str  # the ONNX op type
    reason: str
    to: str = "float"  # "float", HYBRID or "int16"


@dataclass
class Round:
    promoted: int  # nodes out of int8 in this round's plan
    worst_sqnr_db: float  # the lowest output SQNR
    worst_slice_sqnr_db: float | None = None
    argmax_agreement: float | None = None  # the lowest over the outputs read by a decision
    ms: float | None = None  # LiteRT's median time on this CPU, when the plan was timed


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
    mix: dict[str, int] = field(default_factory=dict)  # the written ops by precision: int8, hybrid, ...
    chosen_round: int = 0  # the rounds' index of the written plan
    float_ms: float | None = None  # the float model's time, when the plans were timed
    timing_rounds: int = 0  # the alternating rounds of that timing
    argmax_outputs: list[str] = field(default_factory=list)  # held to DECISIONS_KEPT
    threshold_outputs: list[str] = field(default_factory=list)  # likewise, against 0.5

    def summary(self, timed: bool = True) -> str:
        """`timed`: with the chosen plan's time (the conversion's latency says it otherwise)."""
        chosen = self.rounds[self.chosen_round] if self.rounds else None
        if not self.promotions and self.reached:
            text = "plan: all int8"
        elif self.mix and not any(n for kind, n in self.mix.items() if kind != "float"):
            text = "plan: all float"
            if self.reached:  # plans with int8 held, and the float model was the fastest
                text += ", as fast as any plan with int8 that holds"
        else:
            text = "plan: " + ", ".join(f"{n} {kind}" for kind, n in self.mix.items() if n) + " ops"
            if chosen is not None and self.metric is None and math.isfinite(chosen.worst_sqnr_db):
                text += f", {chosen.worst_sqnr_db:.1f} dB"
        if timed and chosen is not None and chosen.ms is not None and self.float_ms:
            text += f", {speed(chosen.ms / self.float_ms)} float"
        if self.metric is not None:
            text += f", metric {self.metric['score']:.4g} (float {self.metric['float']:.4g})"
        if not self.reached:
            text += (f", target {self.target_sqnr_db:g} dB not reached" if self.metric is None
                     else f", drop above {self.metric['max_drop']:g}") + ": int8 cannot hold it"
        if self.promotions and self.rounds:
            first = self.rounds[0]
            text += f" (all int8: {first.worst_sqnr_db:.1f} dB"
            if first.argmax_agreement is not None:
                text += f", decisions {100 * first.argmax_agreement:.1f} % kept"
            if first.ms is not None and self.float_ms:
                text += f", {speed(first.ms / self.float_ms)} float"
            text += ")"
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


def decision_agreement(outputs: dict, reference: dict, argmax: list[str], thresholded: list[str],
                       target_db: float) -> float | None:
    """The lowest share, over the outputs read by a decision, of float's decisions the model
    keeps: for `argmax` outputs the class along the last axis at each position (samples and every
    index but the last axis), for `thresholded` ones (a LOGISTIC's probabilities) each value
    against 0.5. Only decisions float makes clearly count: its top class ahead of the next, or its
    value away from 0.5, by more than the error the target allows (the output's RMS times
    10^(-target/20)); a near tie is no decision. Integer outputs (decoded ids, classes) are
    decisions themselves: each value equal to float's. None: no such output."""
    shares = [float(np.mean(np.asarray(outputs[name]) == value)) for name, value in reference.items()
              if np.asarray(value).dtype.kind in "iub" and name in outputs and np.size(value)]
    for name in argmax + thresholded:
        if name not in outputs or name not in reference:
            continue
        ref, got = np.asarray(reference[name], np.float64), np.asarray(outputs[name], np.float64)
        noise = np.sqrt(np.mean(ref ** 2)) * 10 ** (-target_db / 20)
        if name in thresholded:
            decided, same = np.abs(ref - 0.5) > noise, (ref > 0.5) == (got > 0.5)
        else:
            top2 = np.partition(ref, -2, axis=-1)[..., -2:]
            decided = (top2[..., 1] - top2[..., 0]) > noise
            same = np.argmax(got, -1) == np.argmax(ref, -1)
        shares.append(float(np.mean(same[decided])) if decided.any() else 1.0)
    return min(shares) if shares else None


# The ops whose output is read by a decision when it is a model output (through ops that only
# move values): by argmax, a classifier's probabilities or logits, a CTC recognizer's, a token
# model's (at least 2 classes); against 0.5, a LOGISTIC's probabilities (a voice-activity flag).
ARGMAX_PRODUCERS = ("SOFTMAX", "LOG_SOFTMAX", "FULLY_CONNECTED")
PROBABILITY_PRODUCERS = ("SOFTMAX", "LOG_SOFTMAX")
THRESHOLD_PRODUCERS = ("LOGISTIC",)
MOVES_VALUES = ("RESHAPE", "SQUEEZE", "EXPAND_DIMS", "TRANSPOSE", "DEQUANTIZE", "QUANTIZE")


def decision_outputs(model: Model, producers: tuple[str, ...], classes: int = 1) -> list[str]:
    """The model's float outputs that one of `producers` computes (through ops that only move
    values), of at least `classes` values along their last axis (argmax needs 2, of rank 2)."""
    found = []
    for name in model.outputs:
        array = model.arrays[name]
        if array.dtype.kind != "f" or (classes > 1 and (len(array.shape) < 2 or array.shape[-1] < classes)):
            continue
        producer = model.producer(name)
        while producer is not None and producer.type in MOVES_VALUES:
            producer = model.producer(producer.inputs[0])
        if producer is not None and producer.type in producers:
            found.append(name)
    return found


def read_by_argmax(reference: dict, outputs: list[str], probabilities: set[str]) -> list[str]:
    """Of `outputs` (decision_outputs' guess from the producing op), those an argmax reads: a
    softmax's probabilities always; a FULLY_CONNECTED's values only when float's top index
    differs between the positions of the plan's samples. A head whose top index never changes
    (a quality scorer's [signal, background, overall] scores) gives no decision to keep: its
    values are judged by SQNR alone, as any regression output."""
    kept = []
    for name in outputs:
        value = reference.get(name)
        top = None if value is None else np.argmax(np.asarray(value), axis=-1)
        if name in probabilities or (top is not None and top.size and np.any(top != top.flat[0])):
            kept.append(name)
    return kept


def _quantized(model: Model, options: QuantizeOptions, promoted: dict[str, str], to: str,
               hybrid: frozenset[str] = frozenset()) -> Model:
    """The model with `promoted` nodes out of int8: to int16, or float (`hybrid` of them running
    hybrid kernels where they have one)."""
    candidate = model.copy()
    if to == "int16":
        options = replace(options, int16_nodes={**promoted, **options.int16_nodes})
    else:
        planned = {node: f"{PLAN_KEEPS}: {reason}" for node, reason in promoted.items()}
        options = replace(options, keep_float={**planned, **options.keep_float},
                          hybrid_nodes=options.hybrid_nodes | hybrid)
    run_quantize_pipeline(candidate, options)
    return candidate


def precision_mix(model: Model) -> dict[str, int]:
    """The written ops by how they compute: int8, int16, hybrid (float activations, int8
    weights read directly) and float (QUANTIZE and DEQUANTIZE not counted)."""
    mix = {"int8": 0, "int16": 0, HYBRID: 0, "float": 0}
    for op in model.operators:
        if op.type in CONVERSIONS:
            continue
        if op.quantized in ("int8", "int16"):
            mix[op.quantized] += 1
        else:
            mix[HYBRID if runs_hybrid(op, model) else "float"] += 1
    return mix


def runs_hybrid(op, model: Model) -> bool:
    """A float op with a hybrid kernel that reads int8 weights directly."""
    return (not op.quantized and TFLITE_OPS[op.type].hybrid is not None
            and any(n and model.arrays[n].is_constant and model.arrays[n].dtype == np.int8 for n in op.inputs))


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
    """A plan measured in the gated graph: the nodes out of int8 with why, those of them that run
    hybrid, and its error there over the allowed one (the worst output or slice)."""

    kept: dict[str, str]
    off: float
    hybrid: frozenset[str] = frozenset()


def _candidates(sensitivity, graph, regions: _Regions, allowed: np.ndarray) -> list[_Candidate]:
    """The plans taking out of int8 the units that cost the most alone, the first 1, 2, 3, 4, 6,
    8, 12, ... of them (plan_size), each measured in the gated graph with the gates of every unit
    left without an int8 neighbour closed, but the weights of hybrid nodes (the costs do not add
    up once errors are large: a unit's cost depends on what else is quantized, so each plan is
    measured whole). Stops at the first within HEADROOM * MARGIN of the allowed error (the larger
    plans within HEADROOM are there for LiteRT, whose kernels round their own way, when the
    smallest misses), or when every unit is out."""
    from .sensitivity import sqnr_db

    units = sensitivity.units
    ranked = sorted(range(len(units)), key=lambda k: (-float(np.max(units[k].alone / allowed)), k))
    every = [g for unit in units for g in unit.gates]
    kept: dict[str, str] = {}
    for_weights: set[str] = set()  # nodes out for their weights' cost: float, not hybrid
    found: list[_Candidate] = []
    for count, k in enumerate(ranked, 1):
        unit = units[k]
        promoted = {n for n in unit.nodes if regions.promotable(n)}  # to int16: those with a kernel
        if not promoted:
            continue
        what = repr(unit.tensors[0]) if len(unit.tensors) == 1 else f"{len(unit.tensors)} tensors from {unit.tensors[0]!r}"
        reason = f"quantizing {what} alone gives {sqnr_db(unit.alone[~graph.slices]):.1f} dB at the outputs"
        if graph.slices.any():
            reason += f", {sqnr_db(unit.alone[graph.slices]):.1f} dB at the worst slice"
        if all(kind == "weight" for kind in unit.kinds):
            for_weights |= promoted
        for node in sorted(promoted - kept.keys() - regions.float_already):
            kept[node] = reason
        if not plan_size(count) and count < len(ranked):
            continue
        plan = dict(kept)
        for node in regions.bridged(set(plan)):
            plan[node] = "joins the float ops around it (saves a QUANTIZE and a DEQUANTIZE)"
        hybrid = frozenset(plan) - for_weights if regions.to == "float" else frozenset()
        floating = plan.keys() | regions.float_already
        closed = {g for u in units if u.nodes <= floating for g in u.gates
                  if not (graph.gates[g].kind == "weight" and graph.gates[g].node in hybrid)}
        sensitivity.runs += 1
        error = graph.error([g for g in every if g not in closed])
        found.append(_Candidate(plan, float(np.max(error / allowed)), hybrid))
        if found[-1].off <= HEADROOM * MARGIN:
            break
    return found


@dataclass
class _Attempt:
    off: float  # how many times over the allowed error, or the tolerated drop (<= 1: it holds)
    model: Model
    kept: dict[str, str]
    score: float | None = None
    hybrid: frozenset[str] = frozenset()
    path: str = ""  # the written .tflite, for timing
    round: int = 0  # its index in Plan.rounds


WEIGHT_ONLY = "the weight-only plan: int8 weights in hybrid kernels, float activations"
FLOAT_PLAN = "the float model: no int8"


def plan_precision(model: Model, options: QuantizeOptions, proto: onnx.ModelProto, samples: list,
                   target: float, write, check, runtime: str = "cpu",
                   metric: Metric | None = None, count: int = 8) -> tuple[Model, Plan]:
    """The quantized model of the chosen plan, and the plan. `model` is the calibrated float model
    after the float pipeline (left as it is); `proto` the ONNX model with its weights; `samples`
    the plan's inputs, of which the first `count` are checked (more, up to DECISION_SAMPLES, for
    outputs read by a decision when the check is cheap); write(model, path) writes a quantized
    model as a .tflite; check(path, n) runs it in LiteRT next to onnxruntime on the first n
    samples: (its Verification, LiteRT's outputs, onnxruntime's outputs, each {output name:
    [samples, ...]}); `runtime` the --target."""
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="qconvert-plan-") as folder:
        planner = _Planner(model, options, write, check, folder, PROMOTE_TO[runtime], target, metric,
                           count, len(samples))
        chosen = planner.run(proto, samples)
    plan = planner.plan
    plan.chosen_round = chosen.round
    plan.mix = precision_mix(chosen.model)
    if metric is not None:
        plan.metric["score"] = chosen.score
    plan.promotions = _promotions(proto, chosen, plan.promoted_to)
    if planner.sensitivity is not None:
        graph = planner.graph
        floating = set(chosen.kept) | float_nodes(chosen.model)
        plan.costs = _costs(planner.sensitivity, graph, floating, allowed_error(graph.slices, target))
    plan.seconds = round(time.perf_counter() - started, 3)
    return chosen.model, plan


class _Planner:
    """One planning: the plans written and measured (`tried`, in the order the plan prefers them:
    the most int8 first), and what the choice needs."""

    def __init__(self, model: Model, options: QuantizeOptions, write, check, folder: str, to: str,
                 target: float, metric: Metric | None, count: int, available: int):
        from ..qdq.fakequant import FloatWeights

        self.model, self.options, self.write, self.check = model, options, write, check
        self.folder, self.to, self.target, self.metric = folder, to, target, metric
        self.plan = Plan(target, False, to, argmax_outputs=decision_outputs(model, ARGMAX_PRODUCERS, 2),
                         threshold_outputs=decision_outputs(model, THRESHOLD_PRODUCERS))
        self.probabilities = set(decision_outputs(model, PROBABILITY_PRODUCERS, 2))
        self.float_weights = FloatWeights()
        self.float_weights(model)
        self.tried: list[_Attempt] = []
        self.graph = self.sensitivity = None
        self.exact: _Attempt | None = None  # the float model, on the CPU path
        self.weight_only: _Attempt | None = None  # what --weight-only writes, on the CPU path
        self.count, self.available = count, available  # the samples checked, of those given
        self.timed: dict[int, float] = {}  # round -> ms, of the latest timing session

    def run(self, proto: onnx.ModelProto, samples: list) -> _Attempt:
        """Steps 1 to 5 of the module docstring; the chosen attempt."""
        self._all_int8()
        if self.tried[0].off > 1 and not self._weight_only_is_as_fast():
            self._regions(proto, samples)
        if self.to != "float":
            self.plan.reached = any(a.off <= 1 for a in self.tried)
            holding = [a for a in self.tried if a.off <= 1]
            return holding[0] if holding else min(self.tried, key=lambda a: a.off)
        chosen = self._fastest()
        # Reached: a plan with int8 in it (ops or weights) holds (the float model is no such plan).
        self.plan.reached = any(a.off <= 1 and _has_int8(a.model) for a in self.tried)
        return chosen

    def written(self, candidate: Model) -> str:
        """The candidate's .tflite, named by the round it is about to be."""
        path = os.path.join(self.folder, f"plan-{len(self.plan.rounds)}.tflite")
        self.write(candidate, path)
        return path

    def measured(self, candidate: Model, kept: dict[str, str], hybrid: frozenset[str] = frozenset()) -> _Attempt:
        """The `candidate` written and run in LiteRT: how far off it is (<= 1: it holds)."""
        plan, metric = self.plan, self.metric
        path = self.written(candidate)
        verification, outputs, reference = self._checked(path)
        agreement = decision_agreement(outputs, reference, plan.argmax_outputs, plan.threshold_outputs,
                                       self.target)
        plan.rounds.append(Round(len(kept), *_worst(verification), agreement))
        found = _Attempt(0.0, candidate, kept, None, hybrid, path, len(plan.rounds) - 1)
        if metric is None:
            found.off = _margin(verification, self.target)
            if agreement is not None and agreement < DECISIONS_KEPT:
                found.off = max(found.off, (1 - agreement) / (1 - DECISIONS_KEPT))
            return found
        if plan.metric is None:
            plan.metric = {"float": float(metric.evaluate(reference)), "max_drop": metric.max_drop,
                           "scores": []}
        found.score = float(metric.evaluate(outputs))
        plan.metric["scores"].append(found.score)  # per round
        drop = plan.metric["float"] - found.score
        off = drop / metric.max_drop if metric.max_drop > 0 else (0.0 if drop <= 0 else math.inf)
        found.off = max(off, 0.0)
        return found

    def _checked(self, path: str):
        """check(path) on the plan's samples. The first time, when the model has outputs read by
        a decision and the check was cheap, the count grows (up to DECISION_SAMPLES, within
        CHEAP_CHECK_S) and the check runs again: every plan is judged on the same samples."""
        started = time.perf_counter()
        found = self.check(path, self.count)
        if not self.plan.rounds:
            self.plan.argmax_outputs = read_by_argmax(found[2], self.plan.argmax_outputs, self.probabilities)
        if self.plan.rounds or self.metric is not None or self.count >= self.available:
            return found
        if decision_agreement(found[1], found[2], self.plan.argmax_outputs, self.plan.threshold_outputs,
                              self.target) is None:
            return found
        each = (time.perf_counter() - started) / self.count
        wanted = min(self.available, DECISION_SAMPLES, int(CHEAP_CHECK_S / max(each, 1e-9)))
        if wanted > self.count:
            self.count = wanted
            found = self.check(path, self.count)
        return found

    def attempt(self, kept: dict[str, str], hybrid: frozenset[str] = frozenset()) -> float:
        """Writes and measures the plan taking `kept` out of int8 (once); how far off it is."""
        for earlier in self.tried:
            if earlier.kept == kept and earlier.hybrid == hybrid:
                return earlier.off
        candidate = _quantized(self.model, self.options, kept, self.to, hybrid)
        self.tried.append(self.measured(candidate, kept, hybrid))
        return self.tried[-1].off

    def _all_int8(self) -> None:
        """Step 1: the all-int8 model, and with it the int8 arithmetic: all int8 with its weights
        rounded to nearest and its biases as they are when it misses; the better of the two is
        the plan's starting point (the rounding for the output and bias correction lose on some
        models, measured)."""
        if self.attempt({}) <= 1 or not self.options.layer_inputs:
            return
        plain = replace(self.options, layer_inputs={})
        other = self.measured(_quantized(self.model, plain, {}, self.to), {})
        if other.off < self.tried[0].off:
            self.options, self.tried[0], self.plan.arithmetic = plain, other, NEAREST

    def _regions(self, proto: onnx.ModelProto, samples: list) -> None:
        """Steps 2 to 4: the sensitivity, and the growing plans tried in LiteRT. A model the gated
        graph cannot run gets no int8 regions, with a warning."""
        from .sensitivity import GatedGraph

        try:
            self.graph = GatedGraph(proto, self.tried[0].model, self.float_weights, samples)
            self.sensitivity = _search(self.graph, self.tried[0].model, self.to, self.target,
                                       self.metric, self.attempt)
        except (ConversionError, ReferenceFailed) as e:
            self.plan.note = f"sensitivity not measured: {first_line(e)}"
            log.warning("warning: the precision plan has no int8 regions to offer: %s", self.plan.note)
            self.graph = self.sensitivity = None
            del self.tried[1:]
            return
        self.plan.sensitivity_runs = self.sensitivity.runs

    def _every_int8_node(self) -> list[str]:
        return sorted({op.source for op in self.tried[0].model.operators if op.quantized == "int8"})

    def _float_model(self) -> _Attempt:
        """The float model as the float conversion writes it, measured once (against a QDQ or a
        dynamic int8 ONNX model, whose onnxruntime reference rounds, it is not exact)."""
        if self.exact is None:
            self.exact = self.measured(self.model.copy(), dict.fromkeys(self._every_int8_node(), FLOAT_PLAN))
        return self.exact

    def _weight_only(self) -> _Attempt:
        """The weight-only plan, what --weight-only writes, measured once."""
        if self.weight_only is None:
            every = self._every_int8_node()
            candidate = self.model.copy()
            run_weight_pipeline(candidate, "int8")
            self.weight_only = self.measured(candidate, dict.fromkeys(every, WEIGHT_ONLY), frozenset(every))
            self.tried.append(self.weight_only)
        return self.weight_only

    def _times(self, attempts: list[_Attempt]) -> list[float]:
        """The attempts' median times in ms, timed in alternating rounds in LiteRT (the float
        model among them, recorded as the plan's float_ms), each recorded on its round. When the
        latest timing covered them all, its times."""
        from ..check.latency import median_ms

        plan = self.plan
        if not all(a.round in self.timed for a in attempts):
            times, plan.timing_rounds = median_ms([a.path for a in attempts])
            self.timed = {a.round: round(ms, 4) for a, ms in zip(attempts, times)}
            for round_, ms in self.timed.items():
                plan.rounds[round_].ms = ms
            plan.float_ms = self.timed.get(self.exact.round, plan.float_ms)
        return [self.timed[a.round] for a in attempts]

    def _weight_only_is_as_fast(self) -> bool:
        """On the CPU path, when all int8 misses: whether the weight-only plan holds and runs as
        fast as the all-int8 model (within TIE; a model the float time of which is under
        TIMED_FROM_MS never does). Then no mix of the two can gain: the int8 regions are not
        searched for."""
        if self.to != "float" or self.metric is not None or self._weight_only().off > 1:
            return False
        int8_ms, weight_only_ms, float_ms = self._times([self.tried[0], self.weight_only, self._float_model()])
        return float_ms >= TIMED_FROM_MS and weight_only_ms <= int8_ms * (1 + TIE)

    def _fastest(self) -> _Attempt:
        """Step 5 on the CPU path: the first plan that holds when it is clearly faster than the
        float model (by more than TIE, or the model is too small to time); else, with the float
        model and the weight-only plan among them, the fastest of those that hold (_fastest_of)."""
        exact = self._float_model()
        holding = [a for a in self.tried if a.off <= 1]
        if holding and holding[0] is not self.weight_only:
            ms, float_ms = self._times([holding[0], exact])
            if float_ms < TIMED_FROM_MS or ms < float_ms * (1 - TIE):
                return holding[0]
        weight_only = self._weight_only()
        return self._fastest_of([a for a in self.tried if a is not weight_only] + [weight_only, exact])

    def _fastest_of(self, tried: list[_Attempt]) -> _Attempt:
        """Among the plans that hold, in the order given (the most int8 first, the float model
        last), the fastest: a plan with more int8 is kept unless another is faster by more than
        TIE, and never one slower than the float model; the first when the float model runs under
        TIMED_FROM_MS. When none holds, the one missing by the least."""
        holding = [a for a in tried if a.off <= 1]
        if len(holding) <= 1:
            return holding[0] if holding else min(tried, key=lambda a: a.off)
        # The all-int8 model is timed too when it misses: the summary says what it would have given.
        shown = [] if tried[0].off <= 1 else [tried[0]]
        times = self._times(holding + shown)[:len(holding)]
        if times[-1] < TIMED_FROM_MS:
            return holding[0]
        fastest = min(times)
        return next(a for a, ms in zip(holding, times) if ms <= min(fastest * (1 + TIE), times[-1]))


def _promotions(proto: onnx.ModelProto, chosen: _Attempt, to: str) -> list[Promotion]:
    """The chosen plan's nodes out of int8, in graph order, each with where it went and why."""
    types = dict(zip(node_names(proto), (node.op_type for node in proto.graph.node)))
    position = {name: k for k, name in enumerate(types)}
    hybrid = {op.source for op in chosen.model.operators if runs_hybrid(op, chosen.model)}
    return [Promotion(node, types.get(node, ""), f"kept {HYBRID if node in hybrid else to}: {reason}",
                      HYBRID if node in hybrid else to)
            for node, reason in sorted(chosen.kept.items(), key=lambda item: position.get(item[0], -1))]


def _has_int8(model: Model) -> bool:
    return any(op.quantized or runs_hybrid(op, model) for op in model.operators)


def _search(graph, all_int8: Model, to: str, target: float, metric: Metric | None, attempt):
    """Measures the sensitivity, then tries the growing plans in LiteRT (attempt(kept, hybrid)):
    the smallest within the headroom first, then the closest ones; with a metric, by bisection."""
    from .sensitivity import measure

    regions = _Regions(graph, all_int8, to)
    allowed = allowed_error(graph.slices, target)
    sensitivity = measure(graph, allowed)
    candidates = _candidates(sensitivity, graph, regions, allowed)
    if metric is None:
        # Those within the headroom, smallest first; then the closest of the others.
        ordered = sorted(candidates, key=lambda c: (c.off > HEADROOM, 0 if c.off <= HEADROOM else c.off))
        rounds = 0
        for candidate in ordered:
            # Hybrid kernels quantize their inputs at run time, which the gated graph does not
            # model: the first plan whose hybrid form misses is tried with those nodes float too.
            variants = [candidate.hybrid] + ([frozenset()] if candidate.hybrid and rounds == 0 else [])
            for hybrid in variants:
                rounds += 1
                if attempt(candidate.kept, hybrid) <= 1 or rounds >= MAX_ROUNDS:
                    return sensitivity
    else:
        _bisect_metric(candidates, attempt)
    return sensitivity


def _bisect_metric(candidates: list[_Candidate], attempt) -> None:
    """With a metric: the smallest of the growing plans that holds it, by bisection (each step
    one LiteRT run of the samples), then the largest if none did."""
    low, high = 0, len(candidates) - 1
    while low <= high:
        middle = (low + high) // 2
        if attempt(candidates[middle].kept, candidates[middle].hybrid) <= 1:
            high = middle - 1
        else:
            low = middle + 1


def _costs(sensitivity, graph, kept: set[str], allowed: np.ndarray) -> list[TensorCost]:
    """The SHOWN_UNITS costliest units, alone and poisoned, in SQNR at the worst output."""
    from .sensitivity import sqnr_db

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
