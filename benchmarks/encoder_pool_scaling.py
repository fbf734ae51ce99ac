"""Scaling of the preprocessing pool with the vision encoder in its workers (``--encoder onnx``).

``edgeserve serve --encoder onnx`` runs the exported tower (ONNX Runtime, CPU provider, one
intra-op thread per process) in each preprocessing worker right after patchify, so a worker's job
becomes decode → resize → normalize/patchify → encode, and the pool's throughput is the rate of
image *embeddings* the engine can be fed. This measures that rate on many cores: the real pool
(``edgeserve.preproc_pool.PreprocPool``: image bytes in and ``image_embeds`` out through shared
memory), 12 MP JPEG photographs at the model's pixel limit (the tiny model's full 1280-token
budget), for each worker count; in every round the same pool *without* the encoder (ready-sized
pixels out, what vLLM's own tower would then encode) runs too, alternating, so the encoder's
cost shows as a ratio from the same run.

Printed per worker count: images/s with the encoder (median of rounds), speed-up over one worker,
images/s without it, their ratio, and per image the worker's median time before the encoder and
in it (from the jobs' own stage timestamps). Only the repository tree, numpy, Pillow, msgspec
and onnxruntime are needed (no torch, no vLLM), plus the exported graph: carry the model folder
(``models/tiny-qwen2-vl``, 2.5 MB, git-ignored) to the machine::

    python3 benchmarks/encoder_pool_scaling.py --workers 1 2 4 8 16 --images 64 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from preproc_pool_scaling import make_images  # noqa: E402 - the same photographs

from edgeserve.encoder import EncoderSpec  # noqa: E402
from edgeserve.preproc_pool.messages import PreprocParams, SourceKind  # noqa: E402
from edgeserve.preproc_pool.pool import ImageInput, PreprocPool  # noqa: E402


def params_for(model: Path, encoder: bool) -> PreprocParams:
    """The server's worker parameters for ``model`` (its pixel limits), with or without encoder."""
    from models.onnx_encoder import EncoderMeta

    pre = json.loads((model / "preprocessor_config.json").read_text())
    spec = None
    if encoder:
        meta = EncoderMeta.read(model / "onnx")
        spec = EncoderSpec(graph=str(model / "onnx" / "encoder.onnx"),
                           provider="CPUExecutionProvider", provider_options={},
                           intra_op_threads=1, merge_size=meta.merge_size,
                           hidden_size=meta.hidden_size)
    return PreprocParams(min_pixels=int(pre.get("min_pixels", 56 * 56)),
                         max_pixels=int(pre.get("max_pixels", 1280 * 28 * 28)),
                         max_image_pixels=89_000_000, max_image_bytes=64 << 20, encoder=spec)


async def _round(pool: PreprocPool, images: list[bytes]) -> tuple[float, list[Any]]:
    t0 = time.perf_counter()
    done = await asyncio.gather(*(pool.submit(ImageInput(SourceKind.SHM, data=d)) for d in images))
    wall = time.perf_counter() - t0
    for r in done:
        float(r.pixels.reshape(-1)[0])  # touch the result, as the frontend would
    return len(images) / wall, [r.result for r in done]


def run(workers: int, images: list[bytes], rounds: int, model: Path) -> dict[str, Any]:
    loop = asyncio.new_event_loop()
    pools = {k: PreprocPool(workers, params_for(model, k == "encoder"), max_pending=len(images))
             for k in ("encoder", "pixels")}
    out: dict[str, Any] = {"encoder_img_s": [], "pixels_img_s": [], "preproc_s": [], "encode_s": []}
    try:
        for pool in pools.values():
            loop.run_until_complete(pool.start(timeout_s=120.0))
            loop.run_until_complete(_round(pool, images[:workers]))  # warm-up
        for _ in range(rounds):
            rate, results = loop.run_until_complete(_round(pools["encoder"], images))
            out["encoder_img_s"].append(rate)
            out["preproc_s"] += [r.normalize_end_s - r.start_s for r in results]
            out["encode_s"] += [r.encode_end_s - r.normalize_end_s for r in results]
            out["pixels_img_s"].append(loop.run_until_complete(_round(pools["pixels"], images))[0])
    finally:
        for pool in pools.values():
            loop.run_until_complete(pool.close())
        loop.close()
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, default=ROOT / "models" / "tiny-qwen2-vl")
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    p.add_argument("--images", type=int, default=64, help="images per round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--size", default="4000x3000", help="source image WxH")
    p.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = p.parse_args()
    if not (args.model / "onnx" / "encoder.json").is_file():
        print(f"{args.model}/onnx/ has no exported encoder: run `edgeserve models export-encoder "
              f"{args.model}` where torch is installed and carry the folder", file=sys.stderr)
        return 2
    os.environ["OMP_NUM_THREADS"] = "1"  # inherited by the spawned workers
    import onnxruntime

    w, h = (int(v) for v in args.size.lower().split("x"))
    images = make_images(args.images, w, h)
    print(f"{os.cpu_count()} cores; onnxruntime {onnxruntime.__version__} CPU provider, 1 intra-op "
          f"thread per worker; {args.images} photos {w}x{h} JPEG q90 "
          f"({statistics.mean(map(len, images)) / 1e6:.2f} MB mean); model {args.model.name}; "
          f"median of {args.rounds} rounds")
    print(f"{'workers':>7} {'img/s enc':>10} {'speed-up':>9} {'img/s no enc':>12} {'enc/no':>7} "
          f"{'preproc ms':>10} {'encode ms':>10}")
    rows, base = [], None
    for n in args.workers:
        r = run(n, images, args.rounds, args.model)
        rate = statistics.median(r["encoder_img_s"])
        base = base or rate
        row = {"workers": n, "encoder_img_s": rate, "speedup": rate / base,
               "pixels_img_s": statistics.median(r["pixels_img_s"]),
               "ratio": statistics.median(a / b for a, b in
                                          zip(r["encoder_img_s"], r["pixels_img_s"], strict=True)),
               "preproc_ms": statistics.median(r["preproc_s"]) * 1e3,
               "encode_ms": statistics.median(r["encode_s"]) * 1e3}
        rows.append(row)
        print(f"{n:>7} {rate:>10.2f} {row['speedup']:>9.2f} {row['pixels_img_s']:>12.2f} "
              f"{row['ratio']:>7.2f} {row['preproc_ms']:>10.1f} {row['encode_ms']:>10.1f}",
              flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
