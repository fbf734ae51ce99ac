"""The semantic cache: an exact cosine index with TTL and LRU, and answers from it over HTTP."""

from __future__ import annotations

import importlib.util
import json
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from conftest import Proc, answer, chat, chat_body, gateway, png_data_url, trace_records, upstream

from edgeserve.gateway.semantic_cache import SemanticCache, context_key

needs_wordllama = pytest.mark.skipif(importlib.util.find_spec("wordllama") is None,
                                     reason="pip install 'edgeserve[cache]' (wordllama)")


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def unit(v: np.ndarray) -> np.ndarray:
    return (v / np.linalg.norm(v)).astype(np.float32)


def test_lookup_is_the_exact_best_match() -> None:
    rng = np.random.default_rng(7)
    vecs = [unit(rng.normal(size=16)) for _ in range(50)]
    cache = SemanticCache(64, 16, ttl_s=60, threshold=-1.0)
    for i, v in enumerate(vecs):
        cache.store("ctx", v, str(i).encode())
    for _ in range(20):
        q = unit(rng.normal(size=16))
        best = int(np.argmax([float(v @ q) for v in vecs]))
        hit = cache.lookup("ctx", q)
        assert hit is not None and hit.body == str(best).encode()
        assert hit.similarity == pytest.approx(float(vecs[best] @ q), abs=1e-6)
    assert cache.lookup("other context", vecs[0]) is None


def test_ttl_and_least_recently_used_eviction() -> None:
    clock = Clock()
    a, b, c = (unit(np.eye(4)[i]) for i in range(3))
    cache = SemanticCache(2, 4, ttl_s=10, threshold=0.9, clock=clock)
    cache.store("x", a, b"A")
    clock.t = 1
    cache.store("x", b, b"B")
    clock.t = 2
    assert cache.lookup("x", a) is not None  # A used after B: B is now the oldest use
    cache.store("x", c, b"C")
    assert cache.lookup("x", b) is None and len(cache) == 2
    hit = cache.lookup("x", a)
    assert hit is not None and hit.body == b"A"
    clock.t = 11.5  # A stored at 0 and C at 2: A has expired, C has not
    assert cache.lookup("x", a) is None
    hit = cache.lookup("x", c)
    assert hit is not None and hit.body == b"C" and len(cache) == 1


def test_a_lookup_scores_only_the_rows_in_use() -> None:
    clock = Clock()
    cache = SemanticCache(1000, 4, ttl_s=10, threshold=0.9, clock=clock)
    vecs = [unit(np.eye(4)[i % 4] + 0.01 * i) for i in range(8)]
    for i, v in enumerate(vecs[:5]):
        cache.store(f"c{i}", v, str(i).encode())
    assert cache.rows == 5
    clock.t = 20  # all five expire; their rows are taken again before any unused one
    assert cache.lookup("c0", vecs[0]) is None and len(cache) == 0
    for i, v in enumerate(vecs[5:], start=5):
        cache.store(f"c{i}", v, str(i).encode())
    assert cache.rows == 5 and len(cache) == 3
    for i, v in enumerate(vecs[5:], start=5):
        hit = cache.lookup(f"c{i}", v)
        assert hit is not None and hit.body == str(i).encode()


@needs_wordllama
def test_the_embedding_is_wordllamas_own_bit_for_bit() -> None:
    from edgeserve.gateway.embedder import _WORD, Embedder

    e = Embedder()
    for text in ["user: What colour is the car?", "user: Quelle heure est-il ?", "", "user: ",
                 "user: ZEBRA zebra Zebra 42 + 7", "system: be brief\nuser: and now?"]:
        words = " ".join(_WORD.findall(text.lower()))
        ref = np.asarray(e._model.embed([words]), dtype=np.float32)[0]
        norm = float(np.linalg.norm(ref))
        ref = ref / norm if norm > 0 else ref
        assert np.array_equal(e.embed(text), ref), text


