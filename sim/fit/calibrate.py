"""Fit a device profile's service-time models from recorded runtime traces.

A trace of ``edgeserve serve --trace`` holds, per request, the stage timestamps and sizes of
:class:`edgeserve.records.RequestRecord`. Each stage's duration is regressed on the features the
simulator's models use (ordinary least squares, coefficients kept non-negative):

==============  ===========================================  ==============================
stage           duration from the record                     features
==============  ===========================================  ==============================
image_decode    ``decode_end_s − preproc_start_s``           source pixels, decoded pixels
resize          ``resize_end_s − decode_end_s``              decoded pixels, target pixels
normalize       ``normalize_end_s − resize_end_s``           target pixels
encode          ``encode_end_s − normalize_end_s``           image tokens
prefill         ``first_token_s − engine_queued_s``          prompt tokens
decode_step     ``(last − first token) / (output − 1)``      requests decoding at once
==============  ===========================================  ==============================

*Decoded* pixels are what the decoder produced: a JPEG much larger than its target is decoded at
1/2…1/8 scale in the DCT domain, so decode costs a little per source pixel (entropy decoding) and
more per decoded pixel, and the resize starts from the decoded image. A calibration run whose
images span sizes on both sides of the downscale thresholds separates the two terms.

Queueing must not leak into service times. The CPU stages are measured inside a worker, so they
are clean. For prefill only requests that found the engine empty are used (no other request
between its own queueing and its first token). For the decode step only requests whose decode
window saw no other request's first token (no prefill pausing the batch) are used. The batch
size of a window is the mean number of requests decoding *per step* (time segments weighted by
1/step time, iterated with the fit), which makes the window's mean step time exactly linear in it.

The spread around the fitted mean becomes a lognormal ``cv`` (the standard deviation of the ratio
of measured to fitted time), or ``deterministic`` when it is below 0.5 %.

**Engine steps.** A trace of a current runtime also holds one :class:`~edgeserve.records.EngineStep`
per vLLM step. Those fit the step engine's time model directly — no queueing to remove, because a
step's duration is its own:

    step_s ≈ base_s + a·prefill_tokens + b·decode_tokens + c·context_tokens + d·encoder_tokens
             + e·encoder_tokens²

(``context_tokens`` = the KV held after the step, ``kv_cache_usage × kv_cache_tokens`` of the
header; a hybrid model's state blocks left out, :mod:`sim.fit.engine_kv`). The header also gives
the engine's limits (``max_num_seqs``, ``max_num_batched_tokens``, block size, KV tokens) and the host's cores, which the profile takes over: the profile
describes the machine that was measured, whatever ``--base`` said. Steps that overlapped a busy
preprocessing worker were slower than the model: the extra step time per second of worker
activity during the step (``κ``) goes into ``host.step_extra_s_per_worker_s``; the median hand-off from the end of preprocessing to the
engine into ``llm.handoff_s``.
"""

from __future__ import annotations

import math

from edgeserve.records import EngineStep, Outcome
from edgeserve.step_span import StepTiming
from sim.fit.calibration import Calibration
from sim.fit.engine_kv import kv_cache
from sim.fit.host_effects import (
    cold_shape_factor,
    contention,
    fit_drift,
    fit_drift_start,
    fit_engine_demand,
    worker_busy,
    worker_stretch,
)
from sim.fit.identify import (
    identify_contention,
    identify_gap,
    identify_rows,
    identify_step,
    profile_uncertainty,
    stage_uncertainty,
)
from sim.fit.least_squares import MIN_SAMPLES
from sim.fit.speed_level import speed_level, worker_level, worker_stages
from sim.fit.stage_fits import (
    fit_input_processing,
    fit_stages,
    fit_worker_encode,
    input_processing_rows,
)
from sim.fit.step_fit import (
    CPU_ONLY_TERMS,
    GAP_FEATURES,
    GPU_ONLY_TERMS,
    cold_steps,
    fit_step_gap,
    fit_steps,
    step_prediction,
)
from sim.fit.traces import TraceData, image_sizes, worker_encoder

STEP_WINDOW = 8  # steps averaged per row of the step fit when they were timed by output intervals


