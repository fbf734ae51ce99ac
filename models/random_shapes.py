"""Published Qwen-VL checkpoints' architectures as model folders without weights.

A GPU benchmark needs the real model's shapes — its layer count, widths, heads, vision tower and
vocabulary decide every step time and the KV cache — but not its weights, which no machine of
this project can download. ``edgeserve models build-random SHAPE --out DIR`` writes what the hub
folder holds except the weights: ``config.json`` with the published values, a tokenizer with the
real vocabulary size, the chat template and the processor configs. vLLM serves such a folder
with ``load_format="dummy"`` (random weights, drawn at load time); ``edgeserve serve`` picks that
format by itself when the folder has no weight files.

The tokenizer is the tiny model's byte-level BPE (:mod:`models.tiny_qwen2_vl`) padded with plain
entries ``x<id>`` up to id 151,642 and Qwen's special tokens moved to their real ids 151,643 …
151,656. A random model samples ids all over the vocabulary; without the padding most of them
would decode to nothing, and a client that takes the time to first token at the first chunk with
text (as ``vllm bench serve`` and ``edgeserve bench`` do) would measure the wrong thing.

Pixel bounds: as the tiny models, ``max_pixels`` is capped at 1280 image tokens (the default of
``edgeserve serve`` and of the benchmarks); the published ``min_pixels`` is kept.

Sources of the figures: the checkpoints' ``config.json`` on the hub (Qwen/Qwen2-VL-2B-Instruct,
Qwen/Qwen2-VL-7B-Instruct, Qwen/Qwen2.5-VL-3B-Instruct, Qwen/Qwen2.5-VL-7B-Instruct,
Qwen/Qwen3-VL-8B-Instruct); ``published_params`` is the size on each model card.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mm_preproc.spec import QWEN2_VL, Family
from models import tiny_qwen2_vl, tiny_qwen_vl
from models.tiny_qwen2_vl import SPECIAL_TOKENS, TinySizes
from models.tiny_qwen_vl import FAMILIES, TinyFamily

FIRST_SPECIAL_ID = 151643  # <|endoftext|> in every Qwen2/2.5/3 tokenizer; the specials follow

_QWEN2_VL = TinyFamily(
    Family.QWEN2_VL, "Qwen2VLForConditionalGeneration", "Qwen2VLConfig",
    "Qwen2VLForConditionalGeneration", QWEN2_VL, tiny_qwen2_vl.CHAT_TEMPLATE,
    "Qwen2VLProcessor", "tiny-qwen2-vl")


@dataclass(frozen=True, slots=True)
class RandomShape:
    """One published checkpoint's architecture: what ``config.json`` says, nothing else."""

    name: str
    checkpoint: str  # the hub id whose config this is
    family: Family
    text: dict[str, Any]
    vision: dict[str, Any]
    tie_word_embeddings: bool
    published_params: float  # parameters, as on the model card
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def tiny(self) -> TinyFamily:
        """The family's architecture and processor names (shared with the tiny builders)."""
        return _QWEN2_VL if self.family is Family.QWEN2_VL else FAMILIES[self.family]


_QWEN2_TEXT = {"rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0,
                                   "mrope_section": [16, 24, 24]},
               "rms_norm_eps": 1e-6, "hidden_act": "silu", "use_sliding_window": False}
_QWEN2_VISION = {"depth": 32, "embed_dim": 1280, "mlp_ratio": 4, "num_heads": 16,
                 "in_channels": 3, "patch_size": 14, "spatial_merge_size": 2,
                 "temporal_patch_size": 2}
_QWEN2_5_VISION = {"depth": 32, "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16,
                   "hidden_act": "silu", "in_channels": 3, "patch_size": 14,
                   "spatial_merge_size": 2, "temporal_patch_size": 2, "window_size": 112,
                   "fullatt_block_indexes": [7, 15, 23, 31], "tokens_per_second": 2}


def _qwen2_text(hidden: int, inter: int, layers: int, heads: int, kv: int, vocab: int,
                max_pos: int) -> dict[str, Any]:
    return {**_QWEN2_TEXT, "hidden_size": hidden, "intermediate_size": inter,
            "num_hidden_layers": layers, "num_attention_heads": heads,
            "num_key_value_heads": kv, "vocab_size": vocab, "max_position_embeddings": max_pos,
            "max_window_layers": layers, "sliding_window": max_pos}


SHAPES: dict[str, RandomShape] = {s.name: s for s in (
    RandomShape("qwen2-vl-2b", "Qwen/Qwen2-VL-2B-Instruct", Family.QWEN2_VL,
                _qwen2_text(1536, 8960, 28, 12, 2, 151936, 32768),
                {**_QWEN2_VISION, "hidden_size": 1536}, True, 2.21e9),
    RandomShape("qwen2-vl-7b", "Qwen/Qwen2-VL-7B-Instruct", Family.QWEN2_VL,
                _qwen2_text(3584, 18944, 28, 28, 4, 152064, 32768),
                {**_QWEN2_VISION, "hidden_size": 3584}, False, 8.29e9),
    RandomShape("qwen2.5-vl-3b", "Qwen/Qwen2.5-VL-3B-Instruct", Family.QWEN2_5_VL,
                _qwen2_text(2048, 11008, 36, 16, 2, 151936, 128000),
                {**_QWEN2_5_VISION, "out_hidden_size": 2048}, True, 3.75e9),
    RandomShape("qwen2.5-vl-7b", "Qwen/Qwen2.5-VL-7B-Instruct", Family.QWEN2_5_VL,
                _qwen2_text(3584, 18944, 28, 28, 4, 152064, 128000),
                {**_QWEN2_5_VISION, "out_hidden_size": 3584}, False, 8.29e9),
    RandomShape("qwen3-vl-8b", "Qwen/Qwen3-VL-8B-Instruct", Family.QWEN3_VL,
                {"hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36,
                 "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                 "vocab_size": 151936, "max_position_embeddings": 262144,
                 "rms_norm_eps": 1e-6, "hidden_act": "silu", "attention_bias": False,
                 "rope_parameters": {"rope_type": "default", "rope_theta": 5000000.0,
                                     "mrope_section": [24, 20, 20],
                                     "mrope_interleaved": True}},
                {"depth": 27, "hidden_size": 1152, "intermediate_size": 4304, "num_heads": 16,
                 "hidden_act": "gelu_pytorch_tanh", "in_channels": 3, "patch_size": 16,
                 "spatial_merge_size": 2, "temporal_patch_size": 2,
                 "num_position_embeddings": 2304, "deepstack_visual_indexes": [8, 16, 24],
                 "out_hidden_size": 4096}, False, 8.77e9),
)}


