"""`oar attribute`: token importances of prompt/response pairs from a JSONL file.

The input is read lazily, line by line, each line judged on its own (`inputs.pairs`):
a bad line is reported with its line number and skipped, the good ones are attributed in
batches and each batch is written at once (see `outputs`). `--input` and `--out` are checked
before the model loads; a rerun with the same input and output resumes after the lines
already written. Under `torchrun` / `accelerate launch` rank r of n takes the lines whose
number is r + 1, r + 1 + n, ... and rank 0 merges the ranks' parts into `--out` at the end.
Exit status 0 when every line was attributed, 2 when some were skipped (or on bad arguments).
Every output carries the settings record of the command (`command_record`); a rerun into an
output made with other settings is refused, naming the flags that differ, before the model
loads. --methods left out is `oar_p oar_g` on the bundled model and the reading set on any
other (`choices.default_methods`); before the first trace the command says how long the work
will take here (`progress.tell_cost`).
"""
from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from ..console import say, terminal_safe
from ..defaults import ANSWER_FORMAT, DEFAULT_MODEL, PROBE
from ..errors import InputError
from ..inputs.pairs import Skip, input_labels, judge_record, judge_tokens, label_problems
from ..inputs.grading import TRUNCATED
from ..inputs.segments import n_scored
from ..jsonl import iter_jsonl
from . import outputs
from ..commands import MAX_COUNT, add_dataclass_args, add_model_args, dataclass_from_args, option
from ..weights.settings import ReshapeSettings
from .progress import lines_to_read, method_progress, progress_bar, tell_cost
from .choices import (add_answer_format_arg, add_method_knobs, add_probe_arg, default_methods, method_name,
                      method_params_from)
from .provenance import input_defaults


def check_input(path: str) -> Path:
    """The input path, or an InputError when it is not a readable file."""
    from ..files import check_file

    if Path(path).is_dir():
        raise InputError(f"--input {path} is a folder; pass a JSONL file")
    return check_file(path, "--input", "pass a JSONL file with 'prompt' and 'response' per line")


def read_pairs(path: Path, tokenizer, answer_format: str, skip_line, counts: Counter,
               report=print, chat: bool | None = None, notice=None) -> Iterator[tuple[int, object, str, dict, object]]:
    """(line number, prompt, response, labels, the pair encoded) of the good lines of `path` for
    which `skip_line(n)` is false (`input_labels`; `inputs.pairs.judge_tokens` encodes each
    line once, and the attribution scores that encoding); each bad one is reported (`report`,
    one line naming file and line) and counted; a label that is there but not what it must be
    (`inputs.pairs.label_problems`) is said through `notice` (default: `report`) and the line kept
    without it."""
    notice = notice or report
    for number, record in iter_jsonl(path):
        if skip_line(number):
            continue
        got = judge_record(record)
        judged = got if isinstance(got, Skip) else judge_tokens(tokenizer, *got, answer_format, chat)
        if isinstance(judged, Skip):
            counts[judged.kind] += 1
            report(f"{path}:{number}: skipped ({judged.kind}): {judged}")
            continue
        for problem in label_problems(record):
            notice(f"{path}:{number}: {problem}; the line is attributed and stored without it")
        yield number, *got, input_labels(record, got[1], answer_format), judged



# The gating flags of `oar attribute`, one per ReshapeSettings field (the same names as
# attribute()'s keywords and OARConfig's oar_* fields).
GATING_FLAGS = ("tau", "beta", "w_min", "weighting", "rho", "granularity", "step_pool")


def attribute_settings(flags: AttributeFlags) -> ReshapeSettings:
    """The `ReshapeSettings` of the command line's flags (an --answer-format left out and not
    yet filled in from the input, `provenance.input_defaults`, is the default's)."""
    return ReshapeSettings(probe=flags.probe, answer_format=flags.answer_format or ANSWER_FORMAT,
                           max_batch_tokens=flags.max_batch_tokens, **flags.gating)


def command_record(flags, **extra) -> dict:
    """The settings record of `oar attribute`'s flags, made before the model loads; equal to
    the record `attribute()` gives each trace of this command."""
    from ..attribution import analysis_params
    from ..records.settings_record import settings_record

    used = analysis_params(flags.methods, flags.method_params)
    return settings_record(attribute_settings(flags), flags.methods, used, model=flags.model or DEFAULT_MODEL,
                           dtype=flags.dtype, chat=flags.chat, **extra)


