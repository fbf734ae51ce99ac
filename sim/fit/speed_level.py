"""A server's speed level: how fast its engine steps ran against the calibrated step model.

Fresh servers of one machine run the same workload at different speeds, and keep theirs for a
whole run (docs/sim.md has the measured spread). Near saturation such a level is most of the
latency: a server 11 % faster than the model turns a load of ρ = 0.9 into ρ = 0.8, one 6 %
slower into 0.95. The calibrated drift (an Ornstein–Uhlenbeck wander, ``llm.step.drift_*``) holds the
part of it that the calibration runs showed; the level of a server not yet started cannot be
predicted.

:func:`speed_level` measures it afterwards, from a trace's own steps, and :func:`with_speed_level`
scales a profile's step model by it. Replaying a held-out trace through its server's level is an
*oracle* (the level comes from the very run it is compared with), not a prediction: what is left
of the error then is the model's, what goes away was the server's level. ``benchmarks/
sim_fidelity.py`` prints both.
"""

from __future__ import annotations

import copy
from typing import Any

from edgeserve.records import Outcome
from sim.fit.calibration import Calibration
from sim.fit.engine_kv import kv_cache
from sim.fit.host_effects import contention_s, worker_busy
from sim.fit.step_fit import cold_steps, step_prediction
from sim.fit.traces import TraceData, image_sizes


def speed_level(cal: Calibration, data: TraceData) -> float | None:
    """Σ measured / Σ modelled step time over ``data``'s engine steps: the step model's own time
    (vLLM's ``elapsed_ms``, so without the gap between steps), the cold-shape factor on a step
    that ran a shape first and the contention of the workers busy during it, as the simulator
    applies them. ``None`` without a step model or steps."""
    if cal.step is None or not data.steps:
        return None
    kv = kv_cache(cal.engine)
    ok = [r for r in data.records if r.outcome is Outcome.OK]
    busy = worker_busy(ok, through_encode=cal.encode_in_worker)
    sizes = image_sizes(ok)
    cold = cold_steps(data.steps, data.runs or [(0, len(data.steps))], sizes)
    measured = modelled = 0.0
    for i, s in enumerate(data.steps):
        if s.duration_s <= 0:
            continue
        own = step_prediction(cal.step, s, kv, sizes)
        measured += s.duration_s
        modelled += (own * (1.0 + cal.cold_factor * (i in cold))
                     + contention_s(s, busy, own + cal.gap_s(s), cal.free_cores,
                                    cal.contention, cal.contention_over))
    return measured / modelled if modelled > 0 else None


def with_speed_level(profile: dict[str, Any], cal: Calibration, level: float) -> dict[str, Any]:
    """``profile`` (from :func:`sim.fit.profile_writer.to_profile` of ``cal``) with its step
    model's own time scaled by ``level``; the gap between steps (``cal.step_gap_*``, which the
    profile writer folded into the same coefficients) is left as fitted."""
    if level <= 0:
        raise ValueError(f"a speed level is positive, got {level}")
    out = copy.deepcopy(profile)
    step = out["llm"]["step"]
    step["base_s"] = (step["base_s"] - cal.step_gap_s) * level + cal.step_gap_s
    step["per"] = {f: (c - cal.step_gap_per.get(f, 0.0)) * level + cal.step_gap_per.get(f, 0.0)
                   for f, c in step.get("per", {}).items()}
    return out
