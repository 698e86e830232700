"""Load test of the web app: N concurrent clients on the trace and report pages, loopback only.

The server runs in its own process (`oar_attrib.webapp.cli.serve` on 127.0.0.1, a free port), so that the
clients' threads do not share its interpreter. Each client sends its share of a fixed number
of requests, cycling over the run's trace pages and its report page (one request in
`--report-every` is a report). Any status other than 200, or a failed connection, is an error;
the run exits with status 1 when there is one. Prints p50 / p95 / max latency per page kind.

Two more parts, one client at a time against the same kind of server process:
- `long`: a ~4000-token trace (real MATH-500 + GSM8K solutions, Qwen2.5 tokenizer, a random
  2-layer Qwen2; needs the shared data folder, ../shared or $OAR_SHARED) with six methods:
  the trace page, its JSON and its exports, median time of --repeats requests and size, next
  to the 1 s and 2 MB budgets;
- `scale`: a run of --scale-traces traces (copies of the load part's traces, so that the
  store is built in seconds): the runs list and the run table's first, middle and last pages,
  sorted and filtered, over HTTP and through `Store.traces`, without the run table's sort
  indexes and then with them, side by side with the ratio.

    python bench/bench_web.py                       # every part, stores built here
    python bench/bench_web.py --part long --long-store long.db   # scripts/build_long_store.py
    python bench/bench_web.py --part load --store demo.db --clients 16 --requests 800
"""
from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # the package; tests/longtrace.py and shared_data.py

import httpx  # noqa: E402

SERVER = """
import sys
from oar_attrib.webapp.cli import serve
from oar_attrib.webapp.main import create_app
serve(create_app(sys.argv[1]), "127.0.0.1", 0)
"""


def build_store(path: Path, n_problems: int) -> None:
    """A demo-like run: right and wrong answers to world problems, five methods, attributed
    by a random 2-layer model over a world tokenizer (the page sizes match the demo's)."""
    from oar_attrib.models import random_qwen2
    from oar_attrib.webapp.demo import DemoConfig, write_problem_run
    from oar_attrib.store import Store
    from oar_attrib.world import generate_problems
    from oar_attrib.world.tokenizer import build_tokenizer

    problems = generate_problems(n_problems, "default", seed=0, split="test")
    tokenizer = build_tokenizer([p.prompt + p.solution for p in problems], 280)
    model = random_qwen2(len(tokenizer), hidden=64, max_positions=512, init_std=0.02, tie=False)
    owners = [p for p in problems for _ in (0, 1)]
    texts = [t for p in problems
             for t in (p.solution, p.solution.replace(f"#### {p.answer}", f"#### {p.answer + 1}"))]
    config = DemoConfig(model="random-tiny", methods=("oar_p", "oar_g", "entropy", "grail", "random"))
    with Store(path) as store:
        write_problem_run(store, model, tokenizer, owners, texts, config=config, group_size=2)


def start_server(store: Path) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(store)], stdout=subprocess.PIPE,
                            text=True)
    line = proc.stdout.readline()
    found = re.search(r"(http://127\.0\.0\.1:\d+)/", line)
    if not found:
        proc.kill()
        raise SystemExit(f"the server did not start: {line!r}")
    return proc, found.group(1)


def urls(base: str, store: Path, report_every: int) -> list[tuple[str, str]]:
    """(kind, url) in the order clients cycle through them."""
    from oar_attrib.store import Store

    with Store(store, readonly=True) as s:
        run = s.runs()[-1].id
        trace_ids = s.trace_ids(run)
    out = []
    for i, trace_id in enumerate(trace_ids):
        if i % (report_every - 1) == 0:
            out.append(("report", f"{base}/runs/{run}/report"))
        out.append(("trace", f"{base}/traces/{trace_id}"))
    return out


def client(targets, start: int, count: int, results: list, errors: list) -> None:
    with httpx.Client(timeout=60) as http:
        for k in range(count):
            kind, url = targets[(start + k) % len(targets)]
            t0 = time.perf_counter()
            try:
                r = http.get(url)
                ok = r.status_code == 200 and len(r.content) > 0
            except httpx.HTTPError as err:
                ok, r = False, err
            results.append((kind, time.perf_counter() - t0))
            if not ok:
                errors.append(f"{url}: {getattr(r, 'status_code', r)}")


