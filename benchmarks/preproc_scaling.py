"""How preprocessing throughput scales with worker processes (the runtime's pool design).

One Python process preprocesses images one after another: decode, resize, normalize, patchify are
sequential per image and hold the GIL for much of the time. ``edgeserve serve`` therefore runs a
pool of worker *processes*. This benchmark measures images/s of ``mm_preproc.preprocess`` with
1, 2, 4, … worker processes (each pinned to one thread of OpenCV/OpenMP) against the same work in
threads of one process, on the same machine in the same run, and prints the speed-up over one
worker. Inputs: real photographs (scikit-image samples when installed, else a synthetic photo-like
image) upscaled to 12 MP JPEG q90, prepared before any timing.

    python benchmarks/preproc_scaling.py --workers 1 2 4 8 16 --out results/preproc_scaling.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

# The photo set and the one-thread worker initializer are the pool benchmark's (same directory).
from preproc_pool_scaling import _init_worker, make_images

MAX_PIXELS = 1280 * 28 * 28


def _work(data: bytes) -> int:
    import mm_preproc

    r = mm_preproc.preprocess(data, max_pixels=MAX_PIXELS)
    return int(r.pixel_values.shape[0])


def run_pool(kind: str, workers: int, images: list[bytes], rounds: int) -> float:
    ex: Executor = (ProcessPoolExecutor(max_workers=workers, initializer=_init_worker)
                    if kind == "process" else ThreadPoolExecutor(max_workers=workers))
    with ex:
        list(ex.map(_work, images[:workers]))  # warm-up: imports, first decode
        t0 = time.perf_counter()
        for _ in range(rounds):
            list(ex.map(_work, images))
        dt = time.perf_counter() - t0
    return rounds * len(images) / dt


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--images", type=int, default=32, help="images per round")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--size", default="4000x3000", help="source size WxH (default 12 MP)")
    ap.add_argument("--out", default=None, help="write JSON results here")
    args = ap.parse_args(argv)
    w, h = (int(v) for v in args.size.split("x"))
    images = make_images(args.images, w, h)
    cores = len(os.sched_getaffinity(0))
    print(
        f"{cores} cores available; {len(images)} images of {w}x{h} JPEG q90 "
        f"({sum(map(len, images)) / len(images) / 1e6:.1f} MB each), target max_pixels={MAX_PIXELS}"
    )
    rows = []
    for n in args.workers:
        proc = run_pool("process", n, images, args.rounds)
        thr = run_pool("thread", n, images, args.rounds)
        rows.append({"workers": n, "process_images_s": proc, "thread_images_s": thr})
        print(f"workers {n:3d}: processes {proc:8.1f} img/s   threads {thr:8.1f} img/s", flush=True)
    base = rows[0]["process_images_s"]
    print(
        f"\n{'workers':>8} {'proc img/s':>11} {'speed-up':>9} {'efficiency':>11} {'thread img/s':>13} {'proc/thread':>12}"
    )
    for r in rows:
        su = r["process_images_s"] / base
        print(
            f"{r['workers']:8d} {r['process_images_s']:11.1f} {su:9.2f} {su / r['workers'] * rows[0]['workers']:11.2f} "
            f"{r['thread_images_s']:13.1f} {r['process_images_s'] / r['thread_images_s']:12.2f}"
        )
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(
            json.dumps({"cores": cores, "size": args.size, "rows": rows}, indent=2)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
