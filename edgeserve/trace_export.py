"""Export a trace (JSON Lines of records) as Chrome-trace JSON for Perfetto / chrome://tracing.

The picture it draws, one row per resource of the server::

    worker 0   ──[decode][resize][n]──────[decode][resize][n]──
    worker 1   ────────[decode][resize][n]─────────────────────
    engine     ████──████████────────────────████████████████──   (vLLM steps, from the stat logger)
    stall      ──────────────────████████────                     (engine idle, work on the CPU)

plus one async track per request with its stages (queue, decode, …, generate) and counter tracks
for queue depths, engine busy fraction and per-process CPU. Open the file at
https://ui.perfetto.dev or in chrome://tracing. Times are microseconds from the first record.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import Any

from edgeserve.records import (
    RequestRecord,
    ResourceSample,
    Stage,
    TraceHeader,
    TraceItem,
    read_trace,
    stage_spans,
)

PID = 1
TID_ENGINE = 1000
TID_STALL = 1001
TID_INLINE = 999  # inline mode: preprocessing on the frontend's event loop
WORKER_STAGES = (Stage.DECODE, Stage.RESIZE, Stage.NORMALIZE, Stage.ENCODE)


class _Builder:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.t0: float | None = None
        self.threads: dict[int, str] = {}

    def us(self, t: float) -> float:
        assert self.t0 is not None
        return round((t - self.t0) * 1e6, 3)

    def thread(self, tid: int, name: str) -> None:
        self.threads.setdefault(tid, name)

    def slice(self, tid: int, name: str, a: float, b: float, args: dict[str, Any] | None = None,
              cat: str = "cpu") -> None:
        ev = {"ph": "X", "pid": PID, "tid": tid, "name": name, "cat": cat, "ts": self.us(a),
              "dur": max(0.0, round((b - a) * 1e6, 3))}
        if args:
            ev["args"] = args
        self.events.append(ev)

    def counter(self, name: str, t: float, values: dict[str, float]) -> None:
        self.events.append({"ph": "C", "pid": PID, "name": name, "ts": self.us(t), "args": values})

    def request(self, rec: RequestRecord) -> None:
        spans = stage_spans(rec)
        end = rec.finished_s if rec.finished_s is not None else rec.arrived_s
        args = {"outcome": rec.outcome.value, "prompt_tokens": rec.prompt_tokens,
                "output_tokens": rec.output_tokens, "image_tokens": rec.image_tokens}
        if rec.error:
            args["error"] = rec.error
        rid = rec.id
        self.events.append({"ph": "b", "pid": PID, "cat": "request", "id": rid, "name": rid,
                            "ts": self.us(rec.arrived_s), "args": args})
        for stage, a, b in spans:
            self.events.append({"ph": "b", "pid": PID, "cat": "request", "id": rid,
                                "name": stage.value, "ts": self.us(a)})
            self.events.append({"ph": "e", "pid": PID, "cat": "request", "id": rid,
                                "name": stage.value, "ts": self.us(b)})
            if stage in WORKER_STAGES:
                tid = rec.worker if rec.worker is not None else TID_INLINE
                self.thread(tid, f"worker {tid}" if tid != TID_INLINE else "frontend (inline)")
                self.slice(tid, stage.value, a, b, {"request": rid})
        self.events.append({"ph": "e", "pid": PID, "cat": "request", "id": rid, "name": rid,
                            "ts": self.us(max(end, rec.arrived_s))})

    def sample(self, s: ResourceSample) -> None:
        for a, b in s.engine_busy_spans:
            self.slice(TID_ENGINE, "step", a, b, cat="engine")
        for a, b in s.stall_spans:
            self.slice(TID_STALL, "stall", a, b, cat="stall")
        self.counter("queues", s.t_s, {"preproc_queue": s.preproc_queue,
                                       "preproc_running": s.preproc_running,
                                       "engine_waiting": s.engine_waiting,
                                       "engine_running": s.engine_running})
        self.counter("engine busy fraction", s.t_s, {"busy": s.engine_busy})
        self.counter("stall seconds", s.t_s, {"stall_s": s.stall_s})
        if s.process_cpu:
            self.counter("process CPU %", s.t_s, dict(s.process_cpu))


def _first_time(item: TraceItem) -> float | None:
    if isinstance(item, RequestRecord):
        return item.arrived_s
    if isinstance(item, ResourceSample):
        starts = [a for a, _ in item.engine_busy_spans] + [a for a, _ in item.stall_spans]
        return min([item.t_s, *starts])
    return None


def to_chrome_trace(items: Iterable[TraceItem]) -> dict[str, Any]:
    """Build the Chrome-trace JSON object for a sequence of trace items."""
    items = list(items)
    b = _Builder()
    times = [t for t in (_first_time(x) for x in items) if t is not None]
    b.t0 = min(times) if times else 0.0
    header = next((x for x in items if isinstance(x, TraceHeader)), None)
    b.thread(TID_ENGINE, "engine (vLLM steps)")
    b.thread(TID_STALL, "stall (engine idle, work on CPU)")
    for x in items:
        if isinstance(x, RequestRecord):
            b.request(x)
        elif isinstance(x, ResourceSample):
            b.sample(x)
    name = header.producer if header else "edgeserve"
    meta: list[dict[str, Any]] = [
        {"ph": "M", "pid": PID, "name": "process_name", "args": {"name": name}},
    ]
    for tid, tname in sorted(b.threads.items()):
        meta.append({"ph": "M", "pid": PID, "tid": tid, "name": "thread_name",
                     "args": {"name": tname}})
        meta.append({"ph": "M", "pid": PID, "tid": tid, "name": "thread_sort_index",
                     "args": {"sort_index": tid}})
    other: dict[str, Any] = {"producer": name}
    if header is not None:
        other.update({"clock": header.clock, "wall_offset_s": header.wall_offset_s + b.t0,
                      **{k: str(v) for k, v in header.meta.items()}})
    return {"traceEvents": meta + b.events, "displayTimeUnit": "ms", "otherData": other}


def export_perfetto(trace_path: str | os.PathLike[str], out_path: str | os.PathLike[str]) -> int:
    """Read a trace file, write Chrome-trace JSON; returns the number of events written."""
    doc = to_chrome_trace(read_trace(trace_path))
    with open(out_path, "w") as f:
        json.dump(doc, f)
    return len(doc["traceEvents"])
