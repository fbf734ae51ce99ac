"""Continuous batching: exact timelines of prefill, decode and KV admission."""

from __future__ import annotations

from edgeserve.records import RequestRecord
from sim.core.batching import BatchEngine, StepModel
from sim.core.job import Job
from sim.core.loop import EventLoop


class Model(StepModel):
    """Prefill 1 s per request, decode step 0.1 s whatever the batch."""

    def prefill_s(self, job: Job) -> float:
        return 1.0

    def prefill_draw_s(self, mean_s: float) -> float:
        return mean_s

    def step_s(self, batch: int, context_tokens: int) -> float:
        return 0.1


def job(name: str, t: float, prompt: int, out: int) -> Job:
    return Job(RequestRecord(id=name, arrived_s=t), None, 0, 0, 0, prompt, out)


def run(jobs: list[Job], kv_tokens: int = 10_000, max_batch: int = 8) -> list[tuple]:
    loop = EventLoop()
    log: list[tuple] = []

    def done(j: Job) -> None:
        r = j.rec
        log.append((r.id, r.engine_queued_s, r.first_token_s, round(r.last_token_s, 9)))

    engine = BatchEngine(loop, "e", Model(), kv_tokens, max_batch, done)
    for j in jobs:
        loop.at(j.rec.arrived_s, lambda j: engine.submit(j), j)
    loop.run_until(100.0)
    return log


def test_prefill_pauses_decode_and_batched_requests_share_steps() -> None:
    # a: prefill 0→1, first token at 1. b arrives at 0.5, waits, prefills 1→2.
    # Then both decode together, 0.1 s per step: b needs 1 more token (2.1), a 2 more (2.2).
    log = run([job("a", 0.0, 10, 3), job("b", 0.5, 10, 2)])
    assert log == [("b", 0.5, 2.0, 2.1), ("a", 0.0, 1.0, 2.2)]


def test_a_request_waits_for_kv_space() -> None:
    # a reserves 10 + 5 tokens of a 20-token cache; b (10 + 5) cannot fit until a finishes at 1.4.
    log = run([job("a", 0.0, 10, 5), job("b", 0.0, 10, 5)], kv_tokens=20)
    assert log == [("a", 0.0, 1.0, 1.4), ("b", 0.0, 2.4, 2.8)]


def test_max_batch_limits_running_requests() -> None:
    log = run([job("a", 0.0, 1, 3), job("b", 0.0, 1, 3)], max_batch=1)
    assert log == [("a", 0.0, 1.0, 1.2), ("b", 0.0, 2.2, 2.4)]


def test_a_sequence_larger_than_the_cache_fails_with_a_reason() -> None:
    loop = EventLoop()
    failed: list[Job] = []
    engine = BatchEngine(loop, "small", Model(), 100, 4, failed.append)
    engine.submit(job("big", 0.0, 90, 20))
    assert failed[0].rec.outcome == "failed"
    assert "exceeds the KV cache (100 tokens)" in (failed[0].rec.error or "")
