"""Cloud LLM servers: KV-cache capacity from memory, step time from a roofline.

**KV capacity.** Each token of context keeps a key and a value vector per layer and KV head:
``kv_bytes_per_token = 2 · layers · kv_heads · head_dim · dtype_bytes``. A server reserves
``memory · gpu_memory_utilization`` of the GPU; the weights take ``params · weight_bytes``; the rest
(less an activation reserve) holds KV::

    kv_capacity_tokens = (memory · utilization − weights − reserve) / kv_bytes_per_token

and at most ``kv_capacity_tokens // (prompt + output)`` requests fit at once (``max_concurrency``).

**Step time (roofline).** A decode step of a batch of ``b`` requests reads all weights once and
the batch's whole KV cache, and does ``2 · params`` FLOPs per token::

    step_s = max(bytes / (bandwidth · η_bw), flops / (peak · η_c)) + overhead

so small batches are memory-bound (step time flat in ``b``) and big ones compute-bound. A prefill
of ``p`` tokens is the same with ``2 · params · p`` FLOPs. Vision encoding adds a per-image-token
time on the GPU; server-side image preprocessing is a per-megapixel delay (many fast cores).

**Deployment** (:mod:`sim.scenario.deployment`): a checkpoint size override (``weights_gb``), tensor
parallelism and prefix caching. With ``tp`` GPUs per replica every formula above is per GPU —
``weights / tp``, ``ceil(kv_heads / tp)`` KV heads, ``flops / tp`` — and each step adds two
all-reduces per layer of its tokens' activations over the interconnect::

    step_s = max(bytes_gpu / bw, flops / tp / peak) + overhead + 2 · layers · t_allreduce(tokens)

With prefix caching a prefill computes only the prompt tokens after its cached prefix (it still
reads the cached KV): ``flops = 2 · params · (prompt − cached)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sim.core.batching import BatchEngine, Engine, StepModel
from sim.core.job import Job
from sim.core.loop import EventLoop
from sim.core.prefix_cache import PrefixCache, PrefixId
from sim.core.service import Draws
from sim.core.step_engine import StepEngine, first_computed
from sim.scenario.deployment import SINGLE_GPU, Deployment
from sim.scenario.profiles import CloudProfile, ModelShape


def kv_bytes_per_token(m: ModelShape, d: Deployment = SINGLE_GPU) -> float:
    """KV bytes one token keeps on one GPU of a replica (all of them for ``tp_size`` 1)."""
    return 2.0 * m.layers * d.kv_heads_per_gpu(m.kv_heads) * m.head_dim * m.kv_dtype.bytes


def weight_bytes(m: ModelShape, d: Deployment = SINGLE_GPU) -> float:
    """Bytes of the whole checkpoint: ``weights_gb`` if given, else params × dtype bytes."""
    if d.weights_gb is not None:
        return d.weights_gb * 1e9
    return m.params_b * 1e9 * m.weight_dtype.bytes


def kv_capacity_tokens(p: CloudProfile, d: Deployment = SINGLE_GPU) -> int:
    """KV-cache tokens one replica can hold (0 when the weights do not fit): each of its
    ``tp_size`` GPUs holds its share of the weights and of every token's KV."""
    free = (p.gpu.memory_gb * 1e9 * p.server.gpu_memory_utilization
            - weight_bytes(p.model, d) / d.tp_size - p.server.activation_reserve_gb * 1e9)
    return max(0, int(free // kv_bytes_per_token(p.model, d)))


def max_concurrency(p: CloudProfile, tokens_per_request: int, d: Deployment = SINGLE_GPU) -> int:
    """Requests of ``tokens_per_request`` (prompt + output) that fit in one replica at once."""
    return min(p.server.max_batch, kv_capacity_tokens(p, d) // tokens_per_request)


class Roofline(StepModel):
    """Prefill and decode-step times of one replica."""

    __slots__ = (
        "ar_per_token_s",
        "ar_step_s",
        "bw_b_s",
        "encode_s_per_token",
        "flops_per_token",
        "flops_s",
        "kv_per_token",
        "overhead_s",
        "weights_b",
    )

    def __init__(self, p: CloudProfile, d: Deployment = SINGLE_GPU) -> None:
        s = p.server
        tp = d.tp_size
        self.bw_b_s = p.gpu.mem_bandwidth_gb_s * 1e9 * s.bandwidth_efficiency
        self.flops_s = p.gpu.compute_tflops * 1e12 * s.compute_efficiency
        self.flops_per_token = 2.0 * p.model.params_b * 1e9 / tp  # one GPU's share
        self.weights_b = weight_bytes(p.model, d) / tp
        self.kv_per_token = kv_bytes_per_token(p.model, d)
        self.overhead_s = s.step_overhead_s
        self.encode_s_per_token = s.encode_s_per_image_token / tp
        # all-reduce time of a step: latency part (per step) + bandwidth part (per token)
        self.ar_step_s = d.allreduce_step_s(0, p.model.layers)
        self.ar_per_token_s = d.allreduce_step_s(1, p.model.layers) - self.ar_step_s

    def allreduce_s(self, tokens: int) -> float:
        """The two all-reduces per layer of a step of ``tokens`` tokens (0 without TP)."""
        return self.ar_step_s + self.ar_per_token_s * tokens if self.ar_step_s > 0.0 else 0.0

    def step_s(self, batch: int, context_tokens: int) -> float:
        mem = (self.weights_b + self.kv_per_token * context_tokens) / self.bw_b_s
        comp = self.flops_per_token * batch / self.flops_s
        return (mem if mem > comp else comp) + self.overhead_s + self.allreduce_s(batch)

    def prefill_tokens_s(self, tokens: int) -> float:
        mem = (self.weights_b + self.kv_per_token * tokens) / self.bw_b_s
        comp = self.flops_per_token * tokens / self.flops_s
        return (mem if mem > comp else comp) + self.overhead_s + self.allreduce_s(tokens)

    def prefill_draw_s(self, mean_s: float) -> float:
        return mean_s  # the roofline is deterministic

    def prefill_s(self, job: Job) -> float:
        tokens = job.prompt_tokens
        computed = tokens - first_computed(job)  # a cached prefix is read, not computed
        mem = (self.weights_b + self.kv_per_token * tokens) / self.bw_b_s
        comp = self.flops_per_token * computed / self.flops_s
        return (mem if mem > comp else comp) + self.overhead_s + self.allreduce_s(computed) \
            + self.encode_s_per_token * job.image_tokens


class CloudServer:
    """``replicas`` continuous-batching engines behind a least-loaded router.

    Each replica is a :class:`~sim.core.batching.BatchEngine` priced by the roofline, or, when the
    profile has ``server.step``, a :class:`~sim.core.step_engine.StepEngine` with that step-time model
    (vLLM V1 steps, the vision encoder inside them); the KV capacity follows from memory either way.
    """

    def __init__(self, loop: EventLoop, name: str, profile: CloudProfile, replicas: int,
                 on_done: Callable[[Job], Any], seed: str = "",
                 deployment: Deployment = SINGLE_GPU) -> None:
        self.loop = loop
        self.name = name
        self.placement = f"cloud:{name}"
        self.profile = profile
        self.deployment = deployment
        self.model = Roofline(profile, deployment)
        self.kv_capacity_tokens = kv_capacity_tokens(profile, deployment)
        self.preprocess_s_per_pixel = profile.server.preprocess_s_per_mpixel / 1e6
        step = profile.server.step
        self.replicas: list[Engine] = [
            BatchEngine(loop, f"{name}/{i}", self.model, self.kv_capacity_tokens,
                        profile.server.max_batch, on_done) if step is None else
            StepEngine(loop, f"{name}/{i}", step, self.kv_capacity_tokens, on_done, None, True,
                       Draws(f"{seed}:cloud:{name}/{i}:step"))
            for i in range(replicas)
        ]
        #: one prefix cache per replica (empty list: prefix caching off)
        self.prefix_caches: list[PrefixCache] = (
            [PrefixCache() for _ in range(replicas)] if deployment.prefix_caching else [])
        self.single = replicas == 1
        #: the arrival callback: straight to the engine when there is nothing to route, through
        #: the prefix caches when there are some
        self.arrive: Callable[[Any], None] = (
            self.on_arrive_prefixed if self.prefix_caches else
            self.replicas[0].submit if replicas == 1 else self.on_arrive)

    def preprocess_s(self, job: Job) -> float:
        return job.source_pixels * self.preprocess_s_per_pixel

    def pick(self) -> Engine:
        """The least-loaded replica (the first among equals)."""
        reps = self.replicas
        if len(reps) == 1:
            return reps[0]
        return min(reps, key=lambda e: e.load)

    def on_arrive(self, arg: Any) -> None:
        """Event: a request's bytes arrived and were preprocessed; queue it on a replica."""
        self.pick().submit(arg)

    def on_arrive_prefixed(self, arg: Any) -> None:
        """Event: as :meth:`on_arrive`, the job's prefix (``job.prefix_id``) looked up first."""
        job: Job = arg
        if job.prefix_id is None:
            self.pick().submit(job)
        else:
            self.submit_prefixed(job, job.prefix_id, job.prefix_tokens)

    def submit_prefixed(self, job: Job, prefix_id: PrefixId, prefix_tokens: int) -> None:
        """A request whose prompt starts with prefix ``prefix_id`` of ``prefix_tokens`` tokens
        reaches the server: the least-loaded replica looks the prefix up in its cache (a hit sets
        ``job.cached_tokens``) and queues it. Without prefix caching it is :meth:`on_arrive`."""
        reps = self.replicas
        i = 0
        if len(reps) > 1:
            best = reps[0].load
            for k in range(1, len(reps)):
                if reps[k].load < best:
                    best = reps[k].load
                    i = k
        engine = reps[i]
        if self.prefix_caches and prefix_tokens > 0:
            budget = self.kv_capacity_tokens - engine.kv_used \
                - job.prompt_tokens - job.output_tokens
            job.cached_tokens = hit = self.prefix_caches[i].lookup(
                prefix_id, min(prefix_tokens, job.prompt_tokens), budget)
            if hit:
                job.rec.cached_tokens = hit
        engine.submit(job)

    def estimate_s(self, job: Job) -> float:
        """Predicted preprocessing + engine time for ``job`` arriving now."""
        engine = self.replicas[0] if self.single else self.pick()
        return job.source_pixels * self.preprocess_s_per_pixel + engine.estimate_s(job)

    @property
    def load(self) -> int:
        return sum(e.load for e in self.replicas)
