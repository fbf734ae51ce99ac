"""A server's speed level (``sim/fit/speed_level.py``): measured from its steps against the step
model, and replayed as a scaled step model — the oracle that tells the server's level from the
model's error in ``benchmarks/sim_fidelity.py``."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from edgeserve.records import EngineStep
from sim.fit.calibrate import calibrate_traces
from sim.fit.calibration import Calibration
from sim.fit.least_squares import StageFit
from sim.fit.profile_writer import to_profile
from sim.fit.speed_level import speed_level, with_speed_level, worker_level, worker_stages
from sim.fit.step_fit import step_prediction
from sim.fit.traces import TraceData, read_traces
from sim.fit.validate import validate_runs

DATA = Path(__file__).parent / "data"


def calibration(gap_s: float = 6e-4, gap_per_seq_s: float = 7e-5) -> Calibration:
    cal = Calibration()
    # the step's own time, and the gap before it apart (the profile writer folds it in)
    cal.step = StageFit("step", 100, 0.002, {"prefill_tokens": 5e-5, "decode_tokens": 1.5e-4},
                        0.1, 0.9)
    cal.step_gap_s, cal.step_gap_per = gap_s, {"decode_tokens": gap_per_seq_s}
    return cal


def test_a_server_whose_steps_all_took_longer_has_that_level() -> None:
    # every step took 1.15 × the model's own time (vLLM's elapsed_ms: the gap is not in it)
    cal = calibration()
    steps, t = [], 0.0
    for i in range(60):
        s = EngineStep(t_s=0.0, duration_s=0.0, prefill_tokens=300 * (i % 3), decode_tokens=1 + i % 5,
                       running=2)
        own = step_prediction(cal.step, s, 0)
        t += 1.15 * own + 0.001
        steps.append(EngineStep(t_s=t, duration_s=1.15 * own, prefill_tokens=s.prefill_tokens,
                                decode_tokens=s.decode_tokens, running=2))
    assert speed_level(cal, TraceData(steps=steps)) == pytest.approx(1.15, rel=1e-9)
    assert speed_level(cal, TraceData()) is None
    cal.step = None
    assert speed_level(cal, TraceData(steps=steps)) is None


def test_a_level_scales_the_steps_own_time_and_keeps_the_gap() -> None:
    cal = calibration()
    prof = to_profile(cal, None, "box", [])
    slow = with_speed_level(prof, cal, 1.2)["llm"]["step"]
    step = prof["llm"]["step"]
    # a bare step: 2 ms of its own plus a 0.6 ms gap → 2.4 ms plus the same gap
    assert slow["base_s"] == pytest.approx(1.2 * 0.002 + 6e-4)
    assert slow["per"]["decode_tokens"] == pytest.approx(1.2 * 1.5e-4 + 7e-5)
    assert slow["per"]["prefill_tokens"] == pytest.approx(1.2 * 5e-5)
    assert step["base_s"] == pytest.approx(0.002 + 6e-4)  # the profile given is left as it was
    with pytest.raises(ValueError, match="positive"):
        with_speed_level(prof, cal, 0.0)


@pytest.fixture(scope="module")
def fitted() -> tuple[Calibration, dict[str, object]]:
    cal = calibrate_traces(read_traces([DATA / "calib.jsonl"]))
    return cal, yaml.safe_load(yaml.safe_dump(to_profile(cal, None, "test-box", [])))


def test_a_recorded_server_replayed_at_a_slower_level_waits_longer(
    fitted: tuple[Calibration, dict[str, object]]
) -> None:
    # the recorded held-out run replayed through its own level, then through 1.3 × that level:
    # the same arrivals, slower steps, so every latency figure grows
    cal, prof = fitted
    trace = DATA / "heldout.jsonl"
    level = speed_level(cal, read_traces([trace]))
    assert level is not None and 0.5 < level < 2.0  # the same machine, a few minutes apart
    own = validate_runs(prof, [trace], trace_profiles=[with_speed_level(prof, cal, level)])
    slower = validate_runs(prof, [trace], trace_profiles=[with_speed_level(prof, cal, 1.3 * level)])
    fig = {q: s for q, _m, s, _e in own.rows()}
    fig_slow = {q: s for q, _m, s, _e in slower.rows()}
    for q in ("ttft p50", "e2e p50", "tpot mean"):
        assert fig_slow[q] > fig[q]
    with pytest.raises(ValueError, match="2 trace profiles for 1 traces"):
        validate_runs(prof, [trace], trace_profiles=[prof, prof])


def _slowed_workers(data: TraceData, factor: float) -> TraceData:
    """``data`` with every one-image request's worker stages taking ``factor`` × as long (the
    same start, each later stamp moved out from it)."""
    import msgspec

    recs = []
    for r in data.records:
        if r.preproc_start_s is None or r.normalize_end_s is None:
            recs.append(r)
            continue
        t0 = float(r.preproc_start_s)
        moved = {k: t0 + factor * (float(v) - t0)
                 for k in ("decode_end_s", "resize_end_s", "normalize_end_s", "encode_end_s")
                 if (v := getattr(r, k)) is not None}
        recs.append(msgspec.structs.replace(r, **moved))
    return TraceData(recs, data.steps, data.meta, data.runs, data.record_runs)


def test_a_server_whose_workers_took_longer_has_that_worker_level() -> None:
    # the in-worker encoder's trace (--encoder onnx): decode, resize, normalize and encode
    data = read_traces([DATA / "calib_onnx.jsonl"])
    cal = calibrate_traces(data)
    assert worker_stages(cal) == ["image_decode", "resize", "normalize", "encode"]
    own = worker_level(cal, data)
    assert own is not None and 0.8 < own < 1.2  # the model against the run it was fitted on
    # the stretch for shared cores depends on which workers overlapped, which slowing them all
    # changes a little: the level follows the factor to within that
    slow = worker_level(cal, _slowed_workers(data, 1.25))
    assert slow is not None and slow / own == pytest.approx(1.25, rel=0.05)
    assert worker_level(Calibration(), data) is None  # no stage fits: nothing to compare with


def test_calibrating_several_traces_writes_each_ones_worker_level() -> None:
    data = read_traces([DATA / "calib_onnx.jsonl", DATA / "calib_onnx.jsonl"])
    u = calibrate_traces(data).uncertainty
    assert u is not None and len(u.worker_levels) == 2
    assert u.worker_stages == ["image_decode", "resize", "normalize", "encode"]
    assert u.worker_level_sd == pytest.approx(0.0, abs=1e-3)  # the same trace twice
