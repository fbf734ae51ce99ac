"""How many requests may be between admission and their first token at once.

Without a bound, a server past saturation hands every request to vLLM, whose queue then holds
each one's pixel arrays (about 24 MB of float32 per 1280-token image) until a slot frees: memory
grows with the backlog and the time to first token with it. Here a request takes a *slot* before
preprocessing and gives it back at its first token (or when it ends); while all slots are taken,
new requests wait in front of preprocessing holding only their encoded bytes, in arrival order,
and when too many wait the server answers 429. With the default of 2 × ``max_num_seqs`` slots
the engine always has a full batch and another one ready.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager


class Admission:
    """At most ``slots`` requests hold a slot; at most ``max_waiting`` wait for one (FIFO)."""

    def __init__(self, slots: int, max_waiting: int) -> None:
        if slots < 1 or max_waiting < 0:
            raise ValueError(f"need slots >= 1 and max_waiting >= 0, got {slots}, {max_waiting}")
        self.slots = slots
        self.max_waiting = max_waiting
        self._sem = asyncio.Semaphore(slots)
        self.waiting = 0
        self.held = 0

    def full(self) -> bool:
        """No slot is free and the waiting line is at its bound: a new request gets 429."""
        return self.held >= self.slots and self.waiting >= self.max_waiting

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[Callable[[], None]]:
        """Wait for a slot; yields ``release`` (idempotent) to give it back before the block ends."""
        self.waiting += 1
        try:
            await self._sem.acquire()
        finally:
            self.waiting -= 1
        self.held += 1
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.held -= 1
                self._sem.release()

        try:
            yield release
        finally:
            release()
