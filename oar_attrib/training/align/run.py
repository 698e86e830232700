"""`align(settings, store)`: the phases of a gradient-alignment run, each resumable.

1. screen (`Screen`, on demand): the trainer samples G completions per prompt (prompts in a
   seeded random order); the mixed-reward groups, in that order, make the pool batches first
   and then the training batches (`rollouts`);
2. reference: g* = the mean GRPO gradient of the pool batches, with the cosine of its two
   halves' sums (even and odd pool batches) as its reliability;
3. batches: per training batch, every method's gradient on the same rollouts (`gradients`),
   its endpoint sums against g* and GRPO, and its running sums; the first batches' results
   are there long before the last ones are screened;
4. mean gradients: the sums over the methods' running sums that tell a bias from a variance.

The statistics are made from the store afterwards (`oar_attrib.reports.align`).
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from oar_attrib.reports.align_folder import HALVES, MEAN_GRADIENTS, REFERENCE_JSON

from ..errors import AlignError
from ..compat import metrics
from . import gradients
from .gradients import ParamLayout, dot64, endpoint_sums, grpo_gradient, method_gradient, shared_forward
from .rollouts import GroupRef, batch_of, call_seed, prompt_order, screen_call
from .settings import AlignSettings, MethodChoice
from .store import AlignStore

# Trainer and run settings that say how a run is executed, not what it measures: kept out of
# the record, so a resume with another thread count or output folder goes on.
EXECUTION_ONLY = {"trainer": ("output_dir", "logging_steps", "disable_tqdm", "report_to", "save_strategy",
                              "save_steps", "save_total_limit", "dataloader_num_workers", "max_steps",
                              "oar_store_every", "oar_store_samples", "oar_store_path", "use_cpu",
                              "dataloader_pin_memory"),
                  "run": ("threads", "eval_every", "eval_n", "eval_preset", "eval_samples", "eval_data",
                          "eval_max_new_tokens")}


def trainer_settings(settings: AlignSettings, store: Path) -> dict:
    """The merged {'run', 'trainer'} settings of the measuring trainer: the preset, its
    overrides, the model, and what a measurement fixes (module docstring of `gradients`):
    no reshaping of its own (each method is applied by align), one accumulation step, a batch of
    batch_prompts x num_generations completions, no run store, no evaluation."""
    from ..config import OARConfig
    from ..launch import resolve

    overrides = list(settings.overrides) + ([f"run.model={json.dumps(settings.model)}"] if settings.model else [])
    merged = resolve(settings.preset, None, overrides)
    generations = merged["trainer"].get("num_generations") or OARConfig.__dataclass_fields__["num_generations"].default
    merged["trainer"].update(oar_method="none", oar_store_every=0, gradient_accumulation_steps=1,
                             per_device_train_batch_size=settings.batch_prompts * int(generations),
                             output_dir=str(store / "trainer"), report_to=[])
    merged["trainer"].pop("steps_per_generation", None)
    merged["trainer"].pop("generation_batch_size", None)
    merged["run"]["eval_every"] = 0
    return merged


def align_record(settings: AlignSettings, methods: list[MethodChoice], merged: dict, args) -> dict:
    """The settings record of the run (`records.settings_record`): the reshaping settings, the
    methods with every keyword they run with, the model by its weights, the trainer and run
    settings that shape a measurement, and align's own."""
    from oar_attrib.records.settings_record import method_record, settings_record

    from oar_attrib.weights.settings import ReshapeSettings

    base = ReshapeSettings.from_config(args)
    sections = {name: {k: v for k, v in merged[name].items() if k not in EXECUTION_ONLY[name]}
                for name in ("run", "trainer")}
    sections["run"].pop("model")  # the record's model is compared by the sha256 of its weights
    own = {"preset": settings.preset, "batches": settings.batches, "batch_prompts": settings.batch_prompts,
           "pool_batches": settings.pool_batches, "seed": settings.seed,
           **({} if settings.mean_gradients else {"mean_gradients": False}),
           "methods": {c.label: {"method": c.name, **method_record(c.name, base, c.params)} for c in methods}}
    return settings_record(base, sorted({c.name for c in methods}), model=merged["run"]["model"],
                           dtype=merged["run"].get("dtype", "float32"), align=own, **sections)


