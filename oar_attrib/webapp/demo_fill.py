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
from dataclasses import asdict
from pathlib import Path

from .demo import (DEFERRED_METHODS, DemoConfig, complete_pending, demo_complete, prepare_demo_store,
                   sample_world, write_problem_run)
from .progress import Progress

WORLD_RUN = "arith-tiny: arithmetic world (with the oracle)"
WORLD_STAGE = "arithmetic world"


def _run_named(store, name: str):
    return next((r for r in store.runs() if r.name == name), None)


def fill_world(store, config: DemoConfig, status: Progress, *, model=None, stop=None,
               progress: bool = False) -> bool:
    """The world run: sampled responses of `config.model`, attributed two groups at a time,
    then the deferred methods; True when the run is complete."""
    from ..models import load_model

    run = _run_named(store, WORLD_RUN)
    if run is not None and run.config.get("complete"):
        status.stage(WORLD_STAGE, state="done")
        return True
    status.stage(WORLD_STAGE, state="running", note="sampling answers")
    model, tokenizer = model if model is not None else load_model(config.model, dtype=config.dtype)
    owners, texts = sample_world(model, tokenizer, config, progress=progress)
    status.stage(WORLD_STAGE, total=len(texts), note="")
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


def fill_demo_store(path: str | Path, config: DemoConfig = DemoConfig(), *, model=None,
                    stop=None, progress: bool = False) -> bool:
    """Fill (or go on filling) the demo store at `path`; True when every stage has ended."""
    from ..store import Store

    status = Progress.of_store(path).read()
    status.stage(WORLD_STAGE)
    with Store(path) as store:
        return fill_world(store, config, status, model=model, stop=stop, progress=progress)


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
        Progress.of_store(path).read().stage(WORLD_STAGE, state="failed", note=str(err).splitlines()[0])
        print(f"oar demo: filling the store failed ({err}); the app serves what is stored; "
              "`oar demo --rebuild` starts over", file=sys.stderr)
        return 1
    if done:
        print("oar demo: the demo store is complete; reload a page to see every run", file=sys.stderr)
    return 0 if done else 1


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
