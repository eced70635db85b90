"""Verification: the ONNX model in onnxruntime and a .tflite in LiteRT on the same inputs.

Works for any .tflite, also one another tool wrote. Both models run on the same samples
(runtimes.py: the .tflite's inputs and outputs paired with the ONNX model's, layouts and
quantized I/O undone); every model output is compared over all samples (check_output).

Per model output: SQNR, the worst slice along the output's feature axis (metrics.py), max and
mean absolute error, cosine similarity, and top-1 agreement when the output is classifier-shaped
(one axis longer than 1).

A float conversion is judged by the float check instead (float_check.py: per output, the error
over the output's scale within FLOAT_TOLERANCE, integer outputs equal but for near-ties); a model
whose rounding no conversion repeats (rounding_dropped, run_time_quantization) by SQNR.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np
import onnx

from ..errors import ConversionError, ReferenceFailed
from ..onnx.runtime import quantizes_activations
from .float_check import (FLOAT16_EPS, FLOAT32_EPS, FLOAT32_TINY, TOLERANCES, OutputRule,
                          computes_in_float16, fill_float_view, output_rules, step_fetches,
                          step_values, ulps_text)
from .metrics import json_number, sqnr_db, worst_slice
from .runtimes import RecordedReference, Reference, onnx_values, prepare, run_both
from .ties import align_near_ties


@dataclass
class OutputCheck:
    """How one model output of the .tflite compares with onnxruntime's."""

    name: str
    sqnr_db: float
    worst_slice_sqnr_db: float | None  # None: no feature axis (or no slice with a signal)
    worst_slice: str | None  # "axis 1, index 5" of that slice
    max_abs_error: float
    mean_abs_error: float
    cosine: float
    top1_agreement: float | None  # None: not classifier-shaped
    # The float check's view (see the module docstring); computed for every verification.
    scale: float | None = None  # float output: its largest magnitude, at least its bounded_by's range
    bounded_by: str | None = None  # the bounded function whose range floors the scale
    relative_error: float | None = None  # float output: max_abs_error (near-ties aside) / scale
    ulps: float | None = None  # relative_error in steps (float32's, float16's) of the scale
    mismatches: int | None = None  # integer or boolean output: values that differ (near-ties aside)
    near_ties: int = 0  # values that differ at a near-tie of the step that makes them
    # a model that arrives quantized: the SQNR its own rounding explains (check/rounding_bound.py)
    bound_db: float | None = None
    # judged by SQNR, an output whose shape the values decide (kept boxes): the samples where the
    # .tflite keeps another count than onnxruntime, left out of the metrics (_stacked)
    other_counts: int = 0

    def float_failure(self, tolerance: float, ulp: float = FLOAT32_EPS) -> str | None:
        """How the output misses the float check (`ulp`: one step at 1 of the type the reference
        computes in), or None."""
        if self.mismatches:
            return f"output {self.name!r}: {self.mismatches} values differ from onnxruntime's"
        if self.relative_error is not None and not self.relative_error <= tolerance:
            return (f"output {self.name!r} max error {self.max_abs_error:.2g} is "
                    f"{self.relative_error:.1e} of its scale {self.scale:.3g} ({ulps_text(self.ulps, ulp)}), "
                    f"above the float tolerance {tolerance:.1e} ({ulps_text(tolerance / ulp, ulp)})")
        return None


