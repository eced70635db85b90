"""bert-tokens, vit-hf-digits and whisper-tones: three tiny Hugging Face transformers encoders
trained here, so that their ONNX files hold the library's own structures (embeddings, eager
attention as MatMul, scale, mask add, Softmax, MatMul; LayerNorm; exact GELU; residual adds).

- bert-tokens: BertForSequenceClassification (hidden 64, 2 layers, 4 heads, intermediate 128,
  vocabulary 64, 32 positions; the pooler's tanh dense layer on [CLS]), inputs input_ids and
  attention_mask int64 [1, 32], logits [1, 5]. The attention mask reaches the model as the
  additive mask (1 - mask) * finfo(float32).min, as transformers 4's get_extended_attention_mask
  made it and most BERT exports hold it (transformers 5 writes Where(mask, 0, min); a 4D float
  mask it takes as it is). Data: [CLS] body [SEP] of 6-32 tokens; the class says which of two
  marker tokens the body holds and in which order: neither, the first, the second, first then
  second, second then first. The positions past the mask hold random tokens, a quarter of them
  markers (as a reused buffer would), so only the attention mask tells where the sequence ends.
- vit-hf-digits: ViTForImageClassification (16x16 grayscale, patches 4x4, hidden 64, 3 layers,
  4 heads, intermediate 128, the [CLS] token classified), input pixel_values [1, 1, 16, 16],
  logits [1, 10]. Data: transformer.py's handwritten digits (the same split, training shifts and
  calibration images), each pixel repeated 2x2 and normalised as ViTImageProcessor does
  ((x - 0.5) / 0.5).
- whisper-tones: WhisperEncoder (40 mel bins, 64 frames, two GELU convolutions, 32 positions,
  d_model 64, 2 layers, 4 heads, FFN 128) with a mean over the positions and a dense layer,
  input input_features [1, 40, 64], logits [1, 6]. Data: 0.64 s of 16 kHz audio, one of six
  sounds at a random pitch (150-3000 Hz), level and onset, over background noise: a steady tone,
  a rising or a falling sweep, two tones at once, a beeping tone, noise alone; the log-mel features
  computed in numpy as Whisper's feature extractor does (400-sample Hann window, hop 160,
  log10, clipped 8 below the maximum, (x + 4) / 4) with triangular mel filters.

Each trains with cross-entropy (train.fit: Adam, cosine decay, data drawn per batch), dropout off,
on one thread. Metric: accuracy. transformers is imported only to train (the test extra has
it); the cache key holds its version beside train.py's.
"""

from __future__ import annotations

import functools
import importlib.metadata
import io
import json
import time
from pathlib import Path

import numpy as np

from . import common, train, transformer

OUTPUT = "logits"
EVAL = 300

# bert-tokens: token 0 pads the vocabulary's start, 3 and 4 are the markers, 5.. the other words
SEQUENCE, VOCAB, CLS, SEP, MARKERS, WORDS = 32, 64, 1, 2, (3, 4), 5
TOKEN_CLASSES = ("neither", "first", "second", "first then second", "second then first")
DIGIT_SIZE = 16  # vit-hf-digits
# whisper-tones
RATE, WINDOW, HOP, MELS, FRAMES = 16000, 400, 160, 40, 64
SOUNDS = ("tone", "rising sweep", "falling sweep", "two tones", "beeps", "noise")


def require_transformers():
    """transformers, or a one-line error."""
    try:
        import transformers
    except ImportError:
        raise RuntimeError("transformers is not installed: pip install 'transformers>=5' "
                           "(the test extra has it)") from None
    return transformers


def transformers_version() -> str:
    try:
        return importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