def calibrate_traces(data: TraceData) -> Calibration:
    """:func:`~sim.fit.stage_fits.fit_stages` on the records, plus the step model and the host's contention.

    On a CPU host the engine's steps and the preprocessing workers share cores, so the step model
    is fitted on the steps during which no worker was busy, and the slowdown of the others
    (``κ``, extra step seconds per second of worker activity, ``κ₊`` beyond the cores the engine
    leaves free) is fitted after it; the worker stages are fitted with the simulator's stretch
    for shared cores taken out of their times; the simulator applies both through ``host:``."""
    engine = data.meta.get("engine")
    engine_meta = dict(engine) if isinstance(engine, dict) else {}
    host_cores = int(data.meta.get("host_cores") or 0)
    procs = data.meta.get("processes")
    engine_threads = (len(procs["engine_worker"].get("cpu_affinity") or [])
                      if isinstance(procs, dict) and isinstance(procs.get("engine_worker"), dict)
                      else 0)
    embeds = worker_encoder(data.meta)
    # on a CPU host the simulator stretches preprocessing that shares the cores with busy
    # workers and a stepping engine (host:): the stage fits leave that stretch out of their times
    shared = engine_meta.get("platform", "cpu") == "cpu" and host_cores > 0 and bool(data.steps)
    # the engine's demand on the cores inside a step: fitted where the trace tells it
    demand = (fit_engine_demand(data.records, data.steps, host_cores, engine_threads or host_cores,
                                through_encode=embeds) if shared else None)
    in_step = demand[0] if demand is not None else float(engine_threads or host_cores)
    stretch = worker_stretch(data.records, data.steps, host_cores, in_step,
                             through_encode=embeds) if shared else None
    cal = fit_stages(data.records, stretch)
    cal.engine = engine_meta
    cal.host_cores = host_cores
    cal.admission = {k: int(data.meta[k]) for k in ("max_pending", "max_inflight",
                                                      "max_engine_queue") if data.meta.get(k)}
    cal.engine_threads = engine_threads
    if demand is not None:
        cal.engine_demand, cal.engine_demand_n = demand
    cal.steps = len(data.steps)
    kv = kv_cache(cal.engine)  # a hybrid model's state blocks are not context (sim.fit.engine_kv)
    ok = [r for r in data.records if r.outcome is Outcome.OK]
    busy = worker_busy(ok, through_encode=embeds)
    if embeds:
        cal.encode_in_worker = True
        enc_fit = fit_worker_encode(ok, stretch)
        if enc_fit is not None:
            cal.fits["encode"], cal.samples["encode"] = enc_fit
        else:
            cal.fits.pop("encode", None)
            cal.samples.pop("encode", None)
            cal.skipped["encode"] = "fewer than 5 one-image requests with an encode stage"
    sizes = image_sizes(ok)
    # a step that ran a shape the first time on its server is slower (kernels built per shape):
    # fitted apart, as the cold-shape factor, and kept out of the step model's fit
    runs = data.runs or [(0, len(data.steps))]
    cold = cold_steps(data.steps, runs, sizes)
    warm = [s for i, s in enumerate(data.steps) if i not in cold]
    quiet = [s for s in warm
             if sum(iv.fraction(s.t_s - s.duration_s, s.t_s) for iv in busy.values()) < 0.05]
    # contention is the workers' CPU slowing the engine's steps: only where the engine computes
    # on the CPU (on a GPU, steps with images follow busy workers without being slowed by them)
    on_cpu = cal.engine.get("platform", "cpu") == "cpu"
    use_quiet = on_cpu and len(quiet) >= 4 * MIN_SAMPLES and cal.host_cores > 0
    fitted = quiet if use_quiet else warm
    run_of = {id(s): k for k, (a, b) in enumerate(runs) for s in data.steps[a:b]}
    # steps timed by output intervals (async scheduling, a GPU) are exact in sum, not one by one
    timing = cal.engine.get("step_timing", StepTiming.ELAPSED.value)
    window = STEP_WINDOW if timing in {t.value for t in StepTiming if t.by_interval} else 1
    # a prefill beside decoders costs more with their context only on vLLM's CPU backend, which
    # attends it over the whole batch's keys, and a step of several images more than their
    # single-image costs only in its CPU tower (STEP_FEATURES); a GPU's varlen attention does
    # neither, and the cross term, fitted from the few multi-image steps of a calibration at 8
    # images/s, priced six 1271-token images in one step at 0.5 s on an H100
    # the image requests taken in during a step (read_traces counts them) lengthen it on a GPU,
    # where vLLM's CPU-side intake runs beside its step loop; on the CPU backend that is part of
    # the contention with the workers, fitted apart
    # a step computing prompt tokens costs more on a GPU, where a decode-only batch is one CUDA
    # graph and a batch with a prefill runs piecewise (prefill_step, decode_beside_prefill);
    # without those terms the decode slope took that cost up (9e-5 s per sequence fitted, 1e-5
    # measured in decode-only windows on an H100)
    left_out = GPU_ONLY_TERMS if on_cpu else CPU_ONLY_TERMS
    by_seconds = window > 1  # windows of output-interval steps: least squares on their seconds

    cal.step = fit_steps(fitted, kv, sizes, embeds, exclude=left_out, window=window,
                         by_seconds=by_seconds)
    # each model bootstrapped over its rows; terms the data do not identify dropped (identify)
    models = {"step": identify_step(cal, fitted, kv, sizes, embeds, run_of, window=window,
                                    exclude=left_out, by_seconds=by_seconds)}
    models.update(stage_uncertainty(cal))
    first_step_s = None
    if cal.step is not None and window > 1:
        # output-interval steps: the first step after an idle engine has no measured span, and
        # its time is inside the wait; the step model's time for it (with the request's own
        # intake, image_arrivals, which the simulator adds to that step) comes off the wait
        step_fit, arrival_s = cal.step, cal.step.per.get("image_arrivals", 0.0)

        def first_step_s(s: EngineStep) -> float:
            return step_prediction(step_fit, s, kv, sizes) + arrival_s

    rows = input_processing_rows(ok, data.steps, first_step_s) if data.steps else None
    if rows is not None:
        # a per-pixel slope the idle-engine requests do not identify is dropped (identify_rows)
        cal.input_processing, models["input_processing"] = identify_rows(
            rows, fit_input_processing(rows), "input_processing", cal.identification)
    if cal.step is not None:
        # the idle time between steps is part of every step's period (fit_step_gap); with image
        # embeddings handed over (--encoder onnx) it does not grow with the image
        gap_features = tuple(f for f in GAP_FEATURES if not (embeds and f == "encoder_tokens"))
        cal.step_gap_s, cal.step_gap_per = fit_step_gap(data.steps, features=gap_features)
        models["step_gap"] = identify_gap(cal, data.steps, gap_features, run_of)
        # contention, cold shapes and drift compare a step's own time (vLLM's elapsed_ms) with the
        # model's; the gap joins the model only in the profile (profile_writer.step_period)
        if use_quiet:
            cal.contention, cal.contention_over, cal.contention_n = contention(
                warm, cal.step, kv, busy, sizes, cal.free_cores, cal.gap_s)
            models["contention"] = identify_contention(cal, warm, kv, busy, sizes, run_of)
        cal.cold_factor, cal.cold_n = cold_shape_factor(
            [data.steps[i] for i in cold], cal.step, kv, busy, sizes, cal.contention,
            cal.contention_over, cal.free_cores, cal.gap_s)
        # the drift is read off single steps' ratios to the model: not from output intervals
        sd, tau, _n = (fit_drift(quiet if use_quiet else warm, cal.step, kv, sizes)
                       if window == 1 else (0.0, 0.0, 0))
        if sd > 0:
            # the drift's share of the steps' spread is no longer independent noise
            cal.drift_sd, cal.drift_tau_s = sd, tau
            keep = {id(s) for s in (quiet if use_quiet else warm)}
            cal.drift_start = fit_drift_start(
                data.steps, runs, cal.step, kv, sizes, tau,
                {i for i, s in enumerate(data.steps) if id(s) in keep})
            cal.step.cv = math.sqrt(max(cal.step.cv ** 2 - (math.exp(sd * sd) - 1.0), 0.0))
        cal.step.note = (f"{cal.step.n} of {cal.steps} engine steps"
                         + (", those with no worker busy" if use_quiet else ""))
    elif data.steps:
        cal.skipped["step"] = f"{len(data.steps)} engine steps (need {MIN_SAMPLES})"
    # several traces: each one's speed level against the model fitted on all (speed_level)
    levels = [lv for k in range(len(data.runs)) if data.runs[k][1] > data.runs[k][0]
              and (lv := speed_level(cal, data.run(k))) is not None] if len(data.runs) > 1 else []
    # … and the preprocessing workers' level, which varies apart from the engine's
    wlevels = [lv for k in range(len(data.runs))
               if (lv := worker_level(cal, data.run(k))) is not None] if len(data.runs) > 1 else []
    cal.uncertainty = profile_uncertainty(models, levels, wlevels, worker_stages(cal))
    return cal
