"""``sft.loss_on=decision``: train the decision token as the two-way classifier the Selector reads.

The Selector scores a pair by P(True) / (P(True) + P(False)) at the first answer position (pasa/selector.py,
``normalize=true``). This loss is the cross-entropy of exactly that quantity: the logits of the two decision
words at the position before the answer's first token, nothing else. Compared with the LM loss on the whole answer
it (a) spends no gradient on the rest of the vocabulary or the end-of-turn tokens, and (b) computes the output
head at one position per example instead of every position (the head is most of a small model's FLOPs per token).
Ours, not the paper's (PaSa trains decision + rationale with the LM loss, §4.3); a named switch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from trl import SFTTrainer


def _causal_lm(model):
    """The transformers CausalLM under a PEFT wrapper (or the model itself)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


class DecisionLossTrainer(SFTTrainer):
    def __init__(self, *args, decision_words: tuple[str, ...] = ("True", "False"), **kwargs):
        super().__init__(*args, **kwargs)
        tok = self.processing_class
        # The first token of each word, as the Selector reads it (LLM.candidate_token_ids).
        ids = [tok.encode(w, add_special_tokens=False) for w in decision_words]
        if any(not i for i in ids) or len({i[0] for i in ids}) != len(ids):
            raise ValueError(f"sft.loss_on=decision needs decision words with distinct first tokens; "
                             f"{decision_words} tokenize as {ids}")
        self.decision_ids = torch.tensor([i[0] for i in ids])
        for n, row in enumerate(self.train_dataset):  # fail before training, naming the example
            first = _first_answer_token(row)
            if first not in self.decision_ids.tolist():
                raise ValueError(f"sft.loss_on=decision: training example {n} does not start its answer with one of "
                                 f"{decision_words} (first answer token {tok.decode([first])!r})")

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        labels = inputs["labels"]
        supervised = labels != -100
        if not bool(supervised.any(dim=1).all()):
            raise ValueError("sft.loss_on=decision: an example has no answer tokens")
        first = supervised.int().argmax(dim=1)  # the answer's first token
        rows = torch.arange(labels.shape[0], device=labels.device)
        lm = _causal_lm(model)
        hidden = lm.get_decoder()(input_ids=inputs["input_ids"],
                                  attention_mask=inputs.get("attention_mask")).last_hidden_state
        h = hidden[rows, first - 1]  # the position that predicts the decision token
        ids = self.decision_ids.to(labels.device)
        logits = lm.get_output_embeddings()(h)[:, ids].float()
        target = (labels[rows, first].unsqueeze(1) == ids.unsqueeze(0)).int().argmax(dim=1)
        loss = F.cross_entropy(logits, target)
        return (loss, {"logits": logits}) if return_outputs else loss


def _first_answer_token(row: dict) -> int:
    """The first supervised token of a tokenized TRL row (its labels are -100 on the prompt)."""
    labels = row.get("labels")
    if labels is None or all(x == -100 for x in labels):
        raise ValueError("sft.loss_on=decision needs prompt/completion rows with a supervised answer")
    return next(x for x in labels if x != -100)
