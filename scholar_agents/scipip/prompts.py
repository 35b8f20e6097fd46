"""SciPIP's prompt templates (Appendix D, Tables 5–12), as chat messages.

The task texts are the paper's. Its few-shot demonstrations ({examples}, {Example ...}) are not printed in the
paper; the short ones here are ours, written for this code base. The inspiration-extraction prompt of the
retrieval path is described in §3.3.2 but not printed; ours follows that description (reply "None" when a
paper offers nothing, which drops it).
"""

from __future__ import annotations

from scholar_agents.llm.base import ChatMessages
from scholar_agents.llm.constraints import OutputConstraint

# ---- Table 5: τ1, summary then background ("motivations") and ideas ("details"), one two-turn chat ----

TAU1_SYSTEM = (
    "Now you are an expert in extracting key entities from research contents. You are good at identifying the most "
    "important keywords or phrases that summarize the main topics or concepts discussed in the content."
)
TAU1_SUMMARY_USER = """Task Description:
You are provided with the title, abstract, and introduction of a research paper. Your task is to generate a concise summary of what kind of problem does this paper aim to solve and what methods are proposed to address it. The summary should follow this format: The problem of [problem] can be addressed by [main idea/approach].

Instructions:
Title: Read the title to understand the general topic of the paper.
Abstract: Read the abstract to get a concise summary of the research, including the problem addressed, the methods used, and the main findings.
Introduction: Read the introduction to gain a deeper understanding of the background, significance, and specific problem the paper addresses, as well as the proposed approach or solution.
Based on the provided information, generate a single sentence that captures the essence of the paper, following the format specified above.

Your Turn:
Given the following paper information:
Title: {title}
Abstract: {abstract}
Introduction: {introduction}

Output: The problem of [problem] can be addressed by [main idea/approach]."""
TAU1_DETAILS_USER = """Please read the title, abstract, and introduction of the paper again, as well as the summary you provided. Complete the following two tasks:
1. Briefly provide the two most critical motivations behind proposing these methods to address the problems.
2. Briefly provide the three most critical or innovative details of the paper that were not mentioned in your summary (It's best if these details are the new methods or techniques adopted in this paper).

Output:
Motivations: 1.[motivation1]. 2.[motivation2].
Details: 1.[detail1]. 2.[detail2]. 3.[detail3]."""


def tau1_summary(title: str, abstract: str, introduction: str) -> ChatMessages:
    return [
        {"role": "system", "content": TAU1_SYSTEM},
        {"role": "user", "content": TAU1_SUMMARY_USER.format(title=title, abstract=abstract, introduction=introduction)},
    ]


def tau1_details(summary_chat: ChatMessages, summary_answer: str) -> ChatMessages:
    """The second turn of the same chat: the model sees its own summary (Table 5)."""
    return [*summary_chat, {"role": "assistant", "content": summary_answer}, {"role": "user", "content": TAU1_DETAILS_USER}]


# ---- Table 6: τ2, entity (keyword) extraction ----

TAU2_SYSTEM = TAU1_SYSTEM
TAU2_USER = """Task Description:
I will provide you with a content from a research paper. Your task is to extract the key entities from this content. These entities are the most important keywords or phrases that summarize the main topics or concepts discussed in the content.

Instruction:
Content: The content is your key focus, and the extracted entities should be based on the content. In other words, the entities you extract should be concrete manifestations of the main themes and topics discussed in the content.
Your approach should be systematic:
- Start by thoroughly reading the content to understand its main themes and topics.
- Identify and list the key entities that are central to the content.
- Ensure that the entities are relevant, meaningful, and representative of the content.
- Each entity in entities should be no longer than 5 words.
- Each entity in entities should contain at least 2 words.
- The number of entities should be less than or equal to {max_num}.
- Each entity in entities should be nouns or noun phrases.

examples:
{examples}

Your turn:
Given the following content: {content}

Your answer should follow this format: entity1, entity2, entity3, ....."""
# Ours (the paper's examples are not printed).
TAU2_EXAMPLES = """Content: We compress the key-value cache of large language models by evicting tokens with low attention scores, which halves GPU memory at long context lengths.
Entities: key-value cache, large language models, attention scores, gpu memory
Content: A graph neural network predicts molecular properties from atom-level features and is pretrained with a contrastive objective on unlabeled molecules.
Entities: graph neural network, molecular property prediction, contrastive pretraining"""


def tau2_keywords(content: str, max_num: int = 5) -> ChatMessages:
    return [
        {"role": "system", "content": TAU2_SYSTEM},
        {"role": "user", "content": TAU2_USER.format(max_num=max_num, examples=TAU2_EXAMPLES, content=content)},
    ]


# ---- Table 7: τ3, concise methods (few-shot, §3.3.2) ----

