"""`oar attribute`: token importances of prompt/response pairs from a JSONL file.

The input is read lazily, line by line, each line judged on its own (see `judge_record`):
a bad line is reported with its line number and skipped, the good ones are attributed in
batches and each batch is written at once (see `outputs`). `--input` and `--out` are checked
before the model loads; a rerun with the same input and output resumes after the lines
already written. Under `torchrun` / `accelerate launch` rank r of n takes the lines whose
number is r + 1, r + 1 + n, ... and rank 0 merges the ranks' parts into `--out` at the end.
Exit status 0 when every line was attributed, 2 when some were skipped (or on bad arguments).
Every output carries the settings record of the command (`command_record`); a rerun into an
output made with other settings is refused, naming the flags that differ, before the model
loads.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Iterator

from ..errors import InputError, OARError, TokenizerError
from ..jsonl import NotJSON, iter_jsonl
from . import outputs
from ..configs import add_dataclass_args, add_model_args
from ..weights.settings import ReshapeSettings
from .choices import add_method_knobs, method_name, method_params_from, probe_name


class Skip(str):
    """Why a line is skipped; `kind` names the family counted in the summary."""

    def __new__(cls, message: str, kind: str) -> "Skip":
        self = super().__new__(cls, message)
        self.kind = kind
        return self


def check_input(path: str) -> Path:
    """The input path, or an InputError when it is not a readable file."""
    p = Path(path)
    if p.is_dir():
        raise InputError(f"--input {path} is a folder; pass a JSONL file")
    if not p.is_file():
        raise InputError(f"--input {path} does not exist; pass a JSONL file with 'prompt' and "
                         "'response' per line")
    if not os.access(p, os.R_OK):
        raise InputError(f"--input {path} is not readable; check its permissions")
    return p


def _chat_ok(prompt: list) -> bool:
    return bool(prompt) and all(
        isinstance(m, Mapping) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
        for m in prompt
    )


def judge_record(record) -> tuple | Skip:
    """(prompt, response) of a parsed line, or the Skip that says what is wrong with it."""
    if isinstance(record, NotJSON):
        text = record if record.kind != "not_json" else f"not JSON ({record})"
        return Skip(text, record.kind)
    prompt = record.get("prompt") if isinstance(record, dict) else None
    response = record.get("response") if isinstance(record, dict) else None
    if not isinstance(prompt, (str, list)) or not isinstance(response, str):
        return Skip("needs a 'prompt' (string or chat messages) and a 'response' string", "fields")
    if isinstance(prompt, list) and not _chat_ok(prompt):
        return Skip("the prompt is a list but not of {'role': str, 'content': str} chat messages",
                    "bad_chat")
    if not response.strip():
        return Skip("the response is empty; there is nothing to attribute", "empty_response")
    return prompt, response


def judge_tokens(tokenizer, prompt, response, answer_format: str, chat: bool | None = None) -> Skip | None:
    """A Skip when the pair cannot be encoded as one scoring row (too long, chat without a
    template, ...), else None. Tokenizing here costs little next to attribution."""
    import logging

    from ..inputs.encoding import _default_max_length, encode_pair

    # transformers warns of a text longer than the model here; the skip report says it instead.
    quiet = logging.getLogger("transformers.tokenization_utils_base")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        pair = encode_pair(tokenizer, prompt, response, answer_format=answer_format, chat=chat)
    except (InputError, TokenizerError) as err:
        return Skip(str(err), "unscorable")
    finally:
        quiet.setLevel(level)
    limit = _default_max_length(tokenizer)
    if limit is not None and pair.length > limit:
        return Skip(f"{pair.length} tokens, more than the model's {limit}; shorten it", "too_long")
    if not pair.response_ids:
        return Skip("the response has no tokens; there is nothing to attribute", "empty_response")
    return None


def input_labels(record: dict, response: str, answer_format: str) -> dict:
    """What a line says about its response beside the text, carried into the output: `gold`
    (the line's `gold` or `answer`), `reward` (a number) and `correct` (the line's own bool, or
    else graded against the gold answer)."""
    from ..inputs.grading import grade

    labels = {}
    gold = record.get("gold", record.get("answer"))
    if isinstance(gold, (str, int, float)) and not isinstance(gold, bool):
        labels["gold"] = str(gold)
    reward = record.get("reward")
    if isinstance(reward, (int, float)) and not isinstance(reward, bool) and math.isfinite(reward):
        labels["reward"] = float(reward)
    if isinstance(record.get("correct"), bool):
        labels["correct"] = record["correct"]
    elif "gold" in labels:
        labels["correct"] = grade(response, labels["gold"], answer_format).correct
    return labels


def read_pairs(path: Path, tokenizer, answer_format: str, skip_line, counts: Counter,
               report=print, chat: bool | None = None) -> Iterator[tuple[int, object, str, dict]]:
    """(line number, prompt, response, labels) of the good lines of `path` for which
    `skip_line(n)` is false (`input_labels`); each bad one is reported (`report`, one line
    naming file and line) and counted."""
    for number, record in iter_jsonl(path):
        if skip_line(number):
            continue
        got = judge_record(record)
        if not isinstance(got, Skip):
            got = judge_tokens(tokenizer, *got, answer_format, chat) or got
        if isinstance(got, Skip):
            counts[got.kind] += 1
            report(f"{path}:{number}: skipped ({got.kind}): {got}")
            continue
        yield number, *got, input_labels(record, got[1], answer_format)


# The gating flags of `oar attribute`, one per ReshapeSettings field (the same names as
# attribute()'s keywords and OARConfig's oar_* fields).
GATING_FLAGS = ("tau", "beta", "w_min", "weighting", "rho", "granularity", "step_pool")


def attribute_settings(args) -> ReshapeSettings:
    """The `ReshapeSettings` of the command line's flags."""
    return ReshapeSettings(probe=args.probe, answer_format=args.answer_format,
                           max_batch_tokens=args.max_batch_tokens,
                           **{name: getattr(args, name) for name in GATING_FLAGS})


