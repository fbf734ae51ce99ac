"""A calibration as text: one line per fitted model and host effect."""

from __future__ import annotations

from sim.fit.calibration import Calibration
from sim.fit.profile_writer import step_period
from sim.scenario.fitted_range import span


def format_fits(cal: Calibration) -> str:
    """What ``edgeserve calibrate`` prints: each fit, its spread, fit quality and sample size."""
    lines = [f"{cal.requests} local requests, {cal.workers} workers"]
    for s, f in cal.fits.items():
        terms = " + ".join(f"{v:.4g}·{k}" for k, v in f.per.items())
        lines.append(f"  {s:13s} {f.base_s * 1000:8.3f} ms" + (f" + {terms}" if terms else "")
                     + f"   cv {f.cv:.3f}  R² {f.r2:.3f}  n {f.n}" + (f"  [{f.note}]" if f.note else ""))
    period = step_period(cal)  # as the profile holds it: the gap between steps included
    if period is not None:
        terms = " + ".join(f"{v:.4g}·{k}" for k, v in period.per.items())
        lines.append(f"  {'engine step':13s} {period.base_s * 1000:8.3f} ms"
                     + (f" + {terms}" if terms else "")
                     + f"   cv {period.cv:.3f}  R² {period.r2:.3f}  n {period.n}  [{period.note}]")
        if cal.contention_n:
            over = ("" if cal.contention_over is None else
                    f", +{cal.contention_over:.3f} s per second of a worker beyond the "
                    f"{cal.free_cores} core(s) the engine leaves free")
            lines.append(f"  {'contention':13s} steps +{cal.contention:.3f} s per second a worker was busy"
                         f"{over} (n {cal.contention_n}, {cal.host_cores} cores, engine on "
                         f"{cal.engine_threads})")
        if cal.engine_demand is not None:
            lines.append(f"  {'in-step share':13s} a step takes {cal.engine_demand:.2f} threads' "
                         f"worth of the cores from a worker beside it (n {cal.engine_demand_n}, "
                         f"engine on {cal.engine_threads or cal.host_cores})")
    if cal.cold_n:
        lines.append(f"  {'cold shapes':13s} steps +{cal.cold_factor * 100:.0f} % the first time "
                     f"a server ran their prefill length or image size (n {cal.cold_n})")
    if cal.drift_sd > 0:
        lines.append(f"  {'drift':13s} steps slow or fast together: sd {cal.drift_sd * 100:.1f} % "
                     f"(log), correlation time {cal.drift_tau_s:.3g} s, a fresh server starts "
                     f"at {cal.drift_start * 100:+.1f} %; own noise cv "
                     f"{cal.step.cv if cal.step else 0:.3f}")
    if cal.handoff_n:
        lines.append(f"  {'handoff':13s} {cal.handoff_s * 1000:8.3f} ms   median of {cal.handoff_n}")
    if cal.input_processing is not None:
        f = cal.input_processing
        terms = " + ".join(f"{v:.4g}·{k}" for k, v in f.per.items())
        lines.append(f"  {'vLLM input':13s} {f.base_s * 1000:8.3f} ms" + (f" + {terms}" if terms else "")
                     + f"   cv {f.cv:.3f}  R² {f.r2:.3f}  n {f.n}  [{f.note}]")
    for s, why in cal.skipped.items():
        lines.append(f"  {s:13s} not fitted: {why}")
    lines += format_uncertainty(cal)
    spans = ", ".join(f"{k} {span(lo, hi)}" for k, (lo, hi) in cal.fitted_range.as_dict().items())
    if spans:
        lines.append(f"  {'fitted range':13s} {spans}")
    return "\n".join(lines)


def format_uncertainty(cal: Calibration) -> list[str]:
    """Each coefficient with its interval, the terms dropped or shrunk and why, the level spread."""
    u = cal.uncertainty
    if u is None or not u.models:
        return []
    lines = [f"  {u.level * 100:.0f} % intervals (block bootstrap over {u.block_s:g} s of rows, "
             f"{u.resamples} resamples):"]
    for name, m in u.models.items():
        terms = ", ".join(f"{k} {t.value:.3g} [{t.interval[0]:.3g} … {t.interval[1]:.3g}]"
                          for k, t in m.terms.items())
        lines.append(f"    {name:13s} {terms}")
    lines += [f"  {line}" for line in cal.identification]
    if u.levels:
        lines.append(f"  {'server level':13s} {len(u.levels)} traces ran at "
                     + ", ".join(f"{v:.3f}" for v in u.levels)
                     + f" × the model: sd {u.level_sd * 100:.1f} % (log) between servers")
        if u.worker_levels:
            lines.append(f"  {'worker level':13s} the preprocessing workers ran at "
                         + ", ".join(f"{v:.3f}" for v in u.worker_levels)
                         + f" × the model: sd {u.worker_level_sd * 100:.1f} % (log)")
        if len(u.levels) < 4:
            lines.append(f"  {'':13s} a fresh server's level is predicted from {len(u.levels)} "
                         "servers (Student's t): more calibration traces narrow the intervals")
    else:
        lines.append(f"  {'server level':13s} one trace: the spread between fresh servers is "
                     "not measured (give several calibration traces to measure it)")
    return lines
