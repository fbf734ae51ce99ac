"""The thermal fit recovers a network's parameters from a noisy curve the network itself made.

A phone-like device: 1.6 W static, a 3.8 W accelerator kept busy, a junction trip at 90 °C
(step-wise) and a skin limit at 43 °C (power allocator). Its curve — throughput relative to full
clock, as 10 s window means every 10 s for 900 s, times 40 tok/s, with 2 % multiplicative noise —
is fitted from a start 1.5× off in every parameter.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from edgeserve.cli.main import main
from sim.fit.thermal_fit import Curve, Load, fit_thermal, predict, read_curve
from sim.scenario.profiles import DeviceProfile
from sim.scenario.schema import build

TRUE = {"junction_c_j_per_c": 1.7, "skin_c_j_per_c": 12.0, "r_junction_skin_c_per_w": 20.0,
        "r_skin_ambient_c_per_w": 10.0}
OFF = {"junction_c_j_per_c": 1.7 * 1.5, "skin_c_j_per_c": 12.0 / 1.5,
       "r_junction_skin_c_per_w": 20.0 * 1.5, "r_skin_ambient_c_per_w": 10.0 / 1.5}


def phone(net: dict[str, float]) -> DeviceProfile:
    return build(DeviceProfile, {
        "name": "phone-like", "base_w": 1.2,
        "units": {"cpu": {"kind": "cpu", "count": 4, "idle_w": 0.05, "active_w": 1.2},
                  "npu": {"kind": "npu", "idle_w": 0.2, "active_w": 4.0}},
        "stages": {s: {"unit": "cpu"} for s in ("image_decode", "resize", "normalize")}
        | {"prefill": {"unit": "npu"}, "decode_step": {"unit": "npu"}},
        "thermal_network": {
            **net, "ambient_c": 22.0, "poll_s": 0.25,
            "clocks": {"npu": {"levels": 32, "min_clock": 0.3, "power_exponent": 2.5}},
            "governors": [
                {"node": "junction", "units": ["npu"], "step_wise": {"trip_c": 90.0, "hysteresis_c": 0.5}},
                {"node": "skin", "units": ["npu"],
                 "power_allocator": {"control_temp_c": 43.0, "sustainable_power_w": 2.1,
                                     "k_p": 0.3, "k_i": 0.002}}]},
    }, "profile")


LOAD = Load(("npu",), "npu")


def synthetic(noise: float, seed: int = 1) -> Curve:
    t = np.arange(10.0, 901.0, 10.0)
    blank = Curve(t, np.ones_like(t), np.full_like(t, np.nan))
    prof = phone(TRUE)
    assert prof.thermal_network is not None
    frac, _ = predict(prof.thermal_network, prof, LOAD, blank, window_s=10.0)
    rng = np.random.default_rng(seed)
    return Curve(t, 40.0 * frac * (1 + noise * rng.standard_normal(len(t))), blank.temp_c)


def test_the_curve_has_the_published_shape() -> None:
    """A quick junction drop, then a slower settle under the skin limit."""
    c = synthetic(0.0)
    at = dict(zip(c.t_s, c.value / 40.0, strict=True))
    assert at[10.0] == 1.0
    assert at[60.0] < 0.8  # a quarter or more gone within the first minute
    assert at[900.0] < at[120.0] - 0.05  # and deeper minutes later


def test_fit_recovers_the_parameters_from_a_noisy_curve() -> None:
    fit = fit_thermal(phone(OFF), synthetic(0.02), LOAD, window_s=10.0)
    for k, v in TRUE.items():
        assert fit.params[k] == pytest.approx(v, rel=0.15), k
    assert fit.full_value == pytest.approx(40.0, rel=0.03)
    assert fit.rms_rel < 0.04  # about the noise


def test_calibrate_thermal_prints_the_error_and_writes_the_profile(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]
                                                                  ) -> None:
    import yaml

    c = synthetic(0.02)
    curve = tmp_path / "curve.csv"
    curve.write_text("t_s,throughput_tok_s\n" + "".join(
        f"{t},{v}\n" for t, v in zip(c.t_s, c.value, strict=True)))
    prof = tmp_path / "phone.yaml"
    raw = dataclasses.asdict(phone(OFF))
    prof.write_text(yaml.safe_dump(_plain(raw)))
    out = tmp_path / "fitted.yaml"
    rc = main(["calibrate", "thermal", str(curve), "--profile", str(prof), "--unit", "npu",
               "--window-s", "10", "--out", str(out)])
    text = capsys.readouterr().out
    assert rc == 0
    assert "rms relative error" in text and "r_skin_ambient_c_per_w" in text
    fitted = yaml.safe_load(out.read_text())["thermal_network"]
    assert fitted["r_skin_ambient_c_per_w"] == pytest.approx(10.0, rel=0.15)
    assert read_curve(curve).value[0] == pytest.approx(c.value[0])


def test_calibrate_thermal_names_a_bad_curve(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    curve = tmp_path / "curve.csv"
    curve.write_text("time,speed\n1,2\n")
    rc = main(["calibrate", "thermal", str(curve), "--profile", "phone-soc"])
    assert rc == 2
    assert "must name t_s" in capsys.readouterr().err


def _plain(x: object) -> object:
    """Enums to their values, for YAML."""
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items() if v is not None}
    if isinstance(x, list):
        return [_plain(v) for v in x]
    if hasattr(x, "value") and isinstance(x.value, str):
        return x.value
    return x


def test_the_shipped_phone_profile_throttles_early_then_settles_deeper() -> None:
    """phone-soc under continuous decode: full clock at first, a quarter or more gone within the
    first minute (the junction), and lower still after five (the skin)."""
    from sim.scenario.config import load_device_profile

    prof = load_device_profile("phone-soc")
    assert prof.thermal_network is not None
    t = np.array([10.0, 60.0, 300.0, 900.0])
    frac, temp = predict(prof.thermal_network, prof, LOAD, Curve(t, np.ones(4), np.full(4, np.nan)),
                         window_s=10.0)
    assert frac[0] == 1.0
    assert frac[1] <= 0.75
    assert frac[2] < frac[1] and frac[3] < 0.65
    assert max(temp) < 91.5  # the junction held near its 90 °C trip
