"""A tiny, random-weight Qwen2-VL, built offline and deterministically.

No model hub is reachable from the machines this project runs on, yet the runtime must exercise the
real thing: vLLM's ``Qwen2VLForConditionalGeneration``, its multimodal processor, the Qwen chat
template and the ``<|image_pad|>`` expansion rule. This module writes such a model to a folder:

* ``config.json`` — the Qwen2-VL architecture at toy sizes (:class:`TinySizes`): a 2-layer,
  128-wide language model and a 2-block, 64-wide vision tower with the real patch geometry
  (14-px patches, temporal patch 2, 2×2 spatial merge, so one image token per 28×28 pixels);
* ``tokenizer.json`` — a byte-level BPE trained on a fixed text, plus Qwen's special tokens;
* ``tokenizer_config.json`` / ``chat_template.jinja`` — Qwen2-VL's chat template;
* ``preprocessor_config.json`` — the Qwen2-VL image processor with ``min_pixels``/``max_pixels``;
* ``model.safetensors`` — weights drawn from a seeded generator.

The weights are random, so **the model's outputs are meaningless text**; its token counts,
shapes, memory traffic pattern and pipeline behaviour are real. An image of W×H pixels becomes
``grid_t·grid_h·grid_w / merge²`` ``<|image_pad|>`` tokens where ``(grid_h·14, grid_w·14)`` is
``smart_resize(H, W, factor=28, min_pixels, max_pixels)`` and ``grid_t = 1``.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tokenizers import Tokenizer

DEFAULT_DIR = Path(__file__).resolve().parent / "tiny-qwen2-vl"
BUILDER_VERSION = 1  # bump when the produced files change

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
]

# Qwen2-VL's chat template (as shipped with Qwen/Qwen2-VL-*-Instruct).
CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# A fixed training text for the BPE merges: determinism matters more than realism.
_CORPUS = """
Describe this image. What is in the picture? Count the objects on the table. Read the text on
the sign. Where was this photo taken? Is there a person in the image? What color is the car?
The quick brown fox jumps over the lazy dog. A camera on the edge device captures frames and a
vision language model describes them. The image shows a street with cars, trees and buildings.
There are two cats sitting on a red sofa next to a window. The weather looks sunny and warm.
You are a helpful assistant. Answer the question about the image in one short sentence.
""" * 4


@dataclass(frozen=True, slots=True)
class TinySizes:
    """Architecture sizes of the tiny model. Defaults are what ``build-tiny`` writes."""

    hidden_size: int = 128
    intermediate_size: int = 256
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    vision_depth: int = 2
    vision_embed_dim: int = 64
    vision_num_heads: int = 2
    bpe_vocab_size: int = 1024
    max_position_embeddings: int = 32768
    min_pixels: int = 56 * 56
    max_pixels: int = 1280 * 28 * 28
    seed: int = 0

    def __post_init__(self) -> None:
        head_dim, rem = divmod(self.hidden_size, self.num_attention_heads)
        if rem or head_dim % 2:
            raise ValueError("hidden_size must split into an even head_dim per attention head")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")
        if self.vision_embed_dim % self.vision_num_heads:
            raise ValueError("vision_embed_dim must be a multiple of vision_num_heads")
        if not 0 < self.min_pixels <= self.max_pixels:
            raise ValueError("need 0 < min_pixels <= max_pixels")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def mrope_section(self) -> list[int]:
        """Temporal/height/width rotary sections; they must sum to head_dim / 2."""
        half = self.head_dim // 2
        t = half // 4
        h = (half - t) // 2
        return [t, h, half - t - h]


def _build_tokenizer(sizes: TinySizes) -> Tokenizer:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=sizes.bpe_vocab_size,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
    )
    tok.train_from_iterator([_CORPUS], trainer=trainer)
    tok.add_special_tokens(SPECIAL_TOKENS)
    return tok



def already_built(out_dir: Path, fingerprint: str) -> bool:
    """Whether ``out_dir`` holds a finished build with this fingerprint (its stamp file)."""
    stamp = out_dir / "edgeserve_build.json"
    if not stamp.exists():
        return False
    try:
        return bool(json.loads(stamp.read_text()).get("fingerprint") == fingerprint)
    except json.JSONDecodeError:
        return False


def building_dir(out_dir: Path) -> Path:
    """An empty sibling folder to build into (renamed over ``out_dir`` when done)."""
    tmp = out_dir.with_name(out_dir.name + ".building")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp

def build(out_dir: Path = DEFAULT_DIR, sizes: TinySizes | None = None, *, force: bool = False) -> Path:
    """Write the tiny model to ``out_dir``; skip when an identical build is already there.

    Returns the folder. The build is deterministic: same sizes, same files.
    """
    sizes = sizes or TinySizes()
    out_dir = Path(out_dir)
    fingerprint = _fingerprint(sizes)
    if not force and already_built(out_dir, fingerprint):
        return out_dir

    import torch
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    tmp = building_dir(out_dir)

    tok = _build_tokenizer(sizes)
    tok.save(str(tmp / "tokenizer.json"))
    ids = {t: tok.token_to_id(t) for t in SPECIAL_TOKENS}
    vocab_size = -(-tok.get_vocab_size() // 64) * 64  # pad the embedding like real checkpoints

    config_kwargs: dict[str, Any] = dict(
        text_config={
            "vocab_size": vocab_size,
            "hidden_size": sizes.hidden_size,
            "intermediate_size": sizes.intermediate_size,
            "num_hidden_layers": sizes.num_hidden_layers,
            "num_attention_heads": sizes.num_attention_heads,
            "num_key_value_heads": sizes.num_key_value_heads,
            "max_position_embeddings": sizes.max_position_embeddings,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 1000000.0,
                "mrope_section": sizes.mrope_section,
            },
            "bos_token_id": ids["<|endoftext|>"],
            "eos_token_id": ids["<|im_end|>"],
            "pad_token_id": ids["<|endoftext|>"],
            "tie_word_embeddings": False,
        },
        vision_config={
            "depth": sizes.vision_depth,
            "embed_dim": sizes.vision_embed_dim,
            "hidden_size": sizes.hidden_size,
            "num_heads": sizes.vision_num_heads,
            "mlp_ratio": 4,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "in_channels": 3,
        },
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|im_end|>"],
        tie_word_embeddings=False,
    )
    config = Qwen2VLConfig(**config_kwargs)
    torch.manual_seed(sizes.seed)
    model: Any = Qwen2VLForConditionalGeneration(config)
    model = model.to(torch.bfloat16).eval()
    model.save_pretrained(tmp, safe_serialization=True)
    model.generation_config.save_pretrained(tmp)

    (tmp / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    tokenizer_config = {
        "tokenizer_class": "Qwen2TokenizerFast",
        "model_max_length": sizes.max_position_embeddings,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "add_bos_token": False,
        "clean_up_tokenization_spaces": False,
        "errors": "replace",
        "split_special_tokens": False,
        "chat_template": CHAT_TEMPLATE,
        "extra_special_tokens": {},
    }
    (tmp / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2))
    preprocessor = {
        "image_processor_type": "Qwen2VLImageProcessor",
        "processor_class": "Qwen2VLProcessor",
        "do_resize": True,
        "do_rescale": True,
        "do_normalize": True,
        "do_convert_rgb": True,
        "rescale_factor": 1 / 255,
        "image_mean": [0.48145466, 0.4578275, 0.40821073],
        "image_std": [0.26862954, 0.26130258, 0.27577711],
        "min_pixels": sizes.min_pixels,
        "max_pixels": sizes.max_pixels,
        "size": {"shortest_edge": sizes.min_pixels, "longest_edge": sizes.max_pixels},
        "patch_size": 14,
        "temporal_patch_size": 2,
        "merge_size": 2,
        "resample": 3,
    }
    (tmp / "preprocessor_config.json").write_text(json.dumps(preprocessor, indent=2))
    (tmp / "README.md").write_text(_readme(sizes, vocab_size))
    (tmp / "edgeserve_build.json").write_text(
        json.dumps({"fingerprint": fingerprint, "sizes": asdict(sizes)}, indent=2)
    )
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp.rename(out_dir)
    return out_dir


def _fingerprint(sizes: TinySizes) -> str:
    payload = json.dumps({"v": BUILDER_VERSION, "sizes": asdict(sizes)}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def _readme(sizes: TinySizes, vocab_size: int) -> str:
    return (
        "# tiny-qwen2-vl (built by `edgeserve models build-tiny`)\n\n"
        "Random weights: outputs are meaningless text. Architecture: Qwen2VLForConditionalGeneration,\n"
        f"LM {sizes.num_hidden_layers} layers × hidden {sizes.hidden_size} "
        f"({sizes.num_attention_heads} heads, {sizes.num_key_value_heads} KV heads), vocab {vocab_size};\n"
        f"vision tower {sizes.vision_depth} blocks × {sizes.vision_embed_dim}, patch 14, merge 2.\n"
        f"Images: min_pixels={sizes.min_pixels}, max_pixels={sizes.max_pixels}; one token per 28×28 px.\n"
    )
