"""A request in flight: its record (the shared trace schema) plus the features models need."""

from __future__ import annotations

from typing import Any

from edgeserve.records import RequestRecord


class Job:
    """One simulated request. ``rec`` is what gets written; the other fields drive the models.

    A plain class with slots: compiled (``make sim-native``) it becomes a native class whose
    fields are read straight from the object, which the event path does dozens of times per
    request. Positional arguments follow the field order below.
    """

    __slots__ = (
        "cached_tokens",
        "decoded_pixels",
        "device",
        "engine",
        "image_tokens",
        "output_tokens",
        "prefix_id",
        "prefix_tokens",
        "prompt_tokens",
        "rec",
        "source_pixels",
        "tag",
        "target_pixels",
    )

    def __init__(
        self,
        rec: RequestRecord,
        device: Any,
        source_pixels: int,
        target_pixels: int,
        image_tokens: int,
        prompt_tokens: int,
        output_tokens: int,
        cached_tokens: int = 0,
        decoded_pixels: int = -1,
        prefix_id: str | None = None,
        prefix_tokens: int = 0,
    ) -> None:
        self.rec = rec
        self.device = device
        self.source_pixels = source_pixels
        self.target_pixels = target_pixels
        self.image_tokens = image_tokens
        self.prompt_tokens = prompt_tokens
        self.output_tokens = output_tokens
        self.cached_tokens = cached_tokens  # prompt tokens found in the engine's prefix cache
        # pixels the decoder produces (fewer than source_pixels for a JPEG decoded at reduced
        # scale in the DCT domain); -1: the same as source_pixels
        self.decoded_pixels = source_pixels if decoded_pixels < 0 else decoded_pixels
        # the prompt's shared prefix (its id and tokens), looked up in a cloud prefix cache
        self.prefix_id = prefix_id
        self.prefix_tokens = prefix_tokens
        self.tag = 0.0  # engine-private bookkeeping (the nominal prefill seconds)
        self.engine: Any = (
            None  # a device's alternative engine (model downgrade); None: the main one
        )
