"""PaSa's prompts, verbatim from the paper (``../shared/seeds/pasa.txt``), one constant per table.

Every consumer (data generation, the crawl environment, the Selector, baselines) formats these same strings, so
that what is trained is exactly what is served.
"""

from __future__ import annotations

from scholar_agents.llm.constraints import json_text

# Table 7: the prompt for the teacher LLM to generate search queries from the user query (imitation data).
SEARCH_QUERY_GENERATION = (
    "You are an elite researcher in the field of AI, please generate some mutually exclusive queries in a list to "
    "search the relevant papers according to the User Query. Searching for a survey paper would be better. "
    "User Query: {user_query} The semantics between generated queries are not mutually inclusive. "
    'The format of the list is: ["query1", "query2", ...] Queries:'
)

# Table 8: the Crawler's session prompts. A search session starts from S_q, an expand session from S_{q+p}.
CRAWLER_SEARCH_SESSION = (
    "Please, generate some mutually exclusive queries in a list to search the relevant papers according to the "
    "User Query. Searching for survey papers would be better. User Query: {user_query}"
)
CRAWLER_EXPAND_SESSION = (
    "You are conducting research on '{user_query}'. You need to predict which sections to look at to get more "
    "relevant papers. Title: {title} Abstract: {abstract} Sections: {sections}"
)
# Table 8: the session trajectory (response) grammar.
ACTION_SEARCH = "[Search]"
ACTION_EXPAND = "[Expand]"
ACTION_STOP = "[Stop]"

# The official code's wording (github.com/bytedance/pasa, agent_prompt.json: "generate_query", "select_section";
# the same strings in the released sft_crawler data). The released pasa-7b-crawler was trained on it, so a released
# checkpoint is served with it (``crawler.env.prompt_style=official``). It differs from Table 8 in small ways that
# matter to a fine-tuned model: no comma after "Please", a newline before "User Query:", the query in backquotes,
# "for getting" instead of "to get", newlines before "Abstract:" and "Sections:". paper_agent.py ``.strip()``s both.
CRAWLER_SEARCH_SESSION_OFFICIAL = (
    "Please generate some mutually exclusive queries in a list to search the relevant papers according to the "
    "User Query. Searching for survey papers would be better.\nUser Query: {user_query}"
)
CRAWLER_EXPAND_SESSION_OFFICIAL = (
    "You are conducting research on `{user_query}`. You need to predict which sections to look at for getting more "
    "relevant papers. Title: {title}\nAbstract: {abstract}\nSections: {sections}"
)
# The official code's stop tokens (released sft_crawler data, what the released crawler writes): one per session
# kind. The parser reads both as [Stop].
ACTION_STOP_SEARCH = "[StopSearch]"
ACTION_STOP_EXPAND = "[StopExpand]"

# crawler.env.prompt_style: "paper" = Table 8 verbatim (the default); "official" = the official code's wording.
PROMPT_STYLES = ("paper", "official")
_SEARCH_SESSION = {"paper": CRAWLER_SEARCH_SESSION, "official": CRAWLER_SEARCH_SESSION_OFFICIAL}
_EXPAND_SESSION = {"paper": CRAWLER_EXPAND_SESSION, "official": CRAWLER_EXPAND_SESSION_OFFICIAL}


def _session_template(table: dict[str, str], style: str) -> str:
    if style not in table:
        raise ValueError(f"crawler prompt_style must be one of {PROMPT_STYLES}, got {style!r}")
    return table[style]


# Ours: the answer format spelled out for an UNTRAINED model (the prompted-agent baseline, PaSa-GPT-4o in Table 2,
# whose prompt the paper does not print). Appended to the Table 8 prompt only when asked (``instructed=True``);
# a trained Crawler sees Table 8 verbatim.
CRAWLER_SEARCH_FORMAT = (
    " Answer only with the search queries, each one after the token [Search], and end with [Stop]. "
    "Format: [Search] first query [Search] second query [Stop]"
)
CRAWLER_EXPAND_FORMAT = (
    " Answer only with section names copied from Sections, each one after the token [Expand], and end with [Stop]. "
    "Format: [Expand] first section [Expand] second section [Stop]"
)


def crawler_search_messages(user_query: str, instructed: bool = False, style: str = "paper") -> list[dict[str, str]]:
    """The S_q session state (Table 8, search session; ``style="official"``: the official code's wording) as a
    chat: the same in SFT data, inference and PPO."""
    content = _session_template(_SEARCH_SESSION, style).format(user_query=user_query)
    if style == "official":
        content = content.strip()
    return [{"role": "user", "content": content + (CRAWLER_SEARCH_FORMAT if instructed else "")}]


def crawler_expand_messages(user_query: str, title: str, abstract: str, sections: list[str],
                            instructed: bool = False, style: str = "paper") -> list[dict[str, str]]:
    """The S_{q+p} session state (Table 8, expand session): the paper's title, abstract and section outline, the
    outline written as a JSON list of headings so that the model can copy a heading verbatim after [Expand].
    The released sft_crawler data writes the outline the same way (a JSON list); the official paper_agent.py
    formats ``sections.keys()`` (``dict_keys([...])``) at inference — we follow the data the checkpoint learnt."""
    import json

    outline = json.dumps(list(sections), ensure_ascii=False)
    content = _session_template(_EXPAND_SESSION, style).format(user_query=user_query, title=title,
                                                               abstract=abstract, sections=outline)
    if style == "official":
        content = content.strip()
    return [{"role": "user", "content": content + (CRAWLER_EXPAND_FORMAT if instructed else "")}]