@dataclass
class Verification:
    outputs: list[OutputCheck]
    samples: int
    min_sqnr: float | None = None
    passed: bool = True
    data: str = "generated"  # where the inputs came from
    check: str = "sqnr"  # "float": a float conversion, judged by the float check; "sqnr": by SQNR
    tolerance: float | None = None  # the float check's FLOAT_TOLERANCE (FLOAT16_TOLERANCE)
    ulp: float = FLOAT32_EPS  # a step at 1 of the type the reference computes in (FLOAT16_EPS)
    reason: str | None = None  # why a model is judged by SQNR rather than exactly (run_time_quantization)
    # generated inputs whose valid values the graph does not say (input_ranges.guessed_inputs)
    guessed: list[str] = field(default_factory=list)
    # the other input shapes the file was checked at (its dynamic dimensions resized), shown
    # as "x [1, 3, 96, 96]"; `outputs` hold each output's worst over every size
    other_sizes: list[str] = field(default_factory=list)
    # the random nodes whose draws were fed to both sides (check/random_draws.py), "RandomNormal 'n'"
    fed_draws: list[str] = field(default_factory=list)
    # the .tflite's rows put in onnxruntime's order at near-tied scores (check/ties.py)
    reordered: int = 0
    # float outputs whose reference is one value on every generated sample, after up to
    # CONSTANT_DRAWS of them (an all-zero output proves nothing of the arithmetic before it)
    constant: list[str] = field(default_factory=list)

    @property
    def worst(self) -> OutputCheck:
        return min(self.outputs, key=lambda o: o.sqnr_db)

    @property
    def worst_float(self) -> OutputCheck | None:
        """The float output with the largest relative error (None: no float output)."""
        floats = [o for o in self.outputs if o.relative_error is not None]
        return max(floats, key=lambda o: o.relative_error) if floats else None

    def bound_failures(self) -> list[str]:
        """The outputs further below their rounding bound than SLACK_DB, described."""
        from .rounding_bound import SLACK_DB

        return [f"{o.name} {_db(o.sqnr_db)}, below the {_db(o.bound_db)} the model's own rounding explains"
                for o in self.outputs if o.bound_db is not None and o.sqnr_db < o.bound_db - SLACK_DB]

    def float_failures(self) -> list[str]:
        """The float check's failures, described (none unless check is "float")."""
        if self.check != "float":
            return []
        return [f for f in (o.float_failure(self.tolerance, self.ulp) for o in self.outputs) if f]

    @property
    def worst_slice(self) -> OutputCheck | None:
        sliced = [o for o in self.outputs if o.worst_slice_sqnr_db is not None]
        return min(sliced, key=lambda o: o.worst_slice_sqnr_db) if sliced else None

    def below(self, threshold: float) -> list[str]:
        """The outputs (or their worst slice) below `threshold` dB, described."""
        low = []
        for o in self.outputs:
            if o.sqnr_db < threshold:
                low.append(f"{o.name} {_db(o.sqnr_db)}")
            elif o.worst_slice_sqnr_db is not None and o.worst_slice_sqnr_db < threshold:
                low.append(f"{o.name} ({o.worst_slice}) {_db(o.worst_slice_sqnr_db)}")
        return low

    def summary(self) -> str:
        """`verify: worst output 'y' 41.2 dB, worst slice 'y' axis 1, index 4 22.0 dB (8 samples)`,
        for the float check `verify: float, worst output 'y' max error 2.1e-07 of its scale 1 (1.8
        ulps) (1 sample)`."""
        count = f"({self.samples} sample{'s' if self.samples != 1 else ''}"
        count += f", at {len(self.other_sizes) + 1} sizes)" if self.other_sizes else ")"
        if self.guessed:
            count = (count[:-1] + f"; guessed: {', '.join(repr(n) for n in self.guessed)} drawn from "
                     f"0..9, --verify-data gives real values)")
        if self.fed_draws:
            count = count[:-1] + f"; random ops' draws fed to both sides: {', '.join(self.fed_draws)})"
        if self.reordered:
            count = count[:-1] + f"; {self.reordered} rows in onnxruntime's order at near-tied scores)"
        if self.constant:
            count = (count[:-1] + f"; {', '.join(repr(n) for n in self.constant)} constant on every "
                     "sample: checked little there)")
        if self.check == "float":
            failures = self.float_failures()
            if failures:
                return f"verify: float, {'; '.join(failures)} {count}"
            worst = self.worst_float
            ties = sum(o.near_ties for o in self.outputs)
            plural = "s" if ties != 1 else ""
            if worst is None:
                text = "verify: float, every output equal" + (f" but for {ties} near-tie{plural}"
                                                              if ties else "")
            else:
                text = (f"verify: float, worst output {worst.name!r} max error "
                        f"{worst.max_abs_error:.2g} of its scale {worst.scale:.3g} "
                        f"({ulps_text(worst.ulps, self.ulp)})")
                text += f", {ties} near-tie{plural}" if ties else ""
            return f"{text} {count}"
        worst = self.worst
        text = f"verify: worst output {worst.name!r} {_db(worst.sqnr_db)}"
        if self.reason:
            text = f"verify: by SQNR, {self.reason}; worst output {worst.name!r} {_db(worst.sqnr_db)}"
        counted = max(self.outputs, key=lambda o: o.other_counts)
        if counted.other_counts:
            text += (f", {counted.name!r} keeping another count than onnxruntime on "
                     f"{counted.other_counts} of {self.samples} samples (compared on the others)")
        if worst.bound_db is not None:
            text += f" (its rounding bound {_db(worst.bound_db)})"
        sliced = self.worst_slice
        if sliced is not None:
            text += f", worst slice {sliced.name!r} {sliced.worst_slice} {_db(sliced.worst_slice_sqnr_db)}"
        return f"{text} {count}"

    def merge_size(self, other: Verification, shapes: dict[str, tuple[int, ...]]) -> None:
        """Takes in the check of the same file at other input `shapes`: each output's worse
        comparison (the float check's larger error, else the lower SQNR), and its verdict."""
        def worse(a: OutputCheck, b: OutputCheck) -> OutputCheck:
            if self.check == "float" and (a.mismatches or b.mismatches):
                return b if (b.mismatches or 0) > (a.mismatches or 0) else a
            if self.check == "float" and a.relative_error is not None and b.relative_error is not None:
                return b if b.relative_error > a.relative_error else a
            return b if b.sqnr_db < a.sqnr_db else a

        others = {o.name: o for o in other.outputs}
        self.outputs = [worse(o, others.get(o.name, o)) for o in self.outputs]
        self.samples += other.samples
        self.reordered += other.reordered
        self.passed = self.passed and other.passed
        self.other_sizes.append(", ".join(f"{n} [{', '.join(map(str, s))}]" for n, s in shapes.items()))

    def as_dict(self) -> dict:
        result = asdict(self)
        if result["reason"] is None:
            del result["reason"]  # only a model judged by SQNR for a reason has one
        if not result["fed_draws"]:
            del result["fed_draws"]  # only a model with random ops has them
        if not result["constant"]:
            del result["constant"]  # only outputs constant on every generated sample
        result["outputs"] = [{k: json_number(v) for k, v in o.items()} for o in result["outputs"]]
        return result


