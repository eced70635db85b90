"""Calibration data: the representative inputs `--calibration PATH` names (and --verify-data,
verify's --data), loaded and checked; folders of images or .wav files are decoded by files.py.

Calibration data (`--calibration PATH`)
---------------------------------------
PATH is either

* an ``.npz`` archive with one array per model input, keyed by the ONNX input name, first axis =
  samples; or
* a directory of arrays: its ``*.npz`` and ``*.npy`` files are read (hidden files and files of
  other suffixes are ignored), in sorted file-name order:
  - ``<input name>.npy`` holds every sample of that input (first axis = samples);
  - each ``*.npz`` is a shard holding the *same* set of inputs; an input's samples are the
    concatenation of its arrays over the shards in file-name order (``part-000.npz``,
    ``part-001.npz``...).
  Both kinds may be mixed as long as no input comes from both. An input name that cannot be a file
  name (one with a ``/``) must come from an ``.npz``; or
* a directory of images (``.png .jpg .jpeg .bmp .webp``) or of ``.wav`` files, for a model with
  one input (see below). These are read from its subfolders too (ImageNet-style class folders,
  ``photos/cat/1.jpg``), taken in the order of their paths relative to the directory, sorted
  folder name by folder name (``cat/1.jpg`` before ``cat2.jpg``); suffixes are case-insensitive,
  hidden files and folders and files of other suffixes ignored. Arrays are read from the
  directory itself only. A directory holding more than one of the three kinds (arrays, images,
  .wav files) is an error, as is one holding none of them.

Folders of images. The input must be 4-D: ``[B,C,H,W]`` when dimension 1 is 1 or 3 (so
``[1,3,3,3]`` is NCHW), else ``[B,H,W,C]`` when the last dimension is 1 or 3; H and W static or
pinned by --input-shape. Each file is decoded by Pillow (PNG, JPEG, BMP, WebP only, whatever its
suffix says), converted to RGB (grayscale "L" for one channel; an alpha channel is dropped),
resized to W x H with Pillow's bilinear resampling, and laid out as the input. A float input gets
``(p / 255 - mean) / std`` computed in float32 (p the 0..255 pixel values; --mean and --std: one
value, or one per channel, default 0 and 1; another count is a usage error), then cast to the
input's dtype; without --mean and --std the report says the images were taken as [0, 1]. An
integer input whose dtype holds 0..255 (uint8, int16, int32, ...) gets the pixel values as they
are, and --mean or --std are then a usage error; an int8 input is refused (it cannot hold
0..255). A sample takes B consecutive files (a dynamic B counts as 1), so the number of files
must be a multiple of B. An image over Pillow's decompression-bomb limit (Image.MAX_IMAGE_PIXELS)
is refused.

Folders of .wav files. The input must be float, ``[1,N]`` or ``[N]`` (a dynamic batch counts as
1; N static or pinned). Each file is read by the standard library's ``wave`` module: integer PCM
of 8, 16, 24 or 32 bits (a 32-bit float or WAVE_FORMAT_EXTENSIBLE file is refused), every value
over 2^(bits-1) (8-bit data is unsigned, offset 128) in float32, the channels of a multi-channel
file averaged; its first N samples, zero-padded to N; then ``(x - mean) / std`` in float32 with
--mean and --std (one value each; ``--std 3.0517578125e-05``, 1/32768, gives int16-valued floats).
With --sample-rate HZ a file of another rate is an error naming it; without it, files of
different rates are an error naming two of them.

--mean and --std apply to these folders only, --sample-rate to .wav folders only: given for data
that does not use them (arrays are taken as they are) they are a usage error (see
unused_decoding). A model with several inputs, or an input of neither shape, needs arrays. Every
image or .wav file a sample takes is decoded when the set is loaded, so a damaged file is a
one-line ConversionError naming it before any model runs; up to 256 MiB of decoded files are kept
for the next passes, the others decoded again when a sample needs them.

Shapes. For a model input of shape S = [B, d1, d2...] an array may be
  - ``[N, B, d1, d2...]``: N samples, each a whole model input; or
  - ``[M, d1, d2...]``: M rows, grouped B at a time into M/B samples (M must be a multiple of B;
    with the usual B = 1 every row is one sample, so ``[N,3,224,224]`` calibrates a
    ``[1,3,224,224]`` input).
  A dynamic dimension of S (None, a negative number or a name) matches any size; a dynamic batch
  counts as 1 in the row form. Every input must give the same number of samples.

Dtypes. Data of the same kind as the input is cast to the input's dtype: any float (float16/32/64)
for a float input -- float64 loses nothing a range needs -- and any integer for an integer input as
long as every value fits. Other combinations are refused: integer data for a float input is most
often images that were not normalized, and the ranges would silently be wrong.

Every check (names, dtypes, shapes, counts, empty set, NaN/Inf, integer overflow) runs when an array
set is loaded, before any model runs; a failure is a ConversionError naming the file and the input.

Memory: ``.npy`` files and the members of uncompressed archives (``np.savez``) are memory-mapped;
a compressed member (``np.savez_compressed``) is decompressed whole when first needed, one shard
per input at a time. Samples are produced one by one.

Hostile files. Every archive member's array header is read (a few hundred bytes) and checked
before anything is inflated or mapped: the size the header declares must be what the zip
directory says the member holds (a header claiming 2^40 samples in a small member is refused), an
encrypted member or one of an unknown compression is refused, and the bytes the compressed members
would inflate to count against errors.CALIBRATION_BYTES (QCONVERT_MAX_CALIBRATION_BYTES), so a
1 MB archive that inflates to 1 GiB is refused before it is inflated. The samples calibration
would run count against errors.CALIBRATION_SAMPLES (QCONVERT_MAX_CALIBRATION_SAMPLES; fewer with
--calibration-samples). A corrupt deflate stream, a truncated member, a pickled (object) array or
a negative dimension is a ConversionError naming the file and the member.

`calibrate.py` runs the model over these samples.
"""

