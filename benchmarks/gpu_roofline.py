"""Measure a full-size VLM decoder's step times on a GPU and fit the simulator's roofline to them.

The simulator (``sim/core/cloud.py``) predicts a cloud server's decode-step and prefill times from a
roofline: ``max(bytes / (bandwidth·η_bw), flops / (peak·η_c)) + overhead``. This script measures
the same quantities on real hardware so the efficiencies are calibrated rather than guessed.

What runs on the GPU is the language model of Qwen2-VL-7B at full size with random bf16 weights
(28 layers, hidden 3584, 28 query / 4 KV heads of 128, MLP 18944, vocab 152064): a decode step for a
batch of ``b`` sequences with ``ctx`` tokens of KV cache each (QKV, attention over the cache with
``scaled_dot_product_attention``, output projection, SwiGLU MLP, RMSNorm, LM head), captured in a
CUDA graph as vLLM does, so launch overhead does not hide the hardware; and a prefill of ``p``
tokens. No vLLM is needed (it is not installed on the GPU machine).

Usage (on the GPU machine)::

    python benchmarks/gpu_roofline.py measure --out results/gpu_roofline.json

and anywhere, to compare with the simulator's roofline for a GPU profile and fit η_bw, η_c and the
overhead from the measurements::

    python benchmarks/gpu_roofline.py compare results/gpu_roofline.json --profile models/profiles/h200-qwen2-vl-7b.yaml
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class LMShape:
    layers: int = 28
    hidden: int = 3584
    heads: int = 28
    kv_heads: int = 4
    head_dim: int = 128
    intermediate: int = 18944
    vocab: int = 152064

    @property
    def params(self) -> int:
        attn = (
            self.hidden * (self.heads + 2 * self.kv_heads) * self.head_dim
            + self.heads * self.head_dim * self.hidden
        )
        mlp = 3 * self.hidden * self.intermediate
        return self.layers * (attn + mlp) + 2 * self.vocab * self.hidden  # embed + lm_head


def measure(args: argparse.Namespace) -> int:
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    dev = torch.device("cuda")
    dt = torch.bfloat16
    s = LMShape()
    q_out, kv_out = s.heads * s.head_dim, s.kv_heads * s.head_dim
    layers = []
    for _ in range(s.layers):
        layers.append(
            {
                "qkv": torch.randn(q_out + 2 * kv_out, s.hidden, device=dev, dtype=dt) * 0.02,
                "o": torch.randn(s.hidden, q_out, device=dev, dtype=dt) * 0.02,
                "gate_up": torch.randn(2 * s.intermediate, s.hidden, device=dev, dtype=dt) * 0.02,
                "down": torch.randn(s.hidden, s.intermediate, device=dev, dtype=dt) * 0.02,
                "n1": torch.ones(s.hidden, device=dev, dtype=dt),
                "n2": torch.ones(s.hidden, device=dev, dtype=dt),
            }
        )
    lm_head = torch.randn(s.vocab, s.hidden, device=dev, dtype=dt) * 0.02

    def rms(x: Any, w: Any) -> Any:
        return F.rms_norm(x, (x.shape[-1],), w, 1e-6)

    def forward(x: Any, kv: list[tuple[Any, Any]], causal: bool) -> Any:
        # x: (b, t, hidden); kv[i]: (b, kv_heads, ctx, head_dim) caches, attended fully
        b, t, _ = x.shape
        for w, (kc, vc) in zip(layers, kv, strict=True):
            h = rms(x, w["n1"])
            qkv = h @ w["qkv"].T
            q = qkv[..., :q_out].view(b, t, s.heads, s.head_dim).transpose(1, 2)
            if causal:
                k = (
                    qkv[..., q_out : q_out + kv_out]
                    .view(b, t, s.kv_heads, s.head_dim)
                    .transpose(1, 2)
                )
                v = qkv[..., q_out + kv_out :].view(b, t, s.kv_heads, s.head_dim).transpose(1, 2)
                a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            else:
                a = F.scaled_dot_product_attention(q, kc, vc, enable_gqa=True)
            x = x + a.transpose(1, 2).reshape(b, t, q_out) @ w["o"].T
            h = rms(x, w["n2"])
            gu = h @ w["gate_up"].T
            x = x + (F.silu(gu[..., : s.intermediate]) * gu[..., s.intermediate :]) @ w["down"].T
        return x[:, -1] @ lm_head.T

    def time_graph(fn: Any, iters: int) -> float:
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        g.replay()
        torch.cuda.synchronize()
        times = []
        for _ in range(iters):
            t0 = time.perf_counter()
            g.replay()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        times.sort()
        return times[len(times) // 2]

    results: dict[str, Any] = {
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "shape": asdict(s),
        "params": s.params,
        "decode": [],
        "prefill": [],
    }
    with torch.inference_mode():
        for ctx in args.contexts:
            for b in args.batches:
                kv_bytes = 2 * s.layers * b * s.kv_heads * ctx * s.head_dim * 2
                if kv_bytes > args.max_kv_gb * 1e9:
                    continue
                kv = [
                    (
                        torch.randn(b, s.kv_heads, ctx, s.head_dim, device=dev, dtype=dt),
                        torch.randn(b, s.kv_heads, ctx, s.head_dim, device=dev, dtype=dt),
                    )
                    for _ in range(s.layers)
                ]
                x = torch.randn(b, 1, s.hidden, device=dev, dtype=dt)
                step = time_graph(lambda x=x, kv=kv: forward(x, kv, causal=False), args.iters)
                results["decode"].append({"batch": b, "context": ctx, "step_s": step})
                print(f"decode  batch {b:4d}  ctx {ctx:5d}  {step * 1e3:8.3f} ms", flush=True)
                del kv
                torch.cuda.empty_cache()
        for p in args.prefills:
            x = torch.randn(1, p, s.hidden, device=dev, dtype=dt)
            step = time_graph(
                lambda x=x: forward(x, [(None, None)] * s.layers, causal=True), args.iters
            )
            results["prefill"].append({"tokens": p, "time_s": step})
            print(f"prefill tokens {p:5d}  {step * 1e3:8.3f} ms", flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    print(f"wrote {args.out}")
    return 0


def compare(args: argparse.Namespace) -> int:
    """Print measured vs the simulator's roofline, and the efficiencies that fit best."""
    import numpy as np

    from sim.core.cloud import Roofline, kv_bytes_per_token, weight_bytes
    from sim.scenario.config import load_cloud_profile

    data = json.loads(Path(args.results).read_text())
    profile = load_cloud_profile(args.profile)
    roof = Roofline(profile)
    w_b, kv_b = weight_bytes(profile.model), kv_bytes_per_token(profile.model)
    bw = profile.gpu.mem_bandwidth_gb_s * 1e9
    peak = profile.gpu.compute_tflops * 1e12
    flops_tok = 2.0 * profile.model.params_b * 1e9

    rows = [(d["batch"], d["context"], d["step_s"]) for d in data["decode"]]
    # Fit step = max(bytes/(bw·η_bw), flops/(peak·η_c)) + overhead: memory-bound points fix η_bw
    # and the overhead by least squares on bytes; compute-bound ones fix η_c.
    mem_bytes = np.array([w_b + kv_b * b * c for b, c, _ in rows])
    flops = np.array([flops_tok * b for b, _, _ in rows])
    meas = np.array([t for _, _, t in rows])
    best = (math.inf, 0.0, 0.0, 0.0)
    for eta_bw in np.linspace(0.3, 1.0, 71):
        for eta_c in np.linspace(0.2, 1.0, 81):
            pred0 = np.maximum(mem_bytes / (bw * eta_bw), flops / (peak * eta_c))
            ovh = max(0.0, float(np.median(meas - pred0)))
            err = float(np.mean(np.abs(np.log((pred0 + ovh) / meas))))
            if err < best[0]:
                best = (err, float(eta_bw), float(eta_c), ovh)
    err, eta_bw, eta_c, ovh = best

    print(f"GPU measured: {data['gpu']}   profile: {args.profile}")
    print(
        f"{'batch':>6} {'ctx':>6} {'measured ms':>12} {'profile ms':>11} {'ratio':>6} {'fitted ms':>10} {'ratio':>6}"
    )
    for (b, c, t), mb, fl in zip(rows, mem_bytes, flops, strict=True):
        prof = roof.step_s(b, b * c)
        fit = max(mb / (bw * eta_bw), fl / (peak * eta_c)) + ovh
        print(
            f"{b:6d} {c:6d} {t * 1e3:12.3f} {prof * 1e3:11.3f} {prof / t:6.2f} {fit * 1e3:10.3f} {fit / t:6.2f}"
        )
    for d in data["prefill"]:
        p, t = d["tokens"], d["time_s"]
        prof = roof.prefill_tokens_s(p)
        print(
            f"prefill {p:5d} tokens: measured {t * 1e3:.2f} ms, profile {prof * 1e3:.2f} ms ({prof / t:.2f}×)"
        )
    print(
        f"\nbest fit: bandwidth_efficiency={eta_bw:.2f} compute_efficiency={eta_c:.2f} "
        f"step_overhead_s={ovh:.5f}  (mean |log error| {err:.3f})"
    )
    print(
        f"profile : bandwidth_efficiency={profile.server.bandwidth_efficiency:.2f} "
        f"compute_efficiency={profile.server.compute_efficiency:.2f} "
        f"step_overhead_s={profile.server.step_overhead_s:.5f}"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="measure step times on the local GPU (needs CUDA)")
    m.add_argument("--out", default="results/gpu_roofline.json")
    m.add_argument("--batches", type=int, nargs="+", default=[1, 4, 16, 32, 64, 128, 256])
    m.add_argument("--contexts", type=int, nargs="+", default=[512, 2048])
    m.add_argument("--prefills", type=int, nargs="+", default=[256, 1024, 4096])
    m.add_argument("--iters", type=int, default=20)
    m.add_argument("--max-kv-gb", type=float, default=60.0)
    m.set_defaults(func=measure)
    c = sub.add_parser("compare", help="compare measurements with a simulator cloud profile")
    c.add_argument("results")
    c.add_argument("--profile", required=True)
    c.set_defaults(func=compare)
    args = ap.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
