"""PipelineState: what the panels show, folded from records and samples (no Textual)."""

from __future__ import annotations

import numpy as np
import pytest

from edgeserve.records import DeviceSample, Outcome, RequestRecord, ResourceSample
from tui.sources.vllm_metrics import EngineMetrics
from tui.state import PipelineState, StateConfig, matches
from tui.timeline import CellState

HIST_TOL = 0.06  # one log bucket is about 6 % wide


def done(i: int, finished_s: float, ttft_s: float = 0.1, **kw: object) -> RequestRecord:
    """A request that arrived ``ttft_s + 0.05`` s before it finished, tokens 10 ms apart."""
    arrived = finished_s - ttft_s - 0.05
    first = arrived + ttft_s
    fields: dict = dict(
        id=f"r{i}",
        arrived_s=arrived,
        first_token_s=first,
        token_times_s=[first + 0.01 * k for k in range(6)],
        last_token_s=first + 0.05,
        finished_s=finished_s,
        output_tokens=6,
    )
    fields.update(kw)
    return RequestRecord(**fields)


def test_requests_per_s_counts_the_finishes_of_the_rate_window():
    st = PipelineState(StateConfig(rate_window_s=10.0))
    st.fold(done(i, i + 0.5) for i in range(30))  # one per second, 0.5 … 29.5
    st.advance(29.99)
    assert st.snapshot().overview.requests_per_s == pytest.approx(1.0)
    assert st.snapshot().overview.finished_total == 30


def test_ttft_percentiles_match_the_exact_ones_within_a_bucket():
    st = PipelineState()
    ttfts = [0.01 * (i + 1) for i in range(100)]
    st.fold(done(i, 10.0 + i * 0.01, ttft_s=t) for i, t in enumerate(ttfts))
    o = st.snapshot().overview
    assert o.ttft_p50_s == pytest.approx(np.percentile(ttfts, 50), rel=HIST_TOL)
    assert o.ttft_p99_s == pytest.approx(np.percentile(ttfts, 99), rel=HIST_TOL)


def test_itl_comes_from_token_gaps_or_else_from_time_per_output_token():
    st = PipelineState()
    st.fold([done(1, 5.0)])  # gaps of 10 ms
    assert st.snapshot().overview.itl_p50_s == pytest.approx(0.01, rel=HIST_TOL)
    st2 = PipelineState()
    st2.fold(
        [
            RequestRecord(
                id="x",
                arrived_s=0,
                first_token_s=1.0,
                last_token_s=1.4,
                finished_s=1.4,
                output_tokens=5,
            )
        ]
    )  # no token times: 0.1 s each
    assert st2.snapshot().overview.itl_p99_s == pytest.approx(0.1, rel=HIST_TOL)


def test_errors_count_non_ok_outcomes_and_leave_with_the_window():
    st = PipelineState(StateConfig(window_s=60.0))
    st.fold(
        [
            done(1, 1.0, outcome=Outcome.FAILED, error="bad image"),
            done(2, 2.0, outcome=Outcome.REJECTED),
            done(3, 3.0),
        ]
    )
    st.advance(5.0)
    o = st.snapshot().overview
    assert (o.errors, o.errors_by_outcome) == (2, {"failed": 1, "rejected": 1})
    assert o.last_errors == ("r1: failed (bad image)", "r2: rejected")
    st.advance(70.0)
    assert st.snapshot().overview.errors == 0


def test_timeline_from_records_shows_the_engine_waiting_on_the_cpu_as_a_stall():
    # decode on worker 0 for 0.0-0.8 s while the engine has nothing; then 0.8-1.7 s in the engine
    r = RequestRecord(
        id="a",
        worker=0,
        arrived_s=0.0,
        preproc_queued_s=0.0,
        preproc_start_s=0.0,
        decode_end_s=0.6,
        resize_end_s=0.7,
        normalize_end_s=0.8,
        engine_queued_s=0.8,
        first_token_s=1.0,
        last_token_s=1.7,
        finished_s=1.7,
    )
    st = PipelineState()
    st.fold([r])
    rows = {row.name: row.cells for row in st.snapshot(timeline_columns=2).timeline}
    assert [c.state for c in rows["cpu0"]] == [CellState.BUSY, CellState.IDLE]
    assert [c.state for c in rows["engine"]] == [CellState.STALL, CellState.BUSY]
    assert rows["engine"][0].stall == pytest.approx(0.8)
    assert rows["engine"][1].busy == pytest.approx(0.7)