from __future__ import annotations

import bisect
import logging
import os
import struct
import zipfile
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper

from ..errors import CALIBRATION_BYTES, CALIBRATION_SAMPLES, ConversionError, UsageError
from .files import (IMAGE_SUFFIXES, DataSource, FileDecoding, FileSamples, file_input, file_kind,
                    non_finite)

log = logging.getLogger("qconvert")

# NaN/Inf and range scans read at most this many bytes of samples at a time.
_SCAN_BYTES = 64 << 20
# What reading a member can raise on a corrupt or truncated file: zlib.error for a broken deflate
# stream, NotImplementedError for an unknown compression method, EOFError for a short one.
_READ_ERRORS = (ValueError, OSError, zipfile.BadZipFile, EOFError, zlib.error, NotImplementedError)
_ENCRYPTED = 0x1  # zip general-purpose flag bit 0


def _shown_shape(shape) -> str:
    return "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"


def _static_dims(shape) -> tuple:
    """Model dimensions with every dynamic one (None, negative, a name) as None."""
    return tuple(d if isinstance(d, (int, np.integer)) and d >= 0 else None for d in shape)


def _matches(actual, expected) -> bool:
    return len(actual) == len(expected) and all(e is None or a == e for a, e in zip(actual, expected))


# --- reading the files -------------------------------------------------------------------------

