"""`Store`: the run store's API (add and read runs, traces, attributions, summaries).

A Store is safe to share between threads: each thread gets its own SQLite connection. Writes
run in one `BEGIN IMMEDIATE` transaction per call, so a batch of traces is committed whole or
not at all; reads of one trace run in one transaction, so they see one consistent state while
a writer commits.
"""
from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator, Literal, Mapping, Sequence

from ..inputs.segments import n_scored
from ..jsonl import NotJSON, iter_jsonl
from . import codec, schema
from .errors import NotFoundError, StoreError
from .records import AttributionRecord, RunInfo, TraceRecord, TraceRow, json_safe, record_steps

TraceSort = Literal[schema.SORT_KEYS]  # type: ignore[valid-type]
_PREVIEW_CHARS = 120
UNKNOWN = object()  # an explicit "correctness not known" (add_records: a null `correct`)
_TRACE_COLUMNS = ("id, run_id, step, grp, reward, advantage, correct, answer_text, span_found, "
                  "n_tokens, n_scored, flags, substr(response, 1, {n})").format(n=_PREVIEW_CHARS)


def _opt_float(value) -> float | None:
    return None if value is None else float(value)


def _dumps(value) -> str:
    """Strict JSON text (NaN stored as null) of a config, params, flags or extra value."""
    return json.dumps(json_safe(value), allow_nan=False)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _as_dict(attribution) -> dict:
    """A `TraceAttribution` (or its `to_dict()`) as a dict."""
    if hasattr(attribution, "to_dict"):
        return attribution.to_dict()
    if isinstance(attribution, Mapping):
        return dict(attribution)
    raise StoreError(f"expected a TraceAttribution or its dict, got {type(attribution).__name__}")


def _oracle_sets(oracle) -> tuple[dict, bool | None]:
    """(set name -> spans, complete) of a `world.Oracle`, a dict of spans, or None."""
    if oracle is None:
        return {}, None
    if hasattr(oracle, "span_lists"):
        return oracle.span_lists(), bool(oracle.complete)
    sets = dict(oracle)
    complete = sets.pop("complete", None)
    return ({k: [list(s) for s in v] for k, v in sets.items()},
            None if complete is None else bool(complete))


def _row(values: tuple) -> TraceRow:
    (tid, run_id, step, grp, reward, adv, correct, answer, span, n_tok, n_sc, flags, prev) = values
    return TraceRow(
        id=tid, run_id=run_id, step=step, group=grp, reward=reward, advantage=adv,
        correct=None if correct is None else bool(correct), answer_text=answer,
        span_found=bool(span), n_tokens=n_tok, n_scored=n_sc, flags=json.loads(flags),
        preview=prev,
    )


def trace_page_sql(
    run_id: int, *, correct: bool | None = None, step: int | None = None,
    min_reward: float | None = None, max_reward: float | None = None,
    sort: TraceSort = "id", descending: bool = False,
) -> tuple[str, str, list]:
    """(count SQL, page SQL, args) of `Store.traces`; the page SQL takes args + [limit, offset].

    The order is `sort ASC|DESC, id ASC` (SQLite puts NULL first ascending, last descending),
    which is the order of the sort's index in `schema.SORT_INDEXES`.
    """
    if sort not in schema.SORT_KEYS:
        raise StoreError(f"cannot sort traces by {sort!r}; choose one of {sorted(schema.SORT_KEYS)}")
    # `+reward` when another key sorts: the unary plus keeps SQLite from picking the reward
    # index for the range (then sorting every match); the sort's own index carries reward.
    reward = "reward" if sort == "reward" else "+reward"
    clauses, args = ["run_id = ?"], [run_id]
    for sql, value in (("correct = ?", None if correct is None else int(correct)),
                       ("step = ?", step), (f"{reward} >= ?", min_reward),
                       (f"{reward} <= ?", max_reward)):
        if value is not None:
            clauses.append(sql)
            args.append(value)
    where = " AND ".join(clauses)
    direction = "DESC" if descending else "ASC"
    order = f"id {direction}" if sort == "id" else f"{sort} {direction}, id ASC"
    return (f"SELECT count(*) FROM traces WHERE {where}",
            f"SELECT {_TRACE_COLUMNS} FROM traces WHERE {where} ORDER BY {order} LIMIT ? OFFSET ?",
            args)


