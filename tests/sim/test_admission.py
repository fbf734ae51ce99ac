"""Admission limits (``admission:``): engine slots, the line in front of preprocessing, 429s.

As in the runtime, a request takes an engine slot before preprocessing and gives it back at its
first token; with every slot taken it waits in arrival order in front of preprocessing, and beyond
``max_pending`` waiting or ``max_inflight`` admitted it is rejected. The server is the one of
:mod:`tests.sim.test_shared_cores`: one worker (1 s per image), steps of 0.5 s. Timelines are
``(request, queued, preprocessing start, first token, last token)``.
"""

from __future__ import annotations

from typing import Any

import pytest

from edgeserve.records import Outcome, RequestRecord
from sim.core.simulation import Simulation
from sim.scenario.config import load_scenario, scenario_from_raw
from sim.scenario.schema import ConfigError
from tests.sim.test_shared_cores import Server, server_profile

LIMITS = {"max_pending": 8, "max_inflight": 8, "max_engine_queue": 8}


def server(**limits: int) -> Server:
    return Server(server_profile(admission={**LIMITS, **limits}))


def timeline(s: Server) -> list[tuple[Any, ...]]:
    s.loop.run_until(1000.0)
    return [(r.id, r.preproc_queued_s, r.preproc_start_s, r.first_token_s, r.last_token_s)
            if r.outcome is Outcome.OK else (r.id, r.outcome.value, r.arrived_s, r.finished_s)
            for r in sorted(s.records, key=lambda r: r.id)]


def preproc_queue(s: Server) -> dict[str, float]:
    return {r.id: r.preproc_start_s - r.preproc_queued_s  # type: ignore[operator]
            for r in s.records if r.outcome is Outcome.OK}


def test_with_one_slot_the_second_request_waits_in_front_of_preprocessing_for_the_first_token() -> None:
    # a: preprocessed 0–1, prefill step 1–1.5 (first token: its slot passes to b), decode 1.5–2.
    # b waits for the slot until 1.5 although the worker is free from 1.0: 1.5 s of preproc_queue
    s = server(max_engine_queue=1)
    s.send("a", 0.0, output_tokens=2)
    s.send("b", 0.0, output_tokens=2)
    assert timeline(s) == [("a", 0.0, 0.0, 1.5, 2.0), ("b", 0.0, 1.5, 3.0, 3.5)]
    assert preproc_queue(s) == {"a": 0.0, "b": 1.5}
    assert s.device.slots_held == 0 and s.device.admitted == 0


def test_with_two_slots_the_second_request_waits_only_for_the_worker() -> None:
    s = server(max_engine_queue=2)
    s.send("a", 0.0, output_tokens=2)
    s.send("b", 0.0, output_tokens=2)
    assert timeline(s) == [("a", 0.0, 0.0, 1.5, 2.0), ("b", 0.0, 1.0, 2.5, 3.0)]
    assert preproc_queue(s) == {"a": 0.0, "b": 1.0}


def test_when_max_pending_wait_for_a_slot_the_next_request_is_rejected() -> None:
    # a holds the one slot, b waits for it (the line holds 1), c is rejected at arrival; d comes
    # after b got the slot (at a's first token, 1.5) and waits in its place
    s = server(max_engine_queue=1, max_pending=1)
    for name in "abc":
        s.send(name, 0.0, output_tokens=2)
    s.send("d", 2.0, output_tokens=2)
    assert timeline(s) == [
        ("a", 0.0, 0.0, 1.5, 2.0),
        ("b", 0.0, 1.5, 3.0, 3.5),
        ("c", "rejected", 0.0, 0.0),
        ("d", 2.0, 3.0, 4.5, 5.0),
    ]
    (c,) = [r for r in s.records if r.id == "c"]
    assert c.error == ("429 server is at capacity: max_pending 1 requests wait for one of 1 "
                       "engine slots; retry later")
    assert c.preproc_queued_s is None and c.engine_queued_s is None


