"""A prediction interval holds the figure a server of the calibrated kind shows, as often as it says.

The known model: a profile calibrated from ``tests/sim/data/calib.jsonl`` (its ``uncertainty``
section as calibrate wrote it, plus a 5 % spread of servers' levels). Each trial's "measured"
run is a synthetic trace: the held-out arrivals replayed through a server drawn from that model
(its own coefficients, level and seed). Each trial's 90 % interval is predicted from 20 other
draws. Over 60 trials the interval must hold the measured figure about 90 % of the time — an
exchangeable draw lands between the 1st and 20th of 20 with probability 19/21 — and a profile
without the section must give the old output.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from sim.fit.calibrate import calibrate_traces
from sim.fit.prediction import draw_profile, intervals
from sim.fit.profile_writer import to_profile
from sim.fit.traces import read_traces
from sim.fit.validate import figures, prediction_intervals, replay

DATA = Path(__file__).parent / "data"
HELDOUT = DATA / "heldout.jsonl"


@pytest.fixture(scope="module")
def profile() -> dict:
    cal = calibrate_traces(read_traces([DATA / "calib.jsonl"]))
    prof = to_profile(cal, None, "calib", ["calib.jsonl"])
    prof["uncertainty"]["level_sd"] = 0.05
    return prof


def test_order_statistics_give_a_new_draw_the_nominal_chance() -> None:
    rng = np.random.default_rng(0)
    hits = 0
    for _ in range(4000):
        x = rng.normal(size=21)
        lo, hi = intervals([{"f": v} for v in x[:20]], 0.9)["f"]
        hits += lo <= x[20] <= hi
    assert hits / 4000 == pytest.approx(19 / 21, abs=0.015)


def test_a_drawn_profile_moves_its_coefficients_and_keeps_them_non_negative(profile: dict) -> None:
    rng = np.random.default_rng(1)
    bases = [draw_profile(profile, rng)["llm"]["step"]["base_s"] for _ in range(200)]
    assert min(bases) >= 0 and np.std(bases) > 0
    # the level alone scales the step's own time: its log spread is the level_sd
    own = profile["llm"]["step"]["base_s"] - profile["uncertainty"]["models"]["step_gap"]["terms"][
        "base_s"]["value"]
    gap = profile["llm"]["step"]["base_s"] - own
    levels = [(draw_profile(profile, rng, coefficients=False)["llm"]["step"]["base_s"] - gap) / own
              for _ in range(2000)]
    assert float(np.std(np.log(levels))) == pytest.approx(0.05, rel=0.1)
    assert draw_profile({"name": "plain"}, rng) == {"name": "plain"}


def test_the_90_percent_interval_holds_a_drawn_server_about_90_percent_of_the_time(
        profile: dict) -> None:
    truth_rng = np.random.default_rng(2026)
    hits: dict[str, int] = {}
    trials = 60
    for trial in range(trials):
        server = draw_profile(profile, truth_rng)
        measured = figures(replay(server, HELDOUT, 5000 + trial)[0])
        ivs = prediction_intervals(profile, [HELDOUT], draws=20, seed=trial)
        for k in ("ttft p50", "ttft p90", "e2e p50", "e2e p90"):
            lo, hi = ivs[k]
            hits[k] = hits.get(k, 0) + (lo <= measured[k] <= hi)  # type: ignore[operator]
    coverage = sum(hits.values()) / (len(hits) * trials)
    # 19/21 expected; binomial sd over 60 trials is 0.038 per figure
    assert 0.82 <= coverage <= 0.98, hits
    assert all(h >= 0.75 * trials for h in hits.values()), hits


def test_validate_json_has_every_figure_with_its_interval(profile: dict, tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    import yaml

    prof_path = tmp_path / "p.yaml"
    prof_path.write_text(yaml.safe_dump(profile, sort_keys=False))
    out = tmp_path / "v.json"
    r = subprocess.run([sys.executable, "-m", "edgeserve", "calibrate", "validate", str(prof_path),
                        str(HELDOUT), "--seeds", "1", "--draws", "10", "--json", str(out)],
                       capture_output=True, text=True, check=True)
    assert "90 % prediction" in r.stdout
    doc = json.loads(out.read_text())
    assert set(doc) == {f"{m}_{w}" for m in ("ttft", "tpot", "itl", "e2e")
                        for w in ("mean", "p50", "p90", "p99")}
    lo, hi = doc["e2e_p99"]["interval"]
    assert 0 < lo <= hi and math.isfinite(doc["e2e_p99"]["measured"])
    plain = {k: v for k, v in profile.items() if k != "uncertainty"}
    prof_path.write_text(yaml.safe_dump(plain, sort_keys=False))
    r = subprocess.run([sys.executable, "-m", "edgeserve", "calibrate", "validate", str(prof_path),
                        str(HELDOUT), "--seeds", "1", "--json", str(out)],
                       capture_output=True, text=True, check=True)
    assert "prediction" not in r.stdout
    assert json.loads(out.read_text())["e2e_p99"]["interval"] is None


def test_sim_run_prints_intervals_beside_the_point_estimate_for_a_calibrated_profile(
        profile: dict, tmp_path: Path) -> None:
    import subprocess
    import sys

    import yaml

    scenario = {"name": "calibrated", "seed": 3, "duration_s": 30, "slo": {"e2e_s": 10.0},
                "policy": {"kind": "always_local"},
                "devices": [{"name": "measured", "profile": profile,
                             "workload": {"kind": "replay", "trace": str(HELDOUT)}}]}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario, sort_keys=False))
    run = [sys.executable, "-m", "edgeserve", "sim", "run", str(path), "--no-progress"]
    out = subprocess.run([*run, "--draws", "6"], capture_output=True, text=True, check=True).stdout
    line = next(x for x in out.splitlines() if x.strip().startswith("e2e p50"))
    point, lo, hi = (float(v) for v in
                     line.replace("[", " ").replace("…", " ").replace("ms", " ").split()[2:5])
    assert "90 % prediction intervals" in out and 0 < lo <= hi
    assert point == pytest.approx((lo + hi) / 2, rel=0.3)
    plain = subprocess.run([*run, "--draws", "0"], capture_output=True, text=True,
                           check=True).stdout
    assert "prediction" not in plain and out.startswith(plain.splitlines()[0])


def test_a_fresh_servers_level_from_two_servers_is_students_t_on_one_degree_of_freedom() -> None:
    from sim.fit.prediction import level_factor

    rng = np.random.default_rng(5)
    sd = 0.04
    # two calibration servers: z = sd·√1.5·t₁ (a Cauchy), whose median |z| is sd·√1.5
    z2 = np.abs(np.log([level_factor(rng, sd, 2) for _ in range(20000)]))
    assert float(np.median(z2)) == pytest.approx(sd * math.sqrt(1.5), rel=0.05)
    # many servers: the spread is known, z is nearly N(0, sd)
    z50 = np.log([level_factor(rng, sd, 50) for _ in range(20000)])
    assert float(np.std(z50)) == pytest.approx(sd * math.sqrt(1 + 1 / 50) * math.sqrt(49 / 47),
                                               rel=0.05)
    # no levels listed: the normal, as before
    z0 = np.log([level_factor(rng, sd, 0) for _ in range(20000)])
    assert float(np.std(z0)) == pytest.approx(sd, rel=0.05)
    # never beyond twice or half the model's speed
    assert max(level_factor(rng, 5.0, 2) for _ in range(200)) <= 2.0 + 1e-12


def coefficients(model: dict) -> list[float]:
    return [model["base_s"], *(model.get("per") or {}).values()]


def test_the_worker_level_scales_the_worker_stages_together_and_nothing_else(
        profile: dict) -> None:
    import copy

    prof = copy.deepcopy(profile)
    u = prof["uncertainty"]
    u["level_sd"] = 0.0
    u.update(worker_level_sd=0.1, worker_levels=[0.9, 1.0, 1.1],
             worker_stages=["image_decode", "resize", "normalize"])
    rng = np.random.default_rng(9)
    ratios = []
    for _ in range(300):
        drawn = draw_profile(prof, rng, coefficients=False)
        stages = drawn["stages"]
        r = [c / c0 for s in u["worker_stages"]
             for c, c0 in zip(coefficients(stages[s]["model"]),
                              coefficients(prof["stages"][s]["model"]), strict=True) if c0 > 0]
        assert r and max(r) == pytest.approx(min(r))  # one factor for all the workers' stages
        ratios.append(r[0])
        assert drawn["llm"]["step"] == prof["llm"]["step"]  # the engine's level is apart
    # three servers: sd·√(4/3)·t₂; the draws spread, centred on the model
    assert float(np.median(np.log(ratios))) == pytest.approx(0.0, abs=0.03)
    assert float(np.std(np.log(ratios))) > 0.05


def test_a_drawn_profile_moves_vllms_input_processing_too(profile: dict) -> None:
    # calibrate bootstraps the input processing like every stage; a drawn profile moves it
    assert "input_processing" in profile["uncertainty"]["models"]
    rng = np.random.default_rng(2)
    fitted = profile["llm"]["input_processing"]["per"]["target_pixels"]
    drawn = [draw_profile(profile, rng)["llm"]["input_processing"]["per"]["target_pixels"]
             for _ in range(200)]
    assert min(drawn) >= 0 and np.std(drawn) > 0
    assert float(np.mean(drawn)) == pytest.approx(fitted, rel=0.05)
