"""Preprocessing speed: mm_preproc against the model's own preprocessing, on one core.

For each image mix and pixel budget, every contender processes the same in-memory encoded
images, interleaved per image in rotating order (A B C …, then B C … A, …), and each round
yields one ratio per reference (reference time / our time over the whole mix). The table
shows images/s and the median ratio with min–max over the rounds. Contenders:

* ``ours``            ``mm_preproc.preprocess(bytes)`` — auto backend, fast decode
* ``ours-faithful``   the same with ``fast_decode=False`` (bit-faithful path)
* ``ours-uint8``      the same with ``output="uint8"`` (engine normalizes on the device)
* ``ours-numpy``      ``ours`` without the optional C kernel (``mm_preproc._fastpatch``), when
                      it is built: the numpy/OpenCV patchify + normalize
* ``hf-pil``          Pillow decode + transformers' ``Qwen2VLImageProcessorPil``
* ``hf-torchvision``  Pillow decode + transformers' ``Qwen2VLImageProcessor`` (torchvision)
* ``qwen-vl-utils``   ``fetch_image`` (decode, smart_resize, resize) + ``Qwen2VLImageProcessorPil``
* ``decode-floor``    decoding alone, with the decoder and DCT scale ``ours`` picked

Model family: ``--family`` (``qwen2_vl`` by default, ``qwen2_5_vl``, ``qwen3_vl``, ``qwen3_5``)
or ``--model DIR`` (the folder's spec, :func:`mm_preproc.read_spec`) sets the patch geometry,
mean/std and ``min_pixels`` of every contender: ours gets the spec, the transformers processors
are configured with it (every Qwen-VL family uses ``Qwen2VLImageProcessor`` with its own
numbers), qwen-vl-utils gets the spec's patch size.

Mixes are built at run time from scikit-image's sample photographs, upscaled with Lanczos:
12 MP JPEG (q90), 1080p JPEG (q90), 4K PNG, 640×480 JPEG. Budgets, in image tokens of the
family (``max_pixels`` = tokens × factor²): 1280 (what a server typically sets; 1280·28² for
Qwen2-VL, 1280·32² for Qwen3-VL) and 16384 (the Qwen2-VL checkpoints' preprocessor_config.json).

Run: ``python benchmarks/preproc.py --out results/preproc.json`` (or ``edgeserve bench
preproc --out …``). The script pins itself to one core (``--core``) and one thread per library.
``--no-pool`` disables mm_preproc's buffer pool, so that every output of ours is fresh memory
(as for a caller that keeps all its results alive). ``--no-native`` makes every contender of
ours use the numpy/OpenCV path instead of the C kernel.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mm_preproc.spec import PreprocSpec

_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS")
_CHILD_FLAG = "MM_PREPROC_BENCH_PINNED"


def _pin_and_reexec(core: int) -> None:
    """Pin to one core and one thread per library *before* numpy/torch/OpenCV start their pools.

    Thread pools read their size when the library loads, so the process re-executes itself
    with the variables set (also when started through ``edgeserve bench preproc``).
    """
    if os.environ.get(_CHILD_FLAG) == "1":
        return
    env = dict(os.environ, **{v: "1" for v in _THREAD_VARS}, **{_CHILD_FLAG: "1"})
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {core})
    script = str(Path(__file__).resolve())
    os.execve(sys.executable, [sys.executable, script, *sys.argv[1:]], env)


MIXES: dict[str, tuple[int, int, str]] = {
    "12MP JPEG": (4000, 3000, "JPEG"),
    "1080p JPEG": (1920, 1080, "JPEG"),
    "4K PNG": (3840, 2160, "PNG"),
    "640x480 JPEG": (640, 480, "JPEG"),
}
BUDGETS: dict[str, int] = {"1280 tok": 1280, "16384 tok": 16384}  # image tokens of the family
PHOTOS = ("astronaut", "coffee", "chelsea", "rocket", "hubble_deep_field")
REFERENCES = ("hf-pil", "hf-torchvision", "qwen-vl-utils", "ours-faithful", "decode-floor")


@dataclass(slots=True)
class Row:
    family: str
    mix: str
    budget: str
    max_pixels: int
    images: int
    rounds: int
    ours_images_per_s: float
    images_per_s: dict[str, float] = field(default_factory=dict)
    # reference time / our time, per round: >1 means ours is faster
    speedup_median: dict[str, float] = field(default_factory=dict)
    speedup_min: dict[str, float] = field(default_factory=dict)
    speedup_max: dict[str, float] = field(default_factory=dict)
    # time(contender) / time(decode floor), per round, for ours and ours-uint8
    floor_ratios: dict[str, list[float]] = field(default_factory=dict)
    decode_scale: list[int] = field(default_factory=list)
    decoder: str = ""
    stage_ms: dict[str, float] = field(default_factory=dict)


def build_mix(name: str, photos: tuple[str, ...], folder: Path) -> list[bytes]:
    """Encode each photo at the mix's size and format into ``folder``; return the bytes."""
    import numpy as np
    import skimage.data
    from PIL import Image

    width, height, fmt = MIXES[name]
    payloads = []
    for photo in photos:
        array = np.ascontiguousarray(getattr(skimage.data, photo)())
        im = Image.fromarray(array).convert("RGB").resize((width, height), Image.Resampling.LANCZOS)
        path = folder / f"{photo}_{width}x{height}.{fmt.lower()}"
        im.save(path, fmt, **({"quality": 90} if fmt == "JPEG" else {}))
        payloads.append(path.read_bytes())
    return payloads


