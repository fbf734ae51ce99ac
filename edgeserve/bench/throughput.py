"""Three throughputs side by side, cache hit rates, and the "benchmark trap" warning.

A serving run has three throughputs, and they answer different questions:

* **request throughput** (req/s) — how many users are served;
* **output token throughput** (tok/s) — how fast answers are generated: decode work;
* **total token throughput** (tok/s) — prompt + output tokens per second: everything the engine
  *accepted*, including prompt tokens it never computed because they were in its prefix cache.

Prefix caching (or a workload with longer prompts) raises total tok/s without generating
anything faster. Two runs of a comparison where total rises and output falls (or the reverse)
are the classic trap: quoting total tok/s alone would call the slower generator the faster
server. :func:`direction_warning` says so in one line.

Cache hit rates come from the server's ``/metrics`` counters (vLLM 0.32; edgeserve serves vLLM's
``vllm:*`` metrics from the same registry, so the names are the same for both servers):

* ``vllm:prefix_cache_queries_total`` / ``vllm:prefix_cache_hits_total`` — prompt tokens looked
  up in the prefix cache / found there: hit rate = Δhits / Δqueries over the run (tokens);
* ``vllm:mm_cache_queries_total`` / ``vllm:mm_cache_hits_total`` — multimodal items looked up in
  the processor cache / found (items).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from edgeserve.bench.server_metrics import Snapshot

#: (result key, counter families (queries, hits), unit) of each cache the report shows
CACHE_COUNTERS: dict[str, tuple[str, str, str]] = {
    "prefix_cache": ("vllm:prefix_cache_queries", "vllm:prefix_cache_hits", "tokens"),
    "mm_cache": ("vllm:mm_cache_queries", "vllm:mm_cache_hits", "items"),
}
#: relative changes smaller than this count as "no change" for the direction warning
DIRECTION_TOLERANCE = 0.02


def _counter_delta(before: Snapshot, after: Snapshot, family: str) -> float | None:
    keys = [k for k in after.counters if k[0] == family]
    if not keys:
        return None
    return sum(after.counters[k] - before.counters.get(k, 0.0) for k in keys)


def cache_figures(before: Snapshot, after: Snapshot) -> dict[str, Any]:
    """``<cache>_queries``, ``<cache>_hits`` and ``<cache>_hit_rate`` over a run (None if the
    server has no such counter, or nothing was looked up)."""
    out: dict[str, Any] = {}
    for name, (q_family, h_family, _) in CACHE_COUNTERS.items():
        q = _counter_delta(before, after, q_family)
        h = _counter_delta(before, after, h_family)
        out[f"{name}_queries"] = q
        out[f"{name}_hits"] = h
        out[f"{name}_hit_rate"] = h / q if q and h is not None else None
    return out


def throughput_line(m: Mapping[str, Any]) -> str:
    """``requests X req/s | output Y tok/s | total Z tok/s (total/output R×)``."""
    req, out, tot = m["request_throughput"], m["output_throughput"], m["total_token_throughput"]
    ratio = f"{tot / out:.2f}" if out else "n/a"
    return (f"throughput: requests {req:.2f} req/s | output {out:.1f} tok/s | "
            f"total {tot:.1f} tok/s (total/output {ratio}×)")


def cache_line(server: Mapping[str, Any] | None) -> str:
    """``prefix cache hit rate …, multimodal cache hit rate …`` from a run's ``server`` figures."""
    parts = []
    for name, (_, _, unit) in CACHE_COUNTERS.items():
        rate = (server or {}).get(f"{name}_hit_rate")
        queries = (server or {}).get(f"{name}_queries")
        word = "prefix cache" if name == "prefix_cache" else "multimodal cache"
        if rate is None:
            parts.append(f"{word} n/a" if queries is None else f"{word} no lookups")
        else:
            parts.append(f"{word} {rate:.1%} of {queries:.0f} {unit}")
    return "cache hits: " + ", ".join(parts)


def _direction(a: float, b: float) -> int:
    if a <= 0 and b <= 0:
        return 0
    change = (b - a) / max(abs(a), 1e-12)
    return 0 if abs(change) < DIRECTION_TOLERANCE else (1 if change > 0 else -1)


def direction_warning(a: Mapping[str, Any], b: Mapping[str, Any], label_a: str = "A",
                      label_b: str = "B") -> str | None:
    """One line when total and output token throughput move in opposite directions from run
    ``a`` to run ``b`` (changes under 2 % count as none); None otherwise."""
    d_total = _direction(float(a["total_token_throughput"]), float(b["total_token_throughput"]))
    d_out = _direction(float(a["output_throughput"]), float(b["output_throughput"]))
    if d_total * d_out >= 0:
        return None
    word = {1: "up", -1: "down"}
    return (f"WARNING: from {label_a} to {label_b} total token throughput goes {word[d_total]} "
            f"({a['total_token_throughput']:.1f} → {b['total_token_throughput']:.1f} tok/s) but "
            f"output token throughput goes {word[d_out]} ({a['output_throughput']:.1f} → "
            f"{b['output_throughput']:.1f} tok/s): the prompt side (prefix-cache reuse, longer "
            f"prompts) moved, not generation speed — do not read total tok/s alone")