class Store:
    """A run store file. `Store(path)` opens (or creates) it for writing;
    `Store(path, readonly=True)` opens an existing store for reading only."""

    def __init__(self, path: str | Path, *, readonly: bool = False, timeout: float = 30.0):
        self.path = Path(path)
        self.readonly = readonly
        self.timeout = timeout
        self._local = threading.local()
        self._lock = threading.Lock()
        self._conns: list[sqlite3.Connection] = []
        self._conn()  # open now, so a bad path fails here and not on first use

    # ------------------------------------------------------------------ connections

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = schema.connect(self.path, readonly=self.readonly, timeout=self.timeout)
            self._local.conn = conn
            with self._lock:
                self._conns.append(conn)
        return conn

    @contextlib.contextmanager
    def _transaction(self, write: bool) -> Iterator[sqlite3.Connection]:
        if write and self.readonly:
            raise StoreError(f"{self.path} is open read-only; open it with Store(path) to write")
        conn = self._conn()
        try:
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:  # SQLite may have rolled back itself (a full disk)
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        except sqlite3.OperationalError as err:
            # A full disk or a read-only place: the batch is rolled back, the rest is kept.
            raise schema.explain(err, self.path) or err from None

    def close(self) -> None:
        """Close every connection this Store opened (in any thread)."""
        with self._lock:
            for conn in self._conns:
                conn.close()
            self._conns.clear()
        self._local = threading.local()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ writing

    def add_run(self, name: str, *, model: str = "", config: dict | None = None) -> int:
        """A new run; returns its id. `config` is any JSON-serialisable dict."""
        with self._transaction(write=True) as conn:
            cur = conn.execute(
                "INSERT INTO runs (name, model, config, created) VALUES (?, ?, ?, ?)",
                (name, str(model), _dumps(config or {}), _now()),
            )
            return int(cur.lastrowid)

    def update_run_config(self, run_id: int, **changes) -> dict:
        """Merge `changes` into a run's config; returns the new config."""
        with self._transaction(write=True) as conn:
            got = conn.execute("SELECT config FROM runs WHERE id = ?", (run_id,)).fetchone()
            if got is None:
                raise NotFoundError(f"no run with id {run_id} in {self.path.name}")
            config = {**json.loads(got[0]), **changes}
            conn.execute("UPDATE runs SET config = ? WHERE id = ?", (_dumps(config), run_id))
        return config

    def add_traces(
        self,
        run_id: int,
        attributions: Sequence,
        *,
        rewards: Sequence[float | None] | None = None,
        correct: Sequence[bool | None] | None = None,
        steps: Sequence[int | None] | None = None,
        groups: Sequence[int | None] | None = None,
        oracles: Sequence | None = None,
        extras: Sequence[dict] | None = None,
    ) -> list[int]:
        """Add traces (TraceAttribution results or their dicts) to a run, in ONE transaction.

        The optional sequences run parallel to `attributions`. `correct` defaults to
        reward > 0 where a reward is given. `oracles` holds `world.Oracle` objects or dicts of
        set name -> character spans. Returns the new trace ids.
        """
        n = len(attributions)
        cols = {"rewards": rewards, "correct": correct, "steps": steps, "groups": groups,
                "oracles": oracles, "extras": extras}
        for name, values in cols.items():
            if values is not None and len(values) != n:
                raise StoreError(f"{name} has {len(values)} entries for {n} attributions")
        pick = {k: (v if v is not None else [None] * n) for k, v in cols.items()}
        with self._transaction(write=True) as conn:
            self._require_run(conn, run_id)
            return [
                self._insert_trace(conn, run_id, _as_dict(a), pick["rewards"][i],
                                   pick["correct"][i], pick["steps"][i], pick["groups"][i],
                                   pick["oracles"][i], pick["extras"][i] or {})
                for i, a in enumerate(attributions)
            ]

    def add_trace(self, run_id: int, attribution, **fields) -> int:
        """Add one trace; `fields` are the singular forms of `add_traces`' sequences
        (reward, correct, step, group, oracle, extra)."""
        plural = {"reward": "rewards", "step": "steps", "group": "groups", "oracle": "oracles",
                  "extra": "extras", "correct": "correct"}
        unknown = set(fields) - set(plural)
        if unknown:
            raise StoreError(f"unknown trace fields {sorted(unknown)}; known: {sorted(plural)}")
        return self.add_traces(run_id, [attribution],
                               **{plural[k]: [v] for k, v in fields.items()})[0]

    def add_records(self, run_id: int, records: Sequence[Mapping]) -> list[int]:
        """Add trace records, each a `TraceAttribution.to_dict()` that may also carry the
        fields `reward`, `correct`, `step`, `group`, `oracle` (set name -> spans, and an
        optional `complete`) and `extra` (the training hook's JSON Lines format)."""
        records = list(records)
        fields = {"rewards": "reward", "steps": "step", "groups": "group",
                  "oracles": "oracle", "extras": "extra"}
        # A record whose `correct` is null says "not known": no reward > 0 guess for it.
        correct = [r["correct"] if r.get("correct") is not None else UNKNOWN if "correct" in r else None
                   for r in records]
        return self.add_traces(run_id, records, correct=correct,
                               **{arg: [r.get(key) for r in records] for arg, key in fields.items()})

    def import_jsonl(self, path: str | Path, *, name: str | None = None, model: str = "",
                     config: dict | None = None, batch: int = 256) -> int:
        """A new run holding every record of a JSON Lines file (see `add_records`), added
        `batch` records per transaction; returns the run id."""
        path = Path(path)
        run_id = self.add_run(name or path.stem, model=model,
                              config={"source": path.name, **(config or {})})
        pending: list[dict] = []
        for number, record in iter_jsonl(path):
            if isinstance(record, NotJSON):
                raise StoreError(f"{path.name}:{number} is not JSON ({record})")
            pending.append(record)
            if len(pending) >= batch:
                self.add_records(run_id, pending)
                pending = []
        if pending:
            self.add_records(run_id, pending)
        return run_id

    def _insert_trace(self, conn, run_id, d, reward, correct, step, group, oracle, extra) -> int:
        prompt = d["prompt"]
        if not isinstance(prompt, str):  # a chat message list
            prompt, extra = json.dumps(prompt), {**extra, "chat_prompt": True}
        # Plain Python numbers: sqlite3 cannot bind numpy or torch scalars.
        reward, advantage = _opt_float(reward), _opt_float(d.get("advantage"))
        step, group = (None if v is None else int(v) for v in (step, group))
        if correct is UNKNOWN:
            correct = None
        elif correct is None and reward is not None:
            correct = reward > 0
        segments, span_found = list(d["segments"]), bool(d["span_found"])
        scored = n_scored(segments, span_found)
        if d.get("steps"):  # step ranges ride in `extra` (no schema change); see _trace
            extra = {**extra, "steps": [list(r) for r in d["steps"]]}
        answer = d.get("answer_span")
        sets, complete = _oracle_sets(oracle)
        cur = conn.execute(
            "INSERT INTO traces (run_id, step, grp, prompt, response, reward, advantage, "
            "answer_text, correct, span_found, answer_start, answer_end, n_tokens, n_scored, "
            "probe, params, flags, oracle_complete, extra) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (run_id, step, group, prompt, d["response"], reward, advantage,
             d.get("answer_text"), None if correct is None else int(bool(correct)), int(span_found),
             None if answer is None else answer[0], None if answer is None else answer[1],
             len(d["token_ids"]), scored, d["probe"], _dumps(d.get("params") or {}),
             _dumps(list(d.get("flags") or [])), None if complete is None else int(complete),
             _dumps(extra)),
        )
        trace_id = int(cur.lastrowid)
        conn.execute(
            "INSERT INTO tokens (trace_id, ids, offsets, segments, texts) VALUES (?, ?, ?, ?, ?)",
            (trace_id, codec.pack_ints(d["token_ids"]), codec.pack_offsets(d["offsets"]),
             codec.pack_segments(segments), json.dumps(list(d["tokens"]))),
        )
        self._insert_attributions(conn, trace_id, d)
        conn.executemany(
            "INSERT INTO oracle (trace_id, name, spans) VALUES (?, ?, ?)",
            [(trace_id, name, json.dumps(spans)) for name, spans in sets.items()],
        )
        return trace_id

    def _insert_attributions(self, conn, trace_id: int, d: dict, methods=None) -> None:
        metrics, timings = d.get("metrics") or {}, d.get("timings") or {}
        adv = d.get("token_advantages") or {}
        rows = []
        for method in methods or d["scores"]:
            m = metrics.get(method) or {}
            rows.append((
                trace_id, method, d["probe"], codec.pack_floats(d["scores"][method]),
                codec.pack_floats(d["weights"][method]),
                codec.pack_floats(adv[method]) if method in adv else None,
                _opt_float(m.get("ess_ratio")), _opt_float(m.get("top10_mass")),
                _opt_float(timings.get(method)),
                None if m.get("draws") is None else int(m["draws"]), _opt_float(m.get("split_half")),
            ))
        conn.executemany(
            "INSERT OR REPLACE INTO attributions (trace_id, method, probe, scores, weights, "
            "token_advantages, ess_ratio, top10_mass, seconds, draws, split_half) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )

    def add_attributions(self, trace_id: int, attribution, methods: Sequence[str] | None = None) -> None:
        """Add (or replace) methods' results on a stored trace, e.g. a slow method run later.
        `attribution` must be of the same response (same token ids)."""
        d = _as_dict(attribution)
        with self._transaction(write=True) as conn:
            got = conn.execute("SELECT ids FROM tokens WHERE trace_id = ?", (trace_id,)).fetchone()
            if got is None:
                raise NotFoundError(f"no trace with id {trace_id}")
            if codec.unpack_ints(got[0]).tolist() != list(d["token_ids"]):
                raise StoreError(
                    f"the attribution's token ids differ from trace {trace_id}'s; attribute the "
                    "stored response (Store.trace(id).response) with the same tokenizer"
                )
            self._insert_attributions(conn, trace_id, d, methods)
            # An imported trace has no probe until its first attribution.
            conn.execute("UPDATE traces SET probe = ? WHERE id = ? AND probe = ''",
                         (d["probe"], trace_id))

    def add_token_stats(self, rows: Sequence[tuple[int, str, Sequence[float], Sequence[float]]]) -> None:
        """Add (or replace) the policy's per-token statistics of stored traces, in one
        transaction: (trace id, model name, (T,) log-probabilities, (T,) entropies in nats)
        rows, T the trace's response tokens (`analysis.token_stats`)."""
        with self._transaction(write=True) as conn:
            for trace_id, _, logprob, entropy in rows:
                got = conn.execute("SELECT n_tokens FROM traces WHERE id = ?", (trace_id,)).fetchone()
                if got is None:
                    raise NotFoundError(f"no trace with id {trace_id}")
                if not len(logprob) == len(entropy) == got[0]:
                    raise StoreError(f"trace {trace_id} has {got[0]} tokens, the statistics "
                                     f"{len(logprob)} log-probabilities and {len(entropy)} entropies")
            conn.executemany(
                "INSERT OR REPLACE INTO token_stats (trace_id, model, logprob, entropy) "
                "VALUES (?, ?, ?, ?)",
                [(int(t), str(m), codec.pack_floats(lp), codec.pack_floats(h)) for t, m, lp, h in rows])

    # ------------------------------------------------------------------ reading

    def _require_run(self, conn, run_id: int) -> None:
        if conn.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone() is None:
            raise NotFoundError(f"no run with id {run_id} in {self.path.name}")

    def runs(self) -> list[RunInfo]:
        """Every run, newest first."""
        with self._transaction(write=False) as conn:
            ids = [r[0] for r in conn.execute("SELECT id FROM runs ORDER BY id DESC")]
            return [self._run(conn, i) for i in ids]

    def run(self, run_id: int) -> RunInfo:
        with self._transaction(write=False) as conn:
            return self._run(conn, run_id)

    def _run(self, conn, run_id: int) -> RunInfo:
        got = conn.execute("SELECT id, name, model, config, created FROM runs WHERE id = ?",
                           (run_id,)).fetchone()
        if got is None:
            raise NotFoundError(f"no run with id {run_id} in {self.path.name}")
        n = conn.execute("SELECT count(*) FROM traces WHERE run_id = ?", (run_id,)).fetchone()[0]
        methods = [r[0] for r in conn.execute(
            "SELECT DISTINCT a.method FROM attributions a JOIN traces t ON t.id = a.trace_id "
            "WHERE t.run_id = ? ORDER BY a.method", (run_id,))]
        return RunInfo(id=got[0], name=got[1], model=got[2], config=json.loads(got[3]),
                       created=got[4], n_traces=n, methods=methods)

    def traces(
        self, run_id: int, *, correct: bool | None = None, step: int | None = None,
        min_reward: float | None = None, max_reward: float | None = None,
        sort: TraceSort = "id", descending: bool = False, limit: int = 100, offset: int = 0,
    ) -> tuple[list[TraceRow], int]:
        """A page of a run's traces, filtered and sorted (ties by id), and the number that match."""
        count_sql, page_sql, args = trace_page_sql(run_id, correct=correct, step=step,
                                                   min_reward=min_reward, max_reward=max_reward,
                                                   sort=sort, descending=descending)
        with self._transaction(write=False) as conn:
            self._require_run(conn, run_id)
            total = conn.execute(count_sql, args).fetchone()[0]
            rows = conn.execute(page_sql, [*args, int(limit), int(offset)]).fetchall()
        return [_row(r) for r in rows], int(total)

    def steps(self, run_id: int) -> list[int]:
        """The training steps that have traces in a run (empty outside training)."""
        with self._transaction(write=False) as conn:
            return [r[0] for r in conn.execute(
                "SELECT DISTINCT step FROM traces WHERE run_id = ? AND step IS NOT NULL "
                "ORDER BY step", (run_id,))]

    def trace_ids(self, run_id: int, *, missing: str | None = None,
                  missing_token_stats: bool = False) -> list[int]:
        """Ids of a run's traces in order; with `missing`, only those without that method; with
        `missing_token_stats`, only those without the policy's token statistics (both: both)."""
        sql, args = "SELECT id FROM traces WHERE run_id = ?", [run_id]
        if missing is not None:
            sql += " AND id NOT IN (SELECT trace_id FROM attributions WHERE method = ?)"
            args.append(missing)
        if missing_token_stats:
            sql += " AND id NOT IN (SELECT trace_id FROM token_stats)"
        with self._transaction(write=False) as conn:
            self._require_run(conn, run_id)
            return [r[0] for r in conn.execute(sql + " ORDER BY id", args)]

    def trace_extras(self, run_id: int, *keys: str) -> list[tuple]:
        """One tuple per trace of the run, in id order: the values its `extra` holds under
        `keys` (None where it has none), e.g. the input line or the source row an output or an
        import resumes after."""
        columns = ", ".join("json_extract(extra, ?)" for _ in keys)
        with self._transaction(write=False) as conn:
            self._require_run(conn, run_id)
            rows = conn.execute(f"SELECT {columns} FROM traces WHERE run_id = ? ORDER BY id",
                                [*(f"$.{json.dumps(k)}" for k in keys), run_id])
            return [tuple(r) for r in rows]

    def trace_size(self, trace_id: int) -> tuple[int, int]:
        """(tokens, characters of prompt and response) of one trace, without reading it."""
        with self._transaction(write=False) as conn:
            got = conn.execute("SELECT n_tokens, length(prompt) + length(response) FROM traces "
                               "WHERE id = ?", (trace_id,)).fetchone()
        if got is None:
            raise NotFoundError(f"no trace with id {trace_id} in {self.path.name}")
        return int(got[0]), int(got[1])

    def trace(self, trace_id: int) -> TraceRecord:
        """Every stored detail of one trace."""
        with self._transaction(write=False) as conn:
            return self._trace(conn, trace_id)

    def _trace(self, conn, trace_id: int) -> TraceRecord:
        got = conn.execute(
            f"SELECT {_TRACE_COLUMNS}, prompt, response, answer_start, answer_end, probe, params, "
            "extra, oracle_complete FROM traces WHERE id = ?", (trace_id,)).fetchone()
        if got is None:
            raise NotFoundError(f"no trace with id {trace_id} in {self.path.name}")
        row = _row(got[:13])
        prompt, response, a_start, a_end, probe, params, extra, complete = got[13:]
        ids, offsets, segments, texts = conn.execute(
            "SELECT ids, offsets, segments, texts FROM tokens WHERE trace_id = ?", (trace_id,)
        ).fetchone()
        extra, offsets = json.loads(extra), codec.unpack_offsets(offsets)
        segments = codec.unpack_segments(segments)
        record = TraceRecord(
            row=row, prompt=prompt, response=response, token_ids=codec.unpack_ints(ids).tolist(),
            tokens=json.loads(texts), offsets=offsets, segments=segments,
            answer_span=None if a_start is None else (a_start, a_end), probe=probe,
            params=json.loads(params), extra=extra,
            oracle_complete=None if complete is None else bool(complete),
            steps=record_steps(extra.pop("steps", None), response, offsets, segments,
                               row.span_found),
        )
        # A read-only open of a store older than v3 has no draw columns: read them as NULL.
        draw_columns = ("draws, split_half" if schema.has_column(conn, "attributions", "draws")
                        else "NULL, NULL")
        for (method, a_probe, scores, weights, adv, ess, top, sec, draws, half) in conn.execute(
            "SELECT method, probe, scores, weights, token_advantages, ess_ratio, top10_mass, "
            f"seconds, {draw_columns} FROM attributions WHERE trace_id = ? ORDER BY method",
            (trace_id,)):
            record.attributions[method] = AttributionRecord(
                method, a_probe, codec.unpack_floats(scores), codec.unpack_floats(weights),
                codec.unpack_floats(adv), ess, top, sec, draws, half)
        for name, spans in conn.execute(
            "SELECT name, spans FROM oracle WHERE trace_id = ? ORDER BY name", (trace_id,)):
            record.oracle[name] = [tuple(s) for s in json.loads(spans)]
        if schema.has_table(conn, "token_stats"):  # a read-only v1 store has none
            got = conn.execute("SELECT logprob, entropy FROM token_stats WHERE trace_id = ?",
                               (trace_id,)).fetchone()
            if got is not None:
                record.token_stats = {"logprob": codec.unpack_floats(got[0]),
                                      "entropy": codec.unpack_floats(got[1])}
        return record

    def iter_traces(self, run_id: int, batch: int = 64) -> Iterator[TraceRecord]:
        """Every trace of a run in id order, read `batch` at a time (each batch one snapshot)."""
        ids = self.trace_ids(run_id)
        for start in range(0, len(ids), batch):
            with self._transaction(write=False) as conn:
                records = [self._trace(conn, i) for i in ids[start:start + batch]]
            yield from records

    # ------------------------------------------------------------------ summaries and frames

    def write_summary(self, run_id: int, *, recall: Sequence[tuple], agreement: Sequence[tuple],
                      n_traces: int, n_used: int, skipped: Mapping[str, int], n_boot: int) -> None:
        """Replace a run's stored summaries, in one transaction (computed by
        `oar_attrib.analysis.run_summary.summarise`).

        recall: (subset, oracle set, method, recall, lo, hi, ap, n) rows; agreement:
        (method_a, method_b, mean Spearman, n) rows; n_traces: the run's traces when computed
        (later additions make the summary stale); n_used: those recall used; skipped: reason ->
        count of the others.
        """
        with self._transaction(write=True) as conn:
            self._require_run(conn, run_id)
            for table in ("recall", "agreement", "summaries"):
                conn.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
            conn.executemany(
                "INSERT INTO recall (run_id, subset, oracle, method, mean, lo, hi, ap, n) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", [(run_id, *r) for r in recall])
            conn.executemany(
                "INSERT INTO agreement (run_id, method_a, method_b, spearman, n) VALUES (?, ?, ?, ?, ?)",
                [(run_id, *r) for r in agreement])
            conn.execute(
                "INSERT INTO summaries (run_id, created, n_traces, n_used, skipped, n_boot) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (run_id, _now(), int(n_traces), int(n_used), json.dumps(dict(skipped)), int(n_boot)))

    def query(self, sql: str, args: Sequence = (), *, run_id: int | None = None
              ) -> tuple[list[str], list[tuple]]:
        """Column names and rows of a read-only SQL query (for the store's own summaries and
        frames); with `run_id`, first checks that the run exists (NotFoundError)."""
        if not sql.lstrip().upper().startswith("SELECT"):
            raise StoreError(f"Store.query runs SELECT statements only, got {sql[:40]!r}")
        with self._transaction(write=False) as conn:
            if run_id is not None:
                self._require_run(conn, run_id)
            cur = conn.execute(sql, list(args))
            return [c[0] for c in cur.description or ()], cur.fetchall()

    def report(self, run_id: int) -> dict:
        """The run's stored summaries and live credit metrics (see `summaries.read`)."""
        from . import summaries

        return summaries.read(self, run_id)

    def frame(self, kind: str = "traces", *, run_id: int | None = None, trace_ids=None):
        """A pandas DataFrame: kind traces | attributions | tokens | recall (see `frames.frame`)."""
        from . import frames

        return frames.frame(self, kind, run_id=run_id, trace_ids=trace_ids)