def contenders(
    spec: PreprocSpec, max_pixels: int, torchvision_ok: bool, all_backends: bool
) -> dict[str, Callable[[bytes], object]]:
    import cv2
    from PIL import Image
    from qwen_vl_utils.vision_process import fetch_image

    import mm_preproc
    from mm_preproc import decode as mm_decode
    from mm_preproc import opencv_decode, patchify
    from mm_preproc.options import Backend
    from mm_preproc.pipeline import decoder_for
    from mm_preproc.reference import processor

    lo = spec.min_pixels
    size = {"shortest_edge": lo, "longest_edge": max_pixels}
    hf_pil = processor("pil", spec)
    hf_tv = processor("torchvision", spec) if torchvision_ok else None

    def pil_rgb(data: bytes) -> Image.Image:
        return Image.open(io.BytesIO(data)).convert("RGB")

    def floor(data: bytes) -> object:
        """Decode only, as ours does: same decoder, same DCT scale."""
        im, header = mm_decode.open_bytes(data)
        th, tw = mm_preproc.target_size(header.height, header.width, max_pixels=max_pixels,
                                        spec=spec)
        scale = mm_decode.draft_scale(header, th, tw)
        if decoder_for(header, Backend.AUTO, im is not None) is Backend.OPENCV:
            return opencv_decode.decode_opencv(data, header, scale)
        assert im is not None
        return mm_decode.decode(im, header, scale)

    table: dict[str, Callable[[bytes], object]] = {
        "ours": lambda d: mm_preproc.preprocess(d, max_pixels=max_pixels, spec=spec),
        "ours-faithful": lambda d: mm_preproc.preprocess(
            d, max_pixels=max_pixels, fast_decode=False, spec=spec
        ),
        "ours-uint8": lambda d: mm_preproc.preprocess(
            d, max_pixels=max_pixels, output="uint8", spec=spec
        ),
        "hf-pil": lambda d: hf_pil(images=pil_rgb(d), size=size, return_tensors="np"),
        "qwen-vl-utils": lambda d: hf_pil(
            images=fetch_image(
                {"image": Image.open(io.BytesIO(d)), "min_pixels": lo, "max_pixels": max_pixels},
                image_patch_size=spec.patch_size,
            ),
            size=size,
            return_tensors="np",
        ),
        "decode-floor": floor,
    }
    if patchify.native_available():

        def ours_numpy(data: bytes) -> object:
            old = patchify.set_native(False)
            try:
                return mm_preproc.preprocess(data, max_pixels=max_pixels, spec=spec)
            finally:
                patchify.set_native(old)

        table["ours-numpy"] = ours_numpy
    if all_backends:
        table["ours-pillow"] = lambda d: mm_preproc.preprocess(
            d, max_pixels=max_pixels, backend="pillow", spec=spec
        )
        table["ours-opencv"] = lambda d: mm_preproc.preprocess(
            d, max_pixels=max_pixels, backend="opencv", spec=spec
        )
    if hf_tv is not None:
        table["hf-torchvision"] = lambda d: hf_tv(images=pil_rgb(d), size=size, return_tensors="pt")
    cv2.setNumThreads(1)
    return table