def _npz_member_array(path: str, zf: zipfile.ZipFile,
                      info: zipfile.ZipInfo) -> Callable[[], np.ndarray] | np.ndarray:
    """A memory map of an uncompressed archive member, or a loader for a compressed one; the
    header is checked against the member's size first (see the module docstring)."""
    fmt = np.lib.format
    if info.flag_bits & _ENCRYPTED:
        raise ValueError("it is encrypted")
    with zf.open(info) as fp:
        version = fmt.read_magic(fp)
        if version == (1, 0):
            shape, fortran, dtype = fmt.read_array_header_1_0(fp)
        elif version == (2, 0):
            shape, fortran, dtype = fmt.read_array_header_2_0(fp)
        else:  # 3.0 (utf-8 field names); the reader moved in numpy 2.3
            try:
                from numpy.lib._format_impl import _read_array_header
            except ImportError:
                from numpy.lib.format import _read_array_header
            shape, fortran, dtype = _read_array_header(fp, version)
        header_size = fp.tell()
    if dtype.hasobject:
        raise ValueError("it holds Python objects, not numbers")
    nbytes = _declared_bytes(shape, dtype)
    if header_size + nbytes != info.file_size:
        raise ValueError(f"its header declares shape {_shown_shape(shape)} of {dtype} ({nbytes:,} bytes), "
                         f"but the member holds {info.file_size - header_size:,} bytes of data")
    if info.compress_type == zipfile.ZIP_STORED:
        with open(path, "rb") as f:
            f.seek(info.header_offset)
            local = f.read(30)
            if local[:4] != b"PK\x03\x04":
                raise ValueError("corrupt zip member header")
            name_len, extra_len = struct.unpack("<HH", local[26:30])
        offset = info.header_offset + 30 + name_len + extra_len + header_size
        if not shape or 0 in shape:
            return np.zeros(shape, dtype=dtype, order="F" if fortran else "C")
        return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape,
                         order="F" if fortran else "C")
    key = info.filename[:-len(".npy")]

    def load() -> np.ndarray:
        with np.load(path, allow_pickle=False) as data:
            return data[key]
    load.shape, load.dtype, load.nbytes = shape, dtype, nbytes  # type: ignore[attr-defined]
    return load


def _declared_bytes(shape, dtype: np.dtype) -> int:
    """The bytes an array header declares, in Python integers (no overflow)."""
    count = 1
    for d in shape:
        count *= int(d)
    return count * dtype.itemsize


def _read_npz(path: str) -> dict[str, np.ndarray | Callable[[], np.ndarray]]:
    try:
        if not zipfile.is_zipfile(path):
            raise ConversionError(f"{path}: not an .npz archive (expected one array per model input)")
        with zipfile.ZipFile(path) as zf:
            arrays = {}
            for info in zf.infolist():
                if info.is_dir():
                    continue
                if not info.filename.endswith(".npy"):
                    raise ConversionError(f"{path}: member {info.filename!r} is not a numpy array")
                try:
                    arrays[info.filename[:-4]] = _npz_member_array(path, zf, info)
                except _READ_ERRORS as e:
                    raise ConversionError(
                        f"{path}: array {info.filename[:-4]!r} cannot be read: {e}") from None
            CALIBRATION_BYTES.check(
                sum(a.nbytes for a in arrays.values() if callable(a)), f"{path} (compressed arrays)")
            return arrays
    except ConversionError:
        raise
    except PermissionError:
        raise ConversionError(f"{path}: permission denied") from None
    except (OSError, zipfile.BadZipFile) as e:
        raise ConversionError(f"{path}: not a readable .npz archive: {e}") from None


def _read_npy(path: str) -> np.ndarray:
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except PermissionError:
        raise ConversionError(f"{path}: permission denied") from None
    except (ValueError, OSError, EOFError, OverflowError) as e:  # Overflow: a negative shape
        raise ConversionError(f"{path}: not a readable .npy array: {e}") from None


# --- one input's samples -----------------------------------------------------------------------

@dataclass
class _Segment:
    """One file's array for one input, and how its first axis maps to samples."""

    file: str
    source: np.ndarray | Callable[[], np.ndarray]  # an array (maybe memory-mapped) or a loader
    shape: tuple
    dtype: np.dtype
    rows_per_sample: int  # 0: each entry of the first axis is a whole sample ([N, *S])
    count: int = 0  # samples


