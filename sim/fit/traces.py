"""What calibration reads from runtime traces: request records, engine steps, header facts."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgeserve.records import EngineStep, RequestRecord, TraceHeader, read_trace
from edgeserve.step_span import respan
from sim.fit.step_fit import with_image_arrivals


@dataclass(slots=True)
class TraceData:
    """What calibration reads from traces: request records, engine steps, header facts."""

    records: list[RequestRecord] = field(default_factory=list)
    steps: list[EngineStep] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)  # the last runtime header's meta
    runs: list[tuple[int, int]] = field(default_factory=list)  # each trace's [start, end) in steps
    record_runs: list[tuple[int, int]] = field(default_factory=list)  # … and in records

    def run(self, k: int) -> TraceData:
        """The ``k``-th trace alone."""
        (a, b), (c, d) = self.runs[k], self.record_runs[k]
        return TraceData(self.records[c:d], self.steps[a:b], self.meta, [(0, b - a)], [(0, d - c)])


def read_traces(paths: Iterable[str | Path]) -> TraceData:
    data = TraceData()
    for p in paths:
        first, first_record = len(data.steps), len(data.records)
        warm_until_s = float("-inf")  # a server's warm-up steps are not the traffic's
        for item in read_trace(p):
            if isinstance(item, RequestRecord):
                data.records.append(item)
            elif isinstance(item, EngineStep):
                if item.t_s > warm_until_s:
                    data.steps.append(item)
            elif isinstance(item, TraceHeader) and item.producer == "edgeserve serve":
                data.meta = dict(item.meta)
                warmup = data.meta.get("warmup")
                if isinstance(warmup, dict):
                    warm_until_s = float(warmup["end_t_s"])
        if dispatch_timed(data.meta):
            data.steps[first:] = respan(data.steps[first:])
        # each step's image requests handed to the engine while it ran (a step-model feature)
        data.steps[first:] = with_image_arrivals(
            data.steps[first:], data.records[first_record:],
            [(0, len(data.steps) - first)], [(0, len(data.records) - first_record)])
        data.runs.append((first, len(data.steps)))
        data.record_runs.append((first_record, len(data.records)))
    return data


def dispatch_timed(meta: dict[str, Any]) -> bool:
    """Whether a runtime trace's steps carry vLLM's dispatch times instead of their spans: a GPU
    engine (async scheduling) recorded before the header named its ``step_timing``
    (:mod:`edgeserve.step_span`)."""
    engine = meta.get("engine")
    return (isinstance(engine, dict) and engine.get("platform") == "gpu"
            and "step_timing" not in engine)


def read_records(paths: Iterable[str | Path]) -> Iterable[RequestRecord]:
    for p in paths:
        for item in read_trace(p):
            if isinstance(item, RequestRecord):
                yield item


def image_sizes(records: Iterable[RequestRecord]) -> tuple[int, ...]:
    """The image-token counts of the trace's one-image requests (distinct, sorted)."""
    return tuple(sorted({r.image_tokens for r in records if r.num_images == 1 and r.image_tokens}))


def worker_encoder(meta: dict[str, Any]) -> bool:
    """Whether a runtime trace's header says the vision encoder ran in the preprocessing workers
    (``edgeserve serve --encoder onnx``: ``meta.encoder.kind`` is ``onnx``) and the engine was
    handed image embeddings."""
    enc = meta.get("encoder")
    return isinstance(enc, dict) and str(enc.get("kind", "none")) not in ("", "none")