def spell(field: str) -> str:
    """How the command line sets a record field (for the refusal's one line)."""
    from oar_attrib.weights.settings import config_name

    head, _, rest = field.partition(".")
    name = rest.partition(".")[0]
    if head == "align":
        return "--methods" if name == "methods" else "--" + name.replace("_", "-")
    if head == "methods":
        return "--methods"
    if head == "model":
        return "--model"
    if head in ("run", "trainer", "dtype"):
        return f"{name or head}="
    if head == "settings":
        return f"{config_name(name)}="
    return field


def open_run(settings: AlignSettings, store_path: str | Path):
    """(store, trainer, methods): the settings checked and recorded (before the model loads),
    then the measuring trainer built (None when the store holds the finished run)."""
    from ..launch import build_configs, build_trainer
    from .settings import check_controls, resolve_methods

    store_path = Path(store_path)
    methods = resolve_methods(settings.methods)
    merged = trainer_settings(settings, store_path)
    check_controls(methods, merged["run"].get("data"))
    run, args = build_configs(merged)
    store = AlignStore(store_path).open(align_record(settings, methods, merged, args), spell)
    try:
        if finished(store, settings):
            return store, None, methods
        for read in (store.reference, store.mean_gradients, store.screen, store.pool):
            read()  # checked before the model loads: a damaged folder is refused first
        trainer, _ = build_trainer(run, args, data_seed=settings.seed)
        gradients.check_trainer(trainer)
    except BaseException:
        store.close(discard=True)  # a folder made here for a run refused now is removed
        raise
    return store, trainer, methods


# ---------------------------------------------------------------------------- phases


class Screen:
    """The screen of a run, grown on demand: the mixed groups in screening order. The pool is
    the first pool_batches x batch_prompts of them, batch b the next batch_prompts after the
    pool and the batches before it (the prompts come in a seeded random order, so taking them in
    order deals them at random); a resumed run reads the same groups back from screen.jsonl."""

    def __init__(self, store: AlignStore, trainer, settings: AlignSettings, progress: bool):
        self.store, self.trainer, self.settings = store, trainer, settings
        self.order = prompt_order(len(trainer.train_dataset), settings.seed)
        lines = store.screen_lines()
        self.lines = {}
        for line in lines:
            self.lines.setdefault(line["call"], []).append(line)
        self.prompts = len(lines)
        self.calls = max((line["call"] for line in lines), default=-1) + 1
        self.mixed = [GroupRef(line["call"], line["group"]) for line in lines if line["mixed"]]
        self.progress = progress

    def groups(self, start: int, stop: int) -> list[GroupRef]:
        """Mixed groups start..stop-1 in screening order, screening more prompts when needed."""
        bar = tqdm(total=stop, initial=min(len(self.mixed), stop), desc="screen", unit="group",
                   disable=not self.progress or len(self.mixed) >= stop, leave=False)
        while len(self.mixed) < stop:
            self._call()
            bar.update(min(len(self.mixed), stop) - bar.n)
            bar.set_postfix(prompts=self.prompts, refresh=False)
        bar.close()
        refs = self.mixed[start:stop]
        for call in sorted({r.call for r in refs}):
            if not self.store.has_call(call):
                self._restore(call)
        return refs

    def _restore(self, call: int) -> None:
        """Sample a screened call again (its rollouts are not here: a fresh machine given the
        committed files) and check that it gives the committed screen lines."""
        per, dataset = self.settings.batch_prompts, self.trainer.train_dataset
        output, found = screen_call(self.trainer, dataset, self.order[call * per:(call + 1) * per],
                                    call_seed(self.settings.seed, call))
        stored = self.lines.get(call, [])
        same = len(found) == len(stored) and all(
            a["index"] == b.get("index") and a["mixed"] == b.get("mixed")
            and np.allclose(a["rewards"], b.get("rewards"), atol=1e-6) for a, b in zip(found, stored))
        if not same:
            raise AlignError(f"screening call {call} sampled again here gives other completions than "
                             f"{self.store.path}/screen.jsonl holds (rewards, mixed groups): this machine "
                             "samples differently; resume where the run was measured, or start a new --store")
        self.store.restore_call(call, output)

    def _call(self) -> None:
        per, dataset = self.settings.batch_prompts, self.trainer.train_dataset
        start = self.calls * per
        if start + per > len(dataset):
            raise AlignError(f"the training set has {len(dataset)} prompts and {len(self.mixed)} of the "
                             f"{start} screened have mixed rewards; {self.settings.groups_needed} are needed: "
                             "lower --batches or --pool-batches, or use a larger training set "
                             "(world_train_size=... or data_limit=...)")
        began, cpu = time.perf_counter(), time.process_time()
        output, found = screen_call(self.trainer, dataset, self.order[start:start + per],
                                    call_seed(self.settings.seed, self.calls))
        seconds, cpu = (time.perf_counter() - began) / len(found), (time.process_time() - cpu) / len(found)
        found = [{**line, "group": g, "seconds": seconds, "cpu_seconds": cpu} for g, line in enumerate(found)]
        self.store.add_screen_call(self.calls, output, found)
        self.mixed += [GroupRef(self.calls, line["group"]) for line in found if line["mixed"]]
        self.prompts += len(found)
        self.calls += 1


