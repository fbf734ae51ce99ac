"""Where the gateway sends requests, with real upstream processes on real HTTP."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from conftest import (
    Proc,
    answer,
    chat,
    chat_body,
    gateway,
    png_data_url,
    post,
    trace_records,
    upstream,
    wait_records,
)


def test_rising_local_load_shifts_predicted_latency_to_the_cloud(tmp_path: Path,
                                                                 procs: list[Proc]) -> None:
    procs.append(loc := upstream(tmp_path, "loc", "--delay-s", "0.3", "--slots", "1"))
    procs.append(cl := upstream(tmp_path, "cl", "--delay-s", "0.05", "--slots", "64"))
    procs.append(gw := gateway(tmp_path, "--local", f"dev={loc.url}", "--cloud", f"c={cl.url}",
                               "--policy", "predicted_latency"))
    idle = [answer(chat(gw, chat_body())[2])["upstream"] for _ in range(4)]
    assert idle == ["loc"] * 4  # one at a time: local (0.3 s) beats the cloud's 1 s prior

    with ThreadPoolExecutor(16) as pool:
        loaded = list(pool.map(lambda _: chat(gw, chat_body()), range(16)))
    assert all(status == 200 for status, _, _ in loaded)
    where = [answer(raw)["upstream"] for _, _, raw in loaded]
    assert where.count("cl") >= 4, where  # the local queue made the cloud the faster path

    recs = trace_records(tmp_path)[4:]
    to_cloud = [r for r in recs if r["placement"] == "cloud:c"]
    assert to_cloud and all(r["decision_reason"] == "cloud predicted faster" for r in to_cloud)
    assert all(r["predicted_cloud_s"] < r["predicted_local_s"] for r in to_cloud)
    assert {r["placement"] for r in recs} == {"local:dev", "cloud:c"}


def test_cloud_killed_mid_run_loses_no_request(tmp_path: Path, procs: list[Proc]) -> None:
    procs.append(a := upstream(tmp_path, "cloudA", "--delay-s", "0.2", "--slots", "64"))
    procs.append(b := upstream(tmp_path, "cloudB", "--delay-s", "0.02", "--slots", "64"))
    procs.append(loc := upstream(tmp_path, "loc"))
    procs.append(gw := gateway(tmp_path, "--local", f"dev={loc.url}", "--cloud", f"a={a.url}",
                               "--cloud", f"b={b.url}", "--policy", "always_cloud"))
    results: list[tuple[int, str]] = []
    lock = threading.Lock()

    def one(i: int) -> None:
        status, _, raw = chat(gw, chat_body(f"frame {i}"))
        with lock:
            results.append((status, answer(raw)["upstream"] if status == 200 else raw.decode()))

    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(one, i) for i in range(12)]
        futures[5].result()
        a.kill()  # requests are in flight on cloudA (0.2 s each)
        futures += [pool.submit(one, i) for i in range(12, 24)]
        for f in futures:
            f.result()
    assert len(results) == 24
    assert all(s == 200 for s, _ in results), results
    assert {u for _, u in results} <= {"cloudA", "cloudB"}
    recs = trace_records(tmp_path)
    moved = [r for r in recs if r["attempts"][:2] == ["cloud:a", "cloud:b"]]
    assert moved, "some request must have fallen back from the killed endpoint"
    assert all(r["placement"] == "cloud:b" and r.get("outcome", "ok") == "ok" for r in moved)
    assert recs[-1]["placement"] == "cloud:b"


def test_cloud_5xx_falls_back_and_local_429_overflows_to_the_cloud(tmp_path: Path,
                                                                   procs: list[Proc]) -> None:
    procs.append(bad := upstream(tmp_path, "bad", "--status", "500"))
    procs.append(busy := upstream(tmp_path, "busy", "--status", "429"))
    procs.append(good := upstream(tmp_path, "good"))
    procs.append(gw := gateway(tmp_path, "--local", f"dev={busy.url}", "--cloud", f"x={bad.url}",
                               "--cloud", f"y={good.url}", "--policy", "queue_threshold"))
    status, headers, raw = chat(gw, chat_body())
    assert status == 200 and answer(raw)["upstream"] == "good"
    assert headers["X-Edgeserve-Placement"] == "cloud:y"
    rec = trace_records(tmp_path)[-1]
    assert rec["decision_reason"] == "queue below threshold"  # the policy said local
    assert rec["attempts"] == ["local:dev", "cloud:x", "cloud:y"]


def test_always_local_does_not_overflow_a_busy_local_server(tmp_path: Path,
                                                           procs: list[Proc]) -> None:
    procs.append(busy := upstream(tmp_path, "busy", "--status", "429"))
    procs.append(good := upstream(tmp_path, "good"))
    procs.append(gw := gateway(tmp_path, "--local", f"dev={busy.url}", "--cloud", good.url,
                               "--policy", "always_local"))
    status, headers, raw = chat(gw, chat_body())
    assert status == 503 and headers["Retry-After"] == "1"
    assert "local:dev answered 429" in json.loads(raw)["error"]["message"]


def test_drop_resolution_and_model_downgrade(tmp_path: Path, procs: list[Proc]) -> None:
    procs.append(loc := upstream(tmp_path, "loc"))
    cfg = tmp_path / "gw.yaml"
    cfg.write_text(f"""
