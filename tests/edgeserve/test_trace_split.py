"""``edgeserve trace split``: a rate sweep's trace becomes one trace per load, cut where no
request was in flight for the idle gap; each piece holds the headers, its own requests, steps and
samples, and reads back as a trace that ``calibrate validate`` replays."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgeserve.cli.main import main
from edgeserve.records import (
    EngineStep,
    RequestRecord,
    ResourceSample,
    TraceHeader,
    TraceWriter,
    read_trace,
)
from edgeserve.trace_split import find_runs, split_trace
from sim.fit.traces import read_traces


def request(i: int, arrived_s: float, e2e_s: float) -> RequestRecord:
    return RequestRecord(id=f"r{i}", arrived_s=arrived_s, first_token_s=arrived_s + e2e_s / 2,
                         last_token_s=arrived_s + e2e_s, finished_s=arrived_s + e2e_s,
                         output_tokens=4)


def write_sweep(path: Path) -> None:
    """Two warm-up requests at t 0-1, then a load of 30 requests over t 10-19.7 (each 0.5 s
    long) and a load of 40 over t 30-41.7 (each 2 s long, so they overlap); a step and a sample
    in each load and one in each gap."""
    items: list[object] = [request(0, 0.0, 0.5), request(1, 0.5, 0.5)]
    items += [request(2 + i, 10.0 + 0.32 * i, 0.5) for i in range(30)]
    items += [request(40 + i, 30.0 + 0.25 * i, 2.0) for i in range(40)]
    items += [EngineStep(t_s=t, duration_s=0.01, decode_requests=1, decode_tokens=1)
              for t in (5.0, 12.0, 25.0, 35.0)]
    items += [ResourceSample(t_s=t) for t in (6.0, 15.0, 26.0, 40.0)]
    items.sort(key=lambda x: x.arrived_s if isinstance(x, RequestRecord) else x.t_s)  # type: ignore[attr-defined]
    with TraceWriter(path, TraceHeader(producer="edgeserve serve", meta={"k": 1})) as w:
        for it in items:
            w.write(it)  # type: ignore[arg-type]


def test_runs_are_cut_at_idle_gaps(tmp_path: Path) -> None:
    trace = tmp_path / "sweep.jsonl"
    write_sweep(trace)
    runs = find_runs(trace, idle_s=2.0)
    assert [r.requests for r in runs] == [2, 30, 40]
    assert runs[1].start_s == pytest.approx(10.0)
    assert runs[1].end_s == pytest.approx(10.0 + 0.32 * 29 + 0.5)
    assert runs[2].end_s == pytest.approx(30.0 + 0.25 * 39 + 2.0)
    # a gap shorter than the idle time joins what it separates (the warm-up's gap is 9 s, the
    # loads' 10.2 s)
    assert [r.requests for r in find_runs(trace, idle_s=9.5)] == [32, 40]
    assert [r.requests for r in find_runs(trace, idle_s=11.0)] == [72]


def test_each_piece_is_a_trace_of_one_load(tmp_path: Path) -> None:
    trace = tmp_path / "sweep.jsonl"
    write_sweep(trace)
    pieces = split_trace(trace, tmp_path / "out", idle_s=2.0, min_requests=20)
    assert [p.name for p, _ in pieces] == ["sweep.run1.jsonl", "sweep.run2.jsonl"]
    first = list(read_trace(pieces[0][0]))
    assert isinstance(first[0], TraceHeader) and first[0].meta == {"k": 1}
    ids = {it.id for it in first if isinstance(it, RequestRecord)}
    assert ids == {f"r{2 + i}" for i in range(30)}  # the warm-up is left out
    assert [it.t_s for it in first if isinstance(it, EngineStep)] == [12.0]
    assert [it.t_s for it in first if isinstance(it, ResourceSample)] == [15.0]
    second = read_traces([pieces[1][0]])  # what calibrate validate reads
    assert len(second.records) == 40 and [s.t_s for s in second.steps] == [35.0]


def test_cli_names_the_pieces_and_refuses_a_trace_without_a_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "sweep.jsonl"
    write_sweep(trace)
    assert main(["trace", "split", str(trace), "--out-dir", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and "30 requests" in out[0] and "40 requests" in out[1]
    assert main(["trace", "split", str(trace), "--out-dir", str(tmp_path / "p"),
                 "--min-requests", "100"]) == 1
    assert "no run of at least 100 requests" in capsys.readouterr().err
    assert main(["trace", "split", str(tmp_path / "missing.jsonl"), "--out-dir",
                 str(tmp_path / "q")]) == 1
    assert "edgeserve trace split:" in capsys.readouterr().err