def _counts(lines: list[dict]) -> dict[str, int]:
    return {h: sum(1 for line in lines if line["half"] == h) for h in HALVES}


def reference(store: AlignStore, trainer, layout_: ParamLayout, screen: Screen, settings: AlignSettings,
              progress: bool) -> dict:
    """g* and the two half-pool means on disk, and reference.json: the mean GRPO gradient of the
    pool batches, for a folder that does not hold them yet (`ready_reference` is None). A folder
    whose reference.json is there but whose vectors are not (a fresh machine given the committed
    result files) recomputes the pool from its seeds and checks it against the committed pool
    lines and g*'s fingerprint before going on."""
    found = store.reference()
    per, n = settings.batch_prompts, settings.pool_batches
    sums = store.sums("reference", layout_.size)
    committed = store.lines("pool")
    lines = [] if found is not None else committed  # a restore recomputes every pool batch
    counts = _counts(lines)
    for half in HALVES:
        sums[half].keep(counts[half])
    screen.groups(0, n * per)
    for k in tqdm(range(len(lines), n), desc="reference pool", unit="batch", disable=not progress,
                  initial=len(lines), total=n):
        refs = screen.groups(k * per, (k + 1) * per)
        began, cpu = time.perf_counter(), time.process_time()
        gradient = grpo_gradient(trainer, layout_, batch_of(store, refs, trainer))
        half = HALVES[k % 2]
        sums[half].add((gradient,), counts[half])
        line = {"pool_batch": k, "half": half, "groups": [[r.call, r.group] for r in refs],
                "sq": dot64(gradient, gradient), "seconds": time.perf_counter() - began,
                "cpu_seconds": time.process_time() - cpu}
        if found is None:
            store.commit("pool", line)
        else:
            check_pool_line(committed, line)
        counts[half] += 1
        sums[half].keep(counts[half])
    a, b = (sums[h].read(counts[h]) for h in HALVES)
    star = (np.asarray(a, dtype=np.float32) + np.asarray(b, dtype=np.float32)) / n
    info = reference_info(star, a, b, counts, store.lines("pool"))
    if found is not None:
        check_fingerprint(found, info, store.path)
    store.write_vectors({"gstar": star, **{f"gstar_{h}": np.asarray(sums[h].read(counts[h]), dtype=np.float32)
                                          / counts[h] for h in HALVES}})
    if found is None:
        store.write_json(REFERENCE_JSON, info)
    return found or info


def _halves_from_sums(store: AlignStore, found: dict, size: int) -> bool:
    """Write the half pools' means from the reference's running sums when those are there."""
    sums, counts = store.sums("reference", size), found.get("halves") or {}
    if not all(isinstance(counts.get(h), int) and counts[h] > 0 and sums[h].path(counts[h]).is_file()
               for h in HALVES):
        return False
    store.write_vectors({f"gstar_{h}": np.asarray(sums[h].read(counts[h]), dtype=np.float32) / counts[h]
                         for h in HALVES})
    return True


def ready_reference(store: AlignStore, size: int) -> dict | None:
    """reference.json when the folder holds g* and its halves, read back and checked
    (`check_reference`: AlignError, one line, nothing changed), else None (still to make)."""
    found = store.reference()
    if found is not None and all(store.has_vector(name) for name in STARS):
        check_reference(store, size, found)
        return found
    if found is not None and store.has_vector("gstar") and _halves_from_sums(store, found, size):
        check_reference(store, size, found)
        return found  # a store made before the half pools' vectors were kept
    return None


