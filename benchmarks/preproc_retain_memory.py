"""What keeping freed heap memory buys a preprocessing worker (``retain_freed_bytes``).

Pillow allocates each image's pixels afresh, and glibc's malloc maps large blocks and unmaps them
when freed; a worker that decodes and resizes one photo after another then writes every image
into first-touch memory, and page faults (costly in a VM) land in the decode and resize stages.
``edgeserve serve``'s workers tell malloc to keep freed heap (``mm_preproc.retain_freed_memory``,
``PreprocParams.retain_freed_bytes``). This runs the real pool — one worker process,
shared-memory hand-off, the server's preprocessing parameters — on the same image stream with
``retain_freed_bytes=0`` (glibc's defaults) and with the default, alternating per round (A B A B
…), images sent one at a time as a lightly loaded server sees them. It reports, per size, the median decode and resize times from the workers' own
timestamps, the ratio without / with per round (median, min–max), and the worker's RSS after the
stream (the memory the cache holds).

    python benchmarks/preproc_retain_memory.py --rounds 3 --out results/preproc_retain_memory.json

Images are the fidelity benchmark's (``edgeserve.bench.workload``: synthetic photos, JPEG q90):
640×480, 1280×720, 1280×800 and 4000×3000, shuffled into one stream.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil

from edgeserve.bench.workload import ImageFactory, WorkloadConfig
from edgeserve.preproc_pool.messages import PreprocParams, SourceKind
from edgeserve.preproc_pool.pool import ImageInput, PreprocPool
from mm_preproc.buffers import RETAIN_FREED_BYTES

SIZES = ("640x480", "1280x720", "1280x800", "4000x3000")
MIB = RETAIN_FREED_BYTES >> 20


def make_stream(per_size: int, seed: int = 1) -> list[tuple[str, bytes]]:
    stream = []
    for size in SIZES:
        f = ImageFactory(WorkloadConfig(sizes=size, seed=seed))
        stream += [(size, f.make(i)[0]) for i in range(per_size)]
    random.Random(seed).shuffle(stream)
    return stream


async def one_round(retain: int, stream: list[tuple[str, bytes]]) -> dict[str, object]:
    params = PreprocParams(min_pixels=56 * 56, max_pixels=1280 * 28 * 28,
                           max_image_pixels=89_000_000, max_image_bytes=64 << 20,
                           retain_freed_bytes=retain)
    pool = PreprocPool(1, params, max_pending=4)
    await pool.start()
    try:
        times: dict[str, dict[str, list[float]]] = {s: {"decode": [], "resize": []} for s in SIZES}
        for size, data in stream:  # one at a time, as a lightly loaded server sends them
            r = (await pool.submit(ImageInput(SourceKind.SHM, data=data))).result
            times[size]["decode"].append(r.decode_end_s - r.start_s)
            times[size]["resize"].append(r.resize_end_s - r.decode_end_s)
        pid = pool.worker_pids()[0]
        rss = psutil.Process(pid).memory_info().rss if pid else 0
    finally:
        await pool.close()
    return {"retain_freed_bytes": retain, "rss_bytes": rss,
            "median_ms": {s: {k: statistics.median(v) * 1e3 for k, v in t.items()}
                          for s, t in times.items()}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--per-size", type=int, default=12, help="images of each size per round")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    stream = make_stream(args.per_size)
    print(f"load average {os.getloadavg()[0]:.2f}; {len(stream)} images per round "
          f"({args.per_size} of each of {', '.join(SIZES)}); retain_freed_bytes 0 vs {MIB} MiB, "
          f"{args.rounds} rounds alternating", flush=True)
    rounds = []
    for _ in range(args.rounds):
        pair = {b: asyncio.run(one_round(b, stream)) for b in (0, RETAIN_FREED_BYTES)}
        rounds.append(pair)
    print(f"{'size':>10s} {'stage':>7s} {'glibc default':>14s} {f'retain {MIB} MiB':>14s}"
          f"   ratio (median, min–max)")
    summary: dict[str, dict[str, object]] = {}
    for size in SIZES:
        for stage in ("decode", "resize"):
            a = [p[0]["median_ms"][size][stage] for p in rounds]  # type: ignore[index]
            b = [p[RETAIN_FREED_BYTES]["median_ms"][size][stage] for p in rounds]  # type: ignore[index]
            r = [x / y for x, y in zip(a, b, strict=True)]
            summary.setdefault(size, {})[stage] = {"off_ms": a, "on_ms": b, "ratio": r}
            print(f"{size:>10s} {stage:>7s} {statistics.median(a):14.2f} {statistics.median(b):14.2f}"
                  f"   {statistics.median(r):.2f} ({min(r):.2f}–{max(r):.2f})")
    for retain in (0, RETAIN_FREED_BYTES):
        rss = [float(p[retain]["rss_bytes"]) for p in rounds]  # type: ignore[arg-type]
        print(f"worker RSS after the stream, retain {retain >> 20} MiB: "
              f"{statistics.median(rss) / 2**20:.0f} MiB")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"sizes": SIZES, "retain_freed_bytes": RETAIN_FREED_BYTES,
                                        "rounds": [{str(k): v for k, v in p.items()}
                                                   for p in rounds],
                                        "summary": summary}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
