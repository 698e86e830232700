"""The run store: one SQLite file (WAL mode) of runs, traces, per-token attributions, oracle
labels and recall summaries, written by training or `attribute` and read by the web app and
notebooks at the same time.

    store = Store("runs.db")
    run = store.add_run("demo", model="arith-tiny", config={...})
    store.add_traces(run, attribute(...), rewards=..., oracles=[p.oracle(t) for ...])
    summarise(store, run)  # oar_attrib.analysis.run_summary: recall and agreement, stored
    store.frame("tokens", run_id=run)
"""
from .core import Store
from .errors import NotFoundError, SchemaVersionError, StoreError
from .records import AttributionRecord, RunInfo, TraceRecord, TraceRow
from .schema import SCHEMA_VERSION

__all__ = [
    "Store", "StoreError", "NotFoundError", "SchemaVersionError", "SCHEMA_VERSION",
    "RunInfo", "TraceRow", "TraceRecord", "AttributionRecord",
]
