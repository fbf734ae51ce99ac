"""Chunks that travel: at most the chunk size each, big wheels split, hashes that check."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from edgeserve.gpu_harness.pack import pip_platform_args, plan_chunks, write_chunks
from edgeserve.gpu_harness.resolve import TargetEnv


def test_chunks_hold_at_most_the_limit_and_split_only_big_wheels() -> None:
    sizes = {"big.whl": 250, "a.whl": 60, "b.whl": 50, "c.whl": 45, "d.whl": 10}
    chunks = plan_chunks(sizes, chunk_bytes=100)
    assert all(c.bytes_ <= 100 for c in chunks)
    parts = [f for c in chunks for f in c.files if f["wheel"] == "big.whl"]
    assert [(p["part"], p["offset"], p["bytes"]) for p in parts] == [
        (0, 0, 100), (1, 100, 100), (2, 200, 50)]
    assert [c.name for c in chunks] == [f"c{i}" for i in range(1, len(chunks) + 1)]
    whole = sorted(f["name"] for c in chunks for f in c.files if "part" not in f)
    assert whole == ["a.whl", "b.whl", "c.whl", "d.whl"]
    assert len(chunks) == 3 + 2  # three parts; 60+10 and 50+45 first-fit


def test_written_chunks_reassemble_to_the_same_bytes(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    big, small = src / "vllm-0-py3-none-any.whl", src / "simpy-4-py3-none-any.whl"
    big.write_bytes(os.urandom(2500))
    small.write_bytes(os.urandom(300))
    manifest = write_chunks([big, small], tmp_path / "out", chunk_bytes=1000)
    on_disk = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert on_disk == manifest
    joined = b"".join((tmp_path / "out" / c["name"] / f["name"]).read_bytes()
                      for c in manifest["chunks"] for f in c["files"] if f["wheel"] == big.name)
    assert hashlib.sha256(joined).hexdigest() == manifest["wheels"][big.name]["sha256"]
    for c in manifest["chunks"]:
        for f in c["files"]:
            data = (tmp_path / "out" / c["name"] / f["name"]).read_bytes()
            assert hashlib.sha256(data).hexdigest() == f["sha256"] and len(data) <= 1000


def test_pip_is_asked_for_the_hosts_python_and_platforms() -> None:
    args = pip_platform_args(TargetEnv("3.12"))
    assert args[args.index("--python-version") + 1] == "3.12"
    assert "manylinux_2_28_x86_64" in args and "--only-binary=:all:" in args


def test_the_host_side_joins_checks_and_names_missing_chunks(tmp_path: Path) -> None:
    from edgeserve.gpu_harness.install import StagingError, assemble

    src = tmp_path / "src"
    src.mkdir()
    big = src / "vllm-0-py3-none-any.whl"
    big.write_bytes(os.urandom(2500))
    manifest = write_chunks([big], tmp_path / "out", chunk_bytes=1000)
    staged = tmp_path / "staged"
    staged.mkdir()
    (staged / "manifest.json").write_text(json.dumps(manifest))
    for c in manifest["chunks"][:2]:
        for f in c["files"]:
            (staged / f["name"]).write_bytes((tmp_path / "out" / c["name"] / f["name"]).read_bytes())
    with pytest.raises(StagingError, match="c3"):
        assemble(staged)
    last = manifest["chunks"][2]["files"][0]["name"]
    (staged / last).write_bytes(b"corrupt")
    with pytest.raises(StagingError, match="sha256"):
        assemble(staged)
    (staged / last).write_bytes((tmp_path / "out" / "c3" / last).read_bytes())
    (wheel,) = assemble(staged)
    assert wheel.read_bytes() == big.read_bytes()
