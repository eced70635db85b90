"""Samples decoded from a folder of images or of .wav files (the format is defined in data.py's
module docstring; data.py lists the folder and calls `file_input` when it holds such files).

`file_input` picks the model input the files feed, checks its shape, and decodes every file a
sample takes when the set is loaded (so a damaged file is an error before any model runs) and
checks its header (sample rate, sample width); it returns a FileSamples that gives each sample
when it is asked for. Decoded files (resized pixels, audio samples) are kept up to _CACHE_BYTES,
since calibration, layer measurement, planning and verification read the samples again; past
that, a file is decoded again when a sample needs it, so memory stays bounded for thousands of
files. Pillow is imported only when a folder of images is read.
"""

from __future__ import annotations

import contextlib
import warnings
import wave
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np

from ..errors import CALIBRATION_SAMPLES, ConversionError, UsageError
from .progress import Progress

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".webp")
AUDIO_SUFFIXES = (".wav",)
IMAGE_CHANNELS = (1, 3)
# Pillow's formats for the suffixes (its JPEG reader opens a camera's multi-picture JPEG too). Only
# these are tried, so a renamed file of another format (EPS, which runs Ghostscript) is refused
# rather than opened.
_PIL_FORMATS = ("PNG", "JPEG", "BMP", "WEBP")
# Decoded files kept for the next pass over the samples (a 224x224 RGB image: 147 KiB).
_CACHE_BYTES = 256 << 20
_WHAT = {"image": "images", "audio": ".wav files"}
_NPZ_HINT = "give its data as an .npz (one array per model input, see --help)"
# Pillow's modes of more than 8 bits a sample (16-bit grayscale PNG: I;16, or I in older Pillow)
# and the value of their white: scaled by their own depth, not clipped at 255 by convert("L").
# (48/64-bit RGB(A) PNGs Pillow reads at 8 bits, their high byte: scaled right already.)
_DEEP_MODES = {"I;16": 65535, "I;16L": 65535, "I;16B": 65535, "I;16N": 65535, "I": 65535}


@dataclass(frozen=True)
class FileDecoding:
    """How a folder of images or .wav files becomes samples: --mean and --std normalize a float
    image input's pixels (0..1) or a .wav folder's samples (-1..1, one value each), --sample-rate
    is the rate every .wav file must have; `shapes` are --input-shape's pins, which give a dynamic
    height, width or length its size."""

    mean: tuple[float, ...] | None = None  # one value, or one per channel (None: 0)
    std: tuple[float, ...] | None = None  # likewise (None: 1)
    sample_rate: int | None = None  # Hz (None: any)
    shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class DataSource:
    """What a set of samples was read from, for the report: `kind` "images", "wav" or "arrays";
    `files` the images or .wav files read, or the .npz/.npy files (0: the API's arrays in
    memory); for a float input fed by images or .wav files, the `mean` and `std` applied (as
    given, else [0.0] and [1.0]) and whether --mean or --std was given; else None and False."""

    kind: str
    files: int
    mean: list[float] | None = None
    std: list[float] | None = None
    mean_std_given: bool = False

    def unscaled_images(self) -> str:
        """"64 images as [0, 1] (no --mean/--std)" for a float input's images without --mean or
        --std (the likeliest slip: most image models expect normalized pixels); else ""."""
        if self.kind != "images" or self.mean is None or self.mean_std_given:
            return ""
        return f"{self.files} images as [0, 1] (no --mean/--std)"


def file_kind(name: str) -> str | None:
    """"image", "audio" or None (a file that no decoding reads), by the name's suffix."""
    lower = name.lower()
    if lower.endswith(IMAGE_SUFFIXES):
        return "image"
    if lower.endswith(AUDIO_SUFFIXES):
        return "audio"
    return None


def _shown(shape) -> str:
    return "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"


# --- images --------------------------------------------------------------------------------------

@contextlib.contextmanager
def _open_image(file: str) -> Iterator:
    """The image at `file` opened by Pillow (a PNG, JPEG, BMP or WebP); any failure, in the
    `with` body too, is one ConversionError naming the file."""
    from PIL import Image

    try:
        with warnings.catch_warnings():
            # Over Image.MAX_IMAGE_PIXELS Pillow only warns (up to twice that): refuse it too.
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(file, formats=_PIL_FORMATS) as image:
                yield image
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise ConversionError(
            f"{file}: larger than Pillow's limit against decompression bombs "
            f"({Image.MAX_IMAGE_PIXELS:,} pixels); downscale it or take it out of the folder") from None
    except PermissionError:
        raise ConversionError(f"{file}: permission denied") from None
    except Exception as e:  # Pillow's decoders raise many types on a malformed file
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        reason = reason.replace(f" {file!r}", "")  # "cannot identify image file '<file>'"
        raise ConversionError(f"cannot decode {file} ({reason}): the file is damaged or not an "
                              "image; re-save or remove it") from None


