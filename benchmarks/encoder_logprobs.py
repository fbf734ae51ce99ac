"""First-token logprobs with the encoder's embeddings vs with the image itself (vLLM's own tower).

One vLLM ``LLM`` (the tiny model, ``enable_mm_embeds``) answers the same prompt three ways per
photo: with the image (vLLM runs its bfloat16 tower), with ``image_embeds`` from the exported
graph on ONNX Runtime (float32, the default ``--encoder onnx``), and with ``image_embeds`` from
OpenVINO's runtime (``--encoder-provider openvino:CPU``: bfloat16 on AMX / AVX-512 BF16). It
prints the prompt token counts, the top-1/top-2 margin of the image path, and the largest
|logprob difference| over the first token's top-5 tokens of each embeddings path against the
image path and against each other. tests/edgeserve/test_serve_encoder.py states its tolerance in
these terms (about 4e-3, against a top-1/top-2 margin of 0.027 in its chat prompts).

    .venv/bin/python benchmarks/encoder_logprobs.py
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PROMPT = ("<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Describe the image."
          "<|im_end|>\n<|im_start|>assistant\n")


def main() -> int:
    import torch
    from PIL import Image
    from skimage import data as photos
    from vllm import LLM, SamplingParams

    import mm_preproc
    from models.onnx_encoder import OnnxEncoder, OpenVinoEncoder

    model = ROOT / "models" / "tiny-qwen2-vl"
    graph = model / "onnx" / "encoder.onnx"
    pre = json.loads((model / "preprocessor_config.json").read_text())
    ort, ov = OnnxEncoder(graph), OpenVinoEncoder(graph)
    print(f"openvino precision {ov.precision}")
    llm = LLM(model=str(model), enable_mm_embeds=True, max_model_len=4096, max_num_seqs=4,
              kv_cache_memory_bytes=256 * 1024 * 1024, limit_mm_per_prompt={"image": 1})
    sp = SamplingParams(max_tokens=1, temperature=0, logprobs=5)
    for name, img in (("chelsea", photos.chelsea), ("astronaut", photos.astronaut)):
        buf = io.BytesIO()
        Image.fromarray(img()).save(buf, "JPEG", quality=90)
        pil = Image.open(io.BytesIO(buf.getvalue())).convert("RGB")
        r = mm_preproc.preprocess(buf.getvalue(), min_pixels=pre["min_pixels"],
                                  max_pixels=pre["max_pixels"])
        grid = r.image_grid_thw.astype(np.int64)

        def embeds(enc: OnnxEncoder, pv: Any = r.pixel_values, g: Any = grid) -> dict[str, Any]:
            return {"image": {"image_embeds": torch.from_numpy(enc(pv, g)),
                              "image_grid_thw": torch.from_numpy(g)}}

        outs = {}
        for label, mm in (("image", {"image": pil}), ("onnxruntime_f32", embeds(ort)),
                          ("openvino", embeds(ov))):
            o = llm.generate({"prompt": PROMPT, "multi_modal_data": mm}, sp, use_tqdm=False)[0]
            assert o.outputs[0].logprobs is not None and o.prompt_token_ids is not None
            lp = o.outputs[0].logprobs[0]
            outs[label] = (len(o.prompt_token_ids), {t: v.logprob for t, v in lp.items()})
        base = outs["image"][1]
        top = sorted(base.values(), reverse=True)
        print(f"{name}: prompt tokens {[v[0] for v in outs.values()]}; image path's top-1/top-2 "
              f"margin {top[0] - top[1]:.4f}")

        def diff(a: dict[int, float], b: dict[int, float]) -> float:
            return max(abs(a[t] - b[t]) for t in set(a) & set(b))

        for label in ("onnxruntime_f32", "openvino"):
            other = outs[label][1]
            print(f"  {label:>16} vs image: max |logprob diff| {diff(base, other):.2e}, same top-1 "
                  f"{max(other, key=lambda t: other[t]) == max(base, key=lambda t: base[t])}")
        print(f"  openvino vs onnxruntime_f32: max |logprob diff| "
              f"{diff(outs['openvino'][1], outs['onnxruntime_f32'][1]):.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