def command_record(args, **extra) -> dict:
    """The settings record of `oar attribute`'s flags, made before the model loads; equal to
    the record `attribute()` gives each trace of this command."""
    from ..attribution import analysis_params
    from ..records.settings_record import settings_record

    used = analysis_params(args.methods, method_params_from(args))
    return settings_record(attribute_settings(args), args.methods, used, model=args.model,
                           dtype=args.dtype, chat=args.chat, **extra)


def attribute_lines(model, tokenizer, pairs, output: outputs.Output, args, on_written=None) -> int:
    """Attribute `pairs` ((line, prompt, response, labels) tuples) in batches of `args.batch_size`,
    writing each batch to `output` as soon as it is done. Returns the number written;
    `on_written(k)` is called after each batch (a progress bar's update)."""
    from ..attribution import attribute

    written, batch = 0, []

    def flush() -> int:
        lines, prompts, responses, labels = zip(*batch)
        traces = attribute(model, tokenizer, list(prompts), list(responses), args.methods,
                           attribute_settings(args), batch_size=len(batch), chat=args.chat,
                           method_params=method_params_from(args))
        output.write([{"line": n, **t.to_dict(), **lab} for n, t, lab in zip(lines, traces, labels)])
        if on_written is not None:
            on_written(len(batch))
        return len(batch)

    for item in pairs:
        batch.append(item)
        if len(batch) >= args.batch_size:
            written, batch = written + flush(), []
    if batch:
        written += flush()
    return written


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


def open_output(args, lock: bool = True) -> outputs.Output:
    """The `--out` JsonlOutput or StoreOutput, checked, with the lines it already holds, and
    (with `lock`: every process but the ranks > 0 of a sharded run) its writer lock."""
    if str(args.out).endswith(".db"):
        config = command_record(args, input=str(args.input))
        return outputs.StoreOutput(args.out, f"attribute {args.input}", args.model, config, lock=lock,
                                   force_new=args.force_new_run)
    if args.force_new_run:
        raise InputError(f"--force-new-run starts a new run in a run store (*.db); --out {args.out} "
                         "is a JSONL, which holds one run's settings: pass a new --out")
    return outputs.JsonlOutput(args.out, command_record(args), lock=lock)


