"""Semantic routes: the request's embedding against each route's examples, between the cache and
the policy, through a real gateway in front of fake upstreams."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from conftest import Proc, answer, chat, chat_body, gateway, trace_records, upstream

from edgeserve.gateway.config import load_gateway_config
from sim.scenario.schema import ConfigError

pytestmark = pytest.mark.skipif(importlib.util.find_spec("wordllama") is None,
                                reason="pip install 'edgeserve[cache]' (wordllama)")

ROUTES = [
    {"name": "simple", "place": "local", "model": "small",
     "examples": ["What colour is the car?", "How many people are in the picture?",
                  "What is the capital of France?"]},
    {"name": "reasoning", "place": "cloud",
     "examples": ["Explain step by step why the bridge in the picture could collapse.",
                  "Prove that the square root of two is irrational.",
                  "Compare the two charts and reason about which strategy is better."]},
]


def test_the_best_route_decides_and_otherwise_the_policy(tmp_path: Path,
                                                         procs: list[Proc]) -> None:
    procs.append(loc := upstream(tmp_path, "loc"))
    procs.append(cloud := upstream(tmp_path, "cloud"))
    cfg = tmp_path / "gw.json"
    cfg.write_text(json.dumps({
        "targets": [
            {"name": "dev", "url": loc.url, "place": "local",
             "models": {"large": "big-vlm", "small": "small-vlm"}},
            {"name": "c", "url": cloud.url, "place": "cloud", "models": {"large": "huge-vlm"}}],
        "policy": "always_local", "routes": ROUTES, "route_threshold": 0.8,
        "cache_capacity": 8}))
    procs.append(gw := gateway(tmp_path, "--config", str(cfg)))

    status, headers, raw = chat(gw, chat_body("How many people are in this picture?"))
    assert status == 200 and headers["X-Edgeserve-Placement"] == "local:dev"
    assert answer(raw)["model"] == "small-vlm"
    assert headers["X-Edgeserve-Decision-Reason"].startswith("route simple (similarity ")

    status, headers, raw = chat(gw, chat_body(
        "Prove that the square root of three is irrational."))
    assert status == 200 and headers["X-Edgeserve-Placement"] == "cloud:c"
    assert answer(raw) == {**answer(raw), "upstream": "cloud", "model": "huge-vlm"}

    status, headers, raw = chat(gw, chat_body("Write a haiku about autumn leaves."))
    assert status == 200 and headers["X-Edgeserve-Placement"] == "local:dev"  # the policy
    assert headers["X-Edgeserve-Decision-Reason"] == "always local"
    assert answer(raw)["model"] == "big-vlm"

    # the cache comes first: the same question again is answered without a route
    status, headers, _ = chat(gw, chat_body("How many people are in this picture?"))
    assert headers["X-Edgeserve-Placement"] == "cache"

    recs = trace_records(tmp_path)
    reasons = [r["decision_reason"] for r in recs]
    assert reasons[0].startswith("route simple") and reasons[1].startswith("route reasoning")
    sims = [float(r.split("similarity ")[1].rstrip(")")) for r in reasons[:2]]
    assert all(0.8 <= s <= 1.0 for s in sims)
    assert [r["placement"] for r in recs] == ["local:dev", "cloud:c", "local:dev", "cache"]


def test_a_bad_route_is_one_clear_message() -> None:
    target = [{"name": "a", "url": "http://127.0.0.1:1", "place": "local"}]
    with pytest.raises(ConfigError, match="at least one example"):
        load_gateway_config(None, {"routes": [{"name": "r", "examples": [], "place": "local"}]},
                            target)
    with pytest.raises(ConfigError, match="model must be"):
        load_gateway_config(None, {"routes": [{"name": "r", "examples": ["x"], "place": "local",
                                               "model": "tiny"}]}, target)
