"""Text and prefix-sharing datasets for ``edgeserve bench``: ShareGPT, chat-like, prefix repetition.

The image workload of :mod:`edgeserve.bench.workload` measures preprocessing. These datasets
measure the *engine's* side of serving, where two lessons of LLM serving live:

* **Chat traffic** (``sharegpt``, ``chat``): prompts and answers of many lengths, each prompt
  new. Prefill and decode both matter; nothing is reused.
* **Prefix repetition** (``prefix-repetition``): every prompt starts with one of a few long shared
  prefixes (a system prompt, a document, few-shot examples) and ends with a short unique suffix.
  With prefix caching the engine computes each prefix once and then only the suffixes: *total*
  token throughput (prompt + output tokens per second) rises, *output* token throughput does not —
  reuse, not faster compute. Reading total tok/s alone would call that a faster server.
* **Multimodal prefix repetition** (``mm-prefix-repetition``): a shared system prompt and one
  image from a small pool, each image sent with a stable ``uuid`` (vLLM's
  ``multi_modal_uuids``), so both the prefix cache and the multimodal cache are exercised.

Lengths are in the model's tokens (:mod:`edgeserve.bench.tokentext`); each dataset prints its
length statistics before a run (:func:`format_dataset_stats`).

**ShareGPT format** (the public ``ShareGPT_V3_unfiltered_cleaned_split.json``; LLaVA-style files
add an image): a JSON list of ``{"id": …, "conversations": [{"from": "human", "value": …},
{"from": "gpt", "value": …}, …], "image": "file.jpg"}``. ``role``/``content`` are accepted for
``from``/``value``, ``user``/``assistant`` for ``human``/``gpt``; ``image`` (a string or a list)
is a path relative to the JSON file, an ``http(s)://`` URL or a ``data:`` URL. As in
``vllm bench serve``: the first human turn is the prompt and the answer after it gives the output
length (unless ``sharegpt_output_len`` fixes it); conversations with fewer than 2 turns, prompts
or answers under 4 tokens, prompts over 1024 tokens or prompt + answer over 2048 are skipped;
entries are shuffled with the seed and cycled when more requests than entries are asked for.
"""

from __future__ import annotations

import enum
import json
import mimetypes
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edgeserve.bench.lengths import LengthDist, format_length_stats, length_stats
from edgeserve.bench.tokentext import TokenText
from edgeserve.bench.workload import (
    ImageFactory,
    PreparedRequest,
    WorkloadConfig,
    data_url,
    messages_body,
)

SHAREGPT_MIN_LEN = 4
SHAREGPT_MAX_PROMPT = 1024
SHAREGPT_MAX_TOTAL = 2048
_HUMAN = frozenset({"human", "user"})
_GPT = frozenset({"gpt", "assistant", "chatgpt", "bard", "model"})


class DatasetKind(enum.StrEnum):
    """What the requests of a run carry."""

    IMAGES = "images"  # synthetic image requests (edgeserve.bench.workload), the default
    SHAREGPT = "sharegpt"  # conversations from a ShareGPT-format JSON file
    CHAT = "chat"  # offline ShareGPT-like generator with stated length distributions
    PREFIX_REPETITION = "prefix-repetition"  # few shared prefixes + unique suffixes
    MM_PREFIX_REPETITION = "mm-prefix-repetition"  # shared system prompt + pooled images