def _summary(out: str, written: int, flagged: int, resumed: int, counts: Counter) -> str:
    text = f"wrote {written} attributions to {out} ({flagged} flagged"
    if resumed:
        text += f", {resumed} lines already there"
    skipped = sum(counts.values())
    kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(counts.items()))
    return text + f"); {skipped} bad lines skipped" + (f" ({kinds})" if kinds else "")


def chat_choice(chat: bool | None, tokenizer) -> bool | None:
    """--chat/--no-chat, or when neither is given: plain-string prompts get the tokenizer's chat
    template when it has one, said once on stderr (and not once per line: the library's
    `PlainPromptWarning` is silenced)."""
    if chat is None and getattr(tokenizer, "chat_template", None) is not None:
        import warnings

        from ..inputs.encoding import PlainPromptWarning

        print("oar attribute: plain-string prompts get the model's chat template (as one user "
              "message); --no-chat scores them as plain text", file=sys.stderr)
        warnings.filterwarnings("ignore", category=PlainPromptWarning)
        return True
    return chat


def run(args: argparse.Namespace) -> int:
    if args.batch_size < 1:
        raise InputError(f"--batch-size must be at least 1, got {args.batch_size}")
    if (args.store is None) != (args.run is None):
        raise InputError("--store and --run go together: the run store and the run to attribute")
    if args.store is not None:
        from .attribute_store import attribute_stored

        return attribute_stored(args, chat_choice)
    if args.input is None or args.out is None:
        raise InputError("pass --input FILE.jsonl and --out (or --store S --run R to attribute "
                         "a stored run in place)")
    args.model = args.model or "arith-tiny"
    source = check_input(args.input)
    rank, world = _ranks()
    dist = _process_group(world)
    final = open_output(args, lock=rank == 0)  # every check of --out, before the model loads
    try:
        return _attribute_into(final, source, args, rank, world, dist)
    except KeyboardInterrupt:
        final.close(finish=False)  # every finished batch is kept; the lock is released
        raise outputs.interrupted(args.out, len(final.done)) from None
    except BaseException:
        final.close(finish=False)
        raise


def _attribute_into(final: outputs.Output, source: Path, args, rank: int, world: int, dist) -> int:
    from ..models import load_model

    done = final.done | outputs.parts_done(args.out)
    writer = final
    if world > 1:
        if rank != 0:
            final.close(finish=False)
        writer = outputs.JsonlOutput(outputs.part_path(args.out, rank, world), command_record(args))
    device = args.device
    if world > 1 and device == "cuda":
        device = f"cuda:{os.environ.get('LOCAL_RANK', rank)}"
    model, tokenizer = load_model(args.model, device=device, dtype=args.dtype)
    counts: Counter = Counter()
    flagged = Counter()

    def skip_line(number: int) -> bool:
        return number in done or (number - 1) % world != rank

    bar = progress_bar(source, skip_line, disable=args.no_progress or rank != 0)

    def report(line: str) -> None:  # a skipped line: counted, and printed above the bar
        bar.update(1)
        bar.write(line, file=sys.stderr)

    chat_choice(args.chat, tokenizer)  # said once; args.chat stays as given: it is in the record
    pairs = read_pairs(source, tokenizer, args.answer_format, skip_line, counts, report=report, chat=args.chat)
    with bar:
        written = attribute_lines(model, tokenizer, pairs, _Flagged(writer, flagged, bar), args)
    if dist is not None:
        writer.close()
        gathered = [None] * world
        dist.all_gather_object(gathered, (written, flagged["n"], dict(counts)))
        written = sum(g[0] for g in gathered)
        flagged["n"] = sum(g[1] for g in gathered)
        counts = sum((Counter(g[2]) for g in gathered), Counter())
    if rank == 0:
        outputs.merge_parts(final, args.out)
        final.close()
        if not written and not counts and not done:
            print(f"oar attribute: error: {args.input} has no line to attribute", file=sys.stderr)
        else:
            print(_summary(args.out, written, flagged["n"], len(done), counts), file=sys.stderr)
    if dist is not None:
        dist.destroy_process_group()
    return 2 if counts or not (written or done) else 0


