"""The tensor batch every importance method scores.

A row is one prompt + response, right-padded. Positions are absolute indices into the row.
Segments (METHOD.md section 2) arrive as masks: `scored_mask` marks the reasoning tokens S,
`answer_mask` marks the answer-span tokens a_1..a_K. The probe reads the logits at
q_k = a_k - 1 (the positions that predict the answer tokens).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import InputError


@dataclass(frozen=True)
class GroupOutcomes:
    """What a group method needs besides the tokens: each row's group and outcome.

    group:     (B,) long, rows sampled for the same prompt share an id (GRPO's group).
    correct:   (B,) bool, the row's reward counts as right (the trainer's
               `oar_correct_threshold`; KTAE reads reward > 0).
    advantage: (B,) float32 or None, the row's sequence advantage A_i (GRAIL's rollout filter
               reads its sign); None when the rows were not trained on (analysis).
    """

    group: torch.Tensor
    correct: torch.Tensor
    advantage: torch.Tensor | None = None

    def __post_init__(self) -> None:
        n = len(self.group)
        for name in ("correct", "advantage"):
            value = getattr(self, name)
            if value is not None and tuple(value.shape) != (n,):
                raise InputError(f"outcomes.{name} must have shape ({n},), one per row, got "
                                 f"{tuple(value.shape)}")

    def select(self, rows) -> "GroupOutcomes":
        idx = torch.as_tensor(rows, dtype=torch.long)
        pick = lambda t: None if t is None else t[idx.to(t.device)]  # noqa: E731
        return GroupOutcomes(pick(self.group), pick(self.correct), pick(self.advantage))


@dataclass
class ScoringBatch:
    """Inputs of an importance method.

    input_ids:      (B, L) long, prompt + response, right-padded with `pad_token_id`.
    attention_mask: (B, L) long, 1 on real tokens, 0 on padding.
    scored_mask:    (B, L) bool, the scored reasoning positions S.
    answer_mask:    (B, L) bool, the answer-span tokens; all False on a row with no span.
    pad_token_id:   the id OAR-P substitutes at a perturbed position.
    step_ids:       (B, L) long or None: the step each scored position belongs to (0, 1, ...
                    in order, each step a contiguous range), -1 elsewhere. Step-level methods
                    (`oar_p_step`, step gating) read it; `encode_pairs` fills it.
    response_mask:  (B, L) bool or None: every response token (reasoning, bridge, answer,
                    tail; span found or not). Methods that score the whole response (the
                    published entropy and GRAIL) read it; `encode_pairs` fills it.
    outcomes:       `GroupOutcomes` or None: each row's group and outcome, for methods that
                    compare a group's rollouts (KTAE); the trainer fills it.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    scored_mask: torch.Tensor
    answer_mask: torch.Tensor
    pad_token_id: int
    step_ids: torch.Tensor | None = None
    response_mask: torch.Tensor | None = None
    outcomes: GroupOutcomes | None = None

    def __post_init__(self) -> None:
        shape = tuple(self.input_ids.shape)
        if self.input_ids.dim() != 2:
            raise InputError(f"input_ids must be (B, L), got shape {shape}")
        for name in ("attention_mask", "scored_mask", "answer_mask"):
            got = tuple(getattr(self, name).shape)
            if got != shape:
                raise InputError(f"{name} must have the shape of input_ids {shape}, got {got}")
        self.scored_mask = self.scored_mask.bool()
        self.answer_mask = self.answer_mask.bool()
        if (self.answer_mask[:, 0]).any():
            raise InputError("an answer token at position 0 has no position that predicts it")
        if (self.scored_mask & self.answer_mask).any():
            raise InputError("scored_mask and answer_mask overlap: answer tokens are never scored")
        if (self.answer_mask & ~self.attention_mask.bool()).any():
            raise InputError("answer_mask marks padding positions")
        if self.step_ids is not None:
            self.step_ids = self.step_ids.long()
            if tuple(self.step_ids.shape) != shape:
                raise InputError(f"step_ids must have the shape of input_ids {shape}, "
                                 f"got {tuple(self.step_ids.shape)}")
            if ((self.step_ids >= 0) & ~self.scored_mask).any():
                raise InputError("step_ids marks positions outside scored_mask; steps hold "
                                 "scored reasoning tokens only (-1 elsewhere)")
        if self.response_mask is not None:
            self.response_mask = self.response_mask.bool()
            if tuple(self.response_mask.shape) != shape:
                raise InputError(f"response_mask must have the shape of input_ids {shape}, "
                                 f"got {tuple(self.response_mask.shape)}")
            if ((self.scored_mask | self.answer_mask) & ~self.response_mask).any():
                raise InputError("scored or answer positions lie outside response_mask; the "
                                 "response mask covers every response token")
        if self.outcomes is not None and len(self.outcomes.group) != shape[0]:
            raise InputError(f"outcomes describe {len(self.outcomes.group)} rows, the batch has {shape[0]}")

    def step_ranges(self, row: int) -> list[tuple[int, int]]:
        """The steps of `row` as absolute position ranges [a, b), in step order.

        Raises InputError when the batch has no steps."""
        if self.step_ids is None:
            raise InputError("this batch has no steps; build it with encode_pairs (it sets "
                             "step_ids) or pass ScoringBatch(step_ids=...)")
        ids = self.step_ids[row].tolist()
        ranges: dict[int, list[int]] = {}
        for t, k in enumerate(ids):
            if k >= 0:
                ranges.setdefault(k, [t, t + 1])[1] = t + 1
        return [tuple(ranges[k]) for k in sorted(ranges)]

    @property
    def has_answer(self) -> torch.Tensor:
        """(B,) bool: rows whose answer span was found (only these are scored)."""
        return self.answer_mask.any(dim=1)

    @property
    def probe_mask(self) -> torch.Tensor:
        """(B, L) bool: q_k = a_k - 1, the positions whose logits predict the answer tokens."""
        probe = torch.zeros_like(self.answer_mask)
        probe[:, :-1] = self.answer_mask[:, 1:]
        return probe

    @property
    def lengths(self) -> torch.Tensor:
        """(B,) long: real (unpadded) length of each row."""
        return self.attention_mask.sum(dim=1)

    def responses(self) -> torch.Tensor:
        """(B, L) bool `response_mask`; an InputError when the batch was built without it."""
        if self.response_mask is None:
            raise InputError("this batch has no response_mask; build it with encode_pairs (it sets "
                             "one) or pass ScoringBatch(response_mask=...)")
        return self.response_mask

    def to(self, device) -> "ScoringBatch":
        move = lambda t: None if t is None else t.to(device)  # noqa: E731
        return ScoringBatch(
            self.input_ids.to(device),
            self.attention_mask.to(device),
            self.scored_mask.to(device),
            self.answer_mask.to(device),
            self.pad_token_id,
            move(self.step_ids),
            move(self.response_mask),
            self.outcomes,
        )

    def select(self, rows) -> "ScoringBatch":
        """Sub-batch of the given row indices, trimmed to its longest row."""
        idx = torch.as_tensor(rows, dtype=torch.long, device=self.input_ids.device)
        width = int(self.attention_mask[idx].sum(dim=1).max().item()) if len(idx) else 0
        cut = lambda t: None if t is None else t[idx, :width]  # noqa: E731
        return ScoringBatch(
            self.input_ids[idx, :width],
            self.attention_mask[idx, :width],
            self.scored_mask[idx, :width],
            self.answer_mask[idx, :width],
            self.pad_token_id,
            cut(self.step_ids),
            cut(self.response_mask),
            None if self.outcomes is None else self.outcomes.select(idx.cpu()),
        )


def step_ids_from_ranges(shape: tuple[int, int], rows: list[list[tuple[int, int]]]) -> torch.Tensor:
    """(B, L) long step ids (-1 outside steps) from each row's absolute ranges [a, b)."""
    ids = torch.full(shape, -1, dtype=torch.long)
    for b, ranges in enumerate(rows):
        for k, (start, end) in enumerate(ranges):
            ids[b, start:end] = k
    return ids
