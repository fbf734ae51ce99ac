"""What ``edgeserve gateway`` adds to a request: the same requests sent straight to an upstream
and through a gateway in front of it, alternating, in one run.

The upstream is the test suite's fake OpenAI-compatible server (``tests/edgeserve/gateway``) with
no delay, so the difference is the gateway's own work: parsing and validating the request,
reading the image's size, the policy's decision (``predicted_latency`` with the Jetson profile's
latency model), re-encoding the body, the second HTTP hop and the trace record.

    python benchmarks/gateway_overhead.py [--requests 200] [--rounds 2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "edgeserve" / "gateway"))
from conftest import chat_body, gateway, png_data_url, post, upstream


def timed(url: str, body: dict[str, object], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        status, _, _ = post(url + "/v1/chat/completions", body)
        out.append(time.perf_counter() - t)
        if status != 200:
            raise SystemExit(f"{url} answered {status}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    up = upstream(tmp, "loc", "--delay-s", "0")
    gw = gateway(tmp, "--local", up.url, "--policy", "predicted_latency",
                 "--profile", "jetson-orin-nano")
    body = chat_body(image=png_data_url(640, 480))
    try:
        timed(up.url, body, 20)
        timed(gw.url, body, 20)
        for r in range(args.rounds):
            d = timed(up.url, body, args.requests)
            g = timed(gw.url, body, args.requests)
            d50, g50 = statistics.median(d) * 1e3, statistics.median(g) * 1e3
            print(f"round {r + 1}: direct p50 {d50:.2f} ms, through the gateway p50 {g50:.2f} ms: "
                  f"+{g50 - d50:.2f} ms ({g50 / d50:.2f}x)")
    finally:
        gw.stop()
        up.stop()


if __name__ == "__main__":
    main()
