"""A request in flight: its record (the shared trace schema) plus the features models need."""

from __future__ import annotations

from typing import Any

import msgspec

from edgeserve.records import RequestRecord


class Job(msgspec.Struct):
    """One simulated request. ``rec`` is what gets written; the other fields drive the models.

    A msgspec struct rather than a plain class: it is built once per request, and a struct is
    built in C (a third of the cost of a Python ``__init__``); its fields read like slots.
    Positional arguments follow the field order below.
    """

    rec: RequestRecord
    device: Any
    source_pixels: int
    target_pixels: int
    image_tokens: int
    prompt_tokens: int
    output_tokens: int
    tag: Any = None  # engine-private bookkeeping
    engine: Any = None  # a device's alternative engine (model downgrade); None: the main one
