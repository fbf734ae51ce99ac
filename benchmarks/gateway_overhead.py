"""What ``edgeserve gateway`` adds to a request: the same requests sent straight to an upstream
and through a gateway in front of it, interleaved request by request, in one run.

The upstream is the test suite's fake OpenAI-compatible server (``tests/edgeserve/gateway``) with
no delay, so the difference is the gateway's own work: parsing and validating the request,
reading the image's size, masking personal data in the request's text, embedding it and looking
it up in the semantic cache (``--cache-capacity``; ``--no-cache`` leaves both out), the policy's
decision (``predicted_latency`` with the Jetson profile's latency model), the second HTTP hop,
keeping the answer in the cache and the trace record. Every request asks another question (six
words drawn from the labelled cache pairs' vocabulary), so none is answered from the cache: each
one passes through.

The gateway runs pinned to one core (``--gateway-cpu``, the last one by default); the client and
the upstream to the others. Beside the latencies, each server process's own CPU time per
request (all its threads), which a busy host disturbs less than the wall-clock figures. ``--before DIR`` starts a second gateway from another source tree
(e.g. ``git archive COMMIT | tar -x -C DIR``) on the same core and interleaves it too, so that
two versions are compared under the same load.

    python benchmarks/gateway_overhead.py [--requests 300] [--rounds 3] [--no-cache]
                                          [--before DIR] [--gateway-cpu N]
                                          [--image WxH] [--photo]
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import random
import re
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import psutil
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "edgeserve" / "gateway"))
from conftest import Proc, chat_body, gateway, png_data_url, post, upstream

ROOT = Path(__file__).resolve().parents[1]
PAIRS = ROOT / "tests" / "data" / "gateway_cache_pairs.jsonl"


def questions(n: int, seed: int = 1) -> list[str]:
    """``n`` different six-word questions from the labelled pairs' words (none a cache hit)."""
    words = sorted({w for line in PAIRS.read_text().splitlines() if line.strip()
                    for w in re.findall(r"[a-z]+", json.loads(line)["a"].lower()) if len(w) > 3})
    rng = random.Random(seed)
    return [" ".join(rng.sample(words, 6)) + "?" for _ in range(n)]


def started_from(source: str, start: Callable[[], Proc]) -> Proc:
    """A process started in ``source`` with it first on PYTHONPATH (``python -m`` puts the working
    directory first on sys.path)."""
    old, cwd = os.environ.get("PYTHONPATH"), os.getcwd()
    os.environ["PYTHONPATH"] = source
    os.chdir(source)
    try:
        return start()
    finally:
        os.chdir(cwd)
        if old is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = old


def photo_data_url(width: int, height: int) -> str:
    pixels = np.random.default_rng(0).integers(0, 255, (height, width, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, "JPEG", quality=90)
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode()


def _cpu_s(p: psutil.Process) -> float:
    t = p.cpu_times()
    return t.user + t.system


def percentiles_ms(xs: list[float]) -> tuple[float, float]:
    a = np.asarray(xs) * 1e3
    return float(np.percentile(a, 50)), float(np.percentile(a, 99))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=300, help="requests per path and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-cache", dest="cache", action="store_false",
                    help="no semantic cache: no embedding, no lookup")
    ap.add_argument("--before", metavar="DIR",
                    help="also measure a gateway started from this source tree")
    ap.add_argument("--gateway-cpu", type=int, default=max(os.sched_getaffinity(0)),
                    help="the core the gateway(s) run on (default: the last one)")
    ap.add_argument("--image", default="640x480", metavar="WxH", help="the image's size")
    ap.add_argument("--photo", action="store_true",
                    help="a JPEG (quality 90) of random pixels, as large as a photo of that size "
                    "(default: a flat-colour PNG of a few KB)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    others = set(os.sched_getaffinity(0)) - {args.gateway_cpu} or {args.gateway_cpu}
    os.sched_setaffinity(0, others)  # the client, and the upstream started from it
    up = upstream(tmp, "loc", "--delay-s", "0")
    os.sched_setaffinity(0, {args.gateway_cpu})  # inherited by every thread of the gateways
    flags = ["--local", up.url, "--policy", "predicted_latency", "--profile", "jetson-orin-nano"]
    if args.cache:
        flags += ["--cache-capacity", "10000"]
    paths: dict[str, Proc] = {"direct": up}
    paths["gateway"] = started_from(str(ROOT), lambda: gateway(tmp, *flags))
    if args.before:
        (tmp / "before").mkdir()
        paths["before"] = started_from(args.before, lambda: gateway(tmp / "before", *flags))
    os.sched_setaffinity(0, others)
    procs = {name: psutil.Process(p.proc.pid) for name, p in paths.items()}
    width, height = (int(x) for x in args.image.split("x"))
    image = photo_data_url(width, height) if args.photo else png_data_url(width, height)
    kind = f"{args.image} {'JPEG photo' if args.photo else 'PNG'}, {len(image) // 1024} KB as base64"
    texts = questions(args.requests * (args.rounds + 1))
    times: dict[str, list[float]] = {k: [] for k in paths}
    cpu_s: dict[str, float] = dict.fromkeys(paths, 0.0)
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average "
          f"{os.getloadavg()[0]:.1f}; semantic cache {'on' if args.cache else 'off'}; "
          f"gateway on core {args.gateway_cpu}")
    try:
        for r in range(args.rounds + 1):  # round 0 warms up
            if r == 1:
                cpu_s = {k: -_cpu_s(procs[k]) for k in paths}
            for i in range(args.requests):
                body = chat_body(text=texts[r * args.requests + i], image=image)
                for name, p in paths.items():
                    t = time.perf_counter()
                    status, _, _ = post(p.url + "/v1/chat/completions", body)
                    if r:
                        times[name].append(time.perf_counter() - t)
                    if status != 200:
                        raise SystemExit(f"{name} answered {status}")
        cpu_s = {k: v + _cpu_s(procs[k]) for k, v in cpu_s.items()}
        n = len(times["direct"])
        d50, d99 = percentiles_ms(times["direct"])
        print(f"{n} requests per path ({kind}, max_tokens 8); CPU ms: the server "
              "process's own CPU time per request")
        print(f"{'path':10} {'p50 ms':>8} {'p99 ms':>8} {'+p50 ms':>8} {'+p99 ms':>8} "
              f"{'CPU ms':>8}")
        for name, xs in times.items():
            p50, p99 = percentiles_ms(xs)
            served = n * len(paths) if name == "direct" else n  # the upstream serves every path
            print(f"{name:10} {p50:8.2f} {p99:8.2f} {p50 - d50:8.2f} {p99 - d99:8.2f} "
                  f"{cpu_s[name] / served * 1e3:8.2f}")
    finally:
        for p in reversed(paths.values()):
            p.stop()


if __name__ == "__main__":
    main()
