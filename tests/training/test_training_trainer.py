"""OARGRPOTrainer on a tiny random Qwen2 over the world tokenizer, CPU, one or two steps each.

Completions come from a scripted rollout (right / wrong / no-answer variants of each reference
solution), so rewards differ within every group and answer spans exist; in the plain-GRPO
equivalence test the rollout also samples from the model, to exercise the random streams.
"""
import json

import pytest
import torch
from trl import GRPOTrainer

from oar_attrib.weights.gating import bilevel_weights
from oar_attrib.inputs.encoding import encode_pairs
from oar_attrib.methods import get_method, register_method, unregister_method
from oar_attrib.methods.baselines.ktae import key_token_values
from oar_attrib.methods import method_spec as get_method_spec
from oar_attrib.weights.weightings import weighting_spec
from oar_attrib.training import trainer as trainer_module
from oar_attrib.training.config import OARConfig, oar_method_choices
from oar_attrib.training.errors import TrainingConfigError
from oar_attrib.training.rewards import world_reward
from oar_attrib.training.run_store_hook import RunStoreHook
from oar_attrib.training.toy import ScriptedRollout, tiny_policy
from oar_attrib.training.trainer import OARGRPOTrainer
from shared_data import qwen_dir
from models import GROUP, TRAIN_ARGS, record_loss_inputs, tiny_trainer


def logged(trainer) -> dict:
    """Metrics of the first log line."""
    return trainer.state.log_history[0]


def test_loss_sees_sequence_advantage_times_weight(tmp_path, tok, world):
    trainer = tiny_trainer(tmp_path, tok, world, record=True, oar_method="oar_p", oar_probe="as_mean")
    # The policy before the step, built again from the same seed (a deepcopy of trainer.model
    # would share the forward accelerate wraps around the original).
    before = tiny_policy(tok).eval()
    trainer.train()
    (inputs,) = trainer.loss_inputs
    prompt_rows = [ids[m.bool()].tolist() for ids, m in zip(inputs["prompt_ids"], inputs["prompt_mask"])]
    lengths = inputs["completion_mask"].sum(dim=1).tolist()
    completion_rows = [ids[:n].tolist() for ids, n in zip(inputs["completion_ids"], lengths)]
    prompts = tok.batch_decode(prompt_rows)
    texts = tok.batch_decode(completion_rows, skip_special_tokens=True)
    # Independent path: text prompts, the TRL-free encoder, the registry, the gate.
    answers = {p.prompt: str(p.answer) for p in world[0]}
    rewards = torch.tensor(world_reward(prompts, texts, answer=[answers[p] for p in prompts]))
    adv = torch.zeros(len(prompts))
    for prompt in set(prompts):
        rows = [i for i, p in enumerate(prompts) if p == prompt]
        r = rewards[rows]
        adv[rows] = (r - r.mean()) / (r.std() + 1e-4)
    batch, pairs = encode_pairs(tok, prompts, None, response_ids=completion_rows, fmt="gsm8k")
    imp = get_method("oar_p")(before, batch, probe="as_mean", max_batch_tokens=16384)
    w = bilevel_weights(imp, batch.scored_mask & batch.has_answer[:, None])
    expected = torch.ones_like(inputs["advantages"])
    for b, pair in enumerate(pairs):
        expected[b, : len(pair.response_ids)] = w[b, pair.response_start : pair.length]
    expected = adv[:, None] * expected
    mask = inputs["completion_mask"].bool()
    assert inputs["advantages"].shape == inputs["completion_ids"].shape
    assert (expected[mask] != adv[:, None].expand_as(expected)[mask]).any()  # not all weights 1
    torch.testing.assert_close(inputs["advantages"][mask], expected[mask], atol=1e-4, rtol=1e-4)


def test_none_matches_plain_grpo(tmp_path, tok, world):
    # The rollouts also sample 8 tokens from the model, so both runs draw from the global RNG.
    # Each trainer is built right before it trains: building one reseeds the global RNG.
    plain = tiny_trainer(tmp_path / "a", tok, world, cls=GRPOTrainer, sample_tokens=8)
    start = [p.detach().clone() for p in plain.model.parameters()]
    plain.train()
    oar = tiny_trainer(tmp_path / "b", tok, world, sample_tokens=8, oar_method="none")
    oar.train()
    assert any(not torch.equal(a, b) for a, b in zip(start, plain.model.parameters()))
    for (name, p), q in zip(plain.model.named_parameters(), oar.model.parameters()):
        assert torch.equal(p, q), name
    assert logged(plain)["loss"] == logged(oar)["loss"]
    assert oar.last_token_weights is not None and (oar.last_token_weights.weights == 1).all()