def _db(value: float) -> str:
    return "inf dB" if value == math.inf else f"{value:.1f} dB"


# --- one output ------------------------------------------------------------------------------
def check_output(name: str, reference: np.ndarray, actual: np.ndarray,
                 rule: OutputRule | None = None, step_inputs: list | None = None,
                 ulp: float = FLOAT32_EPS, finite: bool = True) -> OutputCheck:
    """The metrics of one output; both are [samples, *shape] in the ONNX layout. Where the
    reference is not finite there is nothing to compare: an infinity (onnxruntime overflowed on
    the check's inputs), a NaN where the .tflite's value is not NaN too, or a reference finite
    nowhere is ReferenceFailed naming the output (an "inf dB" would pass whatever the .tflite
    computes); a NaN both compute (a fully masked softmax row) agrees.
    Without `finite` (the precision planner ranking its candidates) every such value counts as
    matching. A non-finite value of the .tflite elsewhere is an infinite error.
    Magnitudes below float32's smallest normal count as zero (LiteRT flushes denormals).
    `rule` (output_rules) gives the float check's scale floor and the step that makes the output;
    `step_inputs` that step's inputs in onnxruntime, [samples, *shape] each, to find near-ties."""
    rule = rule or OutputRule()
    integral = reference.dtype.kind in "iub"
    ref = reference.astype(np.float64)
    got = actual.astype(np.float64)
    if not integral:
        ref = np.where(np.abs(ref) < FLOAT32_TINY, 0.0, ref)
        got = np.where(np.abs(got) < FLOAT32_TINY, 0.0, got)
    if ref.shape != got.shape:
        raise ConversionError(f"output {name!r}: the .tflite gives shape {list(got.shape[1:])}, "
                              f"onnxruntime {list(ref.shape[1:])}")
    unknown = ~np.isfinite(ref)
    if unknown.any():
        agreed = np.isnan(ref) & np.isnan(got)
        if finite and (unknown.all() or not agreed[unknown].all()):
            kinds = " and ".join(k for k, f in (("NaN", np.isnan), ("Inf", np.isinf)) if f(ref).any())
            raise ReferenceFailed(
                f"output {name!r}: onnxruntime's values are not finite on the check's inputs "
                f"({int(unknown.sum()):,} of {ref.size:,} are {kinds}"
                + (")" if unknown.all() else f", the .tflite's differ at {int((~agreed & unknown).sum()):,})")
                + ", so there is nothing to compare the .tflite with")
        ref, got = np.where(unknown, 0.0, ref), np.where(unknown, 0.0, got)
    error = np.where(np.isfinite(got), np.abs(got - ref), np.inf)
    if np.isfinite(got).all():
        norms = float(np.linalg.norm(ref)) * float(np.linalg.norm(got))
        cosine = float(np.sum(ref * got)) / norms if norms else (1.0 if not error.any() else 0.0)
    else:
        cosine = math.nan
    check = OutputCheck(name, sqnr_db(ref, got), None, None, float(error.max(initial=0.0)),
                        float(error.mean()) if error.size else 0.0, cosine, None)
    per_sample = ref.shape[1:]
    if sum(d > 1 for d in per_sample) == 1 and ref.size:
        count = len(ref)
        check.top1_agreement = float(np.mean(ref.reshape(count, -1).argmax(1)
                                             == got.reshape(count, -1).argmax(1)))
    worst = worst_slice(ref, got)
    if worst is not None:
        check.worst_slice_sqnr_db, check.worst_slice = worst
    fill_float_view(check, ref, got, error, integral, rule, step_inputs, ulp)
    return check


