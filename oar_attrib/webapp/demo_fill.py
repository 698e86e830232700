"""Filling the demo store in the background, so that `oar demo` serves at once.

`oar demo` creates the (empty) store, starts `python -m oar_attrib.webapp.demo_fill STORE
CONFIG_JSON` beside the server and serves; this process writes the runs batch by batch (every
batch is committed, so the pages show traces as they come) and reports its stages in the
store's progress file (`progress.Progress`), which the pages show as one line. A killed or
interrupted fill resumes where it stopped the next time `oar demo` starts.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

from ..console import say
from .demo import (DEFERRED_METHODS, DemoConfig, complete_pending, demo_complete, prepare_demo_store,
                   sample_world, write_problem_run)
from .progress import Progress

WORLD_RUN = "arith-tiny: arithmetic world (with the oracle)"
WORLD_STAGE = "arithmetic world"
REAL_MODEL = "smollm2-135m"
REAL_RUN = "smollm2-135m: word problems (real model, with the value oracle)"
REAL_STAGE = "SmolLM2-135M on word problems"
# The word-problem world's `tiny` preset (one addition of one-digit numbers, told as a story):
# SmolLM2-135M-Instruct is right on 20-30% of these at temperature 0.5 or greedy
# (docs/results/smollm2.md), so its groups mix right and wrong answers and GRPO's advantages,
# hence the reshaped ones, are not zero.
REAL_PRESET = "tiny"
# "The answer is N.": the final-answer statement SmolLM2-135M-Instruct follows most often (the
# smollm2-words preset asks for it too), so its answers have spans for OAR and the grader.
REAL_FORMAT = "answer_is"
# The value oracle's sets that a one-step problem has (no upstream step, no distractor).
REAL_SETS = ("direct",)


def _run_named(store, name: str):
    return next((r for r in store.runs() if r.name == name), None)


def fill_world(store, config: DemoConfig, status: Progress, *, model=None, stop=None,
               progress: bool = False) -> bool:
    """The world run: sampled responses of `config.model`, attributed two groups at a time,
    then the deferred methods; True when the run is complete."""
    from ..methods import available_methods
    from ..models import load_model

    run = _run_named(store, WORLD_RUN)
    if run is not None and run.config.get("complete"):
        status.stage(WORLD_STAGE, state="done")
        return True
    status.stage(WORLD_STAGE, state="running", note="sampling answers")
    model, tokenizer = model if model is not None else load_model(config.model, dtype=config.dtype)
    owners, texts = sample_world(model, tokenizer, config, progress=progress)
    status.stage(WORLD_STAGE, total=len(texts), note="")
    stored = len(store.trace_ids(run.id)) if run is not None else 0
    if stored < len(texts):
        methods = [m for m in (config.methods or available_methods()) if m not in DEFERRED_METHODS]
        tell_cost(WORLD_STAGE, model, tokenizer, owners[stored].prompt, texts[stored], methods,
                  len(texts) - stored, owners[stored].answer_format)
    run_id = write_problem_run(
        store, model, tokenizer, owners, texts, name=WORLD_RUN, config=config,
        group_size=config.samples, defer=DEFERRED_METHODS, batch=2 * config.samples,
        resume=True, progress=progress, stop=stop,
        on_batch=lambda done, total: status.stage(WORLD_STAGE, done=done, total=total))
    if run_id is None:
        return False
    status.stage(WORLD_STAGE, note=f"{', '.join(DEFERRED_METHODS)} still computing")
    if not complete_pending(store, model, tokenizer, run_id, stop=stop, progress=progress):
        return False
    store.update_run_config(run_id, complete=True)
    status.stage(WORLD_STAGE, state="done", note="")
    return True


def tell_cost(stage: str, model, tokenizer, prompt, response: str, methods, traces: int, answer_format: str,
              sampling: float = 0.0, groups: int = 0) -> None:
    """Say how long a stage's attribution will take here (`methods.cost`, measured on `response`),
    plus `groups` groups still to sample at `sampling` seconds each; Ctrl-C stops it, the next
    `oar demo` resumes it."""
    from ..inputs.encoding import encode_pairs
    from ..methods.cost import attribution_estimate
    from ..models.cost import duration

    _, (pair,) = encode_pairs(tokenizer, [prompt], [response], answer_format=answer_format)
    estimate = attribution_estimate(model, pair, methods, None, traces)
    total = estimate.per_trace * traces + sampling * groups
    sampled = f" and sampling {groups} more groups ({duration(sampling)} each)" if groups else ""
    say(f"oar demo: {stage}: {traces} traces to attribute with {', '.join(methods)}{sampled}: {estimate.about} "
        f"{duration(total)} here ({estimate.parts()} a trace, measured on the first); Ctrl-C stops the fill "
        "and the next `oar demo` resumes it")


def real_questions(tokenizer, n: int, seed: int = 0) -> list[tuple]:
    """(Question, WordProblem) of the first `n` held-out `tiny` word problems, asked to end
    with "The answer is N." (REAL_FORMAT). The first k of n are the k of `real_questions(k)`."""
    from ..rollouts import Question, format_prompt
    from ..world import generate_word_problems

    problems = generate_word_problems(n, REAL_PRESET, seed=seed, split="test")
    return [(Question(i, format_prompt(p.question, tokenizer, REAL_FORMAT), str(p.answer),
                      f"wordworld:{REAL_PRESET}:{i}"), p) for i, p in enumerate(problems)]


def _text(prompt) -> str:
    return prompt if isinstance(prompt, str) else prompt[-1]["content"]


def sample_real_group(model, tokenizer, question, config: DemoConfig) -> list[dict]:
    """`config.real_samples` graded answers to one question (the first greedy, the others
    sampled at `real_temperature`), with GRPO group advantages (`rollouts.sample_groups`).
    Seeded by the question's index: a group does not depend on the questions before it."""
    from ..rollouts import sample_groups

    (batch,) = sample_groups(model, tokenizer, [question], samples=config.real_samples, greedy=True,
                             temperature=config.real_temperature, max_new_tokens=config.real_max_new_tokens,
                             answer_format=REAL_FORMAT, batch_size=1, seed=config.seed + question.group)
    return batch[0]


