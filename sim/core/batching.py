"""Continuous batching with a KV-cache budget: the LLM engine of a device or a cloud replica.

How a vLLM-style engine spends its time, reduced to what decides latency:

- A request is *admitted* from the FIFO waiting queue when the running batch has room
  (``max_batch``) and the KV cache can hold its whole sequence (prompt + output tokens; no
  preemption, so the reservation is made up front).
- Its *prefill* (the prompt, image tokens included) runs alone; the decode batch pauses meanwhile
  (prefill-priority scheduling). The first token comes out at the end of the prefill. Its duration
  is drawn from the prefill model (its mean plus the model's spread); decode steps use the mean.
- The running batch then *decodes* one token per request per step. A step takes
  ``step_s(batch, context_tokens)``: it grows with the batch and with the KV it must read.

Simulating every step would cost an event per token. Instead a virtual step counter advances at
``1 / step_s`` while the batch is unchanged; a request that joins at counter value ``k`` needing
``n`` more tokens finishes when the counter reaches ``k + n``. Events happen only when the batch
changes (a prefill ends, a request finishes) or the clock changes (DVFS), so a request costs about
two engine events however many tokens it generates. Step time is re-evaluated at those events;
in between, context growth within a batch is not re-priced (an approximation).

:class:`Engine` is what the rest of the simulator sees of an engine; :mod:`sim.core.step_engine` is the
other kind, which schedules steps as vLLM V1 does (a profile's ``llm.step`` picks it).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from heapq import heappop, heappush
from typing import Any

from mypy_extensions import mypyc_attr

from edgeserve.records import Outcome
from sim.core.job import Job
from sim.core.loop import EventLoop


@mypyc_attr(allow_interpreted_subclasses=True)
class StepModel:
    """An engine's time model; subclass it. Compiled (``make sim-native``), the engine calls a
    compiled subclass's methods directly (a method table lookup, no Python-level call)."""

    def prefill_s(self, job: Job) -> float:
        """Mean prefill seconds of ``job`` at the nominal clock."""
        raise NotImplementedError

    def prefill_draw_s(self, mean_s: float) -> float:
        """One actual prefill time around that mean."""
        raise NotImplementedError

    def step_s(self, batch: int, context_tokens: int) -> float:
        """Seconds of one decode step of ``batch`` requests holding ``context_tokens`` of KV."""
        raise NotImplementedError


class Engine:
    """What devices, cloud servers and policies see of an LLM engine; two kinds subclass it.

    :class:`BatchEngine` (here) prices whole prefills and a virtual decode counter;
    :class:`sim.core.step_engine.StepEngine` schedules vLLM V1 steps. Either can sit behind a device or
    a cloud replica: they take requests with :meth:`submit`, call ``on_done(job)`` when one leaves,
    ``on_busy(+1 / -1)`` when they start / stop working, and re-price on :meth:`retime`;
    ``on_first_token(job)``, when set, is called as a request's first token comes out.
    """

    __slots__ = (
        "busy",
        "clock_scale",
        "finishes",
        "kv_capacity_tokens",
        "kv_used",
        "loop",
        "max_batch",
        "name",
        "on_busy",
        "on_done",
        "on_first_token",
        "tpot_s",
        "waiting",
    )

    def __init__(self, loop: EventLoop, name: str, kv_capacity_tokens: int, max_batch: int,
                 on_done: Callable[[Job], Any], on_busy: Callable[[int], Any] | None) -> None:
        self.loop = loop
        self.name = name
        self.kv_capacity_tokens = kv_capacity_tokens
        self.max_batch = max_batch  # the most requests admitted at once
        self.on_done = on_done
        self.on_busy = on_busy  # called with +1 / −1 when the engine starts / stops working
        self.on_first_token: Callable[[Job], Any] | None = None  # as a first token comes out
        self.finishes = False  # True: the last token ends the request (sets its finished_s)
        self.clock_scale = 1.0
        self.waiting: deque[Job] = deque()  # submitted, not admitted yet (FIFO)
        self.kv_used = 0  # KV tokens reserved by admitted requests
        self.busy = False
        self.tpot_s = 0.0  # recent time per output token, pauses for others' prefills included

    def submit(self, job: Job) -> None:
        """A request arrives at the engine (sets its ``engine_queued_s``)."""
        raise NotImplementedError

    def retime(self, clock_scale: float) -> None:
        """The clock changed (DVFS): work from now on is stretched by ``clock_scale``."""
        raise NotImplementedError

    def estimate_s(self, job: Job) -> float:
        """Rough time from submission to last token for ``job`` given the current state."""
        raise NotImplementedError

    def in_flight(self) -> int:
        """Admitted requests: prefilling or decoding."""
        raise NotImplementedError

    @property
    def load(self) -> int:
        return len(self.waiting) + self.in_flight()


