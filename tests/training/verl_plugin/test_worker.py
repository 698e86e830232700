"""The worker method's design (`verl.worker`), as far as a CPU runs it: a request of B rows split
across data-parallel ranks by verl's own chunking, each rank's `weights_of_rows` with the
model in its process, and verl's concatenation give the weights the project's pipeline gives
the whole batch, for a method verl's actor cannot serve (OAR-G, token OAR-P); and
`compute_oar_weights` is registered with the dispatch of `compute_log_prob`."""
import pytest
import torch
from verl.protocol import BatchData
from verl.single_controller.base.decorator import MAGIC_ATTR
from verl.workers.engine_workers import ActorRolloutRefWorker

import verl_rows as vr
from oar_attrib.models import load_model
from oar_attrib.training.reshaping import nonzero_rows, token_weights
from oar_attrib.training.verl.step import VerlRows, sequence_advantages
from oar_attrib.training.verl.worker import OARActorRolloutRefWorker, weights_of_rows, weights_request
from oar_attrib.weights.settings import ReshapeSettings


@pytest.mark.parametrize("method", ["oar_g", "oar_p"])
def test_split_across_ranks_the_worker_gives_the_pipelines_weights(method):
    model, tokenizer = load_model("arith-tiny")
    prompts, responses, rewards, uids = vr.rows_of(tokenizer)
    mask = vr.response_mask(responses)
    rows = VerlRows(prompts, responses, mask, vr.grpo(rewards, uids, mask), rewards, uids)
    sequence = sequence_advantages(rows.advantages, mask)
    settings = ReshapeSettings(method=method, probe="as_mean")
    select, outcomes = nonzero_rows(sequence, settings), rows.outcomes(sequence)
    want = token_weights(model, tokenizer, prompts, responses, mask.shape[1], settings, select, outcomes)
    request = weights_request(prompts, responses, settings, select, outcomes)
    parts = [weights_of_rows(model, tokenizer, part) for part in BatchData(request).chunk(2)]
    got = BatchData(parts).concat()
    # a row batched with other rows is padded differently: float rounding only
    torch.testing.assert_close(got["oar_weights"].to_padded_tensor(1.0), want.weights, atol=1e-4, rtol=1e-4)
    for name in ("span_found", "attributed", "nonfinite"):
        assert torch.equal(got[f"oar_{name}"], getattr(want, name)), name
    assert want.attributed.sum() == 5 and (want.weights != 1).any()


def test_compute_oar_weights_is_dispatched_as_compute_log_prob():
    ours = getattr(OARActorRolloutRefWorker.compute_oar_weights, MAGIC_ATTR)
    verls = getattr(ActorRolloutRefWorker.compute_log_prob, MAGIC_ATTR)
    assert ours["dispatch_mode"].keys() == verls["dispatch_mode"].keys()
    assert ours["dispatch_mode"]["dispatch_fn"].args == verls["dispatch_mode"]["dispatch_fn"].args == ("actor",)
    assert issubclass(OARActorRolloutRefWorker, ActorRolloutRefWorker)