@dataclass
class _InputData:
    name: str
    shape: tuple  # the model's, dynamic dimensions as None
    dtype: np.dtype
    segments: list[_Segment] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)  # first sample index of each segment
    _cached: tuple[int, np.ndarray] | None = None  # (segment index, loaded array) for loaders

    def array(self, index: int) -> np.ndarray:
        seg = self.segments[index]
        if not callable(seg.source):
            return seg.source
        if self._cached is None or self._cached[0] != index:
            self._cached = None  # free the previous shard before loading the next
            try:
                self._cached = (index, seg.source())
            except _READ_ERRORS as e:
                raise ConversionError(f"{seg.file}: input {self.name!r} cannot be read: {e}") from None
        return self._cached[1]

    def rows(self, index: int, first: int, stop: int) -> np.ndarray:
        """Samples [first, stop) of segment `index`, each in the model's shape (no copy if possible)."""
        seg, data = self.segments[index], self.array(index)
        if seg.rows_per_sample:
            r = seg.rows_per_sample
            part = data[first * r:stop * r]
            return part.reshape((stop - first, r) + part.shape[1:])
        return data[first:stop]

    def sample(self, i: int) -> np.ndarray:
        index = bisect.bisect_right(self.starts, i) - 1
        local = i - self.starts[index]
        value = self.rows(index, local, local + 1)[0]
        if self.segments[index].rows_per_sample and self.shape and self.shape[0] is not None:
            value = value.reshape((self.shape[0],) + value.shape[1:])
        # np.require, not np.ascontiguousarray: that makes a scalar (a rank-0 input) 1-D.
        return np.require(value, dtype=self.dtype, requirements="C")


class CalibrationSet(Sequence):
    """The calibration samples: `set[i]` is {input name: array in the model input's shape and
    dtype}; iteration yields the samples in order, one at a time. Each input's samples come from
    its `sample(i)`: an _InputData (arrays) or a files.FileSamples (images, .wav files).
    `source` says what they were read from, for the report."""

    def __init__(self, path: str, inputs: dict[str, _InputData | FileSamples], count: int,
                 source: DataSource):
        self.path = path
        self._inputs = inputs
        self._count = count
        self.source = source

    @property
    def names(self) -> list[str]:
        return list(self._inputs)

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._count))]
        if i < 0:
            i += self._count
        if not 0 <= i < self._count:
            raise IndexError(i)
        return {name: data.sample(i) for name, data in self._inputs.items()}

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        for i in range(self._count):
            yield self[i]

    def __repr__(self) -> str:
        return f"CalibrationSet({self.path!r}, {self._count} samples, inputs {self.names})"


def _dtype_problem(data: np.dtype, model: np.dtype) -> str | None:
    if data == model:
        return None
    if data.kind == "f" and model.kind == "f":
        return None
    if data.kind in "iu" and model.kind in "iu":
        return None
    hint = ""
    if data.kind in "iub" and model.kind == "f":
        hint = " (integer data for a float input: normalize it as the model expects and save it as float32)"
    return f"has dtype {data}, the model input is {model}{hint}"


