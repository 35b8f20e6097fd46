"""Title normalisation and matching on real noisy titles.

Every raw string below is copied from the project's development data: unarXive bibliography entries
(``bib_entries[*].bib_entry_raw`` of the Dec-2022 sample, with the arXiv id the entry links to), research-town
bibliographies (lower-cased titles, LaTeX debris, typos kept from the source), and AutoScholarQuery gold titles
with LaTeX. The expected titles are the arXiv titles of the linked ids.
"""

import pytest

from scholar_agents.papers.titles import (
    TitleMatcher,
    normalize_title,
    parse_cited_title,
    title_key,
    title_similarity,
)

# arXiv id -> title, for the cited papers below (arXiv corpus, AutoScholarQuery gold papers, research-town metadata)
CORPUS = {
    "1907.11692": "RoBERTa: A Robustly Optimized BERT Pretraining Approach",
    "1806.07572": "Neural Tangent Kernel: Convergence and Generalization in Neural Networks",
    "1512.03385": "Deep Residual Learning for Image Recognition",
    "2010.00747": "Contrastive Learning of Medical Visual Representations from Paired Images and Text",
    "1805.01978": "Unsupervised Feature Learning via Non-Parametric Instance-level Discrimination",
    "2404.06654": "RULER: What's the Real Context Size of Your Long-Context Language Models?",
    "2303.08774": "GPT-4 Technical Report",
    "2409.00509": "LongRecipe: Recipe for Efficient Long Context Generalization in Large Languge Models",
    "2408.12570": "Jamba-1.5: Hybrid Transformer-Mamba Models at Scale",
    "2403.19887": "Jamba: A Hybrid Transformer-Mamba Language Model",
    "2402.13718": "$\\infty$Bench: Extending Long Context Evaluation Beyond 100K Tokens",
    "2302.13971": "LLaMA: Open and Efficient Foundation Language Models",
    "2407.10671": "Qwen2 Technical Report",
    "1611.02779": "RL$^2$: Fast Reinforcement Learning via Slow Reinforcement Learning",
    "1905.12888": "Imitation Learning as $f$-Divergence Minimization",
    "2101.06804": "What Makes Good In-Context Examples for GPT-$3$?",
    "2403.08715": "SOTOPIA-$π$: Interactive Learning of Socially Intelligent Language Agents",
}

# (raw unarXive bibliography entry, arXiv id it is linked to)
UNARXIVE_ENTRIES = [
    ("Yinhan Liu, Myle Ott, Naman Goyal, Jingfei Du, Mandar Joshi, Danqi Chen, Omer Levy, Mike Lewis, Luke "
     "Zettlemoyer, and Veselin Stoyanov. Roberta: A robustly optimized bert pretraining approach. arXiv preprint "
     "arXiv:1907.11692, 2019.", "1907.11692"),
    ("Arthur Jacot, Franck Gabriel, and Clément Hongler. Neural tangent kernel: Convergence and generalization in "
     "neural networks. Advances in neural information processing systems, 31, 2018.", "1806.07572"),
    ("Kaiming He, Xiangyu Zhang, Shaoqing Ren, and Jian Sun. 2016. Deep residual learning for image recognition. "
     "In CVPR.", "1512.03385"),
    ("He, K.; Zhang, X.; Ren, S.; and Sun, J. 2016. Deep residual learning for image recognition. In Proceedings "
     "of the IEEE conference on computer vision and pattern recognition, 770–778.", "1512.03385"),
    ("Yuhao Zhang, Hang Jiang, Yasuhide Miura, Christopher D Manning, and Curtis P Langlotz. 2020. Contrastive "
     "learning of medical visual representations from paired images and text. arXiv preprint arXiv:2010.00747.",
     "2010.00747"),
    ("Zhirong Wu, Yuanjun Xiong, Stella X Yu, and Dahua Lin. 2018. Unsupervised feature learning via "
     "non-parametric instance discrimination. In CVPR.", "1805.01978"),
]

# research-town bibliography title blocks (as cleaned by the loader) -> arXiv id
RESEARCH_TOWN_TITLES = [
    ("Ruler: What’s the real context size of your long-context language models?", "2404.06654"),
    ("Gpt-4 technical report", "2303.08774"),
    ("GPT-4 technical report", "2303.08774"),
    ("Longrecipe: Recipe for efficient long context generalization in large languge models", "2409.00509"),
    ("Jamba-1.5: Hybrid transformer-mamba models at scale", "2408.12570"),
    ("Jamba: A hybrid transformer-mamba language model", "2403.19887"),
    ("Llama: Open and efficient foundation language models", "2302.13971"),
    ("Qwen2 technical report", "2407.10671"),
]


