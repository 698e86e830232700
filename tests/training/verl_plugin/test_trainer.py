"""The `oar_sync` trainer mode's advantage step, run on a CPU: verl's own old-log-probability
step and advantage step, then ours, with TransferQueue and the actor worker group replaced by
one-process stand-ins (tests/verl_fakes.py) whose `compute_log_prob` runs the bundled model as
verl's engine would. What it stores equals A_i * w_t with the weights of the project's own
pipeline on the same rows (step OAR-P with the as_joint probe, entropy), and verl's GRPO
advantages bit for bit under `none`."""
import pytest
import torch
import transfer_queue
from omegaconf import OmegaConf
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage
from verl.trainer.ppo.v1 import get_trainer_cls

import verl_rows as vr
from oar_attrib.errors import LibraryVersionError
from oar_attrib.models import load_model
from oar_attrib.training.errors import TrainingConfigError
from oar_attrib.training.reshaping import nonzero_rows, token_weights
from oar_attrib.training.verl import verl_private
from oar_attrib.training.verl.settings import VerlOARSettings
from oar_attrib.training.verl.step import VerlRows, sequence_advantages
from oar_attrib.training.verl.trainer import OARSyncTrainer
from verl_fakes import FakeActor, FakeQueue


def _config(method: str, estimator: str = "oar_grpo", **oar) -> OmegaConf:
    return OmegaConf.create({
        "algorithm": {"adv_estimator": estimator, "use_kl_in_reward": False, "gamma": 1.0, "lam": 1.0,
                      "norm_adv_by_std_in_grpo": True, "rollout_correction": None},
        "actor_rollout_ref": {"rollout": {"n": 3, "temperature": 1.0, "calculate_log_probs": False},
                              "actor": {"loss_agg_mode": "token-mean", "loss_scale_factor": None}},
        "oar": {"method": method, **oar}})


@pytest.fixture(scope="module")
def arith():
    return load_model("arith-tiny")


def _run(arith, monkeypatch, config, ranks: int = 2):
    """(trainer, queue, batch, metrics, rows) after verl's old-log-prob step and the trainer's
    advantage step on the bundled rows."""
    model, tokenizer = arith
    queue = FakeQueue()
    monkeypatch.setattr(transfer_queue, "kv_batch_get", queue.kv_batch_get)
    monkeypatch.setattr(transfer_queue, "kv_batch_put", queue.kv_batch_put)
    prompts, responses, rewards, uids = vr.rows_of(tokenizer)
    keys, rows = [], []
    for n, (prompt, response, reward, uid) in enumerate(zip(prompts, responses, rewards, uids)):
        scores = torch.zeros(len(response))
        scores[-1] = reward
        ids = torch.tensor(prompt + response)
        keys.append(f"{uid}_{n}_0")
        rows.append({"uid": uid, "prompts": torch.tensor(prompt), "responses": torch.tensor(response),
                     "input_ids": ids, "position_ids": torch.arange(len(ids)),
                     "response_mask": torch.ones(len(response), dtype=torch.long), "rm_scores": scores})
    trainer = get_trainer_cls("oar_sync").__new__(get_trainer_cls("oar_sync"))
    trainer.config = config
    trainer.oar_setup(config)
    trainer.actor_rollout_wg = FakeActor(model, ranks=ranks, queue=queue)
    trainer.tokenizer = tokenizer
    metrics = {}
    batch = queue.put_rows(keys, rows)
    batch = trainer._compute_old_log_prob(batch, metrics)  # verl's: old log-probs and entropies
    batch = trainer._compute_advantage(batch, metrics)
    return trainer, queue, batch, metrics, (prompts, responses, rewards, uids)


def _stored(queue, batch, name):
    return queue.kv_batch_get(batch.keys, "train", [name])[name].to_padded_tensor(0.0)


def _grpo(rows):
    prompts, responses, rewards, uids = rows
    mask = vr.response_mask(responses)
    scores = torch.zeros(mask.shape)
    scores[torch.arange(len(responses)), mask.sum(1) - 1] = rewards
    return compute_grpo_outcome_advantage(scores, mask, uids)[0], mask


