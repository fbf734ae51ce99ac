"""Fleet-scale simulation: wall time and peak memory against fleet size and request count, and
the speed-up of a sweep on Ray (or a local process pool) over running it serially.

What it measures (each size in a fresh child process, so peak RSS is that run's alone):

* ``--fleet``: the built-in ``fleet`` scenario's three classes (cameras, kiosks, phones in the
  ratio 1000:200:300) scaled to 10, 100, 1,000 and 10,000 devices, a fixed total of
  ``--fleet-requests`` requests each (so more devices means a shorter simulated time).
* ``--requests``: ``--fixed-devices`` devices of the same mix with 1M requests (``--ten-million``
  adds 10M).
* ``--ray``: a sweep of ``--points`` runs of the default scenario, serially in this process
  against one Ray task per run on a head with ``--ray-cpus`` CPUs started here on 127.0.0.1
  (stopped after), rounds alternating; the speed-up is serial wall time / Ray wall time, median
  with min and max over the rounds.
* ``--pool N``: the same sweep serially against a local process pool of N processes (no Ray
  needed; for a many-core host).

Every record is serialized as ``edgeserve sim run --trace`` does; it goes to ``/dev/null``
unless ``--trace-dir`` names a folder (then real files, deleted after, their size printed).
The first line says whether the compiled event path (``make sim-native``) or pure Python ran.

    python benchmarks/sim_scale.py                       # --fleet --requests --ray
    python benchmarks/sim_scale.py --pool 16 --points 32 # serial vs a pool of 16
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from edgeserve.net import free_port

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MIX = (("cam", 1000), ("kiosk", 200), ("phone", 300))  # the fleet scenario's classes


def fleet_raw(devices: int, requests: int) -> dict[str, Any]:
    """The fleet scenario scaled to ``devices`` (class ratios kept), ``requests`` arrivals."""
    from sim.scenario.config import SCENARIO_DIR, inline_profiles
    from sim.scenario.schema import load_yaml

    raw = inline_profiles(load_yaml(SCENARIO_DIR / "fleet.yaml"), SCENARIO_DIR)
    total = sum(n for _, n in MIX)
    counts = [max(1, round(devices * n / total)) for _, n in MIX]
    counts[0] += devices - sum(counts)
    for entry, c in zip(raw["devices"], counts, strict=True):
        entry["count"] = c
    raw["requests"] = requests
    raw["duration_s"] = None
    return raw


def one(devices: int, requests: int, trace_dir: str | None) -> dict[str, Any]:
    """One run in this process (the child side): what the parent prints."""
    from sim import native
    from sim.core.simulation import Simulation
    from sim.scenario.config import scenario_from_raw

    base_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    trace = "/dev/null" if trace_dir is None else os.path.join(trace_dir, f"t{os.getpid()}.jsonl")
    t0, c0 = time.perf_counter(), time.process_time()
    sim = Simulation(scenario_from_raw(fleet_raw(devices, requests)), trace_path=trace)
    s = sim.run()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    size = 0
    if trace_dir is not None:
        size = os.path.getsize(trace)
        os.unlink(trace)
    return {"devices": len(sim.devices), "requests": s.fleet.requests, "events": s.events,
            "sim_time_s": s.sim_time_s, "wall_s": wall, "cpu_s": cpu, "base_rss_mb": base_mb,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "trace_bytes": size, "compiled": native.ACTIVE}


def child(devices: int, requests: int, trace_dir: str | None) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--one", str(devices), str(requests)]
    if trace_dir is not None:
        cmd += ["--trace-dir", trace_dir]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def print_row(r: dict[str, Any]) -> None:
    trace = f"{r['trace_bytes'] / 1e6:9.0f} MB" if r["trace_bytes"] else "   /dev/null"
    print(f"{r['devices']:>8,} {r['requests']:>11,} {r['sim_time_s']:>12,.0f} {r['wall_s']:>8.1f} "
          f"{r['cpu_s']:>8.1f} {r['requests'] / r['wall_s']:>9,.0f} {r['base_rss_mb']:>8.0f} "
          f"{r['peak_rss_mb']:>9.0f} {trace}", flush=True)


HEADER = (f"{'devices':>8} {'requests':>11} {'sim time s':>12} {'wall s':>8} {'cpu s':>8} "
          f"{'req/s':>9} {'base MB':>8} {'peak MB':>9} {'trace':>12}")


# ---- sweeps ---------------------------------------------------------------------------------

def sweep_specs(points: int, duration_s: float) -> list[Any]:
    """``points`` runs of the default scenario: rate × seeds, each independent."""
    from sim.experiments.sweep import specs_for
    from sim.scenario.config import SCENARIO_DIR, inline_profiles
    from sim.scenario.schema import load_yaml

    raw = inline_profiles(load_yaml(SCENARIO_DIR / "default.yaml"), SCENARIO_DIR)
    raw["duration_s"] = duration_s
    seeds = max(1, points // 4)
    rates = [0.5 + 0.5 * i for i in range(-(-points // seeds))]
    return specs_for(raw, [("devices[0].workload.rate_hz", rates)], [None],
                     list(range(seeds)))[:points]


def timed(specs: list[Any], cfg: Any) -> tuple[float, list[str]]:
    from sim.experiments.distribute import run_all

    t0 = time.perf_counter()
    results = run_all(specs, cfg)
    return time.perf_counter() - t0, [json.dumps(r.summary.to_dict(), sort_keys=True)
                                      for r in results]


def start_ray_head(cpus: int) -> tuple[subprocess.Popen[bytes], str, str]:
    port = free_port()
    tmp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    ray = Path(sys.executable).with_name("ray")
    proc = subprocess.Popen(
        [str(ray), "start", "--head", "--block", "--num-cpus", str(cpus), "--node-ip-address",
         "127.0.0.1", "--port", str(port), "--include-dashboard", "false",
         "--disable-usage-stats", "--temp-dir", tmp],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit("the Ray head did not start") from None
            time.sleep(0.2)
    return proc, f"127.0.0.1:{port}", tmp


def stop_ray_head(proc: subprocess.Popen[bytes], tmp: str) -> None:
    import shutil

    proc.send_signal(signal.SIGTERM)  # --block: ray start stops what it started
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=30)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    shutil.rmtree(tmp, ignore_errors=True)


def speedup(name: str, specs: list[Any], other: Any, rounds: int) -> None:
    from sim.experiments.distribute import ExecConfig

    ratios = []
    timed(specs[:2], ExecConfig())  # warm-up: imports, caches, Ray's workers
    timed(specs[:2], other)
    for r in range(rounds):
        serial_s, ref = timed(specs, ExecConfig())
        other_s, got = timed(specs, other)
        assert got == ref, f"{name} returned other summaries than the serial run"
        ratios.append(serial_s / other_s)
        print(f"round {r + 1}: serial {serial_s:6.2f} s, {name} {other_s:6.2f} s, "
              f"speed-up {serial_s / other_s:.2f}x (summaries identical)", flush=True)
    print(f"{name}: {len(specs)} runs, speed-up median {statistics.median(ratios):.2f}x "
          f"(min {min(ratios):.2f}, max {max(ratios):.2f}) over {rounds} rounds", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--one", nargs=2, type=int, metavar=("DEVICES", "REQUESTS"),
                    help=argparse.SUPPRESS)
    ap.add_argument("--fleet", action="store_true", help="fleet sizes at fixed requests")
    ap.add_argument("--requests", action="store_true", help="1M (10M) requests, fixed fleet")
    ap.add_argument("--ray", action="store_true", help="sweep: serial vs Ray on a local head")
    ap.add_argument("--pool", type=int, metavar="N", help="sweep: serial vs a pool of N")
    ap.add_argument("--sizes", default="10,100,1000,10000", help="fleet sizes (--fleet)")
    ap.add_argument("--fleet-requests", type=int, default=200_000)
    ap.add_argument("--fixed-devices", type=int, default=100)
    ap.add_argument("--ten-million", action="store_true", help="also 10M requests (--requests)")
    ap.add_argument("--ray-cpus", type=int, default=2)
    ap.add_argument("--points", type=int, default=8, help="sweep runs (--ray, --pool)")
    ap.add_argument("--run-duration", type=float, default=20000,
                    help="simulated seconds of each sweep run (default 20000)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--trace-dir", help="write traces here (default /dev/null)")
    args = ap.parse_args()
    if args.one:
        devices, requests = args.one
        print(json.dumps(one(devices, requests, args.trace_dir)))
        return 0
    if not (args.fleet or args.requests or args.ray or args.pool):
        args.fleet = args.requests = args.ray = True
    from sim import native

    print(f"# {platform.node()}: {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"simulator {'compiled' if native.ACTIVE else 'pure Python'}, load avg "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    if args.fleet or args.requests:
        print(HEADER, flush=True)
    if args.fleet:
        for d in (int(x) for x in args.sizes.split(",")):
            print_row(child(d, args.fleet_requests, args.trace_dir))
    if args.requests:
        for n in (1_000_000, 10_000_000) if args.ten_million else (1_000_000,):
            print_row(child(args.fixed_devices, n, args.trace_dir))
    from sim.experiments.distribute import ExecConfig

    if args.ray or args.pool:
        specs = sweep_specs(args.points, args.run_duration)
    if args.pool:
        speedup(f"pool of {args.pool}", specs, ExecConfig(workers=args.pool), args.rounds)
    if args.ray:
        proc, address, tmp = start_ray_head(args.ray_cpus)
        try:
            speedup(f"Ray ({args.ray_cpus} CPUs)", specs, ExecConfig(ray_address=address),
                    args.rounds)
        finally:
            stop_ray_head(proc, tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
