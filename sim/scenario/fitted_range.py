"""The sizes a calibrated profile was fitted on, and what lies outside them.

A fitted service model is a curve through the sizes the calibration trace held. Inside their
range it interpolates; outside it extrapolates, and there a wrong shape shows: a step model fitted
on large images can put a small image's steps short that the same model, fitted with small
images beside the large ones, gets right (docs/sim.md, "Calibration", has the measured case).
So ``edgeserve calibrate`` writes each size feature's range into the profile (``fitted_range:``)
and ``edgeserve calibrate validate`` says which held-out requests lie outside it — an error there
is partly the extrapolation's, and the cure is a calibration run that spans the sizes served.
``edgeserve sim run`` says the same of a scenario whose image sizes a device's calibrated profile
was not fitted on (:func:`sim.fit.scenario_notes.scenario_notes`).

Features are per request, as the runtime's trace records them: image tokens, source, decoded
and target pixels (image features over requests with an image; a recorded 0 means unknown and
is left out), and prompt tokens. Output lengths are not among them: the step model's decode
terms are per step and per token, so a longer answer extrapolates nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields

from edgeserve.records import Outcome, RequestRecord
from sim.scenario.schema import require

# the features, in report order: image features (known for requests with an image), then text;
# an output length is not one — it extrapolates nothing, decode is per step
IMAGE_FEATURES = ("image_tokens", "source_pixels", "decoded_pixels", "target_pixels")
FEATURES = (*IMAGE_FEATURES, "prompt_tokens")


def feature_value(r: RequestRecord, feature: str) -> float | None:
    """The request's ``feature``, or None where the trace does not tell it (text-only request
    for an image feature, an unrecorded decoded size)."""
    if feature in IMAGE_FEATURES and r.image_tokens <= 0 and r.num_images <= 0:
        return None
    if feature == "source_pixels":
        v = r.source_width * r.source_height
    elif feature == "target_pixels":
        v = r.target_width * r.target_height
    else:  # image_tokens, decoded_pixels, prompt_tokens: fields of the record
        v = getattr(r, feature)
    return float(v) if v > 0 else None


@dataclass(slots=True, frozen=True)
class FittedRange:
    """``[lo, hi]`` of each size feature over the requests a profile was fitted on (``None``:
    the calibration traces did not tell it)."""

    image_tokens: tuple[float, float] | None = None
    source_pixels: tuple[float, float] | None = None
    decoded_pixels: tuple[float, float] | None = None
    target_pixels: tuple[float, float] | None = None
    prompt_tokens: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        for f in fields(self):
            bounds = getattr(self, f.name)
            if bounds is not None:
                require(len(bounds) == 2 and 0 <= bounds[0] <= bounds[1], f.name,
                        f"needs [lo, hi] with 0 <= lo <= hi, got {list(bounds)}")

    @classmethod
    def of(cls, records: Iterable[RequestRecord]) -> FittedRange:
        """The range over the completed requests in ``records``."""
        lo: dict[str, float] = {}
        hi: dict[str, float] = {}
        for r in records:
            if r.outcome is not Outcome.OK:
                continue
            for name in FEATURES:
                v = feature_value(r, name)
                if v is not None:
                    lo[name] = min(lo.get(name, v), v)
                    hi[name] = max(hi.get(name, v), v)
        return cls(**{k: (lo[k], hi[k]) for k in lo})

    def as_dict(self) -> dict[str, list[float]]:
        return {f.name: [_number(b) for b in getattr(self, f.name)] for f in fields(self)
                if getattr(self, f.name) is not None}

    def outside(self, records: Iterable[RequestRecord]) -> list[Extrapolation]:
        """Features for which some completed request of ``records`` lies outside the range, in
        feature order."""
        seen: dict[str, list[float]] = {}
        counted: dict[str, int] = {}
        for r in records:
            if r.outcome is not Outcome.OK:
                continue
            for name in FEATURES:
                bounds = getattr(self, name)
                v = feature_value(r, name)
                if bounds is None or v is None:
                    continue
                counted[name] = counted.get(name, 0) + 1
                if not bounds[0] <= v <= bounds[1]:
                    seen.setdefault(name, []).append(v)
        return [Extrapolation(name, getattr(self, name), (min(seen[name]), max(seen[name])),
                              len(seen[name]), counted[name])
                for name in FEATURES if name in seen]


@dataclass(slots=True, frozen=True)
class Extrapolation:
    """Held-out requests whose ``feature`` lies outside the fitted ``[lo, hi]``."""

    feature: str
    fitted: tuple[float, float]
    values: tuple[float, float]  # smallest and largest of the requests outside
    requests: int  # requests outside
    of_requests: int  # requests that have the feature

    @property
    def fraction(self) -> float:
        return self.requests / self.of_requests if self.of_requests else 0.0

    def text(self) -> str:
        return (f"{self.feature} {span(*self.values)} outside the fitted {span(*self.fitted)} "
                f"in {self.requests} of {self.of_requests} requests ({self.fraction * 100:.0f} %): "
                "the profile extrapolates there")

    def as_dict(self) -> dict[str, object]:
        return {"feature": self.feature, "fitted": list(self.fitted), "values": list(self.values),
                "requests": self.requests, "of_requests": self.of_requests}


def _number(x: float) -> float:
    return int(x) if float(x).is_integer() else float(x)


def span(lo: float, hi: float) -> str:
    return f"{lo:.4g}" if lo == hi else f"{lo:.4g}–{hi:.4g}"