class BatchEngine(Engine):
    """One continuous-batching engine; ``on_done(job)`` is called when a request leaves it."""

    __slots__ = (
        "_prefilled_cb",
        "_push",
        "_seq",
        "_version",
        "_wake_cb",
        "model",
        "prefilling",
        "running",
        "steps",
        "sum_join",
        "sum_prompt",
        "t_mark",
        "tau_s",
        "waiting_prefill_s",
    )

    def __init__(self, loop: EventLoop, name: str, model: StepModel, kv_capacity_tokens: int,
                 max_batch: int, on_done: Callable[[Job], Any],
                 on_busy: Callable[[int], Any] | None = None) -> None:
        Engine.__init__(self, loop, name, kv_capacity_tokens, max_batch, on_done, on_busy)
        self.model = model
        self.waiting_prefill_s = 0.0  # estimated prefill seconds queued (for policies)
        self.running: list[tuple[float, int, float, Job]] = []  # (finish_step, seq, join_step, job)
        self.prefilling: Job | None = None
        self.steps = 0.0
        self.t_mark = 0.0
        self.tau_s = math.inf
        self.sum_prompt = 0
        self.sum_join = 0.0
        self._seq = 0
        self._version = 0
        # the event callbacks, bound once (binding at every push allocates a method object)
        self._prefilled_cb: Callable[[Any], None] = self._on_prefilled
        self._wake_cb: Callable[[Any], None] = self._on_wake
        # heappush as an attribute: compiled code looks an imported name up in a dict per use
        self._push: Callable[[list[Any], Any], None] = heappush

    # ---- state for policies and the UI -------------------------------------------------
    @property
    def batch(self) -> int:
        return len(self.running)

    def in_flight(self) -> int:
        return len(self.running) + (self.prefilling is not None)

    def context_tokens(self) -> int:
        return int(self.sum_prompt + len(self.running) * self.steps - self.sum_join)

    def estimate_s(self, job: Job) -> float:
        """Rough time from submission to last token for ``job`` given the current state."""
        running = len(self.running)
        b = running + len(self.waiting) + 1
        ctx = self.sum_prompt + running * self.steps - self.sum_join + job.prompt_tokens
        step = self.model.step_s(b if b < self.max_batch else self.max_batch, int(ctx)) * self.clock_scale
        if running and self.tpot_s > step:  # decode is being paused by others' prefills
            step = self.tpot_s  # (measured on recent requests; ignored once the batch is empty)
        queued = self.waiting_prefill_s
        if self.prefilling is not None:
            queued += 0.5 * self.prefilling.tag
        return (queued + self.model.prefill_s(job)) * self.clock_scale + (job.output_tokens - 1) * step

    # ---- events -------------------------------------------------------------------------
    def submit(self, job: Job) -> None:
        rec = job.rec
        now = self.loop.now
        rec.engine_queued_s = now
        need = job.prompt_tokens + job.output_tokens
        if need > self.kv_capacity_tokens:
            rec.outcome = Outcome.FAILED
            rec.error = f"sequence of {need} tokens exceeds " \
                        f"the KV cache ({self.kv_capacity_tokens} tokens) of {self.name}"
            self.on_done(job)
            return
        job.tag = pf = self.model.prefill_s(job)  # nominal prefill seconds, priced once
        waiting = self.waiting
        waiting.append(job)
        self.waiting_prefill_s += pf
        if self.prefilling is None and len(waiting) == 1 and (
            len(self.running) < self.max_batch and self.kv_used + need <= self.kv_capacity_tokens
        ):  # otherwise the engine's next event is unchanged
            self._sync(now)
            self._schedule(now)

    def retime(self, clock_scale: float) -> None:
        """The clock changed (DVFS): re-price the decode batch from now on."""
        now = self.loop.now
        self._sync(now)
        self.clock_scale = clock_scale
        if self.prefilling is None and self.running:
            self._schedule(now)

    def _sync(self, now: float) -> None:
        if self.running and self.prefilling is None:
            self.steps += (now - self.t_mark) / self.tau_s
        self.t_mark = now

    def _schedule(self, now: float) -> None:
        waiting = self.waiting
        running = self.running
        if waiting:
            job = waiting[0]
            need = job.prompt_tokens + job.output_tokens
            if len(running) < self.max_batch and self.kv_used + need <= self.kv_capacity_tokens:
                waiting.popleft()
                pf = job.tag
                self.waiting_prefill_s = self.waiting_prefill_s - pf if waiting else 0.0
                self.kv_used += need
                self.prefilling = job
                self._version += 1  # a pending decode wake-up is void: decode pauses
                if not self.busy:
                    self.busy = True
                    if self.on_busy is not None:
                        self.on_busy(1)
                self.loop.at(now + self.model.prefill_draw_s(pf) * self.clock_scale,
                             self._prefilled_cb, job)
                return
        if running:
            n = len(running)
            tau = self.model.step_s(n, int(self.sum_prompt + n * self.steps - self.sum_join)) \
                * self.clock_scale
            self.tau_s = tau = tau if tau > 1e-12 else 1e-12  # a free step still counts tokens
            self._version = version = self._version + 1
            left = running[0][0] - self.steps
            self.loop.at(now + (left * tau if left > 0 else 0.0), self._wake_cb, version)
        elif self.busy:
            self.busy = False
            if self.on_busy is not None:
                self.on_busy(-1)

    def _on_prefilled(self, arg: Any) -> None:
        job: Job = arg
        now = self.loop.now
        self.prefilling = None
        self.t_mark = now
        job.rec.first_token_s = now
        if self.on_first_token is not None:
            self.on_first_token(job)
        out = job.output_tokens
        if out <= 1:
            self._finish(job, now)
        else:
            self._seq = seq = self._seq + 1
            steps = self.steps
            self._push(self.running, (steps + out - 1, seq, steps, job))
            self.sum_prompt += job.prompt_tokens
            self.sum_join += steps
        self._schedule(now)

    def _on_wake(self, arg: Any) -> None:
        if arg != self._version:
            self.loop.superseded += 1
            return  # superseded by a later batch change
        now = self.loop.now
        running = self.running
        self._sync(now)  # a valid wake-up means a running batch and no prefill
        steps = self.steps
        head = running[0][0]
        if head > steps:  # planned for the head's last token:
            self.steps = steps = head  # float rounding of (now − mark) / τ must not miss it
        limit = steps + 1e-6
        while running and running[0][0] <= limit:
            _, _, join, job = heappop(running)
            self.sum_prompt -= job.prompt_tokens
            self.sum_join -= join
            self._finish(job, now)
        if not running:
            self.steps = 0.0
            self.sum_join = 0.0
        self._schedule(now)

    def _finish(self, job: Job, now: float) -> None:
        out = job.output_tokens
        self.kv_used -= job.prompt_tokens + out
        rec = job.rec
        rec.last_token_s = now
        if self.finishes:
            rec.finished_s = now
        if out > 1:
            tpot = (now - rec.first_token_s) / (out - 1)  # type: ignore[operator]
            self.tpot_s += 0.1 * (tpot - self.tpot_s)
        self.on_done(job)
