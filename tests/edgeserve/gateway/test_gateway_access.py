"""API keys, the rate limit and the live policy switch, on a real gateway process."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import Proc, answer, chat, chat_body, gateway, get_json, post, upstream


def test_policy_switch_takes_effect_on_the_next_request(tmp_path: Path,
                                                        procs: list[Proc]) -> None:
    procs.append(loc := upstream(tmp_path, "loc"))
    procs.append(cl := upstream(tmp_path, "cl"))
    procs.append(gw := gateway(tmp_path, "--local", loc.url, "--cloud", cl.url,
                               "--policy", "always_local"))
    assert answer(chat(gw, chat_body())[2])["upstream"] == "loc"
    status, _, raw = post(gw.url + "/admin/policy", {"policy": "always_cloud"})
    assert status == 200 and json.loads(raw)["policy"] == "always_cloud"
    assert answer(chat(gw, chat_body())[2])["upstream"] == "cl"
    assert get_json(gw.url + "/health")["policy"] == "always_cloud"
    status, _, raw = post(gw.url + "/admin/policy", {"policy": "no_such_policy"})
    assert status == 400 and "unknown policy 'no_such_policy'" in json.loads(raw)["error"]["message"]
    assert answer(chat(gw, chat_body())[2])["upstream"] == "cl"


def test_api_key_and_rate_limit(tmp_path: Path, procs: list[Proc]) -> None:
    procs.append(loc := upstream(tmp_path, "loc"))
    procs.append(gw := gateway(tmp_path, "--local", loc.url, "--api-key", "k1", "--api-key", "k2",
                               "--rate-limit", "0.5", "--rate-burst", "2"))
    assert chat(gw, chat_body())[0] == 401
    assert chat(gw, chat_body(), {"Authorization": "Bearer wrong"})[0] == 401
    assert post(gw.url + "/admin/policy", {"policy": "always_cloud"})[0] == 401
    k1 = {"Authorization": "Bearer k1"}
    assert [chat(gw, chat_body(), k1)[0] for _ in range(2)] == [200, 200]
    status, headers, raw = chat(gw, chat_body(), k1)
    assert status == 429 and int(headers["Retry-After"]) in (1, 2)
    assert "rate limit" in json.loads(raw)["error"]["message"]
    assert chat(gw, chat_body(), {"Authorization": "Bearer k2"})[0] == 200  # its own bucket
    assert get_json(gw.url + "/health")["status"] == "ok"  # no key needed