def attribute_lines(model, tokenizer, pairs, output: outputs.Output, flags, on_scored=None) -> int:
    """Attribute `pairs` ((line, prompt, response, labels, encoded pair) tuples, `read_pairs`) in
    batches, writing each batch to `output` as soon as it is done; returns the number written.
    A batch is `flags.batch_size` lines, or (None) the lines whose work fills one pass's memory
    budget (`budget.trace_batch_full`): one trace at a time on a real model, so Ctrl-C loses at
    most the trace in progress. `on_scored(method, rows)`: each method done with a batch."""
    from ..attribution import attribute
    from ..models.budget import trace_batch_full, trace_work

    written, batch, works = 0, [], []

    def flush() -> int:
        lines, prompts, responses, labels, encoded = zip(*batch)
        traces = attribute(model, tokenizer, list(prompts), list(responses), flags.methods,
                           attribute_settings(flags), advantages=[lab.get("advantage", 0.0) for lab in labels],
                           batch_size=len(batch), chat=flags.chat, method_params=flags.method_params,
                           encoded=list(encoded), on_scored=on_scored)
        output.write([{"line": n, **_without_advantage(t.to_dict(), lab), **lab}
                      for n, t, lab in zip(lines, traces, labels)])
        return len(batch)

    def full() -> bool:
        if flags.batch_size is not None:
            return len(batch) >= flags.batch_size
        longest = max(pair.length for *_, pair in batch)
        return trace_batch_full(model, works, longest, flags.max_batch_tokens)

    for item in pairs:
        pair = item[-1]
        batch.append(item)
        works.append(trace_work(pair.length, n_scored(pair.labels, pair.span_found)))
        if full():
            written, batch, works = written + flush(), [], []
    if batch:
        written += flush()
    return written


def _without_advantage(record: dict, labels: dict) -> dict:
    """A trace's record as attributed, less the advantage and token advantages of a line that
    gave no advantage (the batch was attributed with 0 in its place)."""
    if "advantage" not in labels:
        record.update(advantage=None, token_advantages={})
        for metrics in record["metrics"].values():
            metrics.pop("top10_mass", None)
    return record


def _ranks() -> tuple[int, int]:
    """(rank, world size) from the launcher's environment (torchrun, accelerate launch)."""
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def _process_group(world: int):
    """torch.distributed, joined over gloo when several processes run; None for one."""
    if world <= 1:
        return None
    from datetime import timedelta

    import torch.distributed as dist

    if not dist.is_initialized():
        # Ranks wait for the slowest at the end: allow long jobs before the barrier times out.
        dist.init_process_group("gloo", timeout=timedelta(days=7))
    return dist


def open_output(flags, lock: bool = True) -> outputs.Output:
    """The `--out` JsonlOutput or StoreOutput, checked, with the lines it already holds, and
    (with `lock`: every process but the ranks > 0 of a sharded run) its writer lock."""
    if str(flags.out).endswith(".db"):
        config = command_record(flags, input=str(flags.input))
        return outputs.StoreOutput(flags.out, f"attribute {flags.input}", flags.model, config, lock=lock,
                                   force_new=flags.force_new_run)
    if flags.force_new_run:
        raise InputError(f"--force-new-run starts a new run in a run store (*.db); --out {flags.out} "
                         "is a JSONL, which holds one run's settings: pass a new --out")
    return outputs.JsonlOutput(flags.out, command_record(flags), lock=lock)


def _summary(out: str, written: int, flagged: Counter, resumed: int, counts: Counter,
             answer_format: str) -> str:
    text = f"wrote {written} attributions to {out} ({flagged['n']} flagged"
    if flagged["no_span"]:
        # Such a trace costs no method a forward; the reader should know why it has no scores.
        text += (f"; {flagged['no_span']} without an answer in format {answer_format!r}: not "
                 "scored, every weight 1 (--answer-format picks another)")
    if flagged["cut"]:
        at = f" at {flagged['cut_at']} tokens" if flagged["cut_at"] else ""
        text += (f"; {flagged['cut']} cut off{at} before their answer: not scored, every weight 1 "
                 "(generate again with a larger --max-new-tokens)")
    if resumed:
        text += f", {resumed} lines already there"
    skipped = sum(counts.values())
    kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(counts.items()))
    return text + f"); {skipped} bad lines skipped" + (f" ({kinds})" if kinds else "")


