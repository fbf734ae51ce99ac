"""Replay a recorded trace at an adjustable speed, with pause, step and seek.

The trace is never loaded whole: on start one pass over the file notes, about once per second of
trace time, the byte offset of the next line (the *index*), and the first and last event times.
Playback then reads forward line by line, handing over every item whose event time (a sample's
``t_s``, a request's finish) the replay clock has reached. A seek to ``t`` jumps to the indexed
offset ``history_s`` before ``t`` and hands over the items up to ``t`` at once with
``Batch.reset`` set, so the panels show the same windows as if the replay had run there.

Traces written by a live server are nearly, not exactly, in time order (a request is written when
it finishes; samples every second); the reader tolerates that because it only ever compares an
item's own time with the clock.
"""

from __future__ import annotations

import asyncio
import bisect
import math
import time
from pathlib import Path
from typing import IO

import msgspec

from edgeserve.records import (
    SCHEMA_VERSION,
    DeviceSample,
    MigrationDecision,
    RequestRecord,
    ResourceSample,
    TraceError,
    TraceHeader,
    decode,
)
from tui.sources.base import Batch, Capabilities, Clock, Item, PacedClock, Panel, SourceError
from tui.sources.devices import infos_from_meta
from tui.state import event_time

INDEX_STEP_S = 1.0


class _Stamps(msgspec.Struct, kw_only=True):
    """The time fields of any trace line; decoding only these keeps the index pass fast."""

    type: str
    schema: int = SCHEMA_VERSION
    t_s: float | None = None
    arrived_s: float | None = None
    preproc_queued_s: float | None = None
    preproc_start_s: float | None = None
    preproc_end_s: float | None = None
    engine_queued_s: float | None = None
    first_token_s: float | None = None
    last_token_s: float | None = None
    finished_s: float | None = None

    def time(self) -> float | None:
        if self.t_s is not None:
            return self.t_s
        for t in (
            self.finished_s,
            self.last_token_s,
            self.first_token_s,
            self.engine_queued_s,
            self.preproc_end_s,
            self.preproc_start_s,
            self.preproc_queued_s,
            self.arrived_s,
        ):
            if t is not None:
                return t
        return None


_stamps = msgspec.json.Decoder(_Stamps)


class TraceIndex:
    """Byte offsets of a trace file by event time, and what the trace holds.

    Attributes:
        header: The trace's header line.
        start_s: The earliest event time.
        end_s: The latest event time.
        times: Running maximum of event times at each checkpoint (ascending).
        offsets: Byte offset of the line after each checkpoint.
        requests, samples, devices: How many of each item the trace holds.
    """

    def __init__(self, path: Path) -> None:
        self.header: TraceHeader | None = None
        self.start_s = math.inf
        self.end_s = -math.inf
        self.times: list[float] = []
        self.offsets: list[int] = []
        self.requests = self.samples = self.devices = 0
        with open(path, "rb") as f:
            self._scan(f, str(path))
        if self.header is None:
            raise TraceError(f"{path}: empty, or no trace header on its first line")
        if not self.times:
            self.start_s = self.end_s = 0.0

    def _scan(self, f: IO[bytes], name: str) -> None:
        offset = 0
        running = -math.inf
        for lineno, line in enumerate(f, start=1):
            here = offset
            offset += len(line)
            if not line.strip():
                continue
            try:
                st = _stamps.decode(line)
            except msgspec.DecodeError as e:
                raise TraceError(f"{name}:{lineno}: {e}") from None
            if st.type == "header":
                if st.schema != SCHEMA_VERSION:
                    raise TraceError(
                        f"{name}: schema version {st.schema}, this edgeserve reads "
                        f"version {SCHEMA_VERSION}"
                    )
                if self.header is None:
                    hdr = decode(line)
                    assert isinstance(hdr, TraceHeader)
                    self.header = hdr
                continue
            if self.header is None:
                raise TraceError(f"{name}:{lineno}: no trace header before the first record")
            t = st.time()
            if t is None:
                continue
            self.requests += st.type == "request"
            self.samples += st.type == "sample"
            self.devices += st.type == "device"
            self.start_s = min(self.start_s, t)
            self.end_s = max(self.end_s, t)
            if not self.times or running >= self.times[-1] + INDEX_STEP_S:
                self.times.append(running)  # -inf for the first line: nothing before it
                self.offsets.append(here)
            running = max(running, t)

    def offset_before(self, t_s: float) -> int:
        """An offset from which reading forward sees every item with event time ``>= t_s``.

        ``times[i]`` is the latest event time of all lines before ``offsets[i]``, so starting at
        the last checkpoint with ``times[i] < t_s`` skips only items older than ``t_s``.
        """
        i = bisect.bisect_left(self.times, t_s) - 1
        return self.offsets[max(0, i)] if self.offsets else 0


