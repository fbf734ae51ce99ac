"""``edgeserve calibrate`` then ``edgeserve calibrate validate`` on real recorded traces.

``data/calib.jsonl`` and ``data/heldout.jsonl`` were recorded from the default ``edgeserve serve``
on the 2-core development machine (``scripts/record_test_traces.sh``): 20 s each, different image
mixes and rates. The profile fitted on the first must load and replay the second; the report's
measured column must be exactly what the held-out trace says, and its simulated column exactly
what the simulated records say.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from edgeserve.cli.main import main
from edgeserve.records import Outcome, RequestRecord, read_trace
from sim.fit.validate import Side, stall_seconds, validate, validate_runs

DATA = Path(__file__).parent / "data"


def ok_records(path: Path) -> list[RequestRecord]:
    return [r for r in read_trace(path)
            if isinstance(r, RequestRecord) and r.outcome is Outcome.OK]


@pytest.fixture(scope="module")
def profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cal") / "box.yaml"
    assert main(["calibrate", str(DATA / "calib.jsonl"), "--out", str(out)]) == 0
    return out


def test_the_calibrated_profile_describes_the_measured_machine(profile: Path) -> None:
    prof = yaml.safe_load(profile.read_text())
    header = next(read_trace(DATA / "calib.jsonl"))
    engine = header.meta["engine"]  # type: ignore[union-attr]
    assert prof["units"]["cpu"]["count"] == header.meta["workers"]  # type: ignore[union-attr]
    step = prof["llm"]["step"]
    assert step["max_num_seqs"] == engine["max_num_seqs"]
    assert step["max_num_batched_tokens"] == engine["max_num_batched_tokens"]
    assert prof["llm"]["kv_capacity_tokens"] == engine["kv_cache_tokens"]
    assert step["base_s"] > 0 and step["per"]["decode_tokens"] >= 0


def test_validate_reports_the_held_out_trace_as_measured(
    profile: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "v"
    assert main(["calibrate", "validate", str(profile), str(DATA / "heldout.jsonl"),
                 "--out-dir", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "ttft p99" in printed and "throughput req/s" in printed
    (report,) = json.loads((out / "validation.json").read_text())
    rows = {r["quantity"]: r for r in report["rows"]}
    recs = ok_records(DATA / "heldout.jsonl")
    ttft = [r.ttft_s for r in recs]
    e2e = [r.e2e_s for r in recs]
    assert rows["ttft p50"]["measured"] == pytest.approx(float(np.percentile(ttft, 50)))
    assert rows["ttft p99"]["measured"] == pytest.approx(float(np.percentile(ttft, 99)))
    assert rows["e2e mean"]["measured"] == pytest.approx(float(np.mean(e2e)))
    span = max(r.finished_s for r in recs) - min(  # type: ignore[type-var]
        r.arrived_s for r in read_trace(DATA / "heldout.jsonl") if isinstance(r, RequestRecord))
    assert rows["throughput req/s"]["measured"] == pytest.approx(len(recs) / span)
    assert report["measured_requests"] == len(recs)
    assert (out / "cdf_heldout.png").stat().st_size > 10_000
    # each measured latency figure comes with its own 95 % block-bootstrap interval, and the
    # report says whether the simulated figure lies inside it
    assert "block bootstrap" in printed
    for q in ("ttft mean", "ttft p50", "e2e mean", "e2e p50"):
        lo, hi = rows[q]["measured_interval"]
        assert lo <= rows[q]["measured"] <= hi
        assert rows[q]["inside_interval"] == (lo <= rows[q]["simulated"] <= hi)
    assert "measured_interval" not in rows["throughput req/s"]


def test_the_simulated_column_is_computed_from_the_simulated_records(profile: Path) -> None:
    v, simulated = validate(yaml.safe_load(profile.read_text()), DATA / "heldout.jsonl")
    ok = [r for r in simulated if r.outcome is Outcome.OK]
    assert len(ok) == v.simulated.completed == v.measured.completed  # every request replayed
    rows = {q: (a, b, e) for q, a, b, e in v.rows()}
    sim_e2e = [r.e2e_s for r in ok]
    assert rows["e2e p90"][1] == pytest.approx(float(np.percentile(sim_e2e, 90)))
    a, b, e = rows["e2e p90"]
    assert e == pytest.approx((b - a) / a)  # type: ignore[operator]


def test_stall_is_cpu_time_not_covered_by_engine_time() -> None:
    # request a: CPU 0–2 s, engine 2–5 s; request b: CPU 1–4 s (engine busy with a from 2 s)
    a = RequestRecord(id="a", arrived_s=0.0, preproc_queued_s=0.0, preproc_start_s=0.0,
                      decode_end_s=1.0, resize_end_s=1.5, normalize_end_s=2.0,
                      engine_queued_s=2.0, first_token_s=3.0, last_token_s=5.0, finished_s=5.0)
    b = RequestRecord(id="b", arrived_s=1.0, preproc_queued_s=1.0, preproc_start_s=1.0,
                      decode_end_s=3.0, resize_end_s=3.5, normalize_end_s=4.0,
                      engine_queued_s=5.0, first_token_s=6.0, last_token_s=7.0, finished_s=7.0)
    # CPU busy 0–4 (union), engine busy 2–7: stalled 0–2
    assert stall_seconds([a, b]) == pytest.approx(2.0)
    side = Side()
    side.add(a)
    side.add(b)
    assert side.throughput_rps == pytest.approx(2 / 7.0)


def test_pooled_runs_are_compared_as_one(
    profile: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # two recorded runs given with --pool: one comparison whose measured percentiles are those of
    # both runs' requests together, and whose throughput is all completions over both spans
    out = tmp_path / "v"
    runs = [DATA / "calib.jsonl", DATA / "heldout.jsonl"]
    assert main(["calibrate", "validate", str(profile), *map(str, runs), "--pool", "--seeds", "2",
                 "--out-dir", str(out)]) == 0
    (report,) = json.loads((out / "validation.json").read_text())
    rows = {r["quantity"]: r for r in report["rows"]}
    per_run = [ok_records(t) for t in runs]
    ttft = [r.ttft_s for recs in per_run for r in recs]
    assert report["measured_requests"] == len(ttft) == sum(map(len, per_run))
    assert report["simulated_requests"] == 2 * len(ttft)  # two replays of every run
    assert rows["ttft p99"]["measured"] == pytest.approx(float(np.percentile(ttft, 99)))
    spans = [max(r.finished_s for r in recs) - min(  # type: ignore[type-var]
        r.arrived_s for r in read_trace(t) if isinstance(r, RequestRecord))
        for t, recs in zip(runs, per_run, strict=True)]
    assert rows["throughput req/s"]["measured"] == pytest.approx(len(ttft) / sum(spans))
    assert (out / "cdf_pooled.png").stat().st_size > 10_000


def test_pooled_runs_keep_their_own_bootstrap_blocks(profile: Path) -> None:
    runs = [DATA / "calib.jsonl", DATA / "heldout.jsonl"]
    v = validate_runs(yaml.safe_load(profile.read_text()), runs)
    side = v.measured
    assert side.runs == 2
    n_first = len(ok_records(runs[0]))
    assert side.run["ttft"] == [0] * n_first + [1] * (side.completed - n_first)
    assert side.arrival_s["ttft"][:n_first] == [r.arrived_s for r in ok_records(runs[0])]
    # ITL samples carry their request's run and arrival as well
    assert len(side.run["itl"]) == len(side.arrival_s["itl"]) == len(side.samples["itl"])
    assert set(side.intervals("ttft")) == {"mean", "p50", "p90", "p99"}


def test_the_simulators_spread_is_the_range_of_each_seeds_pooled_replays(profile: Path) -> None:
    # with five seeds, each figure gets the range it takes over the seeds: seed k's figure is
    # that of seed k's replays of every run pooled, as one measurement of those runs is taken
    prof = yaml.safe_load(profile.read_text())
    runs = [DATA / "calib.jsonl", DATA / "heldout.jsonl"]
    v = validate_runs(prof, runs, seeds=5)
    assert len(v.seed_sides) == 5
    per_seed = []
    for k in range(5):
        ttft = [r.ttft_s for t in runs for r in validate(prof, t, seed=1 + k)[1]
                if r.outcome is Outcome.OK and r.ttft_s is not None]
        per_seed.append(float(np.percentile(ttft, 99)))
    assert len(set(per_seed)) > 1  # the profile is stochastic: seeds differ
    lo, hi = v.simulated_spread()["ttft p99"]
    assert (lo, hi) == pytest.approx(tuple(np.percentile(per_seed, [2.5, 97.5])))
    # the pooled simulated figure is still all seeds together, untouched by the per-seed sides
    assert v.simulated.completed == sum(s.completed for s in v.seed_sides)
    report = {r["quantity"]: r for r in v.as_dict()["rows"]}
    row = report["ttft p99"]
    assert row["simulated_spread"] == pytest.approx([lo, hi])
    assert row["measured_inside_spread"] == (lo <= row["measured"] <= hi)
    assert "simulated spread (5 seeds)" in v.format()


def test_too_few_seeds_report_no_spread(profile: Path) -> None:
    v, _ = validate(yaml.safe_load(profile.read_text()), DATA / "heldout.jsonl", seeds=2)
    assert v.simulated_spread() == {}
    assert "simulated spread" not in v.format()
    assert all("simulated_spread" not in r for r in v.as_dict()["rows"])
