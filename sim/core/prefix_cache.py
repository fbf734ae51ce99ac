"""A replica's prefix cache: the KV of recent prompt prefixes, least recently used evicted first.

Many prompts start alike: one system prompt for every user of an app, one document asked many
questions, the same few-shot examples. vLLM keeps the KV blocks of computed prompts after the
requests finish and, when a new prompt starts with the same tokens, reuses them: the prefill
computes only the rest. Those blocks live in the KV memory no running request holds, so a busy
replica evicts them (least recently used first) and a later request with an evicted prefix
computes it again.

Here a request names its prefix (an id and a length in tokens, from the workload or a replayed
trace). :meth:`PrefixCache.lookup` is called as a request reaches a replica, with the KV tokens
not reserved by running requests (nor by this one):

1. cached prefixes are evicted, least recently used first, until they fit in that budget;
2. a cached prefix is a **hit**: it becomes the most recently used, and its tokens are the
   request's ``cached_tokens`` (the engines then compute only ``prompt − cached`` tokens, at
   least one);
3. otherwise a **miss**: the request computes the whole prompt, and its prefix is kept (evicting
   older ones) if it fits in the budget at all.

Simplifications, stated: a hit's prefix is also counted in the request's own KV reservation (vLLM
shares those blocks); a prefix is cached from the moment its request reaches the replica (vLLM
from the end of the step that computed it), so two requests with a new prefix arriving together
both hit after the first; whole prefixes, not 16-token blocks, are cached and evicted.
"""

from __future__ import annotations

from collections import OrderedDict

#: a prefix's name: a workload's ``NAME:k``, a runtime trace's key, or any int
PrefixId = int | str


class PrefixCache:
    """LRU of ``prefix id → tokens`` within a KV budget given at each lookup."""

    __slots__ = ("entries", "evictions", "hit_tokens", "hits", "misses", "used_tokens")

    def __init__(self) -> None:
        self.entries: OrderedDict[PrefixId, int] = OrderedDict()  # oldest first
        self.used_tokens = 0
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        self.hit_tokens = 0

    def _evict_to(self, budget_tokens: int) -> None:
        while self.entries and self.used_tokens > budget_tokens:
            _, tokens = self.entries.popitem(last=False)
            self.used_tokens -= tokens
            self.evictions += 1

    def lookup(self, prefix_id: PrefixId, prefix_tokens: int, budget_tokens: int) -> int:
        """Tokens of ``prefix_id`` found cached (0 on a miss, which caches it if it fits)."""
        self._evict_to(budget_tokens)
        cached = self.entries.get(prefix_id)
        if cached is not None:
            self.entries.move_to_end(prefix_id)
            self.hits += 1
            self.hit_tokens += cached
            return cached
        self.misses += 1
        if 0 < prefix_tokens <= budget_tokens:
            self._evict_to(budget_tokens - prefix_tokens)
            self.entries[prefix_id] = prefix_tokens
            self.used_tokens += prefix_tokens
        return 0

    def __contains__(self, prefix_id: PrefixId) -> bool:
        return prefix_id in self.entries

    @property
    def hit_rate(self) -> float:
        n = self.hits + self.misses
        return self.hits / n if n else 0.0
