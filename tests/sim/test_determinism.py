"""Same seed, same results; policies on the same seed see the same arrivals."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgeserve.records import RequestRecord, read_trace
from sim.core.simulation import Simulation
from sim.scenario.config import scenario_from_raw


def arrivals(path: Path) -> list[tuple[Any, ...]]:
    recs = [r for r in read_trace(path) if isinstance(r, RequestRecord)]
    return sorted((r.id, r.arrived_s, r.source_width, r.source_height, r.output_tokens,
                   r.deadline_s) for r in recs)


def test_same_seed_gives_byte_identical_traces(tmp_path: Path, fleet_raw: dict) -> None:
    for name in ("a", "b"):
        Simulation(scenario_from_raw(fleet_raw), trace_path=tmp_path / f"{name}.jsonl").run()
    a = (tmp_path / "a.jsonl").read_bytes()
    assert len(a) > 100_000
    assert a == (tmp_path / "b.jsonl").read_bytes()


def test_a_different_seed_gives_different_arrivals(tmp_path: Path, fleet_raw: dict) -> None:
    Simulation(scenario_from_raw(fleet_raw), trace_path=tmp_path / "a.jsonl").run()
    Simulation(scenario_from_raw(fleet_raw), seed=99, trace_path=tmp_path / "b.jsonl").run()
    assert arrivals(tmp_path / "a.jsonl") != arrivals(tmp_path / "b.jsonl")


def test_policies_on_one_seed_see_the_same_arrivals(tmp_path: Path, fleet_raw: dict) -> None:
    policies = ["always_local", "always_cloud", "predicted_latency", "frame_drop"]
    seen = []
    for p in policies:
        path = tmp_path / f"{p}.jsonl"
        Simulation(scenario_from_raw(fleet_raw), policy=p, trace_path=path).run()
        seen.append(arrivals(path))
    assert len(seen[0]) > 1000
    assert all(s == seen[0] for s in seen[1:])


def test_trace_header_names_the_simulator(tmp_path: Path, fleet_raw: dict) -> None:
    Simulation(scenario_from_raw(fleet_raw), trace_path=tmp_path / "t.jsonl").run()
    header = next(read_trace(tmp_path / "t.jsonl"))
    assert header.producer == "edgeserve sim" and header.clock == "sim"  # type: ignore[union-attr]


def test_the_progress_bar_does_not_change_results(fleet_raw: dict) -> None:
    quiet = Simulation(scenario_from_raw(fleet_raw)).run()
    shown = Simulation(scenario_from_raw(fleet_raw)).run(progress=True)
    assert shown.fleet == quiet.fleet and shown.events == quiet.events
