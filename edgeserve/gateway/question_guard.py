"""What a sentence embedding cannot see, checked exactly before a cached answer is reused.

WordLlama's sentence vector is a pooled average of its token vectors: word order is gone, and a
number or a ``not`` moves the vector little. "Convert 10 miles to kilometres" and "Convert 10
kilometres to miles" embed to the same vector; "take 200 mg" and "take 800 mg" to 0.97. The
labelled pairs in ``tests/data/gateway_cache_pairs.jsonl`` show that no similarity threshold alone
keeps such near-misses out while letting paraphrases in. So a hit also needs:

- the same *literals* in the same order: numbers, arithmetic signs (``+ - * / = < >``) and
  negations (``not``, ``no``, ``never``, ``without``, ``n't``);
- the content words both questions share in the same relative order (each counted once where it
  occurs once in both; articles, auxiliaries, pronouns and prepositions left out), so that
  swapping two terms makes another question.

The second costs some paraphrases ("a cat or a dog" / "a dog or a cat"): a miss costs one upstream
call, a false hit a wrong answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_TOKEN = re.compile(r"\d+(?:[.,]\d+)*|\w+?(?=n['’]t\b)|n['’]t\b|[+\-*/=<>]|\w+")
_NEGATIONS = frozenset({"not", "no", "never", "without", "n't", "nothing", "none", "neither",
                        "nor"})
_SIGNS = frozenset("+-*/=<>")
# words whose place changes with the phrasing, not the meaning ("what is the X" / "what X is")
_FUNCTION_WORDS = frozenset({
    "a", "an", "the", "is", "are", "was", "were", "be", "do", "does", "did", "what", "which",
    "who", "how", "when", "where", "this", "that", "these", "those", "it", "its", "i", "my", "me",
    "you", "your", "of", "in", "on", "at", "for", "to", "by", "with", "s", "can", "could",
    "should", "would"})


@dataclass(slots=True, frozen=True)
class Question:
    words: tuple[str, ...]
    literals: tuple[str, ...]

    @classmethod
    def of(cls, text: str) -> Question:
        tokens = _TOKEN.findall(text.lower())
        tokens = ["n't" if t in ("n't", "n’t") else t for t in tokens]
        literals = tuple(t for t in tokens
                         if t[0].isdigit() or t in _SIGNS or t in _NEGATIONS)
        return cls(tuple(t for t in tokens if t not in _SIGNS), literals)


def _once(words: tuple[str, ...]) -> list[str]:
    return [w for w in words if words.count(w) == 1]


def same_question(a: Question, b: Question) -> bool:
    """True when ``a`` and ``b`` have the same literals in order and their shared words in the
    same order: the exact half of a cache hit (the embedding's similarity is the other)."""
    if a.literals != b.literals:
        return False
    shared = (set(_once(a.words)) & set(_once(b.words))) - _FUNCTION_WORDS
    return [w for w in a.words if w in shared] == [w for w in b.words if w in shared]