# --- bert-tokens --------------------------------------------------------------------------------
def token_sample(rng: np.random.Generator):
    """(int64 [2, SEQUENCE]: input ids, attention mask; the class): see the module docstring."""
    label = int(rng.integers(len(TOKEN_CLASSES)))
    length = int(rng.integers(6, SEQUENCE + 1))
    ids = np.where(rng.random(SEQUENCE) < 0.25, rng.choice(MARKERS, SEQUENCE),
                   rng.integers(WORDS, VOCAB, SEQUENCE))  # what lies past the mask
    body = rng.integers(WORDS, VOCAB, length - 2)
    first, second = rng.choice(length - 2, 2, replace=False)
    if label in (1, 3, 4):
        body[first] = MARKERS[0]
    if label in (2, 3, 4):
        body[second] = MARKERS[1]
    if label >= 3 and (first < second) != (label == 3):
        body[[first, second]] = body[[second, first]]
    ids[:length] = [CLS, *body, SEP]
    return np.stack([ids, np.arange(SEQUENCE) < length]).astype(np.int64), label


def build_bert():
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=128,
                        max_position_embeddings=SEQUENCE,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                        num_labels=len(TOKEN_CLASSES), attn_implementation="eager")

    class Classifier(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = BertForSequenceClassification(config)

        def forward(self, input_ids, attention_mask):
            extended = attention_mask[:, None, None, :].to(torch.float32)
            extended = (1.0 - extended) * torch.finfo(torch.float32).min
            return self.bert(input_ids=input_ids, attention_mask=extended).logits

    return Classifier()


# --- vit-hf-digits ------------------------------------------------------------------------------
def upscaled(images: np.ndarray) -> np.ndarray:
    """8x8 digits [..., 8, 8] in [0, 1] as DIGIT_SIZE x DIGIT_SIZE (each pixel repeated),
    normalised as ViTImageProcessor does: (x - 0.5) / 0.5."""
    scale = DIGIT_SIZE // 8
    return (np.repeat(np.repeat(images, scale, -2), scale, -1) - 0.5) / 0.5


def digit_sample(rng: np.random.Generator):
    """transformer.sample's training digit (shifted by up to a pixel), upscaled."""
    image, label = transformer.sample(rng)
    return upscaled(image), label


def digit_dataset(recipe: train.Recipe) -> common.Dataset:
    """transformer.dataset's test split and calibration images, upscaled, cached as files."""
    def build() -> common.Dataset:
        made = transformer.dataset()
        return common.Dataset({"pixel_values": upscaled(made.calibration["image"])},
                              {"pixel_values": upscaled(made.inputs["image"])}, made.truth)

    key = common.digest(Path(common.__file__), *recipe.sources, transformer.DIGITS.sha256)
    return common.cached_dataset(f"{recipe.name}-data", key, build)


def build_vit():
    import torch
    from transformers import ViTConfig, ViTForImageClassification

    config = ViTConfig(image_size=DIGIT_SIZE, patch_size=4, num_channels=1, hidden_size=64,
                       num_hidden_layers=3, num_attention_heads=4, intermediate_size=128,
                       hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, num_labels=10,
                       attn_implementation="eager")

    class Classifier(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.vit = ViTForImageClassification(config)

        def forward(self, pixel_values):
            return self.vit(pixel_values=pixel_values).logits

    return Classifier()


# --- whisper-tones ------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def mel_filters() -> np.ndarray:
    """[MELS, WINDOW // 2 + 1] triangular filters on the mel scale (HTK's), 0 to RATE / 2."""
    def mel(hz):
        return 2595 * np.log10(1 + hz / 700)

    edges = 700 * (10 ** (np.linspace(0, mel(RATE / 2), MELS + 2) / 2595) - 1)
    bins = np.linspace(0, RATE / 2, WINDOW // 2 + 1)
    rising = (bins - edges[:-2, None]) / (edges[1:-1, None] - edges[:-2, None])
    falling = (edges[2:, None] - bins) / (edges[2:, None] - edges[1:-1, None])
    return np.clip(np.minimum(rising, falling), 0, None).astype(np.float32)


def log_mel(audio: np.ndarray) -> np.ndarray:
    """[MELS, FRAMES] Whisper-style log-mel features of HOP * FRAMES samples: centred frames
    (reflect padding), the last one dropped, power spectrum, log10, the range clipped to 8 below
    the maximum, (x + 4) / 4."""
    padded = np.pad(audio, WINDOW // 2, mode="reflect")
    starts = HOP * np.arange(FRAMES)
    frames = padded[starts[:, None] + np.arange(WINDOW)] * np.hanning(WINDOW + 1)[:-1]
    power = np.abs(np.fft.rfft(frames, axis=1)) ** 2
    logs = np.log10(np.maximum(mel_filters() @ power.T, 1e-10))
    return ((np.maximum(logs, logs.max() - 8) + 4) / 4).astype(np.float32)


def sound_sample(rng: np.random.Generator):
    """(log-mel [MELS, FRAMES] of one of SOUNDS over background noise, its class)."""
    label = int(rng.integers(len(SOUNDS)))
    count = HOP * FRAMES
    t = np.arange(count) / RATE
    pitch = np.exp(rng.uniform(np.log(150), np.log(3000)))
    if label in (1, 2):  # an exponential sweep over a factor 1.5-4, its phase the integral
        ratio = rng.uniform(1.5, 4) ** (1 if label == 1 else -1)
        span = count / RATE
        phase = 2 * np.pi * pitch * span * (ratio ** (t / span) - 1) / np.log(ratio)
    else:
        phase = 2 * np.pi * pitch * t + rng.uniform(0, 2 * np.pi)
    sound = np.sin(phase)
    if label == 3:
        sound += np.sin(2 * np.pi * pitch * rng.uniform(1.2, 2.0) * t)
    elif label == 4:
        sound *= np.sin(2 * np.pi * rng.uniform(4, 10) * t + rng.uniform(0, 2 * np.pi)) > 0
    elif label == 5:
        sound = rng.standard_normal(count)
    onset = int(rng.integers(0, count // 4))
    sound[:onset] = 0
    audio = rng.uniform(0.05, 0.8) * sound + rng.uniform(0.001, 0.03) * rng.standard_normal(count)
    return log_mel(audio), label


def build_whisper():
    import torch
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    config = WhisperConfig(num_mel_bins=MELS, d_model=64, encoder_layers=2,
                           encoder_attention_heads=4, encoder_ffn_dim=128,
                           max_source_positions=FRAMES // 2, dropout=0.0, attention_dropout=0.0,
                           activation_dropout=0.0, attn_implementation="eager")

    class Classifier(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = WhisperEncoder(config)
            self.head = torch.nn.Linear(config.d_model, len(SOUNDS))

        def forward(self, input_features):
            return self.head(self.encoder(input_features).last_hidden_state.mean(1))

    return Classifier()


# --- training, export, data ---------------------------------------------------------------------
def arguments(batch, names: tuple[str, ...]) -> tuple:
    """The model's inputs from a batch of samples: with several inputs, each sample stacks them
    along its first axis."""
    return tuple(batch[:, i] for i in range(len(names))) if len(names) > 1 else (batch,)


def cross_entropy(names, model, inputs, labels):
    import torch

    return torch.nn.functional.cross_entropy(model(*arguments(inputs, names)), torch.tensor(labels))


def onnx_path(recipe: train.Recipe, names: tuple[str, ...]) -> Path:
    """train.onnx_path for inputs `names`, the transformers version in the cache key and the
    training's facts."""
    key = common.digest(Path(train.__file__), Path(common.__file__), *recipe.sources, recipe.seed,
                        train.TORCH_VERSION, transformers_version(), common.versions())

    def make() -> bytes:
        torch = train.require_torch()
        transformers = require_transformers()
        torch.set_num_threads(1)  # models this small gain little from a second thread, and
        # on a shared machine two threads lose much to waiting for each other
        start = time.perf_counter()
        torch.manual_seed(recipe.seed)  # the initial weights too (fit seeds only the training)
        model = recipe.build()
        loss = train.fit(recipe, model)
        example = torch.from_numpy(recipe.sample(np.random.default_rng(0))[0][None])
        buffer = io.BytesIO()
        with torch.no_grad():
            torch.onnx.export(model, arguments(example, names), buffer, opset_version=train.OPSET,
                              dynamo=False, input_names=list(names), output_names=[recipe.output])
        facts = {"train_seconds": round(time.perf_counter() - start, 1), "steps": recipe.steps,
                 "batch": recipe.batch, "loss": loss, "torch": torch.__version__,
                 "transformers": transformers.__version__}
        common.cached(recipe.name, key, ".json", lambda: json.dumps(facts).encode())
        return buffer.getvalue()

    return common.cached(recipe.name, key, ".onnx", make)


def dataset(recipe: train.Recipe, names: tuple[str, ...]) -> common.Dataset:
    """common.make_dataset's EVAL samples of recipe.sample, split into the inputs `names`,
    cached as common.sample_dataset does."""
    def split(stacked: np.ndarray) -> dict[str, np.ndarray]:  # [K, 1, inputs, ...] for several
        if len(names) == 1:
            return {names[0]: stacked}
        return {name: stacked[:, :, i] for i, name in enumerate(names)}

    def build() -> common.Dataset:
        made = common.make_dataset(recipe.sample, EVAL, recipe.seed, "x")
        return common.Dataset(split(made.calibration["x"]), split(made.inputs["x"]), made.truth)

    key = common.digest(Path(common.__file__), *recipe.sources, common.versions(), recipe.seed,
                        EVAL)
    return common.cached_dataset(f"{recipe.name}-data", key, build)


def _spec(name: str, names: tuple[str, ...], sample, build, steps: int, batch: int, lr: float,
          seed: int, sources: tuple[Path, ...], data=dataset, **described) -> common.Spec:
    """The Spec of a classifier trained here; data(recipe, names) makes its Dataset."""
    recipe = train.Recipe(name, (Path(__file__), *sources), sample, build,
                          functools.partial(cross_entropy, names), steps, batch, lr, seed, OUTPUT)
    return common.Spec(name=name, kind="labels", metric="accuracy", decode=common.argmax_labels,
                       source=f"trained here (torch {train.TORCH_VERSION}, "
                              "Hugging Face transformers)",
                       onnx=lambda: onnx_path(recipe, names),
                       data=functools.lru_cache()(lambda: data(recipe, names)),
                       info=lambda: train.facts_text(onnx_path(recipe, names)), **described)


SPECS = [
    _spec("bert-tokens", ("input_ids", "attention_mask"), token_sample, build_bert,
          3000, 64, 1e-3, 90, (),
          structure="BertForSequenceClassification, 2 layers, additive attention mask "
                    "(1 - mask) * finfo.min, LayerNorm, GELU, pooler tanh",
          data_text=f"{EVAL} synthetic token sequences of 6-{SEQUENCE} tokens, padded, "
                    f"{len(TOKEN_CLASSES)} classes by which marker tokens appear in which order"),
    _spec("vit-hf-digits", ("pixel_values",), digit_sample, build_vit,
          3000, 64, 1e-3, 91, (Path(transformer.__file__),),
          data=lambda recipe, names: digit_dataset(recipe),
          structure=f"ViTForImageClassification, {DIGIT_SIZE}x{DIGIT_SIZE}, patches 4x4, "
                    "3 layers, [CLS] token, LayerNorm, GELU",
          data_text=f"{transformer.TEST} held-out 8x8 handwritten digits (UCI via scikit-learn), "
                    f"upscaled to {DIGIT_SIZE}x{DIGIT_SIZE}"),
    _spec("whisper-tones", ("input_features",), sound_sample, build_whisper,
          2000, 64, 2e-3, 92, (),
          structure="WhisperEncoder (conv stem, 2 layers) + mean pool + dense, log-mel input",
          data_text=f"{EVAL} synthetic 0.64 s sounds of {len(SOUNDS)} classes as "
                    f"{MELS}-bin log-mel features"),
]
