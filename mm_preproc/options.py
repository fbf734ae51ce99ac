"""The settings of one ``preprocess`` call, as one validated, frozen dataclass."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TypeVar

from mm_preproc.constants import DEFAULT_MAX_SOURCE_PIXELS
from mm_preproc.errors import InvalidArgumentError
from mm_preproc.layout import OutputFormat
from mm_preproc.spec import QWEN2_VL, PreprocSpec

_E = TypeVar("_E", bound=Enum)


class Backend(Enum):
    """Which library decodes and resizes (details: :mod:`mm_preproc.pipeline`)."""

    AUTO = "auto"
    PILLOW = "pillow"
    OPENCV = "opencv"


@dataclass(slots=True, frozen=True)
class PreprocOptions:
    """Everything that decides the output for one image; validated on construction.

    ``spec`` is the model family's image input (:mod:`mm_preproc.spec`; Qwen2-VL's by default);
    ``min_pixels``/``max_pixels`` left ``None`` become the spec's bounds.
    """

    min_pixels: int | None = None
    max_pixels: int | None = None
    resized_height: int | None = None
    resized_width: int | None = None
    backend: Backend = Backend.AUTO
    fast_decode: bool = True
    output: OutputFormat = OutputFormat.FLOAT32
    max_source_pixels: int = DEFAULT_MAX_SOURCE_PIXELS
    spec: PreprocSpec = QWEN2_VL

    def __post_init__(self) -> None:
        object.__setattr__(self, "backend", _coerce(Backend, self.backend, "backend"))
        object.__setattr__(self, "output", _coerce(OutputFormat, self.output, "output format"))
        if not isinstance(self.spec, PreprocSpec):
            raise InvalidArgumentError(f"spec must be a PreprocSpec, got {type(self.spec).__name__}")
        if self.min_pixels is None:
            object.__setattr__(self, "min_pixels", self.spec.min_pixels)
        if self.max_pixels is None:
            object.__setattr__(self, "max_pixels", self.spec.max_pixels)
        lo, hi = self.pixel_bounds
        if lo <= 0 or hi <= 0:
            raise InvalidArgumentError("min_pixels and max_pixels must be positive")
        if lo > hi:
            raise InvalidArgumentError(f"min_pixels ({lo}) must not exceed max_pixels ({hi})")
        if (self.resized_height is None) != (self.resized_width is None):
            raise InvalidArgumentError("give both resized_height and resized_width, or neither")
        for name in ("resized_height", "resized_width"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise InvalidArgumentError(f"{name} must be positive, got {value}")
        if self.max_source_pixels <= 0:
            raise InvalidArgumentError("max_source_pixels must be positive")

    @property
    def pixel_bounds(self) -> tuple[int, int]:
        """``(min_pixels, max_pixels)`` as resolved (the spec's where none were given)."""
        assert self.min_pixels is not None and self.max_pixels is not None  # set in __post_init__
        return self.min_pixels, self.max_pixels


def _coerce(kind: type[_E], value: object, what: str) -> _E:
    if isinstance(value, kind):
        return value
    try:
        return kind(value)
    except ValueError:
        names = ", ".join(str(m.value) for m in kind)
        raise InvalidArgumentError(f"unknown {what} {value!r}; choose one of {names}") from None
