"""The preregistered runs' chunked loop (docs/experiments/advantage/chunked.sh), on a stand-in
`oar` that reports counts: it stops at the first chunk whose family reaches WANT; at a deadline
it finishes the chunk running, and analyses only with LEAST traces, else leaves the caches for a
later round; every chunk's report is deleted unread, only counts kept."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLAN = {"what": "a plan", "min_traces": 3, "primary": {"alpha": 0.05},
        "hypotheses": {"H1": {"method": "a", "metric": "signed", "text": "a above 0"}}}
# A stand-in `oar`: the shards write to their caches, `merge` joins them, the unsharded command
# prints a report whose family is half the traces drawn (its first call sleeps SLOW seconds).
STUB = r'''#!/usr/bin/env python3
import json, os, sys, time
args = sys.argv[1:]
log = os.environ["STUB_LOG"]
open(log, "a").write(" ".join(args) + "\n")
if args[:2] == ["recall", "merge"]:
    open(args[2], "w").write("joined\n")
    sys.exit(0)
n = int(args[args.index("--n") + 1])
if "--shard" in args:
    sys.exit(0)
if n == 16:
    time.sleep(float(os.environ.get("SLOW", "0")))
row = {"mean": 0.3, "low": 0.1, "high": 0.5, "p_holm": 0.01, "n": n // 2}
print(json.dumps({"n": n, "n_labelled": n, "n_scored": n // 2, "groups": {"analysed": n // 4},
                  "methods": {"a": {"signed": row}}}))
'''


def run(tmp_path: Path, want: int, least: int = 0, deadline: str = "", slow: float = 0.0):
    folder = tmp_path / "exp"
    folder.mkdir(exist_ok=True)
    (folder / "plan.json").write_text(json.dumps(PLAN))
    stub = tmp_path / "oar"
    stub.write_text(STUB)
    stub.chmod(0o755)
    script = tmp_path / "run.sh"
    script.write_text(f"set -euo pipefail\nDIR={folder}\nWANT={want}\nLEAST={least}\nARGS=(--model m)\n"
                      f"source {ROOT / 'docs/experiments/advantage/chunked.sh'}\n")
    env = {**os.environ, "OAR": str(stub), "PYTHON": sys.executable,
           "STUB_LOG": str(tmp_path / "calls"), "DEADLINE": deadline, "SLOW": str(slow),
           "PYTHONPATH": str(ROOT)}
    done = subprocess.run(["bash", str(script)], check=False, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return folder, done.stdout, (tmp_path / "calls").read_text().splitlines()


def test_it_stops_at_the_first_chunk_whose_family_reaches_want(tmp_path):
    folder, out, calls = run(tmp_path, want=20)  # families 8, 16, 24: the third chunk
    assert "48 traces drawn, 24 in the family" in out and "64 traces" not in out
    assert json.loads((folder / "progress.json").read_text()) == {
        "n": 48, "n_labelled": 48, "family": 24, "groups": {"analysed": 12}}
    assert not (folder / ".chunk.json").exists()  # each chunk's report deleted
    report = json.loads((folder / "replication.json").read_text())
    assert report["n"] == 48 and report["replication"]["hypotheses"]["H1"]["verdict"] == "confirmed"
    shards = [c for c in calls if "--shard" in c]
    assert len(shards) == 6 and sum("--shard 1/2" in c for c in shards) == 3
    assert all("--cf-cache" in c for c in calls if c.startswith("recall advantage"))


def test_at_the_deadline_it_ends_the_running_chunk_and_analyses_with_enough_traces(tmp_path):
    deadline = str(int(time.time()) + 1)
    folder, out, _ = run(tmp_path, want=100, least=5, deadline=deadline, slow=2.5)
    assert "the deadline passed with 8 traces in the family at 16 drawn" in out
    assert json.loads((folder / "replication.json").read_text())["n"] == 16  # the chunk it finished


def test_at_the_deadline_with_too_few_traces_there_is_no_analysis(tmp_path):
    deadline = str(int(time.time()) + 1)
    folder, out, _ = run(tmp_path, want=100, least=9, deadline=deadline, slow=2.5)
    assert "fewer than 9: no analysis" in out
    assert not (folder / "replication.json").exists()
    assert json.loads((folder / "progress.json").read_text())["family"] == 8  # the counts kept
