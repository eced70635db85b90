"""The precision planner (--target-sqnr DB): starts from the all-int8 plan, measures it, promotes
the ops that lose the most to float, and measures again, until every model output and every
output slice reaches DB on the verification samples, or the budget is spent.

Each round quantizes a fresh copy of the calibrated float model (Model.copy) with the promoted
nodes kept float (QuantizeOptions.keep_float), writes it, and runs it in LiteRT next to
onnxruntime once (report.measure): the outputs and their slices as verify measures them, and every
tensor with an ONNX counterpart, from which each op's error amplification (its output's SQNR minus
its worst input's) follows. The next promotions are the int8 ops that lose at least MIN_LOSS_DB and
whose output is below the target plus MARGIN_DB (an op whose output stays far above the target does
not decide it), losing the most first, at most PER_ROUND of the int8 ops per round and MAX_SHARE in
all. A promoted op is named by its ONNX node: every op of that node stays float.

Promotion is to float for LiteRT's default CPU path (--target cpu): XNNPACK runs float ops, so a
float island stays inside the delegate, where int16 kernels would leave it (XNNPACK delegates no
int16 tensor at all). For a model that must stay all-integer (--target integer: microcontrollers,
NPUs) it is to the op's 16x8 kernel (int16 activations), and only ops that have one are promoted.

The plan chosen is the first that reaches the target, else the best measured (highest worst
output or slice SQNR, the earlier on ties). Everything depends only on the model, the samples and
the options: the same input gives the same plan and the same bytes.
"""

from __future__ import annotations

import math
import os
import tempfile
from dataclasses import dataclass, field, replace

import onnx

from ..ir import Model
from ..ops.registry import TFLITE_OPS
from ..ops.unary import ERF_MARK
from ..transforms.pipeline import QuantizeOptions, run_quantize_pipeline

# What a promoted op becomes, by --target.
PROMOTE_TO = {"cpu": "float", "integer": "int16"}

MIN_LOSS_DB = 3.0
MARGIN_DB = 10.0
PER_ROUND = 0.04
MAX_SHARE = 0.25
MAX_ROUNDS = 6


@dataclass
class Promotion:
    node: str
    op: str  # the op type that ranked it
    reason: str


@dataclass
class Round:
    promoted: int  # nodes kept float in this round's plan
    worst_sqnr_db: float  # the lowest output or output-slice SQNR


@dataclass
class Plan:
    target_sqnr_db: float
    reached: bool
    promoted_to: str = "float"  # or "int16"
    promotions: list[Promotion] = field(default_factory=list)
    rounds: list[Round] = field(default_factory=list)

    def summary(self) -> str:
        text = (f"plan: {len(self.promotions)} ops promoted to {self.promoted_to} in "
                f"{len(self.rounds)} rounds")
        if not self.reached:
            text += f", target {self.target_sqnr_db:g} dB not reached"
        return text


def _worst(verification) -> float:
    values = [o.sqnr_db for o in verification.outputs]
    values += [o.worst_slice_sqnr_db for o in verification.outputs if o.worst_slice_sqnr_db is not None]
    return min(values) if values else math.inf


def _candidates(content: dict, target: float, promoted: dict[str, str], to: str) -> list[dict]:
    """The report's ops worth promoting (to int16: those with a 16x8 kernel), losing the most
    first (its order)."""
    chosen, seen = [], set()
    for op in content["ops"]:
        node = op["node"].removesuffix(ERF_MARK)
        loss, out = op["amplification_db"], op["output_sqnr_db"]
        if (op["precision"] != "int8" or loss is None or loss > -MIN_LOSS_DB or out is None
                or out >= target + MARGIN_DB or node in promoted or node in seen or node in ("", "-")
                or (to == "int16" and not getattr(TFLITE_OPS[op["type"]].quant, "int16", False))):
            continue
        seen.add(node)
        chosen.append(op)
    return chosen


def _quantized(model: Model, options: QuantizeOptions, promoted: dict[str, str], to: str) -> Model:
    candidate = model.copy()
    if to == "int16":
        options = replace(options, int16_nodes={**promoted, **options.int16_nodes})
    else:
        options = replace(options, keep_float={**promoted, **options.keep_float})
    run_quantize_pipeline(candidate, options)
    return candidate


def plan_precision(model: Model, options: QuantizeOptions, proto: onnx.ModelProto, samples: list,
                   target: float, write, notes_of, runtime: str = "cpu") -> tuple[Model, Plan]:
    """The quantized model of the chosen plan, and the plan. `model` is the calibrated float model
    after the float pipeline (left as it is); `proto` the ONNX model with its weights; `samples`
    the verification inputs; write(model, path) writes a quantized model as a .tflite;
    notes_of(model) gives the report's ConversionNotes of one; `runtime` the --target (PROMOTE_TO)."""
    from ..check.report import measure

    to = PROMOTE_TO[runtime]
    plan = Plan(target, False, to)
    promoted: dict[str, str] = {}
    best = None  # (worst SQNR, round, model)
    int8_ops = None
    with tempfile.TemporaryDirectory(prefix="qconvert-plan-") as folder:
        path = os.path.join(folder, "plan.tflite")
        for round_number in range(MAX_ROUNDS + 1):
            candidate = _quantized(model, options, promoted, to)
            if int8_ops is None:
                int8_ops = sum(op.quantized == "int8" for op in candidate.operators)
            write(candidate, path)
            verification, content = measure(proto, path, samples, len(samples), notes_of(candidate))
            worst = _worst(verification)
            plan.rounds.append(Round(len(promoted), worst))
            if best is None or worst > best[0]:
                best = (worst, round_number, candidate)
            if worst >= target:
                plan.reached = True
                break
            budget = max(1, int(MAX_SHARE * int8_ops)) - len(promoted)
            per_round = max(1, math.ceil(PER_ROUND * int8_ops))
            chosen = _candidates(content, target, promoted, to)[:max(0, min(per_round, budget))]
            if not chosen or round_number == MAX_ROUNDS:
                break
            for op in chosen:
                node = op["node"].removesuffix(ERF_MARK)
                reason = (f"promoted to {to} by --target-sqnr {target:g}: its {op['type']} lost "
                          f"{-op['amplification_db']:.1f} dB (output {op['output_sqnr_db']:.1f} dB)")
                promoted[node] = reason
                plan.promotions.append(Promotion(node, op["type"], reason))
    plan.promotions = plan.promotions[:plan.rounds[best[1]].promoted]  # the chosen plan's
    return best[2], plan
