"""``edgeserve sim sweep`` over a cloud entry's deployment: replicas or tensor parallelism on a box,
through the real command line in a subprocess, against the roofline's own numbers."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from edgeserve.records import RequestRecord
from sim.core.cloud import Roofline
from sim.core.job import Job
from sim.scenario.config import load_scenario, parse_override
from sim.scenario.deployment import load_box_profile
from sim.scenario.schema import ConfigError

BOX = "l40s-x4-pcie-qwen2-vl-7b"
TEXT, IMAGE_TOKENS, OUT = 1000, 4, 64  # a 56×56 photo is 2×2 patches of 28 px: 4 tokens

# one camera, one frame every 100 s: no request ever waits for another, so a request's time on
# the server is its prefill plus its decode steps alone, whatever the layout
SCENARIO = f"""\
name: tp-alone
requests: 12
duration_s: 10000
sample_interval_s: 1000
policy: {{kind: always_cloud}}
devices:
  - name: cam
    profile: jetson-orin-nano
    workload:
      kind: periodic
      fps: 0.01
      image: {{sizes: [{{width: 56, height: 56}}]}}
      text_tokens: {TEXT}
      output_tokens: [{OUT}, {OUT}]
cloud:
  - name: box
    profile: {BOX}
"""


def server_s(tp: int) -> float:
    """What the roofline says one request alone costs on a replica of ``tp`` GPUs."""
    box = load_box_profile(BOX)
    r = Roofline(box.profile, box.deployment.with_tp(tp))
    prompt = TEXT + IMAGE_TOKENS
    job = Job(RequestRecord(id="x", arrived_s=0.0), None, 56 * 56, 56 * 56, IMAGE_TOKENS,
              prompt, OUT)
    return r.prefill_s(job) + (OUT - 1) * r.step_s(1, prompt)


def test_a_tp_sweep_through_the_cli_moves_latency_by_the_cost_model(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(SCENARIO)
    out = tmp_path / "sweep"
    proc = subprocess.run(
        [sys.executable, "-m", "edgeserve", "sim", "sweep", str(tmp_path / "s.yaml"),
         "--param", "cloud[0].deployment.tp_size=1,2,4", "--workers", "1", "--no-progress",
         "--plots", "--out", str(out)],
        capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    with open(out / "sweep.csv") as f:
        rows = {int(r["cloud[0].deployment.tp_size"]): r for r in csv.DictReader(f)}
    # the box has 4 GPUs: replicas follow tp_size
    assert {tp: r["layout"] for tp, r in rows.items()} == {1: "4×TP1", 2: "2×TP2", 4: "1×TP4"}
    # the links and the device are the same in every run (same seed, same arrivals): the mean
    # end-to-end latencies differ exactly by the server times the roofline gives
    mean = {tp: float(r["e2e_mean_s"]) for tp, r in rows.items()}
    for tp in (2, 4):
        assert mean[1] - mean[tp] == pytest.approx(server_s(1) - server_s(tp), rel=1e-9)
    assert server_s(1) > server_s(2) > server_s(4)  # alone, TP is faster on this box
    assert "best tp_size=4, layout=1×TP4" in proc.stdout
    assert (out / "sweep.png").stat().st_size > 10_000


def test_a_deployment_is_validated_where_the_scenario_names_it() -> None:
    def load(*sets: str) -> object:
        return load_scenario("replicas-tp", [parse_override(s) for s in sets])

    assert load().cloud[0].replica_count == 4  # type: ignore[attr-defined]
    assert load("cloud[0].deployment.tp_size=4").cloud[0].replica_count == 1  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r"scenario.cloud\[0\].replicas: 3 replicas × tp_size 2 "
                                          r"need 6 GPUs; the box has 4"):
        load("cloud[0].deployment.tp_size=2", "cloud[0].replicas=3")
    with pytest.raises(ConfigError, match=r"cloud\[0\].deployment.tp_size: tp_size 8 is more "
                                          r"than the box's 4 GPUs"):
        load("cloud[0].deployment.tp_size=8")
    with pytest.raises(ConfigError, match=r"cloud\[0\].deployment.interconnect: tp_size 2 needs "
                                          r"an interconnect"):
        load_scenario("default", [parse_override("cloud[0].deployment.tp_size=2")])
