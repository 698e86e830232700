"""The progress of `oar attribute` (a JSONL input or a stored run): before the first trace, what
it will do and how long it will take (`tell_cost`); then a bar that counts traces, with a time
estimate, and moves by 1/M of a trace as each of M methods is done with it, so a real model's
first minute shows progress."""
from __future__ import annotations

import sys
from pathlib import Path


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


# Fractions of a trace (a method done with it) shown to one decimal; tqdm's own format otherwise.
BAR_FORMAT = ("{desc}: {percentage:3.0f}%|{bar}| {n:.1f}/{total_fmt} traces "
              "[{elapsed}<{remaining}, {rate_fmt}{postfix}]")


def progress_bar(path: Path, skip_line, disable: bool):
    """A `trace_bar` over the traces of `path` (lines written or skipped)."""
    return trace_bar(None if disable else lines_to_read(path, skip_line), disable)


def trace_bar(total: int | None, disable: bool):
    """A progress bar over `total` traces, with a time estimate; it moves by 1/M of a trace as
    each of M methods is done with it (`method_progress`), so a real model's first minute shows
    progress. `n_written`: the traces written or skipped, whole."""
    from tqdm.auto import tqdm

    bar = tqdm(total=total, desc="attribute", unit="trace", disable=disable, file=sys.stderr,
               bar_format=BAR_FORMAT if total is not None else None)
    bar.n_written = 0
    return bar


def method_progress(bar, n_methods: int):
    """`attribute`'s `on_scored(method, rows)` moving `bar` by rows / n_methods traces, never
    past the traces of the batch (they are counted whole when written)."""
    def on_scored(method: str, rows: int) -> None:
        bar.update(rows / max(n_methods, 1))

    return on_scored


def tell_cost(model, pair, flags, traces: int, tell=None, extra_forward: bool = False) -> None:
    """Say (`tell`, default `console.say`) what `oar attribute` will do and how long it will take
    (`methods.cost`: the work of `flags.methods` on `pair`, the first trace, at this machine's
    measured speed), naming the reading set when it is at most half as long and a trace takes
    over a minute. `extra_forward`: `--store`'s token statistics, one forward more a trace."""
    from ..console import say
    from ..defaults import DEFAULT_MODEL
    from ..methods import default_methods
    from ..methods.cost import TraceShape, attribution_estimate, estimate_lines
    from ..models.cost import measure_speed

    params = flags.method_params
    speed = measure_speed(model, TraceShape.of(pair).length)
    estimate = attribution_estimate(model, pair, flags.methods, params, traces, speed, extra_forward)
    faster = None if set(flags.methods) <= set(default_methods("reading")) else attribution_estimate(
        model, pair, default_methods("reading"), params, traces, speed, extra_forward)
    for line in estimate_lines("oar attribute", estimate, flags.model or DEFAULT_MODEL, faster):
        (tell or say)(line)
