"""pandas views of a store, for notebooks: traces, per-method attribution metrics, tokens,
and the stored recall summaries."""
from __future__ import annotations

from typing import Literal

import pandas as pd

FrameKind = Literal["traces", "attributions", "tokens", "recall"]

_TRACES_SQL = (
    "SELECT t.id AS trace_id, t.run_id, r.name AS run, t.step, t.grp AS \"group\", t.reward, "
    "t.advantage, t.correct, t.answer_text, t.span_found, t.n_tokens, t.n_scored, t.probe, "
    "t.oracle_complete FROM traces t JOIN runs r ON r.id = t.run_id"
)
_ATTRIBUTIONS_SQL = (
    "SELECT a.trace_id, t.run_id, a.method, a.probe, a.ess_ratio, a.top10_mass, a.seconds, "
    "t.correct FROM attributions a JOIN traces t ON t.id = a.trace_id"
)
_RECALL_SQL = "SELECT run_id, subset, oracle, method, mean AS recall, lo, hi, ap, n FROM recall"


def _sql_frame(store, sql: str, run_id: int | None, column: str) -> pd.DataFrame:
    args: list = []
    if run_id is not None:
        sql += f" WHERE {column} = ?"
        args.append(run_id)
    names, rows = store.query(sql, args, run_id=run_id)
    frame = pd.DataFrame(rows, columns=names)
    for col in ("correct", "span_found", "oracle_complete"):
        if col in frame:
            frame[col] = frame[col].map(lambda v: None if v is None else bool(v)).astype("boolean")
    return frame


def _tokens(store, run_id: int | None, trace_ids) -> pd.DataFrame:
    if trace_ids is None:
        runs = [run_id] if run_id is not None else [r.id for r in store.runs()]
        records = (rec for rid in runs for rec in store.iter_traces(rid))
    else:
        records = (store.trace(int(i)) for i in trace_ids)
    frames = []
    for rec in records:
        f = rec.to_attribution().to_frame()
        f.insert(0, "trace_id", rec.id)
        f.insert(1, "run_id", rec.row.run_id)
        for name in rec.oracle:
            f[f"oracle_{name}"] = rec.oracle_mask(name)
        frames.append(f)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _token_rows(rec, columns: list[str]) -> pd.DataFrame:
    """One trace's token table with the run's fixed `columns` (absent methods: NaN)."""
    f = rec.to_attribution().to_frame()
    for name, col in (("trace_id", rec.id), ("run_id", rec.row.run_id), ("step", rec.row.step),
                      ("group", rec.row.group), ("reward", rec.row.reward),
                      ("advantage", rec.row.advantage), ("correct", rec.row.correct)):
        f[name] = col
    for name, values in rec.token_stats.items():
        f[name] = values
    return f.reindex(columns=columns)


def write_tokens_parquet(store, run_id: int, path, batch: int = 64) -> int:
    """Write a run's token table (the `tokens` frame's columns, the trace's step, group,
    reward, advantage and correct, and the policy's `logprob` and `entropy` when stored) to a
    parquet file, `batch` traces per row group, one trace in memory at a time; returns the
    number of rows. Needs pyarrow."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    methods = store.run(run_id).methods
    columns = ["trace_id", "run_id", "step", "group", "reward", "advantage", "correct",
               "position", "token_id", "token", "start", "end", "segment", "scored",
               *[f"{kind}_{m}" for m in methods for kind in ("score", "weight", "advantage")],
               "logprob", "entropy"]
    types = {"trace_id": pa.int64(), "run_id": pa.int64(), "step": pa.int64(), "group": pa.int64(),
             "correct": pa.bool_(), "position": pa.int64(), "token_id": pa.int64(),
             "token": pa.string(), "start": pa.int64(), "end": pa.int64(), "segment": pa.string(),
             "scored": pa.bool_()}
    schema = pa.schema([(c, types.get(c, pa.float64())) for c in columns])
    rows, pending = 0, []
    with pq.ParquetWriter(path, schema) as writer:
        def flush() -> None:
            if pending:
                frame = pd.concat(pending, ignore_index=True)
                writer.write_table(pa.Table.from_pandas(frame, schema=schema, preserve_index=False))
                pending.clear()

        for rec in store.iter_traces(run_id):
            pending.append(_token_rows(rec, columns))
            rows += len(pending[-1])
            if len(pending) >= batch:
                flush()
        flush()
    return rows


def frame(store, kind: FrameKind = "traces", *, run_id: int | None = None,
          trace_ids=None) -> pd.DataFrame:
    """A DataFrame of the store (one run with `run_id`, else all runs).

    traces: one row per trace. attributions: one row per trace and method (ESS ratio,
    top-10% mass, seconds). tokens: one row per response token of each trace (of `trace_ids`
    when given), with score_/weight_/advantage_<method> and oracle_<set> columns.
    recall: the stored recall summaries.
    """
    if kind == "traces":
        return _sql_frame(store, _TRACES_SQL, run_id, "t.run_id")
    if kind == "attributions":
        return _sql_frame(store, _ATTRIBUTIONS_SQL, run_id, "t.run_id")
    if kind == "recall":
        return _sql_frame(store, _RECALL_SQL, run_id, "run_id")
    if kind == "tokens":
        return _tokens(store, run_id, trace_ids)
    from .errors import StoreError

    raise StoreError(f"unknown frame kind {kind!r}; choose traces, attributions, tokens or recall")
