"""A designed calibration run: its schedule spans what the calibrator fits, and goes into the trace.

The schedule's image ladder must reach below and above the model's pixel budget and both sides of
the JPEG ½-scale decode threshold; its batch ladder must reach max_num_seqs; every phase kind is
there; it fits its time budget. ``edgeserve calibrate record`` against the real default server
(short budget, engine-marked) must leave a trace whose header holds the schedule and whose
records calibrate into a step model with intervals.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from edgeserve.bench.calibration_record import PhaseResult, annotate_header
from edgeserve.bench.calibration_schedule import (
    PhaseKind,
    ScheduleConfig,
    batch_depths,
    design,
    image_ladder,
)
from edgeserve.records import (
    EngineStep,
    Outcome,
    RequestRecord,
    TraceHeader,
    TraceWriter,
    read_trace,
)
from mm_preproc.constants import DRAFT_MIN_RATIO
from mm_preproc.smart_resize import smart_resize

CFG = ScheduleConfig()


def draft_half(size: str) -> bool:
    w, h = (int(v) for v in size.split("x"))
    th, tw = smart_resize(h, w, CFG.factor, CFG.min_pixels, CFG.max_pixels)
    return min(w / 2 / tw, h / 2 / th) >= DRAFT_MIN_RATIO[2]


def pixels(size: str) -> int:
    w, h = (int(v) for v in size.split("x"))
    return w * h


def test_the_image_ladder_spans_the_budget_and_both_sides_of_the_downscale_threshold() -> None:
    ladder = image_ladder(CFG)
    assert min(pixels(s) for s in ladder) <= CFG.max_pixels / 10
    assert any(CFG.max_pixels / 2 < pixels(s) <= CFG.max_pixels for s in ladder)  # just under
    over = [s for s in ladder if pixels(s) > CFG.max_pixels]
    assert any(not draft_half(s) for s in over) and any(draft_half(s) for s in over)


def test_the_schedule_has_every_phase_reaches_max_num_seqs_and_fits_its_budget() -> None:
    s = design(ScheduleConfig(budget_s=120, max_num_seqs=12))
    kinds = {p.kind for p in s.phases}
    assert kinds == set(PhaseKind)
    assert batch_depths(12) == (1, 2, 4, 8, 12)
    batches = [p for p in s.phases if p.kind is PhaseKind.BATCH]
    assert [p.concurrency for p in batches] == [1, 2, 4, 8, 12, 3, 12]
    # the context per sequence varies apart from the depth: two depths again, long prompts
    short = max(w for p in batches[:5] for w in p.prompt_words)
    assert all(min(p.prompt_words) > 3 * short for p in batches[5:])
    # decode waves: a quarter of max_num_seqs and max_num_seqs, one output length
    waves = [p for p in s.phases if p.kind is PhaseKind.WAVES]
    assert [p.concurrency for p in waves] == [3, 12]
    assert all("-" not in p.output_len and p.image_rate_rps == 0 for p in waves)
    assert s.planned_s == pytest.approx(120, rel=0.01)
    contention = next(p for p in s.phases if p.kind is PhaseKind.CONTENTION)
    quiet = next(p for p in s.phases if p.kind is PhaseKind.QUIET)
    assert contention.image_rate_rps > 0 and quiet.image_rate_rps == 0
    assert contention.concurrency == quiet.concurrency == 6
    # every shape alone twice: first cold, then warm (input processing with all else idle)
    fresh = [p for p in s.phases if p.kind is PhaseKind.FRESH_SHAPES]
    assert [p.name for p in fresh] == ["fresh shapes", "warm shapes"]
    assert all(p.sizes == image_ladder(CFG) for p in fresh)
    with pytest.raises(ValueError, match="give at least"):
        design(ScheduleConfig(budget_s=10))


def test_the_schedule_goes_into_the_trace_header_and_the_records_stay(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    with TraceWriter(trace, TraceHeader(producer="edgeserve serve", meta={"workers": 1})) as w:
        w.write(RequestRecord(id="r0", outcome=Outcome.OK, arrived_s=1.0, finished_s=2.0))
        w.write(EngineStep(t_s=1.5, duration_s=0.01, decode_tokens=1))
    s = design(ScheduleConfig(budget_s=60))
    annotate_header(trace, s.header(), [PhaseResult("fresh shapes", ok=7)])
    items = list(read_trace(trace))
    head = items[0]
    assert isinstance(head, TraceHeader) and head.meta["workers"] == 1
    sched = head.meta["calibration_schedule"]
    assert isinstance(sched, dict)
    assert [p["name"] for p in sched["phases"]] == [p.name for p in s.phases]
    assert sched["config"]["budget_s"] == 60 and sched["results"][0]["ok"] == 7
    assert [type(i).__name__ for i in items[1:]] == ["RequestRecord", "EngineStep"]
    json.dumps(msgspec.to_builtins(head))  # plain JSON all through


@pytest.mark.engine
def test_record_against_the_default_server_gives_a_trace_that_calibrates(tmp_path: Path) -> None:
    from sim.fit.calibrate import calibrate_traces
    from sim.fit.traces import read_traces

    out = tmp_path / "calib.jsonl"
    r = subprocess.run([sys.executable, "-m", "edgeserve", "calibrate", "record", "--out", str(out),
                        "--budget-s", "40", "--image-rate", "2"],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "calibration run:" in r.stdout.splitlines()[0] and "phase 1/" in r.stdout
    head = next(iter(read_trace(out)))
    assert isinstance(head, TraceHeader) and head.producer == "edgeserve serve"
    sched = head.meta["calibration_schedule"]
    assert isinstance(sched, dict)
    answered = {x["phase"]: x["ok"] for x in sched["results"]}
    assert all(answered[p["name"]] > 0 for p in sched["phases"]), answered
    data = read_traces([out])
    assert len({r.source_width for r in data.records if r.source_width}) >= 4
    cal = calibrate_traces(data)
    assert cal.step is not None and cal.uncertainty is not None
    assert "step" in cal.uncertainty.models
    depth = max(s.decode_tokens for s in data.steps)
    assert depth >= 8  # the batch ladder filled a batch
