"""Does vLLM's image processor in the frontend scale over render threads on this machine?

In split mode edgeserve's workers decode and resize, but vLLM's renderer in the frontend still
tokenizes each prompt and runs vLLM's image processor on the ready-sized image (rescale,
normalize, patchify). ``--frontend-render-threads N`` (vLLM's ``renderer_num_workers``) runs that
on N threads beside the event loop; the default gives a GPU host ``min(4, cores // 4)``
(:mod:`edgeserve.auto_defaults`). Threads only help if the work releases the GIL. This benchmark
measures that directly: the renderer of the default model's engine config (no engine started,
the multimodal processor cache off as vLLM requires for several threads) renders the same
prompts with one ready-sized image each (``--size``, by default the size a 12 MP photo is
resized to at 1280 image tokens), from 1 thread and then from each count in ``--threads``,
alternating rounds so that a change in the host's load meets every count. It prints images per
second for each count and its ratio to one thread (the reference, measured in the same run), with
the CPU and its load, and writes JSON to ``--out``.

    python benchmarks/render_threads.py                        # 1 vs 2 threads, ~1 min
    python benchmarks/render_threads.py --threads 2,4 --rounds 5

The ratio is bounded by the cores: on a 2-core machine at most 2.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from edgeserve.config import DEFAULT_MODEL_DIR


def make_renderer(model: Path) -> Any:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.renderers import renderer_from_config

    from edgeserve import vllm_compat

    args = AsyncEngineArgs(model=str(model), max_model_len=4096, kv_cache_memory_bytes=1 << 28,
                           limit_mm_per_prompt={"image": 1, "video": 0},
                           mm_processor_cache_gb=0)
    vc = args.create_engine_config(vllm_compat.serving_usage_context())
    return renderer_from_config(vc), vc.model_config


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, default=DEFAULT_MODEL_DIR)
    p.add_argument("--size", default="1148x840", help="ready-sized image WxH (default: a 12 MP "
                   "photo at 1280 image tokens)")
    p.add_argument("--threads", default="2", help="thread counts to compare with one")
    p.add_argument("--images", type=int, default=48, help="images per round and count")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", type=Path, default=Path("results/render_threads.json"))
    a = p.parse_args()
    counts = [1, *(int(x) for x in a.threads.split(",") if x.strip() and int(x) != 1)]
    w, h = (int(x) for x in a.size.lower().split("x"))

    import torch
    from vllm.renderers.inputs.preprocess import parse_model_prompt

    torch.set_num_threads(1)  # the frontend's torch threads (--frontend-torch-threads 1)
    renderer, model_config = make_renderer(a.model)
    text = str(renderer.tokenizer.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "describe"}]}],
        tokenize=False, add_generation_prompt=True))
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8) for _ in range(8)]
    serial = [0]

    def render(i: int) -> int:
        serial[0] += 1  # a new uuid each time: nothing is reused
        prompt = {"prompt": text, "multi_modal_data": {"image": [images[i % len(images)]]},
                  "multi_modal_uuids": {"image": [f"img-{serial[0]}-{i}"]}}
        (out,) = renderer.render_cmpl([parse_model_prompt(model_config, prompt)],
                                      renderer.default_cmpl_tok_params)
        return len(out["prompt_token_ids"])

    render(0)  # warm-up
    rates: dict[int, list[float]] = {n: [] for n in counts}
    cpu_s: dict[int, list[float]] = {n: [] for n in counts}
    for r in range(a.rounds):
        for n in counts if r % 2 == 0 else counts[::-1]:
            with ThreadPoolExecutor(n) as pool:
                c0, t0 = time.process_time(), time.perf_counter()
                tokens = list(pool.map(render, range(a.images)))
                wall = time.perf_counter() - t0
                cpu = time.process_time() - c0
            rates[n].append(a.images / wall)
            cpu_s[n].append(cpu / a.images)
            print(f"round {r + 1}: {n} thread(s) {a.images / wall:6.1f} images/s "
                  f"({1000 * cpu / a.images:.1f} ms CPU each, {tokens[0]} prompt tokens)",
                  flush=True)
    base = statistics.median(rates[1])
    load = os.getloadavg()[0]
    print(f"\n{a.size} ready-sized images, {a.model.name}, {os.cpu_count()} CPUs, "
          f"load average {load:.2f}")
    out: dict[str, Any] = {"size": a.size, "model": a.model.name, "cpus": os.cpu_count(),
                           "load_average": load, "counts": {}}
    for n in counts:
        med = statistics.median(rates[n])
        print(f"  {n} thread(s): {med:6.1f} images/s, {1000 * statistics.median(cpu_s[n]):.1f} "
              f"ms CPU/image, {med / base:.2f}x one thread")
        out["counts"][str(n)] = {"images_per_s": rates[n], "cpu_s_per_image": cpu_s[n],
                                 "ratio_to_one": med / base}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(out, indent=1))
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
