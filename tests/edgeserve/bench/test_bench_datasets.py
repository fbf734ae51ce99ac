"""Text datasets of ``edgeserve bench``: lengths are what they promise, prompts are what they say.

Lengths are counted with the tiny default model's real tokenizer (``tokenizer.json``).
"""

from __future__ import annotations

import base64
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edgeserve.bench.datasets import DatasetConfig, DatasetKind, build_dataset, read_sharegpt
from edgeserve.bench.lengths import LengthDist, length_stats
from edgeserve.bench.tokentext import TokenText, find_tokenizer
from edgeserve.bench.workload import WorkloadConfig

DATA = Path(__file__).parent / "data"
SHAREGPT = DATA / "sharegpt_small.json"


@pytest.fixture(scope="module")
def text(tiny_model_dir: Path) -> TokenText:
    return TokenText(find_tokenizer(None, str(tiny_model_dir)))


def _messages(body: bytes) -> list[dict[str, object]]:
    return list(json.loads(body)["messages"])


@pytest.mark.parametrize("dist", [LengthDist(256, 256, 4, 2048), LengthDist(128, 40, 16, 160),
                                  LengthDist(30, 5)])
def test_drawn_lengths_have_the_stated_mean_and_std_within_sampling_error(dist: LengthDist) -> None:
    n = 20_000
    x = dist.draw(np.random.default_rng(1), n)
    mean, std = dist.expected_mean(), dist.expected_std()
    assert abs(x.mean() - mean) < 4 * std / math.sqrt(n)
    assert x.std() == pytest.approx(std, rel=0.05)
    assert dist.min <= x.min() and x.max() <= dist.max


def test_truncation_pulls_the_mean_below_the_untruncated_one() -> None:
    # a cut at 160 removes the right tail of a lognormal of mean 128 and std 40
    assert LengthDist(128, 40, 16, 160).expected_mean() < 127
    assert LengthDist(128, 40).expected_mean() == pytest.approx(128, abs=0.1)


def test_length_specs() -> None:
    assert LengthDist.parse("64").draw(np.random.default_rng(0), 3).tolist() == [64, 64, 64]
    assert LengthDist.parse("100:10:50:150") == LengthDist(100, 10, 50, 150)
    for bad in ("x", "1:2:3", "-4"):
        with pytest.raises(ValueError, match="bad length distribution"):
            LengthDist.parse(bad)


def test_text_has_exactly_the_asked_number_of_tokens(text: TokenText) -> None:
    rng = np.random.default_rng(0)
    assert [text.count(text.text(n, rng)) for n in (1, 7, 256, 1500)] == [1, 7, 256, 1500]


def test_chat_prompts_and_outputs_follow_their_distributions(text: TokenText) -> None:
    cfg = DatasetConfig(kind=DatasetKind.CHAT)
    ds = build_dataset(cfg, WorkloadConfig(), 400, "m", 0, text)
    plens = [text.count(str(_messages(r.body)[0]["content"])) for r in ds.requests]
    assert plens == [r.prompt_len for r in ds.requests]  # the stated count is the real one
    pd, od = cfg.chat_prompt_len, cfg.chat_output_len
    assert abs(np.mean(plens) - pd.expected_mean()) < 4 * pd.expected_std() / 20
    outs = [r.max_tokens for r in ds.requests]
    assert abs(np.mean(outs) - od.expected_mean()) < 4 * od.expected_std() / 20
    assert [json.loads(r.body)["max_tokens"] for r in ds.requests] == outs
    assert ds.stats["prompt"] == length_stats(plens)