def test_parameters_change_after_a_step(tmp_path, tok, world):
    trainer = tiny_trainer(tmp_path, tok, world, oar_method="oar_g")
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    changed = [not torch.equal(a, b) for a, b in zip(before, trainer.model.parameters())]
    assert sum(changed) >= len(changed) // 2


def test_weights_are_computed_once_per_generation_batch(tmp_path, tok, world, monkeypatch):
    calls = []
    original = trainer_module.token_weights
    monkeypatch.setattr(trainer_module, "token_weights",
                        lambda *a, **k: calls.append(1) or original(*a, **k))
    # 2 micro-steps per optimizer step, each generation reused for 2 iterations: 2 optimizer
    # steps are 4 micro-steps and 4 loss calls, all from one generation batch.
    trainer = tiny_trainer(tmp_path, tok, world, record=True, oar_method="oar_g", max_steps=2,
                           per_device_train_batch_size=4, gradient_accumulation_steps=2, num_iterations=2)
    trainer.train()
    assert len(trainer.loss_inputs) == 4
    assert len(calls) == 1 and trainer.oar_batches == 1
    assert all(inp["advantages"].dim() == 2 for inp in trainer.loss_inputs)


@pytest.mark.parametrize("method", [m for m in oar_method_choices() if m != "none"] + ["entropy-top_rho"])
def test_every_method_runs_and_logs(tmp_path, tok, world, method):
    name, _, mode = method.partition("-")
    extra = {"oar_weighting": mode} if mode else {}
    trainer = tiny_trainer(tmp_path, tok, world, oar_method=name, **extra)
    trainer.train()
    tw = trainer.last_token_weights
    assert torch.isfinite(tw.weights).all() and not tw.nonfinite.any()
    assert tw.scored.any() and (get_method_spec(name).signed or (tw.importances[tw.scored] >= 0).all())
    assert (tw.importances[~tw.scored] == 0).all() and (tw.weights[~tw.scored] == 1).all()
    if weighting_spec(mode or get_method_spec(name).weighting).preserves_mass:  # mean 1 over S
        for row in range(len(tw.pairs)):
            if tw.scored[row].any():
                assert tw.weights[row][tw.scored[row]].mean().item() == pytest.approx(1.0, abs=1e-4)
    logs = logged(trainer)
    for key in ("oar/ess_ratio", "oar/top10_mass", "oar/span_found_rate", "oar/weight_max",
                "oar/time_s", "oar/time_share"):
        assert key in logs, key
    assert 0 < logs["oar/ess_ratio"] <= 1 and 0 < logs["oar/time_share"] < 1


def test_a_method_registered_in_a_test_trains_with_no_other_change(tmp_path, tok, world):
    calls = []

    @register_method("test_position", weighting="bilevel")
    def test_position(model, batch, *, probe="as_mean", generator=None):
        """Importance = 1 + position: a method the package never heard of."""
        calls.append(batch.input_ids.shape)
        positions = torch.arange(batch.input_ids.shape[1], dtype=torch.float32).expand(batch.input_ids.shape)
        return torch.where(batch.scored_mask & batch.has_answer[:, None], 1.0 + positions, 0.0)

    try:
        assert "test_position" in oar_method_choices()
        trainer = tiny_trainer(tmp_path, tok, world, oar_method="test_position")
        trainer.train()
        tw = trainer.last_token_weights
        assert calls and tw.attributed.any()
        for row in tw.attributed.nonzero().flatten().tolist():
            scored = tw.scored[row]
            # Importances rise with the position, so the gate's weights do too, with mean 1 over S.
            assert (tw.importances[row][scored].diff() > 0).all()
            assert (tw.weights[row][scored].diff() >= 0).all()
            assert tw.weights[row][scored].mean().item() == pytest.approx(1.0, abs=1e-4)
    finally:
        unregister_method("test_position")
    assert "test_position" not in oar_method_choices()


