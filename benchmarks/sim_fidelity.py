"""How well does a calibrated simulator predict the runtime on runs it was not fitted on?

The loop a user runs, end to end, on this machine:

1. **Capacity.** For each image mix, a fresh default ``edgeserve serve`` is driven closed-loop
   (``--probe-concurrency`` in flight, 8 × that many requests) to find the rate it sustains.
2. **Runs.** Three fresh servers with ``--trace``, each offered Poisson arrivals for
   ``--duration`` seconds by ``edgeserve bench run``: the *calibration* run (``--calib-mix`` at
   ``--calib-load`` of its capacity) and two *held-out* runs with other mixes and rates, one light
   (``--low-mix`` at ``--low-load`` < 0.6) and one near saturation (``--high-mix`` at
   ``--high-load`` > 0.85), and ``--generated`` more drawn from ``--generated-seed`` (other
   sizes, loads and output lengths: :func:`generated_kinds`).
   A fourth run repeats the calibration run on a fresh server: measured against measured, it
   shows how far the runtime moves between identical runs.
3. **Calibrate** on the first trace only (:func:`sim.fit.calibrate.calibrate_traces` → profile YAML).
4. **Validate** on each held-out trace (:func:`sim.fit.validate.validate`): measured vs simulated
   TTFT/TPOT/ITL/E2E mean, p50, p90, p99, throughput, stages, stall, and CDF plots; beside each
   target's error, whether the 90 % prediction interval (``--draws`` profiles drawn from the
   calibration's uncertainty) holds the measured figure, and that coverage over all held-out
   targets at the end.

Server and client are pinned with ``taskset`` (``--server-cpus``, ``--client-cpus``); the load
average is printed before and after. Targets: TTFT and E2E p50 within 5 %, p99 within
10 %, throughput within 3 %, on both held-out runs.

    .venv/bin/python benchmarks/sim_fidelity.py --out results/sim_fidelity
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_soak import start_server, stop_server

TARGETS = {"ttft p50": 0.05, "e2e p50": 0.05, "ttft p99": 0.10, "e2e p99": 0.10,
           "throughput req/s": 0.03}


def generated_kinds(seed: int, n: int) -> dict[str, tuple[str, float, str]]:
    """``n`` held-out kinds drawn from ``seed``: name → (size mix, load, output length). Two or
    three sizes each (4:3 or 16:9, 320–4200 px wide, so some fall between the calibration's
    sizes and some beyond them), a load of 0.3–0.9 of capacity, 8–96 output tokens."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = {}
    for k in range(1, n + 1):
        sizes = []
        for _ in range(int(rng.integers(2, 4))):
            w = int(rng.integers(40, 526)) * 8
            h = round(w * (0.75 if rng.random() < 0.5 else 0.5625))
            sizes.append(f"{w}x{h}:1")
        lo = int(rng.integers(8, 65))
        out[f"gen{k}"] = (",".join(sizes), round(float(rng.uniform(0.3, 0.9)), 2),
                          f"{lo}-{lo + int(rng.integers(0, 33))}")
    return out


