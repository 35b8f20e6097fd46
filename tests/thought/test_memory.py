"""thought.Memory: persistence, provenance math, token-budget packing and chunking (no LLM needed)."""

from __future__ import annotations


import numpy as np
import pytest

from scholar_agents.thought.chunking import chunk_text, count_tokens, truncate_tokens
from scholar_agents.thought.memory import Memory, MemoryItem
from scholar_agents.thought.packing import pack, pack_full_context
from scholar_agents.thought.provenance import abstraction_level, retrieval_precision_recall, root_sources
from tests.paths import TEST_ASSETS

TOKENIZER_DIR = TEST_ASSETS / "tiny_tokenizer"


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(TOKENIZER_DIR))


def _vecs(n: int, dim: int = 16, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)


# ------------------------------------------------------------------ provenance (§2.1, Eq. 1, §2.2)

def test_root_sources_and_level_follow_the_papers_example():
    # §2.1: T_old from {K1, K2}; T_new from {T_old, K3} => Ô(T_new) = {K1, K2, K3}
    k1, k2, k3 = (MemoryItem(i, "chunk", "s", f"K{i}", root_sources=[i]) for i in (1, 2, 3))
    t_old = MemoryItem(10, "thought", "s", "T_old", root_sources=root_sources([k1, k2]),
                       level=abstraction_level([k1, k2]))
    assert t_old.root_sources == [1, 2] and t_old.level == 2.0  # "a thought derived solely from raw data has level 2"
    assert root_sources([t_old, k3]) == [1, 2, 3]
    assert abstraction_level([t_old, k3]) == 1 + (2.0 + 1.0) / 2  # 2.5
    t_deep = MemoryItem(11, "thought", "s", "T_deep", root_sources=[1, 2, 3], level=2.5)
    assert abstraction_level([t_old, t_deep]) == pytest.approx(1 + (2.0 + 2.5) / 2)  # strictly > 2 from thoughts
    with pytest.raises(ValueError):
        abstraction_level([])


def test_retrieval_precision_recall_of_figure_1():
    # Figure 1: K_i = {K2..K5} needed, a RALM fitting two chunks retrieves K2, K3: precision 1, recall 0.5
    assert retrieval_precision_recall({2, 3}, {2, 3, 4, 5}) == (1.0, 0.5)
    # a thought whose root sources are {K2..K5} plus one irrelevant chunk
    assert retrieval_precision_recall({2, 3, 4, 5, 9}, {2, 3, 4, 5}) == (0.8, 1.0)
    assert retrieval_precision_recall(set(), {1}) == (0.0, 0.0)


# ------------------------------------------------------------------ persistence

def test_memory_survives_reopen_with_provenance_and_identical_search(tmp_path):
    v = _vecs(6)
    with Memory(tmp_path / "m") as m:
        c = m.add_chunks(["k1", "k2", "k3"], v[:3], scope="paper", doc_ids=["d", "d", "e"])
        t_old = m.insert_thought("t_old", v[3], [c[0], c[1]], scope="paper", query="q1", answer="a1", confidence=1,
                                 origin="q1")
        t_new = m.insert_thought("t_new", v[4], [t_old, c[2]], scope="paper", origin="q2")
        before = m.search(v[5:6], 5, ["paper"])
    with Memory(tmp_path / "m") as m:
        assert len(m) == 5 and m.count("thought") == 2 and m.count("chunk", "paper") == 3
        item = m.get([t_new])[0]
        assert item.kind == "thought" and item.sources == [t_old, c[2]]
        assert item.root_sources == c and item.level == 2.5
        old = m.get([t_old])[0]
        assert (old.query, old.answer, old.confidence, old.origin) == ("q1", "a1", 1, "q1")
        assert m.search(v[5:6], 5, ["paper"]) == before
        assert m.find_origin("paper", "q2") == t_new
        # the same origin again returns the stored thought (resumed runs do not duplicate)
        assert m.insert_thought("again", v[4], [c[0]], scope="paper", origin="q2") == t_new


def test_items_added_after_the_last_snapshot_are_caught_up(tmp_path):
    v = _vecs(5)
    m = Memory(tmp_path / "m")
    ids = m.add_chunks(["a", "b"], v[:2], scope="s")
    m.search(v[:1], 1, ["s"])  # loads the index
    m.save()
    late = m.add_chunks(["c"], v[2:3], scope="s")  # committed to SQLite, not snapshotted (a kill here)
    m2 = Memory(tmp_path / "m")  # another process opening the store
    hits = m2.search(v[2:3], 3, ["s"])
    assert hits[0][0] == (late[0], pytest.approx(1.0, abs=1e-5))
    assert {i for i, _ in hits[0]} == {*ids, *late}
    m.close()
    m2.close()


