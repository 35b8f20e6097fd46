"""Every prompt of Thought-Retriever and AcademicEval, as printed in the paper (figure numbers in the names).

Where the paper's figure has typesetting artefacts (stray closing quotes) they are removed; wording, typos
included ("plase" in Figure 14), is kept so results stay comparable.
"""

from __future__ import annotations

from scholar_agents.llm.constraints import OutputConstraint

# ---- Algorithm 1, line 4: answer generation --------------------------------------------------------------
# The official code's QA prompt (run_experiment.py `qa_via_LLM`) plus the sufficiency instruction of
# Appendix M ("explicitly instruct the LLM to assess whether the retrieved content is sufficient ... return 'No'").
QA_ANSWER = (
    "Given text: {context}, based on this text, answer the question: {question}\n"
    "If the text does not contain enough information to answer the question, just answer 'No'."
)

# ---- Algorithm 1, line 6: thought + confidence (Figure 3) -----------------------------------------------
FIGURE3_THOUGHT = (
    "Input: Given question:{question}, given answer:{answer}. Based on the provided question and its "
    "corresponding answer, perform the following steps:\n\n"
    "Step 1: Determine if the answer is an actual answer or if it merely indicates that the question cannot be "
    "answered due to insufficient information. If the latter is true, just output '0' without any extra words, "
    "otherwise output '1'.\n\n"
    "Step 2: If it is a valid answer, succinctly summarize both the question and answer into a coherent "
    "knowledge point, forming a fluent passage."
)
# filter_mode=none, the "w/o Filter" ablation (§4.5: "we remove the confidence generation and thought merge"): Step 2
# of Figure 3 alone, so every generated passage is a thought; no 0/1 verdict is asked for.
NO_CONFIDENCE_THOUGHT = (
    "Input: Given question:{question}, given answer:{answer}. Based on the provided question and its "
    "corresponding answer, succinctly summarize both the question and answer into a coherent knowledge point, "
    "forming a fluent passage."
)
# thought_prompt=structured (ours): the same instructions with a fixed, parseable answer layout.
STRUCTURED_SUFFIX = (
    "\n\nWrite your output in exactly this form:\n"
    "Confidence: <0 or 1>\n"
    "Thought: <the knowledge point; leave empty if the confidence is 0>"
)

# ---- the thought prompts' answer formats (applied when thought.constrained) --------------------------------
# Each is a layout that thought_parser already reads, so replies generated freely (older caches, thought.constrained
# =false, models that follow the figure) parse the same way. The knowledge point starts with a letter, so it is
# never a bare digit or an empty label, and runs to the end of its line (thought_max_new_tokens caps it).
_PASSAGE = r"[A-Za-z][^\n]*"
# Figure 3 as printed: '0' alone, or '1' then the knowledge point on the next line.
FIGURE3_FORMAT = OutputConstraint(regex=rf"0|1\n{_PASSAGE}")
# thought_prompt=structured: the "Confidence:/Thought:" layout of STRUCTURED_SUFFIX.
STRUCTURED_FORMAT = OutputConstraint(regex=rf"Confidence: 0|Confidence: 1\nThought: {_PASSAGE}")
# w/o Filter: no verdict is asked for, so the format is the knowledge point alone.
PASSAGE_FORMAT = OutputConstraint(regex=_PASSAGE)

# ---- AcademicEval task prompts (Appendix A.2) -------------------------------------------------------------
# Retrieval queries of Appendix A.2 (what is embedded to retrieve context).
ABSTRACT_RETRIEVAL_QUERY = (
    "Please craft an abstract summarizing the key points from the provided text. The abstract should be of "
    "appropriate length and include the main theme, significant findings or arguments, and conclusions of the "
    "text. Ensure it captures the essence of the content in a clear, succinct manner"
)
RELATED_RETRIEVAL_QUERY = (
    "Could you please write a related work for introducing this paper? Its abstract is: {paper_abs}"
)

# Figure 10: writing abstracts (Abstract-single and Abstract-multi).
FIGURE10_ABSTRACT = (
    "Please craft an abstract summarizing and connecting the key points from the provided Text.\n\n"
    "The text should be composed of content extracted from different papers, potentially spanning varied "
    "disciplines, but all addressing overlapping themes or subjects.\n\n"
    "The abstract should be of appropriate length (around 300 words), encompassing the main theme, significant "
    "findings or arguments, and conclusion of the Text.\n\n"
    "Ensure the abstract captures the essence of the content in a clear, succinct manner, providing a coherent "
    "summary that bridges the various papers.\n"
    "Here is the Text: {context}"
)

# Figure 11: the Abstract-multi label (an expert LLM summarises the five abstracts).
FIGURE11_MULTI_LABEL = (
    "Create a concise, cohesive summary that encapsulates the key points and themes from the following five "
    "distinct abstracts. The summary should integrate the main ideas from each abstract to provide a "
    "comprehensive overview. It should be about 300 words.\n\n"
    "Abstract 1: {abs1}\n\nAbstract 2: {abs2}\n\nAbstract 3: {abs3}\n\nAbstract 4: {abs4}\n\nAbstract 5: {abs5}"
)