def test_an_analysis_only_method_is_refused_by_the_config(tmp_path):
    register_method("test_explain_only", analysis_only=True)(lambda model, batch, **kw: None)
    try:
        with pytest.raises(TrainingConfigError, match="analysis-only"):
            OARConfig(output_dir=str(tmp_path), **{**TRAIN_ARGS, "oar_method": "test_explain_only"})
    finally:
        unregister_method("test_explain_only")


def test_response_without_answer_span_gets_weight_one_and_is_counted(tmp_path, tok, world):
    trainer = tiny_trainer(tmp_path, tok, world, record=True, oar_method="oar_g")
    trainer.train()
    tw = trainer.last_token_weights
    missing = ~tw.span_found
    assert missing.sum() == len(tw.pairs) // 4  # one variant in four has no answer line
    assert (tw.weights[missing] == 1).all()
    assert logged(trainer)["oar/span_found_rate"] == pytest.approx(0.75)


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo"])
def test_every_loss_type_takes_token_advantages(tmp_path, tok, world, loss_type):
    level = {"importance_sampling_level": "sequence"} if loss_type == "luspo" else {}
    trainer = tiny_trainer(tmp_path, tok, world, record=True, oar_method="random", loss_type=loss_type, **level)
    trainer.train()
    (inputs,) = trainer.loss_inputs
    assert inputs["advantages"].shape == inputs["completion_ids"].shape
    assert torch.isfinite(torch.tensor(logged(trainer)["loss"]))


def test_probe_warmup_uses_lt_first(tmp_path, tok, world, monkeypatch):
    probes = []
    original = trainer_module.token_weights
    monkeypatch.setattr(trainer_module, "token_weights",
                        lambda *a, **k: probes.append(a[5].probe) or original(*a, **k))
    trainer = tiny_trainer(tmp_path, tok, world, oar_method="oar_g", max_steps=2, oar_probe_warmup_steps=1)
    trainer.train()
    assert probes == ["lt", "as_mean"]


def check_record(rec, answers):
    n = len(rec["token_ids"])
    assert rec["step"] == 0 and rec["extra"] == {"method": "oar_g"} and rec["group"] in (0, 1)
    assert len(rec["weights"]["oar_g"]) == len(rec["scores"]["oar_g"]) == len(rec["tokens"]) == n
    assert rec["reward"] == world_reward([rec["prompt"]], [rec["response"]], answer=[answers[rec["prompt"]]])[0]
    assert set(rec["oracle"]) >= {"direct", "chain", "distractor", "filler", "complete"}
    assert rec["span_found"] == ("no_answer_span" not in rec["flags"])


def test_run_store_gets_a_sample_with_the_oracle(tmp_path, tok, world):
    trainer = tiny_trainer(tmp_path, tok, world, oar_method="oar_g", oar_store_every=1, oar_store_samples=8)
    trainer.train()
    answers = {p.prompt: str(p.answer) for p in world[0]}
    store_path = tmp_path / "out" / "runs.db"  # the default: the web app's run store
    try:
        from oar_attrib.store import Store
    except ImportError:
        Store = None
    if Store is not None:
        with Store(store_path, readonly=True) as store:
            (run,) = store.runs()
            rows, total = store.traces(run.id)
            assert total == 8 and {r.step for r in rows} == {0} and {r.group for r in rows} == {0, 1}
            record = store.trace(rows[0].id)
            assert "oar_g" in record.attributions and record.oracle and record.extra == {"method": "oar_g"}
    # The same sample as JSON Lines, in the shape of TraceAttribution.to_dict() plus fields.
    hook = RunStoreHook(tmp_path / "traces.jsonl", every=1, samples=4, group_size=GROUP)
    tw = trainer.last_token_weights
    inputs = [{"prompt": tok.decode(p.prompt_ids), "problem": world[1]["problem"][
        world[1]["prompt"].index(tok.decode(p.prompt_ids))]} for p in tw.pairs]
    rewards = world_reward(None, [p.text for p in tw.pairs], answer=[answers[i["prompt"]] for i in inputs])
    hook.write_batch(step=0, weights=tw, inputs=inputs, rewards=rewards, advantages=[0.5] * len(inputs),
                     method="oar_g", probe="as_mean")
    records = [json.loads(line) for line in (tmp_path / "traces.jsonl").read_text().splitlines()]
    assert len(records) == 4
    for rec in records:
        check_record(rec, answers)
    try:
        from oar_attrib.attribution import TraceAttribution
    except ImportError:
        return
    extra = {"reward", "correct", "step", "group", "extra", "oracle"}
    TraceAttribution.from_dict({k: v for k, v in records[0].items() if k not in extra})