# --- which check a model takes --------------------------------------------------------------
def rounding_dropped(proto: onnx.ModelProto) -> bool:
    """Whether a float conversion of the model drops rounding that onnxruntime keeps: a pair on
    an activation (quantizes_activations; qdq/importer.py makes it a Clip), or run-time
    quantization (run_time_quantization)."""
    return quantizes_activations(proto.graph) or run_time_quantization(proto) is not None


def run_time_quantization(proto: onnx.ModelProto) -> str | None:
    """Why no conversion repeats onnxruntime's rounding of the model's activations, when it
    quantizes them at run time (quantize_dynamic's DynamicQuantizeLinear, com.microsoft's
    DynamicQuantizeLSTM and DynamicQuantizeMatMul, which quantize inside): a float conversion
    computes them in float (ops/dynamic_quant.py), an int8 one with calibrated params,
    --weight-only with TFLite's per-row run-time params. Such a model is judged by SQNR; None
    when it does not."""
    counts: dict[str, int] = {}
    quantized = {n.output[0] for n in proto.graph.node if n.op_type == "DynamicQuantizeLinear"}
    for n in proto.graph.node:
        if (n.op_type, n.domain or "ai.onnx") in (("DynamicQuantizeLinear", "ai.onnx"),
                                                   ("DynamicQuantizeLSTM", "com.microsoft"),
                                                   ("DynamicQuantizeMatMul", "com.microsoft")):
            counts[n.op_type] = counts.get(n.op_type, 0) + 1
    # quantize_dynamic's Gather read by MatMulInteger as it is: onnxruntime multiplies the integer
    # rows exactly, the .tflite's hybrid kernel quantizes them again at run time
    rows = sum(n.op_type == "MatMulInteger" and n.input[0] not in quantized for n in proto.graph.node)
    if rows and not counts:
        return ("the .tflite's hybrid kernels quantize at run time the integer rows onnxruntime's "
                f"MatMulInteger multiplies as they are ({rows} MatMulInteger)")
    if not counts:
        return None
    ops = ", ".join(f"{k} {op}" for op, k in sorted(counts.items()))
    return (f"onnxruntime quantizes activations at run time ({ops}), a rounding the .tflite "
            "does not repeat")


