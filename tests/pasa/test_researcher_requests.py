"""The hand-written held-out requests (assets/researcher_requests): held-out queries only, each
rewritten (not the original wording), one to three sentences, loadable as eval pasa's queries with the original's
gold and date."""

import json
import re

from omegaconf import OmegaConf

from scholar_agents.pasa.queries import load_queries
from tests.paths import REPO

ASSETS = REPO / "scholar_agents" / "assets"
FILE = ASSETS / "researcher_requests" / "heldout_by_hand.jsonl"


def test_every_request_is_a_held_out_query_rewritten_in_one_to_three_sentences():
    rows = [json.loads(line) for line in FILE.read_text().splitlines()]
    held = set((ASSETS / "crawler_adapter" / "heldout_qids.txt").read_text().split())
    trained = set((ASSETS / "crawler_adapter" / "train_qids.txt").read_text().split())
    assert len(rows) >= 30 and len({r["qid"] for r in rows}) == len(rows)
    for r in rows:
        assert r["qid"] in held and r["qid"] not in trained, r["qid"]
        assert r["question"] != r["original_question"] and r["phrasing"] == "researcher_by_hand"
        sentences = [s for s in re.split(r"(?<=[.?!])\s+", r["question"].strip()) if s]
        assert 1 <= len(sentences) <= 3, r["question"]
        assert r["answer_arxiv_id"], r["qid"]


def test_the_file_loads_as_queries_with_the_originals_gold_and_date():
    qs = load_queries(OmegaConf.create({"path": str(FILE), "offset": 0, "limit": None, "exclude_qids_file": None}))
    first = json.loads(FILE.read_text().splitlines()[0])
    assert len(qs) >= 30 and qs[0].qid == first["qid"] and qs[0].question == first["question"]
    assert set(qs[0].gold_ids) == set(first["answer_arxiv_id"]) and qs[0].before is not None
