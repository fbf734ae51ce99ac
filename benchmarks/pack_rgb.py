"""The worker's last copy: packing a resized H×W×4 (RGBX) image into the H×W×3 output, numpy's
copy (the specification, :func:`mm_preproc.pack.pack_rgb_into_plain`) vs OpenCV's channel
conversion (:func:`mm_preproc.pack.pack_rgb_into`), same arrays, alternating, median of rounds.

    taskset -c 1 .venv/bin/python benchmarks/pack_rgb.py
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from mm_preproc.pack import pack_rgb_into, pack_rgb_into_plain

SIZES = {"12 MP at 1280 tokens": (840, 1148), "1280x720 at 1280 tokens": (728, 1288),
         "640x480": (476, 644)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=50)
    a = p.parse_args()
    import cv2

    cv2.setNumThreads(1)
    print(f"load average {os.getloadavg()[0]:.2f}; median ms of {a.rounds} rounds")
    print(f"{'image':26s} {'numpy copy':>11s} {'OpenCV':>8s} {'ratio':>7s}")
    for label, (h, w) in SIZES.items():
        src = np.random.default_rng(0).integers(0, 256, (h, w, 4), dtype=np.uint8)
        dst = np.empty((h, w, 3), np.uint8)
        times: dict[str, list[float]] = {"plain": [], "fast": []}
        for _ in range(a.rounds):
            for name, f in (("plain", pack_rgb_into_plain), ("fast", pack_rgb_into)):
                t = time.perf_counter()
                f(dst, src)
                times[name].append(time.perf_counter() - t)
        assert np.array_equal(dst, src[:, :, :3])
        plain, fast = (1000 * statistics.median(times[k]) for k in ("plain", "fast"))
        print(f"{label:26s} {plain:11.3f} {fast:8.3f} {plain / fast:6.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