def measure(
    spec: PreprocSpec,
    mix: str,
    budget: str,
    payloads: list[bytes],
    rounds: int,
    torchvision_ok: bool,
    all_backends: bool = False,
) -> Row:
    import mm_preproc

    max_pixels = spec.budget(BUDGETS[budget])
    table = contenders(spec, max_pixels, torchvision_ok, all_backends)
    names = list(table)
    for fn in table.values():  # warm-up: imports, lazy inits, caches
        fn(payloads[0])
    # Interleave at the finest grain: every contender processes image i before any moves on to
    # image i+1, in an order that rotates per image, so load changes on a shared machine hit
    # all contenders alike. times[name][r] = that contender's time for the mix in round r.
    times: dict[str, list[float]] = {n: [0.0] * rounds for n in names}
    for r in range(rounds):
        for i, data in enumerate(payloads):
            shift = (r * len(payloads) + i) % len(names)
            for name in names[shift:] + names[:shift]:
                start = time.perf_counter()
                table[name](data)
                times[name][r] += time.perf_counter() - start
    ours = times["ours"]
    row = Row(
        spec.family.value, mix, budget, max_pixels, len(payloads), rounds,
        len(payloads) / statistics.median(ours),
    )
    for name in names:
        row.images_per_s[name] = len(payloads) / statistics.median(times[name])
        if name == "ours":
            continue
        ratios = [ref / own for ref, own in zip(times[name], ours, strict=True)]
        row.speedup_median[name] = statistics.median(ratios)
        row.speedup_min[name] = min(ratios)
        row.speedup_max[name] = max(ratios)
    for name in ("ours", "ours-uint8"):
        row.floor_ratios[name] = [
            own / floor for own, floor in zip(times[name], times["decode-floor"], strict=True)
        ]
    stage_sums: dict[str, float] = {}
    for data in payloads:
        res = mm_preproc.preprocess(data, max_pixels=max_pixels, spec=spec)
        row.decode_scale.append(round((res.timings.pixels_in / res.timings.pixels_decoded) ** 0.5))
        row.decoder = res.decoder.value
        for k, v in res.timings.as_dict().items():
            if k.endswith("_s"):
                stage_sums[k] = stage_sums.get(k, 0.0) + v * 1e3 / len(payloads)
    row.stage_ms = {k: round(v, 2) for k, v in stage_sums.items()}
    return row


def _ratio(row: Row, name: str) -> str:
    if name not in row.speedup_median:
        return "n/a"
    return (
        f"{row.speedup_median[name]:.2f} ({row.speedup_min[name]:.2f}–{row.speedup_max[name]:.2f})"
    )


def _over_floor(row: Row, name: str) -> str:
    """time(name) / time(decode floor): median (min–max) over the rounds."""
    per_round = row.floor_ratios.get(name, [])
    if not per_round:
        return "n/a"
    return f"{statistics.median(per_round):.2f} ({min(per_round):.2f}–{max(per_round):.2f})"