class UnknownShapeError(ValueError):
    """A shape name that is not in :data:`SHAPES`."""


def shape(name: str) -> RandomShape:
    """The shape called ``name`` (``qwen2-vl-2b``, …); a clear error naming the known ones."""
    if name not in SHAPES:
        raise UnknownShapeError(f"no published shape called {name!r}; known: "
                                f"{', '.join(SHAPES)}")
    return SHAPES[name]


def special_ids() -> dict[str, int]:
    """Qwen's special tokens at their real ids (151,643 … in :data:`SPECIAL_TOKENS` order)."""
    return {t: FIRST_SPECIAL_ID + k for k, t in enumerate(SPECIAL_TOKENS)}


def padded_tokenizer_json() -> dict[str, Any]:
    """The tiny BPE tokenizer with the real id layout: plain ``x<id>`` entries fill the ids up
    to the specials, which move to their real ids."""
    tok = json.loads(tiny_qwen2_vl._build_tokenizer(TinySizes()).to_str())
    vocab: dict[str, int] = tok["model"]["vocab"]
    ids = special_ids()
    for added in tok["added_tokens"]:
        added["id"] = ids[added["content"]]
    if max(vocab.values()) >= FIRST_SPECIAL_ID:
        raise AssertionError("the BPE vocabulary must end before the special tokens")
    for i in range(max(vocab.values()) + 1, FIRST_SPECIAL_ID):
        vocab[f"x{i}"] = i
    return tok


def model_config(s: RandomShape) -> dict[str, Any]:
    """``config.json`` of shape ``s``, as transformers writes it for the family's class."""
    import transformers

    ids = special_ids()
    text = {**s.text, "bos_token_id": ids["<|endoftext|>"], "eos_token_id": ids["<|im_end|>"],
            "tie_word_embeddings": s.tie_word_embeddings, "dtype": "bfloat16"}
    config = getattr(transformers, s.tiny.config_class)(
        text_config=text, vision_config=s.vision,
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=s.tie_word_embeddings, **s.extra)
    config.architectures = [s.tiny.architecture]
    config.dtype = "bfloat16"
    out: dict[str, Any] = config.to_dict()
    return out


def build(name: str, out_dir: Path) -> Path:
    """Write shape ``name``'s folder (config, tokenizer, chat template, processor configs; no
    weights) to ``out_dir``, replacing what is there. Returns the folder."""
    s = shape(name)
    out_dir = Path(out_dir)
    tmp = tiny_qwen2_vl.building_dir(out_dir)
    fam = s.tiny
    (tmp / "config.json").write_text(json.dumps(model_config(s), indent=2))
    (tmp / "tokenizer.json").write_text(json.dumps(padded_tokenizer_json(), ensure_ascii=False))
    ids = special_ids()
    generation = {"bos_token_id": ids["<|endoftext|>"],
                  "eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]],
                  "pad_token_id": ids["<|endoftext|>"]}
    (tmp / "generation_config.json").write_text(json.dumps(generation, indent=2))
    (tmp / "chat_template.jinja").write_text(fam.chat_template)
    tokenizer_config = {
        "tokenizer_class": "Qwen2TokenizerFast",
        "model_max_length": s.text["max_position_embeddings"],
        "bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
        "unk_token": None, "add_bos_token": False, "clean_up_tokenization_spaces": False,
        "errors": "replace", "split_special_tokens": False, "chat_template": fam.chat_template,
        "extra_special_tokens": {},
    }
    (tmp / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2))
    capped = TinyFamily(fam.family, fam.architecture, fam.config_class, fam.model_class,
                        fam.spec.replace(max_pixels=fam.spec.budget(1280)), fam.chat_template,
                        fam.processor_class, fam.dir_name)
    for file, content in tiny_qwen_vl.processor_configs(capped).items():
        (tmp / file).write_text(json.dumps(content, indent=2))
    (tmp / "README.md").write_text(
        f"# {s.name} (built by `edgeserve models build-random {s.name}`)\n\n"
        f"The architecture of {s.checkpoint} ({s.published_params / 1e9:.2f} B parameters) "
        "without weights: serve it with random weights (vLLM `load_format=dummy`, which "
        "`edgeserve serve` picks by itself for a folder without weight files). Outputs are "
        "meaningless text; shapes, token counts and step times are the real model's.\n")
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp.rename(out_dir)
    return out_dir


def meta_param_count(model_dir: str | Path) -> int:
    """The parameters of the model in ``model_dir``, counted on the meta device (no memory is
    allocated; tied embeddings count once, as on the model cards)."""
    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText

    config = AutoConfig.from_pretrained(str(model_dir))
    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(config)
    return sum(p.numel() for p in model.parameters())
