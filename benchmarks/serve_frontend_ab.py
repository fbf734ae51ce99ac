"""Frontend CPU per request of two running servers, side by side under the same load.

Batches of streamed requests go to server A and server B in turn (the order flips every round, so
that a change in the host's load meets both); each batch's CPU time of each server's frontend
process (user + system, from ``psutil``, children excluded) is divided by its requests. Requests:
12 MP JPEG photos (scikit-image samples scaled to 4000×3000, q90), each a new image for the
caches (a JPEG comment with a counter and ``--tag`` changes its bytes, hence its content hash),
``--max-tokens`` tokens each (``min_tokens`` and ``ignore_eos``), streamed.

Usage (two servers started beforehand, e.g. with and without a flag)::

    .venv/bin/python benchmarks/serve_frontend_ab.py \\
        --a one-thread=http://127.0.0.1:18441=PID1 --b two-threads=http://127.0.0.1:18442=PID2 \\
        --rounds 8 --per-round 6 --concurrency 3 --tag pass1
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import statistics
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from PIL import Image

MODEL = Path(__file__).resolve().parent.parent / "models" / "tiny-qwen2-vl"


@dataclass
class Server:
    name: str
    url: str
    proc: psutil.Process
    cpu_ms_per_request: list[float] = field(default_factory=list)

    @classmethod
    def parse(cls, text: str) -> Server:
        name, url, pid = text.split("=")
        return cls(name, url, psutil.Process(int(pid)))

    def cpu_s(self) -> float:
        t = self.proc.cpu_times()
        return float(t.user + t.system)


def photos(width: int = 4000, height: int = 3000) -> list[bytes]:
    from skimage import data

    out = []
    for i, src in enumerate([data.astronaut(), data.coffee(), data.chelsea(), data.rocket()] * 2):
        img = Image.fromarray(src).resize((width + 16, height + 16), Image.Resampling.BICUBIC)
        dx, dy = (i * 3) % 16, (i * 5) % 16
        buf = io.BytesIO()
        img.crop((dx, dy, dx + width, dy + height)).save(buf, "JPEG", quality=90)
        out.append(buf.getvalue())
    return out


def body(jpeg: bytes, comment: str, max_tokens: int) -> bytes:
    com = comment.encode()
    jpeg = jpeg[:2] + b"\xff\xfe" + (len(com) + 2).to_bytes(2, "big") + com + jpeg[2:]
    url = "data:image/jpeg;base64," + base64.b64encode(jpeg).decode()
    return json.dumps({
        "model": str(MODEL), "max_tokens": max_tokens, "min_tokens": max_tokens,
        "ignore_eos": True, "stream": True, "temperature": 0,
        "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": url}},
            {"type": "text", "text": "Describe the image."}]}],
    }).encode()


def post(url: str, data: bytes) -> int:
    req = urllib.request.Request(url + "/v1/chat/completions", data=data,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return r.read().count(b"data:")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", required=True, help="NAME=URL=PID of the first server")
    ap.add_argument("--b", required=True, help="NAME=URL=PID of the second server")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--per-round", type=int, default=6, help="requests per server per round")
    ap.add_argument("--concurrency", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=50)
    ap.add_argument("--tag", default=str(int(time.time())),
                    help="part of every image's bytes: another tag, other images for the caches")
    args = ap.parse_args()
    servers = [Server.parse(args.a), Server.parse(args.b)]
    jpegs = photos()
    n = args.rounds * args.per_round * 2 + 2
    bodies = [body(jpegs[k % len(jpegs)], f"{args.tag} {k}", args.max_tokens) for k in range(n)]
    for k, s in enumerate(servers):  # warm-up
        post(s.url, bodies[k])
    k = 2
    print(f"load average at start: {os.getloadavg()[0]:.1f}", flush=True)
    for r in range(args.rounds):
        for s in servers if r % 2 == 0 else servers[::-1]:
            batch = bodies[k:k + args.per_round]
            k += args.per_round
            cpu0 = s.cpu_s()
            with ThreadPoolExecutor(args.concurrency) as ex:
                list(ex.map(lambda b, s=s: post(s.url, b), batch))
            s.cpu_ms_per_request.append((s.cpu_s() - cpu0) / len(batch) * 1000)
        print(f"round {r + 1}: " + ", ".join(f"{s.name} {s.cpu_ms_per_request[-1]:.1f} ms"
                                             for s in servers)
              + f"; load average {os.getloadavg()[0]:.1f}", flush=True)
    a, b = servers
    ratios = [x / y for x, y in zip(a.cpu_ms_per_request, b.cpu_ms_per_request, strict=True)]
    med = statistics.median
    print(f"frontend CPU ms/request (median): {a.name} {med(a.cpu_ms_per_request):.1f}, "
          f"{b.name} {med(b.cpu_ms_per_request):.1f}; ratio {a.name}/{b.name} per round: "
          f"median {med(ratios):.2f} (min {min(ratios):.2f}, max {max(ratios):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
