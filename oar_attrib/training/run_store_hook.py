"""Run store hook: every N steps, a sample of the generation batch goes to the run store.

Each record is a trace record (`oar_attrib.records.traces.build_trace`, the same as `attribute` makes)
as its dict, plus the training fields `reward`, `correct` (None: not known), `step`, `group`,
`extra` and, for arithmetic-world prompts, the structural `oracle` of the generated trace
(character spans per set): the records `oar_attrib.store.Store.add_records` takes. A path
ending in `.db` is a run store (one run per training, what the web app reads); any other path
is a JSON Lines file with one record per line (`Store.import_jsonl` loads it later).
"""
from __future__ import annotations

import json
from pathlib import Path

from oar_attrib.jsonl import LogOwner, append_jsonl
from oar_attrib.methods import method_spec
from oar_attrib.records.traces import build_trace

from .reshaping import TokenWeights

# A JSON Lines run store: one trace record a line (another file there is refused, left as it is).
RECORDS = LogOwner("a JSON Lines run store of oar train (one trace record a line)",
                   lambda v: isinstance(v, dict) and isinstance(v.get("params"), dict) and "step" in v)


def world_oracle(problem_json: str, text: str) -> dict:
    """Oracle character spans of a generated trace of a world problem, per oracle set."""
    from .data import problem_from_json

    oracle = problem_from_json(problem_json).oracle(text)
    return {"complete": oracle.complete, **oracle.span_lists()}


def trace_record(tw: TokenWeights, row: int, *, prompt, reward: float, advantage: float, step: int,
                 method: str, probe: str, params: dict | None = None, problem: str | None = None,
                 group: int | None = None) -> dict:
    """One completion of a generation batch as a run-store record."""
    pair = tw.pairs[row]
    n = len(pair.response_ids)
    flags = []
    if bool(tw.scored[row].any()) and not bool(tw.attributed[row]) and not method_spec(method).uniform:
        flags.append("not_attributed")
    trace = build_trace(pair, prompt, probe=probe, scores={method: tw.importances[row, :n]},
                        weights={method: tw.weights[row, :n]}, advantage=float(advantage),
                        params=params, timings={method: tw.seconds / max(len(tw.pairs), 1)},
                        flags=flags)
    record = {**trace.to_dict(), "reward": float(reward), "step": int(step), "group": group,
              "extra": {"method": method}}
    if problem is not None:
        record["oracle"] = world_oracle(problem, pair.text)
    return record


class RunStoreHook:
    """Writes a sample of each due generation batch to a run store (`.db`) or JSON Lines file."""

    def __init__(self, path: str | Path, every: int, samples: int = 4, group_size: int = 1,
                 run_name: str = "train", model: str = "", config: dict | None = None):
        self.path = Path(path)
        self.every = int(every)
        self.samples = int(samples)
        self.group_size = max(int(group_size), 1)
        self.run_name, self.model, self.config = run_name, model, dict(config or {})
        self.run_id: int | None = None  # the store's run, created at the first write

    @classmethod
    def from_config(cls, args, model: str = "", record: dict | None = None) -> "RunStoreHook":
        """The hook of an `OARConfig`; the run's config is the training's settings record
        (`OARConfig.settings_record`, made from `model` when not given)."""
        path = args.oar_store_path or str(Path(args.output_dir) / "runs.db")
        config = record if record is not None else args.settings_record(model or None)
        return cls(path, args.oar_store_every, args.oar_store_samples, args.num_generations,
                   Path(args.output_dir).name, model, config)

    def due(self, step: int) -> bool:
        return self.every > 0 and step % self.every == 0

    def write_batch(self, *, step: int, weights: TokenWeights, inputs: list[dict], rewards: list[float],
                    advantages: list[float], method: str, probe: str,
                    params: dict | None = None, correct: list | None = None) -> list[dict]:
        """Write the first `samples` completions (whole prompt groups, as TRL orders them);
        `correct` (bool or None per completion) is stored as each record's `correct`."""
        records = [
            trace_record(weights, row, prompt=inputs[row].get("prompt"), reward=rewards[row],
                         advantage=advantages[row], step=step, method=method, probe=probe,
                         params=params, problem=inputs[row].get("problem"),
                         group=row // self.group_size)
            for row in range(min(self.samples, len(inputs)))
        ]
        for row, record in enumerate(records):
            record["correct"] = None if correct is None else correct[row]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.suffix == ".db":
            self._write_store(records)
        else:
            append_jsonl(self.path, records, owner=RECORDS)
        return records

    def _write_store(self, records: list[dict]) -> None:
        from oar_attrib.store import Store

        with Store(self.path) as store:
            if self.run_id is None:
                self.run_id = store.add_run(self.run_name, model=self.model, config=self.config)
            store.add_records(self.run_id, records)


def read_store(path: str | Path) -> list[dict]:
    """Every record of a JSON Lines run store."""
    with Path(path).open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]

