"""The tiny Qwen2.5-VL, Qwen3-VL and Qwen3.5 builders: deterministic, offline, the family's own numbers.

A second build into another folder writes the same bytes (weights included); the folder reads
back as its family's spec (``mm_preproc.read_spec``) with the family's architecture, special
tokens and chat template, and transformers loads its processor.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

import mm_preproc
from mm_preproc.spec import Family
from models.tiny_qwen2_vl import SPECIAL_TOKENS
from models.tiny_qwen_vl import FAMILIES, build


def digests(folder: Path) -> dict[str, str]:
    skip = {"edgeserve_build.json"}  # names the folder-independent fingerprint only
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.iterdir()) if p.name not in skip}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_two_builds_write_the_same_bytes_and_the_familys_numbers(
    family: Family, tmp_path: Path
) -> None:
    fam = FAMILIES[family]
    a = build(fam, tmp_path / "a")
    b = build(fam, tmp_path / "b")
    assert digests(a) == digests(b) and "model.safetensors" in digests(a)
    config = json.loads((a / "config.json").read_text())
    assert config["model_type"] == family.value and config["architectures"] == [fam.architecture]
    spec = mm_preproc.read_spec(a)
    assert spec == fam.spec
    assert spec.factor == {Family.QWEN2_5_VL: 28, Family.QWEN3_VL: 32, Family.QWEN3_5: 32}[family]
    vocab = json.loads((a / "tokenizer.json").read_text())["added_tokens"]
    assert [t["content"] for t in vocab] == SPECIAL_TOKENS
    assert config["image_token_id"] == next(t["id"] for t in vocab
                                            if t["content"] == "<|image_pad|>")

    from transformers import AutoProcessor

    proc = AutoProcessor.from_pretrained(a)
    text = proc.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Hi"}]}],
        tokenize=False, add_generation_prompt=True)
    assert "<|vision_start|><|image_pad|><|vision_end|>Hi<|im_end|>" in text
    assert text.endswith("<|im_start|>assistant\n")
    assert proc.image_processor.patch_size == spec.patch_size


def test_a_second_build_in_the_same_folder_is_skipped(tmp_path: Path) -> None:
    fam = FAMILIES[Family.QWEN3_VL]
    out = build(fam, tmp_path / "m")
    before = (out / "model.safetensors").stat().st_mtime_ns
    assert build(fam, out) == out
    assert (out / "model.safetensors").stat().st_mtime_ns == before