def format_table(rows: list[Row]) -> str:
    head = (
        "| family | mix | max_pixels | ours img/s | × HF PIL | × HF torchvision | × qwen-vl-utils+HF "
        "| × ours faithful | ours ÷ decode floor | ours-uint8 ÷ decode floor | DCT scale |"
    )
    lines = [head, "|" + "---|" * 11]
    for r in rows:
        floor_txt = _over_floor(r, "ours")
        uint8_txt = _over_floor(r, "ours-uint8")
        scales = "/".join(sorted({f"1/{s}" for s in r.decode_scale}))
        lines.append(
            f"| {r.family} | {r.mix} | {r.budget} | {r.ours_images_per_s:.1f} | {_ratio(r, 'hf-pil')} | "
            f"{_ratio(r, 'hf-torchvision')} | {_ratio(r, 'qwen-vl-utils')} | "
            f"{_ratio(r, 'ours-faithful')} | {floor_txt} | {uint8_txt} | {scales} |"
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("results/preproc.json"), help="JSON output")
    p.add_argument("--rounds", type=int, default=5, help="timed rounds per mix and budget")
    p.add_argument("--photos", type=int, default=4, help=f"photos per mix (1..{len(PHOTOS)})")
    p.add_argument("--core", type=int, default=0, help="CPU core to pin to")
    p.add_argument("--mix", action="append", choices=list(MIXES), help="only these mixes")
    p.add_argument("--budget", action="append", choices=list(BUDGETS), help="only these budgets")
    p.add_argument("--family", default="qwen2_vl",
                   choices=["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5"],
                   help="model family whose preprocessing all contenders do (default: qwen2_vl)")
    p.add_argument("--model", type=Path, default=None, metavar="DIR",
                   help="take the spec from this model folder instead (overrides --family)")
    p.add_argument(
        "--no-pool",
        action="store_true",
        help="disable mm_preproc's buffer pool (every output is fresh memory, as when a caller "
        "keeps all its results alive)",
    )
    p.add_argument(
        "--no-native",
        action="store_true",
        help="do not use mm_preproc's optional C kernel (numpy/OpenCV patchify + normalize)",
    )
    p.add_argument(
        "--all-backends",
        action="store_true",
        help="also time ours with backend=pillow and backend=opencv (see the JSON)",
    )
    args = p.parse_args(argv)
    if not 1 <= args.photos <= len(PHOTOS):
        p.error(f"--photos must be between 1 and {len(PHOTOS)}")
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    _pin_and_reexec(args.core)
    import cv2
    import PIL
    import torch

    import mm_preproc
    from mm_preproc.reference import torchvision_available

    torch.set_num_threads(1)
    cv2.setNumThreads(1)
    if args.no_pool:
        from mm_preproc.buffers import set_pool_limit

        set_pool_limit(0)
    if args.no_native:
        from mm_preproc.patchify import set_native

        set_native(False)
    from mm_preproc.patchify import native_available
    from mm_preproc.spec import PRESETS, Family, SpecError, read_spec

    try:
        spec = read_spec(args.model) if args.model is not None else PRESETS[Family(args.family)]
    except SpecError as e:
        print(f"benchmarks/preproc.py: {e}", file=sys.stderr)
        return 2
    tv_ok = torchvision_available()
    affinity = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else "n/a"
    env = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "affinity": affinity,
        "threads": {v: os.environ.get(v) for v in _THREAD_VARS},
        "torch_threads": torch.get_num_threads(),
        "opencv_threads": cv2.getNumThreads(),
        "pillow": PIL.__version__,
        "pillow_simd": mm_preproc.pillow_is_simd(),
        "opencv": cv2.__version__,
        "torchvision_backend": tv_ok,
        "buffer_pool": not args.no_pool,
        "native_kernel": native_available(),
        "spec": {k: (v.value if k == "family" else v) for k, v in asdict(spec).items()},
    }
    print(f"# environment: {json.dumps(env)}", flush=True)
    photos = PHOTOS[: args.photos]
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="mm_preproc_bench_") as tmp:
        for mix in args.mix or list(MIXES):
            payloads = build_mix(mix, photos, Path(tmp))
            for budget in args.budget or list(BUDGETS):
                row = measure(spec, mix, budget, payloads, args.rounds, tv_ok, args.all_backends)
                rows.append(row)
                print(
                    f"# {mix} @ {budget}: ours {row.ours_images_per_s:.1f} img/s; "
                    f"stages (ms/img) {row.stage_ms}",
                    flush=True,
                )
                print("#", format_table([row]).splitlines()[-1], flush=True)
                if "ours-numpy" in row.speedup_median:
                    print(f"# × ours without the C kernel: {_ratio(row, 'ours-numpy')}", flush=True)
    table = format_table(rows)
    print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {"environment": env, "rows": [asdict(r) for r in rows], "table": table}, indent=2
        )
    )
    print(f"# wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
