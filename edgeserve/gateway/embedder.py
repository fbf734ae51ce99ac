"""Sentence embeddings for the semantic cache, from a model that ships inside a pip package.

WordLlama (``pip install edgeserve[cache]``) carries its 256-dimensional ``l2_supercat`` token
embeddings and tokenizer in the wheel: nothing is downloaded. Its loader looks for the tokenizer
under ``<package>/tokenizer/`` while the wheel puts it under ``<package>/tokenizers/``, and would
then try to download it; pointing its cache directory at the package itself finds both files, and
``disable_download`` makes a missing file an error instead of a network call.

:meth:`Embedder.embed` does what WordLlama's own ``embed`` does for one text (tokens, their rows
of the embedding matrix, the average) without its batching and padding: the same vector, bit for
bit, in less than half the time.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

_WORD = re.compile(r"\w+")


class EmbedderUnavailable(RuntimeError):
    """WordLlama is not installed; the message says how to install it."""


class Embedder:
    def __init__(self) -> None:
        try:
            import wordllama
            from wordllama import WordLlama
        except ImportError:
            raise EmbedderUnavailable(
                "the semantic cache needs WordLlama: pip install 'edgeserve[cache]'") from None
        self._model: Any = WordLlama.load(cache_dir=Path(wordllama.__file__).parent,
                                          disable_download=True)
        self._tokenizer = self._model.tokenizer
        self._matrix: np.ndarray = self._model.embedding  # vocabulary × dim, float32
        self.dim = int(self._matrix.shape[1])

    def embed(self, text: str) -> np.ndarray:
        """A unit-length float32 vector (cosine similarity is then a dot product) of the text's
        words, lower-cased: WordLlama's tokens are case-sensitive, and a question's capitals and
        question mark should not make it another question."""
        words = " ".join(_WORD.findall(text.lower()))
        ids = self._tokenizer.encode(words, add_special_tokens=False).ids
        rows = self._matrix.take(ids, axis=0, mode="clip")  # as WordLlama clips ids
        v = np.asarray(rows.sum(axis=0, dtype=np.float32) / np.float32(max(len(ids), 1)))
        n = float(np.linalg.norm(v))
        return v / n if n > 0 else v
