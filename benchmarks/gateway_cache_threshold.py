"""The semantic cache's similarity threshold, chosen on labelled question pairs, and the cost of
its exact index.

``tests/data/gateway_cache_pairs.jsonl`` holds pairs of questions, each labelled ``paraphrase``
(the same question in other words: the cache should answer the second from the first) or
``near_miss`` (nearly the same words, another question: a different number, entity, unit,
direction or a negation: the cache must not). Both texts are embedded as the gateway embeds a
request (``user: <text>``, WordLlama, lower-cased words). A pair *hits* when its similarity
reaches the threshold and the exact check of :mod:`edgeserve.gateway.question_guard` (numbers,
negations, word order) passes, as in the cache. The threshold chosen is the lowest one, rounded up
to 0.001, at which at most ``--max-false`` of the near-misses would hit; the paraphrase hit rate
at it is what that costs. The embedding alone is shown beside it.

Then the lookup time of the exact index (one matrix-vector product over all entries, as
:class:`~edgeserve.gateway.semantic_cache.SemanticCache` does) at 1k, 10k and 100k entries.

    python benchmarks/gateway_cache_threshold.py [--max-false 0.01] [--lookups 200]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path

import numpy as np

from edgeserve.gateway.config import GatewayConfig
from edgeserve.gateway.embedder import Embedder
from edgeserve.gateway.question_guard import Question, same_question
from edgeserve.gateway.semantic_cache import SemanticCache

PAIRS = Path(__file__).resolve().parents[1] / "tests" / "data" / "gateway_cache_pairs.jsonl"


def load_pairs(path: Path = PAIRS) -> list[dict[str, str]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def similarities(embedder: Embedder, pairs: list[dict[str, str]], kind: str,
                 guarded: bool) -> np.ndarray:
    """Each pair's similarity as the cache sees it; -1 where ``guarded`` and the exact check
    tells the two questions apart."""
    out = []
    for p in pairs:
        if p["kind"] != kind:
            continue
        a, b = f"user: {p['a']}", f"user: {p['b']}"
        same = same_question(Question.of(a), Question.of(b))
        out.append(float(embedder.embed(a) @ embedder.embed(b)) if same or not guarded else -1.0)
    return np.array(out)


def pick_threshold(near_miss: np.ndarray, max_false: float) -> float:
    """The lowest threshold (a multiple of 0.001) at which at most ``max_false`` of the
    near-misses reach it."""
    allowed = math.floor(max_false * len(near_miss))
    ranked = np.sort(near_miss)[::-1]
    if allowed >= len(ranked):
        return 0.0
    return min(1.0, math.floor(float(ranked[allowed]) * 1000) / 1000 + 0.001)


def lookup_ms(n: int, dim: int, lookups: int) -> float:
    rng = np.random.default_rng(0)
    cache = SemanticCache(n, dim, ttl_s=1e9, threshold=1.1)  # never a hit: the whole scan
    vecs = rng.normal(size=(n, dim)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    for v in vecs:
        cache.store("ctx", v, b"")
    times = []
    for q in vecs[:lookups]:
        t = time.perf_counter()
        cache.lookup("ctx", q)
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-false", type=float, default=0.01,
                    help="the largest share of near-misses allowed to hit (default 0.01)")
    ap.add_argument("--lookups", type=int, default=200)
    args = ap.parse_args()

    embedder = Embedder()
    pairs = load_pairs()
    raw_para = similarities(embedder, pairs, "paraphrase", guarded=False)
    raw_near = similarities(embedder, pairs, "near_miss", guarded=False)
    para = similarities(embedder, pairs, "paraphrase", guarded=True)
    near = similarities(embedder, pairs, "near_miss", guarded=True)
    chosen = pick_threshold(near, args.max_false)
    default = float(GatewayConfig.__dataclass_fields__["cache_threshold"].default)  # type: ignore[arg-type]
    print(f"{len(para)} paraphrase and {len(near)} near-miss pairs ({PAIRS.name})")
    print(f"similarity  paraphrase p10/p50/p90 {np.percentile(raw_para, 10):.3f}/"
          f"{np.median(raw_para):.3f}/{np.percentile(raw_para, 90):.3f}; near-miss p50/p90/max "
          f"{np.median(raw_near):.3f}/{np.percentile(raw_near, 90):.3f}/{raw_near.max():.3f}")
    print(f"{'':9}  {'with the exact check':>32}  {'embedding alone':>32}")
    print(f"{'threshold':>9}  {'paraphrase hits':>16}{'near-miss hits':>16}"
          f"  {'paraphrase hits':>16}{'near-miss hits':>16}")
    for t in sorted({0.85, 0.90, 0.93, 0.95, 0.97, 0.99, chosen, float(default)}):
        mark = "  <- chosen" if t == chosen else ("  <- default" if t == default else "")
        print(f"{t:9.3f}  {np.mean(para >= t):16.1%}{np.mean(near >= t):16.1%}"
              f"  {np.mean(raw_para >= t):16.1%}{np.mean(raw_near >= t):16.1%}{mark}")
    print(f"chosen threshold {chosen:.3f} (near-miss false hits <= {args.max_false:.0%}): "
          f"paraphrase hits {np.mean(para >= chosen):.1%}, false hits {np.mean(near >= chosen):.1%}"
          f"; the gateway's default is {default}")
    for n in (1_000, 10_000, 100_000):
        print(f"exact lookup over {n:>7,} entries ({embedder.dim}-d): "
              f"{lookup_ms(n, embedder.dim, args.lookups):.3f} ms median")


if __name__ == "__main__":
    main()
