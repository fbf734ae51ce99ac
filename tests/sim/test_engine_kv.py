"""The trace header's KV cache read back (sim.fit.engine_kv) and what the calibrator makes of it.

Specification: for a model with a KV cache in every layer a step's context is ``kv_cache_usage ×
kv_cache_tokens``, as before; for a hybrid model (the tiny Qwen3.5: 97 blocks of 1152 tokens,
one attention group, two state blocks per request with prefix caching) it is the attention
blocks the running requests hold — the pool's usage less their state blocks — in tokens, and
the profile's KV capacity is vLLM's own (16.17 requests of 4096 tokens = 66,218), not blocks ×
block size (111,744).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgeserve.records import EngineStep, Outcome, RequestRecord, TraceHeader, TraceWriter
from sim.fit.calibrate import calibrate_traces
from sim.fit.engine_kv import HybridKV, context_tokens, kv_cache
from sim.fit.profile_writer import to_profile
from sim.fit.step_fit import fit_steps
from sim.fit.traces import read_traces

# meta.engine as `edgeserve serve --model models/tiny-qwen3.5` writes it
QWEN3_5 = {"max_num_seqs": 16, "max_num_batched_tokens": 4096, "max_model_len": 4096,
           "block_size": 1152, "kv_cache_blocks": 97, "kv_cache_tokens": 66218,
           "kv_cache_max_concurrency": 16.1667, "enable_prefix_caching": True,
           "kv_attention_groups": 1, "kv_state_blocks_per_request": 2, "platform": "cpu"}
DEFAULT = {"max_num_seqs": 16, "block_size": 128, "kv_cache_blocks": 512,
           "kv_cache_tokens": 65536}


def hybrid_step(requests: int, tokens_each: int, **kw: float) -> EngineStep:
    """A step after which ``requests`` requests of ``tokens_each`` tokens hold their blocks."""
    held = requests * (-(-tokens_each // 1152) + 2)  # attention blocks + 2 state blocks each
    return EngineStep(t_s=kw.get("t_s", 1.0), duration_s=kw.get("duration_s", 0.01),
                      running=requests, kv_cache_usage=held / 96)  # 97 blocks less the null one


def test_a_model_without_state_reads_as_before() -> None:
    kv = kv_cache(DEFAULT)
    assert kv == 65536
    step = EngineStep(t_s=1.0, duration_s=0.01, running=3, kv_cache_usage=0.25)
    assert context_tokens(step, kv) == 0.25 * 65536


def test_a_hybrid_models_state_blocks_are_not_context() -> None:
    kv = kv_cache(QWEN3_5)
    assert kv == HybridKV(blocks=97, block_tokens=1152, attention_groups=1,
                          state_blocks_per_request=2)
    step = hybrid_step(3, 1000)  # 3 × (1 + 2) = 9 of 96 blocks
    assert context_tokens(step, kv) == pytest.approx(3 * 1152)
    # the old reading, usage × blocks × block size, counted the 6 state blocks too
    assert step.kv_cache_usage * 97 * 1152 == pytest.approx(10476, abs=1)
    assert context_tokens(hybrid_step(0, 0), kv) == 0.0
    assert context_tokens(hybrid_step(16, 4096), kv) == pytest.approx(16 * 4 * 1152)


def test_calibrating_a_hybrid_trace_fits_context_per_attention_token(tmp_path: Path) -> None:
    """Steps drawn with 2e-6 s per token of context: the fit gets it back from the header, and
    the profile's KV capacity is vLLM's 66,218 tokens."""
    rng = np.random.default_rng(0)
    steps, t = [], 0.0
    for _ in range(200):
        n, each = int(rng.integers(1, 17)), int(rng.integers(100, 4096))
        context = n * -(-each // 1152) * 1152
        d = 0.004 + 3e-4 * n + 2e-6 * context
        t += d
        s = hybrid_step(n, each, t_s=t, duration_s=d)
        steps.append(EngineStep(t_s=s.t_s, duration_s=d, decode_tokens=n, decode_requests=n,
                                running=n, kv_cache_usage=s.kv_cache_usage))
    fit = fit_steps(steps, kv_cache(QWEN3_5))
    assert fit is not None
    assert fit.per["context_tokens"] == pytest.approx(2e-6, rel=1e-6)
    old = fit_steps(steps, 97 * 1152)  # the header's kv_cache_tokens before
    assert old is not None and old.per["context_tokens"] != pytest.approx(2e-6, rel=0.05)

    trace = tmp_path / "t.jsonl"
    with TraceWriter(trace, TraceHeader(producer="edgeserve serve",
                                        meta={"workers": 1, "engine": QWEN3_5})) as w:
        for i in range(8):
            w.write(RequestRecord(id=f"r{i}", outcome=Outcome.OK, worker=0, arrived_s=10.0 * i,
                                  engine_queued_s=10.0 * i + 0.1, first_token_s=10.0 * i + 0.2,
                                  last_token_s=10.0 * i + 0.5, finished_s=10.0 * i + 0.5,
                                  prompt_tokens=100, output_tokens=4))
        for s in steps:
            w.write(s)
    cal = calibrate_traces(read_traces([trace]))
    assert cal.step is not None
    assert cal.step.per["context_tokens"] == pytest.approx(2e-6, rel=1e-4)
    base = {"name": "b", "units": {"cpu": {"kind": "cpu", "count": 1}}, "stages": {},
            "llm": {"kv_capacity_tokens": 8192, "max_batch": 8}}
    assert to_profile(cal, base, "measured", [str(trace)])["llm"]["kv_capacity_tokens"] == 66218