def check_reference(store: AlignStore, size: int, found: dict) -> None:
    """AlignError (one line; nothing changed) unless g* and its halves read back sound
    (`AlignStore.vector`: shape, dtype, finite, the sha256 recorded when written). A vector
    with no recorded print (a store made before prints were kept) is judged by reference.json
    instead (`_unlike_reference`) and then printed."""
    unprinted = [name for name in STARS if not store.printed(name)]
    vectors = {name: store.vector(name, size) for name in STARS}
    for name in unprinted:
        why = _unlike_reference(name, vectors[name], found)
        if why:
            raise store.bad_vector(name, why)
    if unprinted:
        store.record_prints(unprinted)


def _unlike_reference(name: str, vector, found: dict) -> str | None:
    """How a reference vector differs from what reference.json says of it (g*: its squared
    norm, L1 norm and fingerprint coordinates; a half's mean: its squared norm), or None."""
    checks = []
    if name == "gstar":
        checks = [("||g*||^2", found["sq"], dot64(vector, vector)), ("||g*||_1", found["l1"], _l1(vector))]
        prints = found.get("fingerprint") if isinstance(found.get("fingerprint"), dict) else {}
        scale = max((abs(v) for v in prints.values() if isinstance(v, (int, float))), default=0.0)
        for key, value in prints.items():
            if not (key.isdigit() and int(key) < len(vector) and isinstance(value, (int, float))
                    and _close(float(vector[int(key)]), value, scale)):
                return f"differs from reference/reference.json at its fingerprint coordinate {key}"
    elif isinstance(found.get("halves_sq"), dict):
        half = name.removeprefix("gstar_")
        checks = [(f"the squared norm of half {half}", found["halves_sq"][half], dot64(vector, vector))]
    for what, stored, here in checks:
        if not _close(here, stored, abs(stored)):
            return f"has {what} {here:.6g} where reference/reference.json says {stored:.6g}"
    return None


STARS = ("gstar", "gstar_a", "gstar_b")  # g* and its two half pools' means
FINGERPRINT_COORDS = 16  # g*'s largest coordinates kept in reference.json to check a recomputed g*
FINGERPRINT_TOLERANCE = 1e-3  # relative: float sums in another thread order differ far less


def reference_info(star: np.ndarray, a, b, counts: dict, pool_lines: list[dict]) -> dict:
    """reference.json: g*'s norms, its halves' split-half cosine and squared norms, the
    per-batch squared norm, and g*'s fingerprint (its largest coordinates)."""
    cross, aa, bb = _dots(a, b)
    top = np.argpartition(np.abs(star), -FINGERPRINT_COORDS)[-FINGERPRINT_COORDS:]
    return {"pool_batches": sum(counts.values()), "halves": counts, "split_half_cos": cross / np.sqrt(aa * bb),
            "sq": dot64(star, star), "l1": _l1(star),
            "halves_sq": {"a": aa / counts["a"] ** 2, "b": bb / counts["b"] ** 2},
            "halves_dot": cross / (counts["a"] * counts["b"]),
            "batch_sq_mean": float(np.mean([line["sq"] for line in pool_lines])),
            "signal_sq": cross / (counts["a"] * counts["b"]),
            "seconds_per_batch": float(np.mean([line["seconds"] for line in pool_lines])),
            "fingerprint": {str(int(i)): float(star[i]) for i in sorted(top)}}


def _close(x: float, y: float, scale: float) -> bool:
    return abs(x - y) <= FINGERPRINT_TOLERANCE * max(scale, 1e-30)


def check_pool_line(committed: list[dict], line: dict) -> None:
    """AlignError unless a recomputed pool batch has the committed one's groups and norm."""
    k = line["pool_batch"]
    old = committed[k] if k < len(committed) else None
    if old is None or old.get("groups") != line["groups"] or not _close(old.get("sq", -1.0), line["sq"], line["sq"]):
        raise AlignError(f"pool batch {k} recomputed here differs from the committed reference/pool.jsonl "
                         f"(||g||^2 {line['sq']:.6g} against {old and old.get('sq')}): this machine samples or "
                         "computes differently; resume where the run was measured, or start a new --store")


