"""Tiny random causal LMs (Qwen2 from the package's `random_qwen2`) and scoring batches built in
code, for the importance-method tests; and the tiny GRPO trainer of the training tests
(`tiny_trainer`).

Models are seeded and in eval mode; batches hold rows of different lengths, right-padded, each
laid out as prompt | scored reasoning | bridge | answer span (1-3 tokens) | tail.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2ForCausalLM

from oar_attrib.inputs.batch import ScoringBatch
from oar_attrib.models import random_qwen2
from oar_attrib.world.tokenizer import build_tokenizer
from oar_attrib.world import generate_problems

VOCAB = 128
PAD_ID = 0


def _common(vocab: int, hidden: int, layers: int, max_pos: int, init: float = 0.3) -> dict:
    return dict(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_pos,
        pad_token_id=PAD_ID,
        # Far above the usual 0.02, so that logits are peaked and importances are O(0.1-1):
        # an equivalence test at 1e-4 on near-uniform distributions would prove nothing.
        initializer_range=init,
    )


def tiny_qwen2(seed: int = 0, *, vocab: int = VOCAB, hidden: int = 32, layers: int = 2,
               max_pos: int = 256, dtype: torch.dtype = torch.float32, attn: str = "sdpa",
               init: float = 0.3, **config) -> Qwen2ForCausalLM:
    """A random 2-layer Qwen2 with tied embeddings and a large rope theta, like Qwen2-0.5B
    (`config`: other Qwen2Config fields, e.g. a sliding window)."""
    config.setdefault("rope_parameters", {"rope_type": "default", "rope_theta": 1e6})
    return random_qwen2(vocab, seed=seed, hidden=hidden, layers=layers, max_positions=max_pos,
                        init_std=init, pad_id=PAD_ID, dtype=dtype, attn=attn, **config)


def world_policy(tokenizer, *, max_pos: int = 256) -> Qwen2ForCausalLM:
    """A random 2-layer Qwen2 (seed 0, ~40k parameters, peaked logits) over `tokenizer`'s
    vocabulary, for tests that attribute world text tokenized by a real BPE tokenizer."""
    return random_qwen2(len(tokenizer), heads=2, kv_heads=2, max_positions=max_pos, tie=False)


def tiny_llama(seed: int = 0, *, vocab: int = VOCAB, hidden: int = 48, layers: int = 2,
               max_pos: int = 256, dtype: torch.dtype = torch.float32,
               attn: str = "sdpa") -> LlamaForCausalLM:
    """A random 2-layer Llama with an untied head."""
    torch.manual_seed(seed)
    config = LlamaConfig(**_common(vocab, hidden, layers, max_pos), tie_word_embeddings=False)
    config._attn_implementation = attn
    model = LlamaForCausalLM(config).to(dtype)
    return model.eval()


def make_batch(lengths=(22, 15, 19), answer_lens=(1, 2, 3), *, prompt_len: int | tuple = 4,
               vocab: int = VOCAB, seed: int = 0, no_answer_rows=()) -> ScoringBatch:
    """Rows of the given real lengths, right-padded with PAD_ID to the longest.

    Row layout: prompt [0, p) | scored [p, n-K-2) | bridge n-K-2 | answer [n-K-1, n-1) | tail n-1.
    `prompt_len` is one p for all rows or one per row. Rows listed in `no_answer_rows` have no
    answer span (and nothing scored); their response [p, n) is still in the response mask.
    """
    gen = torch.Generator().manual_seed(seed)
    width = max(lengths)
    n_rows = len(lengths)
    ids = torch.full((n_rows, width), PAD_ID, dtype=torch.long)
    attn = torch.zeros((n_rows, width), dtype=torch.long)
    scored = torch.zeros((n_rows, width), dtype=torch.bool)
    answer = torch.zeros((n_rows, width), dtype=torch.bool)
    response = torch.zeros((n_rows, width), dtype=torch.bool)
    for row, n in enumerate(lengths):
        k = answer_lens[row % len(answer_lens)]
        ids[row, :n] = torch.randint(1, vocab, (n,), generator=gen)
        attn[row, :n] = 1
        p = prompt_len[row] if isinstance(prompt_len, (tuple, list)) else prompt_len
        response[row, p:n] = True
        if row in no_answer_rows:
            continue
        scored[row, p:n - k - 2] = True
        answer[row, n - k - 1:n - 1] = True
    return ScoringBatch(ids, attn, scored, answer, PAD_ID, response_mask=response)


def with_steps(batch: ScoringBatch, seed: int = 0, max_len: int = 5) -> ScoringBatch:
    """`batch` with random steps: each row's scored positions cut into consecutive runs of 1 to
    `max_len` positions (step ids 0, 1, ... in order, -1 elsewhere)."""
    gen = torch.Generator().manual_seed(seed)
    step_ids = torch.full(batch.input_ids.shape, -1, dtype=torch.long)
    for row in range(batch.input_ids.shape[0]):
        positions = batch.scored_mask[row].nonzero().flatten().tolist()
        step, left = -1, 0
        for t in positions:
            if left == 0:
                step, left = step + 1, int(torch.randint(1, max_len + 1, (1,), generator=gen))
            step_ids[row, t] = step
            left -= 1
    return ScoringBatch(batch.input_ids, batch.attention_mask, batch.scored_mask,
                        batch.answer_mask, batch.pad_token_id, step_ids, batch.response_mask)


# The tiny GRPO setup of the training tests: TRAIN_PROMPTS world problems (preset default,
# seed 1) in groups of GROUP scripted completions, one CPU step of a tiny random policy. The
# training modules (TRL) are imported on call, so that the tests above do not load them.
TRAIN_PROMPTS, GROUP = 4, 4
TRAIN_ARGS = dict(
    per_device_train_batch_size=8, num_generations=GROUP, max_completion_length=48, max_steps=1,
    learning_rate=1e-2, logging_steps=1, report_to=[], bf16=False,
    use_cpu=True, save_strategy="no", disable_tqdm=True, seed=0, dataloader_num_workers=0,
)


def train_world(n: int = TRAIN_PROMPTS) -> tuple[list, object]:
    """(problems, dataset): `n` default-preset world problems of seed 1, and the same problems
    as a TRL prompt dataset."""
    from oar_attrib.training.data import world_dataset
    from oar_attrib.world import generate_problems

    return generate_problems(n, "default", seed=1), world_dataset(n, "default", seed=1)


def record_loss_inputs(trainer):
    """`trainer`, with `trainer.loss_inputs` receiving a detached copy of the inputs of every
    loss call (tensors cloned)."""
    trainer.loss_inputs = []
    compute = trainer._compute_loss

    def _compute_loss(model, inputs):
        trainer.loss_inputs.append({k: v.detach().clone() if torch.is_tensor(v) else v
                                    for k, v in inputs.items()})
        return compute(model, inputs)

    trainer._compute_loss = _compute_loss
    return trainer


def tiny_trainer(tmp_path, tok, world, cls=None, sample_tokens: int = 0, record: bool = False,
                 rollout=None, reward=None, **overrides):
    """An OARGRPOTrainer (or `cls`, e.g. TRL's GRPOTrainer, which gets a GRPOConfig) over
    `tiny_policy(tok)`, writing under tmp_path/out; `overrides` replace TRAIN_ARGS or set
    OARConfig fields. `world` = `train_world()`; `rollout` defaults to its `ScriptedRollout`,
    which also samples `sample_tokens` tokens from the model; `reward` to the world reward.
    `record`: `record_loss_inputs`."""
    from trl import GRPOConfig

    from oar_attrib.training.config import OARConfig
    from oar_attrib.training.rewards import world_reward
    from oar_attrib.training.toy import ScriptedRollout, tiny_policy
    from oar_attrib.training.trainer import OARGRPOTrainer

    problems, dataset = world
    cls = cls or OARGRPOTrainer
    config_cls = OARConfig if issubclass(cls, OARGRPOTrainer) else GRPOConfig
    args = config_cls(output_dir=str(tmp_path / "out"), **{**TRAIN_ARGS, **overrides})
    rollout = rollout or ScriptedRollout(problems, tok, generate_tokens=sample_tokens)
    trainer = cls(model=tiny_policy(tok), reward_funcs=[reward or world_reward], args=args,
                  train_dataset=dataset, processing_class=tok, rollout_func=rollout)
    return record_loss_inputs(trainer) if record else trainer


def tiny_world(n: int = 8, seed: int = 3):
    """(problems, tokenizer, model): world problems, a BPE tokenizer trained on them and a
    random 2-layer Qwen2 (~40k parameters) with peaked logits."""
    problems = generate_problems(n, "default", seed=seed, filler_rate=0.5)
    tokenizer = build_tokenizer([p.prompt + p.solution for p in problems], 280)
    return problems, tokenizer, world_policy(tokenizer, max_pos=512)


def wrong_solution(problem) -> str:
    return problem.solution.replace(f"#### {problem.answer}", f"#### {problem.answer + 1}")


WORDS = ["[UNK]", "<eos>", "<pad>", "so", "the", "answer", "is", "x", "=", "+", "####",
         "\\boxed{", "}", "what", "?"] + [str(i) for i in range(10)]


def word_tokenizer(pad=True):
    """A whitespace word-level tokenizer built in code (no chat template, no length limit)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    extra = {"pad_token": "<pad>"} if pad else {}
    return PreTrainedTokenizerFast(
        tokenizer_object=core, eos_token="<eos>", unk_token="[UNK]", **extra
    )


def write_verl_dump(folder: Path, steps=(1, 2), n: int = 3) -> list[dict]:
    """verl's rollout dump layout (trainer.rollout_data_dir): `<step>.jsonl` per training step,
    one line per response with input (templated prompt text), output, score, step, gts and
    the reward function's extra keys (acc); a prompt's n samples are consecutive lines."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for step in steps:
        rows = []
        for q in range(2):
            for k in range(n):
                right = k % 2 == 0
                answer = q + step + (0 if right else 1)
                rows.append({"input": f"<|user|>what is {q}+{step}?\n<|assistant|>",
                             "output": f"{q}+{step}={answer}. #### {answer}",
                             "score": 1.0 if right else 0.0, "step": step, "gts": str(q + step),
                             "acc": right, "pred": str(answer)})
        (folder / f"{step}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        lines += rows
    return lines


def greedy_reference(model, ids: list[int], n: int, eos: int) -> list[int]:
    """One row, no padding, one full forward per token, argmax: the reference decoder."""
    out: list[int] = []
    with torch.no_grad():
        for _ in range(n):
            nxt = int(model(torch.tensor([ids + out])).logits[0, -1].argmax())
            out.append(nxt)
            if nxt == eos:
                break
    return out
