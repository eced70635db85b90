"""Calibration methods: how a tensor's range follows from the values calibration saw.

* ``minmax`` (the default): the global min and max over all samples, as TOCO does. One pass, no
  histograms (`calibrate._RangeRecorder` alone).
* ``percentile[:P]`` (P default 99.99, 50 < P <= 100): the range [q(100-P), q(P)] of all the
  tensor's values over all samples, each end a quantile. Outliers beyond it saturate in int8; the
  quantizer still widens the range to contain 0.
* ``mse``: the range within [min, max] that minimises the expected squared error of asymmetric
  int8 quantization over the tensor's values (see `mse_ranges`).

The last two work on a histogram per tensor of `BINS` equal bins over its observed [min, max]:
memory is `BINS` counts per tensor (16 KiB), whatever the number of samples, and every value is
binned, never stored. Knowing [min, max] before binning takes a first pass over the samples (the
minmax one), so these methods run the model twice on every sample: calibration inference takes
twice as long as with minmax. A single pass with re-binning would save the second inference but
blur the histogram each time the range grows; two passes give every tensor exact bins over its
final range and deterministic results.

Percentile ends are within one bin (1/2048 of the tensor's range) of the exact quantile; mse ends
within the final grid step of `mse_ranges` (0.4% of the end's distance from 0, or one bin).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BINS = 2048
DEFAULT_PERCENTILE = 99.99
_NAMES = ("minmax", "percentile", "mse")
# Values binned per numpy call (bounds the temporaries of one call to a few times 8 MB).
_BATCH = 1 << 20
# Tensors up to this many values are binned together (as in calibrate._RangeRecorder); a larger
# one costs less on its own (measured: the crossover lies near 1000 values).
_SMALL = BINS // 2
# Tensors whose final ranges are computed together (bounds the [tensors, candidates, candidates]
# arrays of the mse search to a few times 8 MB).
_ROWS = 64
# mse: candidate positions per end of the range, per search stage (see mse_ranges).
_CANDIDATES = 64
_LEVELS = 255  # int8: 256 values, 255 steps


@dataclass(frozen=True)
class CalibrationMethod:
    """A calibration method: `name` is minmax, percentile or mse; `percentile` is P for the
    percentile method (None otherwise). str() gives the canonical text parse_calibration_method
    reads back."""

    name: str
    percentile: float | None = None

    def __post_init__(self) -> None:
        if self.name not in _NAMES:
            raise ValueError(f"unknown calibration method {self.name!r}: "
                             "expected minmax, percentile[:P] or mse")
        if self.name == "percentile":
            p = self.percentile
            if isinstance(p, bool) or not isinstance(p, (int, float)) or not 50 < p <= 100:
                raise ValueError(f"calibration method percentile: P must be a number with 50 < P <= 100, "
                                 f"not {p!r}")
            object.__setattr__(self, "percentile", float(p))
        elif self.percentile is not None:
            raise ValueError(f"calibration method {self.name} takes no percentile")

    def __str__(self) -> str:
        if self.name != "percentile":
            return self.name
        text = repr(self.percentile)
        return "percentile:" + (text[:-2] if text.endswith(".0") else text)


MINMAX = CalibrationMethod("minmax")
MSE = CalibrationMethod("mse")
PERCENTILE = CalibrationMethod("percentile", DEFAULT_PERCENTILE)


def parse_calibration_method(text: str) -> CalibrationMethod:
    """`minmax`, `mse`, `percentile` or `percentile:P` (50 < P <= 100) as a CalibrationMethod;
    a ValueError with a one-line message for anything else."""
    name, colon, argument = text.partition(":")
    if name == "percentile":
        if not colon:
            return PERCENTILE
        try:
            p = float(argument)
        except ValueError:
            raise ValueError(f"calibration method {text!r}: P must be a number with 50 < P <= 100") from None
        if not 50 < p <= 100:  # also refuses nan
            raise ValueError(f"calibration method {text!r}: P must be a number with 50 < P <= 100")
        return CalibrationMethod("percentile", p)
    if name in _NAMES and colon:
        raise ValueError(f"calibration method {text!r}: {name} takes no parameter")
    if name not in _NAMES:
        raise ValueError(f"unknown calibration method {text!r}: expected minmax, percentile[:P] or mse")
    return CalibrationMethod(name)


class HistogramRecorder:
    """Histograms of `BINS` equal bins over each tensor's known [min, max] (the minmax pass's
    result), filled sample by sample. NaN and +-inf are left out, as in the minmax pass; a value
    outside [min, max] (none should be: the second pass sees the same values) goes to the end bin.

    Like calibrate._RangeRecorder the work is planned once per set of (name, dtype, size). A
    tensor of more than `_SMALL` values is binned on its own (in slices of `_BATCH` values) and
    counted into its row with one np.bincount. Smaller tensors of one dtype are binned together
    in batches of about `_BATCH` values (one concatenation, each tensor's offset and scale taken
    over its values by an index planned once: 4 bytes per value of these small tensors), and
    their bin numbers in the flat [tensor, bin] table wait until they add up to the table's size,
    then are counted in one np.bincount: counting costs O(values) overall, not O(table) per
    sample, and the numbers waiting take at most the table's size plus a batch. Positions are
    computed in float32 for float16/float32 tensors (off by at most 1e-3 of a bin; float64 for a
    range too wide for float32), else in float64. Tensors whose min equals their max have no
    histogram: their range is [min, max]."""

    def __init__(self, ranges: dict[str, tuple[float, float]]):
        self.ranges = ranges
        binned = [n for n, (lo, hi) in ranges.items() if hi > lo]
        self.rows = {n: i for i, n in enumerate(binned)}
        self.lows = np.array([ranges[n][0] for n in binned], dtype=np.float64)
        self.highs = np.array([ranges[n][1] for n in binned], dtype=np.float64)
        self.scales = BINS / (self.highs - self.lows)  # bins per unit
        self.wide = self.highs - self.lows > np.finfo(np.float32).max / 2  # value - min may overflow
        self.counts = np.zeros((len(binned), BINS), dtype=np.int64)
        self.pending: list[np.ndarray] = []  # bin numbers in the flat table, not counted yet
        self.pending_size = 0
        self.names: list[str] = []
        self.layout: list | None = None
        # (arrays, their rows, the index in arrays of each value's tensor)
        self.batches: list[tuple[list[int], np.ndarray, np.ndarray]] = []
        self.large: list[tuple[int, int]] = []  # (array, row)

    def record(self, values: dict[str, np.ndarray]) -> None:
        """One sample's values by tensor name (tensors without a known range are ignored)."""
        names = list(values)
        arrays = [np.asarray(v) for v in values.values()]
        layout = [(a.dtype, a.size) for a in arrays]
        if names != self.names or layout != self.layout:
            self._plan(names, layout)
        for indices, rows, tensor in self.batches:
            flat = np.concatenate([arrays[i] for i in indices], axis=None)
            bins, finite = _bins(flat, self.lows[rows], self.scales[rows], self.wide[rows].any(), tensor)
            base = (rows * BINS).take(tensor)
            bins += base if finite is None else base[finite]
            self.pending.append(bins)
            self.pending_size += bins.size
            if self.pending_size >= self.counts.size:
                self._count()
        for i, row in self.large:
            flat = arrays[i].reshape(-1)
            for start in range(0, flat.size, _BATCH):
                bins, _ = _bins(flat[start:start + _BATCH], self.lows[row], self.scales[row], self.wide[row])
                self.counts[row] += np.bincount(bins, minlength=BINS)

    def _plan(self, names: list[str], layout: list) -> None:
        self.names, self.layout = names, layout
        by_dtype: dict[np.dtype, list[int]] = {}
        self.large = []
        for i, (name, (dtype, size)) in enumerate(zip(names, layout)):
            if name not in self.rows or not size or dtype.kind not in "fiub":
                continue
            if size > _SMALL:
                self.large.append((i, self.rows[name]))
            else:
                by_dtype.setdefault(dtype, []).append(i)
        self.batches = []
        for indices in by_dtype.values():
            for start, end in _split(np.array([layout[i][1] for i in indices]), _BATCH):
                batch = indices[start:end]
                tensor = np.repeat(np.arange(len(batch), dtype=np.int32), [layout[i][1] for i in batch])
                self.batches.append((batch, np.array([self.rows[names[i]] for i in batch]), tensor))

    def _count(self) -> None:
        if self.pending:
            flat = self.counts.reshape(-1)
            flat += np.bincount(np.concatenate(self.pending), minlength=flat.size)
            self.pending, self.pending_size = [], 0

    def result(self, method: CalibrationMethod) -> dict[str, tuple[float, float]]:
        """{tensor: (lo, hi)} by `method` (percentile or mse) for every tensor with a range."""
        self._count()
        table = self.counts
        ends = np.zeros((len(table), 2))
        for start in range(0, len(table), _ROWS):
            counts = table[start:start + _ROWS].astype(np.float64)
            if method.name == "percentile":
                p = method.percentile / 100
                ends[start:start + _ROWS] = np.stack(
                    [quantile_positions(counts, 1 - p), quantile_positions(counts, p)], axis=1)
            else:
                zeros = -self.lows[start:start + _ROWS] * self.scales[start:start + _ROWS]
                ends[start:start + _ROWS] = mse_ranges(counts, zeros)
        # Bin positions to values; the ends 0 and BINS are the exact min and max.
        width = (self.highs - self.lows) / BINS
        lows = np.where(ends[:, 0] <= 0, self.lows, self.lows + ends[:, 0] * width)
        highs = np.where(ends[:, 1] >= BINS, self.highs, self.lows + ends[:, 1] * width)
        empty = table.sum(axis=1) == 0  # only if the second pass saw other values than the first
        lows = np.where(empty, self.lows, np.minimum(lows, highs))
        highs = np.where(empty, self.highs, highs)
        result = dict(self.ranges)
        for name, lo, hi in zip(self.rows, lows.tolist(), highs.tolist()):
            result[name] = (lo, hi)
        return result