def check_fingerprint(found: dict, info: dict, folder) -> None:
    """AlignError unless g* recomputed from the seeds matches the committed reference.json."""
    print_ = found.get("fingerprint")
    if not isinstance(print_, dict):
        raise AlignError(f"{folder}/reference/reference.json has no fingerprint of g* (made by an older "
                         "oar align), so a g* recomputed here cannot be checked: start a new --store")
    scale = max(abs(v) for v in print_.values()) if print_ else 0.0
    same = _close(found["sq"], info["sq"], found["sq"]) and all(
        _close(v, info["fingerprint"].get(k, float(v) + 2 * scale + 1), scale) for k, v in print_.items())
    if not same:
        raise AlignError(f"g* recomputed here differs from the one {folder}/reference/reference.json "
                         f"fingerprints (||g*||^2 {info['sq']:.6g} against {found['sq']:.6g}): the run "
                         "cannot resume on this machine; resume where it was measured, or start a new --store")


def _l1(vector) -> float:
    """||v||_1 of a (D,) array, summed in float64 chunk by chunk."""
    return float(sum(gradients.chunk64(vector, slice(i, i + gradients.CHUNK)).abs().sum()
                     for i in range(0, len(vector), gradients.CHUNK)))


def _dots(a, b) -> tuple[float, float, float]:
    return dot64(a, b), dot64(a, a), dot64(b, b)


def measure(store: AlignStore, trainer, layout_: ParamLayout, methods: list[MethodChoice], screen: Screen,
            settings: AlignSettings, progress: bool) -> None:
    """Every method's endpoint sums and running sums on every training batch not yet committed
    (its groups screened when it comes)."""
    per, first = settings.batch_prompts, settings.pool_batches * settings.batch_prompts
    star = store.vector("gstar", layout_.size)
    halves = {h: store.vector(f"gstar_{h}", layout_.size) for h in HALVES}
    base = gradients.base_settings(trainer)
    sums = [store.sums(str(i), layout_.size) for i in range(len(methods))] if settings.mean_gradients else []
    lines = store.lines("results")
    counts = _counts(lines)
    ahead = {h: False for h in HALVES}  # the half's sums already hold the next batch (its line was lost)
    for method_sums in sums:
        for half in HALVES:
            ahead[half] = method_sums[half].keep(counts[half]) > counts[half]
    bar = tqdm(range(len(lines), settings.batches), desc="batches", unit="batch", disable=not progress,
               initial=len(lines), total=settings.batches)
    for b in bar:
        half = HALVES[b % 2]
        refs = screen.groups(first + b * per, first + (b + 1) * per)
        inputs = batch_of(store, refs, trainer)
        advantages = inputs["advantages"]
        line = {"batch": b, "half": half, "groups": [[r.call, r.group] for r in refs],
                "rows": int(advantages.numel()), "pos_rows": int((advantages > 0).sum()),
                "neg_rows": int((advantages < 0).sum()), "tokens": int(inputs["num_items_in_batch"]),
                "methods": {}}
        with shared_forward(trainer):
            grpo = None
            for i, choice in enumerate(methods):
                bar.set_postfix(method=choice.label, refresh=True)
                gradient = method_gradient(trainer, layout_, inputs, choice, base)
                if grpo is None:  # methods[0] is GRPO
                    grpo = gradient
                line["methods"][choice.label] = {**endpoint_sums(gradient, grpo, star, halves),
                                                 "seconds": gradient.seconds}
                if sums and not ahead[half]:
                    sums[i][half].add((gradient.pos, gradient.neg), counts[half])
                del gradient
        store.commit("results", line)
        counts[half] += 1
        ahead[half] = False
        for method_sums in sums:
            method_sums[half].keep(counts[half])
        metrics(trainer).clear()  # TRL's per-loss-call logs would grow without end


def mean_gradients(store: AlignStore, methods: list[MethodChoice], size: int, progress: bool) -> dict:
    """Per method, over its running sums S_a, S_b (even and odd batches): <S_a, S_b>, ||S_a||^2,
    ||S_b||^2, <S_a + S_b, g*>, and with GRPO's sums the cross-half <S_a, G_b> + <S_b, G_a>
    (independent batches, so its noise has mean zero); kept at the batch count it was made at."""
    counts = _counts(store.lines("results"))
    found = store.mean_gradients()
    if found is not None and found.get("halves") == counts:
        return found
    star = store.vector("gstar", size)
    grpo = store.sums("0", size)
    ga, gb = (grpo[h].read(counts[h]) for h in HALVES)
    out = {"halves": counts, "methods": {}}
    for i, choice in enumerate(tqdm(methods, desc="mean gradients", unit="method", disable=not progress)):
        sums = store.sums(str(i), size)
        a, b = (sums[h].read(counts[h]) for h in HALVES)
        ab, aa, bb = _dots(a, b)
        out["methods"][choice.label] = {"ab": ab, "aa": aa, "bb": bb, "star": dot64(a, star) + dot64(b, star),
                                        "cross_grpo": dot64(a, gb) + dot64(b, ga)}
    store.write_json(MEAN_GRADIENTS, out)
    return out


