"""``edgeserve calibrate TRACE... --out PROFILE.yaml``: fit simulator device profiles from traces.

Reads the request records of runtime traces (``edgeserve serve --trace``) and fits the per-stage
service-time models of a device profile: image decode, resize and normalize against source and
target pixels, encode against image tokens, prefill against prompt tokens, and the decode-step
time against the number of requests decoding at once (see :mod:`sim.fit.calibrate`). Where the trace
holds the engine's per-step records, the engine's step-time model (``llm.step``: seconds per step
against prefill, decode, context and encoder tokens) is fitted from them, and the engine's limits
(max_num_seqs, token budget, KV tokens) and the number of preprocessing workers are taken from the
trace, overriding ``--base``. The profile also records the sizes it was fitted on
(``fitted_range``: image tokens, pixels, prompt tokens); validate ends with a note for held-out
requests outside them, where the profile extrapolates. Power and thermal values come from ``--base`` (a shipped profile
name or a YAML file), or are placeholders.

``edgeserve calibrate record --out TRACE.jsonl [--url URL] [--budget-s 180]`` drives the server
through a schedule designed to identify every term the calibrator fits (image sizes across the
model's pixel budget and the JPEG downscale threshold, batch depths up to max_num_seqs, decode
waves (requests sent together: decode-only steps at depth), steps beside busy workers and
without, idle gaps before fresh shapes, text-only requests; see
:mod:`edgeserve.bench.calibration_schedule`). Without ``--url`` it starts the default server with
``--trace TRACE.jsonl``, stops it afterwards and writes the schedule into the trace's header.

``edgeserve calibrate validate PROFILE HELDOUT... [--pool] [--out-dir DIR]`` replays each held-out trace's
arrivals and sizes through the profile (one device, every request local) and prints measured vs
simulated TTFT, TPOT, ITL and E2E (mean, p50, p90, p99), throughput, per-stage means and the stall
fraction with relative errors, each measured latency figure beside its own 95 % interval (a block
bootstrap over 10 s of arrivals: could another run of the same load have shown the simulated
figure?) (``--pool``: the traces as repeated runs of one kind, compared as one); with ``--out-dir`` it writes the table as JSON and the
measured-vs-simulated CDFs as PNG (see :mod:`sim.fit.validate`). A profile with an ``uncertainty``
section (what calibrate writes: each coefficient's 90 % interval, the spread of servers' levels)
also gets a 90 % prediction interval beside each simulated latency figure, from ``--draws``
profiles drawn from it (:mod:`sim.fit.prediction`); ``--json FILE`` writes the figures and their
intervals.

``edgeserve calibrate thermal CURVE.csv --profile P [--out PROFILE.yaml]`` fits a profile's thermal
network (heat capacities, resistances, optionally the clock law) to a measured throughput-or-clock
curve (see :mod:`edgeserve.cli.calibrate_thermal`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def add_parser(subparsers: Any, help_: str) -> None:
    p = subparsers.add_parser("calibrate", help=help_, description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("traces", nargs="+", type=Path, metavar="TRACE",
                   help="trace files (JSON Lines); or 'validate PROFILE HELDOUT...'; or 'record' "
                        "(with --out TRACE); or 'thermal CURVE.csv --profile P'")
    p.add_argument("--out", type=Path, help="profile YAML to write (required unless validate)")
    p.add_argument("--out-dir", type=Path,
                   help="validate: write validation.json and the CDF plots here")
    p.add_argument("--seeds", type=int, default=5,
                   help="validate: pool this many simulated replays (seeds 1…N) per trace, so the "
                        "simulated percentiles carry less of one seed's luck; with 5 or more, "
                        "each figure also gets the simulator's own spread over the seeds "
                        "(2.5-97.5 %%; 20 seeds make it a real 95 %% range) (default 5)")
    p.add_argument("--pool", action="store_true",
                   help="validate: the HELDOUT traces are repeated runs of one kind; compare them "
                        "as one, pooling their measured requests and their replays")
    p.add_argument("--draws", type=int, default=None, metavar="N",
                   help="validate: draw N profiles from the profile's uncertainty section (its "
                        "coefficients' intervals and the spread of servers' levels) and give each "
                        "latency figure a 90 %% prediction interval beside the point estimate "
                        "(default: 20 when the profile has the section, else none; 0: none)")
    p.add_argument("--json", dest="json_out", type=Path, metavar="FILE",
                   help="validate: write {\"ttft_p50\": {\"measured\", \"simulated\", "
                        "\"interval\"}, …} in seconds (several traces without --pool: one such "
                        "mapping per trace)")
    p.add_argument("--url", help="record: the server to drive (default: start the default "
                                 "server with --trace OUT and stop it afterwards)")
    p.add_argument("--budget-s", type=float, default=180.0, metavar="S",
                   help="record: about how long the designed run takes (default 180)")
    p.add_argument("--image-rate", type=float, default=1.0, metavar="RPS",
                   help="record: image requests per second in the image phases (default 1)")
    p.add_argument("--model", dest="record_model", metavar="DIR",
                   help="record, with --url: the model folder the server serves (its pixel "
                        "budget sizes the schedule's images; default: the default model)")
    p.add_argument("--max-num-seqs", dest="record_max_num_seqs", type=int, metavar="N",
                   help="record, with --url: the server's max_num_seqs (the deepest batch the "
                        "schedule holds; default: the default server's)")
    p.add_argument("--max-pixels", dest="record_max_pixels", type=int, metavar="N",
                   help="record, with --url: the server's --max-pixels (default: the model's)")
    p.add_argument("--base", help="profile to start from (shipped name or YAML path)")
    p.add_argument("--name", help="profile name (default: the --out file's stem)")
    from edgeserve.cli.calibrate_thermal import add_arguments

    add_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.traces and str(args.traces[0]) == "record":
        from edgeserve.cli.calibrate_record import run_record

        return run_record(args)
    if args.traces and str(args.traces[0]) == "validate":
        return run_validate(args.traces[1:], args.out_dir, max(1, args.seeds), pool=args.pool,
                            draws=args.draws, json_out=args.json_out)
    if args.traces and str(args.traces[0]) == "thermal":
        from edgeserve.cli.calibrate_thermal import run_thermal

        return run_thermal(args.traces[1:], args)
    if args.out is None:
        print("edgeserve calibrate: --out PROFILE.yaml is required", file=sys.stderr)
        return 2
    import yaml

    from edgeserve.records import TraceError
    from sim.fit.calibrate import calibrate_traces
    from sim.fit.fit_format import format_fits
    from sim.fit.profile_writer import to_profile
    from sim.fit.traces import read_traces
    from sim.scenario.config import resolve_profile_path
    from sim.scenario.profiles import DeviceProfile
    from sim.scenario.schema import ConfigError, build, load_yaml

    try:
        for t in args.traces:
            if not t.exists():
                raise ConfigError(f"{t}: no such trace file")
        cal = calibrate_traces(read_traces(args.traces))
        if not cal.fits and cal.step is None:
            raise ConfigError("no stage could be fitted: the traces hold no usable local requests")
        base = load_yaml(resolve_profile_path(args.base, Path.cwd())) if args.base else None
        name = args.name or args.out.stem
        prof = to_profile(cal, base, name, [str(t) for t in args.traces])
        build(DeviceProfile, prof, f"profile {name}")  # what we write must load
    except (ConfigError, TraceError) as e:
        print(f"edgeserve calibrate: {e}", file=sys.stderr)
        return 2
    print(format_fits(cal))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(yaml.safe_dump(prof, sort_keys=False, allow_unicode=True, width=100))
    print(f"wrote {args.out}")
    return 0


def run_validate(paths: list[Path], out_dir: Path | None, seeds: int = 5,
                 pool: bool = False, draws: int | None = None,
                 json_out: Path | None = None) -> int:
    import json

    from edgeserve.records import TraceError
    from sim.experiments.plots import validation_cdfs
    from sim.fit.prediction import DRAWS, has_uncertainty
    from sim.fit.validate import prediction_intervals, validate, validate_runs
    from sim.scenario.config import resolve_profile_path
    from sim.scenario.schema import ConfigError, load_yaml

    if len(paths) < 2:
        print("edgeserve calibrate validate: give PROFILE and at least one HELDOUT trace",
              file=sys.stderr)
        return 2
    profile_ref, traces = str(paths[0]), paths[1:]
    try:
        profile = load_yaml(resolve_profile_path(profile_ref, Path.cwd()))
        results = []
        for t in traces:
            if not t.exists():
                raise ConfigError(f"{t}: no such trace file")
        n_draws = (DRAWS if has_uncertainty(profile) else 0) if draws is None else max(0, draws)
        if n_draws:
            print(f"prediction intervals: {n_draws} profiles drawn from {profile_ref}'s "
                  "uncertainty, each replayed with its own seed", file=sys.stderr)
        if pool:
            results.append(validate_runs(profile, traces, profile_name=profile_ref, seeds=seeds))
            if n_draws:
                results[-1].prediction = prediction_intervals(profile, traces, draws=n_draws)
            print(results[-1].format())
        for t in traces if not pool else []:
            v, _ = validate(profile, t, profile_name=profile_ref, seeds=seeds)
            if n_draws:
                v.prediction = prediction_intervals(profile, [t], draws=n_draws)
            print(v.format())
            results.append(v)
    except (ConfigError, TraceError, ValueError) as e:
        print(f"edgeserve calibrate validate: {e}", file=sys.stderr)
        return 2
    if json_out is not None:
        doc = (results[0].figures_json() if len(results) == 1
               else {v.trace: v.figures_json() for v in results})
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(doc, indent=1))
        print(f"wrote {json_out}")
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "validation.json").write_text(
            json.dumps([v.as_dict() for v in results], indent=1))
        for v in results:
            validation_cdfs(v, out_dir / ("cdf_pooled.png" if pool else f"cdf_{Path(v.trace).stem}.png"))
        print(f"wrote {out_dir / 'validation.json'} and the CDF plots")
    return 0
