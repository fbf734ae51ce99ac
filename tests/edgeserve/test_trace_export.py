"""``edgeserve trace export --perfetto``: a trace becomes Chrome-trace JSON whose rows are the
workers, the engine's steps and its stalls, so that a stall shows as a gap in the engine row
under a busy worker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgeserve.cli.main import main
from edgeserve.records import RequestRecord, ResourceSample, TraceHeader, TraceWriter


def write_trace(path: Path) -> None:
    # One request: worker 0 decodes 10.0-10.3, resizes to 10.4, normalizes to 10.5; the engine
    # steps 10.0-10.1 for another request and then again 10.6-10.9, stalling 10.1-10.5.
    rec = RequestRecord(
        id="r1", worker=0, arrived_s=10.0, preproc_queued_s=10.0, preproc_start_s=10.0,
        decode_end_s=10.3, resize_end_s=10.4, normalize_end_s=10.5, preproc_end_s=10.5,
        engine_queued_s=10.55, first_token_s=10.7, last_token_s=10.9, finished_s=10.9,
        output_tokens=3, token_times_s=[10.7, 10.8, 10.9],
    )
    sample = ResourceSample(t_s=11.0, engine_busy=0.4, stall_s=0.4,
                            engine_busy_spans=[(10.0, 10.1), (10.6, 10.9)],
                            stall_spans=[(10.1, 10.5)], process_cpu={"frontend": 5.0})
    with TraceWriter(path, TraceHeader(producer="edgeserve serve")) as w:
        w.write(rec)
        w.write(sample)


def test_rows_are_workers_engine_and_stalls(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    write_trace(trace)
    out = tmp_path / "t.json"
    assert main(["trace", "export", str(trace), "--perfetto", "-o", str(out)]) == 0
    doc = json.loads(out.read_text())
    events = doc["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert sorted(names.values()) == ["engine (vLLM steps)", "stall (engine idle, work on CPU)",
                                      "worker 0"]
    by_row: dict[str, list[tuple[str, float, float]]] = {}
    for e in events:
        if e["ph"] == "X":
            by_row.setdefault(names[e["tid"]], []).append((e["name"], e["ts"], e["dur"]))

    def approx(rows: list[tuple[str, float, float]]) -> list[tuple[str, float, float]]:
        return [(n, round(ts), round(d)) for n, ts, d in rows]

    # microseconds from the first record (t = 10.0 s)
    assert approx(by_row["worker 0"]) == [("decode", 0, 300_000), ("resize", 300_000, 100_000),
                                          ("normalize", 400_000, 100_000)]
    assert approx(by_row["engine (vLLM steps)"]) == [("step", 0, 100_000),
                                                     ("step", 600_000, 300_000)]
    assert approx(by_row["stall (engine idle, work on CPU)"]) == [("stall", 100_000, 400_000)]
    stages = [e["name"] for e in events if e["ph"] == "b" and e["cat"] == "request"]
    assert stages == ["r1", "preproc_queue", "decode", "resize", "normalize", "handoff",
                      "engine_queue", "generate"]
    counters = {e["name"] for e in events if e["ph"] == "C"}
    assert {"queues", "engine busy fraction", "stall seconds", "process CPU %"} <= counters


def test_a_malformed_trace_is_a_message_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "header", "schema": 99, "producer": "x"}\n')
    assert main(["trace", "export", str(bad), "--perfetto"]) == 1
    assert "schema version 99" in capsys.readouterr().err
    assert main(["trace", "export", str(tmp_path / "missing.jsonl"), "--perfetto"]) == 1
    assert "No such file" in capsys.readouterr().err


def test_summary_reports_outcomes_and_stalls(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.jsonl"
    write_trace(trace)
    assert main(["trace", "summary", str(trace)]) == 0
    out = capsys.readouterr().out
    assert "requests: ok 1" in out and "stall 0.40 s" in out
