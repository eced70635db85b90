"""The fake-quant operations of QAT: activation ranges observed as moving averages, per-channel
weight quantization, and the markers export() turns into QuantizeLinear/DequantizeLinear pairs.

Params are qconvert's own: an activation's (scale, zero point) come from
qconvert.quantize.params.choose_quantization_params (TOCO's nudged zero point) on the observed
range, so the QDQ pair export() writes gives back exactly these params when qconvert imports it
(the importer records a pair's grid span, which the same chooser maps back to the pair's params).
Weights are symmetric per output channel on [-127, 127], scale max|w_c| / 127 in float32, as
qconvert/transforms/quantize_weights.py quantizes them.
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch
from torch import nn

from ..quantize.params import activation_scale_floor, choose_quantization_params

QMIN, QMAX = -128, 127  # int8 activations, asymmetric
WEIGHT_QMAX = 127  # int8 weights, symmetric narrow range [-127, 127]


def activation_params(low: float, high: float) -> tuple[float, int]:
    """(float32 scale as a Python float, zero point) for the range, as qconvert chooses them
    (quantize.arrays.params_for_range: TOCO's chooser, then the scale floor)."""
    scale, zero_point = choose_quantization_params(low, high, QMIN, QMAX)
    return float(np.float32(activation_scale_floor(scale))), int(zero_point)


def weight_scales(w: torch.Tensor) -> torch.Tensor:
    """float32 per-output-channel scales max|w_c| / 127 (axis 0). An all-zero channel takes the
    largest other scale (1.0 when all are zero), as qconvert does: any positive scale keeps its
    zeros exact, and a zero scale would make the kernels drop the channel's bias."""
    half_range = w.detach().abs().reshape(w.shape[0], -1).amax(dim=1)
    scales = half_range / WEIGHT_QMAX
    fill = scales.max() if bool((scales > 0).any()) else torch.ones((), dtype=scales.dtype)
    return torch.where(scales > 0, scales, fill)


def fake_quantize_weight(w: torch.Tensor) -> torch.Tensor:
    """w rounded onto its per-channel int8 grid; gradients pass straight through (no value is
    clipped: the scale covers every channel's largest magnitude)."""
    scales = weight_scales(w)
    zeros = torch.zeros(w.shape[0], dtype=torch.int32)
    return torch.fake_quantize_per_channel_affine(w, scales, zeros, 0, -WEIGHT_QMAX, WEIGHT_QMAX)


class _Export:
    """The sites export() is writing: while it traces, every fake-quant calls `mark`, which
    records the site's params and puts a qconvert::FakeQuant marker in the traced graph, later
    replaced by a Q/DQ pair (export.py)."""

    sites: list[dict] | None = None


@contextlib.contextmanager
def exporting(sites: list[dict]):
    _Export.sites = sites
    try:
        yield
    finally:
        _Export.sites = None


def export_sites() -> list[dict] | None:
    return _Export.sites


class _Marker(torch.autograd.Function):
    """Identity in torch; in the TorchScript ONNX export, a qconvert::FakeQuant node carrying the
    index of its site (its output has the input's type, so shape inference continues)."""

    @staticmethod
    def forward(ctx, x, site):
        return x.clone()

    @staticmethod
    def symbolic(g, x, site):
        out = g.op("qconvert::FakeQuant", x, site_i=site)
        out.setType(x.type())
        return out


def mark(x: torch.Tensor, site: dict) -> torch.Tensor:
    """During export: the fake-quant of `x` with the params in `site` (see _Export)."""
    sites = export_sites()
    sites.append(site)
    return _Marker.apply(x, len(sites) - 1)


class RangeObserver(nn.Module):
    """One activation range: moving averages of the batch minimum and maximum (each widened to
    include 0, as tf.contrib.quantize's MovingAvgQuantize does), decay `decay`, started from the
    first batch's range (not [0, 6]: with decay 0.999 a range like [-40, 40] would take thousands
    of steps to be reached from [0, 6], more than a fine-tuning runs).

    A range can be shared by several tensors (the inputs and output of a concatenation, which
    TFLite's CONCATENATION wants at one set of params): `sites` call sites read it each forward
    pass; the batch range is the union over them, and the moving average moves once per pass,
    when the last site has been seen. Every site quantizes with the average updated by what it
    has seen so far in the pass (for one site: the batch included, as tf.contrib.quantize does).

    `quant_delay`: for that many training passes the sites pass values through in float (the
    range is still observed)."""

    def __init__(self, decay: float = 0.999, quant_delay: int = 0):
        super().__init__()
        self.decay, self.quant_delay, self.sites = decay, quant_delay, 1
        self.register_buffer("low", torch.zeros((), dtype=torch.float64))
        self.register_buffer("high", torch.zeros((), dtype=torch.float64))
        self.register_buffer("initialized", torch.zeros((), dtype=torch.bool))
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))
        self._seen, self._batch = 0, None

    def observe(self, x: torch.Tensor) -> tuple[float, float, bool]:
        """Training: adds x's range to this pass's; the (low, high) to quantize with and whether
        fake-quant is on (quant_delay passed)."""
        low, high = (float(v) for v in torch.aminmax(x.detach()))
        low, high = min(low, 0.0), max(high, 0.0)
        if self._batch is not None:
            low, high = min(low, self._batch[0]), max(high, self._batch[1])
        self._batch = (low, high)
        if bool(self.initialized):
            d = self.decay
            low, high = d * float(self.low) + (1 - d) * low, d * float(self.high) + (1 - d) * high
        active = int(self.steps) >= self.quant_delay
        self._seen += 1
        if self._seen >= self.sites:  # the pass is complete: the average moves
            self.low.fill_(low)
            self.high.fill_(high)
            self.initialized.fill_(True)
            self.steps += 1
            self._seen, self._batch = 0, None
        return low, high, active

    def params(self) -> tuple[float, int]:
        return activation_params(float(self.low), float(self.high))


