"""Watch a running server: an edgeserve server's event stream, or a stock vLLM server's /metrics.

An ``edgeserve serve`` publishes ``GET /v1/events`` as server-sent events; each event's ``data``
is one trace line (:func:`edgeserve.records.encode`): a :class:`~edgeserve.records.RequestRecord`
when a request finishes and a :class:`~edgeserve.records.ResourceSample` every second. The source
keeps the raw lines until the next poll and decodes them there, in one go: between refreshes
the UI only appends bytes to a list, which keeps it light at hundreds of events a second.

A stock vLLM server answers 404 there; the source then scrapes ``/metrics`` once per poll and
the panels that need request records or samples say why they are empty. For an edgeserve server
``/metrics`` is scraped too, less often, for what only vLLM's metrics have (KV-cache usage).

An ``edgeserve gateway`` publishes the same stream (its header's producer says so): one record per
decision. Its ``/health`` names the policy and the policies it can switch to; ``o`` then switches
the gateway's policy live (``POST /admin/policy``), and the devices panel shows the decisions.

Pausing a live source holds the view still (the app stops polling); events keep arriving into
a bounded buffer (``buffer_max`` lines; older ones are dropped and counted if it fills).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import time
from collections import deque
from typing import Any

import aiohttp
import msgspec

from edgeserve.records import (
    DeviceSample,
    MigrationDecision,
    RequestRecord,
    ResourceSample,
    decode,
)
from tui.sources.base import Batch, Capabilities, Clock, Item, Panel, SourceError
from tui.sources.vllm_metrics import parse_metrics

EVENTS_PATH = "/v1/events"
METRICS_PATH = "/metrics"
HEALTH_PATH = "/health"
POLICY_PATH = "/admin/policy"
GATEWAY_PRODUCER = "edgeserve gateway"

VLLM_WHY = {
    Panel.WORKERS: "a stock vLLM server publishes no per-worker figures "
    "(edgeserve serve does, on /v1/events)",
    Panel.TIMELINE: "a stock vLLM server publishes no stage timestamps; "
    "the CPU/engine timeline needs edgeserve serve's request records",
    Panel.WATERFALL: "a stock vLLM server publishes no per-request records; "
    "the waterfall needs edgeserve serve's /v1/events",
    Panel.QUEUES: "preprocessing runs inside vLLM's API server; it is not reported",
    Panel.DEVICES: "devices are shown for simulations (edgeserve tui --sim)",
}
EDGESERVE_WHY = {Panel.DEVICES: "devices are shown for simulations (edgeserve tui --sim)"}
GATEWAY_WHY = {
    Panel.WORKERS: "a gateway runs no preprocessing workers; its targets do",
    Panel.QUEUES: "a gateway's queue is among the policy inputs in the devices panel (6)",
}


class Mode(enum.StrEnum):
    CONNECTING = "connecting"
    EDGESERVE = "edgeserve"  # event stream + /metrics
    GATEWAY = "gateway"  # an edgeserve gateway's event stream; its policy can be switched
    VLLM = "vllm"  # /metrics only


class LiveSource:
    """Polls nothing itself: two background tasks fill a buffer that :meth:`poll` drains.

    Args:
        url: The server's base URL, e.g. ``http://127.0.0.1:8000``.
        metrics_every_s: Scrape ``/metrics`` at most this often with an event stream
            (a stock vLLM server is scraped on every poll).
        buffer_max: Raw event lines kept between two polls.
        clock: Time stamps of ``/metrics`` scrapes.
        connect_timeout_s: How long :meth:`start` waits for the server.
    """

    def __init__(
        self,
        url: str,
        *,
        metrics_every_s: float = 5.0,
        buffer_max: int = 200_000,
        clock: Clock = time.monotonic,
        connect_timeout_s: float = 5.0,
    ) -> None:
        self.url = url.rstrip("/")
        self.mode = Mode.CONNECTING
        self._metrics_every_s = metrics_every_s
        self._clock = clock
        self._connect_timeout_s = connect_timeout_s
        self._lines: deque[bytes] = deque(maxlen=buffer_max)
        self._received = 0
        self._taken = 0
        self._session: aiohttp.ClientSession | None = None
        self._events_task: asyncio.Task[None] | None = None
        self._last_scrape = -1e18
        self._state = "connecting"
        self._frozen = False
        self.events_received = 0
        self.policy: str | None = None  # a gateway's policy, as it last reported it
        self._policies: tuple[str, ...] = ()
        self._policy_task: asyncio.Task[None] | None = None

    # ---- Source protocol -----------------------------------------------------------------
    @property
    def caps(self) -> Capabilities:
        if self.mode is Mode.GATEWAY:
            return Capabilities(policies=self._policies, why_empty=GATEWAY_WHY)
        why = VLLM_WHY if self.mode is Mode.VLLM else EDGESERVE_WHY
        return Capabilities(why_empty=why)

    @property
    def description(self) -> str:
        return f"live {self.url}"

    @property
    def speed(self) -> float:
        return 1.0

    @property
    def paused(self) -> bool:
        return self._frozen

    async def start(self) -> None:
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self._connect_timeout_s)
        self._session = aiohttp.ClientSession(timeout=timeout)
        try:
            resp = await self._session.get(
                self.url + EVENTS_PATH, headers={"Accept": "text/event-stream"}
            )
        except (TimeoutError, aiohttp.ClientError, OSError) as e:
            await self._session.close()
            raise SourceError(f"cannot connect to {self.url}: {e or type(e).__name__}") from None
        if resp.status == 200:
            self.mode = Mode.EDGESERVE
            self._state = "connected"
            await self._detect_gateway()
            self._events_task = asyncio.create_task(self._read_events(resp))
            return
        resp.release()
        if resp.status != 404:
            await self._session.close()
            raise SourceError(f"{self.url}{EVENTS_PATH}: HTTP {resp.status}")
        # no event stream: a stock vLLM server, if it has vLLM's metrics
        try:
            text = await self._get_metrics()
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as e:
            await self._session.close()
            raise SourceError(
                f"{self.url} has neither {EVENTS_PATH} nor a readable {METRICS_PATH}: {e}"
            ) from None
        if "vllm:" not in text:
            await self._session.close()
            raise SourceError(f"{self.url}{METRICS_PATH} has no vLLM metrics (vllm:…)")
        self.mode = Mode.VLLM
        self._state = "connected"

    async def stop(self) -> None:
        if self._events_task is not None:
            self._events_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._events_task
        if self._session is not None:
            await self._session.close()

    async def poll(self) -> Batch:
        items: list[Item] = []
        n = len(self._lines)
        for _ in range(n):
            line = self._lines.popleft()
            try:
                item = decode(line)
            except msgspec.DecodeError:
                continue  # a line we cannot read is skipped, not fatal
            if isinstance(item, RequestRecord | ResourceSample | DeviceSample | MigrationDecision):
                items.append(item)
        self._taken += n
        self.events_received += n
        now = self._clock()
        every = 0.0 if self.mode is Mode.VLLM else self._metrics_every_s
        if self._session is not None and now - self._last_scrape >= every:
            self._last_scrape = now
            try:
                items.append(parse_metrics(await self._get_metrics(), now))
                if self.mode is Mode.VLLM:
                    self._state = "connected"
            except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as e:
                if self.mode is Mode.VLLM:
                    self._state = f"metrics unavailable: {e or type(e).__name__}"
        return Batch(items, None, self._status())

    def set_speed(self, speed: float) -> None:
        raise SourceError("a live server runs at its own speed")

    def set_paused(self, paused: bool) -> None:
        self._frozen = paused

    def step(self, dt_s: float) -> None:
        raise SourceError("a live server cannot be stepped")

    def seek(self, t_s: float) -> None:
        raise SourceError("a live server cannot seek; record a trace (--trace) and replay it")

    def set_policy(self, name: str) -> None:
        if self.mode is not Mode.GATEWAY:
            raise SourceError("a live server has no offload policy to switch")
        if name not in self._policies:
            raise SourceError(f"unknown policy {name!r} (known: {', '.join(self._policies)})")
        self._policy_task = asyncio.get_running_loop().create_task(self._post_policy(name))

    async def _post_policy(self, name: str) -> None:
        """``POST /admin/policy``; the gateway's answer (or why it failed) goes to the status."""
        assert self._session is not None
        try:
            async with self._session.post(
                self.url + POLICY_PATH, json={"policy": name},
                timeout=aiohttp.ClientTimeout(total=5),
            ) as r:
                doc = await r.json(content_type=None)
                if r.status == 200:
                    self.policy = str(doc.get("policy", name))
                else:
                    msg = doc.get("error", {}).get("message", "") if isinstance(doc, dict) else ""
                    self._state = f"policy switch refused: HTTP {r.status} {msg}".rstrip()
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as e:
            self._state = f"policy switch failed: {e or type(e).__name__}"

    async def wait_policy(self) -> None:
        """Until the last policy switch has been answered (tests; the UI does not wait)."""
        if self._policy_task is not None:
            await self._policy_task

    async def _detect_gateway(self) -> None:
        """A gateway's ``/health`` names its policy and the ones it can switch to."""
        assert self._session is not None
        try:
            async with self._session.get(
                self.url + HEALTH_PATH, timeout=aiohttp.ClientTimeout(total=5)
            ) as r:
                doc = await r.json(content_type=None) if r.status == 200 else None
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError):
            return
        if isinstance(doc, dict) and isinstance(doc.get("policies"), list):
            self.mode = Mode.GATEWAY
            self._policies = tuple(str(p) for p in doc["policies"])
            self.policy = str(doc.get("policy")) if doc.get("policy") else None

    # ---- background ----------------------------------------------------------------------
    async def _get_metrics(self) -> str:
        assert self._session is not None
        async with self._session.get(
            self.url + METRICS_PATH, timeout=aiohttp.ClientTimeout(total=5)
        ) as r:
            r.raise_for_status()
            return await r.text()

    async def _read_events(self, resp: Any) -> None:
        """Append every ``data:`` line of the event stream; reconnect when it drops."""
        while True:
            try:
                async with resp:
                    self._state = "connected"
                    rest = b""
                    # whole chunks, split here: one wake-up per network read, not per line
                    async for chunk in resp.content.iter_any():
                        lines = (rest + chunk).split(b"\n")
                        rest = lines.pop()
                        for raw in lines:
                            if raw.startswith(b"data:"):
                                self._lines.append(raw[5:])
                                self._received += 1
                self._state = "stream ended; reconnecting"
            except (TimeoutError, aiohttp.ClientError, OSError) as e:
                self._state = f"disconnected ({e or type(e).__name__}); reconnecting"
            while True:
                await asyncio.sleep(1.0)
                try:
                    assert self._session is not None
                    resp = await self._session.get(
                        self.url + EVENTS_PATH, headers={"Accept": "text/event-stream"}
                    )
                    if resp.status == 200:
                        break
                    resp.release()
                except (TimeoutError, aiohttp.ClientError, OSError):
                    continue

    def _status(self) -> str:
        dropped = self._received - self._taken - len(self._lines)
        kind = {Mode.EDGESERVE: "edgeserve events", Mode.GATEWAY: "gateway events"}.get(
            self.mode, "vLLM /metrics only")
        if self.mode is Mode.GATEWAY and self.policy:
            kind += f" │ policy {self.policy}"
        s = f"{kind} │ {self._state} │ {self.events_received} events"
        if dropped > 0:
            s += f" │ {dropped} dropped while paused"
        return s
