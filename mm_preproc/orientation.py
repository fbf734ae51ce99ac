"""EXIF orientation for numpy images: the same eight rotations/flips Pillow's ``transpose``
applies (tag 274: 1 = as stored, 3 = upside down, 6 = rotate 90° clockwise to view, …)."""

from __future__ import annotations

import numpy as np


def orient_array(array: np.ndarray, orientation: int) -> np.ndarray:
    """Return the H×W×C ``array`` as displayed for an EXIF orientation (a contiguous copy)."""
    if orientation == 2:
        view = array[:, ::-1]
    elif orientation == 3:
        view = array[::-1, ::-1]
    elif orientation == 4:
        view = array[::-1]
    elif orientation == 5:
        view = array.transpose(1, 0, 2)
    elif orientation == 6:
        view = array.transpose(1, 0, 2)[:, ::-1]
    elif orientation == 7:
        view = array.transpose(1, 0, 2)[::-1, ::-1]
    elif orientation == 8:
        view = array.transpose(1, 0, 2)[::-1]
    else:
        return array
    return np.ascontiguousarray(view)