def test_prefix_repetition_shares_few_prefixes_and_never_a_suffix(text: TokenText) -> None:
    cfg = DatasetConfig(kind=DatasetKind.PREFIX_REPETITION, prefix_len=64, suffix_len=16,
                        num_prefixes=3, output_len=8)
    wl = WorkloadConfig()

    def split(first: int) -> list[tuple[str, str]]:
        ds = build_dataset(cfg, wl, 30, "m", first, text)
        out = []
        for r in ds.requests:
            prompt = str(_messages(r.body)[0]["content"])
            ids = text.tok.encode(prompt).ids
            assert len(ids) == 80 and r.max_tokens == 8
            out.append((text.tok.decode(ids[:64]), text.tok.decode(ids[64:])))
        return out

    a, b = split(0), split(30)  # two runs of a sweep
    prefixes = {p for p, _ in a}
    assert len(prefixes) == 3 and {p for p, _ in b} == prefixes  # the same prefixes every run
    assert sorted([p for p, _ in a].count(x) for x in prefixes) == [10, 10, 10]
    suffixes = [s for _, s in a + b]
    assert len(set(suffixes)) == len(suffixes)


def test_mm_prefix_repetition_repeats_a_system_prompt_and_pooled_images(text: TokenText) -> None:
    cfg = DatasetConfig(kind=DatasetKind.MM_PREFIX_REPETITION, prefix_len=32, suffix_len=8,
                        image_pool=2, output_len=4)
    ds = build_dataset(cfg, WorkloadConfig(sizes="64x48"), 6, "m", 0, text)
    systems: set[str] = set()
    images: dict[str, set[str]] = {}
    questions: set[str] = set()
    for r in ds.requests:
        system, user = _messages(r.body)
        systems.add(str(system["content"]))
        image: Any
        question: Any
        image, question = user["content"]  # type: ignore[misc]
        images.setdefault(image["uuid"], set()).add(image["image_url"]["url"])
        questions.add(question["text"])
    assert len(systems) == 1 and text.count(systems.pop()) == 32
    # two images, each always the same bytes under the same uuid
    assert sorted(images) == ["edgeserve-bench-0-image-0", "edgeserve-bench-0-image-1"]
    assert all(len(urls) == 1 for urls in images.values())
    assert len(questions) == 6


def test_a_small_sharegpt_file_parses(text: TokenText) -> None:
    convs = read_sharegpt(SHAREGPT)
    assert len(convs) == 5  # the one-turn conversation has no answer
    assert convs[1].prompt.startswith("Describe the device")  # after the system turn
    assert convs[4].images == ("sharegpt_cat.jpg",)
    cfg = DatasetConfig(kind=DatasetKind.SHAREGPT, path=SHAREGPT)
    ds = build_dataset(cfg, WorkloadConfig(), 8, "m", 0, text)
    usable = [c for c in convs if text.count(c.completion) >= 4]
    assert ds.stats["usable conversations"].startswith(f"{len(usable)} of 5")
    by_prompt = {c.prompt: c for c in usable}
    for r in ds.requests:
        content = _messages(r.body)[0]["content"]
        if isinstance(content, list):  # the image entry: the file, as a data URL, then the text
            url = content[0]["image_url"]["url"]
            assert base64.b64decode(url.split(",", 1)[1]) == (DATA / "sharegpt_cat.jpg").read_bytes()
            content = content[1]["text"]
        c = by_prompt[str(content)]
        assert r.max_tokens == text.count(c.completion)  # the answer's length
        assert r.prompt_len == text.count(c.prompt)
    assert len({r.body for r in ds.requests}) == len(usable)  # cycled after all were used


def test_sharegpt_output_length_can_be_fixed(text: TokenText) -> None:
    cfg = DatasetConfig(kind=DatasetKind.SHAREGPT, path=SHAREGPT, sharegpt_output_len=16)
    ds = build_dataset(cfg, WorkloadConfig(), 5, "m", 0, text)
    assert {r.max_tokens for r in ds.requests} == {16}
    assert ds.stats["usable conversations"].startswith("5 of 5")  # no answer-length filter


def test_a_missing_tokenizer_says_what_to_pass(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--tokenizer"):
        find_tokenizer(None, "Qwen/Qwen2-VL-7B-Instruct")
