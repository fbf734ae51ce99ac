"""What this machine is, as the defaults that depend on it need to know: the CPU's instruction-set
features, its core count, and whether vLLM runs on a GPU or on its CPU build.

The CPU features are the ``flags`` line of ``/proc/cpuinfo`` (Linux's names: ``avx2``,
``avx512f``, ``avx512_bf16``, ``amx_bf16``, …). The ones that matter for serving are those that
make bfloat16 arithmetic native: without ``avx512_bf16`` or ``amx_bf16`` a bfloat16 matmul is
emulated in float32 with conversions around it, and on a 2-core Zen 2 EPYC (AVX2 only) an engine
step carrying an image took 1159 ms in bfloat16 against 465 ms in float32.

:func:`detect` reads the running machine; the rules that use it (:mod:`edgeserve.auto_defaults`)
take a :class:`Hardware` so that they can be tested on feature sets this machine does not have.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")

#: features that give a CPU native bfloat16 dot products (AVX-512 BF16, AMX tiles)
BF16_FEATURES = ("amx_bf16", "avx512_bf16")


class Platform(enum.StrEnum):
    """Where vLLM's engine runs its model."""

    CPU = "cpu"  # vLLM's CPU build
    GPU = "gpu"  # a CUDA or ROCm build with a device present


@dataclass(slots=True, frozen=True)
class Hardware:
    """The machine the server runs on."""

    cpu_flags: frozenset[str]
    cores: int  # cores this process may run on
    platform: Platform
    cpu_model: str = ""

    def __post_init__(self) -> None:
        if self.cores < 1:
            raise ValueError(f"cores must be >= 1, got {self.cores}")

    @property
    def bf16_feature(self) -> str | None:
        """The CPU feature that makes bfloat16 native here (AMX first), or None."""
        return next((f for f in BF16_FEATURES if f in self.cpu_flags), None)

    def describe(self) -> str:
        """One phrase: the CPU, its core count and its widest vector features."""
        shown = [f for f in ("amx_bf16", "avx512_bf16", "avx512f", "avx2") if f in self.cpu_flags]
        features = ", ".join(shown) or "no AVX2"
        name = f"{self.cpu_model}, " if self.cpu_model else ""
        return f"{name}{self.cores} core(s), {features}; vLLM on {self.platform.value.upper()}"


def parse_cpuinfo(text: str) -> tuple[frozenset[str], str]:
    """The ``flags`` and ``model name`` of the first processor in ``/proc/cpuinfo`` text."""
    flags: frozenset[str] = frozenset()
    model = ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "flags" and not flags:
            flags = frozenset(value.split())
        elif key == "model name" and not model:
            model = value.strip()
        if flags and model:
            break
    return flags, model


def allowed_cores() -> int:
    """Cores this process may run on (its affinity mask, not the machine's count)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def vllm_platform() -> Platform:
    """Whether the installed vLLM runs on the CPU or on a GPU (imports vLLM: seconds)."""
    from vllm.platforms import current_platform

    return Platform.CPU if current_platform.is_cpu() else Platform.GPU


def detect(platform: Platform | None = None) -> Hardware:
    """This machine; ``platform`` given saves importing vLLM."""
    try:
        flags, model = parse_cpuinfo(CPUINFO.read_text())
    except OSError:  # not Linux: no features known, so no bfloat16 assumed
        flags, model = frozenset(), ""
    return Hardware(cpu_flags=flags, cores=allowed_cores(),
                    platform=platform if platform is not None else vllm_platform(),
                    cpu_model=model)