@dataclass(slots=True, frozen=True)
class DatasetConfig:
    """A dataset and its parameters (only those of ``kind`` are used)."""

    kind: DatasetKind = DatasetKind.IMAGES
    path: Path | None = None  # sharegpt: the JSON file
    tokenizer: Path | None = None  # tokenizer.json or its folder (None: the model id's folder)
    sharegpt_output_len: int | None = None  # fixed output tokens instead of the answers' lengths
    # chat: ShareGPT-like (right-skewed) prompt and answer lengths
    chat_prompt_len: LengthDist = field(default_factory=lambda: LengthDist(256, 256, 4, 2048))
    chat_output_len: LengthDist = field(default_factory=lambda: LengthDist(128, 128, 4, 1024))
    # prefix-repetition (the defaults of vllm bench serve --dataset-name prefix_repetition)
    prefix_len: int = 256  # tokens of each shared prefix (mm: of the shared system prompt)
    suffix_len: int = 256  # unique tokens after it
    num_prefixes: int = 10  # distinct prefixes (mm: always 1 system prompt)
    output_len: int = 128
    image_pool: int = 4  # mm-prefix-repetition: distinct images, each repeated

    def __post_init__(self) -> None:
        if self.kind is DatasetKind.SHAREGPT:
            if self.path is None:
                raise ValueError("--dataset sharegpt needs --dataset-path FILE (a ShareGPT JSON)")
            if not Path(self.path).is_file():
                raise ValueError(f"ShareGPT file {self.path} does not exist")
        if self.sharegpt_output_len is not None and self.sharegpt_output_len < 1:
            raise ValueError("the ShareGPT output length must be >= 1 token")
        if self.prefix_len < 0 or self.suffix_len < 0:
            raise ValueError("prefix and suffix lengths must be >= 0 tokens")
        if self.prefix_len + self.suffix_len < 1:
            raise ValueError("prefix + suffix must be at least 1 token")
        if self.num_prefixes < 1:
            raise ValueError("need at least 1 distinct prefix")
        if self.output_len < 1:
            raise ValueError("the output length must be >= 1 token")
        if self.image_pool < 1:
            raise ValueError("the image pool needs at least 1 image")

    @property
    def label(self) -> str:
        k = self.kind
        if k is DatasetKind.SHAREGPT:
            return f"sharegpt {self.path}"
        if k is DatasetKind.CHAT:
            return (f"chat: prompt {self.chat_prompt_len.label}, "
                    f"output {self.chat_output_len.label} tokens")
        if k is DatasetKind.PREFIX_REPETITION:
            return (f"prefix-repetition: {self.num_prefixes} prefixes × {self.prefix_len} + "
                    f"{self.suffix_len} unique tokens, {self.output_len} output tokens")
        if k is DatasetKind.MM_PREFIX_REPETITION:
            return (f"mm-prefix-repetition: system prompt {self.prefix_len} tokens, 1 of "
                    f"{self.image_pool} images, {self.suffix_len} unique tokens, "
                    f"{self.output_len} output tokens")
        return "images"


@dataclass(slots=True)
class Dataset:
    """Prepared requests and the lengths they were built from (for the printed statistics)."""

    requests: list[PreparedRequest]
    stats: dict[str, Any]


# ---- ShareGPT ------------------------------------------------------------------------------


@dataclass(slots=True, frozen=True)
class Conversation:
    prompt: str
    completion: str
    images: tuple[str, ...] = ()  # as written in the file


def _turn(t: Any) -> tuple[str, str]:
    if not isinstance(t, dict):
        raise ValueError("a conversation turn must be an object")
    who = str(t.get("from", t.get("role", ""))).lower()
    text = t.get("value", t.get("content", ""))
    return who, text if isinstance(text, str) else ""


