"""Named shared-memory segments for the frontend ↔ worker hand-off, with one owner: the frontend.

Image bytes travel to a worker and resized pixels travel back in POSIX shared memory
(``/dev/shm/edgeserve_<server pid>_<job>_{in,out}``); the pipes carry only small messages that
name the segments. The rules that make leaks impossible:

* Names are deterministic per job, so the frontend can always find a job's segments.
* Only the frontend unlinks, and it does so exactly when the job ends — a result, an error, a
  worker's death or the request's cancellation — by unlinking both names, whichever exist.
* The frontend maps a returned segment and unlinks its name at once: ``/dev/shm`` forgets it
  immediately while the mapping lives on until the last array that views it is garbage-collected.
* At shutdown the frontend sweeps every ``edgeserve_<its pid>_*`` name that is still there, and at
  start-up every ``edgeserve_<pid>_*`` of a server process that no longer exists.

These are the same objects ``multiprocessing.shared_memory`` makes (``shm_open`` is a file in
``/dev/shm`` on Linux); they are handled as files here because Python 3.11's ``SharedMemory``
registers every attach with the resource tracker, which then warns about, and unlinks, segments
another process already owns.
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import numpy as np

SHM_DIR = Path("/dev/shm")
PREFIX = "edgeserve_"


def segment_names(server_pid: int, job_id: int) -> tuple[str, str]:
    """The (input, output) segment names of one job."""
    base = f"{PREFIX}{server_pid}_{job_id}"
    return f"{base}_in", f"{base}_out"


# Populate page tables at map time: one system call instead of a page fault per 4 kB page.
_FLAGS = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)


def create(name: str, size: int) -> mmap.mmap:
    """Create a new segment of ``size`` bytes and map it read-write (fails if it exists)."""
    fd = os.open(SHM_DIR / name, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    try:
        os.ftruncate(fd, max(size, 1))
        return mmap.mmap(fd, max(size, 1), flags=_FLAGS)
    finally:
        os.close(fd)


def attach(name: str, writable: bool = False) -> mmap.mmap:
    """Map an existing segment."""
    fd = os.open(SHM_DIR / name, os.O_RDWR if writable else os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
        return mmap.mmap(fd, size, flags=_FLAGS, prot=prot)
    finally:
        os.close(fd)


def unlink(name: str) -> bool:
    """Remove a segment's name; True if it existed. Mappings stay valid until unmapped."""
    try:
        os.unlink(SHM_DIR / name)
    except FileNotFoundError:
        return False
    return True


def take_array(name: str, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Map a worker's output segment as an array and unlink its name immediately.

    The array keeps the mapping alive; nothing else needs closing. It is writable (torch warns
    about read-only arrays); nobody else maps the segment any more, so writes harm no one.
    """
    m = attach(name, writable=True)
    unlink(name)
    count = int(np.prod(shape))
    return np.frombuffer(m, dtype=np.dtype(dtype), count=count).reshape(shape)


def sweep(server_pid: int) -> list[str]:
    """Unlink every segment of this server that is still there; returns their names."""
    pattern = f"{PREFIX}{server_pid}_*"
    removed = []
    for p in SHM_DIR.glob(pattern):
        if unlink(p.name):
            removed.append(p.name)
    return removed


def sweep_stale() -> list[str]:
    """Unlink segments left by servers that no longer run (e.g. a frontend killed by SIGKILL)."""
    removed = []
    for p in SHM_DIR.glob(f"{PREFIX}*_*"):
        pid_text = p.name[len(PREFIX):].split("_", 1)[0]
        if not pid_text.isdigit() or _alive(int(pid_text)):
            continue
        if unlink(p.name):
            removed.append(p.name)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