def _split(sizes: np.ndarray, limit: int) -> list[tuple[int, int]]:
    """Consecutive runs [start, end) of `sizes` adding up to at most `limit` (or one item)."""
    ends = np.cumsum(sizes)
    runs = []
    start = 0
    while start < len(sizes):
        before = ends[start - 1] if start else 0
        end = max(int(np.searchsorted(ends, before + limit, side="right")), start + 1)
        runs.append((start, end))
        start = end
    return runs


def _bins(values: np.ndarray, lows, scales, wide, tensor=None) -> tuple[np.ndarray, np.ndarray | None]:
    """The bin (0..BINS-1) of each finite value, and the mask of the finite values (None when
    all are). `lows` and `scales` (bins per unit) are numbers, or with `tensor` (the index of
    each value's tensor) vectors over the tensors; `wide` asks for float64 arithmetic."""
    work = np.float32 if values.dtype in (np.float16, np.float32) and not wide else np.float64
    lows, scales = np.asarray(lows, work), np.asarray(scales, work)
    if tensor is not None:
        lows, scales = lows.take(tensor), scales.take(tensor)
    position = np.subtract(values, lows, dtype=work)
    position *= scales
    finite = np.isfinite(position)
    if finite.all():
        finite = None
    else:
        position = position[finite]
    np.clip(position, 0, BINS - 1, out=position)  # the max falls on BINS: the last bin
    return position.astype(np.int32), finite  # (int32: much faster to make than intp)