def output_signal(output: outputs.Output) -> str | None:
    """`analysis.signal.signal_line` of what the output holds (a JSONL, or its run in a store),
    or None when every group with a reward carries a GRPO signal."""
    from ..analysis.signal import ATTRIBUTE, group_signal, signal_line, store_signal

    if isinstance(output, outputs.StoreOutput):
        return None if output.run_id is None else signal_line(store_signal(output.store, output.run_id), ATTRIBUTE)
    return signal_line(group_signal((r.get("group"), r.get("reward"), r.get("correct"))
                                    for r in outputs.read_records(output.path)), ATTRIBUTE)


CHAT_LINE = ("oar attribute: plain-string prompts get the model's chat template (as one user "
             "message); --no-chat scores them as plain text")


def chat_choice(chat: bool | None, tokenizer, tell=say) -> bool | None:
    """--chat/--no-chat, or when neither is given: plain-string prompts get the tokenizer's chat
    template when it has one, said once through `tell` (None: not said here, `tell_plain_once`
    says it at the first plain-string prompt; the library's per-line `PlainPromptWarning` is
    silenced)."""
    if chat is None and getattr(tokenizer, "chat_template", None) is not None:
        import warnings

        from ..inputs.encoding import PlainPromptWarning

        if tell is not None:
            tell(CHAT_LINE)
        warnings.filterwarnings("ignore", category=PlainPromptWarning)
        return True
    return chat


def tell_plain_once(pairs, tell):
    """`pairs` (`read_pairs`), calling `tell(CHAT_LINE)` at the first plain-string prompt: chat
    message prompts (`oar generate`'s) get the template anyway, so nothing is said for them."""
    told = False
    for item in pairs:
        if not told and isinstance(item[1], str):
            tell(CHAT_LINE)
            told = True
        yield item


def run(flags: AttributeFlags) -> int:
    """`oar attribute` on the flags the parser built (`attribute_flags`)."""
    if flags.batch_size is not None and not 1 <= flags.batch_size <= MAX_COUNT:
        raise InputError(f"--batch-size must be from 1 to {MAX_COUNT}, got {flags.batch_size}")
    if (flags.store is None) != (flags.run is None):
        raise InputError("--store and --run go together: the run store and the run to attribute")
    if flags.store is not None:
        from .attribute_store import attribute_stored

        return attribute_stored(flags, chat_choice, attribute_settings, command_record)
    if flags.input is None or flags.out is None:
        raise InputError("pass --input FILE.jsonl and --out (or --store S --run R to attribute "
                         "a stored run in place)")
    source = check_input(flags.input)
    rank, world = _ranks()
    said = input_defaults(flags, source, DEFAULT_MODEL, "attribute")
    if said and rank == 0:
        say(said)
    flags.methods = flags.methods or default_methods(flags.model or DEFAULT_MODEL)
    dist = _process_group(world)
    final = open_output(flags, lock=rank == 0)  # every check of --out, before the model loads
    try:
        return _attribute_into(final, source, flags, rank, world, dist)
    except KeyboardInterrupt:
        kept = final.kept()  # read back: the Ctrl-C may have come between a write and its count
        final.close(finish=False)  # every finished batch is kept; the lock is released
        raise outputs.interrupted(flags.out, kept) from None
    except BaseException:
        final.close(finish=False)
        raise


