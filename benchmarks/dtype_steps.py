"""The language model's engine steps in bfloat16 and in float32 on this CPU, small model and real size.

``edgeserve serve`` picks the engine's precision from the CPU (:mod:`edgeserve.auto_defaults`).
With the vision tower in the workers (``--encoder onnx``) the engine runs only the language
model, so what decides streaming (ITL) is that model's step: a decode step, and a decode step
that carries another request's prefill. This benchmark times both in each precision, for the
tiny default model and for a published shape with random weights (``edgeserve models
build-random``; vLLM's ``load_format=dummy``), one vLLM engine at a time in its own process:

* **prefill**: one request of ``--prefill-tokens`` random token ids, one output token (a new
  prompt each time, prefix caching off), median of ``--repeats`` after one warm-up;
* **decode step**: ``--batch`` requests of 16 tokens generating ``--decode-tokens`` tokens each,
  minus the same with one token, divided by the extra tokens (median of ``--repeats``).

It prints each time and the float32 / bfloat16 ratio per model (above 1: bfloat16 is faster),
with the CPU's flags, and writes JSON to ``--out``.

    python benchmarks/dtype_steps.py                       # tiny + qwen2-vl-2b, ~10 min on 2 cores
    python benchmarks/dtype_steps.py --shapes ""            # the tiny model only
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DTYPES = ("bfloat16", "float32")
RESULT = "dtype-steps result: "  # the child's line among vLLM's own output


def child(model: str, dtype: str, prefill_tokens: int, batch: int, decode_tokens: int,
          repeats: int, seed: int) -> dict[str, Any]:
    """Time one engine (runs in its own process, so each engine's memory goes with it)."""
    import numpy as np
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from edgeserve import vllm_compat

    load, _ = vllm_compat.load_format_args(model, {})
    t0 = time.perf_counter()
    llm = LLM(model=model, dtype=dtype,  # type: ignore[arg-type]  # one of DTYPES
              max_model_len=max(prefill_tokens + 8, 2048),
              max_num_seqs=max(batch, 1), enable_prefix_caching=False, seed=seed,
              kv_cache_memory_bytes=1 << 30, limit_mm_per_prompt={"image": 0, "video": 0},
              **load)
    load_s = time.perf_counter() - t0
    vocab = llm.get_tokenizer().vocab_size
    margin = min(1000, vocab // 4)  # clear of the lowest ids and of the special tokens at the top
    rng = np.random.default_rng(seed)

    def prompt(n: int) -> TokensPrompt:
        ids = rng.integers(margin, vocab - margin, n)
        return TokensPrompt(prompt_token_ids=[int(t) for t in ids])

    def run(prompts: list[TokensPrompt], out_tokens: int) -> float:
        params = SamplingParams(max_tokens=out_tokens, min_tokens=out_tokens, ignore_eos=True,
                                temperature=0.0)
        t = time.perf_counter()
        llm.generate(prompts, params, use_tqdm=False)
        return time.perf_counter() - t

    run([prompt(prefill_tokens)], 1)  # warm-up: first shapes
    run([prompt(16) for _ in range(batch)], decode_tokens + 1)
    prefill = [run([prompt(prefill_tokens)], 1) for _ in range(repeats)]
    steps = []
    for _ in range(repeats):
        long = run([prompt(16) for _ in range(batch)], decode_tokens + 1)
        short = run([prompt(16) for _ in range(batch)], 1)
        steps.append((long - short) / decode_tokens)
    return {"load_s": load_s, "prefill_s": statistics.median(prefill),
            "decode_step_s": statistics.median(steps), "prefill_all_s": prefill,
            "decode_step_all_s": steps}


def measure(model: Path, dtype: str, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", str(model), "--dtype", dtype,
           "--prefill-tokens", str(args.prefill_tokens), "--batch", str(args.batch),
           "--decode-tokens", str(args.decode_tokens), "--repeats", str(args.repeats)]
    with tempfile.TemporaryFile("w+") as log:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=log, text=True,
                           env={**os.environ, "VLLM_LOGGING_LEVEL": "WARNING"})
        if p.returncode != 0:
            log.seek(0)
            sys.exit(f"{model.name} in {dtype} failed (status {p.returncode}):\n"
                     + "".join(log.readlines()[-20:]))
    line = next(x for x in reversed(p.stdout.splitlines()) if x.startswith(RESULT))
    return dict(json.loads(line.removeprefix(RESULT)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=ROOT / "models" / "tiny-qwen2-vl",
                    help="the small model (default: the tiny default model)")
    ap.add_argument("--shapes", default="qwen2-vl-2b",
                    help="comma-separated published shapes to build with random weights "
                         "(empty: none)")
    ap.add_argument("--prefill-tokens", type=int, default=512)
    ap.add_argument("--batch", type=int, default=4, help="requests decoding at once")
    ap.add_argument("--decode-tokens", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("out/dtype_steps.json"))
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--dtype", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(RESULT + json.dumps(child(args.child, args.dtype, args.prefill_tokens, args.batch,
                                        args.decode_tokens, args.repeats, seed=0)))
        return

    from edgeserve import hardware

    hw = hardware.detect()
    models = [args.model]
    tmp = Path(tempfile.mkdtemp(prefix="dtype-steps-"))  # the built shapes: config files only
    atexit.register(shutil.rmtree, tmp, True)
    for shape in filter(None, args.shapes.split(",")):
        folder = tmp / shape
        subprocess.run([sys.executable, "-m", "edgeserve", "models", "build-random", shape,
                        "--out", str(folder)], check=True, stdout=subprocess.DEVNULL)
        models.append(folder)
    print(f"machine: {hw.describe()}")
    print(f"prefill {args.prefill_tokens} tokens; decode step at batch {args.batch}; "
          f"median of {args.repeats}", flush=True)
    rows = []
    for model in models:
        got = {}
        for dtype in DTYPES:
            got[dtype] = measure(model, dtype, args)
            r = got[dtype]
            print(f"  {model.name:16s} {dtype:9s} prefill {r['prefill_s'] * 1e3:9.1f} ms   "
                  f"decode step {r['decode_step_s'] * 1e3:8.2f} ms   (load {r['load_s']:.0f} s)",
                  flush=True)
        ratio = {k: got["float32"][k] / got["bfloat16"][k] for k in ("prefill_s", "decode_step_s")}
        print(f"  {model.name:16s} float32 / bfloat16: prefill {ratio['prefill_s']:.2f}x, "
              f"decode step {ratio['decode_step_s']:.2f}x  (above 1: bfloat16 is faster)",
              flush=True)
        rows.append({"model": model.name, **got, "fp32_over_bf16": ratio})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "machine": hw.describe(),
        "prefill_tokens": args.prefill_tokens, "batch": args.batch,
        "decode_tokens": args.decode_tokens, "repeats": args.repeats, "models": rows}, indent=1))
    print(f"JSON: {args.out}")


if __name__ == "__main__":
    main()
