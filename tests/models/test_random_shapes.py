"""Published shapes without weights: the real architecture, the real vocabulary layout."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from models.random_shapes import SHAPES, build, meta_param_count, shape, special_ids


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_each_shape_has_its_published_parameter_count(name: str, tmp_path: Path) -> None:
    s = shape(name)
    out = build(name, tmp_path / name)
    count = meta_param_count(out)
    assert abs(count / s.published_params - 1) < 0.01, (name, count, s.published_params)
    assert not any(out.glob("*.safetensors"))  # no weights written


def test_qwen2_vl_2b_config_holds_the_checkpoints_values(tmp_path: Path) -> None:
    cfg = json.loads((build("qwen2-vl-2b", tmp_path / "m") / "config.json").read_text())
    text, vision = cfg["text_config"], cfg["vision_config"]
    assert cfg["architectures"] == ["Qwen2VLForConditionalGeneration"]
    assert (text["hidden_size"], text["num_hidden_layers"], text["num_attention_heads"],
            text["num_key_value_heads"], text["intermediate_size"], text["vocab_size"]) == (
        1536, 28, 12, 2, 8960, 151936)
    assert text["rope_parameters"]["mrope_section"] == [16, 24, 24]
    assert cfg["tie_word_embeddings"] is True
    assert (vision["depth"], vision["embed_dim"], vision["num_heads"], vision["patch_size"],
            vision["spatial_merge_size"]) == (32, 1280, 16, 14, 2)
    assert cfg["image_token_id"] == 151655


def test_the_tokenizer_has_the_real_id_layout_and_random_ids_decode_to_text(
        tmp_path: Path) -> None:
    from transformers import AutoProcessor, AutoTokenizer

    out = build("qwen3-vl-8b", tmp_path / "m")
    tok = AutoTokenizer.from_pretrained(str(out))
    assert len(tok) == 151643 + 14
    for token, token_id in special_ids().items():
        assert tok.convert_tokens_to_ids(token) == token_id
    assert all(tok.decode([i]) for i in (300, 5000, 99999, 151642))
    processor = AutoProcessor.from_pretrained(str(out))
    assert type(processor).__name__ == "Qwen3VLProcessor"
    assert processor.image_processor.patch_size == 16


def test_the_cli_names_the_known_shapes_for_an_unknown_one(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "edgeserve", "models", "build-random",
                           "qwen9-vl-1b", "--out", str(tmp_path / "m")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "qwen2-vl-2b" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "m").exists()
