"""The run store: round trips, filters, summaries, frames, schema checks, crash safety and a
reader working while a writer writes.

The helpers `tiny_world` and `tiny_traces` build a random 2-layer model, a world tokenizer and
attributed traces in code; the web app tests import them.
"""
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

from oar_attrib.attribution import attribute
from oar_attrib.instruments.world.recall import EXPECTED, trace_recall
from oar_attrib.instruments.world.recall import summarise as summarise_recall
from oar_attrib.inputs.spans import SEGMENT_LABELS
from oar_attrib.store import (
    SCHEMA_VERSION,
    NotFoundError,
    SchemaVersionError,
    Store,
    StoreError,
)
from oar_attrib.store import codec
from oar_attrib.analysis.agreement import spearman
from oar_attrib.analysis.run_summary import summarise
from models import tiny_world, wrong_solution

METHODS = ["entropy", "oar_p", "random"]


def tiny_traces(problems, tokenizer, model, methods=METHODS):
    """Right and wrong responses (one pair per problem) attributed with advantages +1 / -1,
    their problems, rewards and oracles."""
    owners = [p for p in problems for _ in (0, 1)]
    texts = [t for p in problems for t in (p.solution, wrong_solution(p))]
    rewards = [p.reward(t) for p, t in zip(owners, texts)]
    traces = attribute(model, tokenizer, [p.prompt for p in owners], texts, methods,
                       advantages=[1.0 if r else -1.0 for r in rewards], batch_size=8)
    oracles = [p.oracle(t) for p, t in zip(owners, texts)]
    return traces, owners, rewards, oracles


@pytest.fixture(scope="module")
def world():
    return tiny_world()


@pytest.fixture(scope="module")
def attributed(world):
    problems, tokenizer, model = world
    return tiny_traces(problems[:4], tokenizer, model)