@dataclass(frozen=True)
class _ImageReader:
    """Images for a 4-D input [B,C,H,W] or [B,H,W,C]: each converted to RGB (L for one channel),
    resized to H x W by Pillow's bilinear resampling; for a float input (p/255 - mean)/std in
    float32, for an integer one the pixel values as they are. A 16-bit grayscale image is p/65535
    (its channel repeated for RGB), 0..255 for an integer input."""

    batch: int
    channels: int
    height: int
    width: int
    channels_first: bool
    dtype: np.dtype
    mean: tuple[float, ...] | None  # one value or one per channel
    std: tuple[float, ...] | None

    def check(self, file: str) -> None:
        """Nothing beyond decoding it (which opens it): no sample rate."""

    def decode(self, file: str) -> np.ndarray:
        """The resized pixels, uint8 [H, W, C]; a deep image's (_DEEP_MODES) float32 in [0, 1]."""
        from PIL import Image

        size = (self.width, self.height)
        with _open_image(file) as image:
            white = _DEEP_MODES.get(image.mode)
            if white is None:
                converted = image.convert("RGB" if self.channels == 3 else "L")
                resized = converted.resize(size, Image.Resampling.BILINEAR)
                return np.asarray(resized, dtype=np.uint8).reshape(self.height, self.width, self.channels)
            unit = np.clip(np.asarray(image, dtype=np.float32) / np.float32(white), 0, 1)
        plane = np.asarray(Image.fromarray(unit).resize(size, Image.Resampling.BILINEAR), np.float32)
        return np.repeat(plane[:, :, None], self.channels, axis=2)

    def sample(self, decoded: list[np.ndarray]) -> np.ndarray:
        # [B, H, W, C] in [0, 1] (8-bit pixels over 255, deep ones as decoded)
        unit = np.stack([p.astype(np.float32) / np.float32(255) if p.dtype == np.uint8 else p
                         for p in decoded])
        if self.dtype.kind == "f":
            values = unit
            if self.mean is not None:
                values = values - np.asarray(self.mean, dtype=np.float32)
            if self.std is not None:
                values = values / np.asarray(self.std, dtype=np.float32)
        else:  # 8-bit pixels as they are; a deep image's at 8 bits
            values = np.stack([p if p.dtype == np.uint8 else np.rint(p * 255).astype(np.uint8)
                               for p in decoded])
        if self.channels_first:
            values = values.transpose(0, 3, 1, 2)
        return np.ascontiguousarray(values, dtype=self.dtype)


def _image_reader(folder: str, name: str, shape: tuple, dtype: np.dtype,
                  decoding: FileDecoding, files: list[str]) -> _ImageReader:
    """The reader of an image input: [B,C,H,W] when dimension 1 is 1 or 3 (so [1,3,3,3] is
    NCHW), else [B,H,W,C] when the last is 1 or 3; B dynamic is 1. A dynamic H or W takes the
    images' own size when the `files` the samples take all have one (the model is then converted at it, as at an
    .npz's: dynamic_dims.py); images of several sizes need --input-shape."""
    layout = None
    if len(shape) == 4 and shape[1] in IMAGE_CHANNELS:
        layout = (True, shape[1], shape[2], shape[3])
    elif len(shape) == 4 and shape[3] in IMAGE_CHANNELS:
        layout = (False, shape[3], shape[1], shape[2])
    if layout is None:
        raise ConversionError(
            f"{folder}: input {name!r} of shape {_shown(shape)} is not an image input ([B,C,H,W] or "
            f"[B,H,W,C] with 1 or 3 channels) for a folder of images; {_NPZ_HINT}")
    channels_first, channels, height, width = layout
    if height is None or width is None:
        sizes = _image_sizes(files)
        if len(sizes) == 1:
            (found_width, found_height), = sizes
            height, width = height or found_height, width or found_width
    if height is None or width is None:
        (one, first), (other, second) = list(sizes.items())[:2]
        pin = ["1" if d is None else str(d) for d in shape]
        for axis, letter in zip((2, 3) if channels_first else (1, 2), "HW"):
            if shape[axis] is None:
                pin[axis] = letter
        raise ConversionError(
            f"{folder}: input {name!r} of shape {_shown(shape)} has a dynamic height or width, "
            f"and the images have several sizes ({first} is {one[0]}x{one[1]}, {second} "
            f"{other[0]}x{other[1]}); images are resized to the input's: pin it with "
            f"--input-shape {name}:{','.join(pin)}")
    if dtype.kind != "f":
        if decoding.mean is not None or decoding.std is not None:
            raise UsageError(f"--mean and --std normalize images for a float input; input {name!r} "
                             f"is {dtype}, which takes the pixel values 0..255 as they are")
        if dtype.kind not in "iu" or np.iinfo(dtype).max < 255:
            raise ConversionError(f"{folder}: input {name!r} is {dtype}, which cannot hold pixel "
                                  f"values 0..255; {_NPZ_HINT}")
    mean = _per_channel("--mean", decoding.mean, channels, name)
    std = _per_channel("--std", decoding.std, channels, name)
    if dtype.kind == "f":
        _finite_after(folder, f"input {name!r}'s pixels", (0.0, 1.0), mean, std)
    return _ImageReader(shape[0] or 1, channels, height, width, channels_first, dtype, mean, std)


