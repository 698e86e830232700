"""The advantage step of the `oar_sync` trainer mode, in verl's layout and without verl.

verl stores a batch response-aligned: (B, T) right-padded over the response tokens, the
response mask 1 on the tokens trained on. After verl has computed the outcome advantages
(GRPO's A_i on every response token), `advantage_step` computes each row's weights w_t where
the policy is (`scoring`: verl's entropies, or step OAR-P through the actor's
`compute_log_prob`), through the one weights pipeline (`training.reshaping.token_weights`, the
TRL trainer's), and returns the advantages A_i * w_t with the same `oar/*` metrics the TRL
trainer logs. Rows with a zero advantage are not attributed (A_i * w_t = 0 whatever w_t), nor
rows whose response mask has a hole (tokens of a tool between the model's: the answer-span
segmentation reads the model's text only); both keep weight 1.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch

from oar_attrib.errors import InputError
from oar_attrib.inputs.batch import GroupOutcomes
from oar_attrib.methods import method_spec
from oar_attrib.weights.gating import reshape_advantages

from ..errors import LowSpanRateWarning
from ..reshaping import (LOW_SPAN_RATE, TokenWeights, low_span_rate_message, metric_sums, nonzero_rows,
                         oar_metrics, token_weights)
from .scoring import Policy, policy_scorer
from .settings import VerlOARSettings


def sequence_advantages(advantages: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """(B,) float32 A_i from verl's (B, T) outcome advantages: the value on each row's response
    (0 for a row without response tokens). An InputError when a row carries two values on its
    response: the estimator was not an outcome one (`oar_sync` takes grpo or oar_grpo)."""
    mask = response_mask.bool()
    first = mask.float().argmax(dim=1)  # the first response token, as verl reads A_i
    seq = torch.where(mask.any(dim=1), advantages.gather(1, first[:, None])[:, 0],
                      torch.zeros((), dtype=advantages.dtype))
    varying = (mask & (advantages != seq[:, None])).any(dim=1)
    if varying.any():
        row = int(varying.nonzero()[0])
        raise InputError(f"the advantages of row {row} vary along its response: the oar_sync trainer mode "
                         "reshapes an outcome advantage A_i; set algorithm.adv_estimator=oar_grpo (or grpo)")
    return seq.float()


def reshape_token_advantages(advantages: torch.Tensor, response_mask: torch.Tensor, weights: torch.Tensor,
                             bonus: torch.Tensor | None = None) -> torch.Tensor:
    """(B, T) float32 A_i * w_t (+ b_t) on the response tokens, 0 on the others, from verl's
    (B, T) outcome advantages and (B, T) weights (`weights.gating.reshape_advantages`)."""
    seq = sequence_advantages(advantages, response_mask)
    return reshape_advantages(seq, weights, bonus) * response_mask.to(torch.float32)


@dataclass
class VerlRows:
    """A verl batch as the advantage step reads it; B rows, T the padded response width.

    prompts, responses: B token id lists (each response as long as the row's response);
    response_mask: (B, T), 1 on the response tokens trained on; advantages: (B, T) verl's;
    scores: (B,) each row's sequence reward; groups: B group keys (verl's uid);
    entropies: (B, T) verl's response-aligned entropies, or None when not fetched."""

    prompts: list[list[int]]
    responses: list[list[int]]
    response_mask: torch.Tensor
    advantages: torch.Tensor
    scores: torch.Tensor
    groups: list
    entropies: torch.Tensor | None = None

    def holed(self) -> torch.Tensor:
        """(B,) bool: rows whose response mask is 0 somewhere inside the response."""
        lengths = torch.tensor([len(r) for r in self.responses])
        inside = torch.arange(self.response_mask.shape[1])[None, :] < lengths[:, None]
        return (inside & ~self.response_mask.bool()).any(dim=1)

    def outcomes(self, sequence: torch.Tensor) -> GroupOutcomes:
        """Each row's group, whether its reward is > 0 (right, as KTAE reads it), and A_i."""
        keys = {key: n for n, key in enumerate(dict.fromkeys(self.groups))}
        group = torch.tensor([keys[key] for key in self.groups], dtype=torch.long)
        return GroupOutcomes(group=group, correct=self.scores.cpu() > 0, advantage=sequence)


@dataclass
class StepResult:
    """What the advantage step gives: the (B, T) advantages to store (None under a uniform
    method: verl's stay as they are), the weights and the oar/* metrics."""

    advantages: torch.Tensor | None
    weights: TokenWeights
    metrics: dict[str, float]


def advantage_step(rows: VerlRows, settings: VerlOARSettings, tokenizer, policy: Policy | None) -> StepResult:
    """Weights of `rows` under `settings`, the reshaped advantages and the oar/* metrics.

    policy: the actor's log-probabilities (`scoring.Policy`), read by step OAR-P only."""
    reshape = settings.reshape_settings()
    uniform = method_spec(reshape.method).uniform
    sequence = sequence_advantages(rows.advantages, rows.response_mask)
    select = nonzero_rows(sequence, reshape) or [True] * len(rows.responses)
    select = [keep and not holed for keep, holed in zip(select, rows.holed().tolist())]
    scorer = policy_scorer(policy, rows.entropies, settings.rows_per_call)
    weights = token_weights(None, tokenizer, rows.prompts, rows.responses, rows.response_mask.shape[1], reshape,
                            select, rows.outcomes(sequence), scorer=scorer)
    metrics = oar_metrics(*metric_sums(weights, sequence, uniform))
    advantages = None if uniform else reshape_token_advantages(rows.advantages, rows.response_mask,
                                                                weights.weights, weights.bonus)
    return StepResult(advantages, weights, metrics)


def warn_low_span_rate(metrics: dict[str, float], rows: int, settings: VerlOARSettings) -> bool:
    """Warn (LowSpanRateWarning, the TRL trainer's line) when few rows had an answer span;
    whether it warned."""
    rate = metrics["oar/span_found_rate"]
    if rate >= LOW_SPAN_RATE:
        return False
    bar = "!" * 78
    message = low_span_rate_message(rate, rows, settings.answer_format, settings.answer_pattern)
    warnings.warn(f"\n{bar}\n{message}\n{bar}", LowSpanRateWarning, stacklevel=2)
    return True
