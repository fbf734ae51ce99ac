"""A calibration run designed to identify every term of the simulator's models.

A trace of whatever load a user happened to run identifies only the terms that load exercised:
one image size cannot tell a per-pixel cost from a fixed one, a light load never fills a batch
(no decode or context slope), a server always busy with images has no quiet steps to hold the
contention against. ``edgeserve calibrate record`` drives the server through these phases, in
this order, within a time budget (``budget_s``, shared out in fixed proportions):

===============  ============================================================================
phase            what it identifies
===============  ============================================================================
fresh shapes     each image size of the ladder and a text prompt once, alone, after an idle
                 gap: cold steps (a shape's first run), the engine-idle prefill and vLLM's
                 input processing
warm shapes      the same again, each shape warm: vLLM's input processing with the engine and
                 the frontend idle (in the image mix the frontend takes in images while the
                 engine waits, and an idle engine is not an idle frontend)
text prompts     text-only requests one at a time, prompts from a few to hundreds of words:
                 the prefill term without images
batch ladder     text requests with long outputs, closed loop at 1, 2, 4 … max_num_seqs in
                 flight, each depth held: the decode and context terms
long prompts     the same at a quarter of max_num_seqs and at max_num_seqs with 400-word
                 prompts: context per sequence apart from the depth (with one prompt length
                 the context grows in step with the batch, and the fit cannot tell the
                 per-sequence cost from the per-context-token one)
decode waves     a quarter of max_num_seqs and max_num_seqs requests sent together, all with
                 one output length, the next wave after the last answer: long runs of
                 decode-only steps at depth. In the batch ladder a finished request's
                 successor joins at once, so at depth nearly every step also holds a
                 prefill, and the decode slope cannot be told from what a prefill adds to
                 a step (on a GPU, vLLM runs a decode-only batch as one CUDA graph and a
                 mixed one piecewise)
contention       a batch of decoders beside a stream of large images (workers busy during
                 steps), then the same batch alone (quiet steps): the contention coefficient
image mix        Poisson arrivals of every ladder size: the image stages per pixel, the encoder
                 terms, the gap before an image step
===============  ============================================================================

The image ladder spans the model's pixel budget (``max_pixels``): a 16th of it, a quarter, just
under it, and sources above it on both sides of the JPEG DCT-domain downscale threshold
(:func:`mm_preproc.decode.draft_scale`: a source decoded at ½ scale costs a quarter of its
pixels to decode), up to 12 MP. The schedule goes into the trace header
(``meta.calibration_schedule``), so the trace says how it was made.
"""

from __future__ import annotations

import enum
import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from mm_preproc.constants import DRAFT_MIN_RATIO
from mm_preproc.smart_resize import smart_resize

LONG_PROMPT_WORDS = 400  # the text prompts phase's longest prompt: within every model's length

SHARES = {  # of the budget, by phase kind (fresh shapes take what their idle gaps need)
    "text": 0.10, "batch": 0.28, "waves": 0.07, "contention": 0.30, "image_mix": 0.25}
WAVE_OUTPUT_TOKENS = 96  # every request of a decode wave: one length, so the wave ends together


class PhaseKind(enum.StrEnum):
    FRESH_SHAPES = "fresh_shapes"
    TEXT = "text"
    BATCH = "batch"
    WAVES = "waves"
    CONTENTION = "contention"
    QUIET = "quiet"
    IMAGE_MIX = "image_mix"


@dataclass(slots=True, frozen=True)
class Phase:
    """One phase: ``concurrency`` text requests kept in flight (closed loop; for decode waves,
    sent together and again after the last answer) and/or open-loop image requests at
    ``image_rate_rps`` of ``sizes`` (or one of each, alone, for fresh shapes), for
    ``duration_s``."""

    name: str
    kind: PhaseKind
    purpose: str
    duration_s: float
    concurrency: int = 0
    output_len: str = "16"
    prompt_words: tuple[int, ...] = (8,)  # text prompts cycle through these lengths
    sizes: tuple[str, ...] = ()  # "WxH" of the images sent
    image_rate_rps: float = 0.0
    idle_before_s: float = 0.0


