"""One arrival trace served live through ``edgeserve gateway`` and simulated from the gateway's
own trace (``edgeserve sim run --replay-gateway``), per policy.

Poisson arrivals (``--rate-hz``, ``--requests``, fixed seed) of photos in a mix of sizes, each
with a short question, are sent on schedule (concurrently) to a gateway in front of two
``edgeserve serve`` processes with the tiny model: one is the device, the other stands for the
cloud. First each server is calibrated from a short designed run of its own
(``edgeserve calibrate record --url``, into the server's ``--trace``, then ``edgeserve calibrate``
on the Jetson profile's units and thermal): the gateway predicts local latency with the device's
calibrated profile (and reads its virtual sensors), and the replay simulates the device with
that profile — its policy reading the local latency through the gateway's own estimator
(:mod:`sim.core.observed_estimate`), learnt from the simulated device's finished requests, and
the cloud latency through the gateway's link estimator (:mod:`sim.core.link_estimate`), learnt
from its simulated cloud calls — the
cloud with the other server's (``--cloud-profile``) and the link the gateway measured: a proxy in front of the cloud delays each request by ``--cloud-delay-ms``, so that
the device, idle, is the faster place and the cloud pays off once the device queues. For each policy the same arrivals are sent, the gateway's trace is replayed, and
offload share and TTFT/E2E p50/p99 are printed live beside simulated. ``--fake`` uses the test
suite's fake upstreams and the Jetson profile instead (seconds instead of minutes).

The device and the cloud are separate machines in the simulation, while live both servers share
this host's cores unless ``--device-cpus`` and ``--cloud-cpus`` pin them apart (each server is
calibrated where it then serves). Pinned one core each on a 2-core host, the simulated device
came out twice as slow as the live one (docs/gateway.md), so the default is unpinned.

    python benchmarks/gateway.py [--requests 80] [--rate-hz 4] [--calib-budget-s 90] [--cloud-delay-ms 50]
        [--device-cpus 0 --cloud-cpus 1] [--fake]
"""

from __future__ import annotations

import argparse
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "edgeserve" / "gateway"))
from conftest import Proc, chat, chat_body, delay_proxy, gateway, png_data_url, post, upstream

from edgeserve.bench.server_process import ServerProcess
from sim.experiments.gateway_replay import format_replay, replay, trace_from

SIZES = [(640, 480), (1280, 720), (320, 240)]


def schedule(n: int, rate_hz: float, seed: int) -> list[tuple[float, int, int]]:
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(n):
        t += rng.expovariate(rate_hz)
        w, h = rng.choice(SIZES)
        out.append((t, w, h))
    return out


def ask(gw: Proc, text: str, image: str) -> int:
    body = chat_body(text, image=image, max_tokens=16, stream=True,
                     stream_options={"include_usage": True})
    return chat(gw, body)[0]


def warm_up(gw: Proc, policy: str) -> None:
    """Teach the gateway both targets' service times (the cloud's starts at a 1 s guess, learnt
    only from calls to it), then hand the decisions to ``policy``."""
    for placement in ("always_cloud", "always_local"):
        post(gw.url + "/admin/policy", {"policy": placement})
        for w, h in SIZES:
            ask(gw, f"warm up {w}x{h}", png_data_url(w, h))
    post(gw.url + "/admin/policy", {"policy": policy})


