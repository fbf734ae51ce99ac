"""The Qwen-VL patch layout, fused with rescale and normalize, written into a given buffer.

The resized image (H×W×3, uint8) is cut into P×P patches (P = ``spec.patch_size``: 14 for
Qwen2-VL and Qwen2.5-VL, 16 for Qwen3-VL and Qwen3.5). Patches are ordered so that the M×M
patches (M = ``spec.merge_size``, 2) which the model later merges into one token are
consecutive: row-major over (M·P)×(M·P) blocks, and row-major over the patches inside a block.
Each patch is flattened as (channel, time, row, column) — the time axis repeats the still image
``spec.temporal_patch_size`` (T = 2) times — giving rows of 3·T·P·P values (1176 for Qwen2-VL,
1536 for Qwen3-VL). This is exactly transformers' ``Qwen2VLImageProcessor.patchify``, which
every one of these families uses with its own numbers. The figures below are Qwen2-VL's.

The work is two passes plus a broadcast. ``patch_planes`` gathers the uint8 pixels into patch
order (whole 14-pixel patch rows at a time), then splits the channels into planes.
``normalize_into`` converts each plane to float32 as ``u · 1/(255·std) − mean/std`` in one
OpenCV pass, then one numpy copy writes the result into both time slots of the output — 512
patches at a time, so that the float32 temporary (1.2 MB) stays in cache. No float64; the
temporary and the output come from the buffer pool (:mod:`mm_preproc.buffers`) so that they are
not first-touch memory. The result differs from transformers' (which rescales
in float64, then subtracts and divides in float32) by a few float32 ulps (< 1e-6).

Where the optional C extension ``mm_preproc._fastpatch`` is built (``setup.py``) and the CPU is
an x86-64 with AVX2 and FMA, :func:`normalize_image_into` does all of it in one pass with
non-temporal stores instead, giving the same values (``fmaf``, as ``addWeighted`` computes with
FMA); the pipeline uses it for the float32 output (:func:`native_available`).
"""

from __future__ import annotations

from functools import cache

import cv2
import numpy as np

from mm_preproc.buffers import POOL
from mm_preproc.constants import CHANNELS
from mm_preproc.errors import InvalidArgumentError
from mm_preproc.layout import OutputFormat, output_spec
from mm_preproc.spec import QWEN2_VL, PreprocSpec

try:  # the optional C extension (setup.py); without it the numpy/OpenCV path below is used
    from mm_preproc import _fastpatch
except ImportError:  # pragma: no cover - depends on the build
    _fastpatch = None  # type: ignore[assignment]
# usable() is True only on x86-64 with AVX2 and FMA (where it was measured)
_NATIVE = _fastpatch is not None and bool(_fastpatch.usable())

# normalize_into converts this many patches at a time into a float32 scratch of 3·512·196·4 =
# 1.2 MB (1.5 MB with 16-px patches), which stays in the 2 MB L2 cache while it is copied into
# both time slots of the output.
_NORMALIZE_CHUNK = 512