class _Flagged:
    """An output that also counts the records that carry flags, and moves the progress bar
    (traces, and the scored positions so far)."""

    def __init__(self, output: outputs.Output, counter: Counter, bar=None):
        self.output, self.counter, self.done, self.bar = output, counter, output.done, bar
        self.positions = 0

    def write(self, records: list[dict]) -> None:
        self.output.write(records)
        self.counter["n"] += sum(bool(r.get("flags")) for r in records)
        if self.bar is not None:
            self.positions += sum(r["span_found"] * r["segments"].count("reasoning") for r in records)
            self.bar.update(len(records))
            self.bar.set_postfix(positions=self.positions)

    def close(self, finish: bool = True) -> None:
        self.output.close(finish)


def lines_to_read(path: Path, skip_line) -> int:
    """Non-blank lines of `path` this process reads (the progress bar's total), counted in
    pieces of at most 1 MiB so that an overlong line costs no memory."""
    total, number, blank = 0, 0, True
    with open(path, "rb") as handle:
        for piece in iter(lambda: handle.readline(1 << 20), b""):
            blank = blank and not piece.strip()
            if piece.endswith(b"\n"):
                number += 1
                total += not blank and not skip_line(number)
                blank = True
    if not blank:
        total += not skip_line(number + 1)
    return total


def progress_bar(path: Path, skip_line, disable: bool):
    """A progress bar over the traces of `path` (lines written or skipped)."""
    from tqdm.auto import tqdm

    total = None if disable else lines_to_read(path, skip_line)
    return tqdm(total=total, desc="attribute", unit="trace", disable=disable, file=sys.stderr)


def add_parser(sub) -> None:
    at = sub.add_parser("attribute", help="token importances of prompt/response pairs (JSONL in, JSONL out)")
    at.add_argument("--model", default=None,
                    help="bundled name or local checkpoint folder (default: arith-tiny; with "
                         "--store, the run's model)")
    at.add_argument("--input", default=None, help="JSONL with 'prompt' and 'response' per line")
    at.add_argument("--store", default=None,
                    help="a run store *.db whose run --run is attributed in place (an `oar import`ed "
                         "run, or one more method on any run); resumes after the traces done")
    at.add_argument("--run", type=int, default=None, help="the id of the run to attribute in --store")
    at.add_argument("--out", default=None,
                    help="JSONL to write (one attribution per valid line), or a run store *.db "
                         "to add a run to (readable by `oar web --store`); a rerun with the same "
                         "input and output resumes after the lines already written")
    at.add_argument("--methods", nargs="+", default=["oar_p", "oar_g"], type=method_name,
                    help="registered importance methods (oar_attrib.available_methods())")
    at.add_argument("--probe", default="as_mean", type=probe_name, help="outcome probe: lt, as_mean, as_joint")
    at.add_argument("--answer-format", default="auto", help="answer format: auto, boxed, gsm8k, answer_is")
    add_dataclass_args(at, ReshapeSettings, GATING_FLAGS)  # generated from ReshapeSettings: defaults and help text
    at.add_argument("--batch-size", type=int, default=16,
                    help="lines attributed (and then written) together; each record's `timings` is "
                         "its batch's seconds per trace (1: each trace timed on its own)")
    at.add_argument("--chat", action=argparse.BooleanOptionalAction, default=None,
                    help="wrap plain-string prompts in the model's chat template as one user message "
                         "(default: yes when the tokenizer has a chat template; chat-message "
                         "prompts always get it)")
    add_method_knobs(at)
    add_model_args(at)
    at.add_argument("--force-new-run", action="store_true",
                    help="--out *.db: start a new run even when the store holds this input's run "
                         "made with other settings (a JSONL holds one run: pass a new --out)")
    at.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    at.set_defaults(func=run)
