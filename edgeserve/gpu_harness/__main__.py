"""``python -m edgeserve.gpu_harness plan|pack``: the wheels a GPU host lacks, packed to travel.

    python -m edgeserve.gpu_harness plan --pip-list HOST_PIP_LIST [--vllm 0.26.0]
    python -m edgeserve.gpu_harness pack --pip-list HOST_PIP_LIST --out .gpu/wheels

``plan`` prints what would be carried, what the host already has, which pins are not followed
and what is left out; ``pack`` also downloads the wheels for the host (``pip download``) and
writes chunks of at most 52 MiB with ``manifest.json`` (see :mod:`edgeserve.gpu_harness.pack`).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from packaging.requirements import Requirement

from edgeserve.gpu_harness.pack import CHUNK_BYTES, PipReportSource, download, write_chunks
from edgeserve.gpu_harness.resolve import (
    EDGESERVE_LEAVE_OUT,
    VLLM_LEAVE_OUT,
    VLLM_PINS,
    Dist,
    MetadataSource,
    Plan,
    RecordedSource,
    TargetEnv,
    edgeserve_requirements,
    read_pip_list,
    resolve,
)

ROOT = Path(__file__).resolve().parents[2]
GPU_EXTRAS = ("nvidia-ml-py",)


class Recorder:
    """A source that remembers what it answered (to record a table for the tests)."""

    def __init__(self, inner: MetadataSource) -> None:
        self.inner = inner
        self.table: dict[str, list[dict[str, object]]] = {}

    def best(self, requirements: list[Requirement]) -> list[Dist]:
        out = self.inner.best(requirements)
        for d in out:
            self.table.setdefault(d.key, []).append({"version": d.version,
                                                     "requires": list(d.requires)})
        return out


def make_plan(args: argparse.Namespace, source: MetadataSource) -> Plan:
    installed = read_pip_list(Path(args.pip_list).read_text())
    # nvidia-ml-py: NVML for edgeserve's own GPU samples (edgeserve_gpu_busy_seconds)
    roots = [f"vllm=={args.vllm}", *edgeserve_requirements(ROOT / "pyproject.toml"),
             *GPU_EXTRAS]
    return resolve(roots, installed, source, env=TargetEnv(args.python),
                   leave_out=(*VLLM_LEAVE_OUT, *EDGESERVE_LEAVE_OUT), pins=VLLM_PINS)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m edgeserve.gpu_harness", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=["plan", "pack"])
    p.add_argument("--pip-list", required=True, type=Path,
                   help="the host's `pip list` or `pip freeze` output")
    p.add_argument("--vllm", default="0.26.0", help="vLLM release to carry (default 0.26.0)")
    p.add_argument("--python", default="3.12", help="the host's Python major.minor")
    p.add_argument("--out", type=Path, default=Path(".gpu/wheels"),
                   help="chunks and manifest (pack; default .gpu/wheels, git-ignored)")
    p.add_argument("--chunk-mib", type=int, default=CHUNK_BYTES // 2**20,
                   help="the most a chunk holds, MiB (default %(default)s: 64 MiB carried per "
                        "run, less the working tree that travels with it)")
    p.add_argument("--record", type=Path, default=None,
                   help="also write the wheel metadata consulted to this JSON file")
    p.add_argument("--from-record", type=Path, default=None,
                   help="resolve from a recorded metadata table instead of asking pip")
    args = p.parse_args(argv)
    if not 1 <= args.chunk_mib <= 63:
        p.error(f"--chunk-mib must be 1 … 63, got {args.chunk_mib}")
    if not args.pip_list.exists():
        print(f"edgeserve gpu_harness: no file {args.pip_list}", file=sys.stderr)
        return 2
    env = TargetEnv(args.python)
    inner: MetadataSource = (RecordedSource.load(args.from_record) if args.from_record
                             else PipReportSource(env))
    source = Recorder(inner)
    plan = make_plan(args, source)
    if args.record:
        args.record.write_text(json.dumps(source.table, indent=1, sort_keys=True))
    print(json.dumps(plan.as_dict(), indent=1))
    if args.action == "plan":
        return 1 if plan.conflicts else 0
    with tempfile.TemporaryDirectory() as tmp:
        wheels = download(list(plan.carry.values()), env, Path(tmp))
        manifest = write_chunks(wheels, args.out, args.chunk_mib * 2**20,
                                meta={"vllm": args.vllm, "python": args.python,
                                      "plan": plan.as_dict()})
    total = sum(int(w["bytes"]) for w in manifest["wheels"].values())
    print(f"{len(manifest['wheels'])} wheels, {total / 2**20:.1f} MiB in "
          f"{len(manifest['chunks'])} chunks under {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
