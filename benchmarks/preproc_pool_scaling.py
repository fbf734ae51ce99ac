"""Scaling of ``edgeserve serve``'s preprocessing pool, and what the shared-memory hand-off buys.

The pool (``edgeserve.preproc_pool.PreprocPool``) sends image bytes to worker processes through
shared memory and gets the ready-sized pixels back the same way; only small msgpack messages cross
the pipes. The obvious alternative is a ``concurrent.futures.ProcessPoolExecutor`` that gets the
bytes and returns the pixel array *pickled*. Both run the same ``mm_preproc.preprocess(...,
output=IMAGE)`` per image. For each worker count the two alternate (A B A B …), and the report
gives images/s and the CPU time per image spent in the *calling* process — the frontend, in the
server — with per-round ratios (median, min–max).

Inputs: photographs (scikit-image samples, or the same arrays from ``$EDGESERVE_PHOTOS_NPZ``; a
synthetic photo-like image only when neither is available)
scaled to 12 MP, JPEG q90, prepared before timing; every worker pinned to one OpenCV/OpenMP
thread. Run on a machine with many cores to see the scaling::

    python benchmarks/preproc_pool_scaling.py --workers 1 2 4 8 14 --images 64 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from edgeserve.preproc_pool.messages import PreprocParams, SourceKind
from edgeserve.preproc_pool.pool import ImageInput, PreprocPool

PARAMS = PreprocParams(min_pixels=56 * 56, max_pixels=1280 * 28 * 28, max_image_pixels=89_000_000,
                       max_image_bytes=64 << 20)


def make_images(n: int, width: int, height: int) -> list[bytes]:
    from PIL import Image

    npz = os.environ.get("EDGESERVE_PHOTOS_NPZ")  # the same photos, carried to a machine
    try:                                            # without scikit-image
        if npz:
            with np.load(npz) as f:
                photos = [f[k] for k in ("astronaut", "coffee", "chelsea", "rocket")]
        else:
            from skimage import data

            photos = [data.astronaut(), data.coffee(), data.chelsea(), data.rocket()]
    except ImportError:
        yy, xx = np.mgrid[0:512, 0:512]
        photos = [np.stack([np.sin(xx / 23.0) * 127 + 128, np.cos(yy / 17.0) * 127 + 128,
                            (xx + yy) % 256], axis=-1).astype(np.uint8)]
    out = []
    for i in range(n):
        im = Image.fromarray(photos[i % len(photos)]).convert("RGB").resize(
            (width + 8, height + 8), Image.Resampling.BICUBIC)
        im = im.crop((i % 8, (i * 3) % 8, i % 8 + width, (i * 3) % 8 + height))
        buf = io.BytesIO()
        im.save(buf, "JPEG", quality=90)
        out.append(buf.getvalue())
    return out


def _init_worker() -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    import cv2

    cv2.setNumThreads(1)


def _pickled_work(data: bytes) -> np.ndarray:
    import mm_preproc

    r = mm_preproc.preprocess(data, min_pixels=PARAMS.min_pixels, max_pixels=PARAMS.max_pixels,
                              output=mm_preproc.OutputFormat.IMAGE)
    return r.image  # pickled back to the caller


async def _pool_round(pool: PreprocPool, images: list[bytes]) -> int:
    results = await asyncio.gather(*(pool.submit(ImageInput(SourceKind.SHM, data=d))
                                     for d in images))
    return sum(int(r.pixels[0, 0, 0]) for r in results)  # touch the pixels, as a consumer would


def run(workers: int, images: list[bytes], rounds: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"pool_img_s": [], "pickle_img_s": [], "pool_cpu_ms": [],
                                   "pickle_cpu_ms": []}
    loop = asyncio.new_event_loop()
    pool = PreprocPool(workers, PARAMS, max_pending=len(images))
    loop.run_until_complete(pool.start())
    ex = ProcessPoolExecutor(max_workers=workers, initializer=_init_worker)
    try:
        list(ex.map(_pickled_work, images[:workers]))  # warm-up
        loop.run_until_complete(_pool_round(pool, images[:workers]))
        for _ in range(rounds):
            c0, t0 = time.process_time(), time.perf_counter()
            loop.run_until_complete(_pool_round(pool, images))
            c1, t1 = time.process_time(), time.perf_counter()
            out["pool_img_s"].append(len(images) / (t1 - t0))
            out["pool_cpu_ms"].append((c1 - c0) / len(images) * 1000)
            c0, t0 = time.process_time(), time.perf_counter()
            for arr in ex.map(_pickled_work, images):
                int(arr[0, 0, 0])
            c1, t1 = time.process_time(), time.perf_counter()
            out["pickle_img_s"].append(len(images) / (t1 - t0))
            out["pickle_cpu_ms"].append((c1 - c0) / len(images) * 1000)
    finally:
        ex.shutdown()
        loop.run_until_complete(pool.close())
        loop.close()
    return out


def _ratio(a: list[float], b: list[float]) -> str:
    r = [x / y for x, y in zip(a, b, strict=True) if y > 0]
    return f"{statistics.median(r):.2f} ({min(r):.2f}–{max(r):.2f})" if r else "n/a"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--images", type=int, default=32, help="images per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--size", default="4000x3000")
    ap.add_argument("--out", help="write the raw figures as JSON")
    args = ap.parse_args()
    w, h = (int(v) for v in args.size.split("x"))
    images = make_images(args.images, w, h)
    cores = len(os.sched_getaffinity(0))
    print(f"{cores} cores; {len(images)} images {w}x{h} JPEG q90 "
          f"({sum(map(len, images)) / len(images) / 1e6:.1f} MB each); max_pixels "
          f"{PARAMS.max_pixels}; {args.rounds} rounds, pool and pickle alternating", flush=True)
    rows = {}
    for n in args.workers:
        r = run(n, images, args.rounds)
        rows[n] = r
        print(f"workers {n}: pool {statistics.median(r['pool_img_s']):.1f} img/s, "
              f"pickle {statistics.median(r['pickle_img_s']):.1f} img/s", flush=True)
    base = statistics.median(rows[args.workers[0]]["pool_img_s"])
    print("\n| workers | pool img/s | speed-up | pickle img/s | pool/pickle throughput | "
          "caller CPU ms/img pool | caller CPU ms/img pickle | pool/pickle caller CPU |")
    print("|---|---|---|---|---|---|---|---|")
    for n, r in rows.items():
        med = statistics.median
        print(f"| {n} | {med(r['pool_img_s']):.1f} | {med(r['pool_img_s']) / base:.2f} | "
              f"{med(r['pickle_img_s']):.1f} | {_ratio(r['pool_img_s'], r['pickle_img_s'])} | "
              f"{med(r['pool_cpu_ms']):.2f} | {med(r['pickle_cpu_ms']):.2f} | "
              f"{_ratio(r['pool_cpu_ms'], r['pickle_cpu_ms'])} |")
    if args.out:
        Path(args.out).write_text(json.dumps({"cores": cores, "size": args.size,
                                              "rows": {str(k): v for k, v in rows.items()}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
