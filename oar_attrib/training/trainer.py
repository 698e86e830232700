"""`OARGRPOTrainer`: TRL's GRPOTrainer with token advantages A_i * w_t (METHOD.md 1, 6).

One hook does the work: after TRL has generated a batch, scored it and computed the sequence
advantages A_i (`_generate_and_score_completions`), the weights w_t of every completion are
computed once with the current policy and the advantages become the (B, C) tensor A_i * w_t.
TRL's `_compute_loss` takes (B, C) advantages as they are, for every loss type, and the
buffered batch is reused for all micro-steps and iterations of that generation, so the weights
are never recomputed per micro-step.
"""
from __future__ import annotations

import os
import time
import warnings
from contextlib import nullcontext

import torch
from trl import GRPOTrainer
from trl.models import unwrap_model_for_generation

from oar_attrib.inputs.batch import GroupOutcomes
from oar_attrib.methods import method_spec

from .config import OARConfig
from .errors import LowSpanRateWarning, TrainingConfigError
from .model_card import base_model_name, oar_model_card
from .rewards import correctness
from .reshaping import (LOW_SPAN_RATE, ReshapeSettings, TokenWeights, low_span_rate_message, metric_sums, nonzero_rows,
                        oar_metrics, token_advantages, token_weights, unpad_rows)
from .run_store_hook import RunStoreHook
from . import compat


TRL_RENAMED_CALLS = r"`(is_)?gradient_checkpointing(_enable|_disable)?` is deprecated"


