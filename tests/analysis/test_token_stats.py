"""`analysis.token_stats`: per-token log-probability and entropy, batched and chunked, equal to
a one-row-at-a-time reference on unpadded rows."""
import torch

from oar_attrib.analysis.token_stats import token_stats
from models import make_batch, tiny_qwen2


def reference(model, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(logprob, entropy) of one unpadded row (L,), position 0 = 0."""
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids[None]).logits[0].double(), dim=-1)  # (L, V)
    lp = torch.zeros(len(ids), dtype=torch.float64)
    h = torch.zeros(len(ids), dtype=torch.float64)
    for t in range(1, len(ids)):
        lp[t] = logp[t - 1, ids[t]]
        h[t] = -(logp[t - 1].exp() * logp[t - 1]).sum()
    return lp, h


def test_batched_chunked_stats_equal_the_row_reference():
    model = tiny_qwen2(seed=3)
    batch = make_batch(lengths=(22, 9, 17), seed=5)
    logprob, entropy = token_stats(model, batch, chunk=4)  # chunks that cut rows unevenly
    assert logprob.shape == entropy.shape == batch.input_ids.shape
    for row, n in enumerate((22, 9, 17)):
        lp, h = reference(model, batch.input_ids[row, :n])
        torch.testing.assert_close(logprob[row, :n].double(), lp, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(entropy[row, :n].double(), h, atol=1e-5, rtol=1e-5)
        assert (logprob[row, n:] == 0).all() and (entropy[row, n:] == 0).all()  # padding
    assert (logprob[:, 1:22][batch.attention_mask[:, 1:].bool()] < 0).all()
    assert (entropy[:, 0] == 0).all()