def _attribute_into(final: outputs.Output, source: Path, flags, rank: int, world: int, dist) -> int:
    from ..models import load_model

    done = final.done | outputs.parts_done(flags.out)
    writer = final
    if world > 1:
        if rank != 0:
            final.close(finish=False)
        writer = outputs.JsonlOutput(outputs.part_path(flags.out, rank, world), command_record(flags))
    device = flags.device
    if world > 1 and device == "cuda":
        device = f"cuda:{os.environ.get('LOCAL_RANK', rank)}"
    model, tokenizer = load_model(flags.model, device=device, dtype=flags.dtype)
    counts: Counter = Counter()
    flagged = Counter()

    def skip_line(number: int) -> bool:
        return number in done or (number - 1) % world != rank

    bar = progress_bar(source, skip_line, disable=flags.no_progress or rank != 0)

    def report(line: str) -> None:  # a skipped line: counted, and printed above the bar
        bar.update(1)
        bar.n_written += 1
        bar.write(terminal_safe(line), file=sys.stderr)

    templated = chat_choice(flags.chat, tokenizer, tell=None) and flags.chat is None  # flags.chat: in the record
    def notice(line: str) -> None:  # a line kept without a label: said above the bar, not counted
        bar.write(terminal_safe(line), file=sys.stderr)

    pairs = read_pairs(source, tokenizer, flags.answer_format, skip_line, counts, report=report,
                       chat=flags.chat, notice=notice)
    if templated:
        pairs = tell_plain_once(pairs, notice)
    if rank == 0:
        pairs = _told_cost(pairs, model, flags, lambda: bar.total or lines_to_read(source, skip_line), notice)
    with bar:
        written = attribute_lines(model, tokenizer, pairs, _Flagged(writer, flagged, bar), flags,
                                  on_scored=method_progress(bar, len(flags.methods)))
    if dist is not None:
        writer.close()
        gathered = [None] * world
        dist.all_gather_object(gathered, (written, dict(flagged), dict(counts)))
        written = sum(g[0] for g in gathered)
        flagged = sum((Counter(g[1]) for g in gathered), Counter())
        counts = sum((Counter(g[2]) for g in gathered), Counter())
    if rank == 0:
        outputs.merge_parts(final, flags.out)
        signal = output_signal(final)
        final.close()
        if not written and not counts and not done:
            say(f"oar attribute: error: {flags.input} has no line to attribute")
        else:
            say(_summary(flags.out, written, flagged, len(done), counts, flags.answer_format))
            if signal:
                say(f"oar attribute: {signal}")
    if dist is not None:
        dist.destroy_process_group()
    return 2 if counts or not (written or done) else 0


def _told_cost(pairs, model, flags, traces, tell):
    """`pairs` (`read_pairs`), the estimate said (`tell_cost`) before the first is yielded;
    `traces()`: how many there are."""
    pairs = iter(pairs)
    first = next(pairs, None)
    if first is None:
        return
    tell_cost(model, first[-1], flags, traces(), tell)
    yield first
    yield from pairs


class _Flagged:
    """An output that also counts the records that carry flags (`n`) and those without an
    answer span (`no_span`), and moves the progress bar (traces, and the scored positions so far)."""

    def __init__(self, output: outputs.Output, counter: Counter, bar=None):
        self.output, self.counter, self.done, self.bar = output, counter, output.done, bar
        self.positions = 0

    def write(self, records: list[dict]) -> None:
        self.output.write(records)
        self.counter["n"] += sum(bool(r.get("flags")) for r in records)
        cut = [r for r in records if not r["span_found"] and r.get("graded") == TRUNCATED]
        self.counter["no_span"] += sum(not r["span_found"] for r in records) - len(cut)
        self.counter["cut"] += len(cut)
        self.counter["cut_at"] = max([self.counter["cut_at"], *(r.get("new_tokens") or 0 for r in cut)])
        if self.bar is not None:
            self.positions += sum(n_scored(r["segments"], r["span_found"]) for r in records)
            self.bar.set_postfix(positions=self.positions, refresh=False)
            # the bar moved by 1/M per method done (`method_progress`): on to whole traces
            self.bar.update(self.bar.n_written + len(records) - self.bar.n)
            self.bar.n_written += len(records)

    def close(self, finish: bool = True) -> None:
        self.output.close(finish)


