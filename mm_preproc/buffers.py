"""A small pool of output and scratch buffers, reused once nothing references them any more.

Why: a float32 ``pixel_values`` for a 1280-token image is 23 MB. Allocated afresh per image,
glibc hands large blocks back to the kernel when they are freed, so every new output is
first-touch memory: about 5,700 page faults per image, which on the dev VM cost about 14 ms —
more than everything after the decode together (measured with ``getrusage`` minor faults:
6,300 per image before, 0 after; docs/mm_preproc.md). The pool keeps a few buffers mapped and
hands one out again once its previous user has dropped every view of it.

How it knows a buffer is free: every array handed out is a view whose ``base`` is the pool's
backing array, so the backing array's reference count stays above the pool's own while any
view (or anything holding one: a ``memoryview``, a torch tensor from ``torch.from_numpy``) is
alive. A caller that keeps its results simply never gets a pooled buffer back; nothing is ever
shared between live results.

Bounded: at most ``max_bytes`` (default 128 MiB) are kept; requests that do not fit get a plain
``np.empty``. :func:`set_pool_limit` changes the bound (0 disables pooling).

Pooled arrays start on a 64-byte boundary (``ALIGN_BYTES``): glibc returns large blocks 16
bytes past a page, and the C kernel's 32-byte streaming stores for 16-px patches need 32
(mm_preproc._fastpatch; a plain array gets its 16-byte loop, the same values).
"""

from __future__ import annotations

import sys
import threading

import numpy as np

from mm_preproc.errors import InvalidArgumentError

DEFAULT_POOL_BYTES = 128 << 20
ALIGN_BYTES = 64


def _aligned(raw: np.ndarray, nbytes: int) -> np.ndarray:
    """The first ``nbytes`` of ``raw`` from its first aligned byte (a view whose base is raw)."""
    skip = -raw.ctypes.data % ALIGN_BYTES
    return raw[skip:skip + nbytes]


class BufferPool:
    """Reusable uint8 backing arrays; :meth:`empty` returns typed views of free ones."""

    def __init__(self, max_bytes: int = DEFAULT_POOL_BYTES) -> None:
        self._lock = threading.Lock()
        self._buffers: list[np.ndarray] = []
        self.max_bytes = max_bytes
        # References a backing array has when only the pool holds it, as counted by _refs
        # (calibrated rather than assumed: the count differs between Python versions).
        self._buffers.append(np.empty(1, np.uint8))  # no other reference to it
        self._free_refs = self._refs(0)
        self._buffers.clear()

    def _refs(self, i: int) -> int:
        return sys.getrefcount(self._buffers[i])

    @property
    def nbytes(self) -> int:
        """Bytes held by the pool (free or in use)."""
        return sum(b.nbytes for b in self._buffers)

    def empty(self, shape: tuple[int, ...], dtype: np.dtype | type) -> np.ndarray:
        """An uninitialized C-contiguous array, from a free pooled buffer when one fits."""
        dt = np.dtype(dtype)
        nbytes = int(np.prod(shape)) * dt.itemsize
        if nbytes == 0 or nbytes > self.max_bytes:
            return np.empty(shape, dt)
        with self._lock:
            # backing arrays are ALIGN_BYTES longer than they hold, so that views of them
            # can start aligned; the views' base is the backing array itself (refcounted)
            want = nbytes + ALIGN_BYTES
            best = -1
            for i in range(len(self._buffers)):
                size = self._buffers[i].nbytes
                fits = size >= want and (best < 0 or size < self._buffers[best].nbytes)
                if fits and self._refs(i) <= self._free_refs:
                    best = i
            if best >= 0:
                backing = self._buffers[best]
            else:
                backing = np.empty(want, np.uint8)
                self._make_room(want)
                if self.nbytes + want <= self.max_bytes:
                    self._buffers.append(backing)
            return _aligned(backing, nbytes).view(dt).reshape(shape)

    def _make_room(self, nbytes: int) -> None:
        """Drop free buffers, smallest first, until ``nbytes`` more fit under the bound."""
        while self.nbytes + nbytes > self.max_bytes:
            free = [i for i in range(len(self._buffers)) if self._refs(i) <= self._free_refs]
            if not free:
                return
            del self._buffers[min(free, key=lambda i: self._buffers[i].nbytes)]

    def clear(self) -> None:
        """Forget every buffer (those still in use stay valid: their views keep them alive)."""
        with self._lock:
            self._buffers.clear()


POOL = BufferPool()


def set_pool_limit(max_bytes: int) -> None:
    """Bound the bytes the output/scratch pool keeps mapped; 0 disables pooling."""
    if max_bytes < 0:
        raise InvalidArgumentError(f"max_bytes must be >= 0, got {max_bytes}")
    with POOL._lock:
        POOL.max_bytes = max_bytes
    if max_bytes == 0:
        POOL.clear()



#: Freed heap memory a preprocessing worker keeps for its next images (glibc ``M_TRIM_THRESHOLD``;
#: allocations up to ``MMAP_THRESHOLD_BYTES`` come from the heap). With glibc's defaults, the
#: large blocks an image needs — the decoded photo, the resize's intermediate and result, Pillow
#: allocates them afresh per image — are mapped and unmapped per image, so every image's pixels
#: are first-touch memory and page faults (dear in a VM) land in the decode and resize stages.
#: Measured on the 2-core KVM dev machine (docs/mm_preproc.md): with the real pool, one worker,
#: one image at a time (``benchmarks/preproc_retain_memory.py``), a 4000×3000 JPEG's resize
#: 8.8 → 3.9 ms (2.2×) and its decode 23.5 → 21.0 ms, the worker's RSS 64 → 86 MiB; in the served
#: default server at 1 req/s, 12 MP resize 14.8 → 5.7 ms and decode 30.3 → 26.5 ms (medians).
RETAIN_FREED_BYTES = 256 << 20
MMAP_THRESHOLD_BYTES = 32 << 20  # glibc's largest; a bigger image is mapped and returned


def retain_freed_memory(trim_threshold_bytes: int = RETAIN_FREED_BYTES,
                        mmap_threshold_bytes: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Tell glibc's malloc to keep up to ``trim_threshold_bytes`` of freed heap and to serve
    blocks below ``mmap_threshold_bytes`` from the heap, so the next image reuses mapped pages.
    Process-wide; for a process that owns its allocator (a worker). False where the C library
    is not glibc (nothing changed)."""
    if trim_threshold_bytes < 0 or mmap_threshold_bytes < 0:
        raise InvalidArgumentError("thresholds must be >= 0")
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3  # glibc's malloc.h
    return bool(mallopt(m_mmap_threshold, mmap_threshold_bytes)) and \
        bool(mallopt(m_trim_threshold, trim_threshold_bytes))
