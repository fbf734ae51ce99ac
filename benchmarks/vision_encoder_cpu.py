"""What the engine itself costs per image on this CPU: the tiny model's vision tower, one thread.

On a GPU server the vision encoder is a few milliseconds and the CPU-side image work decides the
request rate; on a CPU-only machine the encoder runs on the same cores as everything else, and its
attention is quadratic in the number of 14×14 patches (4 per image token). This prints the
encoder's time per image at several image-token budgets, so a comparison's budget can be chosen
knowing whether the engine or the preprocessing is the bottleneck (docs/bench.md).

    .venv/bin/python benchmarks/vision_encoder_cpu.py --budgets 256,512,1280 --rounds 3
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def grid_for(tokens: int, aspect: float = 4 / 3) -> tuple[int, int]:
    """A patch grid (h, w), both even, of about ``tokens`` merged tokens at the given aspect."""
    h = max(1, round(math.sqrt(tokens / aspect)))
    w = max(1, tokens // h)
    return 2 * h, 2 * w


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, default=ROOT / "models" / "tiny-qwen2-vl")
    p.add_argument("--budgets", default="256,512,1280", help="image tokens per image")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()

    import torch
    from transformers import Qwen2VLForConditionalGeneration

    torch.set_num_threads(args.threads)
    model = Qwen2VLForConditionalGeneration.from_pretrained(args.model, dtype=torch.bfloat16)
    visual = model.model.visual.eval()
    patch_dim = 3 * 2 * 14 * 14
    print(f"vision tower of {args.model.name}, bf16, {args.threads} thread(s), "
          f"median of {args.rounds}")
    print(f"{'image tokens':>12} {'patches':>8} {'ms per image':>13}")
    for tokens in (int(b) for b in args.budgets.split(",")):
        gh, gw = grid_for(tokens)
        grid = torch.tensor([[1, gh, gw]])
        pixels = torch.randn(gh * gw, patch_dim, dtype=torch.bfloat16)
        times = []
        with torch.inference_mode():
            visual(pixels, grid_thw=grid)  # warm-up
            for _ in range(args.rounds):
                t0 = time.perf_counter()
                visual(pixels, grid_thw=grid)
                times.append(time.perf_counter() - t0)
        print(f"{gh * gw // 4:>12} {gh * gw:>8} {statistics.median(times) * 1e3:>13.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