# Figure 12: writing related work (Related-multi), with its in-context example.
FIGURE12_RELATED = (
    "Given the abstract and related work of a research article, along with a sample material, write a paragraph "
    "about its related work. Use the following as guidance:\n\n"
    "Abstract: This research paper investigates the impact of climate change on global agricultural "
    "productivity. The study employs a comprehensive dataset of temperature and precipitation changes over the "
    "past century, combined with historical crop yield data. Through advanced statistical modeling and machine "
    "learning techniques, the research identifies significant correlations between temperature and "
    "precipitation fluctuations and variations in crop yields. Furthermore, it predicts future scenarios of "
    "agricultural productivity under different climate change scenarios, providing valuable insights for "
    "policymakers and stakeholders in the agricultural sector to develop adaptive strategies.\n\n"
    "Related Work: Previous studies in the field have explored the relationship between climate change and "
    "agriculture but have primarily focused on specific regions or crops. Smith et al. (2017) conducted a "
    "comprehensive analysis of the impact of temperature on wheat yields in North America, highlighting the "
    "vulnerability of wheat crops to warming temperatures. Additionally, Johnson et al. (2019) investigated the "
    "effects of changing precipitation patterns on rice production in Southeast Asia, emphasizing the importance "
    "of water management in mitigating climate-related risks to agriculture. While these studies contribute "
    "valuable insights, our research extends their scope by considering a global perspective and employing "
    "advanced modeling techniques to provide more accurate predictions of future agricultural productivity under "
    "climate change scenarios.\n\n"
    "Based on the abstract of this article and related materials, write a paragraph about its related work:\n\n"
    "Abstract: {abstract}\n\n"
    "Related materials: {context}"
)

# ---- Pre-queries (Appendix D, Figure 13) -------------------------------------------------------------------
FIGURE13_TEMPLATES = (
    "What new perspectives does '{title}' offer in its field",
    "How might the findings in '{title}' influence future research?",
    "What are the practical applications of the research in '{title}'?",
    "In what ways does '{title}' challenge existing theories or beliefs?",
    "How does '{title}' contribute to our understanding of its subject matter?",
    "What does the statement '{sentence}' imply in the context of '{title}'?",
    "How does the sentence '{sentence}' relate to the overall theme of '{title}'?",
)
# The figure asks for 20 questions; the count is a parameter here.
FIGURE13_LLM = (
    "Given the paper title: {title}; and its abstract {abstract}, please ask {n} questions that would be helpful "
    "for writing its related work section. Each questions should have a number at the begining. For example:\n"
    " 1.<Put Your Question Here>\n 2. <Put Your Question Here>, etc. The questions should be diverse and with "
    "different level of abstraction."
)
# For the abstract tasks the abstract is the label, so showing it to the query generator would leak it; the
# official code's pre-query generator shows the title and a paragraph of the main content instead (ours: same).
FIGURE13_LLM_EXCERPT = (
    "Given the paper title: {title}; and an excerpt of the paper {abstract}, please ask {n} questions that would "
    "be helpful for understanding the paper. Each questions should have a number at the begining. For example:\n"
    " 1.<Put Your Question Here>\n 2. <Put Your Question Here>, etc. The questions should be diverse and with "
    "different level of abstraction."
)

# ---- Win rate judge (Figure 14) ---------------------------------------------------------------------------
FIGURE14_JUDGE = (
    "Given the original abstract:{original},and given the two generated abstracts:\n"
    " Generated Abstract 1:{gen1}; and Generated Abstract 2: {gen2}, plase evaluate which one is closer to the "
    "original abstract.\n"
    " Just output 'Abstract 1 is better' or 'Abstract 2 is better', no extra words."
)

# ---- Abstraction-level case study (§4.4 (1), Appendix E, Table 6) -------------------------------------------
# Table 6's six queries, from least (rank 1) to most abstract (rank 6). Ranks 2 and 6 name things specific to the
# paper of the case study ("Minerva", "user-centric utility"); here they are phrased for any paper.
TABLE6_QUERIES = (
    (1, "How many benchmarks are used to test the model's long context understanding ability in this paper?"),
    (2, "Please explain the main technical term introduced in '{title}' to me."),
    (3, "What are the key methods introduced in this paper?"),
    (4, "What are some of the limitations of this study?"),
    (5, "Please craft an abstract summarizing the key points from the provided text."),
    (6, "What are the broader future implications of '{title}' for its field?"),
)


def answer_prompt(task: str, question: str, context: str, fields: dict | None = None) -> str:
    """The answer-generation prompt for a task: ``qa`` (pre-queries, any user question), ``abstract``
    (Figure 10) or ``related`` (Figure 12, needs ``fields['abstract']``)."""
    fields = fields or {}
    if task == "qa":
        return QA_ANSWER.format(context=context, question=question)
    if task == "abstract":
        return FIGURE10_ABSTRACT.format(context=context)
    if task == "related":
        if "abstract" not in fields:
            raise ValueError("a 'related' query needs fields['abstract'] (the target paper's abstract)")
        return FIGURE12_RELATED.format(abstract=fields["abstract"], context=context)
    raise ValueError(f"unknown task {task!r}; expected qa | abstract | related")


def thought_prompt(question: str, answer: str, style: str = "figure3", confidence: bool = True) -> str:
    """Figure 3 (thought + confidence); ``confidence=False`` is the w/o-Filter ablation's prompt (no Step 1)."""
    if not confidence:
        return NO_CONFIDENCE_THOUGHT.format(question=question, answer=answer)
    prompt = FIGURE3_THOUGHT.format(question=question, answer=answer)
    if style == "structured":
        return prompt + STRUCTURED_SUFFIX
    if style != "figure3":
        raise ValueError(f"thought prompt style must be figure3 | structured, got {style!r}")
    return prompt


def thought_format(style: str = "figure3", confidence: bool = True) -> OutputConstraint:
    """The answer format of ``thought_prompt(..., style, confidence)``."""
    if not confidence:
        return PASSAGE_FORMAT
    if style not in ("figure3", "structured"):
        raise ValueError(f"thought prompt style must be figure3 | structured, got {style!r}")
    return STRUCTURED_FORMAT if style == "structured" else FIGURE3_FORMAT


def judge_prompt(reference: str, first: str, second: str) -> str:
    return FIGURE14_JUDGE.format(original=reference, gen1=first, gen2=second)
