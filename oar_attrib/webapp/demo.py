"""The demo store behind `oar demo`: sampled traces of the bundled model on arithmetic-world
problems, right and wrong, attributed by every method, with the structural oracle and the
recall summaries. Built once into the user's cache directory, then reused.
"""
from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from pathlib import Path

from .. import __version__
from ..commands import DTYPES
from ..defaults import PROBE, PROBES, option
from ..models.catalogue import cache_dir
from ..errors import OARError


class DemoConfigError(OARError, ValueError):
    """A demo setting that cannot build a store."""


DEMO_VERSION = 7  # bump when the demo's content changes, so cached stores are rebuilt (6: settings records, 8 OAR-G draws; 7: the real run on word problems)
# Integrated Gradients (32 path steps, each a forward and a backward) costs more than every
# other method together, so `oar demo` serves the app first and adds it in the background.
DEFERRED_METHODS = ("ig",)


@dataclass(frozen=True)
class DemoConfig:
    """What the demo store holds."""

    model: str = option("arith-tiny", "bundled model name or local checkpoint folder")
    n_problems: int = option(24, "held-out arithmetic problems")
    samples: int = option(4, "sampled responses per problem (a GRPO group: right and wrong answers)")
    candidates: int = option(2, "problems sampled per kept one; groups with right and wrong answers are kept first")
    temperature: float = option(1.0, "sampling temperature")
    preset: str = option("recall", "world preset (recall: each final result written once, so the recall report's "
                                   "`direct` oracle is exact; default, medium, hard)")
    methods: tuple[str, ...] = option((), "importance methods (default: every registered method)")
    probe: str = option(PROBE, f"outcome probe: one of {', '.join(PROBES)}")
    seed: int = option(0, "seed of the problems and the sampling")
    dtype: str = option("float32", f"dtype the model loads in ({', '.join(DTYPES)}); probe arithmetic stays float32")
    real: bool = option(True, "also a run of SmolLM2-135M-Instruct's own answers to word problems it solves part of "
                              "the time (smollm2-135m from the catalogue; skipped, said in one line, when it cannot "
                              "be fetched)")
    real_questions: int = option(6, "held-out `tiny` word problems of the real-model run (one addition of one-digit "
                                    "numbers)")
    real_samples: int = option(4, "answers per question of the real-model run (a GRPO group; the first is greedy)")
    real_max_new_tokens: int = option(160, "tokens per answer of the real-model run")
    real_temperature: float = option(0.5, "sampling temperature of the real-model run's answers after the first, "
                                          "greedy one (at 1.0 SmolLM2-135M mostly rambles past the token limit without"
                                          " an answer)")

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise DemoConfigError(f"dtype={self.dtype!r} is not one of {', '.join(DTYPES)}")
        if min(self.n_problems, self.samples, self.candidates, self.real_questions, self.real_samples,
               self.real_max_new_tokens) < 1:
            raise DemoConfigError(f"n_problems={self.n_problems}, samples={self.samples}, "
                           f"candidates={self.candidates} and the real_* counts must be >= 1")
        if self.temperature <= 0 or self.real_temperature <= 0:
            raise DemoConfigError(f"temperature={self.temperature} and real_temperature="
                                  f"{self.real_temperature} must be > 0 (the demo samples)")


def _model_folder(name: str) -> Path:
    """The folder of a bundled name or a local checkpoint. Resolved here, not by
    `models.resolve`, only because that module imports torch, and a cached `oar demo` should
    start without it; a name that is neither goes to `models.resolve` for its error."""
    bundled = Path(__file__).resolve().parent / "assets" / name
    for folder in (bundled, Path(name).expanduser()):
        if (folder / "config.json").is_file():
            return folder
    from ..errors import ModelLoadError
    from ..models import resolve

    folder = resolve(name)
    if not (folder / "config.json").is_file():
        raise ModelLoadError(f"the bundled model {name!r} is missing from {folder}; reinstall "
                             "oar-attrib, or pass --model with a local checkpoint folder")
    return folder