def test_checkpoint_is_safetensors_and_resumes(tmp_path, tok, world, capfd):
    import warnings

    first = tiny_trainer(tmp_path, tok, world, oar_method="oar_g", save_strategy="steps", save_steps=1,
                         activation_checkpointing=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first.train()
    # TRL's calls of the renamed gradient_checkpointing methods print nothing.
    assert not [w for w in caught if "checkpointing" in str(w.message)]
    ckpt = tmp_path / "out" / "checkpoint-1"
    assert (ckpt / "model.safetensors").is_file()
    assert not list(ckpt.glob("pytorch_model*.bin"))  # weights only as safetensors
    # The saved card names the base model and the OAR settings.
    card = (tmp_path / "out" / "README.md").read_text()
    assert "[None]" not in card and "oar_g importances, probe as_mean" in card
    assert "| `oar_tau` | `0.4` |" in card and "| `answer_format` | `auto` |" in card
    capfd.readouterr()
    second = tiny_trainer(tmp_path, tok, world, oar_method="oar_g", save_strategy="no", max_steps=2)
    second.train(resume_from_checkpoint=str(ckpt))
    assert second.state.global_step == 2 and second.oar_batches == 1
    assert "missing keys" not in capfd.readouterr().err  # lm_head.weight is tied, not missing
    head = second.model.get_output_embeddings().weight
    assert head.data_ptr() == second.model.get_input_embeddings().weight.data_ptr()


def test_chat_prompts_with_a_real_tokenizer_and_math_verify(tmp_path):
    """Chat-templated math prompts, Qwen's byte-level BPE, `\\boxed{}` spans, math-verify rewards."""
    from transformers import AutoTokenizer

    from oar_attrib.training.data import math_dataset
    from oar_attrib.training.rewards import math_verify_reward

    qwen = AutoTokenizer.from_pretrained(str(qwen_dir()))
    data = tmp_path / "set.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in [
        {"question": "What is 6 times 7?", "answer": "42"}, {"problem": "Half of 1/3?", "answer": "\\frac{1}{6}"}]))
    dataset = math_dataset(data, qwen)
    texts = {"42": ["6 times 7 is 42. So \\boxed{42}.", "6*7 = 48, \\boxed{48}", "It is 42.", "\\boxed{42}"],
             "\\frac{1}{6}": ["Half of one third is one sixth: \\boxed{\\frac{1}{6}}", "\\boxed{1/5}",
                              "one sixth", "We get $\\boxed{\\dfrac{1}{6}}$."]}

    def rollout(prompts, trainer):
        prompt_ids = [qwen.apply_chat_template(p, add_generation_prompt=True, tokenize=True,
                                               return_dict=True)["input_ids"] for p in prompts]
        answers = ["42" if "6 times 7" in p[-1]["content"] else "\\frac{1}{6}" for p in prompts]
        completions = [qwen(texts[a][i % 4])["input_ids"] + [qwen.convert_tokens_to_ids("<|im_end|>")]
                       for i, a in enumerate(answers)]
        return {"prompt_ids": prompt_ids, "completion_ids": completions, "logprobs": None}

    args = OARConfig(output_dir=str(tmp_path / "out"), **{**TRAIN_ARGS, "max_completion_length": 32},
                     oar_method="oar_g", answer_format="boxed")
    model = tiny_policy(qwen, vocab_size=len(qwen))
    trainer = record_loss_inputs(OARGRPOTrainer(
        model=model, reward_funcs=[math_verify_reward], args=args, train_dataset=dataset,
        processing_class=qwen, rollout_func=rollout))
    trainer.train()
    tw = trainer.last_token_weights
    assert tw.span_found.tolist() == [True, True, False, True] * 2
    # One notion of the answer: a bare "42" (no \boxed span in the asked format) earns 0, as it
    # gets no credit either (`grading.grade`); 4 of 8 are right.
    assert logged(trainer)["rewards/math_verify_reward/mean"] == pytest.approx(0.5)
    assert [p.answer_text for p in tw.pairs[:2]] == ["42", "48"]
    assert trainer.loss_inputs[0]["advantages"].dim() == 2


