"""Answers kept for questions asked again in other words.

An entry is an answer (the upstream's JSON body) under two keys: the *context* — a hash of what
must match exactly (the images, the model asked for, the output limit) — and the unit-length
embedding of the request's text. A lookup takes the entries of the same context and computes the
cosine similarity to every one of them at once (an exact index: one matrix-vector product over a
preallocated ``capacity × dim`` array, no approximation); the best at or above ``threshold``
answers. Entries expire ``ttl_s`` after they were stored; when the cache is full the least
recently used entry (looked up or stored) gives its row to the new one.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(slots=True)
class Entry:
    context: str
    body: bytes
    stored_s: float


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


class SemanticCache:
    def __init__(self, capacity: int, dim: int, ttl_s: float, threshold: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.capacity, self.ttl_s, self.threshold = capacity, ttl_s, threshold
        self.clock = clock
        self.vectors = np.zeros((capacity, dim), dtype=np.float32)
        self.entries: dict[int, Entry] = {}
        self.lru: OrderedDict[int, None] = OrderedDict()  # row → None, oldest use first
        self.free = list(range(capacity - 1, -1, -1))
        self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self.entries)

    def _drop(self, row: int) -> None:
        del self.entries[row]
        del self.lru[row]
        self.free.append(row)

    def lookup(self, context: str, vector: np.ndarray) -> Hit | None:
        now = self.clock()
        for row in [r for r, e in self.entries.items() if now - e.stored_s > self.ttl_s]:
            self._drop(row)
        rows = [r for r, e in self.entries.items() if e.context == context]
        if rows:
            sims = self.vectors[rows] @ vector
            best = int(np.argmax(sims))
            if sims[best] >= self.threshold:
                row = rows[best]
                self.lru.move_to_end(row)
                self.hits += 1
                return Hit(self.entries[row].body, float(sims[best]))
        self.misses += 1
        return None

    def store(self, context: str, vector: np.ndarray, body: bytes) -> None:
        if not self.free:
            self._drop(next(iter(self.lru)))  # the least recently used
        row = self.free.pop()
        self.vectors[row] = vector
        self.entries[row] = Entry(context, body, self.clock())
        self.lru[row] = None
