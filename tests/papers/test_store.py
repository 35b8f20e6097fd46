"""PaperStore on real SQLite: round trip, upsert merging, title lookup, reference resolution, errors."""

import sqlite3

import pytest

from scholar_agents.papers.paper import Paper, Reference, Section
from scholar_agents.papers.store import PaperStore, PaperStoreError


def _full_paper() -> Paper:
    # 2212.11790 from the unarXive sample, shortened
    return Paper(
        paper_id="2212.11790",
        title="Normalized Contrastive Learning for Text-Video Retrieval",
        abstract="Cross-modal contrastive learning has led the recent advances in multimodal retrieval ...",
        date="2022-11-30",
        authors=["Yookoon Park", "Mahmoud Azab"],
        categories=["cs.IR", "cs.CV", "cs.LG"],
        sections=[
            Section("1 Introduction", [Reference(paper_id="2104.08860", title="Clip4clip: An empirical study of clip "
                                                  "for end to end video clip retrieval"),
                                        Reference(title="Sinkhorn distances: Lightspeed computation of optimal transport")]),
            Section("2 Related Work", []),
            Section("3.1 Cross-modal Contrastive Learning", [Reference(paper_id="2103.00020")]),
        ],
        source="unarxive",
    )


def test_round_trip_keeps_everything_in_order(tmp_path):
    with PaperStore(tmp_path / "s.sqlite") as store:
        assert store.add([_full_paper()]) == 1
        got = store.get("2212.11790")
        assert got == _full_paper()
        assert got.outline == ["1 Introduction", "2 Related Work", "3.1 Cross-modal Contrastive Learning"]
        assert "2212.11790" in store and "nope" not in store and 3 not in store
        assert len(store) == 1 and store.ids() == ["2212.11790"]
        assert store.get("missing") is None
        assert store.get_many(["missing", "2212.11790"], with_sections=False)["2212.11790"].sections == []
    # reopened read-only: same content
    with PaperStore(tmp_path / "s.sqlite", readonly=True) as store:
        assert store.get("2212.11790") == _full_paper()
        with pytest.raises(PaperStoreError, match="read-only"):
            store.add([_full_paper()])


def test_upsert_fills_stubs_and_never_erases(tmp_path):
    with PaperStore(tmp_path / "s.sqlite") as store:
        # an AutoScholarQuery gold stub first (title, year), then the arXiv record, then the stub again
        stub = Paper("1512.03385", "Deep Residual Learning for Image Recognition", date="2015", source="gold")
        full = Paper("1512.03385", "Deep Residual Learning for Image Recognition",
                     abstract="Deeper neural networks are more difficult to train.", date="2015-12-10",
                     authors=["Kaiming He"], categories=["cs.CV"], source="arxiv")
        store.add([stub])
        store.add([full])
        store.add([stub])
        got = store.get("1512.03385")
        assert got.abstract == full.abstract and got.date == "2015-12-10" and got.authors == ["Kaiming He"]
        assert got.source == "gold,arxiv"
        # a later record with sections replaces the stored sections; one without keeps them
        p = _full_paper()
        store.add([Paper(p.paper_id, p.title, date="2022-12")])
        store.add([p])
        store.add([Paper(p.paper_id, p.title, date="2022-12")])
        assert store.get(p.paper_id).sections == p.sections
        assert store.get(p.paper_id).date == "2022-11-30"
        newer = Paper(p.paper_id, p.title, sections=[Section("Only", [Reference(title="X")])])
        store.add([newer])
        assert store.get(p.paper_id).outline == ["Only"]
        # the same paper twice in one batch: the later record wins
        store.add([Paper("a", "Alpha", sections=[Section("s1")]), Paper("a", "Alpha", sections=[Section("s2")])])
        assert store.get("a").outline == ["s2"]


def test_iter_papers_orders_and_streams(tmp_path):
    papers = [Paper(f"p{i}", f"Paper number {i}", date=d) for i, d in enumerate(["2020-05", "", "2019-01-02", "2021"])]
    with PaperStore(tmp_path / "s.sqlite") as store:
        store.add(papers, batch_size=2)
        assert [p.paper_id for p in store.iter_papers(batch_size=3)] == ["p0", "p1", "p2", "p3"]
        assert [p.paper_id for p in store.iter_papers(order_by="date")] == ["p1", "p2", "p0", "p3"]
        with pytest.raises(ValueError, match="order_by"):
            next(store.iter_papers(order_by="title; DROP TABLE papers"))


def test_find_by_title_exact_fuzzy_and_resolution_of_later_papers(tmp_path):
    with PaperStore(tmp_path / "s.sqlite") as store:
        # a bibliography first: its cited titles are unknown to the store yet
        store.add([_full_paper()])
        assert store.get("2212.11790").sections[0].references[1].paper_id is None
        store.add([
            Paper("1306.0895", "Sinkhorn Distances: Lightspeed Computation of Optimal Transportation Distances"),
            Paper("1805.01978", "Unsupervised Feature Learning via Non-Parametric Instance-level Discrimination"),
            Paper("1512.03385", "Deep Residual Learning for Image Recognition"),
        ])
        assert store.find_by_title("deep residual learning for image recognition.") == "1512.03385"
        assert store.find_by_title("Unsupervised feature learning via non-parametric instance discrimination",
                                   fuzzy=False) is None
        pid, score = store.match_title("Unsupervised feature learning via non-parametric instance discrimination")
        assert pid == "1805.01978" and 90 <= score < 100
        assert store.find_by_title("Residual attention network for image classification") is None
        assert store.find_by_title("") is None
        # "Sinkhorn distances: Lightspeed computation of optimal transport" (as cited) is 88 vs the full title:
        # below the default threshold, resolved at a lower one
        stats = store.resolve_references()
        assert stats["resolved_titles"] == 0
        stats = store.resolve_references(min_score=85)
        assert stats["resolved_titles"] == 1 and stats["unresolved_refs"] == 0
        ref = store.get("2212.11790").sections[0].references[1]
        assert ref == Reference(paper_id="1306.0895", title="Sinkhorn distances: Lightspeed computation of optimal transport")
        assert store.stats()["resolved_references"] == 3


def test_missing_and_corrupt_databases_fail_clearly(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        PaperStore(tmp_path / "nope.sqlite", readonly=True)
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"this is not a database at all" * 100)
    with pytest.raises(PaperStoreError, match="not a usable PaperStore"):
        PaperStore(bad)
    other = tmp_path / "other.sqlite"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.commit()
    with pytest.raises(PaperStoreError):
        PaperStore(other, readonly=True)
    with PaperStore(tmp_path / "ok.sqlite") as store:
        with pytest.raises(ValueError, match="paper_id"):
            store.add([Paper("", "No id")])
