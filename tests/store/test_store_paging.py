"""The run table's paging: every sort reads its own index (EXPLAIN QUERY PLAN), pages are the
same rows in the same order with and without the indexes (ties broken by id), and stores
written before the indexes gain them on a writable open while read-only opens still work."""
import random
import sqlite3
from typing import get_args

import pytest

from oar_attrib.store import Store, StoreError
from oar_attrib.store.core import UNKNOWN, trace_page_sql
from oar_attrib.store.schema import SORT_INDEXES, SORT_KEYS

FILTERS = {
    "none": {},
    "correct": {"correct": False},
    "step": {"step": 1},
    "reward range": {"min_reward": 0.25, "max_reward": 1.0},
    "all": {"correct": True, "step": 2, "min_reward": 0.5},
}
SORTS = [(key, desc) for key in SORT_KEYS for desc in (False, True)]


def fake_trace(n_tokens: int, advantage: float | None) -> dict:
    """A minimal stored-trace dict (what `attribute` returns), without a model."""
    tokens = [f"t{i} " for i in range(n_tokens)]
    offsets, start = [], 0
    for token in tokens:
        offsets.append((start, start + len(token)))
        start += len(token)
    segments = ["reasoning"] * (n_tokens - 1) + ["answer"]
    return {"prompt": "p", "response": "".join(tokens), "token_ids": list(range(n_tokens)),
            "tokens": tokens, "offsets": offsets, "segments": segments, "span_found": True,
            "answer_span": (offsets[-1][0], offsets[-1][1]), "answer_text": "1", "probe": "lt",
            "advantage": advantage, "scores": {"random": [0.5] * n_tokens},
            "weights": {"random": [1.0] * n_tokens}}


def fill(store: Store, n: int, seed: int) -> tuple[int, list[dict]]:
    """A run of n traces whose every sort key has many ties and some NULLs; returns its id and
    the stored values of each trace (what the reference sorts and filters)."""
    rng = random.Random(seed)
    values = [{"reward": rng.choice([0.0, 0.5, 1.0, None]), "step": rng.choice([None, 0, 1, 2]),
               "advantage": rng.choice([-1.0, 0.0, 1.0, None]), "n_tokens": rng.choice([2, 3, 4]),
               "correct": rng.choice([True, False, None])} for _ in range(n)]
    run = store.add_run(f"ties-{seed}")
    ids = store.add_traces(run, [fake_trace(v["n_tokens"], v["advantage"]) for v in values],
                           rewards=[v["reward"] for v in values],
                           correct=[UNKNOWN if v["correct"] is None else v["correct"]
                                    for v in values],
                           steps=[v["step"] for v in values])
    return run, [{**v, "id": i} for v, i in zip(values, ids)]


def reference(values: list[dict], sort: str, descending: bool, correct=None, step=None,
              min_reward=None, max_reward=None) -> list[int]:
    """Ids in the table's order, by Python: filters as SQL reads them (NULL matches no
    condition), sort key ascending with NULL first (descending: NULL last), ties by id."""
    kept = [v for v in values
            if (correct is None or v["correct"] == correct) and (step is None or v["step"] == step)
            and (min_reward is None or (v["reward"] is not None and v["reward"] >= min_reward))
            and (max_reward is None or (v["reward"] is not None and v["reward"] <= max_reward))]
    kept.sort(key=lambda v: v["id"])
    kept.sort(key=lambda v: (v[sort] is not None, v[sort]), reverse=descending)  # stable
    return [v["id"] for v in kept]


def drop_indexes(path) -> None:
    """Make a store look as it did before the sort indexes existed."""
    conn = sqlite3.connect(path)
    for name in SORT_INDEXES:
        conn.execute(f"DROP INDEX {name}")
    conn.commit()
    conn.close()


def index_names(path) -> set[str]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    conn.close()
    return names


