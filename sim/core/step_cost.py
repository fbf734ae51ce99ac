"""The time of one vLLM V1 engine step from what it holds: the step model's formula, in one place.

At clock scale 1 a step takes::

    step_s = base_s + per[prefill_tokens]·prefill_tokens + per[decode_tokens]·decode_tokens
           + per[context_tokens]·context_tokens + per[encoder_tokens]·encoder_tokens
           + per[encoder_tokens_sq]·encoder_tokens_sq
           + per[encoder_tokens_cross]·(encoder_tokens² − encoder_tokens_sq)
           + per[prefill_x_context]·prefill_tokens·max(0, context_tokens − prefill_tokens)
           + per[image_arrivals]·image_arrivals
           + [prefill_tokens > 0]·(per[prefill_step] + per[decode_beside_prefill]·decode_tokens)

(the features are explained in :mod:`sim.core.step_engine`). The step engine prices its steps
and its latency estimates with :meth:`StepCost.seconds`; the calibrator predicts recorded steps
with the same method, so a fitted model means in the simulator what it meant in the fit.
"""

from __future__ import annotations

from collections.abc import Mapping


class StepCost:
    """The coefficients of a step model (``base_s`` and ``per`` of a
    :class:`~sim.scenario.profiles.StepTimeModel` or a fit), a missing feature costing 0."""

    __slots__ = ("base_s", "context", "decode", "decode_beside_prefill", "encoder",
                 "encoder_cross", "encoder_sq", "image_arrival", "prefill", "prefill_step",
                 "prefill_x_context")

    def __init__(self, base_s: float, per: Mapping[str, float]) -> None:
        self.base_s: float = base_s
        self.prefill: float = per.get("prefill_tokens", 0.0)
        self.decode: float = per.get("decode_tokens", 0.0)
        self.context: float = per.get("context_tokens", 0.0)
        self.encoder: float = per.get("encoder_tokens", 0.0)
        self.encoder_sq: float = per.get("encoder_tokens_sq", 0.0)
        self.encoder_cross: float = per.get("encoder_tokens_cross", 0.0)
        self.prefill_x_context: float = per.get("prefill_x_context", 0.0)
        self.image_arrival: float = per.get("image_arrivals", 0.0)
        self.prefill_step: float = per.get("prefill_step", 0.0)
        self.decode_beside_prefill: float = per.get("decode_beside_prefill", 0.0)

    def prefill_extra(self, decode_tokens: float) -> float:
        """What computing prompt tokens adds to a step beside ``decode_tokens`` decoders, beyond
        the tokens' own cost (a GPU's piecewise CUDA graph instead of a whole one)."""
        return self.prefill_step + self.decode_beside_prefill * decode_tokens

    def seconds(self, prefill_tokens: float, decode_tokens: float, context_tokens: float,
                encoder_tokens: float = 0.0, encoder_tokens_sq: float = 0.0,
                image_arrivals: float = 0.0) -> float:
        """A step's time at clock scale 1 (no cold shapes, drift or noise); ``image_arrivals``:
        image requests handed to the engine while it runs (the step engine adds their time as
        they arrive, :meth:`StepEngine.submit`)."""
        others = context_tokens - prefill_tokens  # the context the step's other requests hold
        if others < 0.0:
            others = 0.0
        extra = 0.0  # prefill_extra, inlined: this is every simulated step's path
        if prefill_tokens > 0.0:
            extra = self.prefill_step + self.decode_beside_prefill * decode_tokens
        return (extra + self.base_s + self.prefill * prefill_tokens + self.decode * decode_tokens
                + self.context * context_tokens + self.encoder * encoder_tokens
                + self.encoder_sq * encoder_tokens_sq
                + self.encoder_cross * (encoder_tokens * encoder_tokens - encoder_tokens_sq)
                + self.prefill_x_context * prefill_tokens * others
                + self.image_arrival * image_arrivals)
