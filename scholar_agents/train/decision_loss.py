"""``sft.loss_on=decision``: train the decision token as the two-way classifier the Selector reads.

The Selector scores a pair by P(True) / (P(True) + P(False)) at the first answer position (pasa/selectors/llm.py,
``normalize=true``). This loss is the cross-entropy of exactly that quantity: the logits of the two decision
words at the position before the answer's first token, nothing else. Compared with the LM loss on the whole answer
it (a) spends no gradient on the rest of the vocabulary or the end-of-turn tokens, and (b) computes the output
head at one position per example instead of every position (~20 % of SmolLM2-135M's FLOPs per token).
Ours, not the paper's (PaSa trains decision + rationale with the LM loss, §4.3); a named switch.
"""

from __future__ import annotations

import logging

import torch
import torch.nn.functional as F
from trl import SFTTrainer

from scholar_agents.runtime.progress import progress_bar

log = logging.getLogger(__name__)


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

    def _decision_positions(self, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per row: the position that predicts the decision token, and the decision's index (0 = the first word)."""
        supervised = labels != -100
        if not bool(supervised.any(dim=1).all()):
            raise ValueError("sft.loss_on=decision: an example has no answer tokens")
        first = supervised.int().argmax(dim=1)  # the answer's first token
        rows = torch.arange(labels.shape[0], device=labels.device)
        ids = self.decision_ids.to(labels.device)
        target = (labels[rows, first].unsqueeze(1) == ids.unsqueeze(0)).int().argmax(dim=1)
        return first - 1, target

    def _decision_states(self, model, inputs) -> tuple[torch.Tensor, torch.Tensor]:
        """The final hidden state at the decision position (the unwrapped model: the head fit, before training)."""
        pos, target = self._decision_positions(inputs["labels"])
        hidden = _causal_lm(model).get_decoder()(input_ids=inputs["input_ids"],
                                                 attention_mask=inputs.get("attention_mask")).last_hidden_state
        return hidden[torch.arange(len(pos), device=pos.device), pos], target

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        # Through the (possibly DDP / DeepSpeed / PEFT-wrapped) model's own forward, so gradient synchronisation
        # works; logits_to_keep = the batch's few decision positions, so the head runs there only.
        pos, target = self._decision_positions(inputs["labels"])
        keep, index = torch.unique(pos, return_inverse=True)
        out = model(input_ids=inputs["input_ids"], attention_mask=inputs.get("attention_mask"),
                    logits_to_keep=keep, use_cache=False)
        rows = torch.arange(len(pos), device=pos.device)
        logits = out.logits[rows, index][:, self.decision_ids.to(pos.device)].float()
        loss = F.cross_entropy(logits, target)
        return (loss, {"logits": logits}) if return_outputs else loss

    @torch.no_grad()
    def fit_decision_head(self, l2: float, mass_margin: float | None = 5.0, batch_size: int = 8) -> dict:
        """Linear probing (the LP of LP-FT, Kumar et al. 2022): fit the difference of the two decision rows of the
        output head by L-BFGS on the training set's decision states, a convex L2-regularised logistic regression.

        Why not just Adam: the states the head reads can carry a massive, near-constant dimension (SmolLM2-135M at
        layer 15: mean 23.9 vs std 0.07-0.42 elsewhere, docs/results/selector_learning.md); Adam moves every weight ~lr per step,
        so the logit moves ~100x more through that dimension than through the content ones and the fit stalls.
        The rows' common part (their mean, which sets their mass against the rest of the vocabulary) is kept, so
        only P(True) / (P(True) + P(False)) changes. Two decision words only.

        ``mass_margin`` (nats): then lift both rows by the same multiple of the states' mean direction until, on every
        training state, the likelier decision word's logit beats the log-sum-exp of the rest of the vocabulary by
        that margin — a common shift, so the two-way score and every gradient of the decision loss are unchanged,
        but the raw P(True) + P(False) is ~1 (``selector.normalize=false`` reads the same) and generation starts with
        the decision. ``None`` keeps the rows' common part as it was."""
        if len(self.decision_ids) != 2:
            raise ValueError("sft.head_init=probe fits a two-way decision (True/False)")
        model = self.model
        was_training = model.training
        model.eval()
        states, targets = [], []
        device = next(model.parameters()).device
        for i in progress_bar(range(0, len(self.train_dataset), batch_size), desc="decision states (head_init=probe)",
                              unit="batch", disable=not self.is_world_process_zero()):
            batch = self.data_collator([self.train_dataset[j]
                                        for j in range(i, min(i + batch_size, len(self.train_dataset)))])
            batch = {k: v.to(device) for k, v in batch.items() if isinstance(v, torch.Tensor)}
            h, t = self._decision_states(model, batch)
            states.append(h.float().cpu())
            targets.append(t.cpu())
        model.train(was_training)
        z, y = torch.cat(states), (torch.cat(targets) == 0).float()  # y = 1 for the first word (True)
        w = torch.zeros(z.shape[1], dtype=torch.float64, requires_grad=True)
        z64, y64 = z.double(), y.double()
        with torch.enable_grad():
            opt = torch.optim.LBFGS([w], lr=1.0, max_iter=500, tolerance_grad=1e-9, tolerance_change=1e-12,
                                    line_search_fn="strong_wolfe")

            def closure():
                opt.zero_grad()
                loss = F.binary_cross_entropy_with_logits(z64 @ w, y64) + 0.5 * l2 * (w * w).sum()
                loss.backward()
                return loss

            opt.step(closure)
        head = _causal_lm(model).get_output_embeddings().weight
        t_id, f_id = (int(x) for x in self.decision_ids)
        mean = (head[t_id].float() + head[f_id].float()) / 2
        delta = w.detach().float().to(head.device)
        head[t_id] = (mean + delta / 2).to(head.dtype)
        head[f_id] = (mean - delta / 2).to(head.dtype)
        lift = self._lift_decision_rows(z, head, (t_id, f_id), mass_margin) if mass_margin is not None else 0.0
        margin = z64 @ w.detach()
        acc = float(((margin > 0).double() == y64).double().mean())
        return {"examples": len(y), "l2": l2, "train_accuracy": acc, "mass_margin": mass_margin, "lift": lift,
                "train_loss": float(F.binary_cross_entropy_with_logits(margin, y64)),
                "train_decision_mass_min": self._decision_mass(z, head, (t_id, f_id)).min().item()}

    @staticmethod
    def _decision_mass(z: torch.Tensor, head: torch.Tensor, ids: tuple[int, int]) -> torch.Tensor:
        logits = z.to(head.device).float() @ head.float().T
        return torch.softmax(logits, dim=1)[:, list(ids)].sum(dim=1)

    @staticmethod
    def _lift_decision_rows(z: torch.Tensor, head: torch.Tensor, ids: tuple[int, int], margin: float) -> float:
        """Add s * u to both decision rows, u = mean(z) / |mean(z)|^2 (so z_i . u ~ 1 where the states share a large
        common component, as these do); s is the smallest that gives every training state the margin."""
        z = z.to(head.device).float()
        logits = z @ head.float().T
        decision = logits[:, list(ids)].max(dim=1).values
        others = logits.clone()
        others[:, list(ids)] = float("-inf")
        needed = torch.logsumexp(others, dim=1) - decision + margin  # logit still to gain, per state
        mean = z.mean(dim=0)
        u = mean / mean.dot(mean)
        along = z @ u
        if not bool((along > 0).all()):
            log.warning("head_init=probe: the decision states share no common direction; rows not lifted")
            return 0.0
        s = float((needed / along).max().clamp(min=0.0))
        for i in ids:
            head[i] = (head[i].float() + s * u).to(head.dtype)
        return s


def _first_answer_token(row: dict) -> int:
    """The first supervised token of a tokenized TRL row (its labels are -100 on the prompt)."""
    labels = row.get("labels")
    if labels is None or all(x == -100 for x in labels):
        raise ValueError("sft.loss_on=decision needs prompt/completion rows with a supervised answer")
    return next(x for x in labels if x != -100)
