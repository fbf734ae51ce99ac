"""benchmarks/serve_chaos.py's report: which failures the dead engine excuses, what is lost, how
soon the server serves again."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))

from serve_chaos import default_engine_kill_s, summarize, verdict  # noqa: E402

ENGINE_DIED = "the inference engine has died (its process ended); this request is lost"
RESTARTING = "the inference engine is restarting after its process ended; retry later"
# one image whose worker died on both attempts (a single death is retried unseen)
TWICE = ("preprocessing worker 1 (pid 14) died while processing this image: killed by SIGKILL. "
         "It was the image's attempt 2; the earlier ended the same way (preprocessing worker 0 "
         "(pid 11) died while processing this image: killed by SIGKILL). An image whose workers "
         "die 2 times is not tried again")


def answer(i: int, sent_s: float, end_s: float, code: int, *, attempt: int = 0,
           in_stream: bool = False, reason: str = "") -> dict[str, Any]:
    outcome = "ok" if code == 200 else "lost" if code == 0 else "failed"
    return {"i": i, "attempt": attempt, "sent_s": sent_s, "end_s": end_s, "outcome": outcome,
            "code": code, "in_stream": in_stream, "reason": reason,
            "retry_after_s": 1.0 if code in (429, 503) and not in_stream else None,
            "ttft_s": 0.2 if code == 200 else None}


EVENTS = [
    {"t_s": 30.0, "kind": "worker_kill", "pid": 11, "index": 0, "busy": True},
    {"t_s": 45.0, "kind": "engine_kill", "pid": 12},
    {"t_s": 45.4, "kind": "health", "status": 503, "error": "the vLLM engine died"},
    {"t_s": 52.0, "kind": "health", "status": 200, "error": ""},
    {"t_s": 60.0, "kind": "worker_kill", "pid": 13, "index": 1, "busy": False},
]


def test_the_dead_engines_held_requests_are_the_only_excused_failures() -> None:
    answers = [
        answer(0, 10.0, 11.0, 200),
        answer(1, 29.5, 30.1, 500, reason=TWICE),
        answer(2, 44.0, 45.2, 503, in_stream=True, reason=ENGINE_DIED),  # held by the engine
        answer(3, 44.9, 45.1, 503, reason=ENGINE_DIED),  # held, before its stream began
        answer(4, 46.0, 46.01, 503, reason=RESTARTING),  # refused, sent again, served
        answer(4, 47.0, 47.01, 503, attempt=1, reason=RESTARTING),
        answer(4, 48.0, 53.5, 200, attempt=2),
        answer(5, 50.0, 52.8, 200),
        answer(6, 55.0, 56.0, 0, reason="ServerDisconnectedError"),
    ]
    s = summarize(answers, EVENTS)
    assert (s["requests_sent"], s["answers"], s["succeeded"], s["succeeded_after_retry"]) == (
        7, 9, 3, 1)
    assert s["failed_by_code"] == {"500": 1, "503": 2}
    assert s["answers_by_code"] == {"200": 3, "500": 1, "503": 4, "0": 1}
    assert s["answers_503_by_reason"] == {ENGINE_DIED: 2, RESTARTING: 2}
    assert (s["lost"], s["failed_held_by_dead_engine"], s["failures_not_allowed"]) == (1, 2, 1)
    assert s["failed_with_a_killed_worker"] == 1
    assert s["failures_not_allowed_detail"] == [
        f"request 1 sent at 29.5 s: 500 {TWICE}"]
    # request 5 (sent after the kill) is the first to succeed: 7.8 s after the engine died
    assert s["first_success_after_engine_death"] == {"sent_s_after_kill": 5.0,
                                                     "succeeded_s_after_kill": 7.8}
    assert (s["health_not_ready_s_after_kill"], s["health_ready_again_s_after_kill"]) == (0.4, 7.0)
    assert (s["worker_kills"], s["worker_kills_busy"]) == (2, 1)
    s["shm"] = {"left_after_stop": [], "dead_engine_queues_left": []}
    assert [line[:4] for line in verdict(s)] == ["FAIL", "FAIL", "ok  ", "ok  "]


def test_a_clean_run_passes_and_leftover_segments_fail_it() -> None:
    answers = [answer(0, 44.0, 45.3, 503, in_stream=True, reason=ENGINE_DIED),
               answer(1, 47.0, 49.0, 200)]
    s = summarize(answers, EVENTS)
    s["shm"] = {"left_after_stop": [], "dead_engine_queues_left": []}
    assert all(line.startswith("ok") for line in verdict(s))
    s["shm"] = {"left_after_stop": ["psm_1a2b"], "dead_engine_queues_left": []}
    assert verdict(s)[-1].startswith("FAIL")


def test_the_engine_dies_between_two_worker_kills() -> None:
    assert default_engine_kill_s(180, 30) == 105.0
    assert default_engine_kill_s(60, 15) == 37.5
