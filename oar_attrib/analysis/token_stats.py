"""The policy's own view of each response token, beside importance: its log-probability
log pi(y_t | y_<t) and the entropy H(pi(. | y_<t)) of the distribution that chose it, from one
teacher-forced forward per batch (the trace page's log-probability and entropy views).

The entropy is the one the `entropy` baseline scores and TRL's entropy top-rho mask keeps
(`gating.entropy_topk_mask`), here on every response token rather than the scored ones.
"""
from __future__ import annotations

from typing import Sequence

import torch

from ..defaults import ANSWER_FORMAT
from ..methods.baselines.entropy import token_entropy
from ..inputs.batch import ScoringBatch
from ..models.lm import eval_mode, model_device


def token_stats(model, batch: ScoringBatch, chunk: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    """(logprob, entropy), each (B, L) float32 on the batch's device: at position t >= 1 of a
    real (unpadded) token, log pi(x_t | x_<t) and H(pi(. | x_<t)) in nats, read from the logits
    at t - 1; 0 at position 0 and on padding. `chunk` positions are softmaxed at a time, so the
    (B, L, V) float32 log-softmax is never held whole."""
    work = batch.to(model_device(model))
    ids, attn = work.input_ids, work.attention_mask  # (B, L) each
    logprob = torch.zeros(ids.shape, dtype=torch.float32, device=ids.device)
    entropy = torch.zeros_like(logprob)
    with torch.no_grad(), eval_mode(model):
        logits = model(input_ids=ids, attention_mask=attn).logits  # (B, L, V)
        for start in range(0, ids.shape[1] - 1, chunk):
            stop = min(start + chunk, ids.shape[1] - 1)
            part = logits[:, start:stop].float()  # (B, C, V): predicts x at start+1 .. stop
            logp = torch.log_softmax(part, dim=-1)
            logprob[:, start + 1:stop + 1] = logp.gather(-1, ids[:, start + 1:stop + 1, None])[..., 0]
            entropy[:, start + 1:stop + 1] = token_entropy(part)
    real = attn.bool()
    real[:, 0] = False
    zero = torch.zeros((), device=ids.device)
    return (torch.where(real, logprob, zero).to(batch.input_ids.device),
            torch.where(real, entropy, zero).to(batch.input_ids.device))


def response_stats(model, tokenizer, prompts: Sequence, responses: Sequence[str], *,
                   chat: bool | None, answer_format: str = ANSWER_FORMAT) -> list[tuple[list, list]]:
    """(logprob, entropy) lists over each response's T tokens (the tokens a stored trace of
    the pair holds), one forward for the whole batch."""
    from ..inputs.encoding import encode_pairs

    batch, pairs = encode_pairs(tokenizer, list(prompts), list(responses), chat=chat,
                                answer_format=answer_format)
    logprob, entropy = token_stats(model, batch)
    return [(logprob[b, p.response_start:p.length].tolist(), entropy[b, p.response_start:p.length].tolist())
            for b, p in enumerate(pairs)]
