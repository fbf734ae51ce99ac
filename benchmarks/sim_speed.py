"""Simulator speed against raw SimPy, measured in the same run.

Reference: SimPy's own event rate on an empty timeout loop (one process yielding
``env.timeout(1)`` N times) — the fastest anything built on SimPy can process events.
Ours: the built-in default scenario (4 devices, one cloud server, predicted-latency policy),
writing every request record to a trace file as ``edgeserve sim run --trace`` does.

An *event* is one entry taken off the event heap and run: one scheduled callback (an arrival, a
CPU or encoder completion, a prefill end, a batch wake-up, a cloud arrival, a downlink, a thermal
crossing, a sample tick), the same unit as one SimPy ``Timeout`` of the reference. A few of them
find on arrival that they were superseded (a batch wake-up after the batch changed, a thermal
crossing re-planned earlier, an arrival of a closed source) and return at once; they are counted
(SimPy counts its void events too) and their share is printed, with the ratio without them.

Rounds alternate reference and ours (A B A B …) after a warm-up; the ratio is reported as the
median of the per-round ratios with min and max. ``--full`` then runs the default scenario with
1,000,000 requests once and reports its wall time against the 30 s target. The process is pinned
to one core (``--cpu``). The simulator runs compiled when ``make sim-native`` built it from the
sources on disk (the first line says which); ``EDGESERVE_SIM_PURE=1`` measures pure Python.

    python benchmarks/sim_speed.py                 # 5 rounds of 100k requests
    python benchmarks/sim_speed.py --full          # plus the 1M-request run
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import simpy

from sim import native
from sim.core.simulation import Simulation
from sim.scenario.config import load_scenario

CPU_TIME = False  # --cpu-time: measure this process's CPU time instead of wall time


def raw_simpy_events_per_s(n: int) -> float:
    env = simpy.Environment()

    def loop(env: simpy.Environment):  # type: ignore[no-untyped-def,unused-ignore]
        timeout = env.timeout
        for _ in range(n):
            yield timeout(1)

    env.process(loop(env))
    t0 = time.perf_counter()
    c0 = time.process_time()
    env.run()
    if CPU_TIME:
        return n / (time.process_time() - c0)
    return n / (time.perf_counter() - t0)


def ours(requests: int, trace_dir: str,
         policy: str | None = None) -> tuple[float, float, float, float]:
    """(requests/s, events/s, wall seconds, superseded share of events) for ``requests``."""
    scenario = load_scenario(None, [("requests", requests), ("duration_s", None)])
    t0 = time.perf_counter()
    c0 = time.process_time()
    sim = Simulation(scenario, policy=policy, trace_path=Path(trace_dir) / "bench.jsonl")
    sim.run()
    wall = (time.process_time() - c0) if CPU_TIME else (time.perf_counter() - t0)
    void = getattr(sim.loop, "superseded", 0) / sim.loop.events  # (older versions: not counted)
    return requests / wall, sim.loop.events / wall, wall, void


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--requests", type=int, default=100_000, help="requests per round")
    ap.add_argument("--events", type=int, default=1_000_000, help="raw SimPy events per round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--full", action="store_true", help="also run 1,000,000 requests once")
    ap.add_argument("--policy", help="policy (default: the scenario's, predicted_latency)")
    ap.add_argument("--cpu", type=int, default=0, help="core to pin to (-1: no pinning)")
    ap.add_argument("--cpu-time", action="store_true",
                    help="time by the process's CPU time (on a shared core, the time it ran) "
                         "instead of wall time; 'wall' figures below are then CPU seconds")
    args = ap.parse_args()
    global CPU_TIME
    CPU_TIME = args.cpu_time
    if args.cpu >= 0 and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.cpu})
    print(
        f"python {platform.python_version()}, simpy {simpy.__version__}, "
        f"{os.cpu_count()} cores, pinned to core {args.cpu}, "
        f"{'CPU' if CPU_TIME else 'wall'} time, load average {os.getloadavg()[0]:.1f}"
    )
    state, where = native.status()
    print(
        "sim: compiled event path (mypyc build in " + str(where.relative_to(native.ROOT)) + ")"
        if native.ACTIVE
        else f"sim: pure Python (compiled build {state}"
        + (f", {native.ENV_PURE} set)" if os.environ.get(native.ENV_PURE) else ")")
    )
    with tempfile.TemporaryDirectory() as tmp:
        raw_simpy_events_per_s(args.events // 10)  # warm-up
        ours(args.requests // 10, tmp, args.policy)
        ratios, useful, rows = [], [], []
        for i in range(args.rounds):
            ref = raw_simpy_events_per_s(args.events)
            rps, eps, wall, void = ours(args.requests, tmp, args.policy)
            ratios.append(eps / ref)
            useful.append(eps * (1 - void) / ref)
            rows.append((ref, rps, eps, wall))
            print(
                f"round {i + 1}: raw SimPy {ref:,.0f} ev/s | ours {rps:,.0f} req/s, "
                f"{eps:,.0f} ev/s ({eps / rps:.2f} ev/req, {void:.1%} superseded), {wall:.2f} s"
                f"  → ratio {eps / ref:.3f}"
            )
        med = statistics.median(ratios)
        rps_med = statistics.median(r[1] for r in rows)
        print(
            f"\nevents/s ratio ours / raw SimPy: median {med:.3f} (min {min(ratios):.3f}, "
            f"max {max(ratios):.3f}); target >= 0.5\n"
            f"  without superseded events: median {statistics.median(useful):.3f} "
            f"(min {min(useful):.3f}, max {max(useful):.3f})"
        )
        print(
            f"requests/s: median {rps_med:,.0f} → 1,000,000 requests in about "
            f"{1e6 / rps_med:.1f} s; target <= 30 s"
        )
        if args.full:
            ref = raw_simpy_events_per_s(args.events)
            rps, eps, wall, _ = ours(1_000_000, tmp, args.policy)
            size = (Path(tmp) / "bench.jsonl").stat().st_size
            print(
                f"\nfull run: 1,000,000 requests in {wall:.1f} s ({rps:,.0f} req/s, {eps:,.0f} ev/s, "
                f"ratio {eps / ref:.3f} to raw SimPy {ref:,.0f} ev/s); trace {size / 1e6:.0f} MB"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