# --- verification ----------------------------------------------------------------------------
class OutputStacks:
    """Both models' outputs gathered sample by sample (run_both's pairs), then compared; with
    them, onnxruntime's values of the steps' operands (step_fetches) when it gave them."""

    def __init__(self, proto: onnx.ModelProto, rules: dict[str, OutputRule] | None = None,
                 finite: bool = True):
        self.proto = proto
        self.finite = finite  # check_output's: a reference that is not finite fails
        self.rules = output_rules(proto) if rules is None else rules
        self.names = [value.name for value in onnx_values(proto, outputs=True)]
        self.step_names = step_fetches(proto, self.rules)
        self.expected: dict[str, list] = {name: [] for name in self.names}
        self.actual: dict[str, list] = {name: [] for name in self.names}
        self.operands: dict[str, list] = {name: [] for name in self.step_names}
        self.reordered = 0

    def constant(self) -> list[str]:
        """The float outputs whose reference holds one value on every sample so far."""
        found = []
        for name in self.names:
            values = self.expected[name]
            if values and all(np.asarray(v).dtype.kind == "f" for v in values):
                flat = np.concatenate([np.ravel(v) for v in values])
                if flat.size and np.all(flat == flat[0]):
                    found.append(name)
        return found

    def add(self, reference: dict[str, np.ndarray], outputs: dict[str, np.ndarray]) -> None:
        outputs, moved = align_near_ties({n: reference[n] for n in self.names},
                                         {n: outputs[n] for n in self.names}, TOLERANCES[FLOAT32_EPS])
        self.reordered += moved
        for name in self.names:
            self.expected[name].append(reference[name])
            self.actual[name].append(outputs[name])
        for name in self.step_names:
            if name in reference:
                self.operands[name].append(reference[name])

    def verification(self, samples: int, min_sqnr: float | None = None,
                     data: str = "generated", float_check: bool = False,
                     counts_differ: bool = True) -> Verification:
        """The comparison; with `float_check`, judged by the float check (and `min_sqnr` when
        given), else by `min_sqnr` alone, an output whose count the values decide on the samples
        where both keep the same count (_stacked), unless not `counts_differ`."""
        fetched = {name: np.stack(values) for name, values in self.operands.items()
                   if values and len(values) == samples}
        operands = step_values(self.proto, self.rules, fetched)
        half = computes_in_float16(self.proto)
        ulp = FLOAT16_EPS if half else FLOAT32_EPS
        checks = []
        for name in self.names:
            ref, got, other = _stacked(self.expected[name], self.actual[name],
                                       counts_differ and not float_check)
            checks.append(check_output(name, ref, got, self.rules.get(name), operands.get(name), ulp,
                                       self.finite))
            checks[-1].other_counts = other
        result = Verification(checks, samples, min_sqnr, data=data,
                              check="float" if float_check else "sqnr",
                              tolerance=TOLERANCES[ulp] if float_check else None, ulp=ulp,
                              reason=None if float_check else run_time_quantization(self.proto),
                              reordered=self.reordered)
        result.passed = (min_sqnr is None or not result.below(min_sqnr)) and not result.float_failures()
        return result


def _stacked(expected: list[np.ndarray], actual: list[np.ndarray],
             counts_differ: bool = False) -> tuple[np.ndarray, np.ndarray, int]:
    """One output's samples stacked, and how many samples were left out; an output whose shape
    changes from sample to sample (its size decided by the values, or the file checked at
    several sizes) as every sample's values end to end. A sample where the .tflite's shape is
    not onnxruntime's compares as NaN: it fails, as it must in float; with `counts_differ` (int8,
    where quantizing may keep one box more) it is left out, unless every sample is such."""
    if all(np.shape(e) == np.shape(expected[0]) == np.shape(a) for e, a in zip(expected, actual)):
        return np.stack(expected), np.stack(actual), 0
    same = [np.shape(e) == np.shape(a) for e, a in zip(expected, actual)]
    left_out = 0
    if counts_differ and any(same):
        left_out = same.count(False)
        expected = [e for e, kept in zip(expected, same) if kept]
        actual = [a for a, kept in zip(actual, same) if kept]
    fitted = [np.ravel(a) if np.shape(a) == np.shape(e) else np.full(np.size(e), np.nan)
              for e, a in zip(expected, actual)]
    return (np.concatenate([np.ravel(e) for e in expected]).astype(np.float64),
            np.concatenate(fitted).astype(np.float64), left_out)