def _image_sizes(files: list[str]) -> dict[tuple[int, int], str]:
    """{(width, height): the first file of that size} of the images (their headers only)."""
    sizes: dict[tuple[int, int], str] = {}
    for file in files:
        with _open_image(file) as image:
            sizes.setdefault(tuple(image.size), file)
    return sizes


def _finite_after(folder: str, what: str, bounds: tuple[float, float],
                  mean: tuple[float, ...] | None, std: tuple[float, ...] | None) -> None:
    """UsageError naming the flag when (x - mean) / std, computed in float32 as the samples are,
    is not finite for values x in `bounds` (--std 1e-40 or --mean 1e39 overflow float32): the
    data would be inf/NaN. Checked before any file is decoded: every file would be."""
    ends = np.array([[bounds[0]], [bounds[1]]], np.float32)
    with np.errstate(all="ignore"):
        shifted = ends - np.asarray(mean or (0.0,), np.float32)
        scaled = shifted / np.asarray(std or (1.0,), np.float32)
        exact = (np.array([[bounds[0]], [bounds[1]]]) - np.asarray(mean or (0.0,), np.float64)) \
            / np.asarray(std or (1.0,), np.float64)
    for flag, given, values in (("--mean", mean, shifted), ("--std", std, scaled)):
        if given is not None and not np.isfinite(values).all():
            shown = ",".join(f"{v:g}" for v in given)
            raise UsageError(
                f"{folder}: {flag} {shown} takes {what} in [{bounds[0]:g}, {bounds[1]:g}] to "
                f"[{exact.min():.3g}, {exact.max():.3g}] by (x - mean) / std, beyond float32's "
                "range: the samples would be inf or NaN")


def non_finite(values: np.ndarray) -> str | None:
    """"NaN" or "Inf" when float `values` hold one (NaN first), else None: calibration and
    check samples from any source (a folder, an .npz, --verify-data) must be finite."""
    if values.dtype.kind not in "fc" or np.isfinite(values).all():
        return None
    return "NaN" if np.isnan(values).any() else "Inf"


def _per_channel(flag: str, values: tuple[float, ...] | None, channels: int,
                 name: str) -> tuple[float, ...] | None:
    if values is None:
        return None
    if len(values) not in (1, channels):
        raise UsageError(f"{flag} has {len(values)} values; input {name!r} has {channels} "
                         f"channel{'s' if channels > 1 else ''}: give one value or {channels}")
    return values


# --- audio ---------------------------------------------------------------------------------------

@contextlib.contextmanager
def _open_wav(file: str) -> Iterator[wave.Wave_read]:
    """The .wav file at `file` opened by the standard library (PCM only); any failure, in the
    `with` body too, is one ConversionError naming the file."""
    try:
        with wave.open(file, "rb") as reader:
            yield reader
    except PermissionError:
        raise ConversionError(f"{file}: permission denied") from None
    except (wave.Error, EOFError, OSError, ValueError) as e:
        reason = str(e) or type(e).__name__
        if "unknown format: 3" in reason:
            reason = "32-bit float samples; only integer PCM is read"
        elif "unknown format: 65534" in reason:
            reason = "WAVE_FORMAT_EXTENSIBLE; only plain integer PCM is read"
        raise ConversionError(f"{file}: not a readable .wav file ({reason}); convert it to 16-bit "
                              "PCM, or take it out of the folder") from None


