"""Semantic routing: kinds of request named by example utterances, matched by embedding.

A route ("simple question" → the small local model, "reasoning" → the large cloud model) is a set
of example utterances. At start-up each example is embedded once; a request's embedding — the one
the semantic cache computed, not a second — is compared with every example, a route's score is its
nearest example's cosine similarity, and the best route at or above ``threshold`` decides the
request's place and model. Below it, the placement policy decides. The order for one request is:
semantic cache → route → policy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgeserve.gateway.config import SMALL, Place, RouteConfig
from edgeserve.gateway.embedder import Embedder
from sim.core.policies import Decision, Placement


@dataclass(slots=True, frozen=True)
class RouteMatch:
    route: RouteConfig
    similarity: float

    @property
    def decision(self) -> Decision:
        placement = Placement.LOCAL if self.route.place is Place.LOCAL else Placement.CLOUD
        return Decision(placement, f"route {self.route.name} (similarity {self.similarity:.3f})",
                        model=SMALL if self.route.model == SMALL else None)


class Router:
    def __init__(self, routes: list[RouteConfig], embedder: Embedder, threshold: float) -> None:
        self.routes, self.threshold = routes, threshold
        vectors = [embedder.embed(f"user: {e}") for r in routes for e in r.examples]
        self.examples = np.stack(vectors) if vectors else np.zeros((0, embedder.dim), np.float32)
        self.route_of = np.array([i for i, r in enumerate(routes) for _ in r.examples], dtype=int)

    def match(self, vector: np.ndarray) -> RouteMatch | None:
        """The best route whose nearest example reaches the threshold, or None."""
        if not len(self.examples):
            return None
        sims = self.examples @ vector
        best = int(np.argmax(sims))
        if sims[best] < self.threshold:
            return None
        return RouteMatch(self.routes[int(self.route_of[best])], float(sims[best]))