@needs_wordllama
def test_paraphrases_are_near_and_other_questions_far() -> None:
    from edgeserve.gateway.embedder import Embedder

    e = Embedder()
    q = e.embed("user: What is in this picture?")
    assert float(q @ e.embed("user: what is in this picture")) == pytest.approx(1.0)
    assert float(q @ e.embed("user: What is in the picture?")) > 0.95
    assert float(q @ e.embed("user: Translate the sign into German.")) < 0.5


def served(up: Proc) -> int:
    with urllib.request.urlopen(up.url + "/metrics", timeout=10) as r:
        line = next(x for x in r.read().decode().splitlines() if x.startswith("fake_served_total"))
    return int(line.split()[1])


@needs_wordllama
def test_a_question_asked_again_is_answered_from_the_cache(tmp_path: Path,
                                                           procs: list[Proc]) -> None:
    procs.append(loc := upstream(tmp_path, "loc"))
    procs.append(gw := gateway(tmp_path, "--local", loc.url, "--cache-capacity", "8"))
    img = png_data_url(64, 48)
    first = chat(gw, chat_body("What is in this picture?", image=img))
    assert first[0] == 200 and served(loc) == 1
    again = chat(gw, chat_body("what is in the picture", image=img))
    assert again[0] == 200 and again[1]["X-Edgeserve-Placement"] == "cache"
    assert answer(again[2]) == answer(first[2]) and served(loc) == 1
    rec = trace_records(tmp_path)[-1]
    assert rec["placement"] == "cache"
    similarity = float(rec["decision_reason"].split("similarity ")[1].rstrip(")"))
    assert rec["decision_reason"].startswith("semantic cache hit") and 0.95 <= similarity < 1

    other_image = chat(gw, chat_body("What is in this picture?", image=png_data_url(32, 32)))
    assert other_image[1]["X-Edgeserve-Placement"] == "local:local0" and served(loc) == 2
    for _ in range(2):  # personal data: neither answered from nor kept in the cache
        status, headers, _ = chat(gw, chat_body("Mail the summary to jane.doe@example.org"))
        assert status == 200 and headers["X-Edgeserve-Placement"] == "local:local0"
    assert served(loc) == 4
    assert context_key("a", "b") != context_key("ab", "")


PAIRS = Path(__file__).resolve().parents[2] / "data" / "gateway_cache_pairs.jsonl"


def test_the_exact_check_tells_numbers_negations_and_order_apart() -> None:
    from edgeserve.gateway.question_guard import Question, same_question

    def same(a: str, b: str) -> bool:
        return same_question(Question.of(a), Question.of(b))

    assert same("What is in this picture?", "what is in the picture")
    assert same("What text is written on the sign?", "What is the text written on the sign?")
    assert not same("Should I take 200 mg of ibuprofen?", "Should I take 800 mg of ibuprofen?")
    assert not same("Solve 2x + 3 = 11.", "Solve 2x - 3 = 11.")
    assert not same("Is the person smiling?", "Is the person not smiling?")
    assert not same("Isn't it raining?", "Is it raining?")
    assert not same("Convert 10 miles to kilometres.", "Convert 10 kilometres to miles.")


@needs_wordllama
def test_the_default_threshold_keeps_false_hits_on_near_misses_at_most_one_percent() -> None:
    from edgeserve.gateway.config import GatewayConfig
    from edgeserve.gateway.embedder import Embedder
    from edgeserve.gateway.question_guard import Question

    threshold = GatewayConfig.__dataclass_fields__["cache_threshold"].default
    e = Embedder()
    pairs = [json.loads(line) for line in PAIRS.read_text().splitlines()]
    hits: dict[str, list[bool]] = {"paraphrase": [], "near_miss": []}
    for p in pairs:  # each pair through a real cache: the first question stored, the second asked
        cache = SemanticCache(4, e.dim, ttl_s=60, threshold=threshold)
        a, b = f"user: {p['a']}", f"user: {p['b']}"
        cache.store("ctx", e.embed(a), b"answer", Question.of(a))
        hits[p["kind"]].append(cache.lookup("ctx", e.embed(b), Question.of(b)) is not None)
    assert len(pairs) >= 200 and len(hits["near_miss"]) >= 100 and len(hits["paraphrase"]) >= 100
    assert sum(hits["near_miss"]) <= 0.01 * len(hits["near_miss"])
    assert sum(hits["paraphrase"]) >= 0.5 * len(hits["paraphrase"])  # the benchmark's 55 %
    assert {p["topic"] for p in pairs} >= {"image", "math", "tech", "geo"}