@dataclass(slots=True, frozen=True)
class ScheduleConfig:
    """What the schedule is designed for: the server's limits and the time it may take."""

    budget_s: float = 180.0
    max_num_seqs: int = 16
    max_pixels: int = 1003520  # the default model's (tiny-qwen2-vl) budget
    min_pixels: int = 3136
    factor: int = 28
    image_rate_rps: float = 1.0  # open-loop image arrivals in the image phases
    idle_gap_s: float = 1.5  # before each fresh shape
    seed: int = 0

    def __post_init__(self) -> None:
        if self.budget_s <= 0:
            raise ValueError(f"the budget must be positive, got {self.budget_s}")
        if self.max_num_seqs < 1 or self.max_pixels < self.min_pixels or self.image_rate_rps <= 0:
            raise ValueError("max_num_seqs, max_pixels and the image rate must be positive")


def draft_threshold_width(cfg: ScheduleConfig, aspect: float = 4 / 3) -> int:
    """The narrowest source width (of ``aspect``) that the runtime decodes at ½ scale."""
    w = int(math.sqrt(cfg.max_pixels * aspect))
    while w < 20000:
        h = round(w / aspect)
        th, tw = smart_resize(h, w, cfg.factor, cfg.min_pixels, cfg.max_pixels)
        if min(w / 2 / tw, h / 2 / th) >= DRAFT_MIN_RATIO[2]:
            return w
        w += 8
    return w