def _pcm_values(frames: bytes, width: int, channels: int) -> np.ndarray:
    """PCM frames as float32 in [-1, 1] (each integer over 2^(bits-1); 8-bit data is unsigned,
    offset 128), the channels averaged."""
    usable = len(frames) - len(frames) % (width * channels)  # a truncated file's last frame
    raw = np.frombuffer(frames, dtype=np.uint8, count=usable)
    if width == 1:
        ints = raw.astype(np.int32) - 128
    elif width == 3:
        b = raw.reshape(-1, 3).astype(np.int32)
        ints = ((b[:, 0] | b[:, 1] << 8 | b[:, 2] << 16) ^ 0x800000) - 0x800000
    else:
        ints = raw.view(np.dtype(f"<i{width}"))
    values = ints.astype(np.float32) / np.float32(2 ** (8 * width - 1))
    if channels > 1:
        values = values.reshape(-1, channels).mean(axis=1, dtype=np.float32)
    return values


@dataclass(frozen=True)
class _AudioReader:
    """.wav files for a float input [1,N] or [N]: the first N samples of each, zero-padded to N,
    then (x - mean) / std in float32 when --mean or --std is given."""

    length: int
    batched: bool  # [1, N] rather than [N]
    dtype: np.dtype
    sample_rate: int | None
    mean: tuple[float] | None = None
    std: tuple[float] | None = None
    batch: int = 1

    def check(self, file: str) -> int:
        """The file's sample rate, its header checked (sample width, --sample-rate)."""
        with _open_wav(file) as reader:
            width, rate = reader.getsampwidth(), reader.getframerate()
        if width not in (1, 2, 3, 4):
            raise ConversionError(f"{file}: {8 * width}-bit samples; 8, 16, 24 and 32-bit PCM are read")
        if self.sample_rate is not None and rate != self.sample_rate:
            raise ConversionError(f"{file}: sampled at {rate} Hz, not the --sample-rate "
                                  f"{self.sample_rate} Hz; resample it")
        return rate

    def decode(self, file: str) -> np.ndarray:
        """The file's first N samples, float32 [N]."""
        with _open_wav(file) as reader:
            frames = reader.readframes(self.length)
            width, channels = reader.getsampwidth(), reader.getnchannels()
        values = np.zeros(self.length, dtype=np.float32)
        read = _pcm_values(frames, width, channels)
        values[:len(read)] = read
        return values

    def sample(self, decoded: list[np.ndarray]) -> np.ndarray:
        values = decoded[0]
        if self.mean is not None:
            values = values - np.float32(self.mean[0])
        if self.std is not None:
            values = values / np.float32(self.std[0])
        values = values[None] if self.batched else values
        return np.ascontiguousarray(values, dtype=self.dtype)


def _audio_reader(folder: str, name: str, shape: tuple, dtype: np.dtype,
                  decoding: FileDecoding) -> _AudioReader:
    """The reader of an audio input: float, [N] or [B,N] with B 1 or dynamic, N static."""
    if not (len(shape) == 1 or (len(shape) == 2 and shape[0] in (1, None))) or dtype.kind != "f":
        raise ConversionError(
            f"{folder}: input {name!r} of shape {_shown(shape)} ({dtype}) is not an audio input "
            f"(float, [1,N] or [N]) for a folder of .wav files; {_NPZ_HINT}")
    if shape[-1] is None:
        pin = "1,N" if len(shape) == 2 else "N"
        raise ConversionError(f"{folder}: input {name!r} of shape {_shown(shape)} has a dynamic "
                              f"length; pin it with --input-shape {name}:{pin}")
    for flag, values in (("--mean", decoding.mean), ("--std", decoding.std)):
        if values is not None and len(values) != 1:
            raise UsageError(f"{flag} has {len(values)} values; a folder of .wav files takes one "
                             "(each file's channels are averaged into one)")
    _finite_after(folder, f"input {name!r}'s samples", (-1.0, 1.0), decoding.mean, decoding.std)
    return _AudioReader(shape[-1], len(shape) == 2, dtype, decoding.sample_rate,
                        decoding.mean, decoding.std)


# --- the samples ---------------------------------------------------------------------------------

