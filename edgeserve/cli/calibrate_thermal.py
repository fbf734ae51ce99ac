"""``edgeserve calibrate thermal CURVE.csv --profile P``: fit a profile's thermal network to a curve.

The curve is a CSV of ``t_s`` against ``throughput_tok_s`` (or ``clock_mhz``/``clock_fraction``),
optionally with ``temp_c`` (the junction's): a device decoding without pause from a cool start.
The fit moves the network's heat capacities and resistances (``--fit`` picks others, such as the
clock law's ``power_exponent``) so that the simulated continuous-load curve of the profile's
language-model unit matches it, and prints the fitted values and the error (see
:mod:`sim.fit.thermal_fit`). ``--out`` writes the profile with the fitted network.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("calibrate thermal CURVE.csv")
    g.add_argument("--profile", help="thermal: the profile to fit (shipped name or YAML path)")
    g.add_argument("--unit", help="thermal: the unit whose clock is the curve (default: the "
                                  "language model's)")
    g.add_argument("--busy", help="thermal: comma-separated units kept busy (default: --unit)")
    g.add_argument("--fit", dest="fit_params",
                   help="thermal: comma-separated parameters to fit (default: "
                        "junction_c_j_per_c,skin_c_j_per_c,r_junction_skin_c_per_w,"
                        "r_skin_ambient_c_per_w)")
    g.add_argument("--window-s", type=float, default=10.0,
                   help="thermal: a measured point is the mean over this many seconds before it "
                        "(a benchmark iteration's length; default 10)")


def run_thermal(curve_paths: list[Path], args: argparse.Namespace) -> int:
    import yaml

    from sim.fit.thermal_fit import DEFAULT_PARAMS, Load, fit_thermal, read_curve
    from sim.scenario.config import resolve_profile_path
    from sim.scenario.profiles import DeviceProfile, StageName
    from sim.scenario.schema import ConfigError, build, load_yaml

    def fail(msg: str) -> int:
        print(f"edgeserve calibrate thermal: {msg}", file=sys.stderr)
        return 2

    if len(curve_paths) != 1:
        return fail("give exactly one CURVE.csv")
    if not args.profile:
        return fail("--profile is required (a profile with a thermal_network section)")
    try:
        path = resolve_profile_path(args.profile, Path.cwd())
        raw = load_yaml(path)
        prof = build(DeviceProfile, raw, f"profile {args.profile}")
        unit = args.unit or prof.stages[StageName.PREFILL].unit
        busy = tuple(args.busy.split(",")) if args.busy else (unit,)
        for u in (unit, *busy):
            if u not in prof.units:
                raise ConfigError(f"no unit {u!r} in {args.profile} (units: {', '.join(prof.units)})")
        params = tuple(args.fit_params.split(",")) if args.fit_params else DEFAULT_PARAMS
        curve = read_curve(curve_paths[0])
        fit = fit_thermal(prof, curve, Load(busy, unit), params, window_s=args.window_s)
    except (ConfigError, FileNotFoundError) as e:
        return fail(str(e))
    print(f"fitted {', '.join(params)} of {args.profile} to {curve_paths[0]} "
          f"({len(curve.t_s)} points, {args.window_s:g} s windows)")
    for k, v in fit.params.items():
        print(f"  {k:<28} {v:10.4g}")
    print(f"  {'full-clock ' + curve.value_name:<28} {fit.full_value:10.4g}")
    assert fit.network is not None
    from sim.core.thermal_network import TwoNodeNetwork

    slow, fast = TwoNodeNetwork(fit.network).tau_s
    print(f"  time constants: fast {fast:.1f} s, slow {slow:.1f} s")
    print(f"rms relative error {fit.rms_rel:.3f}, largest after 10 s {fit.max_rel:.3f}"
          + (f", junction rms {fit.rms_temp_c:.2f} °C" if fit.rms_temp_c is not None else ""))
    print(f"{'t_s':>8} {'measured':>10} {'fitted':>10}")
    for t, m, f in zip(curve.t_s, curve.value, fit.predicted, strict=True):
        print(f"{t:8.1f} {m:10.3f} {f:10.3f}")
    if args.out is not None:
        tn = raw["thermal_network"]
        for k, v in fit.params.items():
            if k in ("power_exponent", "min_clock"):
                tn.setdefault("clocks", {}).setdefault(unit, {})[k] = round(v, 4)
            else:
                tn[k] = round(v, 4)
        for g_raw, g in zip(tn.get("governors", []), fit.network.governors, strict=True):
            if g.power_allocator is not None:
                g_raw["power_allocator"]["sustainable_power_w"] = round(
                    g.power_allocator.sustainable_power_w, 3)
        build(DeviceProfile, raw, "fitted profile")
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(yaml.safe_dump(raw, sort_keys=False, allow_unicode=True, width=100))
        print(f"wrote {args.out}")
    return 0
