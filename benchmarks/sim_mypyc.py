"""What compiling the simulator's hot modules with mypyc would buy, measured A/B in one run.

Copies ``sim/`` (and the record schema) into a temporary directory, compiles the event-path
modules there with mypyc (``loop``, ``job``, ``batching``, ``device``, ``cloud``, ``network``,
``service``, ``thermal``, ``stats``, ``workload``, ``simulation``), then runs the default scenario
alternately with the pure-Python package and the compiled copy, each in a fresh process pinned to
one core, and prints the median speed-up with min and max. The compiled copy is thrown away: the
package itself stays pure Python (a stale compiled module next to an edited source would silently
win the import, which is not a trap worth setting in a shared tree).

    python benchmarks/sim_mypyc.py --rounds 4 --requests 100000
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

ROOT = Path(__file__).resolve().parent.parent
HOT = ["loop", "job", "batching", "device", "cloud", "network", "service", "thermal", "stats",
       "workload", "simulation"]

RUN = """
import os, sys, time
os.sched_setaffinity(0, {{{cpu}}})
from sim.config import load_scenario
from sim.simulation import Simulation
import sim.device
sc = load_scenario(None, [("requests", {n}), ("duration_s", None)])
t = time.perf_counter()
Simulation(sc, trace_path={trace!r}).run()
print({n} / (time.perf_counter() - t), sim.device.__file__.endswith(".so"))
"""


def build(dst: Path) -> None:
    shutil.copytree(ROOT / "sim", dst / "sim", ignore=shutil.ignore_patterns("__pycache__"))
    (dst / "edgeserve").mkdir()
    (dst / "edgeserve" / "__init__.py").write_text("")
    shutil.copy(ROOT / "edgeserve" / "records.py", dst / "edgeserve" / "records.py")
    shutil.copytree(ROOT / "models" / "profiles", dst / "models" / "profiles")
    (dst / "mypy.ini").write_text("[mypy]\nignore_missing_imports = True\n")
    mypyc = Path(sys.executable).parent / "mypyc"
    subprocess.run([str(mypyc), *(f"sim/{m}.py" for m in HOT)], cwd=dst, check=True,
                   stdout=subprocess.DEVNULL)


def rate(path: Path, n: int, cpu: int, trace: str) -> tuple[float, bool]:
    out = subprocess.run([sys.executable, "-c", RUN.format(cpu=cpu, n=n, trace=trace)],
                         env=dict(os.environ, PYTHONPATH=str(path)), cwd=path.parent,
                         capture_output=True, text=True, check=True).stdout.split()
    return float(out[0]), out[1] == "True"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--cpu", type=int, default=0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        native = Path(tmp) / "native"
        native.mkdir()
        print("compiling with mypyc …", flush=True)
        build(native)
        trace = str(Path(tmp) / "t.jsonl")
        ratios = []
        for i in range(args.rounds):
            pure, pure_native = rate(ROOT, args.requests, args.cpu, trace)
            comp, comp_native = rate(native, args.requests, args.cpu, trace)
            assert not pure_native and comp_native
            ratios.append(comp / pure)
            print(f"round {i + 1}: pure {pure:,.0f} req/s | mypyc {comp:,.0f} req/s → ×{comp / pure:.2f}")
        print(f"mypyc speed-up: median ×{statistics.median(ratios):.2f} "
              f"(min ×{min(ratios):.2f}, max ×{max(ratios):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
