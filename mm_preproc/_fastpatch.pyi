"""Type stub for the optional C extension built from _fastpatch.c (see setup.py)."""

import numpy as np

def usable() -> bool: ...
def normalize_patches(
    image: np.ndarray,
    out: np.ndarray,
    height: int,
    width: int,
    depth: int,
    scale: tuple[float, ...],
    bias: tuple[float, ...],
    patch_size: int,
    merge_size: int,
    temporal_patch_size: int,
) -> None: ...
