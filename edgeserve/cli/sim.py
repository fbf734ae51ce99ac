"""``edgeserve sim``: simulate edge devices, networks, cloud servers and offload policies.

Subcommands:

* ``run [SCENARIO]``     one run (no argument: the built-in default scenario); prints the
                         per-device and fleet summary; optional trace, JSON summary and plots.
* ``compare [SCENARIO]`` several policies on the same workload and seeds; mean ± 95 % CI table,
                         latency CDF, temperature/clock and offload-share plots.
* ``sweep [SCENARIO]``   a parameter grid (``--param KEY=V1,V2``) × policies × seeds on a local
                         process pool or a Ray cluster (``--ray [ADDRESS]``); table, CSV, the
                         best point per value of the last axis, a plot against it (``--plots``);
                         with ``--out`` an interrupted sweep resumes where it stopped. Replicas
                         or TP: ``--param cloud[0].deployment.tp_size=1,2,4`` (scenario
                         ``replicas-tp``).
* ``replicas-tp``        replicas or tensor parallelism for a box's GPUs at a rate and SLO
                         (``sim/experiments/replicas_tp.py``); table, verdict, JSON and a plot.
* ``profiles`` / ``policies``  list what ships.

SCENARIO is a YAML file or the name of a built-in scenario. ``--set KEY.PATH=VALUE`` overrides
any field, profiles included (``--set devices[0].profile.thermal.r_c_per_w=5``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("scenario", nargs="?", default=None,
                   help="scenario YAML file or built-in name (default: the built-in default)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a scenario field, e.g. devices[0].count=4 (repeatable)")
    p.add_argument("--requests", type=int, help="stop arrivals after this many requests")
    p.add_argument("--duration", type=float, metavar="S",
                   help="stop arrivals after this much simulated time (s)")
    p.add_argument("--out", type=Path, help="directory for traces, summaries and plots")
    p.add_argument("--plots", action="store_true", help="write PNG plots into --out")


def add_parser(subparsers: Any, help_: str) -> None:
    parser = subparsers.add_parser(
        "sim", help=help_, description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="sim_command", metavar="SUBCOMMAND", required=True)

    run = sub.add_parser("run", help="run one scenario and print its summary",
                         description="Run one scenario and print its summary. A device whose "
                         "profile was calibrated (edgeserve calibrate) and whose workload asks "
                         "for image sizes outside the profile's fitted_range gets a note on "
                         "stderr: the profile extrapolates there.")
    _common(run)
    run.add_argument("--policy", help="policy name, with its default params (default: the "
                     "scenario's); --set policy.params.NAME=VALUE sets one")
    run.add_argument("--seed", type=int, help="random seed (default: the scenario's)")
    run.add_argument("--trace", type=Path,
                     help="write per-request records here (default: OUT/trace.jsonl with --out)")
    run.add_argument("--json", action="store_true", help="print the summary as JSON")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.add_argument("--replay-gateway", metavar="TRACE", type=Path,
                     help="simulate a trace of `edgeserve gateway --trace`: its arrivals, image "
                     "sizes and token counts on its device profile under its policy (the "
                     "scenario gives the link and cloud); prints offload share and TTFT/E2E "
                     "p50/p99 live beside simulated")
    run.add_argument("--cloud-profile", metavar="PROFILE",
                     help="with --replay-gateway: a calibrated server profile (`edgeserve "
                     "calibrate`) of the server that stood for the cloud; it replaces the "
                     "scenario's cloud (its step model and preprocessing)")
    run.add_argument("--draws", type=int, default=None, metavar="N",
                     help="after the point estimate, run N more times, each device's calibrated "
                          "profile drawn from its uncertainty section and each run with its own "
                          "seed, and print a 90 %% prediction interval of every latency figure "
                          "(default: 20 when a profile has the section, else none; 0: none)")
    run.set_defaults(func=_run)

    cmp_ = sub.add_parser("compare", help="several policies on the same workload and seeds")
    _common(cmp_)
    cmp_.add_argument("--policies", default="always_local,always_cloud,predicted_latency",
                      help="comma-separated policy names")
    cmp_.add_argument("--seeds", type=int, default=3, help="number of seeds (0..N-1)")
    cmp_.add_argument("--workers", type=int, default=0, help="processes (default: CPU count)")
    cmp_.add_argument("--ray", action="store_true",
                      help="run on the Ray cluster `ray start --head` started on this machine "
                           "(pip install 'edgeserve[ray]')")
    cmp_.add_argument("--traces", action="store_true", help="write a trace per run into --out")
    cmp_.set_defaults(func=_compare)

    sw = sub.add_parser(
        "sweep", help="a parameter grid on a process pool (or Ray)",
        description="A grid of runs (--param axes × --policies × --seeds) on a local process pool "
                    "or a Ray cluster. With --out every finished run is written to "
                    "OUT/sweep-runs.jsonl at once; the same command on the same --out resumes an "
                    "interrupted sweep, running only the missing points. After the table: per "
                    "value of the last --param, the point with the highest SLO attainment; "
                    "--plots draws p99 latency, TTFT p99 and SLO attainment against the last "
                    "--param (OUT/sweep.png). Replicas or tensor parallelism on a box: "
                    "edgeserve sim sweep replicas-tp --param 'cloud[0].deployment.tp_size=1,2,4' "
                    "--param 'devices[0].workload.rate_hz=2,8,16,32' --plots --out OUT "
                    "(a box's replicas default to its GPUs / tp_size).")
    _common(sw)
    sw.add_argument("--param", action="append", default=[], metavar="KEY=V1,V2,…",
                    help="a sweep axis (repeatable; the grid is their product; the last one is "
                         "the x axis of the verdict and the plot), e.g. "
                         "cloud[0].deployment.tp_size=1,2,4")
    sw.add_argument("--policies", default="", help="comma-separated policies (default: scenario's)")
    sw.add_argument("--seeds", type=int, default=1, help="number of seeds (0..N-1)")
    sw.add_argument("--workers", type=int, default=0,
                    help="local processes (default: CPU count; ignored with --ray)")
    sw.add_argument("--ray", nargs="?", const="auto", default=None, metavar="ADDRESS",
                    help="one Ray task per run on an existing cluster: alone, the one `ray start "
                         "--head` started here; or HOST:PORT; or 'local' for a private one. "
                         "Needs pip install 'edgeserve[ray]'")
    sw.add_argument("--retries", type=int, default=3,
                    help="re-runs of a run whose worker died (default 3)")
    sw.add_argument("--no-progress", action="store_true", help="no progress bar")
    sw.set_defaults(func=_sweep)

    rtp = sub.add_parser("replicas-tp", help="replicas or tensor parallelism? every layout of "
                         "a box's GPUs at a rate and SLO (sim/experiments/replicas_tp.py)",
                         description="Simulate N GPUs of a box as N/tp replicas of tp GPUs "
                         "(tp = 1, 2, 4, …) at rates around --rate; say which layouts meet the "
                         "SLO (TTFT p99, TPOT p99) and which is best at --rate. The model: "
                         "sim/experiments/replicas_tp.py and docs/sim.md.")
    _replicas_tp_args(rtp)
    rtp.set_defaults(func=_replicas_tp)

    prof = sub.add_parser("profiles", help="list the shipped device and server profiles")
    prof.set_defaults(func=_profiles)
    pol = sub.add_parser("policies", help="list the available policies")
    pol.set_defaults(func=_policies)


def _error(msg: str) -> int:
    print(f"edgeserve sim: {msg}", file=sys.stderr)
    return 2


def _overrides(args: argparse.Namespace) -> list[tuple[str, Any]]:
    from sim.scenario.config import parse_override

    ov = [parse_override(o) for o in args.overrides]
    if args.requests is not None:
        ov.append(("requests", args.requests))
        if args.duration is None:
            ov.append(("duration_s", None))
    if args.duration is not None:
        ov.append(("duration_s", args.duration))
    return ov


def _workers(n: int) -> int:
    return n if n > 0 else (os.cpu_count() or 1)


def _guard(fn: Any) -> Any:
    """Turn user errors (bad scenario, missing file, no ray) into one-line messages."""

    def wrapped(args: argparse.Namespace) -> int:
        from sim.scenario.schema import ConfigError

        try:
            return int(fn(args))
        except (ConfigError, RuntimeError, FileNotFoundError) as e:
            return _error(str(e))

    return wrapped


@_guard
def _run(args: argparse.Namespace) -> int:
    from sim.core.report import format_summary
    from sim.experiments.runner import RunSpec, run_spec
    from sim.scenario.config import load_raw

    if args.replay_gateway is not None:
        from sim.experiments.gateway_replay import format_replay, replay

        print(format_replay(*replay(args.replay_gateway, args.scenario, _overrides(args),
                                    args.seed, args.cloud_profile)))
        return 0
    raw, _ = load_raw(args.scenario)
    trace = args.trace
    if trace is None and args.out is not None:
        trace = args.out / "trace.jsonl"
    # --policy first, so that --set policy.params.NAME=V applies to it
    chosen = [] if args.policy is None else [("policy", {"kind": args.policy})]
    spec = RunSpec(raw=raw, seed=args.seed, overrides=chosen + _overrides(args),
                   trace_path=None if trace is None else str(trace))
    from sim.fit.scenario_notes import scenario_notes
    from sim.scenario.config import scenario_from_raw

    scenario = scenario_from_raw(raw, None, spec.overrides)  # validate before starting
    for note in scenario_notes(scenario):  # a calibrated profile asked for sizes it never saw
        print(f"edgeserve sim: note: {note}", file=sys.stderr)
    result = run_spec(spec, progress=not args.no_progress and not args.json and sys.stderr.isatty())
    s = result.summary
    from sim.experiments.prediction_runs import (
        format_intervals,
        run_intervals,
        shown_row,
        uncertain,
    )
    from sim.fit.prediction import DRAWS

    draws = (DRAWS if uncertain(raw) else 0) if args.draws is None else max(0, args.draws)
    ivs = run_intervals(spec, draws=draws) if draws else {}
    if args.json:
        out = s.to_dict()
        if ivs:
            out["prediction_intervals"] = {k: list(v) for k, v in ivs.items()}
        print(json.dumps(out, indent=2, default=str))
    else:
        print(format_summary(s))
        print(f"({result.wall_s:.2f} s wall, {s.events / max(result.wall_s, 1e-9):,.0f} events/s)")
        if ivs:
            print(format_intervals(shown_row(s), ivs, draws))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "summary.json").write_text(json.dumps(s.to_dict(), indent=2, default=str))
        if args.plots:
            from sim.experiments.plots import all_plots

            for p in all_plots([result], args.out):
                print(f"wrote {p}")
    if trace is not None:
        print(f"wrote {trace}")
    return 0


@_guard
def _compare(args: argparse.Namespace) -> int:
    from sim.core.policies import POLICIES
    from sim.experiments.compare import compare, format_comparison
    from sim.scenario.config import load_raw

    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        return _error(f"unknown policy {unknown[0]!r} (known: {', '.join(POLICIES)})")
    if args.seeds < 1:
        return _error("--seeds must be >= 1")
    raw, _ = load_raw(args.scenario)
    ov = _overrides(args)
    from sim.scenario.config import scenario_from_raw

    scenario_from_raw(raw, None, ov)
    trace_dir = None
    if args.traces:
        if args.out is None:
            return _error("--traces needs --out")
        args.out.mkdir(parents=True, exist_ok=True)
        trace_dir = str(args.out)
    results = compare(raw, policies, list(range(args.seeds)), _workers(args.workers), args.ray,
                      ov, trace_dir)
    print(format_comparison(results))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "compare.json").write_text(json.dumps(
            [{"label": r.spec_label, "summary": r.summary.to_dict()} for r in results],
            indent=2, default=str))
        if args.plots:
            from sim.experiments.plots import all_plots

            for p in all_plots(results, args.out):
                print(f"wrote {p}")
    return 0


@_guard
def _sweep(args: argparse.Namespace) -> int:
    from sim.experiments.distribute import ExecConfig, import_ray
    from sim.experiments.sweep import (
        format_sweep,
        parse_axis,
        rows,
        run_specs,
        specs_for,
        verdict,
        write_csv,
    )
    from sim.experiments.sweep_store import FILE_NAME
    from sim.scenario.config import load_raw

    if not args.param:
        return _error("give at least one --param KEY=V1,V2,…")
    if args.ray is not None:
        import_ray()  # before any work: say how to install it
    axes = [parse_axis(p) for p in args.param]
    policies: list[str | None] = [p.strip() for p in args.policies.split(",") if p.strip()] or [None]
    raw, _ = load_raw(args.scenario)
    from sim.scenario.config import set_path

    for key, value in _overrides(args):
        set_path(raw, key, value)
    specs = specs_for(raw, axes, policies, list(range(max(1, args.seeds))))
    cfg = ExecConfig(workers=_workers(args.workers), ray_address=args.ray, retries=args.retries)
    store = args.out / FILE_NAME if args.out is not None else None
    try:
        run = run_specs(specs, cfg, args.out, progress=not args.no_progress)
    except KeyboardInterrupt:
        if store is None:
            print("edgeserve sim: interrupted (without --out nothing was kept)", file=sys.stderr)
        else:
            print(f"edgeserve sim: interrupted; finished runs are in {store}: the same command "
                  "resumes from there", file=sys.stderr)
        return 130
    if run.reused:
        print(f"resumed: {run.reused} of {len(specs)} runs read from {store}, {run.ran} run now")
    data = rows(run.results)
    print(format_sweep(data))
    x_key = axes[-1][0]
    if len(data) > 1:
        print("\n".join(verdict(data, x_key)))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        write_csv(args.out / "sweep.csv", data)
        print(f"wrote {args.out / 'sweep.csv'}")
        if args.plots:
            from sim.experiments.plots import latency_cdf, sweep_lines

            print(f"wrote {latency_cdf(run.results, args.out / 'latency_cdf.png', key='policy')}")
            print(f"wrote {sweep_lines(data, x_key, args.out / 'sweep.png')}")
    return 0


def _replicas_tp_args(p: argparse.ArgumentParser) -> None:
    from sim.experiments.replicas_tp import add_arguments

    add_arguments(p)


def _replicas_tp(args: argparse.Namespace) -> int:
    from sim.experiments.replicas_tp import run_cli

    return run_cli(args)


def _profiles(args: argparse.Namespace) -> int:
    from sim.scenario.config import PROFILE_DIR, available_profiles
    from sim.scenario.deployment import BOX_DIR
    from sim.scenario.schema import load_yaml

    paths = [PROFILE_DIR / f"{name}.yaml" for name in available_profiles()]
    boxes = sorted(BOX_DIR.glob("*.yaml"))  # cloud profiles with a deployment: section
    width = max(22, *(len(p.stem) for p in paths + boxes))
    for path in paths + boxes:
        data = load_yaml(path) or {}
        kind = "box   " if path in boxes else "cloud " if "gpu" in data else "device"
        desc = " ".join(str(data.get("description", "")).split())
        print(f"{path.stem:{width}s} {kind}  {desc[:90]}")
    return 0


def _policies(args: argparse.Namespace) -> int:
    from sim.core.policies import describe

    for name, doc in describe():
        print(f"{name:18s} {doc}")
    return 0


def run(args: argparse.Namespace) -> int:
    return int(args.func(args))
