"""The machine as the defaults see it: CPU features from /proc/cpuinfo text, cores, platform.

Specification: the first processor's ``flags`` and ``model name`` are read; a CPU has native
bfloat16 through ``amx_bf16`` (named first) or ``avx512_bf16`` and through nothing else;
:func:`detect` on this machine agrees with torch's own probe of AVX512-BF16 and with the
process's affinity mask.
"""

from __future__ import annotations

import os

import pytest

from edgeserve.hardware import Hardware, Platform, detect, parse_cpuinfo

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 7B12
flags\t\t: fpu sse2 avx avx2 fma
bugs\t\t: sysret_ss_attrs

processor\t: 1
model name\t: something else
flags\t\t: fpu avx512_bf16
"""


def machine(flags: str, cores: int = 2, platform: Platform = Platform.CPU) -> Hardware:
    return Hardware(cpu_flags=frozenset(flags.split()), cores=cores, platform=platform)


def test_parse_reads_the_first_processor() -> None:
    flags, model = parse_cpuinfo(CPUINFO)
    assert flags == {"fpu", "sse2", "avx", "avx2", "fma"}
    assert model == "AMD EPYC 7B12"


@pytest.mark.parametrize(("flags", "feature"), [
    ("avx avx2 fma", None),
    ("avx2 avx512f avx512_vnni", None),  # AVX-512 without its BF16 extension
    ("avx2 avx512f avx512_bf16", "avx512_bf16"),
    ("avx2 avx512f avx512_bf16 amx_tile amx_bf16 amx_int8", "amx_bf16"),
])
def test_native_bfloat16_feature(flags: str, feature: str | None) -> None:
    assert machine(flags).bf16_feature == feature


def test_describe_names_cores_features_and_platform() -> None:
    hw = Hardware(frozenset({"avx2", "avx512f", "avx512_bf16"}), 4, Platform.CPU, "AMD EPYC 9B14")
    assert hw.describe() == "AMD EPYC 9B14, 4 core(s), avx512_bf16, avx512f, avx2; vLLM on CPU"
    assert machine("sse2", 1, Platform.GPU).describe() == "1 core(s), no AVX2; vLLM on GPU"


def test_no_cores_is_refused() -> None:
    with pytest.raises(ValueError, match="cores must be >= 1"):
        machine("avx2", cores=0)


def test_detect_agrees_with_this_machine() -> None:
    import torch

    hw = detect(Platform.CPU)
    assert hw.cores == len(os.sched_getaffinity(0))
    assert ("avx512_bf16" in hw.cpu_flags) == bool(torch.cpu._is_avx512_bf16_supported())
    assert "avx2" in hw.cpu_flags or "avx512f" not in hw.cpu_flags