TAU3_SYSTEM = "You now are a researcher in the field of AI with innovative and pioneering abilities."
TAU3_USER = """# Task Description:
You are an AI researcher conducting studies in a specific domain. Someone has provided you with a methodology section, and your task is to transform it into another style. I will give you an example. The example begins with "# Example 1" and includes a Example Summarized Methods. Then, your task starts with "# Your Task", containing "Your Methodology Section". Your job is to transform Your Methodology Section into a Summarized Methods by referring to Example 1. Note that the ideas in Example 1 are unrelated to your idea, so the key focus should be on the style of Example Summarized Methods. You should directly start with your response and do not start with a section title like "## Your Summarized Methods".

# Example 1
## Example Summarized Methods
{example}

# Your Task
## Your Methodology Section
{methodology}

## Your Summarized Methods"""
# Ours: a hand-written concise method in the style §3.3.2 asks for (more detailed than an introduction, no background).
TAU3_EXAMPLE = """To fine-tune a large model cheaply, we freeze its weights and learn a low-rank update for each attention projection.
1. **Low-rank update:** each frozen weight W is replaced by W + BA, where B and A have rank r much smaller than the layer width; only A and B are trained.
2. **Initialisation:** A is random and B is zero, so training starts from the pretrained model exactly.
3. **Merging for inference:** after training, BA is added into W, so inference costs nothing extra."""


def tau3_concise_method(methodology: str, example: str = TAU3_EXAMPLE) -> ChatMessages:
    return [
        {"role": "system", "content": TAU3_SYSTEM},
        {"role": "user", "content": TAU3_USER.format(example=example, methodology=methodology)},
    ]


# ---- Table 8: background transformation ----

TRANSFORM_SYSTEM = (
    "You are a teacher in the field of AI, skilled at clearly explaining AI concepts to students. Your student is an "
    "undergraduate in AI with a basic understanding of deep learning."
)
TRANSFORM_USER = """# Task Description:
You are teaching your undergraduate about a specific subfield of AI research. You have a brief description of the research background, and now you need to explain its meaning and purpose in detail to your undergraduate. Keep in mind that your undergraduate may be completely unfamiliar with the technical terms in the research background. I will give you an example. The example begins with "# Example 1" and includes a Brief Research Background, several Technical Terms, and the corresponding Detailed Research Background. Then, your task starts with "# Your Task", containing "Your Brief Research Background" and "Your Technical Terms". Your job is to expand Your Brief Research Background into a Detailed Research Background by referring to Example 1. Note that the research background in Example 1 are unrelated to yours, so the key focus should be on the relationship between the Brief Research Background and the Detailed Research Background. You should directly start with your response and do not start with a section title like "## Detailed Background".

# Example 1
## Brief Research Background
{example_brief}
## Technical Terms
large language models, kv cache, gpu memory
## Detailed Research Background
{example_detailed}

# Your Task
## Your Research Background
{brief_background}
## Your Technical Terms
{keywords}"""
# Ours (the paper prints only the example's technical terms).
TRANSFORM_EXAMPLE_BRIEF = (
    "1. Serving large language models on long inputs is limited by the memory of the kv cache. "
    "2. Existing cache compression loses accuracy on tasks that need distant context."
)
TRANSFORM_EXAMPLE_DETAILED = (
    "Large language models generate text one token at a time and keep the keys and values of all previous tokens "
    "(the kv cache) in GPU memory to avoid recomputing them. The cache grows with the input, so for long documents "
    "it, not the weights, limits how many requests fit on a GPU. Dropping or quantising old cache entries saves "
    "memory but fails questions whose answer lies far back in the input. The challenge is to cut kv cache memory "
    "while keeping the distant context some tasks need."
)


def transform_background(brief_background: str, keywords: list[str]) -> ChatMessages:
    return [
        {"role": "system", "content": TRANSFORM_SYSTEM},
        {
            "role": "user",
            "content": TRANSFORM_USER.format(
                example_brief=TRANSFORM_EXAMPLE_BRIEF,
                example_detailed=TRANSFORM_EXAMPLE_DETAILED,
                brief_background=brief_background,
                keywords=", ".join(keywords),
            ),
        },
    ]


# ---- Table 9: brainstorm ----

BRAINSTORM_SYSTEM = (
    "Now you are a researcher in the field of AI with innovative and pioneering abilities. You are good at generating "
    "creative and original ideas."
)
BRAINSTORM_USER = """### Task Description:
You are an AI researcher tasked with brainstorming initial, innovative ideas to address a given research problem in AI. Focus on generating diverse and creative approaches rather than finalized methods. The ideas can be rough and in their infancy but should cover a range of possible directions that could be explored further.

### Information Provided:
- **Research Background**: {background}

### Approach:
Your brainstorming should be systematic:
- **Step 1**: Thoroughly understand the research background.
- **Step 2**: Generate a list of 4 to 6 high-level ideas or directions that could potentially solve problems in the given background. Be creative, think outside the box, and avoid merely rephrasing existing methods.

### Format for Your Response:
Please present 4 to 6 ideas in the following format:
**Idea 1**: [Brief description of the first idea]
**Idea 2**: [Brief description of the second idea]
..."""


