"""Engine admission: a bounded number of requests between preprocessing and first token."""

from __future__ import annotations

import asyncio

import pytest

from edgeserve.server.admission import Admission


def test_slots_are_granted_in_arrival_order_and_released_early_or_at_the_end() -> None:
    async def scenario() -> list[str]:
        adm = Admission(slots=2, max_waiting=8)
        order: list[str] = []
        gates = {name: asyncio.Event() for name in "abcd"}

        async def request(name: str, release_early: bool) -> None:
            async with adm.slot() as release:
                order.append(name)
                await gates[name].wait()
                if release_early:
                    release()
                    release()  # idempotent
                    await asyncio.sleep(0.01)  # still running, slot already back

        tasks = [asyncio.create_task(request(n, early)) for n, early in
                 [("a", True), ("b", False), ("c", False), ("d", False)]]
        await asyncio.sleep(0.01)
        assert (order, adm.held, adm.waiting) == (["a", "b"], 2, 2)
        gates["a"].set()  # a gives its slot back at its "first token": c goes next
        await asyncio.sleep(0.005)
        assert order == ["a", "b", "c"] and adm.held == 2
        for g in gates.values():
            g.set()
        await asyncio.gather(*tasks)
        assert (adm.held, adm.waiting) == (0, 0)
        return order

    assert asyncio.run(scenario()) == ["a", "b", "c", "d"]


async def hold_slot(adm: Admission, hold: asyncio.Event) -> None:
    """A request that keeps its slot until ``hold`` is set."""
    async with adm.slot():
        await hold.wait()


def test_full_only_when_every_slot_is_held_and_the_line_is_at_its_bound() -> None:
    async def scenario() -> None:
        adm = Admission(slots=1, max_waiting=1)
        hold = asyncio.Event()
        first = asyncio.create_task(hold_slot(adm, hold))
        await asyncio.sleep(0)
        assert not adm.full()  # one holds, nobody waits
        second = asyncio.create_task(hold_slot(adm, hold))
        await asyncio.sleep(0)
        assert adm.full()
        hold.set()
        await asyncio.gather(first, second)
        assert not adm.full()

    asyncio.run(scenario())


def test_a_cancelled_waiter_leaves_the_line_without_taking_a_slot() -> None:
    async def scenario() -> None:
        adm = Admission(slots=1, max_waiting=4)
        hold = asyncio.Event()
        first = asyncio.create_task(hold_slot(adm, hold))
        await asyncio.sleep(0)
        waiter = asyncio.create_task(hold_slot(adm, hold))
        await asyncio.sleep(0)
        assert adm.waiting == 1
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert (adm.waiting, adm.held) == (0, 1)
        hold.set()
        await first
        assert adm.held == 0

    asyncio.run(scenario())


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ValueError, match="slots >= 1"):
        Admission(slots=0, max_waiting=1)
