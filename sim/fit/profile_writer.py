"""A calibration written as a device-profile mapping (the step model with the gap folded in)."""

from __future__ import annotations

from typing import Any

from sim.fit.calibration import Calibration
from sim.fit.least_squares import StageFit
from sim.fit.step_fit import GAP_UNITS, STEP_FEATURES


def step_period(cal: Calibration) -> StageFit | None:
    """The step model as a profile holds it: the step's own time (vLLM's ``elapsed_ms``, what
    :attr:`Calibration.step` models) plus the gap before it (``step_gap_*``), since the simulated
    engine starts its next step when the previous one ends."""
    if cal.step is None:
        return None
    f = cal.step
    per = dict(f.per)
    for k, g in cal.step_gap_per.items():
        per[k] = per.get(k, 0.0) + g
    note = (f.note + f"; base includes a {cal.step_gap_s * 1e3:.3f} ms gap between steps"
            + "".join(f", {k} {g * 1e6:.3g} µs per {GAP_UNITS[k]} of gap"
                      for k, g in cal.step_gap_per.items()))
    return StageFit(f.stage, f.n, f.base_s + cal.step_gap_s, per, f.cv, f.r2, note)


def to_profile(cal: Calibration, base: dict[str, Any] | None, name: str,
               sources: list[str]) -> dict[str, Any]:
    """A device-profile mapping: ``base`` (or a generic skeleton) with fitted stage models."""
    if base is None:
        base = {
            "name": name,
            "units": {"cpu": {"kind": "cpu", "count": max(1, cal.workers), "idle_w": 0.1,
                              "active_w": 1.0},
                      "gpu": {"kind": "gpu", "count": 1, "idle_w": 1.0, "active_w": 10.0}},
            "stages": {s: {"unit": "cpu" if s in ("image_decode", "resize", "normalize") else "gpu"}
                       for s in ("image_decode", "resize", "normalize", "prefill", "decode_step")},
            "thermal": {"r_c_per_w": 2.0, "c_j_per_c": 50.0, "ambient_c": 25.0},
            "assumed": ["units, power and thermal values are placeholders: calibrate only fits "
                        "service times"],
        }
    prof = dict(base)
    prof["name"] = name
    stages = {k: dict(v) for k, v in prof.get("stages", {}).items()}
    if not cal.has_encode and "encode" in stages:  # the traced runtime had no encoder stage
        del stages["encode"]
    for stage, fit in cal.fits.items():
        entry = stages.setdefault(stage, {"unit": "gpu" if stage == "encode" else "cpu"})
        entry["model"] = fit.model()
    if cal.encode_in_worker and "encode" in cal.fits:
        _encode_on_the_workers(stages, prof)
    prof["stages"] = stages
    if cal.workers:  # the measured machine's preprocessing concurrency, not the base's
        units = {k: dict(v) for k, v in prof.get("units", {}).items()}
        cpu = next((k for k, v in units.items() if v.get("kind") == "cpu"), None)
        if cpu is not None:
            units[cpu]["count"] = cal.workers
            prof["units"] = units
    period = step_period(cal)
    if period is not None:
        llm = dict(prof.get("llm") or {})
        e = cal.engine
        step: dict[str, Any] = {"base_s": float(f"{period.base_s:.6g}"),
                                "per": {k: float(f"{period.per.get(k, 0.0):.6g}")
                                        for k in STEP_FEATURES},
                                "cv": round(period.cv, 4) if period.cv >= 0.005 else 0.0}
        if cal.cold_factor > 0:
            step["cold_shape_factor"] = round(cal.cold_factor, 4)
        if cal.drift_sd > 0:
            step["drift_sd"] = round(cal.drift_sd, 4)
            step["drift_tau_s"] = float(f"{cal.drift_tau_s:.4g}")
            if abs(cal.drift_start) >= 1e-3:
                step["drift_start"] = round(cal.drift_start, 4)
        for key, src in (("max_num_batched_tokens", "max_num_batched_tokens"),
                         ("max_num_seqs", "max_num_seqs"), ("block_size_tokens", "block_size")):
            if e.get(src):
                step[key] = int(e[src])
        llm["step"] = step
        if e.get("max_num_seqs"):
            llm["max_batch"] = int(e["max_num_seqs"])
        if e.get("kv_cache_tokens"):
            llm["kv_capacity_tokens"] = int(e["kv_cache_tokens"])
        if cal.handoff_n:
            llm["handoff_s"] = float(f"{cal.handoff_s:.6g}")
        if cal.input_processing is not None:
            llm["input_processing"] = {**cal.input_processing.model(), "kind": "deterministic"}
            llm["input_processing"].pop("cv", None)
        prof["llm"] = llm
    if cal.admission:
        prof["admission"] = dict(cal.admission)
    if cal.requests:  # the sizes this profile's models interpolate between (sim.scenario.fitted_range)
        prof["fitted_range"] = cal.fitted_range.as_dict()
    if cal.step is not None and cal.host_cores and cal.engine.get("platform") == "cpu":
        # the engine and the preprocessing workers share the host's cores (a CPU-only runtime)
        prof["host"] = {"cores": cal.host_cores,
                        "engine_threads": cal.engine_threads or cal.host_cores,
                        "step_extra_s_per_worker_s": round(cal.contention, 4)}
        if cal.contention_over is not None:
            prof["host"]["step_extra_s_per_oversubscribed_worker_s"] = round(cal.contention_over, 4)
        if cal.engine_demand is not None:
            prof["host"]["engine_demand_threads"] = cal.engine_demand
    if cal.uncertainty is not None and cal.uncertainty.models:
        # llm.step holds the step's own time (models.step) plus the gap before it (models.step_gap)
        prof["uncertainty"] = cal.uncertainty.as_dict()
    notes = [f"{s}: fitted on {f.n} requests, R² = {f.r2:.3f}" + (f" ({f.note})" if f.note else "")
             for s, f in cal.fits.items()]
    if cal.step is not None:
        notes.append(f"engine step model: fitted on {cal.step.n} steps, R² = {cal.step.r2:.3f}")
    if cal.host_cores:
        notes.append(f"measured host: {cal.host_cores} cores shared by the frontend, "
                     f"{cal.workers} preprocessing worker(s) and the engine")
    prof["sources"] = [*list(prof.get("sources", [])), f"calibrated from {', '.join(sources)}", *notes]
    if cal.skipped:
        prof["assumed"] = list(prof.get("assumed", [])) + [
            f"{s} not fitted ({why}); kept from the base profile" for s, why in cal.skipped.items()]
    return prof


def _encode_on_the_workers(stages: dict[str, Any], prof: dict[str, Any]) -> None:
    """The measured encoder ran in the preprocessing workers: its stage goes on the CPU stages'
    unit, where the simulator runs it in the worker after normalize (:class:`sim.core.device.Device`)."""
    cpu_unit = stages.get("image_decode", {}).get("unit")
    if cpu_unit is None:
        cpu_unit = next((k for k, v in prof.get("units", {}).items() if v.get("kind") == "cpu"),
                        "cpu")
    stages["encode"] = {**stages["encode"], "unit": cpu_unit}
