"""Which wheels a host lacks for a pinned vLLM and edgeserve, given its ``pip list``.

The host's installed packages win: its torch, numpy and CUDA libraries were built together and
are not replaced, also where vLLM pins another version (the pin is reported, not followed — on
the H200 host vLLM 0.26.0 ran with numba 0.68 against its pin of 0.65). Dependencies declared
but not needed to serve a Qwen-VL model (FlashInfer, TileLang, video decoders, tracing exporters,
…) are left out by name, and the plan says which ones. Everything else is resolved breadth-first
from the roots: each missing requirement gets the newest wheel for the host's platform that
satisfies it (or a pinned version), and its own requirements are followed.

Wheel metadata comes from a :class:`MetadataSource`: pip's resolver run in dry-run mode for the
host's platform (:class:`edgeserve.gpu_harness.pack.PipReportSource`, metadata only, nothing
downloaded), or a recorded table (:class:`RecordedSource`, the tests).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

# declared by vLLM 0.26 but not needed to serve a Qwen-VL model on one GPU (measured on the H200
# host: it served with all of them absent); a name ending in "*" is a prefix
VLLM_LEAVE_OUT = (
    "flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache", "tilelang",
    "nvidia-cutlass-dsl", "quack-kernels", "tokenspeed-mla", "humming-kernels", "torchcodec",
    "pynvvideocodec", "fastsafetensors", "nvidia-cudnn-frontend", "nvtx", "anthropic", "mcp",
    "opentelemetry-*", "ray", "runai-model-streamer", "tensorizer", "cupy-*",
)
# edgeserve's own declared dependencies that serving does not import (model export, reference
# preprocessing)
EDGESERVE_LEAVE_OUT = ("onnx", "onnxscript", "qwen-vl-utils")
# versions that install beside the host's packages where the newest does not (xgrammar 0.2.8
# needs apache-tvm-ffi >= 0.1.11 while vLLM 0.26.0 pins 0.1.10)
VLLM_PINS = {"xgrammar": "0.2.7"}


@dataclass(frozen=True, slots=True)
class TargetEnv:
    """The host's interpreter and platform, for markers and wheel tags."""

    python_version: str = "3.12"  # major.minor
    machine: str = "x86_64"

    def markers(self, extra: str = "") -> dict[str, str]:
        return {"python_version": self.python_version,
                "python_full_version": f"{self.python_version}.0",
                "platform_machine": self.machine, "sys_platform": "linux",
                "platform_system": "Linux", "os_name": "posix",
                "implementation_name": "cpython", "platform_python_implementation": "CPython",
                "platform_release": "", "platform_version": "", "extra": extra}


@dataclass(frozen=True, slots=True)
class Dist:
    """A wheel's name, version and declared requirements (``Requires-Dist``)."""

    name: str
    version: str
    requires: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return canonicalize_name(self.name)


class MetadataSource(Protocol):
    def best(self, requirements: list[Requirement]) -> list[Dist]:
        """For each requirement, the newest wheel for the host that satisfies it."""
        ...


@dataclass(frozen=True, slots=True)
class Kept:
    """An installed package kept at the host's version although a requirement asks another."""

    name: str
    installed: str
    wanted: str
    by: str

    def as_dict(self) -> dict[str, str]:
        return {"name": self.name, "installed": self.installed, "wanted": self.wanted,
                "by": self.by}


@dataclass(slots=True)
class Plan:
    """What to carry, what the host already has, and what was left out on purpose."""

    carry: dict[str, Dist] = field(default_factory=dict)
    satisfied: dict[str, str] = field(default_factory=dict)  # name → host version
    kept: list[Kept] = field(default_factory=list)
    left_out: dict[str, str] = field(default_factory=dict)  # name → required by
    conflicts: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {"carry": {d.key: d.version for d in self.carry.values()},
                "satisfied_by_host": self.satisfied,
                "kept_against_pin": [k.as_dict() for k in self.kept],
                "left_out": self.left_out, "conflicts": self.conflicts}