targets:
  - {{name: dev, url: "{loc.url}", place: local, models: {{large: big-vlm, small: tiny-vlm}}}}
policy: {{kind: downgrade, params: {{queue_above: 0, scale: 0.5}}}}
""")
    procs.append(gw := gateway(tmp_path, "--config", str(cfg)))
    status, _, raw = chat(gw, chat_body(image=png_data_url(200, 100)))
    got = answer(raw)
    assert status == 200 and got["image_width"] == 100 and got["model"] == "big-vlm"
    rec = trace_records(tmp_path)[-1]
    assert rec["resolution_scale"] == 0.5 and rec["source_width"] == 200

    post(gw.url + "/admin/policy", {"policy": "model_downgrade", "params": {"queue_above": 0}})
    status, _, raw = chat(gw, chat_body(image=png_data_url(200, 100)))
    assert answer(raw) == {"upstream": "loc", "model": "tiny-vlm", "image_width": 200}
    assert trace_records(tmp_path)[-1]["model"] == "tiny-vlm"

    post(gw.url + "/admin/policy", {"policy": "frame_drop"})
    status, headers, raw = chat(gw, chat_body(), {"X-Deadline-Ms": "0.001"})
    assert status == 503 and headers["X-Edgeserve-Placement"] == "drop"
    assert "deadline would be missed" in json.loads(raw)["error"]["message"]
    rec = trace_records(tmp_path)[-1]
    assert (rec["placement"], rec["outcome"]) == ("drop", "dropped")


def test_streaming_and_the_servers_own_400s(tmp_path: Path, procs: list[Proc]) -> None:
    procs.append(loc := upstream(tmp_path, "loc"))
    procs.append(gw := gateway(tmp_path, "--local", loc.url))
    status, headers, raw = chat(gw, chat_body(stream=True))
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
    events = [line[6:] for line in raw.decode().splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    text = "".join(json.loads(e)["choices"][0]["delta"]["content"] for e in events[:-1])
    assert json.loads(text)["upstream"] == "loc"
    rec = wait_records(tmp_path, 1)[-1]
    assert rec["placement"] == "local:local0" and len(rec["token_times_s"]) == 2

    status, _, raw = chat(gw, {"messages": [{"role": "user", "content": "x"}], "max_tokens": "8"})
    assert status == 400
    assert json.loads(raw)["error"]["message"] == (
        "invalid request: Expected `int | null`, got `str` - at `$.max_tokens`")
    status, _, raw = chat(gw, chat_body(image="data:text/plain;base64,aGVsbG8="))
    assert status == 400 and "expected an image/* type" in json.loads(raw)["error"]["message"]
    assert trace_records(tmp_path)[-1]["outcome"] == "rejected"