class FileSamples:
    """One input's samples from files: sample i decodes files[i*B:(i+1)*B] (B: the input's
    batch), keeping decoded files up to _CACHE_BYTES."""

    def __init__(self, files: list[str], reader: _ImageReader | _AudioReader):
        self.files = files
        self.reader = reader
        self._decoded: dict[int, np.ndarray] = {}
        self._decoded_bytes = 0

    def sample(self, i: int) -> np.ndarray:
        """Sample i, finite (a ConversionError naming its first file otherwise)."""
        batch = self.reader.batch
        with np.errstate(all="ignore"):  # said below in one line, not as numpy's warnings
            values = self.reader.sample([self.decoded(k) for k in range(i * batch, (i + 1) * batch)])
        bad = non_finite(values)
        if bad:
            raise ConversionError(f"{self.files[i * batch]}: sample {i} contains {bad} after "
                                  "decoding; calibration data must be finite")
        return values

    def source(self) -> DataSource:
        """What these samples are read from, for the report."""
        reader = self.reader
        kind = "images" if isinstance(reader, _ImageReader) else "wav"
        if reader.dtype.kind != "f":  # an integer input's pixels, as they are
            return DataSource(kind, len(self.files))
        given = reader.mean is not None or reader.std is not None
        return DataSource(kind, len(self.files), list(reader.mean or (0.0,)),
                          list(reader.std or (1.0,)), given)

    def decoded(self, k: int) -> np.ndarray:
        """File k decoded (kept while the cache has room)."""
        decoded = self._decoded.get(k)
        if decoded is None:
            decoded = self.reader.decode(self.files[k])
            if self._decoded_bytes + decoded.nbytes <= _CACHE_BYTES:
                self._decoded[k] = decoded
                self._decoded_bytes += decoded.nbytes
        return decoded


def _pinned(name: str, shape: tuple, pins: Mapping[str, tuple[int, ...]]) -> tuple:
    """The input's shape with --input-shape's pin for it (when it has the input's rank)."""
    pin = pins.get(name)
    return tuple(pin) if pin is not None and len(pin) == len(shape) else shape


def file_input(folder: str, files: list[str], kind: str,
               model_inputs: dict[str, tuple[tuple, np.dtype]], max_samples: int | None,
               decoding: FileDecoding | None = None,
               progress: bool = False) -> tuple[str, FileSamples, int]:
    """(input name, its samples, how many) for `files` of `kind` ("image" or "audio") in sample
    order, feeding the one input of `model_inputs` ({name: (shape with dynamic dimensions as
    None, dtype)}); the first `max_samples` samples (all when None). Every file a sample takes
    is checked and decoded now, with a progress line on a terminal when `progress`."""
    decoding = decoding or FileDecoding()
    if len(model_inputs) != 1:
        raise ConversionError(
            f"{folder}: a folder of {_WHAT[kind]} feeds a model with one input; this one has "
            f"{len(model_inputs)} ({', '.join(model_inputs)}): give the data as an .npz with one "
            "array per input")
    (name, (shape, dtype)), = model_inputs.items()
    shape, dtype = _pinned(name, shape, decoding.shapes), np.dtype(dtype)
    taken = files if max_samples is None else files[:max_samples * (shape[0] or 1)]
    reader = (_image_reader(folder, name, shape, dtype, decoding, taken) if kind == "image"
              else _audio_reader(folder, name, shape, dtype, decoding))
    count = len(files) // reader.batch
    if max_samples is not None and max_samples < count:
        count = max_samples
    elif len(files) % reader.batch:
        raise ConversionError(
            f"{folder}: {len(files)} {_WHAT[kind]}, not a multiple of input {name!r}'s batch "
            f"{reader.batch} (each sample takes {reader.batch})")
    CALIBRATION_SAMPLES.check(count, f"{folder} (--calibration-samples takes fewer)")
    samples = FileSamples(files[:count * reader.batch], reader)
    bar = Progress(progress, len(samples.files), "reading calibration files")
    first: tuple[str, int] | None = None  # the first .wav file and its sample rate
    for done, file in enumerate(samples.files, 1):
        rate = reader.check(file)
        first = first or (None if rate is None else (file, rate))
        if rate is not None and rate != first[1]:
            raise ConversionError(
                f"{first[0]} is sampled at {first[1]} Hz, {file} at {rate} Hz; resample them, or "
                "pass --sample-rate to say which rate the model takes")
        samples.decoded(done - 1)
        bar.update(done, final=done == len(samples.files))
    return name, samples, count
