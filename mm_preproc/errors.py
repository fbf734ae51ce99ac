"""What can go wrong with an image, as a small exception hierarchy.

Every error a caller's input can cause is a :class:`PreprocError` (a ``ValueError``, so code that
already catches the ``ValueError`` that transformers raises keeps working). The message is meant
to be shown to the user as is.
"""

from __future__ import annotations


class PreprocError(ValueError):
    """Base class: the input cannot be turned into model-ready arrays."""


class EmptyInputError(PreprocError):
    """The source holds no bytes (or an array with no pixels)."""


class UnsupportedFormatError(PreprocError):
    """The bytes are not an image format this library accepts (or not an image at all)."""


class CorruptImageError(PreprocError):
    """The image header was readable but its data is truncated or corrupt."""


class DecompressionBombError(PreprocError):
    """The header announces more source pixels than allowed; refused before decoding."""


class AspectRatioError(PreprocError):
    """The image is too thin: its long side is more than 200 times its short side."""


class InvalidArgumentError(PreprocError):
    """A parameter (pixel limits, explicit size, output buffer, backend) is not usable."""