def read_sharegpt(path: Path) -> list[Conversation]:
    """The (prompt, answer, images) pairs of a ShareGPT-format file, in file order."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"cannot read ShareGPT file {path}: {e}") from None
    if not isinstance(data, list):
        raise ValueError(f"{path}: a ShareGPT file is a JSON list of conversations")
    out = []
    for i, entry in enumerate(data):
        conv = entry.get("conversations") if isinstance(entry, dict) else None
        if not isinstance(conv, list) or len(conv) < 2:
            continue
        try:
            turns = [_turn(t) for t in conv]
        except ValueError as e:
            raise ValueError(f"{path}: entry {i}: {e}") from None
        for j in range(len(turns) - 1):
            if turns[j][0] in _HUMAN and turns[j + 1][0] in _GPT:
                image = entry.get("image")
                images = (image,) if isinstance(image, str) else tuple(
                    x for x in image if isinstance(x, str)) if isinstance(image, list) else ()
                out.append(Conversation(turns[j][1], turns[j + 1][1], images))
                break
    return out


def _image_part(ref: str, base: Path) -> tuple[dict[str, Any], int]:
    """A content part for an image reference of a ShareGPT entry, and its encoded bytes."""
    if ref.startswith(("http://", "https://", "data:")):
        return {"type": "image_url", "image_url": {"url": ref}}, 0
    p = Path(ref) if Path(ref).is_absolute() else base / ref
    try:
        data = p.read_bytes()
    except OSError as e:
        raise ValueError(f"ShareGPT image {ref}: {e}") from None
    mime = mimetypes.guess_type(p.name)[0] or "image/jpeg"
    return {"type": "image_url", "image_url": {"url": data_url(data, mime)}}, len(data)


def sharegpt_requests(cfg: DatasetConfig, wl: WorkloadConfig, n: int, model: str,
                      first_number: int, text: TokenText) -> Dataset:
    assert cfg.path is not None
    convs = read_sharegpt(cfg.path)
    fixed = cfg.sharegpt_output_len
    usable = []
    for c in convs:
        p = text.count(c.prompt)
        o = fixed if fixed is not None else text.count(c.completion)
        if p < SHAREGPT_MIN_LEN or (fixed is None and o < SHAREGPT_MIN_LEN):
            continue
        if p > SHAREGPT_MAX_PROMPT or p + o > SHAREGPT_MAX_TOTAL:
            continue
        usable.append((c, p, o))
    if not usable:
        raise ValueError(f"{cfg.path}: no usable conversation (need a human turn and an answer "
                         f"of >= {SHAREGPT_MIN_LEN} tokens, prompt <= {SHAREGPT_MAX_PROMPT}, "
                         f"both <= {SHAREGPT_MAX_TOTAL})")
    order = np.random.default_rng(wl.seed).permutation(len(usable))
    base = Path(cfg.path).parent
    requests, plens, olens, n_images = [], [], [], []
    for i in range(n):
        c, p, o = usable[int(order[(first_number + i) % len(usable)])]
        parts: list[dict[str, Any]] = []
        nbytes = 0
        for ref in c.images:
            part, b = _image_part(ref, base)
            parts.append(part)
            nbytes += b
        content: Any = c.prompt if not parts else [*parts, {"type": "text", "text": c.prompt}]
        body = messages_body(model, [{"role": "user", "content": content}], o, wl.ignore_eos)
        requests.append(PreparedRequest(index=i, body=body, max_tokens=o, image_bytes=nbytes,
                                        image_pixels=0, prompt_len=p))
        plens.append(p)
        olens.append(o)
        n_images.append(len(parts))
    return Dataset(requests, {
        "prompt": length_stats(plens), "output": length_stats(olens),
        "usable conversations": f"{len(usable)} of {len(convs)} in {cfg.path}",
        "images per request": f"{np.mean(n_images):.2f}",
    })


# ---- generated -----------------------------------------------------------------------------


def chat_requests(cfg: DatasetConfig, wl: WorkloadConfig, n: int, model: str,
                  first_number: int, text: TokenText) -> Dataset:
    """ShareGPT-like traffic without a file: prompt and answer lengths from their distributions."""
    rng = np.random.default_rng([wl.seed, first_number, 1])
    plens = cfg.chat_prompt_len.draw(rng, n)
    olens = cfg.chat_output_len.draw(rng, n)
    requests = []
    for i in range(n):
        prompt = text.text(int(plens[i]), rng)
        body = messages_body(model, [{"role": "user", "content": prompt}], int(olens[i]),
                             wl.ignore_eos)
        requests.append(PreparedRequest(index=i, body=body, max_tokens=int(olens[i]),
                                        image_bytes=0, image_pixels=0, prompt_len=int(plens[i])))
    return Dataset(requests, {
        "prompt": length_stats(plens), "output": length_stats(olens),
        "promised prompt": f"{cfg.chat_prompt_len.label}: mean "
                           f"{cfg.chat_prompt_len.expected_mean():.1f}, std "
                           f"{cfg.chat_prompt_len.expected_std():.1f}",
        "promised output": f"{cfg.chat_output_len.label}: mean "
                           f"{cfg.chat_output_len.expected_mean():.1f}, std "
                           f"{cfg.chat_output_len.expected_std():.1f}",
    })


def _assignment(k: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` indices into ``k`` items, as even as possible, in random order."""
    return rng.permutation(np.arange(n) % k)