def test_normalize_removes_latex_case_punctuation_and_unicode_noise():
    # the same research-town paper: LaTeX in its metadata, unicode + LaTeX debris in a bibliography
    assert normalize_title("$\\infty$Bench: Extending Long Context Evaluation Beyond 100K Tokens") == \
        "bench extending long context evaluation beyond 100k tokens"
    assert normalize_title("∞\\infty∞bench: Extending long context evaluation beyond 100k tokens") == \
        "bench extending long context evaluation beyond 100k tokens"
    # unarXive metadata titles keep arXiv's line breaks
    assert normalize_title("Zeros of a growing number of derivatives of random polynomials with\n  independent roots") \
        == "zeros of a growing number of derivatives of random polynomials with independent roots"
    # math markup glues to its word; Greek letters become names whether LaTeX or unicode
    assert normalize_title("RL$^2$: Fast Reinforcement Learning") == "rl2 fast reinforcement learning"
    assert normalize_title("SOTOPIA-$π$: Interactive") == normalize_title("SOTOPIA-$\\pi$: Interactive") == "sotopia pi interactive"
    assert normalize_title("$\\alpha$-DPO: Adaptive Reward Margin") == normalize_title("α-DPO: Adaptive reward margin")
    # accents in LaTeX and unicode, typographic apostrophes, ligatures
    assert normalize_title('Sch{\\"o}lkopf and M\\"uller') == normalize_title("Schölkopf and Müller") == "scholkopf and muller"
    assert normalize_title("RULER: What's the Real") == normalize_title("Ruler: What’s the real") == "ruler whats the real"
    assert normalize_title("ﬁne-tuning") == "fine tuning"
    assert title_key("Pre-training of Deep") == title_key("Pretraining of deep") == "pretrainingofdeep"


@pytest.mark.parametrize("raw,arxiv_id", UNARXIVE_ENTRIES)
def test_cited_title_parsed_from_raw_unarxive_entry_matches_the_linked_paper(raw, arxiv_id):
    matcher = TitleMatcher(CORPUS)
    title = parse_cited_title(raw)
    assert matcher.match(title) == arxiv_id, (raw, title)


def test_parse_cited_title_handles_the_common_styles():
    ieee = ('I. Armeni, Z.-Y. He, J. Gwak, A. R. Zamir, M. Fischer, J. Malik, and S. Savarese, “3D Scene Graph: A '
            'structure for unified semantics, 3D space, and camera,” in Proceedings of the IEEE/CVF International '
            'Conference on Computer Vision, 2019.')
    springer = ('Baluja, S., Marwood, D., Covell, M., Johnston, N.: No multiplication? no floating point? no problem! '
                'training networks for efficient inference. arXiv preprint arXiv:1811.09886 (2018)')
    elsevier = ('D. Dovey, Vector plots for irregular grids, in: Proceedings Visualization \'95, 1995, pp. 248–253. '
                'doi:10.1109/VISUAL.1995.480819.')
    trailing_year = "DS Jones. Field computation by moment methods, 1969."
    assert parse_cited_title(ieee) == "3D Scene Graph: A structure for unified semantics, 3D space, and camera"
    assert parse_cited_title(springer) == \
        "No multiplication? no floating point? no problem! training networks for efficient inference"
    assert parse_cited_title(elsevier) == "Vector plots for irregular grids"
    assert parse_cited_title(trailing_year) == "Field computation by moment methods"
    assert parse_cited_title("") == ""


@pytest.mark.parametrize("title,arxiv_id", RESEARCH_TOWN_TITLES)
def test_research_town_bibliography_titles_match(title, arxiv_id):
    assert TitleMatcher(CORPUS).match(title) == arxiv_id


@pytest.mark.parametrize("written,arxiv_id", [
    ("RL2: Fast reinforcement learning via slow reinforcement learning", "1611.02779"),
    ("RL^2: fast reinforcement learning via slow reinforcement learning", "1611.02779"),
    ("Imitation learning as f-divergence minimization", "1905.12888"),
    ("What makes good in-context examples for GPT-3?", "2101.06804"),
    ("SOTOPIA-π: Interactive learning of socially intelligent language agents", "2403.08715"),
])
def test_gold_titles_with_latex_match_their_plain_spelling(written, arxiv_id):
    hit = TitleMatcher(CORPUS).match_with_score(written, fuzzy=False)
    assert hit == (arxiv_id, 100.0)


def test_fuzzy_match_needs_the_threshold_and_equal_numbers():
    matcher = TitleMatcher(CORPUS, min_score=90.0)
    # "instance discrimination" vs the arXiv title's "instance-level discrimination": fuzzy, not exact
    assert matcher.match("Unsupervised feature learning via non-parametric instance discrimination", fuzzy=False) is None
    pid, score = matcher.match_with_score("Unsupervised feature learning via non-parametric instance discrimination")
    assert pid == "1805.01978" and 90 <= score < 100
    # different papers with similar titles must not match
    assert matcher.match("Llama 2: Open foundation and fine-tuned chat models") is None
    assert matcher.match("Qwen2.5 technical report") is None  # 97.6 by edit distance, but a different version
    assert title_similarity(normalize_title("Qwen2 technical report"), normalize_title("Qwen2.5 technical report")) == 0
    assert matcher.match("A survey on software fault localization") is None
    assert TitleMatcher(CORPUS, min_score=99.0).match(
        "Unsupervised feature learning via non-parametric instance discrimination") is None
