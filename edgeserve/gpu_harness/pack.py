"""Download the planned wheels for the host's platform and pack them into chunks that travel.

A run carries at most 64 MiB, the working tree (about 10 MiB) included, so the wheels go in
chunks of at most ``chunk_bytes`` (52 MiB):
small wheels are packed together first-fit by size, a wheel larger than a chunk (vLLM's is
290 MiB) is split into parts that each fill a chunk of their own. ``manifest.json`` lists every
wheel with its sha256 and, for a split one, its parts in order with theirs; the host side
(``scripts/gpu/install_wheels.py``) checks every hash, joins the parts and installs.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement

from edgeserve.gpu_harness.resolve import Dist, TargetEnv

MiB = 1024 * 1024
CHUNK_BYTES = 52 * MiB  # 64 MiB per run, less the working tree that travels with it
# the host's glibc is 2.39; wheels tagged for any older manylinux install there
MANYLINUX = (*(f"manylinux_2_{n}_x86_64" for n in range(39, 16, -1)), "manylinux2014_x86_64",
             "manylinux1_x86_64", "linux_x86_64")


def pip_platform_args(env: TargetEnv) -> list[str]:
    """pip's flags that pick wheels for the host instead of this machine."""
    args = ["--only-binary=:all:", "--python-version", env.python_version,
            "--implementation", "cp"]
    for tag in MANYLINUX:
        args += ["--platform", tag.replace("x86_64", env.machine)]
    return args


class PipReportSource:
    """Wheel metadata from pip's resolver in dry-run mode for the host (``--report``): each
    requirement's newest matching wheel, metadata only (PEP 658), nothing downloaded."""

    def __init__(self, env: TargetEnv) -> None:
        self.env = env

    def best(self, requirements: list[Requirement]) -> list[Dist]:
        with tempfile.TemporaryDirectory() as tmp:
            report = Path(tmp) / "report.json"
            cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--dry-run", "--no-deps",
                   "--ignore-installed", "--target", str(Path(tmp) / "t"), "--report",
                   str(report), *pip_platform_args(self.env), *map(str, requirements)]
            subprocess.run(cmd, check=True)
            items = json.loads(report.read_text())["install"]
        return [Dist(i["metadata"]["name"], i["metadata"]["version"],
                     tuple(i["metadata"].get("requires_dist") or ())) for i in items]


def download(dists: list[Dist], env: TargetEnv, dest: Path) -> list[Path]:
    """``pip download`` the exact wheels of ``dists`` for the host into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--dest", str(dest),
           *pip_platform_args(env), *(f"{d.name}=={d.version}" for d in dists)]
    subprocess.run(cmd, check=True)
    return sorted(dest.glob("*.whl"))


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(4 * MiB), b""):
            h.update(block)
    return h.hexdigest()


@dataclass(slots=True)
class Chunk:
    """One folder that travels in one run: whole wheels or one part of a split wheel."""

    name: str
    files: list[dict[str, Any]] = field(default_factory=list)

    @property
    def bytes_(self) -> int:
        return sum(int(f["bytes"]) for f in self.files)


def plan_chunks(sizes: dict[str, int], chunk_bytes: int = CHUNK_BYTES) -> list[Chunk]:
    """Chunks for wheels of ``sizes`` (file name → bytes): a wheel above ``chunk_bytes`` is
    split into parts (``NAME.part0`` …) of one chunk each; the others are packed first-fit,
    largest first. Every chunk holds at most ``chunk_bytes``."""
    chunks: list[Chunk] = []
    small: list[tuple[str, int]] = []
    for name, size in sorted(sizes.items(), key=lambda kv: (-kv[1], kv[0])):
        if size <= chunk_bytes:
            small.append((name, size))
            continue
        for k, start in enumerate(range(0, size, chunk_bytes)):
            part = min(chunk_bytes, size - start)
            chunks.append(Chunk(f"c{len(chunks) + 1}", [
                {"name": f"{name}.part{k}", "wheel": name, "part": k, "offset": start,
                 "bytes": part}]))
    open_chunks: list[Chunk] = []
    for name, size in small:
        home = next((c for c in open_chunks if c.bytes_ + size <= chunk_bytes), None)
        if home is None:
            home = Chunk("")
            open_chunks.append(home)
        home.files.append({"name": name, "wheel": name, "bytes": size})
    for c in open_chunks:
        c.name = f"c{len(chunks) + 1}"
        chunks.append(c)
    return chunks


def write_chunks(wheels: list[Path], out: Path, chunk_bytes: int = CHUNK_BYTES,
                 meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """Copy (or split) ``wheels`` into ``out/c1`` … and write ``out/manifest.json``."""
    by_name = {w.name: w for w in wheels}
    chunks = plan_chunks({w.name: w.stat().st_size for w in wheels}, chunk_bytes)
    shutil.rmtree(out, ignore_errors=True)
    for c in chunks:
        folder = out / c.name
        folder.mkdir(parents=True)
        for f in c.files:
            src = by_name[f["wheel"]]
            if "part" in f:
                with open(src, "rb") as r:
                    r.seek(int(f["offset"]))
                    (folder / f["name"]).write_bytes(r.read(int(f["bytes"])))
            else:
                shutil.copyfile(src, folder / f["name"])
            f["sha256"] = sha256(folder / f["name"])
    manifest = {
        **(meta or {}),
        "chunk_bytes": chunk_bytes,
        "wheels": {w.name: {"bytes": w.stat().st_size, "sha256": sha256(w)} for w in wheels},
        "chunks": [{"name": c.name, "bytes": c.bytes_, "files": c.files} for c in chunks],
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return manifest
