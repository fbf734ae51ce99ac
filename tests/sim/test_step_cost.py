"""One step-time formula (``sim/core/step_cost.py``) for the step engine and the calibrator."""

from __future__ import annotations

import pytest

from edgeserve.records import EngineStep
from sim.core.step_cost import StepCost
from sim.fit.least_squares import StageFit
from sim.fit.step_fit import step_prediction

PER = {"prefill_tokens": 1e-4, "decode_tokens": 2e-3, "context_tokens": 1e-6,
       "encoder_tokens": 3e-5, "encoder_tokens_sq": 1e-8, "encoder_tokens_cross": 5e-9,
       "prefill_x_context": 2e-9}


def test_a_step_costs_its_base_plus_each_feature_times_its_coefficient():
    cost = StepCost(0.004, PER)
    # 600 prompt tokens with a 600-token image beside 4 decoders holding 3,000 tokens of context
    prefill, decode, ctx, enc, enc_sq = 600, 4, 3600, 600, 600 * 600
    expected = (0.004 + 1e-4 * 600 + 2e-3 * 4 + 1e-6 * 3600 + 3e-5 * 600 + 1e-8 * 360_000
                + 5e-9 * 0 + 2e-9 * 600 * 3000)
    assert cost.seconds(prefill, decode, ctx, enc, enc_sq) == pytest.approx(expected, rel=1e-12)
    # two 300-token images instead: Σ tokens² halves and the cross term pays the difference
    two = cost.seconds(prefill, decode, ctx, 600, 2 * 300 * 300)
    assert two - cost.seconds(prefill, decode, ctx, 600, 600 * 600) == pytest.approx(
        (1e-8 - 5e-9) * (2 * 90_000 - 360_000))


def test_a_missing_feature_costs_nothing_and_context_below_the_prompt_is_no_others():
    cost = StepCost(0.002, {"decode_tokens": 1e-3, "prefill_x_context": 1e-9})
    assert cost.seconds(0, 3, 5000) == pytest.approx(0.002 + 3e-3)
    # a recorded step whose context reads below its own prompt (a block-rounded KV gauge)
    assert cost.seconds(800, 0, 500) == pytest.approx(0.002)


def test_the_calibrator_predicts_a_recorded_step_as_the_engine_prices_it():
    fit = StageFit("step", 100, 0.004, dict(PER), 0.0, 1.0)
    s = EngineStep(t_s=1.0, duration_s=0.1, prefill_tokens=600, decode_tokens=4,
                   encoder_tokens=600, running=5, kv_cache_usage=0.25)
    kv_tokens = 14_400  # 25 % of it held: 3,600 tokens of context
    assert step_prediction(fit, s, kv_tokens) == StepCost(0.004, PER).seconds(
        600, 4, 3600.0, 600, 600.0 * 600)
