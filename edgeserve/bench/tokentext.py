"""Text of an exact number of the model's tokens, and token counts of given text.

Prompt lengths are stated in the *model's* tokens, because that is what the engine computes and
caches: a 256-token prefix means 256 tokens of KV. Text is built from the tokenizer's own
vocabulary: the words that are one token with a leading space (``" the"``, ``" image"``, …).
A byte-level BPE tokenizer splits text into words before merging, so ``n`` such words joined
together encode to exactly ``n`` tokens; every built text is encoded once to check that.

The tokenizer comes from a ``tokenizer.json`` (the Hugging Face *tokenizers* format): give the
model folder or the file. When the server's model id is a local folder (``vllm serve
models/tiny-qwen2-vl`` lists that path as its id), that folder is the default.

The chat template adds a few tokens per message (``<|im_start|>user\\n`` … ``<|im_end|>``), so the
server's ``prompt_tokens`` are the dataset's text tokens plus a fixed overhead per request (and
image tokens for image requests).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

MIN_WORDS = 16  # fewer single-token words than this: random text would repeat too much


def find_tokenizer(tokenizer: Path | None, model_id: str) -> Path:
    """The ``tokenizer.json`` to use: the one given, else the model id's folder if it has one."""
    candidates = [tokenizer] if tokenizer is not None else [Path(model_id)]
    for c in candidates:
        if c.is_file():
            return c
        if (c / "tokenizer.json").is_file():
            return c / "tokenizer.json"
    where = f"{tokenizer}" if tokenizer is not None else f"the model id {model_id!r}"
    raise ValueError(
        f"this dataset counts lengths in the model's tokens, and {where} is not a tokenizer.json "
        f"or a folder holding one. Pass --tokenizer DIR (the served model's folder, e.g. "
        f"models/tiny-qwen2-vl)."
    )


class TokenText:
    """Builds text of ``n`` tokens and counts the tokens of text, with one tokenizer."""

    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer

        self.path = path
        self.tok = Tokenizer.from_file(str(path))
        specials = {t.content for t in self.tok.get_added_tokens_decoder().values()}
        words = []
        for token, token_id in sorted(self.tok.get_vocab().items()):
            if token in specials:
                continue
            text = self.tok.decode([token_id])
            if text.startswith(" ") and text[1:].isalpha() and len(self.tok.encode(text).ids) == 1:
                words.append(text)
        if len(words) < MIN_WORDS:
            raise ValueError(f"{path}: only {len(words)} single-token words in its vocabulary "
                             f"(need {MIN_WORDS}) — not a text tokenizer this can build prompts with")
        self.words = np.array(words, dtype=object)

    def count(self, text: str) -> int:
        """Tokens of ``text`` (no special tokens added)."""
        return len(self.tok.encode(text, add_special_tokens=False).ids)

    def text(self, n: int, rng: np.random.Generator) -> str:
        """Random words making exactly ``n`` tokens (``n`` >= 0)."""
        if n <= 0:
            return ""
        text = "".join(self.words[rng.integers(0, len(self.words), size=n)])
        got = self.count(text)
        if got != n:  # a tokenizer whose merges cross word boundaries
            raise ValueError(f"{self.path}: {n} single-token words encoded to {got} tokens")
        return text