class FakeQuant(nn.Module):
    """The fake-quant of one activation tensor, named after the tensor (`site`) it follows in the
    traced model; `observer` holds its range (shared with the other sites of a concatenation).
    One that is not `exported` models a requantization TFLite inserts itself (a concatenation's
    input whose params are tied elsewhere): the export writes no pair for it."""

    def __init__(self, site: str, observer: RangeObserver, exported: bool = True):
        super().__init__()
        self.site, self.observer, self.exported = site, observer, exported

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            low, high, active = self.observer.observe(x)
            if not active:
                return x
            scale, zero_point = activation_params(low, high)
        else:
            if not bool(self.observer.initialized):
                if export_sites() is not None:
                    raise RuntimeError(f"fake-quant after {self.site!r} has no range yet: run the "
                                       "prepared module in training mode on data before exporting")
                return x
            scale, zero_point = self.observer.params()
        if export_sites() is not None:
            if not self.exported:
                return x
            return mark(x, {"kind": "activation", "name": self.site, "scale": scale,
                            "zero_point": zero_point})
        return torch.fake_quantize_per_tensor_affine(x, scale, zero_point, QMIN, QMAX)

    def extra_repr(self) -> str:
        return f"site={self.site!r}" + ("" if self.exported else ", not exported")


class FixedFakeQuant(nn.Module):
    """The fake-quant of an op whose int8 kernel fixes its output params (LOGISTIC: 1/256 and
    -128, TANH: 1/128 and 0, SOFTMAX, LOG_SOFTMAX: qconvert's QuantRule.fixed_params): no range
    to learn, the same rounding as the kernel's from the first step (after `quant_delay`)."""

    def __init__(self, site: str, scale: float, zero_point: int, quant_delay: int = 0):
        super().__init__()
        self.site, self.scale, self.zero_point = site, float(np.float32(scale)), int(zero_point)
        self.quant_delay = quant_delay
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.steps += 1
            if int(self.steps) <= self.quant_delay:
                return x
        if export_sites() is not None:
            return mark(x, {"kind": "activation", "name": self.site, "scale": self.scale,
                            "zero_point": self.zero_point})
        return torch.fake_quantize_per_tensor_affine(x, self.scale, self.zero_point, QMIN, QMAX)

    def extra_repr(self) -> str:
        return f"site={self.site!r}, scale={self.scale:g}, zero_point={self.zero_point}"