@cache
def _scale_bias(spec: PreprocSpec) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per channel: value = u * scale[c] + bias[c] (u the 0..255 byte), computed in float32."""
    return spec.scale_bias()


@cache
def _patch_row(patch_size: int) -> np.dtype:
    """One row of one patch, all channels: P pixels × 3 bytes, moved as a single element."""
    return np.dtype((np.void, patch_size * CHANNELS))


def patch_planes(image: np.ndarray, spec: PreprocSpec = QWEN2_VL) -> np.ndarray:
    """Gather an H×W×3 uint8 RGB image into patch order, one plane per channel.

    ``image`` may also be H×W×4 with the pixels' fourth byte ignored: Pillow's own RGB memory
    (R, G, B, padding), as :func:`mm_preproc.pil_view.rgbx_view` exposes it without a copy.
    OpenCV drops the padding first (``cvtColor`` RGBA → RGB into a pooled buffer: 0.4 ms for
    1148×840 against 0.6–0.75 ms for ``np.asarray`` of the Pillow image; gathering straight
    from the 4-byte pixels was slower still, docs/mm_preproc.md).
    Returns (3, num_patches, P·P) uint8 (from the buffer pool): ``[c, n]`` is patch ``n``'s
    channel ``c``, row-major. Two passes: numpy moves whole patch rows (3·P-byte elements, so
    its copy loop runs once per patch row instead of once per 14-pixel channel run: 5× faster
    here), then OpenCV's ``split`` separates the channels.
    """
    if image.ndim == 3 and image.shape[2] == 4:
        rgb = POOL.empty((image.shape[0], image.shape[1], CHANNELS), np.uint8)
        if cv2.cvtColor(image, cv2.COLOR_RGBA2RGB, dst=rgb) is not rgb:
            raise RuntimeError("cv2.cvtColor did not write into the given buffer")  # never seen
        image = rgb
    image = np.ascontiguousarray(image)
    height, width, _ = image.shape
    ps, m = spec.patch_size, spec.merge_size
    gh, gw = height // ps, width // ps
    n = gh * gw
    rows = POOL.empty((n * ps * ps, CHANNELS), np.uint8)
    src = image.reshape(height, width * CHANNELS).view(_patch_row(ps))  # (H, W/P)
    dst = rows.reshape(-1).view(_patch_row(ps))
    dst.reshape(gh // m, gw // m, m, m, ps)[...] = (
        src.reshape(gh // m, m, ps, gw // m, m).transpose(0, 3, 1, 4, 2)
    )
    planes = POOL.empty((CHANNELS, n, ps * ps), np.uint8)
    targets = [planes[c].reshape(-1, 1) for c in range(CHANNELS)]
    written = cv2.split(rows.reshape(-1, 1, CHANNELS), targets)
    if any(w is not t for w, t in zip(written, targets, strict=True)):
        raise RuntimeError("cv2.split did not write into the given planes")  # never seen
    return planes


def check_out(
    out: np.ndarray | None,
    height: int,
    width: int,
    fmt: OutputFormat,
    spec: PreprocSpec = QWEN2_VL,
) -> np.ndarray:
    """Return ``out`` if it fits the output of a target size and format, else a new array."""
    want = output_spec(height, width, fmt, spec)
    if out is None:
        return POOL.empty(want.shape, want.dtype)
    if out.dtype != want.dtype or not out.flags.c_contiguous or out.size != np.prod(want.shape):
        raise InvalidArgumentError(
            f"out must be a C-contiguous {want.dtype} array of {np.prod(want.shape)} elements "
            f"(shape {want.shape}); got {out.dtype} shape {out.shape}"
        )
    return out.reshape(want.shape)


def normalize_into(planes: np.ndarray, out: np.ndarray, spec: PreprocSpec = QWEN2_VL) -> np.ndarray:
    """Rescale, normalize and repeat in time: (3, N, P·P) uint8 planes → ``out`` (N, 3·T·P·P).

    Per channel, one OpenCV pass converts the contiguous uint8 plane to float32 with the
    channel's scale and offset (``addWeighted`` with a zero second weight: u·a + b in float32),
    then one numpy copy broadcasts the three planes into both time slots of ``out``. numpy's
    own uint8 → float32 multiply-add takes three passes over the float32 data instead of one.
    Both steps run on ``_NORMALIZE_CHUNK`` patches at a time: the float32 temporary is then
    read back from L2 instead of memory (one 12 MB temporary for a 1280-token image before:
    0.3–0.4 ms more per image, docs/mm_preproc.md). Results are bit-identical either way.
    """
    n, pp = planes.shape[1], planes.shape[2]
    scale, bias = _scale_bias(spec)
    chunk = max(1, min(n, _NORMALIZE_CHUNK))
    scratch = POOL.empty((CHANNELS, chunk, pp), np.float32)
    dst = out.reshape(n, CHANNELS, spec.temporal_patch_size, pp)
    for k0 in range(0, n, chunk):
        k1 = min(n, k0 + chunk)
        part = scratch[:, : k1 - k0]
        for c in range(CHANNELS):
            src, into = planes[c, k0:k1], part[c]
            got = cv2.addWeighted(src, scale[c], src, 0.0, bias[c], dst=into, dtype=cv2.CV_32F)
            if got is not into:
                raise RuntimeError("cv2.addWeighted did not write into the scratch")  # never seen
        np.copyto(dst[k0:k1], part.transpose(1, 0, 2)[:, :, None, :])
    return out


_native_enabled = True


def native_available() -> bool:
    """True when the C kernel (``mm_preproc._fastpatch``) is built, usable here and enabled."""
    return _NATIVE and _native_enabled


def set_native(enabled: bool) -> bool:
    """Use (True) or bypass (False) the C kernel for float32 outputs; returns the old setting.

    For comparisons and tests: both paths give the same values (bit-identical where OpenCV's
    ``addWeighted`` uses FMA, as on any x86-64 with AVX2; otherwise within one float32 ulp).
    """
    global _native_enabled
    old, _native_enabled = _native_enabled, bool(enabled)
    return old


def normalize_image_into(
    image: np.ndarray, out: np.ndarray, spec: PreprocSpec = QWEN2_VL
) -> np.ndarray:
    """:func:`patch_planes` + :func:`normalize_into` in one native pass (needs the extension).

    ``image`` is H×W×3 or H×W×4 (RGBX) uint8, H and W multiples of the spec's factor; ``out`` a
    C-contiguous float32 array of (H/P)·(W/P)·3·T·P² values. For RGBX, an even patch size and a
    16-byte aligned ``out`` the kernel converts four pixels of one channel per SIMD step and
    streams each patch's rows into every time slot with non-temporal stores, so the 23 MB output
    of a 1280-token Qwen2-VL image is written without first being read into cache
    (docs/mm_preproc.md: patchify + normalize about 3 ms → about 1 ms in the pipeline); other
    inputs go through float planes of M·P rows.
    """
    if _fastpatch is None:
        raise RuntimeError("mm_preproc._fastpatch is not built (make mm-native)")
    image = np.ascontiguousarray(image)
    height, width, depth = image.shape
    scale, bias = _scale_bias(spec)
    _fastpatch.normalize_patches(image, out, height, width, depth, scale, bias,
                                 spec.patch_size, spec.merge_size, spec.temporal_patch_size)
    return out


def repeat_into(planes: np.ndarray, out: np.ndarray, spec: PreprocSpec = QWEN2_VL) -> np.ndarray:
    """Repeat in time without normalizing: (3, N, P·P) uint8 planes → ``out`` (N, 3·T·P²) uint8."""
    n, pp = planes.shape[1], planes.shape[2]
    np.copyto(
        out.reshape(n, CHANNELS, spec.temporal_patch_size, pp),
        planes.transpose(1, 0, 2)[:, :, None, :],
    )
    return out
