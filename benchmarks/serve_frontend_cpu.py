"""How much CPU time per image is left in the server's frontend process?

The frontend is where HTTP is parsed, tokens are streamed and — in vLLM — where images are decoded,
resized, normalized and patchified before the engine sees them. Every CPU-second spent there per
image is a second the frontend's event loop cannot feed the engine. This benchmark starts three
servers on the same tiny model and measures, from the outside, the CPU time of each one's
frontend process (the process that answers HTTP; its child processes — engine, workers — are
excluded):

* ``edgeserve-split``: ``edgeserve serve --mode split`` (decode/resize in a worker process; vLLM's
  processor then only normalizes and patchifies a ready-sized image in the frontend);
* ``edgeserve-inline``: ``edgeserve serve --mode inline`` (the same preprocessing in the frontend);
* ``vllm-serve``: ``python -m vllm.entrypoints.openai.api_server`` (vLLM's own path).

Workload: photographs (scikit-image's samples, scaled to the requested size and shifted so that
every request is a new image for the caches) as JPEG data URLs, prepared before any timing;
``--concurrency`` requests in flight, ``--max-tokens`` tokens each (``ignore_eos``); for the
edgeserve arms the report adds the engine stall time per image from their ``/metrics``. Arms alternate in rounds (A B C, A B C, …) and the
report gives per-round ratios against vllm-serve (median, min, max).

Usage::

    .venv/bin/python benchmarks/serve_frontend_cpu.py --rounds 4 --per-round 5 --size 4000x3000
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from PIL import Image

from edgeserve.net import free_port

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "models" / "tiny-qwen2-vl"


@dataclass
class Arm:
    name: str
    argv: list[str]
    port: int
    proc: subprocess.Popen[bytes] | None = None
    cpu_ms_per_image: list[float] = field(default_factory=list)
    latency_s: list[float] = field(default_factory=list)
    images_per_s: list[float] = field(default_factory=list)
    stall_ms_per_image: list[float] = field(default_factory=list)  # edgeserve only

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, log_dir: Path) -> None:
        log = open(log_dir / f"{self.name}.log", "wb")  # noqa: SIM115 — lives as long as the server
        self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout_s: float = 600) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError):
                pass
            time.sleep(1)
        raise RuntimeError(f"{self.name} not ready after {timeout_s} s")

    def frontend_cpu_s(self) -> float:
        assert self.proc is not None
        t = psutil.Process(self.proc.pid).cpu_times()
        return float(t.user + t.system)

    def metric(self, name: str) -> float:
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + " "):
                    return float(line.split()[1])
        return 0.0

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def make_payloads(n: int, width: int, height: int, max_tokens: int) -> list[bytes]:
    from skimage import data as photos

    sources = [photos.astronaut(), photos.coffee(), photos.chelsea(), photos.rocket()]
    out = []
    for i in range(n):
        img = Image.fromarray(sources[i % len(sources)]).resize(
            (width + 16, height + 16), Image.Resampling.BICUBIC
        )
        dx, dy = (i * 3) % 16, (i * 5) % 16  # a new image every time: no cache hits
        img = img.crop((dx, dy, dx + width, dy + height))
        buf = io.BytesIO()
        img.save(buf, "JPEG", quality=90)
        url = "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode()
        body = {
            "model": str(MODEL),
            "max_tokens": max_tokens,
            "temperature": 0,
            "ignore_eos": True,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": url}},
                        {"type": "text", "text": "Describe the image."},
                    ],
                }
            ],
        }
        out.append(json.dumps(body).encode())
    return out


def post(url: str, body: bytes) -> float:
    t = time.perf_counter()
    req = urllib.request.Request(
        url + "/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=300) as r:
        r.read()
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--per-round", type=int, default=5, help="images per arm per round")
    ap.add_argument("--size", default="4000x3000", help="photo size WxH (default: 4000x3000)")
    ap.add_argument("--concurrency", type=int, default=1, help="requests in flight per arm")
    ap.add_argument("--max-tokens", type=int, default=1)
    ap.add_argument("--log-dir", default="/tmp/serve_frontend_cpu")
    ap.add_argument("--json", metavar="FILE", help="also write the raw figures as JSON")
    ap.add_argument("--encoder", choices=["auto", "none", "onnx"], default="auto",
                    help="the edgeserve arms' --encoder: none keeps vLLM's image processor "
                    "(normalize, patchify) in the frontend, as on a GPU host (default: auto)")
    args = ap.parse_args()
    width, height = (int(x) for x in args.size.split("x"))
    log_dir = Path(args.log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    py = sys.executable
    # a fixed KV-cache size: three engines starting at once cannot agree on free-memory fractions
    common = [
        "--max-model-len",
        "4096",
        "--max-num-seqs",
        "8",
        "--kv-cache-memory-bytes",
        str(256 << 20),
    ]
    arms = [
        Arm(
            "edgeserve-split",
            [
                py,
                "-m",
                "edgeserve",
                "serve",
                "--model",
                str(MODEL),
                "--mode",
                "split",
                "--workers",
                "1",
                "--sample-interval",
                "0.25",
                "--encoder",
                args.encoder,
                *common,
            ],
            free_port(),
        ),
        Arm(
            "edgeserve-inline",
            [
                py,
                "-m",
                "edgeserve",
                "serve",
                "--model",
                str(MODEL),
                "--mode",
                "inline",
                "--sample-interval",
                "0.25",
                "--encoder",
                args.encoder,
                *common,
            ],
            free_port(),
        ),
        Arm(
            "vllm-serve",
            [
                py,
                "-m",
                "vllm.entrypoints.openai.api_server",
                "--model",
                str(MODEL),
                "--disable-log-stats",
                *common,
            ],
            free_port(),
        ),
    ]
    for a in arms:
        a.argv += ["--port", str(a.port)]
    print(
        f"machine: {os.cpu_count()} cores, no GPU; model: tiny Qwen2-VL; images: {width}x{height} "
        f"JPEG photos (q90), concurrency {args.concurrency}, max_tokens={args.max_tokens} "
        f"(ignore_eos), edgeserve --encoder {args.encoder}",
        flush=True,
    )
    n_payloads = args.rounds * args.per_round * len(arms) + len(arms)
    payloads = make_payloads(n_payloads, width, height, args.max_tokens)
    try:
        for a in arms:
            a.start(log_dir)
        for a in arms:
            a.wait_ready()
        print("servers ready", flush=True)
        k = 0
        for a in arms:  # warm-up: one image each
            post(a.url, payloads[k])
            k += 1
        for r in range(args.rounds):
            for a in arms:
                edge = a.name.startswith("edgeserve")
                if edge:
                    time.sleep(1.0)  # the stall meter settles windows 0.5 s late
                    stall0 = a.metric("edgeserve_engine_stall_seconds_total")
                cpu0, t0 = a.frontend_cpu_s(), time.perf_counter()
                batch = payloads[k : k + args.per_round]
                with ThreadPoolExecutor(args.concurrency) as ex:
                    lat = list(ex.map(lambda b, a=a: post(a.url, b), batch))
                wall = time.perf_counter() - t0
                k += args.per_round
                cpu1 = a.frontend_cpu_s()
                a.cpu_ms_per_image.append((cpu1 - cpu0) / args.per_round * 1000)
                a.latency_s.extend(lat)
                a.images_per_s.append(args.per_round / wall)
                if edge:
                    time.sleep(1.0)
                    stall = a.metric("edgeserve_engine_stall_seconds_total") - stall0
                    a.stall_ms_per_image.append(stall / args.per_round * 1000)
            print(
                f"round {r + 1}: "
                + ", ".join(f"{a.name} {a.cpu_ms_per_image[-1]:.1f} ms" for a in arms),
                flush=True,
            )
    finally:
        for a in arms:
            a.stop()
    ref, med = arms[-1], statistics.median
    print(
        f"\n| server | frontend CPU ms/image (median of {args.rounds} rounds) | "
        "ratio to vllm-serve (median, min–max) | images/s | throughput ratio to vllm-serve | "
        "E2E latency s (median) | engine stall ms/image |"
    )
    print("|---|---|---|---|---|---|---|")
    for a in arms:
        ratios = [x / y for x, y in zip(a.cpu_ms_per_image, ref.cpu_ms_per_image, strict=True)]
        tput = [x / y for x, y in zip(a.images_per_s, ref.images_per_s, strict=True)]
        stall_text = f"{med(a.stall_ms_per_image):.1f}" if a.stall_ms_per_image else "n/a"
        print(
            f"| {a.name} | {med(a.cpu_ms_per_image):.1f} | "
            f"{med(ratios):.2f} ({min(ratios):.2f}–{max(ratios):.2f}) | "
            f"{med(a.images_per_s):.2f} | {med(tput):.2f} ({min(tput):.2f}–{max(tput):.2f}) | "
            f"{med(a.latency_s):.3f} | {stall_text} |"
        )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    a.name: {
                        "cpu_ms_per_image": a.cpu_ms_per_image,
                        "latency_s": a.latency_s,
                        "images_per_s": a.images_per_s,
                        "stall_ms_per_image": a.stall_ms_per_image,
                    }
                    for a in arms
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