def brainstorm(background: str) -> ChatMessages:
    return [{"role": "system", "content": BRAINSTORM_SYSTEM}, {"role": "user", "content": BRAINSTORM_USER.format(background=background)}]


# ---- Retrieval path: inspirations from concise methods (§3.3.2; prompt ours, see module docstring) ----

INSPIRATION_SYSTEM = (
    "Now you are a researcher in the field of AI with innovative and pioneering abilities. You are good at "
    "extracting novel and valuable inspirations from papers."
)
INSPIRATION_USER = """# Task Description:
You will be provided with a research problem and the summarized methods of a related paper. Your task is to extract a novel, effective, and specific inspiration from the related paper that can help address the research problem, and condense it into at most three sentences. If the related paper does not help solve the research problem, reply with "None" only.

# Research problem
{background}

# Summarized methods of the related paper
{concise_method}

# Your Inspiration"""


def inspiration(background: str, concise_method: str) -> ChatMessages:
    return [
        {"role": "system", "content": INSPIRATION_SYSTEM},
        {"role": "user", "content": INSPIRATION_USER.format(background=background, concise_method=concise_method)},
    ]


# ---- Table 10: initial idea generation from inspirations ----

IDEAS_SYSTEM = (
    "Now you are a researcher in the field of AI with innovative and pioneering abilities. You are good at using "
    "innovative and original methods to solve cutting-edge problems in the field of AI."
)
IDEAS_USER = """# Task Description:
You will be provided with a research problem, along with inspirations extracted from related papers. Your task is to identify and combine these inspirations to propose 3 to 4 different ideas to solve the research problem. The ideas should be innovative and try to avoid using the same inspirations repeatedly. Each idea should starts with "**Idea **".

# Information Provided:
## Research problem
{background}
## Inspirations
{inspirations}"""


def ideas_from_inspirations(background: str, inspirations: list[str]) -> ChatMessages:
    text = "\n".join(f"{i + 1}. {s}" for i, s in enumerate(inspirations))
    return [{"role": "system", "content": IDEAS_SYSTEM}, {"role": "user", "content": IDEAS_USER.format(background=background, inspirations=text)}]


# ---- Table 11: integration ----

INTEGRATE_SYSTEM = "Now you are a researcher in the field of AI. You are good at selecting the ideas that meet the requirements."
INTEGRATE_USER = """### Task Description:
You will be provided with some ideas you previously generated, and a research background. Your task is to select 5-6 ideas that best address the problems described in the research background (priority) and ideas that are relatively novel and feasible (secondary).

### Information Provided:
1. **Ideas**: These are the ideas you previously generated based on the research background and several related papers.
2. **Research Background**: This document describes specific problems and challenges that need to be addressed.

### Approach:
Your approach should be systematic:
- **Step 1**: Analyze the research background to understand the specific problems that need solutions.
- **Step 2**: Critically review the ideas, selecting 5-6 ideas that are most effective in solving the problems in the research background (priority) and that are also relatively novel and feasible (secondary).

### Specific Information:
I will provide you with specific information now; please use them according to the instructions above:
1. **Ideas**: {ideas}
2. **Research Background**: {background}

### Format for Your Response:
Please ensure that your final ideas include 5-6 entries, whose content has not been modified. Don't generate any explanation and just present the filtered ideas as well as their content in the following format:
**Idea 1**: [The first method idea]
**Idea 2**: [The second method idea]
**Idea 3**: [The third method idea]
..."""


def integrate(ideas: list[str], background: str) -> ChatMessages:
    text = "\n".join(f"**Idea {i + 1}**: {s}" for i, s in enumerate(ideas))
    return [{"role": "system", "content": INTEGRATE_SYSTEM}, {"role": "user", "content": INTEGRATE_USER.format(ideas=text, background=background)}]


# ---- Table 12: expansion with a retrieved concise-method demonstration ----

