"""`oar attribute --store S --run R`: attribute the traces already in a run store, in place.

For imported runs (`oar import`: TRL, verl, JSONL) and for runs that want one more method.
Each batch of traces that lack a method is attributed and written in one transaction, with the
policy's per-token log-probability and entropy (`analysis.token_stats`, one more forward),
so a rerun resumes after the traces done. The prompt is encoded as when the run was written:
the run's answer format (unless --answer-format is given), and its chat rule (imports: message lists get the chat template,
text prompts are used as they are, e.g. verl's already templated input; a run imported with
the plain role template, for a tokenizer without one, gets it again). The trace's stored
sequence advantage gives the token advantages A_i * w_t. Then the run's summaries are
recomputed.

The run's config keeps, per method attributed in place, the settings record it was made with
(`attributed`); attributing a method again under another record is refused (one line naming
the flags), so a run never holds one method's traces made under two settings.
"""
from __future__ import annotations

from pathlib import Path

from ..console import say
from ..defaults import ANSWER_FORMAT, DEFAULT_MODEL
from ..errors import InputError


def _chat(flags, run_config: dict, tokenizer, default_chat):
    """prompt -> its chat flag, as the run was written."""
    from ..importers.rows import chat_rule

    if flags.chat is not None:
        return lambda prompt: flags.chat
    if run_config.get("chat") == "messages":  # an import's rule
        return chat_rule
    chat = default_chat(None, tokenizer)  # what `oar attribute --out` chose by default
    return lambda prompt: chat


def _tokenizer_only(model: str) -> bool:
    """Whether a run's model is a folder without weights (`oar import` took only the tokenizer
    of a run folder)."""
    folder = Path(model).expanduser() if model else None
    return folder is not None and folder.is_dir() and not (folder / "config.json").is_file()


def _todo(store, run_id: int, methods) -> list[int]:
    """Ids of the run's traces that lack a method or their token statistics."""
    ids = set(store.trace_ids(run_id, missing_token_stats=True))
    for method in methods:
        ids.update(store.trace_ids(run_id, missing=method))
    return sorted(ids)


def _advantages(records) -> list[float] | None:
    """The traces' sequence advantages, or None (no token advantages) when one lacks it."""
    values = [r.row.advantage for r in records]
    return None if any(v is None for v in values) else values


def _batches(store, todo: list[int], flags, model):
    """The traces of `todo`, read one at a time, in batches of `flags.batch_size`, or (None)
    of the traces whose work fills one pass's memory budget (`budget.trace_batch_full`, as
    `oar attribute --out` batches lines)."""
    from ..models.budget import trace_batch_full, trace_work
    from ..inputs.segments import n_scored

    batch, works = [], []
    for trace_id in todo:
        record = store.trace(trace_id)
        batch.append(record)
        works.append(trace_work(len(record.token_ids), n_scored(record.segments, record.row.span_found)))
        full = (len(batch) >= flags.batch_size if flags.batch_size is not None else
                trace_batch_full(model, works, max(len(r.token_ids) for r in batch), flags.max_batch_tokens))
        if full:
            yield batch
            batch, works = [], []
    if batch:
        yield batch


def _write(store, records, got, model_name: str) -> None:
    results, stats = got
    for record, result in zip(records, results):
        store.add_attributions(record.row.id, result)
    store.add_token_stats([(r.row.id, model_name, lp, h) for r, (lp, h) in zip(records, stats)])


def _check_attributed(store, run, record: dict) -> dict:
    """The run's per-method records with this command's methods added; RecordMismatchError
    when a method was attributed here before under another record."""
    from ..records.settings_record import check_resume

    held = dict(run.config.get("attributed") or {})
    for method, params in record["methods"].items():
        mine = {**record, "methods": {method: params}}
        if method in held:
            check_resume(f"--store {store.path} --run {run.id}", held[method], mine,
                         "attribute into a new --out, or import the run again")
        held[method] = mine
    return held


def _attribute_part(model, tokenizer, records, chat: bool, flags, settings, on_scored):
    """(attributions, response statistics) of stored `records` that share one chat rule."""
    from ..analysis.token_stats import response_stats
    from ..attribution import attribute

    prompts = [r.to_attribution().prompt for r in records]
    responses = [r.response for r in records]
    results = attribute(model, tokenizer, prompts, responses, flags.methods, settings, chat=chat,
                        advantages=_advantages(records), batch_size=len(records),
                        method_params=flags.method_params, on_scored=on_scored)
    stats = response_stats(model, tokenizer, prompts, responses, chat=chat,
                           answer_format=flags.answer_format)
    return results, stats