@pytest.mark.parametrize("skip", [True, False])
def test_completions_with_zero_advantage_are_not_attributed(tmp_path, tok, world, skip):
    # Group 1 mixes right, wrong and unanswered completions; group 2 is all right (A_i = 0).
    rollout = ScriptedRollout(world[0], tok, variants=("right", "wrong", "no_answer", "right") + ("right",) * 4)
    trainer = tiny_trainer(tmp_path, tok, world, record=True, rollout=rollout, oar_method="oar_g",
                           oar_skip_zero_advantage=skip)
    trainer.train()
    tw = trainer.last_token_weights
    zero = torch.tensor([False] * 4 + [True] * 4)
    has_s = tw.scored.any(dim=1)
    assert tw.attributed.tolist() == (has_s & ~zero if skip else has_s).tolist()
    if skip:
        assert (tw.weights[zero] == 1).all() and (tw.importances[zero] == 0).all()
    (inputs,) = trainer.loss_inputs
    assert (inputs["advantages"][inputs["completion_mask"].bool()] != 0).sum() > 0
    assert logged(trainer)["oar/attributed_rate"] == pytest.approx(3 / 8 if skip else 7 / 8)


def _partial_credit(prompts, completions, answer=None, **kwargs):
    """1.0 for the right answer, 0.5 for any other: a partial-credit reward."""
    return [0.5 + 0.5 * r for r in world_reward(prompts, completions, answer=answer)]


@pytest.mark.parametrize("declared, threshold", [(None, None), (None, 1.0), (1.0, None)])
def test_default_run_store_records_correctness_by_the_rewards_notion(tmp_path, tok, world, declared,
                                                                     threshold, monkeypatch):
    from oar_attrib.store import Store

    if declared is not None:
        monkeypatch.setattr(_partial_credit, "correct_threshold", declared, raising=False)
    problems = world[0]
    trainer = tiny_trainer(tmp_path, tok, world, reward=_partial_credit, oar_method="oar_g",
                           oar_correct_threshold=threshold)  # oar_store_every left at its default
    trainer.train()
    answers = {p.prompt: p.answer for p in problems}
    with Store(tmp_path / "out" / "runs.db", readonly=True) as store:  # written by default
        (run,) = store.runs()
        rows, total = store.traces(run.id)
        assert total == trainer.args.oar_store_samples and {r.step for r in rows} == {0}
        rewards = {r.reward for r in rows}
        assert rewards == {0.5, 1.0}  # the scripted rollout has right and wrong answers
        for row in rows:
            record = store.trace(row.id)
            right = world_reward(None, [record.response], answer=[answers[record.prompt]])[0] == 1.0
            assert row.reward == (1.0 if right else 0.5)
            # Unknown when nothing says what correct is; else right answers only (never 0.5 > 0).
            assert row.correct is (None if declared is None and threshold is None else right)


