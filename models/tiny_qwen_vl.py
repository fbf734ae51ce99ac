"""Tiny, random-weight models of the newer Qwen-VL families, built offline and deterministically.

:mod:`models.tiny_qwen2_vl` builds the default model (Qwen2-VL). This module builds its siblings
with the same toy sizes, the same byte-level BPE tokenizer with Qwen's special tokens, and each
family's real architecture, chat template and preprocessor config:

* **Qwen2.5-VL** (``Qwen2_5_VLForConditionalGeneration``): Qwen2-VL's image input (14-px
  patches, CLIP mean/std) and chat template; the vision tower has window attention (a
  ``window_size`` of 112 px, full attention only in ``fullatt_block_indexes``), RMSNorm and a
  gated SiLU MLP.
* **Qwen3-VL** (``Qwen3VLForConditionalGeneration``): 16-px patches (32-px factor), mean/std
  0.5, learned position embeddings interpolated to the grid, and *deepstack*: features of the
  tower's ``deepstack_visual_indexes`` blocks are added to the first language-model layers'
  hidden states at the image tokens. Its chat template has no default system prompt, and its
  processor needs a video processor config too.
* **Qwen3.5** (``Qwen3_5ForConditionalGeneration``): Qwen3-VL's image input and tower without
  deepstack; a hybrid language model — Gated DeltaNet linear-attention layers (a recurrent state
  per request, no KV cache) and full-attention layers (here one of each) with partial rotary
  M-RoPE. It reuses Qwen3-VL's chat template and processor (as transformers maps ``qwen3_5``).

As for the default model, **outputs are meaningless text**; token counts, shapes and the
pipeline are real: an image of W×H pixels becomes ``(h/f)·(w/f)`` ``<|image_pad|>`` tokens with
``(h, w) = smart_resize(H, W, factor=f, min_pixels, max_pixels)``, f = 28 or 32.

Pixel bounds: the tiny models keep the published checkpoints' ``min_pixels`` and cap
``max_pixels`` at 1280 image tokens, as the default model does (a CPU engine encodes every
pixel).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mm_preproc.spec import QWEN2_5_VL, QWEN3_5, QWEN3_VL, Family, PreprocSpec
from models import tiny_qwen2_vl
from models.tiny_qwen2_vl import SPECIAL_TOKENS, TinySizes

MODELS_DIR = Path(__file__).resolve().parent
BUILDER_VERSION = 1  # bump when the produced files change

# Qwen3-VL-Instruct's chat template (Qwen/Qwen3-VL-8B-Instruct, chat_template.json) for system,
# user and assistant messages with text, images and videos: no default system prompt. Its
# tool-calling and reasoning branches are left out (edgeserve sends neither).
QWEN3_VL_CHAT_TEMPLATE = (
    "{%- if messages[0].role == 'system' %}{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].content is string %}{{- messages[0].content }}"
    "{%- else %}{%- for content in messages[0].content %}{%- if 'text' in content %}"
    "{{- content.text }}{%- endif %}{%- endfor %}{%- endif %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- set image_count = namespace(value=0) %}{%- set video_count = namespace(value=0) %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'user' or (message.role == 'system' and not loop.first) "
    "or message.role == 'assistant' %}"
    "{{- '<|im_start|>' + message.role + '\\n' }}"
    "{%- if message.content is string %}{{- message.content }}"
    "{%- else %}{%- for content in message.content %}"
    "{%- if content.type == 'image' or 'image' in content or 'image_url' in content %}"
    "{%- set image_count.value = image_count.value + 1 %}"
    "{%- if add_vision_id %}Picture {{ image_count.value }}: {% endif -%}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{%- elif content.type == 'video' or 'video' in content %}"
    "{%- set video_count.value = video_count.value + 1 %}"
    "{%- if add_vision_id %}Video {{ video_count.value }}: {% endif -%}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{%- elif 'text' in content %}{{- content.text }}{%- endif %}{%- endfor %}{%- endif %}"
    "{{- '<|im_end|>\\n' }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


@dataclass(frozen=True, slots=True)
class TinyFamily:
    """What differs between the tiny builders of two families."""

    family: Family
    architecture: str
    config_class: str
    model_class: str
    spec: PreprocSpec  # patch geometry and mean/std; bounds as written (see the module docstring)
    chat_template: str
    processor_class: str
    dir_name: str

    @property
    def default_dir(self) -> Path:
        return MODELS_DIR / self.dir_name


FAMILIES: dict[Family, TinyFamily] = {
    Family.QWEN2_5_VL: TinyFamily(
        Family.QWEN2_5_VL, "Qwen2_5_VLForConditionalGeneration", "Qwen2_5_VLConfig",
        "Qwen2_5_VLForConditionalGeneration", QWEN2_5_VL.replace(max_pixels=QWEN2_5_VL.budget(1280)),
        tiny_qwen2_vl.CHAT_TEMPLATE, "Qwen2_5_VLProcessor", "tiny-qwen2.5-vl"),
    Family.QWEN3_VL: TinyFamily(
        Family.QWEN3_VL, "Qwen3VLForConditionalGeneration", "Qwen3VLConfig",
        "Qwen3VLForConditionalGeneration", QWEN3_VL.replace(max_pixels=QWEN3_VL.budget(1280)),
        QWEN3_VL_CHAT_TEMPLATE, "Qwen3VLProcessor", "tiny-qwen3-vl"),
    Family.QWEN3_5: TinyFamily(
        Family.QWEN3_5, "Qwen3_5ForConditionalGeneration", "Qwen3_5Config",
        "Qwen3_5ForConditionalGeneration", QWEN3_5.replace(max_pixels=QWEN3_5.budget(1280)),
        QWEN3_VL_CHAT_TEMPLATE, "Qwen3VLProcessor", "tiny-qwen3.5"),
}


def default_dir(family: Family) -> Path:
    """Where ``edgeserve models build-tiny --family F`` writes (the Qwen2-VL default included)."""
    if family is Family.QWEN2_VL:
        return tiny_qwen2_vl.DEFAULT_DIR
    if family not in FAMILIES:
        raise ValueError(f"no tiny builder for {family.display_name} yet")
    return FAMILIES[family].default_dir


def build_family(family: Family, out_dir: Path | None = None, *, force: bool = False) -> Path:
    """Build the tiny model of ``family`` (Qwen2-VL: :func:`models.tiny_qwen2_vl.build`)."""
    if family is Family.QWEN2_VL:
        return tiny_qwen2_vl.build(out_dir or tiny_qwen2_vl.DEFAULT_DIR, force=force)
    if family not in FAMILIES:
        raise ValueError(f"no tiny builder for {family.display_name} yet")
    return build(FAMILIES[family], out_dir, force=force)


def _vision_config(fam: TinyFamily, sizes: TinySizes) -> dict[str, Any]:
    common = {
        "depth": sizes.vision_depth, "hidden_size": sizes.vision_embed_dim,
        "intermediate_size": 2 * sizes.vision_embed_dim, "num_heads": sizes.vision_num_heads,
        "in_channels": 3, "patch_size": fam.spec.patch_size,
        "spatial_merge_size": fam.spec.merge_size,
        "temporal_patch_size": fam.spec.temporal_patch_size,
        "out_hidden_size": sizes.hidden_size,
    }
    if fam.family is Family.QWEN2_5_VL:
        # window attention in every block but the last (real 7B: full in 7, 15, 23, 31 of 32)
        return {**common, "hidden_act": "silu", "window_size": 112, "tokens_per_second": 2,
                "fullatt_block_indexes": [sizes.vision_depth - 1]}
    # Qwen3-VL: learned 2-D position table (8×8, interpolated to any grid); deepstack features
    # of every block into the first language-model layers (real 8B: blocks 8, 16, 24 of 27)
    vision = {**common, "hidden_act": "gelu_pytorch_tanh", "num_position_embeddings": 64}
    if fam.family is Family.QWEN3_5:  # the same tower without deepstack
        return vision
    return {**vision, "deepstack_visual_indexes": list(range(min(sizes.vision_depth,
                                                                 sizes.num_hidden_layers)))}


def _text_config(fam: TinyFamily, sizes: TinySizes, vocab_size: int,
                 ids: dict[str, int]) -> dict[str, Any]:
    rope: dict[str, Any] = {"rope_type": "default", "rope_theta": 1000000.0,
                            "mrope_section": sizes.mrope_section}
    text: dict[str, Any] = {
        "vocab_size": vocab_size, "hidden_size": sizes.hidden_size,
        "intermediate_size": sizes.intermediate_size,
        "num_hidden_layers": sizes.num_hidden_layers,
        "num_attention_heads": sizes.num_attention_heads,
        "num_key_value_heads": sizes.num_key_value_heads,
        "max_position_embeddings": sizes.max_position_embeddings,
        "bos_token_id": ids["<|endoftext|>"], "eos_token_id": ids["<|im_end|>"],
        "pad_token_id": ids["<|endoftext|>"], "tie_word_embeddings": False,
    }
    if fam.family is Family.QWEN3_VL:
        # explicit head_dim and interleaved M-RoPE, as in the released Qwen3-VL configs
        rope.update(rope_theta=5000000.0, mrope_interleaved=True)
        text["head_dim"] = sizes.head_dim
    if fam.family is Family.QWEN3_5:
        # rotary on a quarter of each head (8 of 32 dims: sections sum to 4); one Gated DeltaNet
        # layer then one full-attention layer (real: three linear per full one)
        rotary_half = sizes.head_dim // 4 // 2
        t = max(1, rotary_half // 4)
        h = (rotary_half - t) // 2
        rope.update(rope_theta=10000000.0, mrope_interleaved=True, partial_rotary_factor=0.25,
                    mrope_section=[t, h, rotary_half - t - h])
        text.update(head_dim=sizes.head_dim,
                    layer_types=["linear_attention", "full_attention"][:sizes.num_hidden_layers],
                    # vLLM's CPU Gated DeltaNet kernel takes the real 128-wide heads only
                    linear_conv_kernel_dim=4, linear_key_head_dim=128, linear_value_head_dim=128,
                    linear_num_key_heads=sizes.num_key_value_heads,
                    linear_num_value_heads=sizes.num_attention_heads)
    text["rope_parameters"] = rope
    return text


def _preprocessor(fam: TinyFamily) -> dict[str, Any]:
    s = fam.spec
    pre: dict[str, Any] = {
        "image_processor_type": "Qwen2VLImageProcessor", "processor_class": fam.processor_class,
        "do_resize": True, "do_rescale": True, "do_normalize": True, "do_convert_rgb": True,
        "rescale_factor": s.rescale_factor, "image_mean": list(s.image_mean),
        "image_std": list(s.image_std),
        "size": {"shortest_edge": s.min_pixels, "longest_edge": s.max_pixels},
        "patch_size": s.patch_size, "temporal_patch_size": s.temporal_patch_size,
        "merge_size": s.merge_size, "resample": 3,
    }
    if fam.family is Family.QWEN2_5_VL:  # the Qwen2.5-VL checkpoints spell the bounds this way
        pre.update(min_pixels=s.min_pixels, max_pixels=s.max_pixels)
    return pre


def processor_configs(fam: TinyFamily) -> dict[str, dict[str, Any]]:
    """The family's processor files: ``preprocessor_config.json`` and, for Qwen3-VL and
    Qwen3.5 (whose ``Qwen3VLProcessor`` loads a video processor too),
    ``video_preprocessor_config.json``."""
    out = {"preprocessor_config.json": _preprocessor(fam)}
    if fam.family in (Family.QWEN3_VL, Family.QWEN3_5):
        s = fam.spec
        out["video_preprocessor_config.json"] = {
            "video_processor_type": "Qwen3VLVideoProcessor",
            "processor_class": fam.processor_class, "patch_size": s.patch_size,
            "temporal_patch_size": s.temporal_patch_size, "merge_size": s.merge_size,
            "image_mean": list(s.image_mean), "image_std": list(s.image_std),
            "size": {"shortest_edge": 4096, "longest_edge": s.max_pixels}}
    return out


def build(fam: TinyFamily, out_dir: Path | None = None, sizes: TinySizes | None = None, *,
          force: bool = False) -> Path:
    """Write the tiny model of ``fam`` to ``out_dir``; skip when an identical build is there."""
    sizes = sizes or TinySizes()
    out_dir = Path(out_dir or fam.default_dir)
    fingerprint = _fingerprint(fam, sizes)
    if not force and tiny_qwen2_vl.already_built(out_dir, fingerprint):
        return out_dir

    import torch
    import transformers

    tmp = tiny_qwen2_vl.building_dir(out_dir)
    tok = tiny_qwen2_vl._build_tokenizer(sizes)
    tok.save(str(tmp / "tokenizer.json"))
    ids: dict[str, int] = {}
    for t in SPECIAL_TOKENS:
        token_id = tok.token_to_id(t)
        assert token_id is not None  # added just above by _build_tokenizer
        ids[t] = token_id
    vocab_size = -(-tok.get_vocab_size() // 64) * 64

    config = getattr(transformers, fam.config_class)(
        text_config=_text_config(fam, sizes, vocab_size, ids),
        vision_config=_vision_config(fam, sizes),
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
    )
    torch.manual_seed(sizes.seed)
    model: Any = getattr(transformers, fam.model_class)(config)
    model = model.to(torch.bfloat16).eval()
    model.save_pretrained(tmp, safe_serialization=True)
    model.generation_config.save_pretrained(tmp)

    (tmp / "chat_template.jinja").write_text(fam.chat_template)
    tokenizer_config = {
        "tokenizer_class": "Qwen2TokenizerFast", "model_max_length": sizes.max_position_embeddings,
        "bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
        "unk_token": None, "add_bos_token": False, "clean_up_tokenization_spaces": False,
        "errors": "replace", "split_special_tokens": False, "chat_template": fam.chat_template,
        "extra_special_tokens": {},
    }
    (tmp / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2))
    for file, content in processor_configs(fam).items():
        (tmp / file).write_text(json.dumps(content, indent=2))
    (tmp / "README.md").write_text(
        f"# {fam.dir_name} (built by `edgeserve models build-tiny --family {fam.family.value}`)\n\n"
        f"Random weights: outputs are meaningless text. Architecture: {fam.architecture}, LM "
        f"{sizes.num_hidden_layers} layers × hidden {sizes.hidden_size}, vocab {vocab_size}; "
        f"vision tower {sizes.vision_depth} blocks × {sizes.vision_embed_dim}, patch "
        f"{fam.spec.patch_size}, merge {fam.spec.merge_size}.\nImages: min_pixels "
        f"{fam.spec.min_pixels}, max_pixels {fam.spec.max_pixels}; one token per "
        f"{fam.spec.factor}×{fam.spec.factor} px.\n")
    (tmp / "edgeserve_build.json").write_text(json.dumps(
        {"fingerprint": fingerprint, "family": fam.family.value, "sizes": asdict(sizes)},
        indent=2))
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp.rename(out_dir)
    return out_dir


def _fingerprint(fam: TinyFamily, sizes: TinySizes) -> str:
    payload = json.dumps({"v": BUILDER_VERSION, "family": fam.family.value,
                          "sizes": asdict(sizes)}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]