def send_all(gw: Proc, arrivals: list[tuple[float, int, int]]) -> list[int]:
    images = {(w, h): png_data_url(w, h) for _, w, h in arrivals}
    statuses: list[int] = [0] * len(arrivals)
    t0 = time.monotonic()

    def one(i: int, t: float, w: int, h: int) -> None:
        time.sleep(max(0.0, t0 + t - time.monotonic()))
        statuses[i] = ask(gw, f"What is in picture {i}?", images[(w, h)])

    threads = [threading.Thread(target=one, args=(i, *a)) for i, a in enumerate(arrivals)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return statuses


def calibrate(server: ServerProcess, trace: Path, budget_s: float, out: Path) -> Path:
    """A calibrated profile of ``server`` (started with ``--trace trace``) from a designed run."""
    edgeserve = [sys.executable, "-m", "edgeserve", "calibrate"]
    subprocess.run([*edgeserve, "record", "--url", server.url, "--budget-s", str(budget_s),
                    "--image-rate", "2", "--out", str(out.with_suffix(".schedule.jsonl"))],
                   check=True,
                   stdout=subprocess.DEVNULL)
    time.sleep(2.0)  # the server flushes its trace with each resource sample
    # the trace goes on with the served traffic: the calibration's part is kept apart, so that
    # the same profile can be fitted again from it later (by another version of the calibrator)
    kept = out.with_suffix(".calibration.jsonl")
    shutil.copyfile(trace, kept)
    subprocess.run([*edgeserve, str(kept), "--out", str(out), "--base", "jetson-orin-nano",
                    "--name", out.stem], check=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=80)
    ap.add_argument("--rate-hz", type=float, default=4.0)
    ap.add_argument("--calib-budget-s", type=float, default=90.0)
    ap.add_argument("--cloud-delay-ms", type=float, default=50.0,
                    help="a proxy delays each request to the cloud by this much (0: none)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--policies", default="predicted_latency,thermal_aware")
    ap.add_argument("--fake", action="store_true", help="fake upstreams, not edgeserve servers")
    ap.add_argument("--device-cpus", default="",
                    help="taskset list for the device's server (default: not pinned)")
    ap.add_argument("--cloud-cpus", default="",
                    help="taskset list for the cloud's server (default: not pinned)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    arrivals = schedule(args.requests, args.rate_hz, args.seed)
    stops = []
    profile, cloud_profile = "jetson-orin-nano", None
    if args.fake:
        dev, cloud = upstream(tmp, "dev", "--delay-s", "0.2"), upstream(tmp, "cloud")
        stops = [dev.stop, cloud.stop]
        urls = dev.url, cloud.url
    else:
        from models.tiny_qwen2_vl import DEFAULT_DIR, build

        model = build(DEFAULT_DIR)
        serve = ["--model", str(model), "--workers", "1", "--max-model-len", "4096",
                 "--max-num-seqs", "4"]
        servers = []
        for name, cpus in (("dev", args.device_cpus), ("cloud", args.cloud_cpus)):
            servers.append(ServerProcess.edgeserve([*serve, "--trace", str(tmp / f"{name}.jsonl")],
                                                   tmp / f"{name}.log", cores=cpus).start().ready())
            print(f"{name} server on {'cores ' + cpus if cpus else 'all cores'}", flush=True)
        stops = [s.stop for s in servers]
        urls = servers[0].url, servers[1].url
        profile, cloud_profile = (
            str(calibrate(s, tmp / f"{name}.jsonl", args.calib_budget_s, tmp / f"{name}.yaml"))
            for s, name in zip(servers, ("dev", "cloud"), strict=True))
        print(f"calibrated: {profile} (device), {cloud_profile} (cloud)")
    cloud_url = urls[1]
    if args.cloud_delay_ms > 0:  # a slower link: the gateway measures it, the replay simulates it
        proxy = delay_proxy(tmp, urls[1], args.cloud_delay_ms / 1000.0)
        stops.append(proxy.stop)
        cloud_url = proxy.url
    try:
        for policy in args.policies.split(","):
            trace = tmp / "gateway.jsonl"
            trace.unlink(missing_ok=True)
            gw = gateway(tmp, "--local", f"dev={urls[0]}", "--cloud", f"c={cloud_url}",
                         "--policy", policy, "--profile", profile,
                         "--sensors", "virtual")
            try:
                warm_up(gw, policy)
                first_s = time.monotonic()  # the gateway's records share this clock
                statuses = send_all(gw, arrivals)
            finally:
                gw.stop()
            print(f"{policy}: {statuses.count(200)}/{len(statuses)} answered 200")
            measured = trace_from(trace, first_s, tmp / f"gateway-{policy}.jsonl")
            print(format_replay(*replay(measured, cloud_profile=cloud_profile)))
            print()
    finally:
        for stop in stops:
            stop()
        print(f"traces, calibration parts and profiles kept in {tmp}")


if __name__ == "__main__":
    main()
