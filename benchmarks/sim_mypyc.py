"""What the compiled (mypyc) event path buys, measured A/B in one run.

Runs the default scenario alternately as pure Python (``EDGESERVE_SIM_PURE=1``) and with the
compiled modules of ``make sim-native`` (sim/native.py), each in a fresh process pinned to one
core, and prints the per-round speed-up with its median, min and max. Without a fresh build in
``build/sim-native`` it first compiles a copy of the sources into a temporary directory (the
repository's build is left alone).

    python benchmarks/sim_mypyc.py --rounds 4 --requests 100000 --cpu 1
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sim import native

ROOT = native.ROOT

RUN = """
import os, sys, time
os.sched_setaffinity(0, {{{cpu}}})
import sim.native
from sim.scenario.config import load_scenario
from sim.core.simulation import Simulation
sc = load_scenario(None, [("requests", {n}), ("duration_s", None)])
c = time.process_time()
Simulation(sc, trace_path={trace!r}).run()
print({n} / (time.process_time() - c), sim.native.ACTIVE)
"""


def rate(root: Path, n: int, cpu: int, trace: str, pure: bool) -> tuple[float, bool]:
    env = {k: v for k, v in os.environ.items() if k != native.ENV_PURE}
    if pure:
        env[native.ENV_PURE] = "1"
    out = subprocess.run([sys.executable, "-c", RUN.format(cpu=cpu, n=n, trace=trace)],
                         env=env, cwd=root, capture_output=True, text=True, check=True).stdout.split()
    return float(out[0]), out[1] == "True"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--cpu", type=int, default=0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = ROOT
        if native.status(ROOT)[0] != "fresh":
            root = Path(tmp) / "checkout"
            shutil.copytree(ROOT / "sim", root / "sim",
                            ignore=shutil.ignore_patterns("__pycache__"))
            (root / "edgeserve").mkdir()
            (root / "edgeserve" / "__init__.py").write_text("")
            shutil.copy(ROOT / "edgeserve" / "records.py", root / "edgeserve" / "records.py")
            shutil.copytree(ROOT / "models" / "profiles", root / "models" / "profiles")
            print("no fresh build in build/sim-native: compiling a copy …", flush=True)
            native.build(root)
        trace = str(Path(tmp) / "t.jsonl")
        print(f"CPU time, pinned to core {args.cpu}, load average {os.getloadavg()[0]:.1f}")
        ratios = []
        for i in range(args.rounds):
            pure, pure_native = rate(root, args.requests, args.cpu, trace, True)
            comp, comp_native = rate(root, args.requests, args.cpu, trace, False)
            assert not pure_native and comp_native
            ratios.append(comp / pure)
            print(f"round {i + 1}: pure {pure:,.0f} req/s | compiled {comp:,.0f} req/s "
                  f"→ ×{comp / pure:.2f}")
        print(f"compiled speed-up: median ×{statistics.median(ratios):.2f} "
              f"(min ×{min(ratios):.2f}, max ×{max(ratios):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