CONSTANT_DRAWS = 8  # generated samples drawn, at most, while a float output's reference is constant


def _drawn_until_varied(stacks: OutputStacks, proto: onnx.ModelProto, model, samples: list,
                        reference: Reference) -> list:
    """`samples` with more generated ones (the same seeded sequence, doubling, up to
    CONSTANT_DRAWS) run into `stacks` while a float output's reference is constant over them:
    a MatMul+Relu's one sample can be all zero, where a check proves nothing."""
    from .runtimes import generated_samples

    while stacks.constant() and len(samples) < CONSTANT_DRAWS:
        more = generated_samples(model, proto, min(2 * len(samples), CONSTANT_DRAWS))[len(samples):]
        for values, outputs in run_both(proto, model, more, reference=reference):
            stacks.add(values, outputs)
        samples = samples + more
    return samples


def compare(proto: onnx.ModelProto, tflite_path: str, samples: list[dict[str, np.ndarray]],
            reference: Reference | RecordedReference | None = None):
    """Both models on `samples`: (the Verification, the .tflite's outputs, onnxruntime's), the
    outputs as {ONNX output name: [samples, ...]}. `reference`: as run_both's. A reference that
    is not finite counts as matching there (the planner ranks candidates; the check refuses it)."""
    model, samples = prepare(proto, tflite_path, samples, len(samples))
    stacks = OutputStacks(proto, finite=False)
    for values, outputs in run_both(proto, model, samples, reference=reference):
        stacks.add(values, outputs)
    # an output whose shape the values decide (a detector's kept boxes) end to end (_stacked)
    pairs = {name: _stacked(stacks.expected[name], values) for name, values in stacks.actual.items()}
    # a candidate that keeps another count than float is judged by it (plan/exposed.py)
    verification = stacks.verification(len(samples), counts_differ=False)
    return (verification, {name: pair[1] for name, pair in pairs.items()},
            {name: pair[0] for name, pair in pairs.items()})


def verify(proto: onnx.ModelProto, tflite_path: str, samples: list[dict[str, np.ndarray]] | None = None,
           count: int = 8, min_sqnr: float | None = None, data: str = "generated",
           float_check: bool = False, onnx_path: str | None = None,
           rounding_bound: bool = False, shapes: dict[str, tuple[int, ...]] | None = None) -> Verification:
    """Runs both models on `samples` (ONNX-layout inputs by name; None: `count` generated ones)
    and compares every output; `float_check` judges them by the float check (see the module
    docstring), `rounding_bound` (a model that arrives quantized) each float output by the error
    its own rounding explains (check/rounding_bound.py). `proto` must hold its weights, unless
    `onnx_path` is the file it was read from and reads_file(proto): onnxruntime then reads that
    file (not with `rounding_bound`). `shapes`: the generated inputs' shapes where they are not
    the file's (its dynamic dimensions resized)."""
    generated = samples is None
    model, samples = prepare(proto, tflite_path, samples, count, shapes=shapes)
    stacks = OutputStacks(proto)
    reference = Reference(proto, stacks.step_names, onnx_path)
    for values, outputs in run_both(proto, model, samples, reference=reference):
        stacks.add(values, outputs)
    if generated:
        samples = _drawn_until_varied(stacks, proto, model, samples, reference)
    result = stacks.verification(len(samples), min_sqnr, data, float_check)
    result.constant = stacks.constant() if generated else []
    if data == "generated":
        from .input_ranges import guessed_inputs

        guessed = guessed_inputs(proto.graph, {p.onnx_name: p.onnx_shape() for p in model.inputs})
        result.guessed = [p.onnx_name for p in model.inputs if p.onnx_name in guessed]
    if rounding_bound:
        from .rounding_bound import rounding_bounds

        bounds = rounding_bounds(proto, samples, stacks.expected)
        for output in result.outputs:
            output.bound_db = bounds.get(output.name)
        result.passed = result.passed and not result.bound_failures()
    return result
