"""A simulated workload's image tokens follow the model family's rule, from the same spec the
runtime preprocesses with (:mod:`mm_preproc.spec`).

Qwen2-VL and Qwen2.5-VL: one token per 28×28 px; Qwen3-VL and Qwen3.5: one per 32×32 px, at most
1280 tokens unless ``max_pixels`` says otherwise. Closed forms: a 1920×1080 photo is over both
caps, so it is scaled by β = √(1920·1080 / max_pixels) and floored to the factor: β = 1.4375
under Qwen2-VL's 1280·28² → 1316×728 (47·26 = 1222 tokens of 28 px); β = 1.2578 under
Qwen3-VL's 1280·32² → 1504×832 (47·26 = 1222 tokens of 32 px, 1.31× the pixels).
"""

from __future__ import annotations

import pytest

import mm_preproc
from mm_preproc.spec import PRESETS, Family
from sim.core.workload import ImageGeometry
from sim.scenario.config import ImageConfig, ImageSize, scenario_from_raw
from sim.scenario.schema import ConfigError


@pytest.mark.parametrize(("family", "target", "tokens"), [
    ("qwen2_vl", (728, 1316), 1222), ("qwen2_5_vl", (728, 1316), 1222),
    ("qwen3_vl", (832, 1504), 1222), ("qwen3_5", (832, 1504), 1222)])
def test_a_1080p_photo_has_the_familys_tokens(
    family: str, target: tuple[int, int], tokens: int
) -> None:
    cfg = ImageConfig(sizes=[ImageSize(1920, 1080)], family=family)
    th, tw, n, _ = ImageGeometry(cfg).target(1920, 1080)
    assert ((th, tw), n) == (target, tokens)
    spec = PRESETS[Family(family)]
    # the runtime's own rule for the same image (mm_preproc.target_size with the family's spec)
    assert mm_preproc.target_size(1080, 1920, spec=spec, max_pixels=spec.budget(1280)) == (th, tw)
    assert spec.tokens(th, tw) == n


def test_explicit_bounds_are_kept_and_no_family_is_qwen2_vl() -> None:
    cfg = ImageConfig(family="qwen3_vl", min_pixels=32 * 32, max_pixels=256 * 32 * 32)
    assert (cfg.factor, cfg.pixels_per_token, cfg.min_pixels, cfg.max_pixels) == (
        32, 1024, 1024, 256 * 1024)
    plain = ImageConfig()
    assert (plain.factor, plain.pixels_per_token, plain.max_pixels) == (28, 784, 1280 * 784)


def test_an_unknown_family_is_refused_naming_the_field() -> None:
    raw = {"name": "one camera", "devices": [{"name": "cam", "profile": "jetson-orin-nano",
                        "workload": {"image": {"family": "llava"}}}]}
    with pytest.raises(ConfigError, match=r"image\.family: must be one of qwen2_vl"):
        scenario_from_raw(raw)
