"""Training here: the torch models' shared loop, their export and their cache.

torch is the bench extra's (`pip install -e '.[bench]'`, pinned torch==2.13.0) and is imported
only when a model has to be trained: a cached model needs no torch. Every model trains on CPU from
a fixed seed, on data generated batch by batch from its own seed stream (never the evaluation or
calibration streams), with Adam and a cosine learning-rate decay, and is exported with
torch.onnx.export (the TorchScript exporter, opset 17, batch 1, no dynamic axes).

The .onnx is cached as <name>-<key>.onnx, the key a digest of the model's module, this file, the
data modules it names, the seed and the torch, numpy and Pillow versions; <name>-<key>.json beside
it says how the training went (seconds, steps, last loss).
"""

from __future__ import annotations

import functools
import io
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from . import common

TORCH_VERSION = "2.13.0"  # the bench extra's pin; another version is refused, not trained on
OPSET = 17


def require_torch():
    """torch, when it is the pinned version; a one-line error otherwise."""
    try:
        import torch
    except ImportError:
        raise RuntimeError(f"torch is not installed: pip install -e '.[bench]' "
                           f"(torch=={TORCH_VERSION})") from None
    if torch.__version__.split("+")[0] != TORCH_VERSION:
        raise RuntimeError(f"torch {torch.__version__} is installed; the bench pins "
                           f"{TORCH_VERSION} (pip install -e '.[bench]')")
    return torch


@dataclass(frozen=True)
class Recipe:
    """How one model is trained here. sample(rng) -> (input [C, H, W] float32, truth) draws one
    training sample (the evaluation and calibration data come from the same function, other seed
    streams); build() makes the torch module, whose forward is the exported graph; loss(model,
    inputs [B, C, H, W], truths list) is the training loss. `sources`: the files the model and
    its data depend on (the model's module first)."""

    name: str
    sources: tuple[Path, ...]
    sample: Callable
    build: Callable
    loss: Callable
    steps: int
    batch: int
    lr: float
    seed: int
    output: str


def fit(recipe: Recipe, model) -> float:
    """Trains `model` for recipe.steps Adam steps on batches of recipe.sample, the learning rate
    decaying from recipe.lr along a cosine; returns the mean loss of the last 50 steps."""
    import numpy as np
    import torch

    torch.manual_seed(recipe.seed)
    rng = np.random.default_rng((recipe.seed, 2))  # streams 0 and 1: calibration, evaluation
    optimizer = torch.optim.Adam(model.parameters(), lr=recipe.lr)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: 0.02 + 0.98 * 0.5 * (1 + math.cos(math.pi * step / recipe.steps)))
    model.train()
    recent = []
    for _ in range(recipe.steps):
        samples = [recipe.sample(rng) for _ in range(recipe.batch)]
        inputs = torch.from_numpy(np.stack([x for x, _ in samples]))
        value = recipe.loss(model, inputs, [truth for _, truth in samples])
        optimizer.zero_grad()
        value.backward()
        optimizer.step()
        schedule.step()
        recent = (recent + [value.item()])[-50:]
    model.eval()
    return sum(recent) / len(recent)


def export(model, example, output: str) -> bytes:
    """The model as ONNX bytes (see the module docstring), input "image"."""
    import torch

    buffer = io.BytesIO()
    with torch.no_grad():
        torch.onnx.export(model, (example,), buffer, opset_version=OPSET, dynamo=False,
                          input_names=["image"], output_names=[output])
    return buffer.getvalue()


def onnx_path(recipe: Recipe) -> Path:
    """The cached .onnx of the recipe, trained when missing; the training's facts (seconds,
    steps, last loss) go to the .json beside it."""
    key = common.digest(Path(__file__), Path(common.__file__), *recipe.sources, recipe.seed,
                        TORCH_VERSION, common.versions())

    def make() -> bytes:
        torch = require_torch()
        torch.set_num_threads(2)  # the machine's size: the timing in the .json means that
        start = time.perf_counter()
        model = recipe.build()
        loss = fit(recipe, model)
        example = torch.from_numpy(recipe.sample(np.random.default_rng(0))[0][None])
        data = export(model, example, recipe.output)
        facts = {"train_seconds": round(time.perf_counter() - start, 1), "steps": recipe.steps,
                 "batch": recipe.batch, "loss": loss, "torch": torch.__version__}
        common.cached(recipe.name, key, ".json", lambda: json.dumps(facts).encode())
        return data

    return common.cached(recipe.name, key, ".onnx", make)


def facts_text(path: Path) -> str:
    """How the cached model at `path` was trained, one line (its .json)."""
    facts = common.cached_json(path.with_suffix(".json"))
    if not facts:
        return ""
    return (f"trained here in {facts['train_seconds']:.0f} s ({facts['steps']} steps of "
            f"{facts['batch']}, last loss {facts['loss']:.3f})")


def spec(recipe: Recipe, evaluation: int, data: Callable | None = None, **described
         ) -> common.Spec:
    """The table's Spec of a trained model: `evaluation` samples of recipe.sample from the
    evaluation seed stream (or data() when given), input "image"; `described` holds the Spec's
    kind, metric, structure, data_text and decode."""
    def dataset() -> common.Dataset:
        return common.sample_dataset(f"{recipe.name}-data", list(recipe.sources), recipe.sample,
                                     evaluation, recipe.seed, "image")

    described.setdefault("source", f"trained here (torch {TORCH_VERSION})")
    return common.Spec(name=recipe.name, onnx=lambda: onnx_path(recipe),
                       data=data or functools.lru_cache()(dataset),
                       info=lambda: facts_text(onnx_path(recipe)), **described)