def attribute_stored(flags, default_chat, settings_of, record_of) -> int:
    """Attribute run `flags.run` of store `flags.store` in place; the exit status.
    `default_chat(None, tokenizer)`: `oar attribute`'s chat rule for runs that do not record
    theirs; `settings_of(flags)`, `record_of(flags)`: the command's `ReshapeSettings` and
    settings record (`cli.attribute`, which imports this module)."""
    from ..analysis.run_summary import summarise
    from ..inputs.chat_template import ROLE_TEMPLATE, ROLE_TEMPLATE_NAME
    from ..models import load_model
    from ..store import Store
    from ..store.lock import WriterLock
    from ..store.schema import identify
    from ..commands import Interrupted
    from .progress import method_progress, trace_bar

    if flags.input is not None:
        raise InputError("--input reads a JSONL file; with --store/--run the traces come from "
                         "the store, so pass one or the other")
    identify(Path(flags.store))
    with WriterLock(flags.store, "--store"), Store(flags.store) as store:
        run = _stored_run(store, flags)
        attributed = _check_attributed(store, run, record_of(flags))  # before the model loads
        model, tokenizer = load_model(flags.model, device=flags.device, dtype=flags.dtype)
        if run.config.get("chat_template") == ROLE_TEMPLATE_NAME:  # as the import rendered them
            tokenizer.chat_template = ROLE_TEMPLATE
        chat = _chat(flags, run.config, tokenizer, default_chat)
        todo, done = _todo(store, run.id, flags.methods), 0
        if todo:
            store.update_run_config(run.id, attributed=attributed)

        settings = settings_of(flags)
        if todo:
            _tell_cost(store.trace(todo[0]), tokenizer, chat, model, flags, len(todo))
        bar = trace_bar(len(todo), flags.no_progress)
        on_scored = method_progress(bar, len(flags.methods))

        try:
            with bar:
                for records in _batches(store, todo, flags, model):
                    for flag in (False, True):  # one `chat` per call of attribute
                        part = [r for r in records if bool(chat(r.to_attribution().prompt)) == flag]  # None: no template
                        if part:
                            got = _attribute_part(model, tokenizer, part, flag, flags, settings, on_scored)
                            _write(store, part, got, run.model or str(flags.model))
                    done += len(records)
                    bar.update(done - bar.n)  # whole traces once written
        except KeyboardInterrupt:
            raise Interrupted(f"interrupted; {done} traces of run {run.id} attributed and kept in "
                              f"{flags.store}, rerun the same command to resume") from None
        summarise(store, run.id)
    say(f"attributed {done} traces of run {run.id} in {flags.store} with "
        f"{', '.join(flags.methods)}")
    return 0


def _tell_cost(record, tokenizer, chat, model, flags, traces: int) -> None:
    """`attribute.tell_cost` on the first trace to attribute (encoded as it will be), its
    token statistics' forward included."""
    from ..inputs.encoding import encode_pairs
    from .progress import tell_cost

    prompt = record.to_attribution().prompt
    _, (pair,) = encode_pairs(tokenizer, [prompt], [record.response], answer_format=flags.answer_format,
                              chat=chat(prompt))
    tell_cost(model, pair, flags, traces, extra_forward=True)


def _stored_run(store, flags):
    """Run `flags.run` of `store`, with `flags.model` and `flags.answer_format` filled in from it
    where left out; InputError when there is no such run or it holds no weights to score with."""
    from ..records.settings_record import lookup
    from ..store.errors import NotFoundError
    from .choices import default_methods

    try:
        run = store.run(flags.run)
    except NotFoundError:
        raise InputError(f"--run {flags.run}: no such run in {flags.store}; `oar web --store` "
                         "lists them") from None
    flags.answer_format = (flags.answer_format or run.config.get("answer_format")
                          or lookup(run.config, "settings.answer_format") or ANSWER_FORMAT)
    if flags.model is None and _tokenizer_only(run.model):
        raise InputError(f"run {run.id} of {flags.store} was imported with the tokenizer of "
                         f"{run.model}, which holds no weights; pass --model with the policy's "
                         "checkpoint")
    flags.model = flags.model or run.model or DEFAULT_MODEL
    flags.methods = flags.methods or default_methods(flags.model)
    return run
