"""How long a written model takes next to its float model, in LiteRT on this CPU.

A quantized (or weight-stored) conversion that verifies itself also times the written model
against the float model the same conversion made before quantizing: LiteRT's default CPU path
(XNNPACK), one thread, the two models in alternating rounds (never one after the other: the
machine's state drifts), until about BUDGET_S seconds are spent, at least MIN_ROUNDS rounds of
each. The ratio of the median times is the number a user needs; the CPU's name and the ISA
extensions int8 kernels depend on (AVX2, AVX-512, VNNI, ARM's dot product) travel with it, since
ratios from two machines are not one number (an int8 model without VNNI may run slower than float).
"""

from __future__ import annotations

import platform
import statistics
import time
from dataclasses import asdict, dataclass

import numpy as np

from ..errors import ConversionError, first_line

BUDGET_S = 1.0  # the time spent timing, both models together
MIN_ROUNDS = 3
MAX_ROUNDS = 200
THREADS = 1
# ISA extensions that decide how fast int8 kernels are, by the flag /proc/cpuinfo shows.
ISA_FLAGS = (("avx2", "AVX2"), ("avx512f", "AVX-512"), ("avx512_vnni", "AVX-512 VNNI"),
             ("avx_vnni", "AVX-VNNI"), ("asimddp", "ARM dot product"), ("i8mm", "ARM i8mm"))


@dataclass(frozen=True)
class Latency:
    """The written model's median time next to the float model's, and where it was measured."""

    model_ms: float
    float_ms: float
    ratio: float  # model_ms / float_ms
    rounds: int  # of each model
    threads: int
    cpu: str  # cpu_description()

    def as_dict(self) -> dict:
        return asdict(self)

    def summary(self, kind: str) -> str:
        """"int8 2.4x faster than float (1.36 ms vs 3.24 ms, LiteRT, 1 thread, CPU: ISA)"."""
        return (f"{kind} {speed(self.ratio)} float ({duration(self.model_ms)} vs "
                f"{duration(self.float_ms)}, LiteRT, {self.threads} thread, {self.cpu})")


def speed(ratio: float) -> str:
    """A time ratio (model / float) as a user reads it: "2.4x faster than", "1.04x slower than"."""
    if ratio < 1:
        return f"{_times(1 / ratio)} faster than"
    return f"{_times(ratio)} slower than" if ratio > 1 else "as fast as"


def _times(factor: float) -> str:
    """2.4x, or 1.04x where one decimal would read as no difference."""
    return f"{factor:.1f}x" if factor >= 2 else f"{factor:.2f}x"


def duration(ms: float) -> str:
    """A time in the unit that fits it: 112 µs, 1.36 ms, 2.31 s."""
    if ms < 1:
        return f"{ms * 1e3:.3g} µs"
    return f"{ms:.3g} ms" if ms < 1e3 else f"{ms / 1e3:.3g} s"


def cpu_description() -> str:
    """"AMD EPYC 7B13: AVX2, no VNNI" -- the model name and the int8-relevant ISA extensions."""
    name, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("model name", "Model") and name in (platform.processor(), platform.machine()):
                    name = value.strip()
                elif key in ("flags", "Features") and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    found = [shown for flag, shown in ISA_FLAGS if flag in flags]
    vnni = any("VNNI" in shown or "dot product" in shown for shown in found)
    return f"{name}: {', '.join(found) or 'no SIMD extensions listed'}" + ("" if vnni else ", no VNNI")


def _interpreter(path: str):
    from ai_edge_litert.interpreter import Interpreter

    from .runtimes import quiet_native_stderr

    try:
        with quiet_native_stderr():
            interpreter = Interpreter(model_path=path, num_threads=THREADS)
            interpreter.allocate_tensors()
    except (ValueError, RuntimeError) as e:
        raise ConversionError(f"{path}: LiteRT cannot load it: {first_line(e)}") from None
    rng = np.random.default_rng(0)
    for detail in interpreter.get_input_details():
        dtype, shape = np.dtype(detail["dtype"]), tuple(detail["shape"])
        value = (rng.standard_normal(shape) if dtype.kind == "f"
                 else np.zeros(shape)).astype(dtype)
        interpreter.set_tensor(detail["index"], value)
    return interpreter


def _seconds(interpreter) -> float:
    start = time.perf_counter()
    interpreter.invoke()
    return time.perf_counter() - start


def median_ms(paths: list[str], budget_s: float = BUDGET_S) -> tuple[list[float], int]:
    """The median time of each model in milliseconds, timed in alternating rounds (after one
    warm-up run each), about `budget_s` seconds in all, at least MIN_ROUNDS rounds; and the
    number of rounds."""
    interpreters = [_interpreter(p) for p in paths]
    for interpreter in interpreters:
        _seconds(interpreter)
    times: list[list[float]] = [[] for _ in paths]
    deadline = time.perf_counter() + budget_s
    while len(times[0]) < MAX_ROUNDS and (len(times[0]) < MIN_ROUNDS or time.perf_counter() < deadline):
        for interpreter, seconds in zip(interpreters, times):
            seconds.append(_seconds(interpreter))
    return [statistics.median(seconds) * 1e3 for seconds in times], len(times[0])


def measure(model_path: str, float_path: str, budget_s: float = BUDGET_S) -> Latency:
    """Times the two models in alternating rounds (median_ms)."""
    (model_ms, float_ms), rounds = median_ms([model_path, float_path], budget_s)
    return Latency(float(f"{model_ms:.4g}"), float(f"{float_ms:.4g}"),
                   round(model_ms / float_ms, 3) if float_ms > 0 else float("inf"), rounds,
                   THREADS, cpu_description())