@pytest.fixture()
def filled(tmp_path, attributed):
    """A store with one run of 8 traces at steps 0, 0, 1, 1, ... and its run id."""
    traces, _, rewards, oracles = attributed
    store = Store(tmp_path / "runs.db")
    run = store.add_run("unit", model="tiny", config={"lr": 1e-3, "methods": METHODS})
    store.add_traces(run, traces, rewards=rewards, oracles=oracles,
                     steps=[i // 2 for i in range(len(traces))],
                     groups=[i // 2 for i in range(len(traces))])
    yield store, run
    store.close()


# --------------------------------------------------------------------------- round trips


def test_a_stored_trace_reads_back_as_the_attribution(filled, attributed):
    store, run = filled
    traces, _, rewards, oracles = attributed
    ids = store.trace_ids(run)
    assert len(ids) == len(traces)
    for trace_id, original, reward, oracle in zip(ids, traces, rewards, oracles):
        record = store.trace(trace_id)
        back = record.to_attribution().to_dict()
        want = original.to_dict()
        for key in ("prompt", "response", "token_ids", "tokens", "segments", "span_found",
                    "answer_text", "probe", "params", "flags", "advantage"):
            assert back[key] == want[key], key
        assert back["offsets"] == [tuple(o) for o in want["offsets"]]
        assert back["answer_span"] == tuple(want["answer_span"])
        for field in ("scores", "weights", "token_advantages"):
            assert set(back[field]) == set(want[field]) == set(METHODS)
            for method in METHODS:
                # Stored as float32: equal to the float32 rounding of the original.
                np.testing.assert_array_equal(np.float32(back[field][method]),
                                              np.float32(want[field][method]))
        for method in METHODS:
            assert back["metrics"][method]["ess_ratio"] == pytest.approx(
                want["metrics"][method]["ess_ratio"])
        assert record.row.reward == reward and record.row.correct == (reward == 1.0)
        assert record.oracle == {k: list(v) for k, v in oracle.sets().items()}
        assert record.oracle_complete == oracle.complete


def test_runs_list_their_traces_methods_and_config(filled):
    store, run = filled
    second = store.add_run("empty")
    runs = store.runs()
    assert [r.id for r in runs] == [second, run]  # newest first
    info = store.run(run)
    assert info.name == "unit" and info.model == "tiny" and info.n_traces == 8
    assert info.methods == METHODS and info.config == {"lr": 1e-3, "methods": METHODS}
    assert store.run(second).n_traces == 0 and store.run(second).methods == []


def test_trace_filters_sort_and_paging(filled):
    store, run = filled
    rows, total = store.traces(run)
    assert total == 8 and [r.id for r in rows] == sorted(r.id for r in rows)
    right, n_right = store.traces(run, correct=True)
    wrong, n_wrong = store.traces(run, correct=False)
    assert n_right == n_wrong == 4
    assert all(r.correct and r.reward == 1.0 for r in right)
    assert all(r.correct is False and r.reward == 0.0 for r in wrong)
    at_step, n_step = store.traces(run, step=1)
    assert n_step == 2 and {r.step for r in at_step} == {1}
    assert store.traces(run, min_reward=0.5)[1] == 4
    assert store.traces(run, max_reward=0.5)[1] == 4
    by_adv, _ = store.traces(run, sort="advantage", descending=True)
    advantages = [r.advantage for r in by_adv]
    assert advantages == sorted(advantages, reverse=True)
    page, total = store.traces(run, limit=3, offset=6)
    assert total == 8 and len(page) == 2
    assert store.steps(run) == [0, 1, 2, 3]
    with pytest.raises(StoreError, match="cannot sort traces by"):
        store.traces(run, sort="prompt; DROP TABLE runs")


def test_unknown_ids_raise_not_found_and_a_failed_batch_writes_nothing(filled, attributed):
    store, run = filled
    with pytest.raises(NotFoundError, match="no trace with id 999"):
        store.trace(999)
    with pytest.raises(NotFoundError, match="no run with id 77"):
        store.run(77)
    with pytest.raises(NotFoundError):
        store.traces(77)
    with pytest.raises(NotFoundError):
        store.add_traces(77, attributed[0][:2])
    broken = attributed[0][0].to_dict()
    broken["segments"] = ["nonsense"] * len(broken["segments"])
    with pytest.raises(ValueError, match="unknown segment label"):
        store.add_traces(run, [attributed[0][1], broken])
    assert store.run(run).n_traces == 8  # the good first trace was rolled back with it


def test_add_attributions_adds_a_method_to_a_stored_trace(filled, world, attributed):
    store, run = filled
    problems, tokenizer, model = world
    trace_id = store.trace_ids(run)[0]
    record = store.trace(trace_id)
    later = attribute(model, tokenizer, [record.prompt], [record.response], ["grail"])[0]
    store.add_attributions(trace_id, later)
    assert set(store.trace(trace_id).attributions) == {*METHODS, "grail"}
    other = attributed[0][2]  # another response: its token ids differ
    with pytest.raises(StoreError, match="token ids differ"):
        store.add_attributions(trace_id, other)


def test_trace_extras_and_the_traces_a_resume_still_needs(tmp_path, attributed):
    """The reads `oar attribute` and `oar import` resume with, as Store methods (no SQL
    outside the store): extra values per trace in id order, and the traces that lack a
    method or the policy's token statistics."""
    traces = attributed[0][:3]
    with Store(tmp_path / "runs.db") as store:
        run = store.add_run("extras")
        ids = store.add_traces(run, traces, extras=[{"line": 7, "source": "a.jsonl"}, {"line": 3},
                                                    {"weird.key": 1}])
        assert store.trace_extras(run, "line", "source") == [(7, "a.jsonl"), (3, None), (None, None)]
        assert store.trace_extras(run, "weird.key") == [(None,), (None,), (1,)]
        assert store.trace_ids(run, missing_token_stats=True) == ids
        n = len(traces[1].token_ids)
        store.add_token_stats([(ids[1], "tiny", [0.0] * n, [1.0] * n)])
        assert store.trace_ids(run, missing_token_stats=True) == [ids[0], ids[2]]
        assert store.trace_ids(run, missing="grail", missing_token_stats=True) == [ids[0], ids[2]]
        assert store.trace_ids(run, missing=METHODS[0]) == []
        with pytest.raises(NotFoundError):
            store.trace_extras(run + 1, "line")


def test_records_in_the_training_hook_format_import(tmp_path, attributed):
    traces, _, rewards, oracles = attributed
    lines = []
    for trace, reward, oracle in zip(traces, rewards, oracles):
        sets = {k: [list(s) for s in v] for k, v in oracle.sets().items()}
        lines.append(json.dumps({**trace.to_dict(), "reward": reward, "step": 5, "method": "oar_p",
                                 "oracle": {"complete": oracle.complete, **sets}}))
    path = tmp_path / "traces.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with Store(tmp_path / "imported.db") as store:
        run = store.import_jsonl(path, batch=3)
        assert store.run(run).name == "traces" and store.run(run).n_traces == len(traces)
        record = store.trace(store.trace_ids(run)[0])
        assert record.row.step == 5 and record.oracle_complete is True
        assert record.oracle["direct"] == [tuple(s) for s in oracles[0].direct]


# --------------------------------------------------------------------------- file and schema


def test_a_new_store_is_wal_and_versioned(tmp_path):
    Store(tmp_path / "s.db").close()
    conn = sqlite3.connect(tmp_path / "s.db")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    conn.close()


def test_bad_files_are_refused_with_clear_errors(tmp_path):
    with pytest.raises(StoreError, match="no store at"):
        Store(tmp_path / "missing.db", readonly=True)
    (tmp_path / "text.db").write_text("not a database, just text " * 100)
    with pytest.raises(StoreError, match="not a readable SQLite store"):
        Store(tmp_path / "text.db")
    other = sqlite3.connect(tmp_path / "other.db")
    other.execute("CREATE TABLE t (x)")
    other.commit()
    other.close()
    with pytest.raises(SchemaVersionError, match="not written by oar-attrib"):
        Store(tmp_path / "other.db")
    Store(tmp_path / "new.db").close()
    conn = sqlite3.connect(tmp_path / "new.db")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(SchemaVersionError, match="newer than this oar-attrib"):
        Store(tmp_path / "new.db", readonly=True)


def test_a_read_only_store_refuses_writes(filled):
    store, run = filled
    reader = Store(store.path, readonly=True)
    assert reader.run(run).n_traces == 8
    with pytest.raises(StoreError, match="read-only"):
        reader.add_run("nope")
    reader.close()


# --------------------------------------------------------------------------- codec


def test_segment_codes_follow_the_spans_module():
    assert codec.SEGMENT_LABELS == SEGMENT_LABELS
    labels = list(SEGMENT_LABELS) * 3
    assert codec.unpack_segments(codec.pack_segments(labels)) == labels


def test_float_blobs_keep_nan_and_float32_values():
    values = [0.0, 1.5, float("nan"), 1e-8, -2.25]
    back = codec.unpack_floats(codec.pack_floats(values))
    np.testing.assert_array_equal(back, np.float32(values))
    assert codec.unpack_offsets(codec.pack_offsets([(0, 2), (2, 5)])) == [(0, 2), (2, 5)]
    assert codec.unpack_offsets(codec.pack_offsets([])) == []


# --------------------------------------------------------------------------- summaries


def test_spearman_known_values():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # ties take their average rank: ranks (1.5, 1.5, 3) and (1, 2, 3)
    assert spearman([1, 1, 2], [1, 2, 3]) == pytest.approx(0.8660254)
    assert np.isnan(spearman([1, 1, 1], [1, 2, 3]))


def test_recall_summaries_equal_the_recall_module_on_the_same_traces(filled, attributed):
    store, run = filled
    traces, _, rewards, oracles = attributed
    report = summarise(store, run, seed=0)
    per_trace = [trace_recall(t, o) for t, o in zip(traces, oracles)]
    want, floor = summarise_recall(per_trace, METHODS, seed=0)
    got = {(r["oracle"], r["method"]): r for r in report["recall"] if r["subset"] == "all"}
    for method in METHODS:
        for name in ("direct", "chain"):
            row, ref = got[(name, method)], want[method][name]
            assert row["recall"] == pytest.approx(ref["recall"], rel=1e-5)
            assert row["ci95"] == pytest.approx(ref["ci95"], rel=1e-5)
            assert row["ap"] == pytest.approx(ref["ap"], rel=1e-5) and row["n"] == ref["n"] == 8
    for name in ("direct", "chain"):
        assert got[(name, EXPECTED)]["recall"] == pytest.approx(floor[name]["recall"])
    right = [r for r in report["recall"] if r["subset"] == "correct"]
    assert right and all(r["n"] == 4 for r in right)
    assert report["summary"]["n_used"] == 8 and report["summary"]["stale"] is False


def test_agreement_is_a_symmetric_matrix_with_unit_diagonal(filled):
    store, run = filled
    agreement = summarise(store, run)["agreement"]
    assert agreement["methods"] == METHODS
    m = np.array(agreement["spearman"], dtype=float)
    np.testing.assert_allclose(np.diag(m), 1.0)
    np.testing.assert_allclose(m, m.T)
    assert np.all(np.abs(m) <= 1.0)


def test_credit_metrics_average_the_stored_ones_and_summaries_go_stale(filled, attributed):
    store, run = filled
    report = summarise(store, run)
    traces = attributed[0]
    credit = {c["method"]: c for c in report["credit"]}
    for method in METHODS:
        want = np.mean([t.metrics[method]["ess_ratio"] for t in traces])
        assert credit[method]["ess_ratio"] == pytest.approx(want, rel=1e-6)
        assert credit[method]["n"] == len(traces)
    store.add_traces(run, traces[:1])
    assert store.report(run)["summary"]["stale"] is True


def test_frames(filled):
    store, run = filled
    traces = store.frame("traces", run_id=run)
    assert len(traces) == 8 and traces["correct"].sum() == 4
    per_method = store.frame("attributions", run_id=run)
    assert len(per_method) == 8 * len(METHODS)
    tokens = store.frame("tokens", run_id=run)
    n_tokens = sum(store.trace(i).row.n_tokens for i in store.trace_ids(run))
    assert len(tokens) == n_tokens
    for column in ("score_oar_p", "weight_entropy", "advantage_random", "oracle_direct", "scored"):
        assert column in tokens
    summarise(store, run)
    assert set(store.frame("recall", run_id=run)["subset"]) == {"all", "correct", "wrong"}
    with pytest.raises(StoreError, match="unknown frame kind"):
        store.frame("nope")


# --------------------------------------------------------------------------- concurrency


_WRITER = textwrap.dedent("""
    import json, sys
    from oar_attrib.store import Store
    records = json.load(open(sys.argv[2]))
    store = Store(sys.argv[1])
    run = store.add_run("writer")
    print("run", run, flush=True)
    for batch in range(10_000):
        ids = store.add_traces(run, records, rewards=[1.0] * len(records))
        print("committed", *ids, flush=True)
""")


def _check_consistent(reader: Store, run: int, n_methods: int) -> int:
    """Every trace a reader lists is complete: tokens, and every method's arrays."""
    rows, total = reader.traces(run, limit=10_000)
    for row in rows[-4:]:
        record = reader.trace(row.id)
        assert len(record.tokens) == row.n_tokens
        assert len(record.attributions) == n_methods
        assert all(len(a.scores) == row.n_tokens for a in record.attributions.values())
    return total


@pytest.mark.slow
def test_sigkilled_writer_loses_no_commit_while_a_reader_reads(tmp_path, attributed):
    """A writer process adds batches of traces and prints the ids it committed; a reader reads
    meanwhile and only ever sees whole traces; the writer is killed with SIGKILL mid-run;
    every printed id is still there and the file passes PRAGMA integrity_check."""
    traces = attributed[0][:4]
    (tmp_path / "records.json").write_text(json.dumps([t.to_dict() for t in traces]))
    path = tmp_path / "crash.db"
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(path), str(tmp_path / "records.json")],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    committed: list[int] = []
    try:
        run = int(writer.stdout.readline().split()[1])
        reader = Store(path, readonly=True)
        seen = 0
        deadline = time.monotonic() + 120
        while len(committed) < 40 and time.monotonic() < deadline:
            committed += [int(i) for i in writer.stdout.readline().split()[1:]]
            seen = max(seen, _check_consistent(reader, run, len(METHODS)))
        assert seen > 0, "the reader never saw a committed trace"
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait(timeout=30)
        reader.close()
    finally:
        if writer.poll() is None:
            writer.kill()
        writer.stdout.close()
    assert len(committed) >= 40
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    stored = {r[0] for r in conn.execute("SELECT id FROM traces")}
    conn.close()
    assert set(committed) <= stored
    with Store(path, readonly=True) as after:
        assert _check_consistent(after, run, len(METHODS)) == len(stored)


def test_a_reader_thread_reads_while_a_writer_thread_writes(tmp_path, attributed):
    traces = attributed[0][:4]
    store = Store(tmp_path / "live.db")
    run = store.add_run("live")
    done, errors, totals = threading.Event(), [], []

    def read() -> None:
        reader = Store(store.path, readonly=True)
        try:
            while not done.is_set():
                totals.append(_check_consistent(reader, run, len(METHODS)))
        except Exception as err:  # noqa: BLE001 - reported by the main thread
            errors.append(err)
        finally:
            reader.close()

    thread = threading.Thread(target=read)
    thread.start()
    for _ in range(15):
        store.add_traces(run, traces)
    done.set()
    thread.join(timeout=60)
    store.close()
    assert not errors, errors
    assert totals == sorted(totals) and all(t % 4 == 0 for t in totals)


def test_numpy_numbers_nan_configs_and_chat_prompts_are_stored(tmp_path, attributed):
    trace = attributed[0][0].to_dict()
    trace["prompt"] = [{"role": "user", "content": "find e+f."}]
    trace["advantage"] = np.float32(0.5)
    trace["metrics"]["oar_p"]["ess_ratio"] = np.float32(0.75)
    with Store(tmp_path / "np.db") as store:
        run = store.add_run("np", config={"lr": np.float64(1e-3), "bad": float("nan")})
        trace_id = store.add_trace(run, trace, reward=np.float32(1.0), step=np.int64(3))
        assert store.run(run).config == {"lr": 1e-3, "bad": None}
        record = store.trace(trace_id)
        assert record.row.reward == 1.0 and record.row.step == 3 and record.row.advantage == 0.5
        assert json.loads(record.prompt) == trace["prompt"] and record.extra == {"chat_prompt": True}
        assert record.to_attribution().prompt == trace["prompt"]
        assert record.attributions["oar_p"].ess_ratio == 0.75


def test_draw_metrics_round_trip_and_a_v2_store_reads_them_as_none(tmp_path, world):
    """OAR-G's draw count and split-half reliability (schema v3) come back from the store; a
    store written before v3 reads them as None read-only, and a writable open adds them."""
    problems, tokenizer, model = world
    traces = attribute(model, tokenizer, [problems[0].prompt], [problems[0].solution],
                       ["oar_g"], method_params={"oar_g": {"n_noise": 4}})
    metrics = traces[0].metrics["oar_g"]
    assert metrics["draws"] == 4 and -1 <= metrics["split_half"] <= 1
    path = tmp_path / "draws.db"
    with Store(path) as store:
        run = store.add_run("draws")
        store.add_traces(run, traces)
        back = store.trace(store.trace_ids(run)[0]).to_attribution().metrics["oar_g"]
    assert back["draws"] == 4 and back["split_half"] == pytest.approx(metrics["split_half"])
    conn = sqlite3.connect(path)  # what a version-2 writer left: no draw columns
    conn.execute("ALTER TABLE attributions DROP COLUMN draws")
    conn.execute("ALTER TABLE attributions DROP COLUMN split_half")
    conn.execute("PRAGMA user_version = 2")
    conn.commit()
    conn.close()
    with Store(path, readonly=True) as store:
        record = store.trace(store.trace_ids(run)[0]).attributions["oar_g"]
        assert record.draws is None and record.split_half is None
    with Store(path) as store:  # migrated: a new trace keeps its draw metrics
        store.add_traces(run, traces)
        assert store.trace(store.trace_ids(run)[-1]).attributions["oar_g"].draws == 4
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 3
