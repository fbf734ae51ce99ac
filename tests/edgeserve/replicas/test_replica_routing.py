"""Least outstanding requests: the ready replica with the fewest in flight, ties to the one that
got fewest so far; replicas not ready, or already tried for this request, are passed over."""

from __future__ import annotations

from pathlib import Path

from edgeserve.replicas.plan import ReplicaSlot
from edgeserve.replicas.replica import Replica, ReplicaState
from edgeserve.replicas.router import pick


def replicas(*states: ReplicaState) -> list[Replica]:
    return [Replica(ReplicaSlot(i), 9000 + i, Path("c.json"), Path("r.log"), state=s)
            for i, s in enumerate(states)]


READY = ReplicaState.READY


def test_the_fewest_outstanding_wins() -> None:
    a, b, c = replicas(READY, READY, READY)
    a.outstanding, b.outstanding, c.outstanding = 3, 1, 2
    assert pick([a, b, c], set()) is b


def test_an_idle_server_alternates_by_routed_count() -> None:
    reps = replicas(READY, READY)
    order = []
    for _ in range(4):
        r = pick(reps, set())
        assert r is not None
        r.routed_total += 1
        order.append(r.index)
    assert order == [0, 1, 0, 1]


def test_replicas_not_ready_or_already_tried_get_nothing() -> None:
    a, b, c = replicas(ReplicaState.UNAVAILABLE, READY, ReplicaState.STARTING)
    b.outstanding = 50
    assert pick([a, b, c], set()) is b
    assert pick([a, b, c], {1}) is None