def real_methods() -> list[str]:
    """The methods the real-model run attributes with: the registry's demo defaults
    (`methods.default_methods("demo")`)."""
    from ..methods import default_methods

    return default_methods("demo")


def fill_real(store, config: DemoConfig, status: Progress, *, model=None, stop=None) -> bool:
    """The real-model run: SmolLM2-135M's own answers to `tiny` word problems, one question
    at a time: sampled (the progress line counts the answers), graded, given GRPO group
    advantages and the value oracle, then each answer attributed by `real_methods()` and stored
    as soon as it is done; then the run's recall against the oracle's `direct` values. A model
    that cannot be loaded skips the stage with its one-line reason. Resumes after the answers
    stored (a group cut short is sampled again, with its seed, and only its missing answers
    attributed); True when it has ended."""
    from ..analysis.run_summary import summarise
    from ..attribution import attribute
    from ..weights.settings import ReshapeSettings
    from ..errors import OARError
    from ..models import load_model

    run = _run_named(store, REAL_RUN)
    if run is not None and run.config.get("complete"):
        status.stage(REAL_STAGE, state="done")
        return True
    status.stage(REAL_STAGE, state="running", note=f"loading {REAL_MODEL}")
    try:
        model, tokenizer = model if model is not None else load_model(REAL_MODEL, dtype=config.dtype)
    except OARError as err:  # not cached and offline, or no gguf package: the world run alone
        status.stage(REAL_STAGE, state="skipped", note=str(err).splitlines()[0])
        return True
    questions = real_questions(tokenizer, config.real_questions, config.seed)
    total = len(questions) * config.real_samples
    if run is None:
        run = store.run(store.add_run(REAL_RUN, model=REAL_MODEL, config={
            **asdict(config), "model": REAL_MODEL, "methods": real_methods(), "answer_format": REAL_FORMAT,
            "world_preset": REAL_PRESET, "total_traces": total}))
    stored = len(store.trace_ids(run.id))  # a group cut short by a kill keeps its answers
    settings = ReshapeSettings(probe=config.probe, answer_format=REAL_FORMAT, seed=config.seed)
    told = False
    for question, problem in questions[stored // config.real_samples:]:
        if stop is not None and stop.is_set():
            return False
        status.stage(REAL_STAGE, done=stored, total=total, unit="answers", note="sampling answers")
        began = time.perf_counter()
        group = sample_real_group(model, tokenizer, question, config)  # seeded: the same again
        if not told:  # the first group sampled: the sampling and the attribution measured here
            told = True
            first = group[stored % config.real_samples]
            tell_cost(REAL_STAGE, model, tokenizer, first["prompt"], first["response"], list(real_methods()),
                      total - stored, REAL_FORMAT, time.perf_counter() - began,
                      len(questions) - 1 - stored // config.real_samples)
        for r in group[stored % config.real_samples:]:  # each answer stored as soon as it is done
            if stop is not None and stop.is_set():
                return False
            status.stage(REAL_STAGE, done=stored, note="attributing them")
            traces = attribute(model, tokenizer, [r["prompt"]], [r["response"]], real_methods(),
                               settings, advantages=[r["advantage"]])
            store.add_traces(run.id, traces, rewards=[r["reward"]], correct=[r["correct"]],
                             groups=[r["group"]], oracles=[problem.oracle(r["response"])],
                             extras=[{"question": _text(r["prompt"]), "true_answer": r["gold"],
                                      "graded": r["why"]}])
            stored += 1
    summarise(store, run.id, sets=REAL_SETS, seed=config.seed)
    store.update_run_config(run.id, complete=True)
    status.stage(REAL_STAGE, state="done", note="")
    return True


def fill_demo_store(path: str | Path, config: DemoConfig = DemoConfig(), *, model=None,
                    stop=None, progress: bool = False, real_model=None) -> bool:
    """Fill (or go on filling) the demo store at `path`: the world run, then (`config.real`)
    the real-model run; True when every stage has ended."""
    from ..store import Store

    status = Progress.of_store(path).read()
    status.stage(WORLD_STAGE)
    if config.real:
        status.stage(REAL_STAGE)
    with Store(path) as store:
        if not fill_world(store, config, status, model=model, stop=stop, progress=progress):
            return False
        return not config.real or fill_real(store, config, status, model=real_model, stop=stop)


def ensure_demo_store(config: DemoConfig | None = None, *, rebuild: bool = False,
                      progress: bool = True) -> tuple[Path, bool]:
    """The demo store of `config`, filled here (in this process) when it is not complete;
    (path, filled now). `oar demo` serves first and fills in the background instead."""
    config = config or DemoConfig()
    path = prepare_demo_store(config, rebuild=rebuild)
    if demo_complete(path):
        return path, False
    fill_demo_store(path, config, progress=progress)
    return path, True


def _end_with_parent() -> None:
    """In the child, before exec: die when the parent dies (Linux), so a killed `oar demo`
    never leaves a fill writing on; elsewhere the parent's `finally` ends it."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def start_fill(path: str | Path, config: DemoConfig) -> subprocess.Popen:
    """The background fill of the store at `path`, as a child process (its output goes to
    this process's stderr)."""
    argv = [sys.executable, "-m", "oar_attrib.webapp.demo_fill", str(path), json.dumps(asdict(config))]
    kwargs = {"preexec_fn": _end_with_parent} if sys.platform.startswith("linux") else {}
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, **kwargs)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    path, raw = argv
    fields = json.loads(raw)
    fields["methods"] = tuple(fields.get("methods", ()))
    config = DemoConfig(**fields)
    # SIGTERM (the server ended, or its parent died) ends this process at once: every
    # committed batch is kept, the batch in flight is redone by the next fill.
    try:
        done = fill_demo_store(path, config)
    except KeyboardInterrupt:
        return 130
    except Exception as err:  # noqa: BLE001 - one line; the server keeps serving what is stored
        status = Progress.of_store(path).read()
        running = next((s.name for s in status.stages if s.state == "running"), WORLD_STAGE)
        status.stage(running, state="failed", note=str(err).splitlines()[0])
        say(f"oar demo: filling the store failed ({err}); the app serves what is stored; "
            "`oar demo --rebuild` starts over")
        return 1
    if done:
        say("oar demo: the demo store is complete; reload a page to see every run")
    return 0 if done else 1


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
