"""A vLLM V1 engine, step by step: chunked prefill and decode tokens mixed under a token budget.

vLLM V1 does not run "a prefill" and then "a decode batch". It runs *steps*. Before each step its
scheduler fills a budget of ``max_num_batched_tokens`` tokens:

1. every running request past its prefill gets one decode token;
2. a running request whose prompt is only partly computed gets its next chunk, as much of the
   rest of its prompt as the budget still holds;
3. then waiting requests are admitted in arrival order (FCFS) while budget is left, fewer than
   ``max_num_seqs`` requests run and the KV cache has blocks for them; each gets a first chunk of
   its prompt, cut off where the budget ends (chunked prefill).

With the vision encoder in the step, the images a step encodes share an encoder budget (vLLM's
``max_num_encoder_input_tokens``, the token budget). A request whose image does not fit what the
step's earlier images left is admitted without it — vLLM schedules its text up to the image — and
the scheduler goes on down the queue, so a small image behind a large one can be encoded first,
in the large one's step; the passed-over request encodes its image in a later step, before the
requests admitted after it. (The few text tokens before the image are computed here with the
image, not in the step that admitted it.)

A request's first token comes out at the end of the step that computes the last token of its
prompt; from the next step on it decodes one token per step. Picture a budget of 2048 tokens,
request A decoding, B (a 3000-token prompt) and C (600 tokens) arriving together::

    step  decode   prefill chunks             tokens
     1    A        B[0:2047]                  1 + 2047 = 2048
     2    A        B[2047:3000]  C[0:600]     1 + 953 + 600 = 1554   ← B's and C's first tokens
     3    A B C    —                          3

So a long prompt no longer stalls decoding (A gets a token every step), but it makes the steps
it rides in longer. A step's time at clock scale 1 is linear in what it holds (:mod:`sim.core.step_cost` has the
formula):

- ``prefill_tokens``: prompt tokens computed in the step (a prefix-cache hit of
  ``job.cached_tokens`` is not computed: the prefill starts there; at least one prompt token is
  always computed, as in vLLM),
- ``decode_tokens``: requests decoding in the step,
- ``context_tokens``: KV tokens the step's requests hold at its end (cached prefix included):
  what attention reads,
- ``encoder_tokens``: image tokens of requests whose first chunk is in the step, when the vision
  encoder runs inside the engine step (``encoder_in_step``: a device without its own ``encode``
  stage, a cloud GPU); a device that encodes on its own unit submits encoded requests.
- ``encoder_tokens_sq``: the sum over those images of their image tokens squared — the vision
  tower attends over each image's patches, so a large image costs more than linearly.
- ``encoder_tokens_cross``: ``encoder_tokens² − encoder_tokens_sq``, zero for a step with one
  image — vLLM's CPU tower attends image by image, yet a step encoding two images takes longer
  than the two images' single-image costs, so the excess of a multi-image step is its own term
  (the measurements: docs/sim.md, "vLLM V1 step engine"); the calibrator fits it only for vLLM's
  CPU build.
- ``image_arrivals``: image requests handed to the engine while the step runs (vLLM takes each
  in on its CPU beside the step loop; on a GPU that lengthens the step it overlaps). It is not
  known when the step starts, so :meth:`StepEngine.submit` adds it as the request arrives: the
  running step ends later, or the next step is longer when none runs.
- ``prefill_x_context``: the step's prompt tokens times the context the others hold
  (``context_tokens − prefill_tokens``). vLLM's CPU backend attends a prefill over the whole
  batch's keys, so a prefill beside decoders costs more the more context they hold, while a
  decode-only step's time hardly grows with context (docs/sim.md has the measured steps).
- ``prefill_step`` and ``decode_beside_prefill``: a step that computes prompt tokens costs a
  fixed amount more, and more per decoder beside it. On a GPU vLLM replays a decode-only batch
  as one CUDA graph, and runs a batch holding a prefill piecewise, its attention launched
  eagerly per request; the calibrator fits both only on a GPU.

The step time is stretched by the DVFS ``clock_scale`` in force when the step starts (a step in
progress keeps its end), by ``stretch(duration)`` when the owner sets it (a device whose engine shares
its cores with preprocessing workers says how crowded they are; the engine knows nothing of
them), and optionally spread by a lognormal factor of mean 1 (``cv``) and by the machine's slow
drift (``drift_sd``, ``drift_tau_s``): a factor ``exp(x − sd²/2)`` with ``x`` an
Ornstein–Uhlenbeck process advanced exactly over the time since the last step,
``x ← x·a + sd·√(1 − a²)·N(0, 1)``, ``a = exp(−Δt/τ)``, so steps close in time are slow or fast
together; ``drift_start`` (log units) is where ``x`` starts on a fresh server (else a stationary
draw), so a server that is slow in its first seconds relaxes to its usual speed in about ``τ``.
A fresh engine is slower the first time it meets a shape (``cold_shape_factor``): a step whose
prefill-token count, or one of whose images' token counts, it has not run before takes
``1 + cold_shape_factor`` times as long — vLLM's CPU kernels build their primitives per shape,
so such steps come early in a server's life.

**KV cache.** Blocks of ``block_size_tokens``. A request is admitted only when blocks for its
whole sequence (prompt + output tokens, rounded up to blocks) are free, and keeps them until it
finishes. vLLM allocates blocks lazily as tokens are scheduled and preempts (recomputes) a request
when they run out; reserving up front needs no preemption, at the price of admitting fewer
requests than vLLM when the cache is nearly full. Cached prefix blocks are not shared here.

**Cost.** One event per step, whatever the number of requests in it: decode tokens, context
growth and finishes are running sums and a heap keyed by the step a request finishes in, so a
step costs O(1) plus O(log n) per request that joins or leaves. A request of ``n`` output tokens
running alone costs ``n`` events plus one per extra prefill chunk; ``b`` requests decoding
together share theirs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from heapq import heappop, heappush
from typing import Any, NamedTuple

from edgeserve.records import Outcome
from sim.core.batching import Engine
from sim.core.job import Job
from sim.core.loop import EventLoop
from sim.core.service import Draws, ServiceTime
from sim.core.step_cost import StepCost
from sim.scenario.profiles import ServiceKind, ServiceModelConfig, StepTimeModel


class Step(NamedTuple):
    """What one engine step held, for ``StepEngine.on_step`` (tests, step traces)."""

    start_s: float
    duration_s: float
    prefill_tokens: int
    decode_tokens: int
    context_tokens: int
    encoder_tokens: int


def first_computed(job: Job) -> int:
    """Prompt tokens already in KV when ``job``'s prefill starts: its prefix-cache hit, leaving at
    least one prompt token to compute (vLLM recomputes the last token of a fully cached prompt)."""
    start = job.cached_tokens
    p = job.prompt_tokens
    if start >= p:
        start = p - 1 if p > 0 else 0
    return start if start > 0 else 0


class StepEngine(Engine):
    """A vLLM V1-style engine for a device or a cloud replica; see the module docstring."""

    __slots__ = (
        "_arrival_extra_s",
        "_block",
        "_cold_factor",
        "_ctx_decoding",
        "_draws",
        "_drift_sd",
        "_drift_start",
        "_drift_t",
        "_drift_tau",
        "_drift_x",
        "_kick_cb",
        "_kv_cap",
        "_noise",
        "_noisy",
        "_prefilling",
        "_prefilling_tokens",
        "_seq",
        "_shapes",
        "_step_cb",
        "_step_decode",
        "_step_ends",
        "_step_start_s",
        "_stepped_s",
        "_waiting_images",
        "_waiting_images_sq",
        "_waiting_tokens",
        "budget",
        "cost",
        "decoding",
        "encoder_budget",
        "encoder_in_step",
        "in_step",
        "on_step",
        "prefills",
        "record_token_times",
        "step_end_s",
        "stepping",
        "steps",
        "stretch",
    )

    def __init__(self, loop: EventLoop, name: str, model: StepTimeModel, kv_capacity_tokens: int,
                 on_done: Callable[[Job], Any], on_busy: Callable[[int], Any] | None = None,
                 encoder_in_step: bool = False, draws: Draws | None = None) -> None:
        Engine.__init__(self, loop, name, kv_capacity_tokens, model.max_num_seqs, on_done,
                        on_busy)
        self.budget = model.max_num_batched_tokens
        # vLLM's encoder budget per step (max_num_encoder_input_tokens = the token budget): a
        # request whose image does not fit after the step's other images waits for the next step
        self.encoder_budget = model.max_num_batched_tokens
        self._block = b = model.block_size_tokens
        self._kv_cap = kv_capacity_tokens // b * b  # whole blocks only
        self.cost = StepCost(model.base_s, model.per)
        self._noisy = model.cv > 0
        draws = draws if draws is not None else Draws(f"{name}:step")
        self._noise = ServiceTime(ServiceModelConfig(kind=ServiceKind.LOGNORMAL, cv=model.cv),
                                  draws)
        self._draws = draws
        self._drift_sd = model.drift_sd
        self._drift_tau = model.drift_tau_s
        self._drift_x = 0.0
        self._drift_t = -1.0  # when x was last advanced (< 0: not yet drawn)
        self._drift_start = model.drift_start
        self._cold_factor = model.cold_shape_factor
        self._shapes: set[int] = set()  # prefill-token counts run (> 0), image sizes encoded (< 0)
        self.encoder_in_step = encoder_in_step
        # running requests: decoding ones on a heap by the step their last token comes in; the
        # prompts the running step completes; the prompts it leaves unfinished, in admission
        # order, as (job, its prompt tokens in KV at the step's end, its image encoded): one cut
        # off by the token budget, and those admitted while the step's encoder budget was spent
        self.decoding: list[tuple[int, int, Job]] = []  # (finish step, seq, job)
        self.prefills: list[Job] = []
        self._prefilling: list[tuple[Job, int, bool]] = []
        self._prefilling_tokens = 0  # prompt tokens they still have to compute
        self._ctx_decoding = 0  # KV tokens of the decoding requests after the last step
        self._step_decode = 0  # decode tokens of the running step
        self._waiting_tokens = 0  # prompt tokens the waiting requests still have to compute
        self._waiting_images = 0  # their image tokens
        self._waiting_images_sq = 0  # Σ of their image tokens squared
        self._seq = 0
        self.steps = 0  # steps run (the running one included)
        self.stepping = False  # a step is running or about to start (else the engine is idle)
        self.in_step = False  # a step is running (its end scheduled)
        self._step_start_s = 0.0  # when the running step started
        self._stepped_s = 0.0  # seconds of the steps that have ended
        # image requests' intake time that arrived with no step running: the next step's
        self._arrival_extra_s = 0.0
        self.step_end_s = 0.0
        # every output token's time on its record (``token_times_s``, as the runtime records
        # them), for comparing inter-token latencies with a measured run; off by default: it keeps
        # the end of every step the engine runs
        self.record_token_times = False
        self._step_ends: list[float] = []
        self.on_step: Callable[[Step], Any] | None = None  # called as each step starts
        # a step of this duration starting now, stretched for sharing its cores (None: as is)
        self.stretch: Callable[[float], float] | None = None
        self._step_cb: Callable[[Any], None] = self._on_step
        self._kick_cb: Callable[[Any], None] = self._kick

    # ---- state for policies and the UI -------------------------------------------------
    @property
    def batch(self) -> int:
        """Requests decoding."""
        return len(self.decoding)

    def in_flight(self) -> int:
        return len(self.decoding) + len(self.prefills) + len(self._prefilling)

    def estimate_s(self, job: Job) -> float:
        """Rough time from submission to last token for ``job`` given the current state: the
        prompt tokens queued ahead (FCFS) and its own, in steps that also carry the decoders'
        tokens, then its decode steps (or the recently observed time per output token, if that is
        longer). Admission waits for a free slot or KV blocks are not foreseen."""
        decoders = len(self.decoding) + len(self.prefills)
        tokens = self._waiting_tokens + self._prefilling_tokens + job.prompt_tokens \
            - first_computed(job)
        room = self.budget - decoders
        if room < 1:
            room = 1
        n_prefill = (tokens + room - 1) // room
        if n_prefill < 1:
            n_prefill = 1
        ctx = self._ctx_decoding + job.prompt_tokens
        cost = self.cost
        # the prefill steps: each carries the decoders; the prompt tokens and images once
        t = n_prefill * (cost.seconds(0, decoders, ctx) + cost.prefill_extra(decoders)) \
            + cost.prefill * tokens
        if self.encoder_in_step:
            t += cost.encoder * (self._waiting_images + job.image_tokens) + cost.encoder_sq \
                * (self._waiting_images_sq + job.image_tokens * job.image_tokens)
        b = self.in_flight() + len(self.waiting) + 1
        if b > self.max_batch:
            b = self.max_batch
        scale = self.clock_scale
        step = cost.seconds(0, b, ctx + b) * scale
        if decoders and self.tpot_s > step:  # steps are being stretched by others' prefills
            step = self.tpot_s
        t = t * scale + (job.output_tokens - 1) * step
        if self.stepping:
            left = self.step_end_s - self.loop.now
            if left > 0.0:
                t += left
        return t

    # ---- events -------------------------------------------------------------------------
    def submit(self, job: Job) -> None:
        rec = job.rec
        rec.engine_queued_s = self.loop.now
        b = self._block
        need = (job.prompt_tokens + job.output_tokens + b - 1) // b * b
        if need > self._kv_cap:
            rec.outcome = Outcome.FAILED
            rec.error = f"sequence of {job.prompt_tokens + job.output_tokens} tokens " \
                        f"({need // b} blocks of {b}) exceeds " \
                        f"the KV cache ({self.kv_capacity_tokens} tokens) of {self.name}"
            self.on_done(job)
            return
        arrival_s = self.cost.image_arrival * self.clock_scale if job.image_tokens else 0.0
        if arrival_s > 0.0:  # taken in on the engine's CPU beside its steps
            if self.in_step:
                self.step_end_s += arrival_s
            else:
                self._arrival_extra_s += arrival_s
        self.waiting.append(job)
        self._waiting_tokens += job.prompt_tokens - first_computed(job)
        self._waiting_images += job.image_tokens
        self._waiting_images_sq += job.image_tokens * job.image_tokens
        if not self.stepping:  # else the scheduler sees it when the running step ends
            # an idle engine schedules at the end of this instant, as vLLM drains its input queue
            # before scheduling: requests submitted at the same time share the first step
            self.stepping = True
            self.loop.at(self.loop.now, self._kick_cb, None)

    def _drift(self, now: float) -> float:
        """The drift factor (mean 1) for a step starting ``now``; advances the OU process."""
        sd = self._drift_sd
        if self._drift_t < 0:  # first step: a fresh server's warm-up offset, or a stationary draw
            x = self._drift_start if self._drift_start else sd * self._draws.normal()
        else:
            a = math.exp(-(now - self._drift_t) / self._drift_tau)
            x = self._drift_x * a + sd * math.sqrt(1.0 - a * a) * self._draws.normal()
        self._drift_x, self._drift_t = x, now
        return math.exp(x - 0.5 * sd * sd)

    def retime(self, clock_scale: float) -> None:
        """The clock changed (DVFS): steps started from now on are stretched by ``clock_scale``
        (the running step keeps its end)."""
        self.clock_scale = clock_scale

    def _kick(self, arg: Any) -> None:
        self._start_step(self.loop.now)

    def _start_step(self, now: float) -> None:
        """Schedule the next step from the running set and the waiting queue, or go idle."""
        budget = self.budget
        n_dec = len(self.decoding)
        budget -= n_dec  # (max_num_batched_tokens >= max_num_seqs: every decoder fits)
        ctx = self._ctx_decoding + n_dec
        prefills = self.prefills  # this step's prompts that complete in it
        prefill = 0
        enc = 0
        enc_sq = 0
        cold = False
        enc_budget = self.encoder_budget
        in_step = self.encoder_in_step
        # running requests still in their prompt, in admission order: the last chunked by the
        # token budget, or admitted with their image waiting for the encoder budget (vLLM
        # schedules such a request's text up to its image and passes over it, not stopping)
        running = self._prefilling
        seqs = n_dec + len(running)
        still: list[tuple[Job, int, bool]] = []
        for entry in running:
            job, done, encoded = entry
            if budget <= 0:
                still.append(entry)
                continue
            if not encoded:
                img = job.image_tokens
                if enc and enc + img > enc_budget:
                    still.append(entry)  # its image waits again; those behind it may go on
                    continue
                enc += img
                enc_sq += img * img
                cold = self._cold_image(img) or cold
            p = job.prompt_tokens
            chunk = p - done
            if chunk > budget:
                chunk = budget
            done += chunk
            prefill += chunk
            ctx += done
            budget -= chunk
            self._prefilling_tokens -= chunk
            if done < p:
                still.append((job, done, True))
            else:
                prefills.append(job)  # its last chunk: first token at this step's end
        waiting = self.waiting
        max_seqs = self.max_batch
        b = self._block
        while budget > 0 and waiting and seqs < max_seqs:
            job = waiting[0]
            p = job.prompt_tokens
            need = (p + job.output_tokens + b - 1) // b * b
            if self.kv_used + need > self._kv_cap:
                break  # FCFS: the head waits for blocks, and everyone behind it
            waiting.popleft()
            seqs += 1
            self.kv_used += need
            start = first_computed(job)
            rest = p - start
            img = job.image_tokens if in_step else 0
            self._waiting_tokens -= rest
            self._waiting_images -= job.image_tokens
            self._waiting_images_sq -= job.image_tokens * job.image_tokens
            if img and enc and enc + img > enc_budget:
                # admitted without its image (and, here, without the few text tokens before it)
                still.append((job, start, False))
                self._prefilling_tokens += rest
                continue
            enc += img
            enc_sq += img * img
            cold = self._cold_image(img) or cold
            chunk = rest
            if chunk > budget:
                chunk = budget
                still.append((job, start + chunk, True))
                self._prefilling_tokens += rest - chunk
            else:
                prefills.append(job)
            prefill += chunk
            ctx += start + chunk
            budget -= chunk
        self._prefilling = still
        if not prefill and not n_dec:  # (an encoded image always brings prompt tokens)
            self.stepping = False
            self.in_step = False
            if self.busy:
                self.busy = False
                if self.on_busy is not None:
                    self.on_busy(-1)
            return
        d = self.cost.seconds(prefill, n_dec, ctx, enc, enc_sq) * self.clock_scale
        if self._cold_factor and prefill and prefill not in self._shapes:
            self._shapes.add(prefill)  # a prefill-token count run the first time
            cold = True
        if cold:
            d *= 1.0 + self._cold_factor
        if self.stretch is not None:
            d = self.stretch(d)
        if self._drift_sd > 0:
            d *= self._drift(now)
        if self._noisy:
            d = self._noise.draw(d)
        if self._arrival_extra_s > 0.0:
            d += self._arrival_extra_s
            self._arrival_extra_s = 0.0
        self._step_decode = n_dec
        self.in_step = True
        self.steps += 1
        self.stepping = True
        self._step_start_s = now
        if not self.busy:
            self.busy = True
            if self.on_busy is not None:
                self.on_busy(1)
        self.step_end_s = end = now + d
        if self.on_step is not None:
            self.on_step(Step(now, d, prefill, n_dec, ctx, enc))
        self.loop.at(end, self._step_cb, None)

    def _cold_image(self, img: int) -> bool:
        """Whether an image of ``img`` tokens is the first of its size this engine encodes (a
        cold shape, with a cold-shape factor set); it is remembered as seen."""
        if self._cold_factor and img and -img not in self._shapes:
            self._shapes.add(-img)
            return True
        return False

    def stepped_until(self, t_s: float) -> float:
        """Seconds the engine has spent in steps up to ``t_s`` (no earlier than the last event):
        the overlap of a span with its steps is the difference of two of these."""
        if self.in_step and t_s > self._step_start_s:
            end = self.step_end_s
            return self._stepped_s + (t_s if t_s < end else end) - self._step_start_s
        return self._stepped_s

    def extend(self, extra_s: float) -> None:
        """Lengthen the running step by ``extra_s`` (its owner's other work slowed it down)."""
        if self.stepping:
            self.step_end_s += extra_s

    def _on_step(self, arg: Any) -> None:
        """The running step ended: its decoders got a token, its completed prompts their first."""
        now = self.loop.now
        if now < self.step_end_s:  # extended while it ran: it ends later
            self.loop.at(self.step_end_s, self._step_cb, None)
            return
        self._stepped_s += now - self._step_start_s
        self._step_start_s = now
        t = self.steps
        if self.record_token_times:
            self._step_ends.append(now)  # the end of step t, at index t - 1
        self._ctx_decoding += self._step_decode
        decoding = self.decoding
        while decoding and decoding[0][0] <= t:
            job = heappop(decoding)[2]
            self._ctx_decoding -= job.prompt_tokens + job.output_tokens - 1
            self._finish(job, now)
        prefills = self.prefills
        for job in prefills:
            job.rec.first_token_s = now
            if self.on_first_token is not None:
                self.on_first_token(job)
            out = job.output_tokens
            if out <= 1:
                self._finish(job, now)
            else:
                self._seq = seq = self._seq + 1
                heappush(decoding, (t + out - 1, seq, job))
                self._ctx_decoding += job.prompt_tokens
        prefills.clear()
        self._start_step(now)

    def _finish(self, job: Job, now: float) -> None:
        out = job.output_tokens
        b = self._block
        self.kv_used -= (job.prompt_tokens + out + b - 1) // b * b
        rec = job.rec
        rec.last_token_s = now
        if self.record_token_times:
            # a running request gets one token in every step from its first to its last (no
            # preemption here), and it finishes at the end of step ``self.steps``
            t = self.steps
            rec.token_times_s = self._step_ends[t - out:t] if out > 0 else []
        if self.finishes:
            rec.finished_s = now
        if out > 1:
            tpot = (now - rec.first_token_s) / (out - 1)  # type: ignore[operator]
            self.tpot_s += 0.1 * (tpot - self.tpot_s)
        self.on_done(job)