def report(results, errors, seconds: float, clients: int) -> None:
    print(f"{len(results)} requests, {clients} concurrent clients, {seconds:.1f} s, "
          f"{len(results) / seconds:.1f} requests/s, {len(errors)} errors")
    for kind in sorted({k for k, _ in results}) + ["all"]:
        times = sorted(t for k, t in results if kind in (k, "all"))
        if not times:
            continue
        p = statistics.quantiles(times, n=100, method="inclusive") if len(times) > 1 else times * 99
        print(f"  {kind:<7} n={len(times):<5} p50 {1000 * p[49]:7.1f} ms   "
              f"p95 {1000 * p[94]:7.1f} ms   max {1000 * times[-1]:7.1f} ms")
    for line in errors[:10]:
        print("  error:", line)


LONG_METHODS = ("oar_p_step", "oar_g", "entropy", "grail", "ig", "random")
PAGE_BUDGET_S, PAGE_BUDGET_BYTES = 1.0, 2_000_000


def timed_gets(base: str, paths: list[str], repeats: int) -> list[tuple[str, float, int]]:
    """(path, median seconds, bytes) of `repeats` sequential GETs of each path, after one
    warm-up GET (template compilation, first store read); any status but 200 is fatal."""
    out = []
    with httpx.Client(timeout=120) as http:
        for path in paths:
            http.get(base + path)
            times, size = [], 0
            for _ in range(repeats):
                t0 = time.perf_counter()
                r = http.get(base + path)
                times.append(time.perf_counter() - t0)
                if r.status_code != 200:
                    raise SystemExit(f"{path}: status {r.status_code}: {r.text[:300]}")
                size = len(r.content)
            out.append((path, statistics.median(times), size))
    return out


def print_timings(rows, budget: bool = False) -> None:
    for path, seconds, size in rows:
        within = ""
        if budget:
            ok = seconds < PAGE_BUDGET_S and size < PAGE_BUDGET_BYTES
            within = f"   {'within' if ok else 'OVER'} budget (< {PAGE_BUDGET_S:.0f} s, < 2 MB)"
        print(f"  {path:<52} {1000 * seconds:8.1f} ms  {size / 1e6:6.3f} MB{within}")


def bench_long(store: Path, repeats: int) -> None:
    from oar_attrib.store import Store

    with Store(store, readonly=True) as s:
        run = s.runs()[0]
        trace_id = s.trace_ids(run.id)[0]
        record = s.trace(trace_id)
    print(f"long trace {trace_id}: {record.row.n_tokens} tokens, {len(record.steps)} steps, "
          f"{len(record.attributions)} methods ({', '.join(record.attributions)}); "
          f"median of {repeats} requests, one client")
    proc, base = start_server(store)
    try:
        print_timings(timed_gets(base, [f"/traces/{trace_id}", f"/api/traces/{trace_id}"], repeats),
                      budget=True)
        print_timings(timed_gets(base, [f"/api/traces/{trace_id}/export/{k}" for k in (
            "view.html", "tokens.csv", "steps.csv", "tokens.json", "steps.json")], repeats))
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def build_scale_store(path: Path, source: Path, n: int) -> int:
    """A run of n traces: the source store's traces copied round-robin, in batches."""
    from oar_attrib.store import Store

    with Store(source, readonly=True) as s:
        run = s.runs()[-1].id
        records = [s.trace(i) for i in s.trace_ids(run)]
    dicts = [{**r.to_attribution().to_dict(), "reward": r.row.reward, "step": k % 50,
              "oracle": r.oracle} for k, r in enumerate(records)]
    with Store(path) as s:
        run_id = s.add_run("scale", model="copies")
        for start in range(0, n, 500):
            s.add_records(run_id, [dicts[k % len(dicts)] for k in range(start, min(n, start + 500))])
    return run_id


def drop_sort_indexes(path: Path) -> None:
    """The store as it was before the run table's sort indexes (its (run_id, step) index stays)."""
    import sqlite3

    from oar_attrib.store.schema import SORT_INDEXES

    conn = sqlite3.connect(path)
    for name in SORT_INDEXES:
        conn.execute(f"DROP INDEX IF EXISTS {name}")
    conn.commit()
    conn.close()


def store_page_times(path: Path, run: int, offset: int, repeats: int) -> list[tuple[str, float]]:
    """(sort, median seconds of `Store.traces`) of the page at `offset`, every sort and order."""
    from oar_attrib.store import Store
    from oar_attrib.store.schema import SORT_KEYS

    out = []
    with Store(path, readonly=True) as s:
        for sort in SORT_KEYS:
            for desc in (False, True):
                times = []
                for _ in range(repeats + 1):  # the first one warms the page cache
                    t0 = time.perf_counter()
                    s.traces(run, sort=sort, descending=desc, limit=50, offset=offset)
                    times.append(time.perf_counter() - t0)
                out.append((f"{sort} {'desc' if desc else 'asc'}", statistics.median(times[1:])))
    return out