@dataclass
class AttributeFlags:
    """What `oar attribute` runs on: its own flags (what is attributed, by which methods, where
    it is written and how) and the shared ones it is given (probe, answer format, gating, method
    knobs, model), built by `attribute_flags`. Not frozen: the model, answer format and methods
    left out are filled in before any work, from --input's provenance (`input_defaults`) or the
    --store run (`attribute_store`), as the command line's were."""

    model: str | None = option(None, "catalogue name or local checkpoint folder (default: the model that wrote "
                               "--input, as `oar generate` records it, else arith-tiny; with --store, the "
                               "run's model)")
    input: str | None = option(None, "JSONL with 'prompt' and 'response' per line")
    store: str | None = option(None, "a run store *.db whose run --run is attributed in place (an `oar "
                               "import`ed run, or one more method on any run); resumes after the traces done")
    run: int | None = option(None, "the id of the run to attribute in --store")
    out: str | None = option(None, "JSONL to write (one attribution per valid line), or a run store *.db to "
                             "add a run to (readable by `oar web --store`); a rerun with the same input and "
                             "output resumes after the lines already written")
    methods: list[str] | None = option(
        None, "registered importance methods (oar_attrib.available_methods()). Default: on the bundled "
              "arith-tiny oar_p oar_g; on any other model the reading set oar_p_hier oar_g entropy, whose "
              "first trace ends within a minute or two on a CPU (token OAR-P, a forward per reasoning "
              "token, takes minutes a trace there: name it, --methods oar_p ...). The command says its "
              "estimate before the first trace", type=method_name)
    batch_size: int | None = option(None, "lines attributed (and then written) together; each record's "
                                    "`timings` is its batch's seconds per trace (1: each trace timed on its "
                                    "own). Default: the lines that fill one pass of the memory budget (one at "
                                    "a time on a real model, so each trace is written as soon as it is done)")
    chat: bool | None = option(None, "wrap plain-string prompts in the model's chat template as one user "
                               "message (default: yes when the tokenizer has a chat template; chat-message "
                               "prompts always get it)")
    force_new_run: bool = option(False, "--out *.db: start a new run even when the store holds this input's "
                                 "run made with other settings (a JSONL holds one run: pass a new --out)",
                                 action="store_true")
    no_progress: bool = option(False, "hide the progress bar", action="store_true")
    # The shared flags (`add_probe_arg`, `add_answer_format_arg`, `add_model_args`, the gating
    # flags of ReshapeSettings, `add_method_knobs`): made by their own helpers, no flag here.
    probe: str = option(PROBE, flag=None)
    answer_format: str | None = option(None, flag=None)  # None: from --input or the run, else auto
    gating: dict = option(default_factory=dict, flag=None)  # GATING_FLAGS given: ReshapeSettings' fields
    device: str | None = option(None, flag=None)
    dtype: str = option("float32", flag=None)
    max_batch_tokens: int | None = option(None, flag=None)
    method_params: dict | None = option(None, flag=None)  # the method knobs given (`--oar-g-n-noise 8`)


def attribute_flags(args: argparse.Namespace) -> AttributeFlags:
    """The `AttributeFlags` of the parsed command line: the only reader of its namespace."""
    return dataclass_from_args(AttributeFlags, args, gating={name: getattr(args, name) for name in GATING_FLAGS},
                               method_params=method_params_from(args))


def _run_parsed(args: argparse.Namespace) -> int:
    return run(attribute_flags(args))


def add_parser(sub) -> None:
    at = sub.add_parser(
        "attribute", help="token importances of prompt/response lines (a JSONL) into a JSONL or a run store "
                          "(*.db, for oar web), or of a stored run in place (--store S --run R); resumable",
        description="Token importances of each prompt/response line of --input, written to --out (a\n"
                    "JSONL, or a run store *.db that `oar web --store` reads) trace by trace; or of the\n"
                    "traces of run --run of the store --store, in place (an `oar import`ed run, or one\n"
                    "more method). Before the first trace it says how long the work will take here; a\n"
                    "rerun resumes after what is written, and Ctrl-C keeps it.")
    add_dataclass_args(at, AttributeFlags, ("model", "input", "store", "run", "out", "methods"))
    add_probe_arg(at)
    add_answer_format_arg(at, default=None, help_text="where the final answer is (default: the format "
                          "--input was generated with, as `oar generate` records it, or the --store "
                          "run's; else auto)")
    add_dataclass_args(at, ReshapeSettings, GATING_FLAGS)  # generated from ReshapeSettings: defaults and help text
    add_dataclass_args(at, AttributeFlags, ("batch_size", "chat"))
    add_method_knobs(at)
    add_model_args(at)
    add_dataclass_args(at, AttributeFlags, ("force_new_run", "no_progress"))
    at.set_defaults(func=_run_parsed)