class ReplaySource:
    """Plays back a trace file as if its events were arriving now.

    Args:
        path: The trace (JSON Lines, as written by ``TraceWriter``).
        speed: Trace seconds per wall second.
        history_s: On a seek, how much trace time before the target to fold in (the windows of
            the panels), so that rates and percentiles are right at once.
        start_paused: Start with the clock stopped (tests, or to look before playing).
        start_at_s: Where to start (trace time); the trace's first event by default.
        wall: The wall clock that paces the replay.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        speed: float = 1.0,
        history_s: float = 60.0,
        start_paused: bool = False,
        start_at_s: float | None = None,
        wall: Clock = time.monotonic,
    ) -> None:
        self.path = Path(path)
        self._speed0 = speed
        self._history_s = history_s
        self._start_paused = start_paused
        self._start_at_s = start_at_s
        self._wallclock = wall
        self.index: TraceIndex | None = None
        self._clock: PacedClock | None = None
        self._f: IO[bytes] | None = None
        self._pending: Item | None = None
        self._eof = False
        self._seek_to: float | None = None
        self._why_empty: dict[Panel, str] = {}
        self._infos_sent = False

    # ---- Source protocol -----------------------------------------------------------------
    @property
    def caps(self) -> Capabilities:
        return Capabilities(
            can_pause=True, can_step=True, can_seek=True, can_speed=True, why_empty=self._why_empty
        )

    @property
    def description(self) -> str:
        return f"replay {self.path.name}"

    @property
    def speed(self) -> float:
        return self._clock.speed if self._clock else self._speed0

    @property
    def paused(self) -> bool:
        return self._clock.paused if self._clock else self._start_paused

    async def start(self) -> None:
        if not self.path.is_file():
            raise SourceError(f"trace not found: {self.path}")
        try:
            self.index = await asyncio.to_thread(TraceIndex, self.path)
        except (TraceError, OSError) as e:
            raise SourceError(f"cannot read trace: {e}") from None
        idx = self.index
        if idx.devices == 0:
            self._why_empty[Panel.DEVICES] = "this trace has no device samples (simulations have)"
        if idx.samples == 0:
            why = "this trace has no resource samples; "
            self._why_empty[Panel.QUEUES] = why + "queue depths are sampled by `edgeserve serve`"
            self._why_empty[Panel.SYSTEM] = why + "host figures are sampled by `edgeserve serve`"
        if idx.requests == 0:
            self._why_empty[Panel.WATERFALL] = "this trace has no request records"
        start = idx.start_s if self._start_at_s is None else self._start_at_s
        self._clock = PacedClock(start, self._speed0, self._wallclock)
        self._clock.limit_s = idx.end_s
        self._clock.set_paused(self._start_paused)
        self._f = open(self.path, "rb")  # noqa: SIM115 — closed in stop()
        self._seek_to = start if self._start_at_s is not None else None

    async def stop(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None

    async def poll(self) -> Batch:
        if self._clock is None or self._f is None:
            return Batch([], None, "not started")
        reset = False
        if self._seek_to is not None:
            target, self._seek_to = self._seek_to, None
            assert self.index is not None
            self._f.seek(self.index.offset_before(target - self._history_s))
            self._pending, self._eof, reset = None, False, True
        now = self._clock.now()
        skip = (now - self._history_s) if reset else None
        # decoding thousands of lines at high speed must not stall the UI: read in a thread
        items = await asyncio.to_thread(self._read_until, now, skip)
        if reset or not self._infos_sent:
            self._infos_sent = True
            assert self.index is not None and self.index.header is not None
            items = [*infos_from_meta(self.index.header.meta), *items]
        ended = self._eof and self._pending is None
        return Batch(items, now, self._status(now, ended), reset=reset, ended=ended)

    def set_speed(self, speed: float) -> None:
        if self._clock:
            self._clock.set_speed(speed)
        else:
            self._speed0 = speed

    def set_paused(self, paused: bool) -> None:
        if self._clock:
            self._clock.set_paused(paused)
        else:
            self._start_paused = paused

    def step(self, dt_s: float) -> None:
        if self._clock:
            self._clock.step(dt_s)

    def seek(self, t_s: float) -> None:
        if self._clock is None or self.index is None:
            return
        t_s = min(max(t_s, self.index.start_s), self.index.end_s)
        self._clock.seek(t_s)
        self._seek_to = t_s

    def set_policy(self, name: str) -> None:
        raise SourceError("a recorded trace cannot change its policy")

    # ---- reading -------------------------------------------------------------------------
    def _read_until(self, now: float, skip_before: float | None) -> list[Item]:
        assert self._f is not None
        out: list[Item] = []
        while True:
            item = self._pending
            if item is None:
                if self._eof:
                    break
                line = self._f.readline()
                if not line:
                    self._eof = True
                    break
                if not line.strip():
                    continue
                decoded = decode(line)
                if not isinstance(decoded, RequestRecord | ResourceSample | DeviceSample
                                  | MigrationDecision):
                    continue
                item = decoded
            t = event_time(item)
            if t > now:
                self._pending = item
                break
            self._pending = None
            if skip_before is None or t >= skip_before:
                out.append(item)
        return out

    def _status(self, now: float, ended: bool) -> str:
        assert self.index is not None
        pos = f"{now - self.index.start_s:7.1f}/{self.index.end_s - self.index.start_s:.1f} s"
        state = "ended" if ended else ("paused" if self.paused else "playing")
        return f"{pos}  ×{self.speed:g}  {state}"