@pytest.mark.parametrize("answer_format", ["boxed", "auto"])
def test_a_low_span_found_rate_warns_once_naming_the_formats(tmp_path, tok, world, answer_format):
    import warnings

    import re

    from oar_attrib.training.errors import LowSpanRateWarning
    from oar_attrib.training.trainer import LOW_SPAN_RATE

    # The scripted completions end with "#### N": `boxed` finds no span, `auto` finds most.
    trainer = tiny_trainer(tmp_path, tok, world, oar_method="oar_g", answer_format=answer_format,
                           max_steps=2, oar_store_every=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()
    low = [w for w in caught if issubclass(w.category, LowSpanRateWarning)]
    rates = [row["oar/span_found_rate"] for row in trainer.state.log_history if "oar/span_found_rate" in row]
    assert len(rates) == 2
    assert len(low) == (min(rates) < LOW_SPAN_RATE)  # once, though both batches may be low
    if answer_format == "boxed":
        assert max(rates) < 0.5 and len(low) == 1
        text = str(low[0].message)
        assert "formats tried: boxed" in text and "gsm8k" in text and f"{rates[0]:.0%}" in text
        n = int(re.search(r"found in (\d+) of (\d+) completions", text).group(2))
        found = round(rates[0] * n)
        assert f"found in {found} of {n} completions" in text and f"The other {n - found} keep weight 1" in text
    else:
        assert min(rates) >= 0.5


# ------------------------------------------------------------------ the published baselines
# What the loss receives is the paper's token advantage, computed again here (METHOD.md 7):
# KTAE adds each group's key-token values (the rows of one prompt: TRL shuffles the rows before
# the loss; right = total reward > 0); GRAIL keeps a right rollout's reasoning at weight 1; the
# 80/20 entropy scores every row, those whose advantage is 0 too (its cut-off is the batch's).


def _rows(tok, inputs):
    """Prompts (text), completion id lists and texts of a recorded loss call."""
    prompt_rows = [ids[m.bool()].tolist() for ids, m in zip(inputs["prompt_ids"], inputs["prompt_mask"])]
    lengths = inputs["completion_mask"].sum(dim=1).tolist()
    completions = [ids[:n].tolist() for ids, n in zip(inputs["completion_ids"], lengths)]
    return tok.batch_decode(prompt_rows), completions, tok.batch_decode(completions, skip_special_tokens=True)


def test_ktae_adds_each_groups_key_token_values_to_the_advantage(tmp_path, tok, world):
    trainer = tiny_trainer(tmp_path, tok, world, record=True, oar_method="ktae")
    trainer.train()
    (inputs,) = trainer.loss_inputs
    prompts, completions, texts = _rows(tok, inputs)
    answers = {p.prompt: str(p.answer) for p in world[0]}
    rewards = torch.tensor(world_reward(prompts, texts, answer=[answers[p] for p in prompts]))
    adv = torch.zeros(len(prompts))
    expected = torch.zeros(inputs["completion_ids"].shape)
    for prompt in set(prompts):
        rows = [i for i, p in enumerate(prompts) if p == prompt]
        assert len(rows) == GROUP
        r = rewards[rows]
        adv[rows] = (r - r.mean()) / (r.std() + 1e-4)
        values = key_token_values([torch.tensor(completions[i]) for i in rows], r > 0, tok.pad_token_id)
        for i in rows:
            expected[i, :len(completions[i])] = torch.tensor([values[t] for t in completions[i]])
    expected = adv[:, None] + expected
    mask = inputs["completion_mask"].bool()
    assert (expected[mask] != adv[:, None].expand_as(expected)[mask]).any()  # some values are not 0
    torch.testing.assert_close(inputs["advantages"][mask], expected[mask], atol=1e-4, rtol=1e-4)
    assert (trainer.last_token_weights.weights == 1).all()


def test_grail_keeps_right_rollouts_reasoning_at_weight_one(tmp_path, tok, world):
    trainer = tiny_trainer(tmp_path, tok, world, oar_method="grail", oar_skip_zero_advantage=False)
    trainer.train()
    tw = trainer.last_token_weights  # rows in TRL's group order (before its shuffle)
    prompts = tok.batch_decode([p.prompt_ids for p in tw.pairs])
    answers = {p.prompt: str(p.answer) for p in world[0]}
    rewards = torch.tensor(world_reward(prompts, [p.text for p in tw.pairs],
                                        answer=[answers[p] for p in prompts]))
    sequence = rewards - rewards.view(-1, GROUP).mean(dim=1).repeat_interleave(GROUP)  # sign of A_i
    reasoning = torch.stack([torch.tensor([lab == "reasoning" for lab in p.labels] +
                                          [False] * (tw.weights.shape[1] - len(p.labels)))
                             for p in tw.pairs]) & tw.span_found[:, None]
    answer = torch.stack([torch.tensor([lab == "answer" for lab in p.labels] +
                                       [False] * (tw.weights.shape[1] - len(p.labels)))
                          for p in tw.pairs]) & tw.span_found[:, None]
    right, wrong = sequence > 0, sequence < 0
    assert right.any() and wrong.any()
    assert (tw.weights[right[:, None] & reasoning] == 1).all()
    assert (tw.weights[wrong[:, None] & reasoning] != 1).any()
    assert (tw.weights[answer] == 5).all()


def test_entropy_scores_rows_whose_advantage_is_zero(tmp_path, tok, world):
    trainer = tiny_trainer(tmp_path, tok, world, oar_method="entropy")
    trainer.train()
    tw = trainer.last_token_weights
    assert tw.attributed.all()  # oar_skip_zero_advantage stays on, yet every row takes part
    kept = tw.weights[tw.scored]
    assert set(kept.unique().tolist()) <= {0.0, 1.0}
    assert int(kept.sum()) == pytest.approx(0.2 * int(tw.scored.sum()), abs=1.0)
