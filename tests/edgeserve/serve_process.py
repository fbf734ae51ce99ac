"""What the server tests check beside the package's :class:`~edgeserve.bench.server_process.ServerProcess`."""

from __future__ import annotations

from pathlib import Path


def my_segments(pid: int) -> list[str]:
    """The shared-memory segments a server with this pid still has in /dev/shm."""
    return sorted(p.name for p in Path("/dev/shm").glob(f"edgeserve_{pid}_*"))
