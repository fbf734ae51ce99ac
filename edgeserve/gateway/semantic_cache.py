"""Answers kept for questions asked again in other words.

An entry is an answer (the upstream's JSON body) under two keys: the *context* — a hash of what
must match exactly (the images, the model asked for, the output limit) — and the unit-length
embedding of the request's text. A lookup computes the cosine similarity to every row at once (an
exact index: one matrix-vector product over a preallocated ``capacity × dim`` array, rows of other
contexts and free rows masked out); the best row at or above ``threshold`` whose question passes
the exact check of :mod:`.question_guard` (same numbers, negations and word order) answers.
Entries expire ``ttl_s`` after they were stored; when the cache is full the least recently used
entry (looked up or stored) gives its row to the new one.

No per-entry Python work happens on a lookup: expired entries leave from the front of a
store-ordered dict (one TTL for all, so store order is expiry order) and the context test is a
comparison of an integer column. A freed row is handed out again before a never used one, so the rows in use stay
a prefix of the array and a lookup scores only that prefix: its cost follows the entries held, not
the capacity. ``benchmarks/gateway_cache_threshold.py`` times it.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from edgeserve.gateway.question_guard import Question, same_question

_FREE = -1


@dataclass(slots=True)
class Entry:
    context: str
    body: bytes
    stored_s: float
    question: Question | None


@dataclass(slots=True, frozen=True)
class Hit:
    body: bytes
    similarity: float


def context_key(*parts: str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode())
        h.update(b"\0")
    return h.hexdigest()


def _context_id(context: str) -> int:
    """63 bits of the context's hash (a collision is caught by comparing the full string)."""
    return int(hashlib.blake2b(context.encode(), digest_size=8).hexdigest(), 16) >> 1


class SemanticCache:
    def __init__(self, capacity: int, dim: int, ttl_s: float, threshold: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.capacity, self.ttl_s, self.threshold = capacity, ttl_s, threshold
        self.clock = clock
        self.vectors = np.zeros((capacity, dim), dtype=np.float32)
        self.context_ids = np.full(capacity, _FREE, dtype=np.int64)
        self.entries: dict[int, Entry] = {}
        self.lru: OrderedDict[int, None] = OrderedDict()  # row → None, oldest use first
        self.by_age: OrderedDict[int, None] = OrderedDict()  # row → None, oldest store first
        self.free = list(range(capacity - 1, -1, -1))  # popped from the end: row 0 first
        self.rows = 0  # rows below this one have been used; none above
        self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self.entries)

    def _drop(self, row: int) -> None:
        del self.entries[row]
        del self.lru[row]
        del self.by_age[row]
        self.context_ids[row] = _FREE
        self.free.append(row)

    def _expire(self, now: float) -> None:
        while self.by_age:
            row = next(iter(self.by_age))
            if now - self.entries[row].stored_s <= self.ttl_s:
                return
            self._drop(row)

    def lookup(self, context: str, vector: np.ndarray,
               question: Question | None = None) -> Hit | None:
        """The best stored answer for this context at or above the threshold whose question is
        the same by :func:`~.question_guard.same_question` (no check without ``question``)."""
        self._expire(self.clock())
        if self.entries:
            n = self.rows
            sims = self.vectors[:n] @ vector
            good = np.flatnonzero((sims >= self.threshold)
                                  & (self.context_ids[:n] == _context_id(context)))
            for row in good[np.argsort(-sims[good], kind="stable")]:
                entry = self.entries[int(row)]
                if entry.context != context:
                    continue
                if question is not None and entry.question is not None \
                        and not same_question(question, entry.question):
                    continue
                self.lru.move_to_end(int(row))
                self.hits += 1
                return Hit(entry.body, float(sims[row]))
        self.misses += 1
        return None

    def store(self, context: str, vector: np.ndarray, body: bytes,
              question: Question | None = None) -> None:
        if not self.free:
            self._drop(next(iter(self.lru)))  # the least recently used
        row = self.free.pop()  # a freed row if there is one (they go after the unused ones)
        self.rows = max(self.rows, row + 1)
        self.vectors[row] = vector
        self.context_ids[row] = _context_id(context)
        self.entries[row] = Entry(context, body, self.clock(), question)
        self.lru[row] = None
        self.by_age[row] = None