@pytest.mark.parametrize("method", ["oar_p_step", "entropy", "entropy_reasoning"])
def test_the_stored_advantages_are_a_times_the_projects_own_weights(arith, monkeypatch, method):
    model, tokenizer = arith
    trainer, queue, batch, metrics, rows = _run(arith, monkeypatch, _config(method, rows_per_call=5))
    grpo, mask = _grpo(rows)
    prompts, responses, rewards, uids = rows
    verl = VerlRows(prompts, responses, mask, grpo, rewards, uids)
    sequence = sequence_advantages(grpo, mask)
    settings = VerlOARSettings(method=method).reshape_settings()
    want = token_weights(model, tokenizer, prompts, responses, mask.shape[1], settings,
                         nonzero_rows(sequence, settings), verl.outcomes(sequence))
    got = _stored(queue, batch, "advantages")
    # verl's entropy (logsumexp - sum p z) and the project's (-sum p log p) differ by rounding,
    # which the gate's min-max normalisation scales up a little
    torch.testing.assert_close(got, sequence[:, None] * want.weights * mask, atol=2e-4, rtol=1e-4)
    if method.startswith("entropy"):
        entropy = _stored(queue, batch, "entropy")  # what verl's own step stored
        read = want.scored & want.attributed[:, None]
        assert read.sum() > 20
        torch.testing.assert_close(entropy[read], want.importances[read], atol=1e-5, rtol=1e-5)
    assert torch.equal(_stored(queue, batch, "returns"), got)
    assert not torch.equal(got, grpo)  # reshaped
    assert {"oar/ess_ratio", "oar/span_found_rate", "oar/attributed_rate", "oar/step_s", "actor/entropy"} <= set(metrics)
    assert metrics["oar/span_found_rate"] == 7 / 8


def test_step_oar_p_calls_the_actor_in_bounded_padded_calls(arith, monkeypatch):
    trainer, *_ = _run(arith, monkeypatch, _config("oar_p_step", rows_per_call=5), ranks=2)
    calls = trainer.actor_rollout_wg.calls
    assert calls[0] == 8  # verl's old log-probabilities of the batch
    copies = calls[1:]  # the copies of the five attributed rows: 5 clean + 9 steps
    assert all(n % 2 == 0 and n <= 6 for n in copies) and len(copies) == 3  # 5, 5, 4 copies, padded to even


def test_plain_grpo_stores_verls_advantages_bit_for_bit(arith, monkeypatch):
    trainer, queue, batch, metrics, rows = _run(arith, monkeypatch, _config("none"))
    grpo, _ = _grpo(rows)
    assert torch.equal(_stored(queue, batch, "advantages"), grpo)
    assert metrics["oar/ess_ratio"] == 1.0 and len(trainer.actor_rollout_wg.calls) == 1


@pytest.mark.parametrize("config, line", [
    (_config("oar_p_step", estimator="gae"), "algorithm.adv_estimator=gae gives per-token advantages; "),
    (_config("oar_g"), "oar.method='oar_g' does not run on verl yet: "),
    (OmegaConf.merge(_config("entropy"), {"algorithm": {"rollout_correction": {"bypass_mode": True}}}),
     "oar.method=entropy reads the entropies verl's actor computes with the old log-probabilities, "),
])
def test_a_config_the_mode_cannot_run_is_one_line(config, line):
    trainer = OARSyncTrainer.__new__(OARSyncTrainer)
    with pytest.raises(TrainingConfigError) as err:
        trainer.oar_setup(config)
    assert str(err.value).startswith(line) and "\n" not in str(err.value)


def test_the_seam_names_exist_and_a_missing_one_or_another_version_is_one_line():
    verl_private.check()
    with pytest.raises(LibraryVersionError, match=r"^verl \S+ lacks verl.trainer.ppo.v1.trainer_base:PPOTrainer._gone, "
                                                  r"private names oar-attrib reaches \(checked on verl 0.9.1\)"):
        verl_private.check(names=("verl.trainer.ppo.v1.trainer_base:PPOTrainer._gone",))
    with pytest.raises(LibraryVersionError, match=r"^verl 0.10.0 is installed, but the oar_sync trainer mode was "
                                                  r"checked on verl >=0.9.1,<0.10 "):
        verl_private.check(version="0.10.0")