def bench(url: str, *, mix: str, rate: float | None, duration: float, out: Path,
          cpus: str, concurrency: int | None = None, seed: int = 11,
          output_len: str = "16") -> dict[str, Any]:
    cmd = ["taskset", "-c", cpus, sys.executable, "-m", "edgeserve", "bench", "run",
           "--url", url, "--images", mix, "--output-len", output_len,
           "--no-progress", "--save-result", str(out), "--seed", str(seed)]
    if concurrency is not None:  # closed loop: a fixed count (a duration needs a finite rate)
        cmd += ["--max-concurrency", str(concurrency), "--num-prompts", str(8 * concurrency)]
    else:
        cmd += ["--request-rate", f"{rate:.4f}", "--duration", str(duration)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return dict(json.loads(out.read_text()))


def served_run(name: str, out: Path, args: argparse.Namespace, *, mix: str, rate: float | None,
               concurrency: int | None = None, trace: bool = True,
               seed: int = 11, output_len: str = "16") -> dict[str, Any]:
    extra = ["--trace", str(out / f"{name}.jsonl")] if trace else []
    print(f"  [{name}] load average at start: {os.getloadavg()[0]:.2f}", flush=True)
    server, url = start_server(out, extra, name, prefix=["taskset", "-c", args.server_cpus])
    try:
        return bench(url, mix=mix, rate=rate, duration=args.duration,
                     out=out / f"{name}-bench.json", cpus=args.client_cpus,
                     concurrency=concurrency, seed=seed, output_len=output_len)
    finally:
        stop_server(server)


def record(runs: dict[str, tuple[str, float, int, str]], out: Path,
           args: argparse.Namespace) -> tuple[dict[str, float], dict[str, float]]:
    """Probe each (mix, output length)'s capacity, then record every run's trace under ``out``."""
    capacity: dict[str, float] = {}
    for mix, olen in dict.fromkeys((m, o) for m, _, _, o in runs.values()):
        r = served_run(f"probe-{len(capacity)}", out, args, mix=mix, rate=None,
                       concurrency=args.probe_concurrency, trace=False, output_len=olen)
        capacity[f"{mix} {olen}"] = float(r["request_throughput"])
        print(f"capacity of {mix}, {olen} tokens: {capacity[f'{mix} {olen}']:.2f} req/s",
              flush=True)
    offered = {}
    for name, (mix, load, seed, olen) in runs.items():
        offered[name] = load * capacity[f"{mix} {olen}"]
        print(f"run {name}: {mix}, {olen} tokens at {offered[name]:.2f} req/s ({load:g} × "
              f"capacity) for {args.duration:g} s, arrivals seed {seed}", flush=True)
        served_run(name, out, args, mix=mix, rate=offered[name], seed=seed, output_len=olen)

    (out / "runs.json").write_text(json.dumps({"capacity_rps": capacity, "offered_rps": offered}))
    return capacity, offered


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=float, default=90.0, help="seconds of load per run")
    p.add_argument("--probe-concurrency", type=int, default=8)
    # sizes on both sides of the JPEG downscale thresholds (4200x3150 decodes at 1/2), so the
    # decode and resize models can tell source pixels from decoded ones, and spanning the
    # held-out kinds' sizes (221-1260 image tokens, 0.17-13 MP sources), so that the validation
    # interpolates between fitted sizes instead of extrapolating (sim.scenario.fitted_range)
    p.add_argument("--calib-mix",
                   default="480x360:1,800x600:1,1280x800:1,2400x1800:1,4200x3150:1")
    p.add_argument("--calib-load", type=float, default=0.7)
    p.add_argument("--low-mix", default="640x480:1,1280x720:1")
    p.add_argument("--low-load", type=float, default=0.5)
    p.add_argument("--high-mix", default="12mp")
    p.add_argument("--high-load", type=float, default=0.9)
    p.add_argument("--server-cpus", default="0,1")
    p.add_argument("--client-cpus", default="0,1")
    p.add_argument("--out", type=Path, default=Path("results/sim_fidelity"))
    p.add_argument("--repeats", type=int, default=2,
                   help="fresh-server runs of each kind, pooled (the calibration kind: at least 2)")
    p.add_argument("--calib-repeats", type=int, default=None,
                   help="fresh-server runs of the calibration kind (default: --repeats, at least "
                        "2); more servers measure the server-to-server level better, and the "
                        "prediction intervals narrow with them")
    p.add_argument("--seeds", type=int, default=20,
                   help="simulated replays pooled per trace; also the seeds of the simulator's "
                        "spread of each figure (20: a 95 %% range)")
    p.add_argument("--generated", type=int, default=2, metavar="N",
                   help="held-out kinds drawn from --generated-seed besides low and high: other "
                        "sizes, rates and output lengths (default 2)")
    p.add_argument("--generated-seed", type=int, default=2026)
    p.add_argument("--draws", type=int, default=20,
                   help="profiles drawn from the calibration's uncertainty for each held-out "
                        "kind's 90 %% prediction intervals (0: none)")
    p.add_argument("--analyse-only", action="store_true",
                   help="skip the runs: calibrate and validate the traces already in --out")
    args = p.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    print(f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
    # every kind of run is recorded --repeats times on fresh servers and pooled, so that a p99
    # rests on several runs' requests; the calibration runs repeat the same arrivals (bench seed
    # 11), so calib-1 against calib-2 shows how far the runtime moves between identical runs
    # (the floor under any simulator's error); held-out repeats draw other arrivals
    reps = max(1, args.repeats)
    calib_reps = max(2, args.calib_repeats or reps)
    # (interleaved, calib-1, low-1, high-1, calib-2, …, so a drift of the machine spreads over all)
    runs: dict[str, tuple[str, float, int, str]] = {}
    generated = generated_kinds(args.generated_seed, args.generated)
    for i in range(1, max(calib_reps, reps) + 1):
        for kind, mix, load, n, olen in (
                ("calib", args.calib_mix, args.calib_load, calib_reps, "16"),
                ("low", args.low_mix, args.low_load, reps, "16"),
                ("high", args.high_mix, args.high_load, reps, "16"),
                *((g, m, ld, reps, o) for g, (m, ld, o) in generated.items())):
            if i <= n:
                runs[f"{kind}-{i}"] = (mix, load, 11 if kind == "calib" else 10 + i, olen)
    if args.analyse_only:
        saved = json.loads((out / "runs.json").read_text())
        capacity, offered = saved["capacity_rps"], saved["offered_rps"]
    else:
        capacity, offered = record(runs, out, args)
    groups = {k: [out / f"{n}.jsonl" for n in runs if n.startswith(k + "-")]
              for k in ("calib", "low", "high", *generated)}

    import yaml

    from sim.experiments.plots import validation_cdfs
    from sim.fit.calibrate import calibrate_traces
    from sim.fit.fit_format import format_fits
    from sim.fit.profile_writer import to_profile
    from sim.fit.speed_level import speed_level, with_speed_level
    from sim.fit.traces import read_traces
    from sim.fit.validate import (
        Side,
        Validation,
        interval_text,
        local_records,
        prediction_intervals,
        spread_text,
        validate_runs,
    )

    cal = calibrate_traces(read_traces(groups["calib"]))
    print(format_fits(cal))
    profile = to_profile(cal, None, "fidelity-calib", [str(t) for t in groups["calib"]])
    (out / "calib-profile.yaml").write_text(yaml.safe_dump(profile, sort_keys=False))
    report: dict[str, Any] = {"capacity_rps": capacity, "offered_rps": offered,
                              "repeats": reps, "calib_repeats": calib_reps,
                              "generated": generated, "runs": {}}
    held: list[bool] = []  # per held-out latency target: the measured figure inside its interval
    for name, traces in groups.items():
        v = validate_runs(profile, traces, profile_name="fidelity-calib", seeds=args.seeds)
        if name != "calib" and args.draws:
            v.prediction = prediction_intervals(profile, traces, draws=args.draws)
        print(("\n(in-sample) " if name == "calib" else "\n(held out) ") + v.format())
        validation_cdfs(v, out / f"cdf_{name}.png")
        rows = {q: (a, b, e) for q, a, b, e in v.rows()}
        report["runs"][name] = v.as_dict()
        if name != "calib":
            ivs = v.measured_intervals()
            spread = v.simulated_spread()
            for q, bound in TARGETS.items():
                a, b, e = rows.get(q, (None, None, None))
                verdict = "—" if e is None else ("met" if abs(e) <= bound else "MISSED")
                notes = [interval_text(a, b, ivs.get(q), "measured's own 95 %: {lo} … {hi} %{inside}",
                                       ", simulated inside it"),
                         spread_text(a, spread.get(q))]
                if notes[1]:
                    notes[1] = f"simulator's spread of a measurement: {notes[1]}"
                own = f" ({'; '.join(n for n in notes if n)})" if any(notes) else ""
                pred = v.prediction.get(q)
                if pred is not None and a is not None:
                    held.append(pred[0] <= a <= pred[1])
                    own += (f" [90 % prediction {pred[0] * 1e3:.4g} … {pred[1] * 1e3:.4g} ms: "
                            f"{'holds' if held[-1] else 'misses'} the measured]")
                print(f"  target {q:18s} ±{bound * 100:.0f} %: "
                      f"{'—' if e is None else f'{e * 100:+.1f} %'} {verdict}{own}")
        # the same replays with each server's own speed level, measured from its steps: an oracle
        # (the level comes from the run compared with), so what is left is the model's error
        levels = [speed_level(cal, read_traces([t])) for t in traces]
        if all(lv is not None for lv in levels):
            known = [float(lv) for lv in levels if lv is not None]
            o = validate_runs(profile, traces, profile_name="fidelity-calib", seeds=args.seeds,
                              trace_profiles=[with_speed_level(profile, cal, lv) for lv in known])
            errs = {q: e for q, _a, _b, e in o.rows()}
            report["runs"][name]["oracle_level"] = {
                "levels": known, "rel_error": {q: errs.get(q) for q in TARGETS}}
            print(f"  with each server's own speed level (measured from its steps: "
                  f"{', '.join(f'{lv:.3f}' for lv in known)} × the step model; an oracle, not a "
                  "prediction):")
            print("    " + ", ".join(f"{q} {'—' if (e := errs.get(q)) is None else f'{e * 100:+.1f} %'}"
                                     for q in TARGETS))
    if held:
        report["prediction_coverage"] = {"held": sum(held), "of": len(held), "nominal": 0.9}
        print(f"\n90 % prediction intervals held {sum(held)} of {len(held)} held-out latency "
              f"targets ({sum(held) / len(held) * 100:.0f} %; nominal 90 %)")
    sides = []
    for t in groups["calib"][:2]:
        side = Side()
        for r in local_records(t):
            side.add(r)
        sides.append(side)
    noise = Validation(sides[0], sides[1], str(groups["calib"][1]), "calib-1 (measured)")
    print("\n(run to run) calib-2 against calib-1: the same arrivals on a fresh server, "
          "measured vs measured:")
    for q, _a, _b, e in noise.rows():
        if q in TARGETS or q.startswith(("tpot", "ttft", "e2e")):
            print(f"  {q:18s} {'—' if e is None else f'{e * 100:+.1f} %'}")
    report["run_to_run"] = noise.as_dict()
    report["loadavg_1m_after"] = os.getloadavg()[0]
    (out / "sim_fidelity.json").write_text(json.dumps(report, indent=1))
    print(f"\nload average after: {os.getloadavg()[0]:.2f}; wrote {out / 'sim_fidelity.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