def test_two_requests_in_the_engine_at_once_count_once():
    a = RequestRecord(
        id="a",
        arrived_s=0.0,
        engine_queued_s=0.0,
        first_token_s=0.1,
        last_token_s=0.4,
        finished_s=0.4,
    )
    b = RequestRecord(
        id="b",
        arrived_s=0.0,
        engine_queued_s=0.2,
        first_token_s=0.3,
        last_token_s=0.6,
        finished_s=0.6,
    )
    st = PipelineState()
    st.fold([a, b])
    engine = st.snapshot(timeline_columns=1).timeline[-1].cells[0]
    assert engine.busy == pytest.approx(0.6)  # the union 0.0-0.6, not 0.4 + 0.4


def test_timeline_prefers_resource_samples_over_records():
    st = PipelineState()
    st.fold([ResourceSample(t_s=1.0, engine_busy=0.2, stall_s=0.6, worker_busy=[1.0, 0.0])])
    st.fold([done(1, 0.9, worker=1)])  # would make worker 1 busy if records counted
    snap = st.snapshot(timeline_columns=1)
    cells = [row.cells[0].state for row in snap.timeline]
    assert [row.name for row in snap.timeline] == ["cpu0", "cpu1", "engine"]
    assert cells == [CellState.BUSY, CellState.IDLE, CellState.STALL]
    assert snap.timeline_from_samples


def test_queues_and_workers_are_the_newest_sample():
    st = PipelineState()
    st.fold(
        [
            ResourceSample(t_s=1.0, preproc_queue=9, engine_waiting=1),
            ResourceSample(
                t_s=2.0,
                preproc_queue=3,
                preproc_running=2,
                engine_waiting=0,
                engine_running=4,
                worker_busy=[0.5, 1.0],
                worker_stage=["decode", ""],
                engine_busy=0.25,
                stall_s=0.5,
            ),
        ]
    )
    snap = st.snapshot()
    q = snap.queues
    assert (q.preproc_queue, q.preproc_running, q.engine_waiting, q.engine_running) == (3, 2, 0, 4)
    assert q.history["preproc_queue"] == (9.0, 3.0)
    assert snap.workers.busy == (0.5, 1.0) and snap.workers.stage == ("decode", "")
    assert (snap.workers.engine_busy, snap.workers.stall_s) == (0.25, 0.5)


def test_a_stock_vllm_server_is_read_from_two_scrapes():
    ttft_old = ((0.1, 0.0), (0.5, 0.0), (1.0, 0.0), (float("inf"), 0.0))
    ttft_new = ((0.1, 10.0), (0.5, 40.0), (1.0, 50.0), (float("inf"), 50.0))
    st = PipelineState(StateConfig(rate_window_s=10.0))
    st.fold(
        [
            EngineMetrics(
                t_s=100.0,
                waiting=0,
                running=1,
                requests_total=100,
                requests_ok_total=100,
                ttft_buckets=ttft_old,
            ),
            EngineMetrics(
                t_s=110.0,
                waiting=3,
                running=8,
                requests_total=150,
                requests_ok_total=148,
                ttft_buckets=ttft_new,
                kv_cache_usage=0.25,
            ),
        ]
    )
    snap = st.snapshot()
    o = snap.overview
    assert o.requests_per_s == pytest.approx(5.0)
    assert o.errors == 2
    # 50 observations: 10 below 0.1 s, 30 in 0.1-0.5 s → the median (rank 25) is at 0.3 s
    assert o.ttft_p50_s == pytest.approx(0.3)
    q = snap.queues
    assert (q.preproc_queue, q.engine_waiting, q.engine_running, q.kv_cache_usage) == (
        None,
        3,
        8,
        0.25,
    )