def _shape_segment(file: str, name: str, array_shape: tuple, dtype: np.dtype, source,
                   data: _InputData) -> _Segment:
    s = data.shape
    expected = f"[N,{_shown_shape(s)[1:]}" if s else "[N]"
    if len(s) >= 1:
        batch = s[0] if s[0] is not None else 1
        expected += f" or [M,{_shown_shape(s[1:])[1:]} with M a multiple of {batch}" if batch != 1 else \
            f" or [N,{_shown_shape(s[1:])[1:]}"
    if len(array_shape) == len(s) + 1 and _matches(array_shape[1:], s):
        return _Segment(file, source, array_shape, dtype, 0, array_shape[0])
    if len(s) >= 1 and len(array_shape) == len(s) and _matches(array_shape[1:], s[1:]):
        batch = s[0] if s[0] is not None else 1
        if batch and array_shape[0] % batch == 0:
            return _Segment(file, source, array_shape, dtype, batch, array_shape[0] // batch)
    raise ConversionError(
        f"{file}: input {name!r} has shape {_shown_shape(array_shape)}; the model input is "
        f"{_shown_shape(s)}, so the data must be {expected} (first axis = samples)")


def _scan(data: _InputData, count: int) -> None:
    """NaN/Inf in float data and integer values that do not fit the input's dtype, over the first
    `count` samples, a bounded number of bytes at a time."""
    done = 0
    for index, seg in enumerate(data.segments):
        if done >= count:
            break
        take = min(seg.count, count - done)
        check_fit = seg.dtype.kind in "iu" and not np.can_cast(seg.dtype, data.dtype)
        if seg.dtype.kind != "f" and not check_fit:
            done += take
            continue
        per_sample = max(1, int(np.prod(seg.shape[1:], dtype=np.int64)) * seg.dtype.itemsize
                         * max(1, seg.rows_per_sample))
        step = max(1, _SCAN_BYTES // per_sample)
        for first in range(0, take, step):
            stop = min(take, first + step)
            chunk = np.asarray(data.rows(index, first, stop))
            where = f"{seg.file}: input {data.name!r}"
            if seg.dtype.kind == "f":
                finite = np.isfinite(chunk).reshape(stop - first, -1).all(axis=1)
                if not finite.all():
                    bad = int(np.argmin(finite))
                    what = non_finite(chunk[bad])
                    raise ConversionError(
                        f"{where}: sample {done + first + bad} contains {what}; "
                        "calibration data must be finite")
            elif chunk.size:
                info = np.iinfo(data.dtype)
                lo, hi = chunk.min(), chunk.max()
                if lo < info.min or hi > info.max:
                    raise ConversionError(
                        f"{where}: values from {lo} to {hi} do not fit the model input's dtype {data.dtype}")
        done += take


def load_calibration(path: str, model_inputs: dict[str, tuple[tuple, np.dtype]],
                     max_samples: int | None = None, decoding: FileDecoding | None = None,
                     progress: bool = False) -> CalibrationSet:
    """Opens and checks the calibration data at `path` (an .npz or a directory, see the module
    docstring) against `model_inputs` ({name: (shape, dtype)}); uses the first `max_samples`
    samples (all when None). `decoding` says how a folder of images or .wav files becomes
    samples; `progress` shows a progress line on a terminal while such files are read. Raises
    ConversionError for anything that does not fit."""
    if max_samples is not None and max_samples < 1:
        raise UsageError(f"--calibration-samples must be at least 1, not {max_samples}")
    path = os.fspath(path)
    if not os.path.exists(path):
        raise ConversionError(f"{path}: no such file or directory")
    if os.path.isdir(path):
        arrays, kind, media = _folder_files(path)
        if kind is not None:
            specs = {name: (_static_dims(shape), dtype) for name, (shape, dtype) in model_inputs.items()}
            name, samples, count = file_input(path, media, kind, specs, max_samples, decoding, progress)
            return CalibrationSet(path, {name: samples}, count, samples.source())
        found, files = _folder_arrays(arrays, model_inputs), len(arrays)
    elif os.path.isfile(path):
        found, files = {name: [(path, a)] for name, a in _read_npz(path).items()}, 1
    else:
        raise ConversionError(f"{path}: not a file or directory")
    return _checked_set(path, found, model_inputs, max_samples, DataSource("arrays", files))


def _folder_files(path: str) -> tuple[list[str], str | None, list[str]]:
    """(the .npz/.npy files, None) or ([], "image" or "audio", those files) of the directory
    `path`: arrays from the directory itself in sorted name order, images and .wav files from
    its subfolders too (_media_files); a folder mixing these kinds, or holding none, is a
    ConversionError."""
    try:
        entries = sorted(e for e in os.listdir(path) if not e.startswith("."))
    except PermissionError:
        raise ConversionError(f"{path}: permission denied") from None
    files = [os.path.join(path, e) for e in entries if os.path.isfile(os.path.join(path, e))]
    media = _media_files(path)
    by_kind = {"arrays": [f for f in files if f.endswith((".npz", ".npy"))],
               "image": [f for f in media if file_kind(f) == "image"],
               "audio": [f for f in media if file_kind(f) == "audio"]}
    present = [kind for kind, found in by_kind.items() if found]
    if not present:
        raise ConversionError(
            f"{path}: the directory holds no .npz or .npy files, and neither it nor its subfolders "
            f"hold images ({' '.join(IMAGE_SUFFIXES)}) or .wav files; no calibration samples")
    if len(present) > 1:
        shown = {"arrays": ".npz/.npy arrays", "image": "images", "audio": ".wav files"}
        held = " and ".join(f"{shown[k]} ({os.path.relpath(by_kind[k][0], path)}...)" for k in present)
        raise ConversionError(f"{path}: the directory holds {held}; it must hold one kind of "
                              "calibration file: move the others out")
    kind = present[0]
    return (by_kind[kind], None, []) if kind == "arrays" else ([], kind, by_kind[kind])


def _media_files(path: str) -> list[str]:
    """The images and .wav files under the directory `path`, subfolders included (symbolic
    links to folders not followed), hidden files and folders left out, sorted by their path
    relative to `path` folder name by folder name."""
    def refuse(error: OSError):
        if isinstance(error, PermissionError):
            raise ConversionError(f"{error.filename}: permission denied")
        raise ConversionError(f"{error.filename}: cannot be listed ({error.strerror})")

    found = []
    for folder, subfolders, names in os.walk(path, onerror=refuse):
        subfolders[:] = [d for d in subfolders if not d.startswith(".")]
        parts = os.path.relpath(folder, path).split(os.sep) if folder != path else []
        for name in names:
            file = os.path.join(folder, name)
            if not name.startswith(".") and file_kind(name) and os.path.isfile(file):
                found.append((tuple(parts) + (name,), file))
    return [file for _, file in sorted(found)]


def unused_decoding(decoding: FileDecoding, paths) -> str | None:
    """The usage error of a --mean, --std or --sample-rate that none of the data `paths` (the
    calibration and verification data: paths, the API's arrays, None) would use, naming the
    first path: --mean and --std are read by folders of images or .wav files, --sample-rate by
    .wav folders. A path whose kind cannot be told (missing, empty, mixed) counts as using them:
    loading it gives its own error."""
    kinds = [(path, _data_kind(path)) for path in paths if path is not None]
    named = next(((path, kind) for path, kind in kinds if isinstance(path, str)), None)
    for flag, value, readers in (("--mean", decoding.mean, ("image", "audio", None)),
                                 ("--std", decoding.std, ("image", "audio", None)),
                                 ("--sample-rate", decoding.sample_rate, ("audio", None))):
        if value is None or named is None or any(kind in readers for _, kind in kinds):
            continue
        path, kind = named
        if flag == "--sample-rate":
            held = "images" if kind == "image" else "arrays"
            return f"--sample-rate applies to a folder of .wav files; {path!r} holds {held}"
        return (f"{flag} applies to a folder of images or .wav files; {path!r} holds arrays: "
                "normalize them before saving")
    return None


def _data_kind(path) -> str | None:
    """"arrays", "image" or "audio": what the data at `path` (a path, or the API's arrays)
    holds; None when that cannot be told (a missing path, a folder of no or mixed kinds)."""
    if not isinstance(path, str):
        return "arrays"
    if os.path.isfile(path):  # an .npz, unless it is one image or .wav file (refused when loaded)
        return None if file_kind(path) else "arrays"
    if not os.path.isdir(path):
        return None
    try:
        arrays, kind, _ = _folder_files(path)
    except ConversionError:
        return None
    return kind or "arrays"


def _folder_arrays(files: list[str], model_inputs) -> dict[str, list[tuple[str, object]]]:
    """{input name: [(file, array or loader)] in sample order} of a directory's .npz/.npy files."""
    found: dict[str, list[tuple[str, object]]] = {}
    shard_names: tuple[str, set[str]] | None = None
    from_npy: dict[str, str] = {}
    for file in files:
        if file.endswith(".npy"):
            name = os.path.basename(file)[:-4]
            if name not in model_inputs:
                raise ConversionError(
                    f"{file}: {name!r} is not a model input (inputs: {', '.join(model_inputs)}); "
                    "a .npy file is named after the input it holds")
            from_npy[name] = file
            found[name] = [(file, _read_npy(file))]
    for file in files:
        if not file.endswith(".npz"):
            continue
        arrays = _read_npz(file)
        if shard_names is None:
            shard_names = (file, set(arrays))
        elif set(arrays) != shard_names[1]:
            raise ConversionError(
                f"{file}: holds inputs {sorted(arrays)}, but {shard_names[0]} holds "
                f"{sorted(shard_names[1])}; every .npz shard must hold the same inputs")
        for name, array in arrays.items():
            if name in from_npy:
                raise ConversionError(f"{file}: input {name!r} is also given by {from_npy[name]}")
            found.setdefault(name, []).append((file, array))
    return found


def calibration_from_arrays(arrays, model_inputs: dict[str, tuple[tuple, np.dtype]],
                            max_samples: int | None = None, shown: str = "calibration") -> CalibrationSet:
    """Calibration data already in memory (the Python API): {input name: array}, laid out as an
    .npz's arrays (see the module docstring), checked as load_calibration checks a file; `shown`
    stands for the file name in errors."""
    found = {}
    for name, array in arrays.items():
        try:
            found[name] = [(shown, np.asarray(array))]
        except (ValueError, TypeError) as e:
            raise ConversionError(f"{shown}: input {name!r} is not an array: {e}") from None
    return _checked_set(shown, found, model_inputs, max_samples, DataSource("arrays", 0))


def _checked_set(path: str, found: dict[str, list[tuple[str, object]]],
                 model_inputs: dict[str, tuple[tuple, np.dtype]], max_samples: int | None,
                 data_source: DataSource) -> CalibrationSet:
    """The CalibrationSet of `found` ({input name: [(file, array or loader)] in sample order}),
    every check of load_calibration run; `data_source` what they were read from."""
    missing = [n for n in model_inputs if n not in found]
    if missing:
        raise ConversionError(
            f"{path}: no data for model input {missing[0]!r}"
            + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
            + f"; the data holds {sorted(found) or 'nothing'}")
    extra = [n for n in found if n not in model_inputs]
    if extra:
        raise ConversionError(
            f"{found[extra[0]][0][0]}: {extra[0]!r} is not a model input (inputs: {', '.join(model_inputs)})")

    inputs: dict[str, _InputData] = {}
    for name, (shape, dtype) in model_inputs.items():
        data = _InputData(name, _static_dims(shape), np.dtype(dtype))
        for file, source in found[name]:
            array_dtype = np.dtype(source.dtype)
            problem = _dtype_problem(array_dtype, data.dtype)
            if problem:
                raise ConversionError(f"{file}: input {name!r} {problem}")
            seg = _shape_segment(file, name, tuple(source.shape), array_dtype, source, data)
            data.starts.append(sum(s.count for s in data.segments))
            data.segments.append(seg)
        inputs[name] = data

    counts = {name: sum(s.count for s in d.segments) for name, d in inputs.items()}
    if len(set(counts.values())) > 1:
        shown = ", ".join(f"{n!r}: {c}" for n, c in counts.items())
        raise ConversionError(f"{path}: the inputs have different numbers of samples ({shown})")
    total = next(iter(counts.values()), 0)
    if total == 0:
        raise ConversionError(f"{path}: no calibration samples (the arrays are empty)")
    count = total if max_samples is None else min(total, max_samples)
    CALIBRATION_SAMPLES.check(count, f"{path} (--calibration-samples takes fewer)")
    for data in inputs.values():
        _scan(data, count)
        data._cached = None
    return CalibrationSet(path, inputs, count, data_source)


def model_input_specs(model: onnx.ModelProto) -> dict[str, tuple[tuple, np.dtype]]:
    """The graph inputs that are not initializers, as load_calibration's `model_inputs`."""
    initializers = {t.name for t in model.graph.initializer}
    specs = {}
    for i in model.graph.input:
        if i.name in initializers:
            continue
        tt = i.type.tensor_type
        dims = tuple(d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim)
        specs[i.name] = (dims, np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type)))
    return specs