def read_pip_list(text: str) -> dict[str, Version]:
    """``pip list`` (columns) or ``pip freeze`` (``name==version``) output → name → version."""
    out: dict[str, Version] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "-")) or line.lower().startswith("package "):
            continue
        name, sep, version = line.partition("==")
        if not sep:
            parts = line.split()
            if len(parts) < 2:
                continue
            name, version = parts[0], parts[1]
        try:
            out[canonicalize_name(name.strip())] = Version(version.strip())
        except ValueError:
            continue  # "-e" lines, local paths
    return out


def _left_out(name: str, patterns: Iterable[str]) -> bool:
    return any(name == p or (p.endswith("*") and name.startswith(p[:-1])) for p in patterns)


def _applies(req: Requirement, env: TargetEnv, extras: Iterable[str]) -> bool:
    if req.marker is None:
        return True
    return any(req.marker.evaluate(env.markers(e)) for e in ("", *extras))


def resolve(roots: list[str], installed: dict[str, Version], source: MetadataSource, *,
            env: TargetEnv | None = None, leave_out: Iterable[str] = (),
            pins: dict[str, str] | None = None) -> Plan:
    """The wheels to carry so that ``roots`` import on a host with ``installed``."""
    env = env or TargetEnv()
    leave = tuple(canonicalize_name(p.rstrip("*")) + ("*" if p.endswith("*") else "")
                  for p in leave_out)
    pin = {canonicalize_name(k): v for k, v in (pins or {}).items()}
    plan = Plan()
    level: list[tuple[Requirement, str]] = [(Requirement(r), "(root)") for r in roots]
    while level:
        wanted: dict[str, Requirement] = {}
        for req, by in level:
            name = canonicalize_name(req.name)
            if _left_out(name, leave):
                plan.left_out.setdefault(name, by)
                continue
            if name in installed:
                have = installed[name]
                if req.specifier.contains(have, prereleases=True):
                    plan.satisfied[name] = str(have)
                elif not any(k.name == name and k.by == by for k in plan.kept):
                    plan.kept.append(Kept(name, str(have), str(req.specifier), by))
                continue
            if name in plan.carry:
                chosen = Version(plan.carry[name].version)
                if not req.specifier.contains(chosen, prereleases=True):
                    plan.conflicts.append(f"{name} {chosen} chosen, {by} wants {req.specifier}")
                continue
            if name in wanted:
                wanted[name].specifier &= req.specifier
                continue
            if name in pin:
                req = Requirement(f"{req.name}=={pin[name]}")
            wanted[name] = Requirement(f"{req.name}{req.specifier}")
        if not wanted:
            break
        next_level: list[tuple[Requirement, str]] = []
        extras_of: dict[str, set[str]] = {}
        for r, _ in level:
            extras_of.setdefault(canonicalize_name(r.name), set()).update(r.extras)
        for dist in source.best(list(wanted.values())):
            plan.carry[dist.key] = dist
            for spec in dist.requires:
                req = Requirement(spec)
                if _applies(req, env, extras_of.get(dist.key, set())):
                    next_level.append((req, f"{dist.key} {dist.version}"))
        level = next_level
    return plan


class RecordedSource:
    """Wheel metadata from a table (``{name: [{version, requires}], …}``), newest first."""

    def __init__(self, table: dict[str, list[dict[str, object]]]) -> None:
        self.table = {canonicalize_name(k): v for k, v in table.items()}

    @classmethod
    def load(cls, path: Path) -> RecordedSource:
        return cls(json.loads(Path(path).read_text()))

    def best(self, requirements: list[Requirement]) -> list[Dist]:
        out = []
        for req in requirements:
            versions = self.table.get(canonicalize_name(req.name), [])
            ok = [v for v in versions if req.specifier.contains(str(v["version"]), prereleases=True)]
            if not ok:
                raise LookupError(f"no recorded wheel for {req}")
            best = max(ok, key=lambda v: Version(str(v["version"])))
            requires = best.get("requires") or []
            assert isinstance(requires, list)
            out.append(Dist(req.name, str(best["version"]), tuple(str(r) for r in requires)))
        return out


def edgeserve_requirements(pyproject: Path) -> list[str]:
    """edgeserve's own runtime requirements (``[project] dependencies`` of pyproject.toml)."""
    import tomllib

    data = tomllib.loads(Path(pyproject).read_text())
    return [str(r) for r in data["project"]["dependencies"]]