def print_side_by_side(title: str, without: list, with_: list) -> None:
    print(f"  {title:<56} {'no index':>9} {'indexed':>9}  ratio")
    for (name, before, *_), (_, after, *_) in zip(without, with_):
        print(f"  {name:<56} {1000 * before:6.1f} ms {1000 * after:6.1f} ms  {before / after:5.1f}x")


def bench_scale(store: Path, repeats: int) -> None:
    """The runs list and the run table's pages, timed on the store without the sort indexes,
    then again after a writable open has added them (as it does to any store without them)."""
    from oar_attrib.store import Store

    with Store(store, readonly=True) as s:
        run = s.runs()[0]
        pages = -(-run.n_traces // 50)
    print(f"scale: run {run.id} with {run.n_traces} traces ({pages} pages of 50); median of "
          f"{repeats} requests, one client; first without the sort indexes, then with them")
    paths = ["/", "/api/runs", f"/runs/{run.id}", f"/runs/{run.id}?page={pages // 2}",
             f"/runs/{run.id}?page={pages}", f"/runs/{run.id}?sort=reward&order=desc&page={pages // 2}",
             f"/runs/{run.id}?sort=reward&order=desc&page={pages}",
             f"/runs/{run.id}?correct=wrong&step=7", f"/api/runs/{run.id}/traces?page={pages}"]
    timings = {}
    for phase in ("without", "with"):
        if phase == "without":
            drop_sort_indexes(store)
        else:
            t0 = time.perf_counter()
            Store(store).close()
            print(f"  a writable open added the sort indexes in {time.perf_counter() - t0:.2f} s")
        proc, base = start_server(store)
        try:
            timings[phase] = (timed_gets(base, paths, repeats),
                              store_page_times(store, run.id, (pages - 1) * 50, repeats))
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    print_side_by_side("page (HTTP, loopback)", timings["without"][0], timings["with"][0])
    print_side_by_side(f"last page, Store.traces(sort, offset={(pages - 1) * 50})",
                       timings["without"][1], timings["with"][1])


def bench_load(args, store: Path) -> list:
    proc, base = start_server(store)
    try:
        targets = urls(base, store, args.report_every)
        for _, url in targets[:2]:  # warm up: first requests pay for template compilation
            httpx.get(url, timeout=60)
        results, errors = [], []
        share = [args.requests // args.clients + (i < args.requests % args.clients)
                 for i in range(args.clients)]
        threads = [threading.Thread(target=client, args=(targets, i * 7, n, results, errors))
                   for i, n in enumerate(share)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        report(results, errors, time.perf_counter() - t0, args.clients)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return errors


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", choices=("all", "load", "long", "scale"), default="all")
    parser.add_argument("--long-store", type=Path, help="store of long traces (default: build one)")
    parser.add_argument("--scale-traces", type=int, default=10_000, help="traces of the scale run")
    parser.add_argument("--repeats", type=int, default=5, help="requests per page (long, scale)")
    parser.add_argument("--store", type=Path, help="run store to serve (default: build one)")
    parser.add_argument("--problems", type=int, default=24, help="problems of the built store")
    parser.add_argument("--clients", type=int, default=8, help="concurrent clients")
    parser.add_argument("--requests", type=int, default=400, help="requests in all")
    parser.add_argument("--report-every", type=int, default=5, help="one report request in this many")
    args = parser.parse_args(argv)
    errors = []
    with tempfile.TemporaryDirectory() as tmp:
        store = args.store
        if store is None and args.part in ("all", "load", "scale"):
            store = Path(tmp) / "bench.db"
            t0 = time.perf_counter()
            build_store(store, args.problems)
            print(f"built {store.name}: {2 * args.problems} traces in {time.perf_counter() - t0:.1f} s")
        if args.part in ("all", "load"):
            errors = bench_load(args, store)
        if args.part in ("all", "long"):
            long_store = args.long_store
            if long_store is None:
                from longtrace import build_long_store  # tests/longtrace.py
                from shared_data import shared_folder

                long_store = Path(tmp) / "long.db"
                t0 = time.perf_counter()
                build_long_store(long_store, shared=shared_folder(), methods=LONG_METHODS)
                print(f"built {long_store.name}: one long trace in {time.perf_counter() - t0:.0f} s")
            bench_long(long_store, args.repeats)
        if args.part in ("all", "scale"):
            scale = Path(tmp) / "scale.db"
            t0 = time.perf_counter()
            build_scale_store(scale, store, args.scale_traces)
            print(f"built {scale.name}: {args.scale_traces} traces in {time.perf_counter() - t0:.1f} s")
            bench_scale(scale, args.repeats)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