def finished(store: AlignStore, settings: AlignSettings) -> bool:
    """Whether the store holds every batch and (unless the run sums none) the mean-gradient
    sums of all of them."""
    done = len(store.results()) >= settings.batches  # read only: the resume cuts a cut line
    if not settings.mean_gradients:
        return done
    sums = store.mean_gradients()
    return done and sums is not None and sum(sums["halves"].values()) == settings.batches


def tell_cost(store: AlignStore, trainer, methods: list[MethodChoice], settings: AlignSettings, tell=print) -> None:
    """Say before the first model call how long the batches still to measure take: from the
    seconds the store's committed batches took (a resume), else from `methods.cost` (each
    method's weights on a batch of full-length completions and its backward, at the model's
    measured speed: an upper bound, as completions end early). The screening's sampling comes
    on top; its bar counts it."""
    from oar_attrib.methods import method_spec
    from oar_attrib.methods.registry import knob_fields
    from oar_attrib.methods.cost import TraceShape, method_work
    from oar_attrib.models.cost import Work, duration, measure_speed
    from oar_attrib.rollouts import prompt_ids

    done, left = store.lines("results"), settings.batches - len(store.lines("results"))
    if left <= 0:
        return
    if done:
        per_batch = sum(sum(m["seconds"].get(k, 0.0) for k in ("weights", "backward"))
                        for line in done for m in line["methods"].values()) / len(done)
        tell(f"oar align: {left} of {settings.batches} batches to measure, about {duration(left * per_batch)} "
             f"here ({duration(per_batch)} a batch over the {len(done)} measured), plus any screening still needed")
        return
    rows, length = settings.batch_prompts * trainer.num_generations, trainer.max_completion_length
    prompt = len(prompt_ids(trainer.processing_class, trainer.train_dataset[0]["prompt"]))
    shape = TraceShape(prompt, length, prompt + length - 1, tuple(range(prompt, prompt + length - 2)),
                       tuple(range(prompt, prompt + length - 2, 20)))
    speed = measure_speed(trainer.model, prompt + length)
    backward = speed.seconds(Work(backward=rows * shape.length, calls=1))
    per_method = {}
    for choice in methods:
        spec = method_spec(choice.name)
        params = {**{f.name: f.default for f in knob_fields(spec.knobs)}, **choice.params}
        work = Work() if spec.uniform else method_work(choice.name, shape, params)
        per_method[choice.label] = None if work is None else rows * speed.seconds(work) + backward
    known = sum(v for v in per_method.values() if v is not None)
    total = left * known + settings.pool_batches * backward
    parts = ", ".join(f"{k} {'no estimate' if v is None else duration(v)}" for k, v in per_method.items())
    tell(f"oar align: {settings.pool_batches} pool batches and {left} batches of {rows} completions: at most about "
         f"{duration(total)} here ({parts} a batch, with completions of {length} tokens at this machine's "
         "measured speed), plus the screening's sampling; a rerun resumes after the batches committed")


def align(settings: AlignSettings, store_path: str | Path, progress: bool = True) -> Path:
    """Run (or resume) a gradient-alignment measurement into the folder `store_path`; returns
    the folder. `oar_attrib.reports.align.summarise(folder)` makes the statistics."""
    store, trainer, methods = open_run(settings, store_path)
    if trainer is None:
        store.close()
        return Path(store_path)
    try:
        layout_ = ParamLayout(trainer.model)
        ready = ready_reference(store, layout_.size)  # a damaged g* is refused before the estimate
        tell_cost(store, trainer, methods, settings, tell=lambda line: tqdm.write(line, file=sys.stderr))
        screen = Screen(store, trainer, settings, progress)
        if ready is None:
            reference(store, trainer, layout_, screen, settings, progress)
        measure(store, trainer, layout_, methods, screen, settings, progress)
        if settings.mean_gradients:
            mean_gradients(store, methods, layout_.size, progress)
    finally:
        store.close()
    return Path(store_path)