def _model_fingerprint(name: str) -> str:
    """Changes when the model's files change (names, sizes, times), without reading weights."""
    folder = _model_folder(name)
    h = hashlib.sha256(str(name).encode())
    for path in sorted(folder.iterdir()):
        if path.is_file():
            st = path.stat()
            h.update(f"{path.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:12]


def demo_path(config: DemoConfig) -> Path:
    """The cache file of a demo store: one per config, model and package version."""
    from ..store import SCHEMA_VERSION

    key = hashlib.sha256(repr((asdict(config), DEMO_VERSION, SCHEMA_VERSION, __version__,
                               _model_fingerprint(config.model))).encode()).hexdigest()[:12]
    return cache_dir() / f"demo-{key}.db"


def _grpo_advantages(rewards: list[float], group: int) -> list[float]:
    """The GRPO advantages of consecutive groups of `group` rewards (`rollouts.group_advantages`:
    TRL's default rule, the one the real-model run and `oar generate` use); a shorter last group
    is its own group."""
    import torch

    from ..rollouts import group_advantages

    out: list[float] = []
    for start in range(0, len(rewards), group):
        chunk = torch.tensor(rewards[start:start + group], dtype=torch.float32)[None]
        out += group_advantages(chunk)[0].tolist()
    return out


def graded(problem, text: str) -> dict:
    """Why a world trace got its reward, as the trace's extras (`views.reward_reason` reads
    them): `correct`; `wrong`, an answer in the world's format with another value; `format`,
    an answer only in another format (`\\boxed{6}` where the world reads `#### N`, reward 0),
    `format_right` when that answer's value is the right one (its own badge on the trace page:
    the arithmetic is right, the format is not); `no_answer`."""
    from ..inputs.grading import grade
    from ..inputs.spans import locate_answer

    fmt = problem.answer_format
    if problem.reward(text) == 1.0:
        why = "correct"
    elif locate_answer(text, fmt) is not None:
        why = "wrong"
    else:
        why = "format" if locate_answer(text) is not None else "no_answer"
        if why == "format" and grade(text, str(problem.answer), "auto").correct:
            why = "format_right"
    return {"graded": why, "answer_format": fmt}


def write_problem_run(store, model, tokenizer, owners, texts, *, name: str = "demo",
                      config: DemoConfig = DemoConfig(), group_size: int = 1,
                      progress: bool = False, method_params: dict | None = None,
                      defer: tuple[str, ...] = (), batch: int | None = None,
                      resume: bool = False, on_batch=None, stop=None) -> int | None:
    """Attribute `texts` (responses to the problems `owners`, consecutive groups of
    `group_size` per problem), label them with the oracle, store and summarise them as one
    run; returns its id. Advantages are GRPO's within each group. Methods in `defer` are
    left out and listed in the run config's `pending_methods` (see `complete_pending`).

    batch: traces attributed and committed together (default: all); `on_batch(done, total)`
    is called after each. resume: continue the run called `name` where it stopped (its
    traces so far are kept). stop: a threading.Event that ends the work between batches
    (then None is returned and the run stays unfinished)."""
    from ..analysis.run_summary import summarise
    from ..attribution import attribute
    from ..weights.settings import ReshapeSettings
    from ..methods import available_methods

    all_methods = list(config.methods or available_methods())
    methods = [m for m in all_methods if m not in defer]
    rewards = [p.reward(t) for p, t in zip(owners, texts)]
    advantages = _grpo_advantages(rewards, group_size)
    run_id = next((r.id for r in store.runs() if r.name == name), None) if resume else None
    if run_id is None:
        run_id = store.add_run(name, model=config.model, config={
            **asdict(config), "methods": all_methods,
            "pending_methods": [m for m in all_methods if m in defer],
            "method_params": method_params or {}, "total_traces": len(texts),
            "n_parameters": sum(p.numel() for p in model.parameters())})
    step = batch or max(len(texts), 1)
    for start in range(len(store.trace_ids(run_id)), len(texts), step):
        if stop is not None and stop.is_set():
            return None
        end = min(start + step, len(texts))
        traces = attribute(model, tokenizer, [p.prompt for p in owners[start:end]],
                           list(texts[start:end]), methods,
                           ReshapeSettings(probe=config.probe, seed=config.seed + start),
                           advantages=advantages[start:end],
                           progress=progress, method_params=method_params)
        store.add_traces(
            run_id, traces, rewards=rewards[start:end], correct=[r == 1.0 for r in rewards[start:end]],
            groups=[i // group_size for i in range(start, end)],
            oracles=[p.oracle(t) for p, t in zip(owners[start:end], texts[start:end])],
            extras=[{"question": p.question, "true_answer": p.answer, **graded(p, t)}
                    for p, t in zip(owners[start:end], texts[start:end])])
        if on_batch is not None:
            on_batch(end, len(texts))
    summarise(store, run_id, seed=config.seed)
    return run_id


def _keep_mixed_groups(problems, texts: list[str], samples: int, keep: int):
    """The first `keep` problems, those whose group holds right AND wrong answers first
    (GRPO gives the others zero advantage, so they show no reshaping), in sampled order."""
    groups = [(p, texts[i * samples:(i + 1) * samples]) for i, p in enumerate(problems)]
    mixed = [len({p.reward(t) for t in g}) > 1 for p, g in groups]
    order = sorted(range(len(groups)), key=lambda i: (not mixed[i], i))[:keep]
    return [groups[i] for i in sorted(order)]


def sample_world(model, tokenizer, config: DemoConfig = DemoConfig(), *, progress: bool = False):
    """(owners, texts): `config.samples` sampled responses to each of `config.n_problems`
    held-out problems (groups with right and wrong answers first, `_keep_mixed_groups`), one
    problem per response. Seeded: the same config gives the same texts."""
    from ..models.generation import generate
    from ..world import generate_problems

    problems = generate_problems(config.n_problems * config.candidates, config.preset,
                                 seed=config.seed, split="test")
    ids = generate(model, tokenizer, [p.prompt for p in problems], do_sample=True,
                   temperature=config.temperature, num_return_sequences=config.samples,
                   seed=config.seed, progress=progress)
    texts = tokenizer.batch_decode(ids, skip_special_tokens=True)
    kept = _keep_mixed_groups(problems, texts, config.samples, config.n_problems)
    return [p for p, group in kept for _ in group], [t for _, group in kept for t in group]


def write_demo_run(store, model, tokenizer, config: DemoConfig = DemoConfig(), *,
                   progress: bool = False, method_params: dict | None = None,
                   defer: tuple[str, ...] = ()) -> int:
    """Sample the demo's responses (`sample_world`) and write them as one run
    (`write_problem_run`); returns its id."""
    owners, texts = sample_world(model, tokenizer, config, progress=progress)
    return write_problem_run(store, model, tokenizer, owners, texts, config=config,
                             group_size=config.samples, progress=progress,
                             method_params=method_params, defer=defer)


def complete_pending(store, model, tokenizer, run_id: int, *, batch: int = 8,
                     progress: bool = False, stop=None) -> bool:
    """Attribute a run's traces with its `pending_methods`, `batch` traces per commit, then
    re-summarise; resumes where an interrupted call stopped. `stop` (a threading.Event) ends
    the work early between batches. Returns True when nothing is pending any more."""
    from tqdm.auto import tqdm

    from ..analysis.run_summary import summarise
    from ..attribution import attribute
    from ..weights.settings import ReshapeSettings

    config = store.run(run_id).config
    for method in list(config.get("pending_methods", [])):
        ids = store.trace_ids(run_id, missing=method)
        params = {method: config.get("method_params", {}).get(method, {})}
        with tqdm(total=len(ids), desc=f"{method} (background)", disable=not progress) as bar:
            for start in range(0, len(ids), batch):
                if stop is not None and stop.is_set():
                    return False
                records = [store.trace(i) for i in ids[start:start + batch]]
                results = attribute(
                    model, tokenizer, [r.prompt for r in records], [r.response for r in records],
                    [method], ReshapeSettings(probe=config.get("probe", PROBE),
                                              seed=config.get("seed", 0)),
                    advantages=[r.row.advantage or 0.0 for r in records], method_params=params)
                for record, result in zip(records, results):
                    store.add_attributions(record.id, result)
                bar.update(len(records))
        config = store.update_run_config(
            run_id, pending_methods=[m for m in config["pending_methods"] if m != method])
    summarise(store, run_id, seed=config.get("seed", 0))
    return True


def prepare_demo_store(config: DemoConfig = DemoConfig(), *, rebuild: bool = False) -> Path:
    """The demo store's path, the store created (empty) when missing, so that the app can
    serve it while it is filled; `rebuild` starts it over."""
    from ..store import Store
    from .progress import Progress

    path = demo_path(config)
    if rebuild:
        for stale in (path, *(path.with_name(path.name + s) for s in ("-wal", "-shm")),
                      Progress.of_store(path).path):
            stale.unlink(missing_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    Store(path).close()
    return path


def demo_complete(path: str | Path) -> bool:
    """Whether the demo store at `path` has been filled to the end."""
    from .progress import Progress

    return Progress.of_store(path).read().finished


def pending_methods(path: str | Path) -> list[str]:
    """Methods still to be computed in the demo store at `path` (its one run)."""
    from ..store import Store

    with Store(path, readonly=True) as store:
        return [m for run in store.runs() for m in run.config.get("pending_methods", [])]