def plan(store: Store, run: int, sort: str, desc: bool, filters: dict) -> list[str]:
    """EXPLAIN QUERY PLAN of the page query `Store.traces` runs."""
    _, page_sql, args = trace_page_sql(run, sort=sort, descending=desc, **filters)
    conn = store._conn()
    return [r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {page_sql}", [*args, 50, 100])]


def reads_an_index_in_order(details: list[str]) -> bool:
    """One of the run table's indexes (or the (run_id, step) index, for a step filter) and no
    sort of the matches."""
    indexed = any("USING INDEX traces_sort_" in d or "USING INDEX traces_by_run (run_id=? AND step=?)"
                  in d for d in details)
    return indexed and not any("TEMP B-TREE" in d for d in details)


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """(indexed store path, old-schema store path, run id, values): the same two runs in both."""
    paths = [tmp_path_factory.mktemp("paging") / name for name in ("new.db", "old.db")]
    for path in paths:
        with Store(path) as store:
            fill(store, 30, seed=1)  # another run, so that run_id must filter
            run, values = fill(store, 90, seed=2)
    drop_indexes(paths[1])
    return paths[0], paths[1], run, values


@pytest.mark.parametrize("filters", FILTERS.values(), ids=FILTERS.keys())
@pytest.mark.parametrize("sort,desc", SORTS)
def test_each_sort_reads_an_index_in_page_order_and_the_old_schema_sorts(stores, sort, desc, filters):
    new, old, run, _ = stores
    with Store(new, readonly=True) as store:
        details = plan(store, run, sort, desc, filters)
        assert reads_an_index_in_order(details), details
        if not filters:  # the page's own index, named for the sort
            suffix = "" if sort == "id" else "_desc" if desc else "_asc"
            assert f"USING INDEX traces_sort_{sort}{suffix} " in details[0], details
    with Store(old, readonly=True) as store:
        details = plan(store, run, sort, desc, filters)
    if not (filters.get("step") is not None or (sort == "step" and not desc)):
        # Without the indexes (the old schema) the check fails: every match goes through a
        # sort. The (run_id, step) index it had orders a step filter and `step ASC` only.
        assert not reads_an_index_in_order(details), details


@pytest.mark.parametrize("filters", FILTERS.values(), ids=FILTERS.keys())
@pytest.mark.parametrize("sort,desc", SORTS)
def test_pages_are_the_reference_order_with_and_without_the_indexes(stores, sort, desc, filters):
    new, old, run, values = stores
    want = reference(values, sort, desc, **filters)
    assert len(want) > 1
    for path in (new, old):
        with Store(path, readonly=True) as store:
            got, total = [], None
            for offset in range(0, len(want) + 7, 7):
                rows, total = store.traces(run, sort=sort, descending=desc, limit=7, offset=offset,
                                           **filters)
                got += [r.id for r in rows]
        assert total == len(want) and got == want, path.name


def test_the_reference_has_ties_to_break(stores):
    _, _, _, values = stores
    for key in SORT_KEYS[1:]:
        column = [v[key] for v in values]
        assert len(set(column)) < len(column) / 4, key  # many traces share each value
    assert any(v["reward"] is None for v in values) and any(v["advantage"] is None for v in values)


def test_a_writable_open_adds_missing_indexes_and_a_readonly_open_works_without(tmp_path):
    path = tmp_path / "runs.db"
    with Store(path) as store:
        run, values = fill(store, 20, seed=3)
    assert set(SORT_INDEXES) <= index_names(path)
    drop_indexes(path)
    with Store(path, readonly=True) as store:
        rows, total = store.traces(run, sort="reward", descending=True)
    assert [r.id for r in rows] == reference(values, "reward", True) and total == 20
    assert not set(SORT_INDEXES) & index_names(path)  # a reader changes nothing
    Store(path).close()
    assert set(SORT_INDEXES) <= index_names(path)


def test_opening_needs_no_lock_once_the_indexes_exist_and_says_what_to_do_when_it_does(tmp_path):
    path = tmp_path / "runs.db"
    Store(path).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another writer, mid-transaction
    try:
        Store(path, timeout=0.05).close()  # every index present: nothing to write
        holder.execute("ROLLBACK")
        drop_indexes(path)
        holder.execute("BEGIN IMMEDIATE")
        with pytest.raises(StoreError, match="cannot add the run table's sort indexes.*readonly=True"):
            Store(path, timeout=0.05)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    with Store(path, readonly=True) as store:
        assert store.runs() == []


def test_the_web_table_offers_the_store_sorts():
    from oar_attrib.webapp.schemas import TraceFilter

    assert get_args(TraceFilter.model_fields["sort"].annotation) == SORT_KEYS
