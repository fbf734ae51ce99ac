"""Drive a server through a designed calibration schedule (:mod:`edgeserve.bench.calibration_schedule`).

Each phase runs until its time is up: ``concurrency`` text requests kept in flight (each answer
sends the next; a decode wave sends them together, and the next wave after the last answer),
beside open-loop image requests at the phase's rate (Poisson arrivals,
:func:`edgeserve.bench.arrivals.gaps_s`); the fresh-shape phase sends one request per shape, alone,
each after an idle gap. Requests go through the benchmark client (:func:`send_chat`); image
bodies are built before the run (a 12 MP JPEG takes a while to encode), text ones as they go.

Started without ``--url``, ``edgeserve calibrate record`` runs the default server itself with
``--trace``, stops it afterwards and writes the schedule into that trace's header.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import numpy as np

from edgeserve.bench.arrivals import gaps_s
from edgeserve.bench.calibration_schedule import Phase, PhaseKind, Schedule
from edgeserve.bench.client import RequestResult, send_chat
from edgeserve.bench.runner import chat_url
from edgeserve.bench.workload import WorkloadConfig, messages_body, prepare_requests
from edgeserve.records import TraceHeader

WORDS = ("the", "camera", "on", "the", "roof", "records", "a", "street", "with", "cars",
         "bicycles", "trees", "and", "people", "walking", "past", "a", "shop", "window", "under",
         "a", "grey", "sky", "while", "a", "bus", "waits", "at", "the", "corner")


@dataclass(slots=True)
class PhaseResult:
    name: str
    ok: int = 0
    failed: int = 0
    wall_s: float = 0.0
    errors: list[str] = field(default_factory=list)


def prompt(words: int, number: int) -> str:
    """A text prompt of ``words`` words, different for every ``number`` (no prefix-cache hits)."""
    body = " ".join(WORDS[(number + i) % len(WORDS)] for i in range(words))
    return f"Request {number}: summarise this. {body}"


def _lengths(spec: str) -> tuple[int, int]:
    lo, _, hi = spec.partition("-")
    return int(lo), int(hi or lo)


class Recorder:
    """Sends one schedule's requests to ``url`` (a server root, model ``model``)."""

    def __init__(self, url: str, model: str, schedule: Schedule,
                 log: Callable[[str], None] = print) -> None:
        self.url, self.model, self.schedule, self.log = chat_url(url), model, schedule, log
        self.rng = np.random.default_rng(schedule.config.seed)
        self.number = 0
        self.images: dict[str, list[bytes]] = {}

    def prepare(self) -> None:
        """Build every image body the schedule sends."""
        for i, p in enumerate(self.schedule.phases):
            if not p.sizes:
                continue
            if p.kind is PhaseKind.FRESH_SHAPES:
                self.images[p.name] = [self._image_bodies(p, s, 1, 1000 * i + k)[0]
                                       for k, s in enumerate(p.sizes)]
            else:
                n = math.ceil(p.image_rate_rps * p.duration_s) + 2
                self.images[p.name] = self._image_bodies(p, ",".join(p.sizes), n, 1000 * i)

    def _image_bodies(self, p: Phase, sizes: str, n: int, first: int) -> list[bytes]:
        wl = WorkloadConfig(model=self.model, sizes=sizes, output_len=p.output_len,
                            seed=self.schedule.config.seed + first)
        return [r.body for r in prepare_requests(wl, n, self.model, first_number=first)]

    def _text_body(self, p: Phase) -> bytes:
        lo, hi = _lengths(p.output_len)
        self.number += 1
        words = p.prompt_words[self.number % len(p.prompt_words)]
        return messages_body(self.model, [{"role": "user", "content": prompt(words, self.number)}],
                             int(self.rng.integers(lo, hi + 1)), True)

    async def _send(self, session: aiohttp.ClientSession, body: bytes, res: PhaseResult) -> None:
        r = await send_chat(session, self.url, body, RequestResult(index=self.number))
        if r.ok:
            res.ok += 1
        else:
            res.failed += 1
            if len(res.errors) < 3:
                res.errors.append(r.error)

    async def run_phase(self, session: aiohttp.ClientSession, p: Phase) -> PhaseResult:
        res = PhaseResult(p.name)
        if p.idle_before_s:
            await asyncio.sleep(p.idle_before_s)
        t0 = time.monotonic()
        deadline = t0 + p.duration_s
        if p.kind is PhaseKind.FRESH_SHAPES:
            gap = self.schedule.config.idle_gap_s
            for body in [*self.images.get(p.name, []), self._text_body(p)]:
                if time.monotonic() > t0 + 2 * p.duration_s:  # bounded: skip the rest
                    break
                await self._send(session, body, res)
                await asyncio.sleep(gap)
            res.wall_s = time.monotonic() - t0
            return res

        async def closed_loop() -> None:
            while time.monotonic() < deadline:
                await self._send(session, self._text_body(p), res)

        async def open_loop() -> None:
            bodies = self.images.get(p.name, [])
            offsets = np.cumsum(gaps_s(p.image_rate_rps, 1.0, len(bodies), self.rng))
            sends = []
            for body, off in zip(bodies, offsets, strict=True):
                delay = t0 + float(off) - time.monotonic()
                if t0 + float(off) >= deadline:
                    break
                if delay > 0:
                    await asyncio.sleep(delay)
                sends.append(asyncio.create_task(self._send(session, body, res)))
            await asyncio.gather(*sends)

        async def waves() -> None:
            while time.monotonic() < deadline:
                await asyncio.gather(*(self._send(session, self._text_body(p), res)
                                       for _ in range(p.concurrency)))

        tasks = ([waves()] if p.kind is PhaseKind.WAVES
                 else [closed_loop() for _ in range(p.concurrency)])
        if p.image_rate_rps and p.sizes:
            tasks.append(open_loop())
        await asyncio.gather(*tasks)
        res.wall_s = time.monotonic() - t0
        return res

    async def run(self, request_timeout_s: float = 300.0) -> list[PhaseResult]:
        out = []
        timeout = aiohttp.ClientTimeout(total=request_timeout_s)
        connector = aiohttp.TCPConnector(limit=0, enable_cleanup_closed=True)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            start = time.monotonic()
            for i, p in enumerate(self.schedule.phases, start=1):
                self.log(f"phase {i}/{len(self.schedule.phases)} {p.name}: {p.purpose} "
                         f"({p.duration_s:.0f} s)")
                r = await self.run_phase(session, p)
                out.append(r)
                self.log(f"  {r.ok} answered, {r.failed} failed in {r.wall_s:.1f} s "
                         f"({time.monotonic() - start:.0f} s of about "
                         f"{self.schedule.planned_s:.0f} s)"
                         + (f"; first error: {r.errors[0]}" if r.errors else ""))
        return out


def annotate_header(trace: Path, schedule: dict[str, Any], results: list[PhaseResult]) -> None:
    """Write the schedule (and what each phase got answered) into ``trace``'s header line."""
    lines = trace.read_bytes().split(b"\n", 1)
    header = msgspec.json.decode(lines[0], type=TraceHeader)
    header.meta["calibration_schedule"] = {
        **schedule, "results": [{"phase": r.name, "ok": r.ok, "failed": r.failed,
                                 "wall_s": round(r.wall_s, 2)} for r in results]}
    head = msgspec.json.encode(header)
    trace.write_bytes(head + b"\n" + (lines[1] if len(lines) > 1 else b""))