def prefix_requests(cfg: DatasetConfig, wl: WorkloadConfig, n: int, model: str,
                    first_number: int, text: TokenText) -> Dataset:
    """``num_prefixes`` shared prefixes (the same in every run of a seed) + unique suffixes."""
    prefix_rng = np.random.default_rng([wl.seed, 2])
    prefixes = [text.text(cfg.prefix_len, prefix_rng) for _ in range(cfg.num_prefixes)]
    rng = np.random.default_rng([wl.seed, first_number, 3])
    which = _assignment(cfg.num_prefixes, n, rng)
    requests = []
    for i in range(n):
        prompt = prefixes[int(which[i])] + text.text(cfg.suffix_len, rng)
        body = messages_body(model, [{"role": "user", "content": prompt}], cfg.output_len,
                             wl.ignore_eos)
        requests.append(PreparedRequest(index=i, body=body, max_tokens=cfg.output_len,
                                        image_bytes=0, image_pixels=0,
                                        prompt_len=cfg.prefix_len + cfg.suffix_len))
    return Dataset(requests, {
        "prompt": length_stats([r.prompt_len for r in requests]),
        "shared prefix": length_stats([cfg.prefix_len] * n),
        "unique suffix": length_stats([cfg.suffix_len] * n),
        "output": length_stats([cfg.output_len] * n),
        "distinct prefixes": f"{len(set(which.tolist()))} used of {cfg.num_prefixes}",
    })


def mm_prefix_requests(cfg: DatasetConfig, wl: WorkloadConfig, n: int, model: str,
                       first_number: int, text: TokenText) -> Dataset:
    """A shared system prompt, one image of a small pool (stable uuid), a unique question."""
    system = text.text(cfg.prefix_len, np.random.default_rng([wl.seed, 4]))
    factory = ImageFactory(wl)
    pool = []
    for k in range(cfg.image_pool):  # images 0..pool-1, distinct, the same in every run
        data, mime, pixels = factory.make(k)
        pool.append(({"type": "image_url", "image_url": {"url": data_url(data, mime)},
                      "uuid": f"edgeserve-bench-{wl.seed}-image-{k}"}, len(data), pixels))
    rng = np.random.default_rng([wl.seed, first_number, 5])
    which = _assignment(cfg.image_pool, n, rng)
    requests = []
    for i in range(n):
        part, nbytes, pixels = pool[int(which[i])]
        question = text.text(cfg.suffix_len, rng)
        messages: list[dict[str, object]] = [
            {"role": "system", "content": system},
            {"role": "user", "content": [part, {"type": "text", "text": question}]},
        ]
        body = messages_body(model, messages, cfg.output_len, wl.ignore_eos)
        requests.append(PreparedRequest(index=i, body=body, max_tokens=cfg.output_len,
                                        image_bytes=nbytes, image_pixels=pixels,
                                        prompt_len=cfg.prefix_len + cfg.suffix_len))
    return Dataset(requests, {
        "text prompt": length_stats([r.prompt_len for r in requests]),
        "shared system prompt": length_stats([cfg.prefix_len] * n),
        "unique question": length_stats([cfg.suffix_len] * n),
        "output": length_stats([cfg.output_len] * n),
        "images": f"1 per request from a pool of {cfg.image_pool} ({wl.sizes}), "
                  f"{len(set(which.tolist()))} used; the chat template adds the image tokens",
    })


BUILDERS = {
    DatasetKind.SHAREGPT: sharegpt_requests,
    DatasetKind.CHAT: chat_requests,
    DatasetKind.PREFIX_REPETITION: prefix_requests,
    DatasetKind.MM_PREFIX_REPETITION: mm_prefix_requests,
}


def build_dataset(cfg: DatasetConfig, wl: WorkloadConfig, n: int, model: str,
                  first_number: int, text: TokenText) -> Dataset:
    """``n`` requests of a text dataset (not :attr:`DatasetKind.IMAGES`)."""
    return BUILDERS[cfg.kind](cfg, wl, n, model, first_number, text)


def format_dataset_stats(cfg: DatasetConfig, stats: dict[str, Any]) -> str:
    return format_length_stats(f"dataset {cfg.label}", stats)