@needs_wordllama
def test_with_the_default_threshold_a_paraphrase_hits_and_near_misses_do_not(
        tmp_path: Path, procs: list[Proc]) -> None:
    procs.append(loc := upstream(tmp_path, "loc"))
    procs.append(gw := gateway(tmp_path, "--local", loc.url, "--cache-capacity", "16"))
    img = png_data_url(64, 48)
    assert chat(gw, chat_body("How many people are in the picture?", image=img))[0] == 200
    assert chat(gw, chat_body("How many people are in this picture?", image=img)
                )[1]["X-Edgeserve-Placement"] == "cache"
    for other in ("How many dogs are in the picture?",       # another entity
                  "Translate the sign into German.",         # another question
                  "How many people are not in the picture?"):  # a negation
        status, headers, _ = chat(gw, chat_body(other, image=img))
        assert status == 200 and headers["X-Edgeserve-Placement"] == "local:local0", other
    assert served(loc) == 4
    assert chat(gw, chat_body("Should I take 200 mg of ibuprofen?"))[0] == 200
    assert chat(gw, chat_body("Should I take 800 mg of ibuprofen?")
                )[1]["X-Edgeserve-Placement"] == "local:local0"
    assert served(loc) == 6
    reasons = [r["decision_reason"] for r in trace_records(tmp_path)]
    assert sum(r.startswith("semantic cache hit") for r in reasons) == 1


def sse_events(raw: bytes) -> list[str]:
    """The ``data:`` payloads of a server-sent event stream, in order."""
    return [e[len("data: "):] for e in raw.decode().split("\n\n") if e.startswith("data: ")]


def streamed_text(events: list[str]) -> str:
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    return "".join(ch["delta"].get("content") or "" for c in chunks for ch in c["choices"])


@needs_wordllama
def test_a_streamed_request_is_answered_from_the_cache_as_a_stream(tmp_path: Path,
                                                                   procs: list[Proc]) -> None:
    procs.append(loc := upstream(tmp_path, "loc"))
    procs.append(gw := gateway(tmp_path, "--local", loc.url, "--cache-capacity", "8"))
    img = png_data_url(64, 48)
    first = chat(gw, chat_body("What is in this picture?", image=img))
    assert first[0] == 200 and served(loc) == 1
    text = json.loads(first[2])["choices"][0]["message"]["content"]

    status, headers, raw = chat(gw, chat_body("what is in the picture", image=img, stream=True,
                                              stream_options={"include_usage": True}))
    assert status == 200 and headers["X-Edgeserve-Placement"] == "cache"
    assert headers["Content-Type"].startswith("text/event-stream") and served(loc) == 1
    events = sse_events(raw)
    assert streamed_text(events) == text
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 2

    # a streamed miss is kept too, and answers streamed and plain requests alike
    status, headers, raw = chat(gw, chat_body("Translate the sign into German.", image=img,
                                              stream=True))
    assert headers["X-Edgeserve-Placement"] == "local:local0" and served(loc) == 2
    upstream_text = streamed_text(sse_events(raw))
    again = chat(gw, chat_body("translate the sign into german", image=img, stream=True))
    assert again[1]["X-Edgeserve-Placement"] == "cache"
    assert streamed_text(sse_events(again[2])) == upstream_text
    assert all("usage" not in json.loads(e) for e in sse_events(again[2])[:-1])
    plain = chat(gw, chat_body("Translate the sign into German!", image=img))
    assert plain[1]["X-Edgeserve-Placement"] == "cache" and served(loc) == 2
    assert json.loads(plain[2])["choices"][0]["message"]["content"] == upstream_text
    assert [r["placement"] for r in trace_records(tmp_path)] == [
        "local:local0", "cache", "local:local0", "cache", "cache"]
