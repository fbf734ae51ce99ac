"""An image being encoded (``--encoder onnx``: in a preprocessing worker) while the engine has
nothing to do is a stall, in the TUI's timeline from records and in the simulator's validation."""

from __future__ import annotations

import pytest

from edgeserve.records import CPU_STAGES, RequestRecord, Stage
from sim.fit.validate import stall_seconds
from tui.state import PipelineState
from tui.timeline import CellState

# worker 0: decode/resize/normalize 0.0-0.4 s, encode 0.4-1.2 s; then 1.2-1.8 s in the engine
ENCODED = RequestRecord(
    id="a", worker=0, arrived_s=0.0, preproc_queued_s=0.0, preproc_start_s=0.0,
    decode_end_s=0.2, resize_end_s=0.3, normalize_end_s=0.4, encode_end_s=1.2,
    engine_queued_s=1.2, first_token_s=1.3, last_token_s=1.8, finished_s=1.8)


def test_encode_is_a_cpu_stage() -> None:
    assert Stage.ENCODE in CPU_STAGES


def test_the_engine_idle_during_the_encode_is_a_stall_in_the_timeline() -> None:
    st = PipelineState()
    st.fold([ENCODED])
    rows = {row.name: row.cells for row in st.snapshot(timeline_columns=2).timeline}
    assert rows["cpu0"][0].state is CellState.BUSY  # the worker encodes: busy, not idle
    assert [c.state for c in rows["engine"]] == [CellState.STALL, CellState.BUSY]
    assert rows["engine"][0].stall == pytest.approx(1.0)  # 0.4 s preprocessing + 0.6 s encode
    assert rows["engine"][1].stall == pytest.approx(0.2)  # the encode's last 0.2 s
    assert rows["engine"][1].busy == pytest.approx(0.6)


def test_validation_counts_the_encode_as_stall_time() -> None:
    assert stall_seconds([ENCODED]) == pytest.approx(1.2)
