"""Deterministic synthetic traces: fixtures for tests and snapshots, load for the CPU benchmark.

Not a model of anything (that is ``sim``'s job): a seeded stream of plausible request records
through ``workers`` CPU workers and one batching engine, with a phase of large images every
``heavy_every_s`` seconds so that the engine visibly waits on the CPU, plus resource samples every
second that agree with the records.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from edgeserve.records import (
    DeviceSample,
    Outcome,
    RequestRecord,
    ResourceSample,
    TraceHeader,
    TraceWriter,
)
from tui.intervals import measure, subtract, union

TraceLine = RequestRecord | ResourceSample | DeviceSample


@dataclass(slots=True, frozen=True)
class SyntheticConfig:
    rate_per_s: float = 20.0
    duration_s: float = 60.0
    workers: int = 4
    output_tokens: int = 8
    itl_s: float = 0.004
    prefill_s: float = 0.015
    heavy_scale: float = 15.0  # CPU work of a large image, relative to a normal one
    heavy_every_s: float = 20.0  # a burst of large images starts every this many seconds
    heavy_for_s: float = 5.0
    fail_every: int = 97  # every n-th request fails
    devices: int = 0  # also emit this many simulated devices' samples
    seed: int = 7


def requests(cfg: SyntheticConfig) -> list[RequestRecord]:
    """The records, sorted by finish time."""
    rng = random.Random(cfg.seed)
    free = [(0.0, w) for w in range(cfg.workers)]
    heapq.heapify(free)
    out = []
    t = 0.0
    n = 0
    while True:
        t += rng.expovariate(cfg.rate_per_s)
        if t >= cfg.duration_s:
            break
        n += 1
        heavy = (t % cfg.heavy_every_s) < cfg.heavy_for_s
        scale = cfg.heavy_scale if heavy else 1.0
        w_free, w = heapq.heappop(free)
        start = max(t, w_free)
        dec = start + scale * rng.uniform(0.01, 0.03)
        rsz = dec + scale * rng.uniform(0.002, 0.008)
        nrm = rsz + rng.uniform(0.002, 0.006)
        heapq.heappush(free, (nrm, w))
        eq = nrm + 0.0005
        rid = f"req-{n:06d}"
        if cfg.fail_every and n % cfg.fail_every == 0:
            out.append(
                RequestRecord(
                    id=rid,
                    outcome=Outcome.FAILED,
                    error="engine error: out of KV blocks",
                    worker=w,
                    arrived_s=t,
                    preproc_queued_s=t,
                    preproc_start_s=start,
                    decode_end_s=dec,
                    resize_end_s=rsz,
                    normalize_end_s=nrm,
                    preproc_end_s=nrm,
                    engine_queued_s=eq,
                    finished_s=eq + 0.01,
                    image_bytes=int(scale * 200_000),
                    num_images=1,
                )
            )
            continue
        ft = eq + cfg.prefill_s * rng.uniform(0.8, 1.5)
        tokens = [ft]
        for _ in range(cfg.output_tokens - 1):
            tokens.append(tokens[-1] + cfg.itl_s * rng.uniform(0.8, 1.3))
        out.append(
            RequestRecord(
                id=rid,
                worker=w,
                device="host",
                placement="local",
                image_bytes=int(scale * 200_000),
                num_images=1,
                source_width=int(1024 * scale**0.5),
                source_height=int(768 * scale**0.5),
                target_width=812,
                target_height=616,
                image_tokens=638,
                prompt_tokens=660,
                output_tokens=cfg.output_tokens,
                max_tokens=cfg.output_tokens,
                arrived_s=t,
                preproc_queued_s=t,
                preproc_start_s=start,
                decode_end_s=dec,
                resize_end_s=rsz,
                normalize_end_s=nrm,
                preproc_end_s=nrm,
                engine_queued_s=eq,
                first_token_s=ft,
                token_times_s=tokens,
                last_token_s=tokens[-1],
                finished_s=tokens[-1] + 0.001,
            )
        )
    out.sort(key=lambda r: r.finished_s or r.arrived_s)
    return out


def _overlap(a: float, b: float, lo: float, hi: float) -> float:
    return max(0.0, min(b, hi) - max(a, lo))


def samples(cfg: SyntheticConfig, recs: list[RequestRecord]) -> list[ResourceSample]:
    """One resource sample per second that agrees with ``recs``."""
    out = []
    for k in range(1, int(cfg.duration_s) + 1):
        lo, hi, t = k - 1.0, float(k), float(k)
        busy = [0.0] * cfg.workers
        stage = [""] * cfg.workers
        q = run = ew = er = 0
        eng: list[tuple[float, float]] = []
        cpu: list[tuple[float, float]] = []
        for r in recs:
            if r.arrived_s > hi or (r.finished_s or 0) < lo:
                continue
            assert r.preproc_start_s is not None and r.normalize_end_s is not None
            w = r.worker or 0
            busy[w] += _overlap(r.preproc_start_s, r.normalize_end_s, lo, hi)
            if r.preproc_start_s <= t < r.normalize_end_s:
                run += 1
                stage[w] = "decode" if t < (r.decode_end_s or 0) else "resize/normalize"
            if r.arrived_s <= t < r.preproc_start_s:
                q += 1
            eq = r.engine_queued_s or r.normalize_end_s
            end = r.last_token_s or r.finished_s or eq
            if eq <= t < (r.first_token_s or end):
                ew += 1
            elif r.first_token_s is not None and r.first_token_s <= t < end:
                er += 1
            eng.append((max(lo, eq), min(hi, end)))
            cpu.append((max(lo, r.arrived_s), min(hi, r.normalize_end_s)))

        e = union([iv for iv in eng if iv[1] > iv[0]])
        c = union([iv for iv in cpu if iv[1] > iv[0]])
        out.append(
            ResourceSample(
                t_s=t,
                preproc_queue=q,
                preproc_running=run,
                engine_waiting=ew,
                engine_running=er,
                engine_busy=min(1.0, measure(e)),
                stall_s=measure(subtract(c, e)),
                worker_busy=[min(1.0, b) for b in busy],
                worker_stage=stage,
                process_cpu={
                    "frontend": 12.0,
                    "engine": 80.0 * min(1.0, measure(e)),
                    **{f"worker{i}": 100 * min(1.0, b) for i, b in enumerate(busy)},
                },
                process_rss_bytes={"frontend": 300 << 20, "engine": 1200 << 20},
                system_cpu_percent=min(100.0, 20 + 60 * sum(busy) / cfg.workers),
                system_mem_percent=41.5,
            )
        )
    return out


def devices(cfg: SyntheticConfig) -> list[DeviceSample]:
    """Devices heating up under load and throttling past 70 °C and 85 °C."""
    out = []
    for d in range(cfg.devices):
        temp = 30.0
        for k in range(1, int(cfg.duration_s) + 1):
            temp += (0.9 if (k % 40) < 25 else -1.2) * (1 + 0.3 * d)
            level = 2 if temp >= 85 else 1 if temp >= 70 else 0
            out.append(
                DeviceSample(
                    t_s=float(k),
                    device=f"phone-{d}",
                    temp_c=round(temp, 2),
                    clock_level=level,
                    clock_scale=(1.0, 1.4, 2.0)[level],
                    power_w=4.0 - level,
                    battery_wh=15 - k * 0.01,
                    queue=k % 5,
                    running=1,
                    offload_share=min(1.0, 0.1 * level + 0.01 * d),
                    throttled=level > 0,
                )
            )
    return out


def items(cfg: SyntheticConfig) -> Iterator[TraceLine]:
    """Every line of the trace in event-time order (samples at whole seconds)."""
    recs = requests(cfg)
    timed: list[tuple[float, int, TraceLine]] = []
    for i, r in enumerate(recs):
        timed.append((r.finished_s or r.arrived_s, i, r))
    base = len(timed)
    for i, s in enumerate(samples(cfg, recs)):
        timed.append((s.t_s, base + i, s))
    base = len(timed)
    for i, d in enumerate(devices(cfg)):
        timed.append((d.t_s, base + i, d))
    timed.sort(key=lambda x: (x[0], x[1]))
    for _, _, it in timed:
        yield it


def write_trace(path: str | Path, cfg: SyntheticConfig) -> Path:
    """Write a synthetic trace file and return its path."""
    path = Path(path)
    with TraceWriter(path, TraceHeader(producer="tui.synthetic", meta={"seed": cfg.seed})) as w:
        for it in items(cfg):
            w.write(it)
    return path