class OARGRPOTrainer(GRPOTrainer):
    """GRPOTrainer whose per-token advantage is A_i * w_t; configure it with `OARConfig`.

    Attributes tests and callbacks may read: `oar_batches` (generation batches attributed so
    far) and `last_token_weights` (the `TokenWeights` of the latest generation batch).
    """

    def __init__(self, *args, run_store: RunStoreHook | None = None, **kwargs):
        compat.check_trl_version()
        compat.check()
        super().__init__(*args, **kwargs)
        if not isinstance(self.args, OARConfig):
            raise TrainingConfigError(
                f"OARGRPOTrainer needs args=OARConfig(...), got {type(self.args).__name__}; "
                "OARConfig takes every GRPOConfig field plus the oar_* fields"
            )
        spec = method_spec(self.args.oar_method)
        self._oar_uniform = spec.uniform  # plain GRPO: no reshaping
        if not self._oar_uniform and (self.tools or self.environment_factories):
            raise TrainingConfigError(
                "tool calls and environments interleave non-model tokens with the completion, which "
                "the answer-span segmentation does not handle; use oar_method='none' with tools"
            )
        local = self.args.per_device_train_batch_size * self.args.steps_per_generation
        if spec.grouped and self.accelerator.num_processes > 1 and local % self.num_generations:
            raise TrainingConfigError(
                f"oar_method={spec.name!r} compares the completions of a prompt's group, but a process's "
                f"{local} completions per generation split groups of num_generations={self.num_generations} "
                "across processes; make per_device_train_batch_size * steps_per_generation a multiple "
                "of num_generations")
        self.oar_batches = 0
        self.last_token_weights: TokenWeights | None = None
        self._oar_rewards: torch.Tensor | None = None
        self._oar_step_attr = 0.0
        self._oar_step_wall = 0.0
        self.run_store = run_store
        self._oar_base_model = base_model_name(self.model)
        self._oar_span_warned = False
        # What made this run (`OARConfig.settings_record`): each stored trace's params and the
        # run store's run config. The weights hash is of the files the model came from.
        self.oar_record = self.args.settings_record(self.model)
        if run_store is None and self.args.oar_store_every > 0 and self.accelerator.is_main_process:
            name = self._oar_base_model or ""
            self.run_store = RunStoreHook.from_config(self.args, model=name, record=self.oar_record)

    # ------------------------------------------------------------------ TRL hooks

    def train(self, *args, **kwargs):
        # TRL 1.16 calls the model's gradient_checkpointing methods, which transformers 5
        # renamed (activation_checkpointing): one FutureWarning per generation the user can do
        # nothing about. Silenced here, during training only.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=TRL_RENAMED_CALLS, category=FutureWarning)
            return super().train(*args, **kwargs)

    def create_model_card(self, model_name=None, dataset_name=None, tags=None):
        """TRL's card plus the base model and the OAR settings (`model_card.oar_model_card`)."""
        super().create_model_card(model_name=model_name, dataset_name=dataset_name, tags=tags)
        path = os.path.join(self.args.output_dir, "README.md")
        if self.is_world_process_zero() and os.path.isfile(path):
            with open(path, encoding="utf-8") as handle:
                card = handle.read()
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(oar_model_card(card, self._oar_base_model, self.args))

    def _issue_warnings_after_load(self, load_result):
        # A checkpoint of a model with tied embeddings stores the shared tensor once, so the
        # tied key (lm_head.weight) is "missing" although loading restored it: no warning.
        tied = set(getattr(self.model, "_tied_weights_keys", None) or ())
        if not getattr(getattr(self.model, "config", None), "tie_word_embeddings", False):
            tied = set()
        missing = [k for k in load_result.missing_keys if k not in tied]
        if len(missing) < len(load_result.missing_keys):
            self.model.tie_weights()
            load_result = load_result._replace(missing_keys=missing)
        return super()._issue_warnings_after_load(load_result)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        # Kept for the run store: TRL returns rewards of all ranks, (N_global, n_funcs).
        rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._oar_rewards = rewards
        return rewards

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        if not self.model.training:  # evaluation reports plain GRPO losses
            return output
        weights = self._attribute(output)
        advantages = output["advantages"]  # (B,)
        output["advantages"] = token_advantages(advantages, weights, self._oar_uniform)
        self._log_oar(weights, advantages)
        self._store(weights, inputs, advantages)
        return output

    def training_step(self, model, inputs, num_items_in_batch):
        start = time.perf_counter()
        output = super().training_step(model, inputs, num_items_in_batch)
        self._oar_step_wall += time.perf_counter() - start
        if compat.step(self) % self.current_gradient_accumulation_steps == 0:
            # Attribution happens inside the step that generates, so this share is high on
            # generation steps and 0 on reuse steps; the logged mean is the overall share.
            share = self._oar_step_attr / max(self._oar_step_wall, 1e-9)
            compat.metrics(self)["oar/time_share"].append(share)
            self._oar_step_attr, self._oar_step_wall = 0.0, 0.0
        return output

    # ------------------------------------------------------------------ attribution

    def _attribution_model(self):
        """The policy as a plain module (parameters gathered under ZeRO-3 / FSDP)."""
        summon = getattr(getattr(self, "_dist", None), "summon_full_params", None)
        full = summon(self.model_wrapped, recurse=False) if summon else nullcontext()
        unwrap = unwrap_model_for_generation(
            self.model_wrapped, self.accelerator,
            gather_deepspeed3_params=self.args.ds3_gather_for_generation,
            gradient_checkpointing_kwargs=self.args.gradient_checkpointing_kwargs,
        )
        return unwrap, full

    def rows_to_attribute(self, advantages: torch.Tensor, settings: ReshapeSettings) -> list[bool] | None:
        """The rows of a batch of (N,) `advantages` the reshaping attributes under `settings`
        (`_rows_to_attribute`): what `oar align` measures each method on, as training does."""
        return self._rows_to_attribute(advantages, settings)

    @property
    def last_rewards(self) -> torch.Tensor | None:
        """(N, n_funcs) the reward functions' values of the last generation batch (None before
        the first), as `_calculate_rewards` kept them."""
        return self._oar_rewards

    def _rows_to_attribute(self, advantages: torch.Tensor, settings: ReshapeSettings) -> list[bool] | None:
        """Rows with a non-zero advantage (`reshaping.nonzero_rows`) and the rows the run store
        is about to record; None: all rows."""
        select = nonzero_rows(advantages, settings) if self.args.oar_skip_zero_advantage else None
        if select is not None and self.run_store is not None and self.run_store.due(self.state.global_step):
            select[: self.run_store.samples] = [True] * min(self.run_store.samples, len(select))
        return select

    def _attribute(self, output: dict) -> TokenWeights:
        """Weights of the local generation batch, computed once, without parameter gradients."""
        settings = ReshapeSettings.from_config(self.args, self.args.probe_at(self.state.global_step))
        weights = self.batch_token_weights(output, settings, self._rows_to_attribute(output["advantages"], settings))
        self.oar_batches += 1
        self.last_token_weights = weights
        self._oar_step_attr += weights.seconds
        return weights

    def _outcomes(self, advantages: torch.Tensor) -> GroupOutcomes:
        """Each local row's group (TRL lays a prompt's num_generations completions next to each
        other in the global batch, of which this process holds a slice), whether its total
        reward is > 0 (right, as KTAE reads it) and its advantage A_i."""
        n = len(advantages)
        start = self.accelerator.process_index * n
        group = (torch.arange(n) + start) // self.num_generations
        if self._oar_rewards is None:
            correct = torch.zeros(n, dtype=torch.bool)
        else:
            rewards = self._oar_rewards[start : start + n]
            total = (rewards * self.reward_weights.to(rewards.device)[None]).nansum(dim=1).cpu()
            correct = total > 0
        return GroupOutcomes(group=group, correct=correct, advantage=advantages.detach().float().cpu())

    def batch_token_weights(self, output: dict, settings: ReshapeSettings, select: list[bool] | None = None,
                            params: dict | None = None) -> TokenWeights:
        """Weights (B, C) of a generation batch `output` (TRL's dict: prompt_ids, prompt_mask,
        completion_ids, completion_mask) under `settings`, with the policy as it is now.

        select: (B,) rows to attribute (None: all); params: extra keyword arguments of the
        method (e.g. {"n_noise": 8}). The training hook calls it with the trainer's settings;
        `oar align` with each method's, on the same batch."""
        prompts, completions = unpad_rows(output["prompt_ids"], output["prompt_mask"],
                                          output["completion_ids"], output["completion_mask"])
        width = output["completion_ids"].shape[1]
        if method_spec(settings.method).uniform:  # spans only: no forward, so no ZeRO-3 gather either
            return token_weights(None, self.processing_class, prompts, completions, width, settings)
        outcomes = self._outcomes(output["advantages"])
        unwrap, full = self._attribution_model()
        with unwrap as model, full:
            return token_weights(model, self.processing_class, prompts, completions, width, settings,
                                 select, outcomes, params)

    def _log_oar(self, tw: TokenWeights, advantages: torch.Tensor) -> None:
        """Per-generation-batch metrics, pooled over ranks (the slowest rank sets the pace),
        beside TRL's own."""
        sums, peaks = metric_sums(tw, advantages, self._oar_uniform)
        sums, peaks = self._pooled(torch.sum, sums), self._pooled(torch.amax, peaks)
        metrics = compat.metrics(self)
        for name, value in oar_metrics(sums, peaks).items():
            metrics[name].append(value)
        self._warn_low_span_rate(sums["span_found"] / max(sums["rows"], 1.0), int(sums["rows"]))

    def _pooled(self, reduce, values: dict) -> dict[str, float]:
        """`values` (name -> a number) pooled over the ranks by `reduce` (torch.sum, torch.amax)."""
        local = torch.tensor([[float(v) for v in values.values()]], device=self.accelerator.device)
        return dict(zip(values, reduce(self.accelerator.gather(local), dim=0).tolist()))

    def _warn_low_span_rate(self, rate: float, n: int) -> None:
        """Once per trainer, on the main process: most completions have no answer span."""
        if rate >= LOW_SPAN_RATE or self._oar_span_warned or not self.accelerator.is_main_process:
            return
        self._oar_span_warned = True
        message = low_span_rate_message(rate, n, self.args.answer_format, self.args.answer_pattern)
        bar = "!" * 78
        warnings.warn(f"\n{bar}\n{message}\n{bar}", LowSpanRateWarning, stacklevel=2)

    def _store(self, tw: TokenWeights, inputs: list[dict], advantages: torch.Tensor) -> None:
        step = self.state.global_step
        if self.run_store is None or not self.run_store.due(step) or self._oar_rewards is None:
            return
        start = self.accelerator.process_index * len(inputs)
        rewards = self._oar_rewards[start : start + len(inputs)]
        weights = self.reward_weights.to(rewards.device)
        total = (rewards * weights[None]).nansum(dim=1).cpu()
        correct = correctness(rewards.cpu(), self.reward_funcs, total.tolist(),
                              self.args.oar_correct_threshold)
        self.run_store.write_batch(
            step=step, weights=tw, inputs=inputs, rewards=total.tolist(), correct=correct,
            advantages=advantages.detach().float().cpu().tolist(), method=self.args.oar_method,
            probe=self.args.probe_at(step), params=self.oar_record,
        )