def test_a_corrupt_snapshot_is_rebuilt_from_sqlite(tmp_path):
    v = _vecs(3)
    with Memory(tmp_path / "m") as m:
        ids = m.add_chunks(["a", "b", "c"], v, scope="s")
        m.search(v[:1], 1, ["s"])
    snaps = list((tmp_path / "m" / "faiss").glob("*.faiss"))
    assert snaps
    for s in snaps:
        s.write_bytes(b"not a faiss index")
    with Memory(tmp_path / "m") as m:
        assert [i for i, _ in m.search(v[1:2], 1, ["s"])[0]] == [ids[1]]


def test_scopes_kinds_readonly_and_dimension_checks(tmp_path):
    v = _vecs(4)
    with Memory(tmp_path / "m") as m:
        a = m.add_chunks(["a"], v[:1], scope="A")
        b = m.add_chunks(["b"], v[1:2], scope="B")
        t = m.insert_thought("t", v[2], a, scope="A")
        assert [i for i, _ in m.search(v[:1], 5, ["A"])[0]] == [a[0], t] or set(
            i for i, _ in m.search(v[:1], 5, ["A"])[0]) == {a[0], t}
        assert {i for i, _ in m.search(v[:1], 5, ["A", "B"])[0]} == {a[0], b[0], t}
        assert [i for i, _ in m.search(v[:1], 5, ["A"], kinds=("chunk",))[0]] == a
    with pytest.raises(ValueError, match="16-d"):
        Memory(tmp_path / "m", dim=8)
    ro = Memory(tmp_path / "m", readonly=True)
    with pytest.raises(PermissionError):
        ro.add_chunks(["x"], v[3:4], scope="A")
    assert ro.count() == 3
    ro.close()
    with pytest.raises(FileNotFoundError):
        Memory(tmp_path / "missing", readonly=True)


# ------------------------------------------------------------------ chunking and token-budget packing

TEXT = " ".join(f"Sentence number {i} talks about retrieval memories and thoughts." for i in range(60))


def test_chunks_have_the_token_size_and_cover_the_text(tokenizer):
    chunks = chunk_text(TEXT, tokenizer, chunk_size=50)
    sizes = [count_tokens(c, tokenizer) for c in chunks]
    assert len(chunks) > 3 and all(s <= 51 for s in sizes) and all(s >= 45 for s in sizes[:-1])
    assert "".join(chunks).replace(" ", "") == TEXT.replace(" ", "")  # exact substrings, nothing lost
    overlapping = chunk_text(TEXT, tokenizer, chunk_size=50, overlap=10)
    assert len(overlapping) > len(chunks)
    with pytest.raises(ValueError):
        chunk_text(TEXT, tokenizer, chunk_size=10, overlap=10)
    assert chunk_text("   ", tokenizer, 10) == []


def _items(tokenizer, sizes):
    words = TEXT.split()
    out = []
    for i, n in enumerate(sizes):
        text = truncate_tokens(" ".join(words[i * 7:]), tokenizer, n, keep="first")
        out.append(MemoryItem(i + 1, "chunk", "s", text, root_sources=[i + 1]))
    return out


def test_packing_respects_the_token_budget(tokenizer):
    items = _items(tokenizer, [40, 40, 40, 40])
    for budget in (1, 30, 60, 85, 200):
        ctx = pack(items, tokenizer, budget)
        assert count_tokens(ctx.text, tokenizer) <= budget
        assert ctx.n_tokens <= budget
    ctx = pack(items, tokenizer, 100)
    assert ctx.ids == [1, 2, 3] and ctx.items[-1].truncated and not ctx.items[0].truncated
    assert ctx.items[2].text == truncate_tokens(items[2].text, tokenizer, ctx.items[2].n_tokens)
    # skip instead of cut: the overflowing item is dropped, a later shorter one still fits
    mixed = _items(tokenizer, [40, 80, 20])
    skipped = pack(mixed, tokenizer, 70, truncate_last=False)
    assert skipped.ids == [1, 3] and not any(p.truncated for p in skipped.items)
    assert pack(items, tokenizer, 1000).ids == [1, 2, 3, 4]


def test_full_context_keeps_the_beginning_or_the_end(tokenizer):
    items = _items(tokenizer, [40, 40, 40])
    left = pack_full_context(items, tokenizer, 60, keep="first")
    right = pack_full_context(items, tokenizer, 60, keep="last")
    assert left.ids == [1, 2] and left.items[0].text == items[0].text
    assert right.ids == [2, 3] and right.items[-1].text == items[-1].text
    assert right.items[0].truncated and items[1].text.endswith(right.items[0].text)
    assert count_tokens(right.text, tokenizer) <= 60