def image_ladder(cfg: ScheduleConfig) -> tuple[str, ...]:
    """Source sizes (4:3, "WxH") spanning the pixel budget and the ½-scale decode threshold."""
    def size(pixels: float) -> str:
        w = max(cfg.factor, int(math.sqrt(pixels * 4 / 3)) // 8 * 8)
        return f"{w}x{round(w * 3 / 4)}"

    t = draft_threshold_width(cfg)
    above = [f"{round(t * 0.85) // 8 * 8}x{round(t * 0.85 * 0.75)}",  # over the budget, full decode
             f"{round(t * 1.1) // 8 * 8}x{round(t * 1.1 * 0.75)}"]  # just past the threshold
    big = "4000x3000" if t * 1.1 < 4000 else f"{round(t * 1.4) // 8 * 8}x{round(t * 1.4 * 0.75)}"
    sizes = [size(cfg.max_pixels / 16), size(cfg.max_pixels / 4), size(cfg.max_pixels * 0.9),
             *above, big]
    return tuple(dict.fromkeys(sizes))


def batch_depths(max_num_seqs: int) -> tuple[int, ...]:
    """1, 2, 4, … up to and including ``max_num_seqs``."""
    out = [1]
    while out[-1] * 2 < max_num_seqs:
        out.append(out[-1] * 2)
    if out[-1] != max_num_seqs:
        out.append(max_num_seqs)
    return tuple(out)


@dataclass(slots=True, frozen=True)
class Schedule:
    config: ScheduleConfig
    phases: tuple[Phase, ...] = field(default_factory=tuple)

    @property
    def planned_s(self) -> float:
        return sum(p.duration_s + p.idle_before_s for p in self.phases)

    def header(self) -> dict[str, Any]:
        """What goes into the trace header's ``meta.calibration_schedule``."""
        return {"config": asdict(self.config), "planned_s": round(self.planned_s, 1),
                "phases": [{k: (list(v) if isinstance(v, tuple) else v)
                            for k, v in asdict(p).items()} for p in self.phases]}


def design(cfg: ScheduleConfig) -> Schedule:
    """The phases for ``cfg`` (see the module docstring), within ``cfg.budget_s``."""
    ladder = image_ladder(cfg)
    b = cfg.budget_s
    gap = min(cfg.idle_gap_s, b / 60)  # a short run keeps its idle gaps short too
    cfg = replace(cfg, idle_gap_s=gap)
    fresh_s = (len(ladder) + 1) * (gap + 1.0)
    rest = b - 2 * fresh_s - 3 * gap  # three phases start after an idle gap
    if rest < 10:
        raise ValueError(f"a budget of {b:g} s leaves {rest:.0f} s after the fresh and warm "
                         f"shapes ({2 * fresh_s:.0f} s): give at least "
                         f"{2 * fresh_s + 3 * gap + 10:.0f} s")
    depths = batch_depths(cfg.max_num_seqs)
    long_out = "48-96"
    phases = [Phase("fresh shapes", PhaseKind.FRESH_SHAPES,
                    "cold steps, engine-idle prefill and input processing: each shape once, alone",
                    fresh_s, sizes=ladder, output_len="8", idle_before_s=0.0),
              Phase("warm shapes", PhaseKind.FRESH_SHAPES,
                    "input processing with the engine and the frontend idle: each shape again",
                    fresh_s, sizes=ladder, output_len="8", idle_before_s=0.0),
              Phase("text prompts", PhaseKind.TEXT, "prefill per prompt token, one at a time",
                    rest * SHARES["text"], concurrency=1, output_len="4-8",
                    prompt_words=(4, 32, 96, 200, 400), idle_before_s=gap)]
    long_depths = tuple(dict.fromkeys((max(1, cfg.max_num_seqs // 4), cfg.max_num_seqs)))
    per_depth = rest * SHARES["batch"] / (len(depths) + len(long_depths))
    phases += [Phase(f"batch of {c}", PhaseKind.BATCH,
                     f"decode and context terms at {c} sequence(s) decoding", per_depth,
                     concurrency=c, output_len=long_out, prompt_words=(16, 120))
               for c in depths]
    phases += [Phase(f"batch of {c}, long prompts", PhaseKind.BATCH,
                     "the context term apart from the decode term", per_depth, concurrency=c,
                     output_len=long_out, prompt_words=(LONG_PROMPT_WORDS,))
               for c in long_depths]
    per_wave = rest * SHARES["waves"] / len(long_depths)
    phases += [Phase(f"decode waves of {c}", PhaseKind.WAVES,
                     "decode-only steps at depth: the decode slope apart from a prefill's cost",
                     per_wave, concurrency=c, output_len=str(WAVE_OUTPUT_TOKENS),
                     prompt_words=(16,))
               for c in long_depths]
    half = max(1, cfg.max_num_seqs // 2)
    phases += [Phase("contention", PhaseKind.CONTENTION,
                     "steps beside busy preprocessing workers", rest * SHARES["contention"] / 2,
                     concurrency=half, output_len=long_out, prompt_words=(16, 120),
                     sizes=ladder[-3:], image_rate_rps=cfg.image_rate_rps,
                     idle_before_s=cfg.idle_gap_s),
               Phase("quiet", PhaseKind.QUIET, "the same batch with no worker busy",
                     rest * SHARES["contention"] / 2, concurrency=half, output_len=long_out,
                     prompt_words=(16, 120)),
               Phase("image mix", PhaseKind.IMAGE_MIX,
                     "image stages per pixel, encoder terms, the gap before an image step",
                     rest * SHARES["image_mix"], sizes=ladder, image_rate_rps=cfg.image_rate_rps,
                     output_len="8-32", idle_before_s=cfg.idle_gap_s)]
    return Schedule(cfg, tuple(phases))


def format_schedule(s: Schedule) -> str:
    lines = [f"calibration run: {len(s.phases)} phases, about {s.planned_s:.0f} s"]
    width = max(len(p.name) for p in s.phases)
    for p in s.phases:
        what = []
        if p.concurrency:
            what.append(f"{p.concurrency} text request(s) "
                        + ("sent together, wave after wave" if p.kind is PhaseKind.WAVES
                           else "in flight") + f", {p.output_len} tokens"
                        + (f", {p.prompt_words[0]}-word prompts" if len(p.prompt_words) == 1
                           and p.prompt_words[0] >= LONG_PROMPT_WORDS else ""))
        if p.kind is PhaseKind.FRESH_SHAPES:
            what.append(f"one request per shape: {', '.join(p.sizes)} and text")
        elif p.image_rate_rps:
            what.append(f"images {', '.join(p.sizes)} at {p.image_rate_rps:g}/s")
        lines.append(f"  {p.name:{width}s} {p.duration_s:5.0f} s  {'; '.join(what)}  ({p.purpose})")
    return "\n".join(lines)