EXPAND_SYSTEM = (
    "Now you are a researcher in the field of AI with innovative and pioneering abilities. You are good at "
    "transforming a brief scientific idea into a concrete algorithm."
)
EXPAND_USER = """# Task Description:
You are an AI researcher conducting studies in a specific domain. Someone has provided you with a brief scientific idea, and your task is to transform it into a detailed, feasible, and concrete algorithm. If necessary, you may incorporate formulas to elaborate on the algorithm in the Latex format. I will give you an example. The example begins with "# Example 1" and includes a Brief Scientific Idea and its corresponding Detailed Scientific Idea. Then, your task starts with "# Your Task", containing "Your Brief Scientific Idea". Your job is to expand Your Brief Scientific Idea into a Detailed Scientific Idea by referring to Example 1. Note that the ideas in Example 1 are unrelated to your idea, so the key focus should be on the relationship between the Brief Scientific Idea and the Detailed Scientific Idea. You should directly start with your response and do not start with a section title like "## Detailed Scientific Idea".

# Example 1
## Example Brief Scientific Idea
{example_brief}
## Example Detailed Scientific Idea
{example_detailed}

# Your Task
## Your Research Background
{background}
## Your Brief Scientific Idea
{brief_idea}"""


def expand(background: str, brief_idea: str, example_brief: str, example_detailed: str) -> ChatMessages:
    return [
        {"role": "system", "content": EXPAND_SYSTEM},
        {
            "role": "user",
            "content": EXPAND_USER.format(
                example_brief=example_brief, example_detailed=example_detailed, background=background, brief_idea=brief_idea
            ),
        },
    ]


# ---- Baseline: direct prompting (Table 2's "GPT-4o" row: ideas straight from the user's query) ----

DIRECT_SYSTEM = "Now you are a researcher in the field of AI with innovative and pioneering abilities."
DIRECT_USER = """Propose 3 to 4 novel research ideas that address the following research background. Each idea should start with "**Idea N**:" and be described in a few sentences.

# Research Background
{background}"""


def direct_ideas(background: str) -> ChatMessages:
    return [{"role": "system", "content": DIRECT_SYSTEM}, {"role": "user", "content": DIRECT_USER.format(background=background)}]


# ---- output formats: each prompt's answer shape as an OutputConstraint (applied when scipip.*.constrained) ----
# The shapes are the prompts' own templates, written so that output_parsers.py parses them unchanged; lengths are
# capped so a weak model cannot spend max_new_tokens inside one field. Constraining fixes the form, not the content.

# A clause / item starts with a letter and holds no full stop, no control character and no brackets: SmolLM2 otherwise
# fills the template with its placeholders ("[motivation1]"), which the parsers reject.
_CLAUSE = r"[A-Za-z][^.\[\]\x00-\x1f]{7,89}"  # one clause of a template sentence
_ITEM = r"[A-Za-z][^.\[\]\x00-\x1f]{9,79}"  # one numbered item of Table 5's second turn (5 fit cpu_demo's 128 tokens)
# A word of an entity. Digits only in words that start with a capital (GPT-4, T5, ResNet50): SmolLM2 echoed τ2's
# "entity1, entity2" placeholders, which the parser rightly drops (has_placeholder), leaving no keyword at all
# (measured: 1 of 12 papers on the bundled store). Ours; lower-case digit words such as "word2vec" are lost.
_WORD = r"([a-z][a-z-]{0,19}|[A-Z][A-Za-z0-9-]{0,19})"
_KEYWORD = rf"{_WORD}( {_WORD}){{1,4}}"  # τ2: 2-5 words

SUMMARY_FORMAT = OutputConstraint(regex=rf"The problem of {_CLAUSE} can be addressed by {_CLAUSE}\.")
DETAILS_FORMAT = OutputConstraint(
    regex=rf"Motivations: 1\. {_ITEM}\. 2\. {_ITEM}\.\nDetails: 1\. {_ITEM}\. 2\. {_ITEM}\. 3\. {_ITEM}\.")
# τ3 and Table 12: prose without the section titles the prompt forbids (markdown headers), at least a sentence.
# Unbounded (the parser needs no closing token; max_new_tokens ends it): a bounded version must nest its repeats.
METHOD_FORMAT = OutputConstraint(regex=r"[A-Z][^#\x00-\x09\x0b-\x1f]{80,}")


def keywords_format(max_num: int = 5) -> OutputConstraint:
    """τ2's "entity1, entity2, ...": 1..max_num entities of 2-5 words."""
    return OutputConstraint(regex=rf"{_KEYWORD}(, {_KEYWORD}){{0,{max(0, max_num - 1)}}}")


def ideas_format(min_ideas: int, max_ideas: int) -> OutputConstraint:
    """Tables 9-11's "**Idea N**: ..." lines, N counting from 1, each idea a few sentences on one line (the
    parser keeps the complete ideas of an answer cut by max_new_tokens)."""
    line = r"[^*\x00-\x1f]{20,}"  # one line; the next "**Idea" or max_new_tokens ends it
    required = "".join(rf"\*\*Idea {i}\*\*: {line}\n" for i in range(1, min_ideas + 1))
    optional = "".join(rf"(\*\*Idea {i}\*\*: {line}\n" for i in range(min_ideas + 1, max_ideas + 1))
    return OutputConstraint(regex=required + optional + ")?" * (max_ideas - min_ideas))
