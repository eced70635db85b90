"""A convolution or dense layer with its batch norm folded and its activation fused, as TFLite's
int8 graph runs it: one CONV_2D / FULLY_CONNECTED with folded weights, an int32 bias and a fused
ReLU/ReLU6, its weights fake-quantized per output channel.

Batch-norm folding for training follows tf.contrib.quantize (fold_batch_norms.py, "with
correction"; Krishnamoorthi 2018, fig. 10): the weights that are fake-quantized are always the
ones inference uses, W * gamma / sigma_moving, and
- while the batch norm trains, the output is rescaled to the batch statistics:
  y = conv(x, Q(W gamma / sigma_moving)) * sigma_moving / sigma_batch + beta - gamma mu_batch / sigma_batch
  (mu_batch, sigma_batch are taken from that same convolution divided by gamma / sigma_moving, so
  one convolution runs, as in PyTorch's own ConvBn QAT modules), and the moving statistics are
  updated with the batch's, with the batch norm's momentum;
- after `freeze_bn_delay` training passes, and in eval mode, the moving statistics are used:
  y = conv(x, Q(W gamma / sigma_moving)) + beta + (b - mu_moving) gamma / sigma_moving,
  and the moving statistics stop moving (frozen, as PyTorch's freeze_bn_stats does).
The bias is never fake-quantized: TFLite stores it as int32 at input scale x weight scale.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from .fake_quant import export_sites, fake_quantize_weight, mark, weight_scales

ACTIVATIONS = {None: lambda y: y, "relu": F.relu, "relu6": F.relu6}


class FusedLayer(nn.Module):
    """layer (nn.Conv2d or nn.Linear) -> [bn (nn.BatchNorm2d)] -> [activation: "relu", "relu6"]."""

    def __init__(self, layer: nn.Module, bn: nn.Module | None, activation: str | None,
                 quant_delay: int = 0, freeze_bn_delay: int | None = None):
        super().__init__()
        self.layer, self.bn, self.activation = layer, bn, activation
        self.quant_delay, self.freeze_bn_delay = quant_delay, freeze_bn_delay
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))

    def _linear(self, x, weight, bias):
        if isinstance(self.layer, nn.Conv2d):
            c = self.layer
            if c.padding_mode != "zeros":
                raise NotImplementedError(f"padding_mode {c.padding_mode!r} (only zeros)")
            return F.conv2d(x, weight, bias, c.stride, c.padding, c.dilation, c.groups)
        return F.linear(x, weight, bias)

    def _per_channel(self, v: torch.Tensor, ndim: int) -> torch.Tensor:
        """v along axis 0 of a weight of rank ndim."""
        return v.reshape((-1,) + (1,) * (ndim - 1))

    def _along_channels(self, v: torch.Tensor, ndim: int) -> torch.Tensor:
        """v along axis 1 (channels) of an activation of rank ndim."""
        return v.reshape((1, -1) + (1,) * (ndim - 2))

    def folded(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(weights, bias) with the batch norm's moving statistics folded in: what inference runs."""
        w, b = self.layer.weight, self.layer.bias
        if self.bn is None:
            return w, b
        factor = self._factor()
        bias = b if b is not None else torch.zeros_like(self.bn.running_mean)
        return (w * self._per_channel(factor, w.ndim),
                self._beta() + (bias - self.bn.running_mean) * factor)

    def _factor(self) -> torch.Tensor:
        """gamma / sigma_moving per output channel."""
        gamma = self.bn.weight if self.bn.affine else torch.ones_like(self.bn.running_var)
        return gamma / torch.sqrt(self.bn.running_var + self.bn.eps)

    def _beta(self) -> torch.Tensor:
        return self.bn.bias if self.bn.affine else torch.zeros_like(self.bn.running_mean)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if export_sites() is not None:
            return self._exported(x)
        if self.training:
            self.steps += 1
        quantize = not self.training or int(self.steps) > self.quant_delay
        frozen = not self.training or (self.freeze_bn_delay is not None
                                       and int(self.steps) > self.freeze_bn_delay)
        weight, bias = self.folded()
        weight = fake_quantize_weight(weight) if quantize else weight
        if self.bn is None or frozen:
            return ACTIVATIONS[self.activation](self._linear(x, weight, bias))
        # Training with batch statistics and the sigma_batch / sigma_moving correction.
        factor = self._along_channels(self._factor(), x.ndim)
        unscaled = self._linear(x, weight, None) / factor  # conv(x, W) with quantized weights
        axes = [0] + list(range(2, x.ndim))
        mean = unscaled.mean(axes)
        var = unscaled.var(axes, unbiased=False)
        # The moving mean is the layer's output's, bias included (the float BatchNorm2d sees it).
        bias = self.layer.bias
        moving = mean.detach() if bias is None else mean.detach() + bias.detach()
        self._update_moving_statistics(moving, unscaled.detach(), axes)
        gamma = self.bn.weight if self.bn.affine else torch.ones_like(var)
        scale = self._along_channels(gamma / torch.sqrt(var + self.bn.eps), x.ndim)
        y = ((unscaled - self._along_channels(mean, x.ndim)) * scale
             + self._along_channels(self._beta(), x.ndim))
        return ACTIVATIONS[self.activation](y)

    def _update_moving_statistics(self, mean, values, axes) -> None:
        bn = self.bn
        if not bn.track_running_stats:
            raise NotImplementedError("a BatchNorm2d without running statistics cannot be folded")
        bn.num_batches_tracked += 1
        momentum = bn.momentum if bn.momentum is not None else 1.0 / float(bn.num_batches_tracked)
        unbiased = values.var(axes, unbiased=True)  # as nn.BatchNorm2d keeps its running_var
        bn.running_mean.mul_(1 - momentum).add_(momentum * mean)
        bn.running_var.mul_(1 - momentum).add_(momentum * unbiased)

    def _exported(self, x: torch.Tensor) -> torch.Tensor:
        """The inference form for the ONNX export: the folded float weights (buffers, so they
        become named initializers) under a per-channel weight fake-quant marker, the folded bias."""
        weight = mark(self.folded_weight, {"kind": "weight", "name": self.site,
                                           "scales": weight_scales(self.folded_weight).numpy()})
        return ACTIVATIONS[self.activation](self._linear(x, weight, self.folded_bias))

    def prepare_export(self, site: str) -> None:
        """Stores the folded weights and bias as buffers for _exported (on export's copy)."""
        weight, bias = self.folded()
        self.site = site
        self.register_buffer("folded_weight", weight.detach().clone())
        self.register_buffer("folded_bias", None if bias is None else bias.detach().clone())

    def extra_repr(self) -> str:
        return f"activation={self.activation}, batch_norm_folded={self.bn is not None}"