def test_history_gets_one_point_per_second_of_source_time():
    st = PipelineState(StateConfig(history_step_s=1.0, rate_window_s=1.0))
    st.fold([done(1, 0.5)])
    st.advance(0.9)
    st.fold([done(2, 1.2), done(3, 1.4)])
    st.advance(1.9)
    st.advance(3.5)
    assert st.snapshot().overview.history["rps"] == (1.0, 2.0, 0.0, 0.0)


def test_devices_keep_their_newest_sample_and_temperature_history():
    st = PipelineState()
    st.fold(
        [
            DeviceSample(
                t_s=t, device="phone", temp_c=30.0 + t, clock_level=0, clock_scale=1.0, power_w=2.0
            )
            for t in (1.0, 2.0, 3.0)
        ]
    )
    (d,) = st.snapshot().devices
    assert d.sample.temp_c == 33.0 and d.temp_history == (31.0, 32.0, 33.0)


def test_recent_requests_are_bounded_and_newest_last():
    st = PipelineState(StateConfig(recent_requests=3))
    st.fold(done(i, float(i + 1)) for i in range(5))
    assert [r.id for r in st.snapshot().recent] == ["r2", "r3", "r4"]


def test_seeing_a_second_device_lets_the_timeline_follow_one_device_at_a_time():
    st = PipelineState()
    a = RequestRecord(
        id="a",
        device="cam",
        worker=0,
        arrived_s=0.0,
        preproc_start_s=0.0,
        decode_end_s=0.9,
        finished_s=0.9,
    )
    b = RequestRecord(
        id="b",
        device="phone",
        worker=2,
        arrived_s=0.0,
        preproc_start_s=0.0,
        decode_end_s=0.9,
        finished_s=0.95,
    )
    st.fold([a, b])
    assert [r.name for r in st.snapshot(timeline_columns=1).timeline] == ["cpu0", "engine"]
    st.select_device("phone")
    snap = st.snapshot(timeline_columns=1)
    assert snap.pipeline_device == "phone"
    assert [r.name for r in snap.timeline] == ["cpu0", "cpu1", "cpu2", "engine"]
    assert snap.timeline[2].cells[0].state is CellState.BUSY


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("", True),
        ("r7", True),
        ("FAILED", True),
        ("failed w3", True),
        ("ok", False),
        ("slow>1", True),
        ("slow>5", False),
        ("slow>x", False),
        ("cam", True),
    ],
)
def test_filter_words_must_all_match(query: str, expected: bool):
    r = done(7, 3.0, ttft_s=2.0, outcome=Outcome.FAILED, worker=3, device="cam-1")
    assert matches(r, query) is expected


def test_config_is_validated_with_a_clear_message():
    with pytest.raises(ValueError, match="window_s must be > 0"):
        StateConfig(window_s=0)


def test_a_long_wait_in_the_preprocessing_queue_is_a_stall_in_every_second_it_lasts():
    r = RequestRecord(
        id="a",
        worker=0,
        arrived_s=0.0,
        preproc_queued_s=0.0,
        preproc_start_s=10.5,
        decode_end_s=10.6,
        resize_end_s=10.65,
        normalize_end_s=10.7,
        engine_queued_s=10.7,
        first_token_s=10.8,
        last_token_s=11.2,
        finished_s=11.2,
    )
    st = PipelineState()
    st.fold([r])
    st.advance(12.0)
    engine = st.snapshot(timeline_columns=12).timeline[-1].cells
    assert [c.state for c in engine] == [CellState.STALL] * 11 + [CellState.IDLE]
    assert [c.stall for c in engine[:10]] == [1.0] * 10
    assert engine[10].busy == pytest.approx(0.3) and engine[10].stall == pytest.approx(0.7)
    assert engine[11].busy == pytest.approx(0.2)
