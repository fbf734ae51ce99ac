"""A server's speed level: how fast its engine steps (and its preprocessing workers) ran against
the calibrated models.

Fresh servers of one machine run the same workload at different speeds, and keep theirs for a
whole run (docs/sim.md has the measured spread). Near saturation such a level is most of the
latency: a server 11 % faster than the model turns a load of ρ = 0.9 into ρ = 0.8, one 6 %
slower into 0.95. The calibrated drift (an Ornstein–Uhlenbeck wander, ``llm.step.drift_*``) holds the
part of it that the calibration runs showed; the level of a server not yet started cannot be
predicted.

:func:`speed_level` measures it afterwards, from a trace's own steps, and :func:`with_speed_level`
scales a profile's step model by it. :func:`worker_level` does the same for the preprocessing
workers' stages, whose speed varies from server to server apart from the engine's (the 12 MP
encoder at 1,230 tokens took 260 ms on one fresh server and 303 ms on the next). Replaying a held-out trace through its server's level is an
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
from sim.fit.host_effects import contention_s, worker_busy, worker_stretch
from sim.fit.least_squares import StageFit
from sim.fit.stage_fits import decoded
from sim.fit.step_fit import cold_steps, step_prediction
from sim.fit.traces import TraceData, image_sizes

WORKER_STAGES = ("image_decode", "resize", "normalize")  # and encode, where the workers run it


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


def worker_stages(cal: Calibration) -> list[str]:
    """The fitted stages the preprocessing workers run: decode, resize, normalize, and the encoder
    where it runs in them (``--encoder onnx``)."""
    stages = [s for s in WORKER_STAGES if s in cal.fits]
    if cal.encode_in_worker and "encode" in cal.fits:
        stages.append("encode")
    return stages


def _predict(fit: StageFit, features: dict[str, float]) -> float:
    return fit.base_s + sum(c * features.get(k, 0.0) for k, c in fit.per.items())


def worker_level(cal: Calibration, data: TraceData) -> float | None:
    """Σ measured / Σ modelled preprocessing time over ``data``'s one-image requests: from the
    worker's start to the end of its last stage, against the fitted stages
    (:func:`worker_stages`) stretched for shared cores as the simulator stretches them
    (:func:`~sim.fit.host_effects.worker_stretch`). ``None`` without those fits or records."""
    stages = worker_stages(cal)
    if not stages or len(stages) < len(WORKER_STAGES):
        return None
    through_encode = "encode" in stages
    recs = [r for r in data.records if r.outcome is Outcome.OK and r.num_images == 1
            and r.preproc_start_s is not None and r.normalize_end_s is not None
            and (r.encode_end_s is not None or not through_encode)]
    if not recs:
        return None
    shared = cal.engine.get("platform", "cpu") == "cpu" and cal.host_cores > 0 and bool(data.steps)
    in_step = (cal.engine_demand if cal.engine_demand is not None
               else float(cal.engine_threads or cal.host_cores))
    stretch = (worker_stretch(recs, data.steps, cal.host_cores, in_step,
                              through_encode=through_encode)
               if shared else {})
    measured = modelled = 0.0
    for r in recs:
        dec = float(decoded(r))
        tgt = float(r.target_width * r.target_height)
        f = {"source_pixels": float(r.source_width * r.source_height), "decoded_pixels": dec,
             "target_pixels": tgt, "image_tokens": float(r.image_tokens),
             "image_tokens_sq": float(r.image_tokens) ** 2}
        end = r.encode_end_s if through_encode else r.normalize_end_s
        measured += float(end) - float(r.preproc_start_s)  # type: ignore[arg-type]
        modelled += sum(_predict(cal.fits[s], f) for s in stages) * stretch.get(id(r), 1.0)
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
