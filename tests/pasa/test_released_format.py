"""The released PaSa crawler as trained: the official code's prompt wording (``crawler.env.prompt_style=official``)
and its stop tokens ([StopSearch] / [StopExpand] read as [Stop]), on responses in the released format."""

import json

import pytest

from scholar_agents.hydra_app import compose
from scholar_agents.llm import Completion, Generation
from scholar_agents.papers.index import SearchConfig, load_or_build_search
from scholar_agents.papers.paper import Paper, Reference, Section
from scholar_agents.papers.store import PaperStore
from scholar_agents.pasa.actions import EXPAND, SEARCH, STOP, parse_response
from scholar_agents.pasa.crawl_env import CrawlConfig, CrawlEnv
from scholar_agents.pasa.queries import ScholarQuery
from tests.paths import TEST_ASSETS

ASSETS = TEST_ASSETS
RELEASED = [json.loads(line) for line in (ASSETS / "pasa_released_crawler_outputs.jsonl").read_text().splitlines()
            if line.strip()]


@pytest.mark.parametrize("rec", RELEASED, ids=[r["response"][:40] for r in RELEASED])
def test_released_stop_tokens_end_the_session_and_keep_every_argument(rec):
    parsed = parse_response(rec["response"])
    assert parsed.ok, parsed.error_codes()
    assert parsed.stopped and parsed.actions[-1].kind == STOP
    assert [a.argument for a in parsed.moves] == rec["arguments"]
    assert {a.kind for a in parsed.moves} <= {SEARCH if rec["kind"] == "search" else EXPAND}


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    d = tmp_path_factory.mktemp("released_toy")
    store = PaperStore(d / "papers.sqlite")
    store.add([
        Paper("A", "Graph neural networks for molecule property prediction", "We predict molecule properties.",
              "2019-01-10", sections=[Section("1 Introduction", [Reference("C")]),
                                      Section("2 Related Work", [Reference("B")]),
                                      Section("2.1 Regularization", [Reference("D")])]),
        Paper("B", "Message passing neural networks for quantum chemistry", "Molecules as graphs.", "2017-04-04"),
        Paper("C", "Semi-supervised classification with graph convolutional networks", "GCN.", "2016-09-09"),
        Paper("D", "Weight decay regularization in neural networks", "Decay.", "2017-06-01"),
    ])
    yield store, load_or_build_search(SearchConfig(kind="bm25"), store, None, d / "index")
    store.close()


QUERY = ScholarQuery("q1", "graph neural networks for molecules", before="2020-06-30")


def _gen(text):
    return Generation(prompt_text="p", prompt_token_ids=[1], completions=[Completion(text, [7, 7], None, "stop")])


def test_official_prompt_style_is_the_official_wording(toy):
    store, search = toy
    env = CrawlEnv(store, search, CrawlConfig(prompt_style="official"))
    # github.com/bytedance/pasa agent_prompt.json "generate_query" / "select_section", sections as in sft_crawler
    assert env.state_messages(QUERY.question)[0]["content"] == (
        "Please generate some mutually exclusive queries in a list to search the relevant papers according to the "
        "User Query. Searching for survey papers would be better.\nUser Query: graph neural networks for molecules")
    assert env.state_messages(QUERY.question, "A")[0]["content"] == (
        "You are conducting research on `graph neural networks for molecules`. You need to predict which sections "
        "to look at for getting more relevant papers. Title: Graph neural networks for molecule property prediction"
        "\nAbstract: We predict molecule properties.\nSections: "
        "[\"1 Introduction\", \"2 Related Work\", \"2.1 Regularization\"]")
    # the default stays the paper's Table 8
    paper = CrawlEnv(store, search, CrawlConfig()).state_messages(QUERY.question, "A")[0]["content"]
    assert paper.startswith("You are conducting research on 'graph neural networks for molecules'. You need to "
                            "predict which sections to look at to get more relevant papers. Title:")
    with pytest.raises(ValueError, match="prompt_style must be one of paper, official"):
        CrawlConfig(prompt_style="offical")


def test_released_expand_response_expands_its_last_section(toy):
    """Before the fix the last section read "2.1 Regularization[StopExpand]" and D was never found."""
    store, search = toy
    env = CrawlEnv(store, search, CrawlConfig(prompt_style="official"))
    [state] = env.reset([QUERY])
    [rec] = env.step([env.expand_session(state, "A")], [_gen(RELEASED[1]["response"])])
    related, regularization, stop = rec.actions
    assert related.added == ["B"] and regularization.added == ["D"] and stop.kind == "stop"
    assert rec.grammar_errors == [] and state.traj.paper_ids == ["B", "D"]


def test_prompt_style_composes_in_the_crawler_group():
    # the command docs/pasa.md gives for the released checkpoints
    cfg = compose("pasa_search", ["query=x", "llm.model=/ckpt/pasa-7b-crawler", "selector_llm.model=/ckpt/pasa-7b-selector",
                                  "crawler=pasa_paper", "crawler.env.prompt_style=official"])
    assert cfg.crawler.env.prompt_style == "official" and cfg.crawler.env.max_depth == 3
    assert cfg.llm.model == "/ckpt/pasa-7b-crawler" and cfg.selector_llm.model == "/ckpt/pasa-7b-selector"
    for preset in ("pasa_paper", "cpu_smollm2"):
        assert compose("pasa_search", [f"crawler={preset}"]).crawler.env.prompt_style == "paper"