def quantile_positions(counts: np.ndarray, fraction: float) -> np.ndarray:
    """Per row of `counts` ([tensors, bins]), the position in bins (0 = the first bin's lower
    edge, bins = the last one's upper edge) below which `fraction` of the row's count lies, the
    values of a bin taken as spread evenly over it: within one bin of the exact quantile."""
    cumulative = np.cumsum(counts, axis=1)
    target = fraction * cumulative[:, -1:]
    k = np.minimum(np.count_nonzero(cumulative < target, axis=1), counts.shape[1] - 1)[:, None]
    inside = np.take_along_axis(counts, k, axis=1)
    before = np.take_along_axis(cumulative, k, axis=1) - inside
    part = np.clip((target - before) / np.maximum(inside, 1), 0, 1)
    return (k + part)[:, 0]


def mse_ranges(counts: np.ndarray, zeros: np.ndarray) -> np.ndarray:
    """Per row of `counts` ([tensors, bins], histograms over each tensor's [min, max]), the range
    [a, b] in bin positions (0 = min, bins = max) minimising the expected squared error of int8
    quantization: values below a or above b clip to it (their squared distance, the bin's values
    taken at its centre plus the within-bin variance 1/12), values inside round with error
    step^2 / 12, step = (max(b, z) - min(a, z)) / 255 where z (`zeros`, per row) is where 0 lies:
    the quantizer widens the range to contain 0, as choose_quantization_params does. Returns
    [tensors, 2].

    Search. Each end gets its own candidates, so an outlier on one side does not force clipping
    on the other: from the observed end toward the point of the histogram nearest 0 (0 itself
    when the range holds it; clipping past 0 only adds error), every candidate rounded to a bin
    edge so every bin is wholly clipped or wholly kept. First at the fractions 1, r, r^2, ...,
    1/bins and 0 of that distance (r = bins^(-1/62), steps of 12%: outliers put the optimum
    anywhere from the full range down to a few bins), then on an even grid of as many points
    between the best one's neighbours: at most 0.4% of the end's distance from the pivot apart.
    The error separates into clip-below(a) + clip-above(b) + kept(a, b) * step(a, b)^2 / 12;
    prefix sums over the bins (count, sum of centres, sum of squared centres) give each term at
    every edge in O(1), so each [candidates x candidates] grid costs O(bins + candidates^2) per
    tensor, not O(candidates^2 x bins). Ties go to the widest range."""
    rows, bins = counts.shape
    centres = np.arange(bins) + 0.5
    zero = np.zeros((rows, 1))
    n = np.concatenate([zero, np.cumsum(counts, axis=1)], axis=1)  # [rows, bins + 1] prefix sums
    s1 = np.concatenate([zero, np.cumsum(counts * centres, axis=1)], axis=1)
    s2 = np.concatenate([zero, np.cumsum(counts * centres**2, axis=1)], axis=1)
    z = zeros[:, None, None]

    def at(table, edges):
        return np.take_along_axis(table, edges, axis=1)

    def clipped(edges, n_out, s1_out, s2_out):
        # sum over the clipped bins of count * ((centre - edge)^2 + 1/12)
        return s2_out - 2 * edges * s1_out + edges**2 * n_out + n_out / 12

    def best(low, high):
        """(i, j) of the candidate pair (low[:, i], high[:, j]) with the least error, per row."""
        below = clipped(low, at(n, low), at(s1, low), at(s2, low))
        above = clipped(high, n[:, -1:] - at(n, high), s1[:, -1:] - at(s1, high), s2[:, -1:] - at(s2, high))
        kept = at(n, high)[:, None, :] - at(n, low)[:, :, None]  # [rows, low candidate, high candidate]
        step = (np.maximum(high[:, None, :], z) - np.minimum(low[:, :, None], z)) / _LEVELS
        error = below[:, :, None] + above[:, None, :] + kept * step**2 / 12
        return np.divmod(np.argmin(error.reshape(rows, -1), axis=1), low.shape[1])

    pivot = np.clip(zeros, 0, bins)[:, None]
    fractions = np.append(float(bins) ** -(np.arange(_CANDIDATES - 1) / (_CANDIDATES - 2)), 0.0)
    low = np.rint(pivot * (1 - fractions)).astype(np.intp)  # [rows, candidates] edges
    high = np.rint(pivot + (bins - pivot) * fractions).astype(np.intp)
    i, j = best(low, high)
    index = np.arange(rows)
    even = np.linspace(0, 1, _CANDIDATES)

    def between(edges, k):
        first = edges[index, np.maximum(k - 1, 0)][:, None]
        last = edges[index, np.minimum(k + 1, _CANDIDATES - 1)][:, None]
        return np.rint(first + (last - first) * even).astype(np.intp)

    low, high = between(low, i), between(high, j)
    i, j = best(low, high)
    return np.stack([low[index, i], high[index, j]], axis=1).astype(np.float64)