# Table 13: the search-query paraphrase prompt (the "Google with GPT-4o" baseline).
SEARCH_QUERY_PARAPHRASE = (
    "Generate a search query suitable for Google based on the given academic paper-related query. Here's the "
    "structure and requirements for generating the search query:\n\n"
    "Understand the Query: Read and understand the given specific academic query.\n\n"
    "Identify Key Elements: Extract the main research field and the specific approaches or topics mentioned in the "
    "query.\n\n"
    "Formulate the Search Query: Combine these elements into a concise query that includes terms indicating "
    "academic sources. Do not add any site limitations to your query.\n\n"
    "[User's Query]: {user_query}\n\n"
    "[Generated Search Query]:"
)

# Table 15: the Selector prompt. The model answers "True"/"False" FIRST, then the rationale, so that one forward
# pass gives P("True") (§4.3): it both decides and ranks.
SELECTOR = (
    "You are an elite researcher in the field of AI, conducting research on {user_query}. Evaluate whether the "
    "following paper fully satisfies the detailed requirements of the user query and provide your reasoning. "
    "Ensure that your decision and reasoning are consistent.\n\n"
    "Searched Paper:\nTitle: {title}\nAbstract: {abstract}\n\n"
    "User Query: {user_query}\n\n"
    "Output format: Decision: True/False\nReason:... \nDecision:"
)
SELECTOR_TRUE = "True"
SELECTOR_FALSE = "False"

# Table 16: the AutoScholarQuery generation prompt (few-shot examples are filled in by data_gen).
AUTOSCHOLARQUERY_GENERATION = (
    "You are provided a 'Related Work' section of a research paper. The researcher reviewed the relevant work, "
    "conducted a literature survey, and cited corresponding references in this text (enclosed by '\\cite' tags "
    "with IDs). Can you guess what research questions the researcher might have posed when preparing this text? "
    "The answers to these questions should be the references cited in this passage. Please list questions and "
    "provide the corresponding answers.\n\n"
    "[Requirements:]\n"
    "1. Craft questions similar to those a researcher would pose when reviewing related works, such as \"Which "
    "paper studied ...?\", \"Any works about...?\", \"Could you provide me some works...?\"\n"
    "2. Construct the question-answer pairs based on [Section from A Research Paper]. The answer should be the "
    "cited papers in [Section from A Research Paper].\n"
    "3. Do not ask questions including \"or\" or \"and\" that may involve more than one condition.\n"
    "4. Clarity: Formulate questions clearly and unambiguously to prevent confusion.\n"
    "5. Contextual Definitions: Include explanations or definitions for specialized terms and concepts used in "
    "the questions.\n"
    "6. Format the output as a JSON array containing five objects corresponding to the three question-answer "
    "pairs.\n\n"
    "Here are some examples:\n[Begin of examples]\n{examples}[End of examples]\n"
    "{section}\n[OUTPUT]:"
)
# One few-shot example block of Table 16: "{Section from A Research Paper-i}\n{OUTPUT-i}".
AUTOSCHOLARQUERY_EXAMPLE = "{section}\n[OUTPUT]: {output}\n"


def autoscholarquery_schema(n_citations: int, max_questions: int = 5, max_question_chars: int = 300) -> dict:
    """Table 16's answer as a JSON schema (for ``data_gen.constrained``): an array of {"question", "answer"}
    objects whose answers are the passage's own ``\\cite{n}`` markers (the few-shot format), lengths capped so
    the array fits ``max_new_tokens``."""
    if n_citations < 1:
        raise ValueError("an AutoScholarQuery passage needs at least one citation")
    return {
        "type": "array",
        "minItems": 1,
        "maxItems": max_questions,
        "items": {
            "type": "object",
            "properties": {
                "question": json_text(15, max_question_chars),
                "answer": {"type": "array", "minItems": 1, "maxItems": min(n_citations, 8),
                           "items": {"enum": [f"\\cite{{{i}}}" for i in range(1, n_citations + 1)]}},
            },
            "required": ["question", "answer"],
        },
    }


def selector_messages(user_query: str, title: str, abstract: str) -> list[dict[str, str]]:
    """The Selector's chat prompt (Table 15) — the same messages in SFT data, scoring and PPO rewards."""
    return [{"role": "user", "content": SELECTOR.format(user_query=user_query, title=title, abstract=abstract)}]


def selector_target(decision: bool, rationale: str) -> str:
    """The Selector's SFT answer (Appendix B, the released sft_selector format): the decision token FIRST, so that
    P("True") at the first answer position is the score (§4.3), then the rationale."""
    reason = " ".join(str(rationale).split())
    if not reason:
        raise ValueError("a Selector target needs a non-empty rationale")
    return f"{SELECTOR_TRUE if decision else SELECTOR_FALSE}\nReason: {reason}"