def test_beyond_max_inflight_admitted_requests_a_request_is_rejected() -> None:
    # slots to spare, but only two requests admitted at once: c is rejected; d, arriving after a
    # left (2.0), is admitted and finds the worker free
    s = server(max_inflight=2)
    for name in "abc":
        s.send(name, 0.0, output_tokens=2)
    s.send("d", 2.25, output_tokens=2)
    assert timeline(s) == [
        ("a", 0.0, 0.0, 1.5, 2.0),
        ("b", 0.0, 1.0, 2.5, 3.0),
        ("c", "rejected", 0.0, 0.0),
        ("d", 2.25, 2.25, 3.75, 4.25),
    ]
    (c,) = [r for r in s.records if r.id == "c"]
    assert c.error == "429 server is at capacity: max_inflight 2 requests admitted; retry later"


def test_a_full_preprocessing_queue_rejects_like_the_worker_pool() -> None:
    # three slots, but the pool's line (max_pending 1) already holds b behind a's running job
    s = server(max_engine_queue=3, max_pending=1)
    for name in "abc":
        s.send(name, 0.0, output_tokens=2)
    assert [r[:2] for r in timeline(s)] == [("a", 0.0), ("b", 0.0), ("c", "rejected")]
    (c,) = [r for r in s.records if r.id == "c"]
    assert c.error == ("429 server is at capacity: 1 requests wait for a preprocessing worker "
                       "(max_pending 1); retry later")


def test_a_request_that_fails_before_its_first_token_gives_its_slot_back() -> None:
    # a's sequence does not fit the KV cache: it fails as it reaches the engine (1.0), and b,
    # waiting for the one slot, starts preprocessing then
    s = Server(server_profile(admission={**LIMITS, "max_engine_queue": 1},
                              llm={"kv_capacity_tokens": 1024, "step": {"base_s": 0.5}}))
    s.send("a", 0.0, output_tokens=2, prompt_tokens=5000)
    s.send("b", 0.0, output_tokens=2)
    s.loop.run_until(1000.0)
    a, b = sorted(s.records, key=lambda r: r.id)
    assert a.outcome is Outcome.FAILED and a.engine_queued_s == 1.0
    assert (b.preproc_start_s, b.first_token_s, b.last_token_s) == (1.0, 2.5, 3.0)
    assert s.device.slots_held == 0 and s.device.admitted == 0


def test_the_slot_count_defaults_to_twice_max_num_seqs() -> None:
    s = Server(server_profile(admission={},
                              llm={"step": {"base_s": 0.5, "max_num_seqs": 3}}))
    adm = s.device.admission
    assert adm is not None and (adm.slots, adm.max_pending, adm.max_inflight) == (6, 64, 256)


def test_rejections_are_counted_in_the_summary() -> None:
    # 4 requests/s offered to a server that preprocesses 1 per second, 2 may be admitted at once
    prof = server_profile(admission={"max_pending": 1, "max_inflight": 2, "max_engine_queue": 1})
    sim = Simulation(scenario_from_raw({
        "name": "overload", "seed": 1, "requests": 200, "policy": {"kind": "always_local"},
        "devices": [{"name": "d", "profile": prof,
                     "workload": {"kind": "poisson", "rate_hz": 4.0, "output_tokens": [2, 2]}}],
    }))
    recs: list[RequestRecord] = []
    sim.add_record_sink(recs.append)
    s = sim.run()
    rejected = [r for r in recs if r.outcome is Outcome.REJECTED]
    assert len(rejected) > 100 and all(r.error.startswith("429 ") for r in rejected)  # type: ignore[union-attr]
    assert (s.fleet.rejected, s.fleet.failed) == (len(rejected), 0)
    assert s.fleet.ok + s.fleet.rejected == 200
    assert sim.devices[0].admitted == 0 and sim.devices[0].slots_held == 0


@pytest.mark.parametrize(("value", "message"), [
    ({"max_pending": 0}, "scenario.devices[0].profile.admission.max_pending: must be > 0, got 0"),
    ({"max_inflight": -3},
     "scenario.devices[0].profile.admission.max_inflight: must be > 0, got -3"),
    ({"max_engine_queue": 0},
     "scenario.devices[0].profile.admission.max_engine_queue: must be > 0, got 0"),
    ({"max_queue": 4}, "scenario.devices[0].profile.admission.max_queue: unknown field"),
    ({"max_pending": "many"},
     "scenario.devices[0].profile.admission.max_pending: expected an integer, got 'many'"),
])
def test_bad_admission_fields_are_named(value: object, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        load_scenario(None, [("devices[0].profile.admission", value)])
    assert str(e.value).startswith(message)
