"""Replicas or TP: layouts, a lone request's closed form, the PCIe crossover, the CLI."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from edgeserve.cli.main import main
from sim.core.cloud import Roofline
from sim.experiments.replicas_tp import Layout, Slo, Traffic, answer, layouts, simulate
from sim.scenario.deployment import BoxProfile, load_box_profile

PCIE_BOX = "l40s-x4-pcie-qwen2-vl-7b"
NVLINK_BOX = "a100-x8-nvlink-qwen2-vl-7b"


def test_layouts_are_the_power_of_two_splits_whose_replica_holds_a_request() -> None:
    box = load_box_profile(NVLINK_BOX)
    assert [lay.label for lay in layouts(8, box, 2048)] == ["8×TP1", "4×TP2", "2×TP4", "1×TP8"]
    # a 60 GB checkpoint does not fit one 48 GB L40S: TP1 is not a layout
    big = BoxProfile(load_box_profile(PCIE_BOX).profile,
                     replace(load_box_profile(PCIE_BOX).deployment, weights_gb=60.0))
    assert [lay.label for lay in layouts(4, big, 2048)] == ["2×TP2", "1×TP4"]


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_a_lone_request_takes_the_roofline_prefill_and_decode_steps(tp: int) -> None:
    box = load_box_profile(PCIE_BOX)
    r = Roofline(box.profile, box.deployment.with_tp(tp))
    p = simulate(box, Layout(4 // tp, tp), Traffic(rate_rps=1.0, requests=1), Slo())
    assert p.ttft_p50_s == pytest.approx(r.prefill_tokens_s(1024), rel=1e-9)
    assert p.tpot_p50_s == pytest.approx(r.step_s(1, 1024), rel=1e-9)


def test_on_pcie_tp_is_faster_alone_but_replicas_sustain_more() -> None:
    box = load_box_profile(PCIE_BOX)
    a = answer(box, 4, Traffic(rate_rps=4.0, requests=600), Slo(ttft_p99_s=2.0),
               rate_factors=(0.25, 1.0, 2.0, 3.0))
    low = {p.layout.label: p for p in a.at(1.0)}
    assert low["1×TP4"].tpot_p50_s < low["2×TP2"].tpot_p50_s < low["4×TP1"].tpot_p50_s
    tp4, reps = Layout(1, 4), Layout(4, 1)
    assert (a.max_sustained(reps) or 0) > (a.max_sustained(tp4) or 0)


def test_cli_writes_the_table_json_and_plot(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["sim", "replicas-tp", "--box", PCIE_BOX, "--rate", "4", "--requests", "200",
               "--tpot-p99", "0.05", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0 and "| 4×TP1 | 4 |" in out and "at 4 req/s on 4 GPUs" in out
    data = json.loads((tmp_path / "replicas_tp.json").read_text())
    assert data["best"] in {"4×TP1", "2×TP2", "1×TP4"} and data["gpus"] == 4
    assert (tmp_path / "replicas_tp.png").stat().st_size > 10_000


def test_cli_errors_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "replicas-tp", "--box", "dgx-h100", "--rate", "4"]) == 2
    err = capsys.readouterr().err
    assert "no box profile 'dgx-h100'" in err and "Traceback" not in err


@pytest.mark.parametrize("tp", [1, 2])
def test_a_lone_photo_request_waits_for_preprocessing_then_the_prefill_with_its_encoder(
        tp: int) -> None:
    """A 12 MP photo of 1280 image tokens: TTFT = the server's preprocessing (s per megapixel)
    + the prefill of the whole prompt + the vision encoder's time per image token, both
    encoder and prefill split over the TP ranks."""
    box = load_box_profile(NVLINK_BOX)
    r = Roofline(box.profile, box.deployment.with_tp(tp))
    traffic = Traffic(rate_rps=1.0, requests=1, prompt_tokens=1304, output_tokens=48,
                      image_tokens=1280, source_pixels=12_000_000)
    p = simulate(box, Layout(2 // tp, tp), traffic, Slo())
    server = box.profile.server
    assert p.ttft_p50_s == pytest.approx(
        12 * server.preprocess_s_per_mpixel + r.prefill_tokens_s(1304)
        + server.encode_s_per_image_token / tp * 1280, rel=1e-9)
    assert p.e2e_p50_s == pytest.approx(p.ttft_p50_s + 47 * p.tpot_p50_s, rel=1e-9)


def test_an_image_cannot_have_more_tokens_than_its_prompt() -> None:
    with pytest.raises(ValueError, match="within the prompt"):
        Traffic(rate_rps=1.0, prompt_tokens=100, image_tokens=200)
