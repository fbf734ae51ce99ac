"""Split one recorded trace into its runs: the stretches between idle gaps.

A rate sweep (``benchmarks/gpu_compare.py``, ``edgeserve bench --rates``) drives one server
through several loads one after the other, draining between them, and its trace holds them all.
Each load is a run of its own for the simulator's validation: ``calibrate validate`` on the
pieces compares every load apart instead of one percentile over a mix of loads.

A gap is a time of at least ``idle_s`` with no request in flight (after the last one in flight
finished and before the next arrived). Requests go to the run they arrived in; engine steps,
resource samples and the other timed items to the run whose span holds them (items in a gap go to
none). Every piece starts with the trace's headers. Runs with fewer than ``min_requests``
requests (a warm-up's few) are left out. Two passes over the file; nothing is held but the
requests' spans.
"""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass
from pathlib import Path

from edgeserve.records import RequestRecord, TraceHeader, TraceItem, encode, read_trace


@dataclass(frozen=True, slots=True)
class RunSpan:
    """One run of a trace: from its first arrival to its last request's end, in trace time."""

    start_s: float
    end_s: float
    requests: int


def _end_s(r: RequestRecord) -> float:
    for t in (r.finished_s, r.last_token_s, r.first_token_s):
        if t is not None:
            return t
    return r.arrived_s


def find_runs(path: str | os.PathLike[str], idle_s: float) -> list[RunSpan]:
    """The trace's runs, in time order: request spans merged where less than ``idle_s`` apart."""
    if idle_s <= 0:
        raise ValueError(f"the idle gap must be > 0 s, got {idle_s}")
    spans = sorted((r.arrived_s, _end_s(r)) for r in read_trace(path)
                   if isinstance(r, RequestRecord))
    runs: list[RunSpan] = []
    start = end = 0.0
    n = 0
    for a, b in spans:
        if n and a - end >= idle_s:
            runs.append(RunSpan(start, end, n))
            n = 0
        if not n:
            start, end = a, b
        end = max(end, b)
        n += 1
    if n:
        runs.append(RunSpan(start, end, n))
    return runs


def _time_s(item: TraceItem) -> float | None:
    if isinstance(item, RequestRecord):
        return item.arrived_s
    return getattr(item, "t_s", None)


def split_trace(path: str | os.PathLike[str], out_dir: str | os.PathLike[str], *,
                idle_s: float = 2.0, min_requests: int = 20) -> list[tuple[Path, RunSpan]]:
    """Write each run of ``path`` with at least ``min_requests`` requests to
    ``out_dir/STEM.runK.jsonl`` (K from 1, in time order); returns the files and their runs."""
    if min_requests < 1:
        raise ValueError(f"min_requests must be >= 1, got {min_requests}")
    runs = [r for r in find_runs(path, idle_s) if r.requests >= min_requests]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stem = Path(path).name.removesuffix(".jsonl")
    files = [out / f"{stem}.run{k}.jsonl" for k in range(1, len(runs) + 1)]
    handles = [open(f, "wb", buffering=1 << 20) for f in files]  # noqa: SIM115
    try:
        starts = [r.start_s for r in runs]
        for item in read_trace(path):
            if isinstance(item, TraceHeader):
                for h in handles:
                    h.write(encode(item))
                continue
            t = _time_s(item)
            if t is None:
                continue
            i = bisect.bisect_right(starts, t) - 1  # the last run starting at or before t
            if i >= 0 and t <= runs[i].end_s:
                handles[i].write(encode(item))
    finally:
        for h in handles:
            h.close()
    return list(zip(files, runs, strict=True))