# A SOFTMAX's masked inputs (softmax_floor). A value more than MASKED_GAP below its row's maximum
# has probability exactly 0 in float32 (exp underflows below ln of the smallest subnormal, -103.3):
# the model masked it, whatever constant it used (-1e4, -1e9, float32's minimum, -inf). A row whose
# maximum lies that far below the tensor's holds nothing but masked values (a padded query's row).
MASKED_GAP = 104.0
# The int8 SOFTMAX writes probabilities in steps of 1/256 (TFLite's fixed params 1/256, -128).
SOFTMAX_INT8_STEPS = 256


def softmax_margin(length: int, beta: float = 1.0) -> float:
    """How far below its row's maximum a value must lie to move an int8 SOFTMAX over `length`
    values by less than half a step, all such values of the row together: ln(2 * 256 * length) /
    beta. Each has probability below exp(-margin) <= 1/(512 length), and together they change the
    others' normalization by less than 1/512."""
    return float(np.log(2 * SOFTMAX_INT8_STEPS * length)) / beta


def softmax_floor(values: np.ndarray, beta: float = 1.0) -> tuple[float, bool] | None:
    """(floor, masked) of one sample of a SOFTMAX's input, over its last axis: `masked` whether a
    row held a masked value (MASKED_GAP below its maximum, -inf included); `floor` the lowest
    unmasked value minus softmax_margin, the rows holding only masked values left out. A masked
    value saturating at the floor weighs nothing in the int8 SOFTMAX's output, in every row (each
    row's maximum is an unmasked value, at least the lowest one), also in rows whose maximum lies
    below every calibration row's (a causal attention's first row, its one score). None for a
    sample without a finite row maximum. NaN values are left out, as calibration leaves them out."""
    length = values.shape[-1] if values.ndim else 1
    rows = np.asarray(values, np.float64).reshape(-1, max(length, 1))
    nan = np.isnan(rows)
    highs = np.where(nan, -np.inf, rows).max(axis=1)
    finite = np.isfinite(highs)
    if not finite.any():
        return None
    gap = MASKED_GAP / beta
    live = finite & (highs >= highs[finite].max() - gap)
    kept, tops = rows[live], highs[live][:, None]
    unmasked = kept >= tops - gap  # NaN is neither
    masked = bool(np.any(~unmasked & ~np.isnan(kept)))
    return float(kept[unmasked].min()) - softmax_margin(length, beta), masked
