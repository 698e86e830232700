"""`--shard K/N` and `oar recall merge`: a run split 2 ways and merged reads back, in the
unsharded command, every unit the unsharded run computed, and prints the same report (timings
aside); a merge refuses shards of other settings and shards that disagree, in one line, writing
nothing; an oracle cache has one writer at a time."""
import json

import pytest

from oar_attrib import cli
from oar_attrib.errors import InputError
from oar_attrib.instruments import OracleCache, Shard, merge
from oar_attrib.instruments.shard import shard_path
from oar_attrib.world import generate_problems

GRADED = ["recall", "graded", "--n", "5", "--methods", "random", "entropy", "--positions", "3", "--graded-k", "2",
          "--max-new-tokens", "48", "--json", "--no-progress"]


def _run(argv, capsys) -> dict:
    assert cli.main([str(a) for a in argv]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def _without_timings(report: dict) -> dict:
    return {k: v for k, v in report.items() if k not in ("decode",)}


def test_a_shard_takes_every_nth_unit_and_parses_k_of_n():
    assert Shard.parse("2/3").take(list(range(8))) == [1, 4, 7]
    assert [Shard(k, 3).take(list(range(8))) for k in (1, 2, 3)] == [[0, 3, 6], [1, 4, 7], [2, 5]]
    for bad in ("0/2", "3/2", "2", "a/b", "1/0"):
        with pytest.raises(Exception, match="K/N"):
            Shard.parse(bad)
    assert shard_path("c/words.jsonl", Shard(1, 2)).name == "words.shard-1-of-2.jsonl"


def test_graded_sharded_two_ways_and_merged_reports_what_the_unsharded_run_reports(tmp_path, capsys):
    whole = tmp_path / "whole.jsonl"
    fresh = _run(GRADED + ["--cf-cache", whole], capsys)
    again = _run(GRADED + ["--cf-cache", whole], capsys)  # everything read back
    cache = tmp_path / "split.jsonl"
    parts = [_run(GRADED + ["--cf-cache", cache, "--shard", f"{k}/2"], capsys) for k in (1, 2)]
    assert [p["n"] for p in parts] == [3, 2]
    merged = tmp_path / "merged.jsonl"
    assert cli.main(["recall", "merge", str(merged), str(shard_path(cache, Shard(1, 2))),
                     str(shard_path(cache, Shard(2, 2)))]) == 0
    capsys.readouterr()
    joined = _run(GRADED + ["--cf-cache", merged], capsys)
    assert all(c["computed"] == 0 for c in joined["cache"].values())  # nothing computed again
    assert _without_timings(joined) == _without_timings(again)
    assert joined["methods"] == fresh["methods"] and joined["per_trace"] == fresh["per_trace"]


def test_data_sharded_two_ways_and_merged_reports_what_the_unsharded_run_reports(tmp_path, capsys):
    data = tmp_path / "q.jsonl"
    data.write_text("".join(json.dumps({"prompt": p.prompt, "response": p.solution, "answer": str(p.answer)}) + "\n"
                            for p in generate_problems(4, "recall", seed=3, split="test")))
    argv = ["recall", "data", "--data", data, "--n", "4", "--methods", "random", "entropy", "--cf-positions", "3",
            "--max-new-tokens", "32", "--json", "--no-progress"]
    fresh = _run(argv + ["--cf-cache", tmp_path / "whole.jsonl"], capsys)
    cache = tmp_path / "split.jsonl"
    for k in (1, 2):
        _run(argv + ["--cf-cache", cache, "--shard", f"{k}/2"], capsys)
    merged = tmp_path / "merged.jsonl"
    assert merge(merged, [shard_path(cache, Shard(k, 2)) for k in (1, 2)]) == 4
    assert _run(argv + ["--cf-cache", merged], capsys) == fresh


WHOLE_PROBLEMS = {
    "world": ["recall", "world", "--n", "5", "--methods", "random", "entropy", "--sets", "direct", "counterfactual",
              "--cf-positions", "3", "--json", "--no-progress"],
    "steps": ["recall", "steps", "--n", "5", "--methods", "random", "oar_p_step", "--intervention-samples", "2",
              "--json", "--no-progress"],
}


@pytest.mark.parametrize("name", list(WHOLE_PROBLEMS))
def test_world_and_steps_sharded_two_ways_and_merged_report_what_the_unsharded_run_reports(name, tmp_path, capsys):
    """Each problem is a unit of its own in the cache (`instruments.units`): the shards'
    caches merge into one from which the unsharded command reads every problem back (the
    intervention's continuations are seeded by the problem's index, not its place in a shard)."""
    argv = WHOLE_PROBLEMS[name]
    fresh = _run(argv, capsys)
    assert _run(argv + ["--cf-cache", tmp_path / "whole.jsonl"], capsys) == fresh  # a cache changes nothing
    cache = tmp_path / "split.jsonl"
    parts = [_run(argv + ["--cf-cache", cache, "--shard", f"{k}/2"], capsys) for k in (1, 2)]
    assert [p["n"] for p in parts] == [3, 2]
    merged = tmp_path / "merged.jsonl"
    assert merge(merged, [shard_path(cache, Shard(k, 2)) for k in (1, 2)]) == 5
    assert _run(argv + ["--cf-cache", merged], capsys) == fresh
    units = [json.loads(line) for line in merged.read_text().splitlines()[1:]]
    assert len(units) == 5 and {u["kind"] for u in units} == {"unit"}


def _shard_file(path, record, entries):
    path.write_text("".join(json.dumps(line) + "\n" for line in [{"record": record, "shard": "1/2"}, *entries]))
    return path


def test_a_merge_refuses_other_settings_and_disagreeing_entries_and_writes_nothing(tmp_path):
    record = {"format": 1, "model": {"name": "arith-tiny", "weights_sha256": "a"}, "dtype": "float32",
              "instrument": "graded"}
    one = _shard_file(tmp_path / "1.jsonl", record, [{"kind": "answer", "key": "k", "text": "7", "seconds": 1}])
    same = _shard_file(tmp_path / "2.jsonl", record, [{"kind": "answer", "key": "k", "text": "7", "seconds": 2}])
    assert merge(tmp_path / "ok.jsonl", [one, same]) == 1  # timings aside, the same entry
    other = _shard_file(tmp_path / "3.jsonl", {**record, "dtype": "bfloat16"}, [])
    with pytest.raises(InputError, match="other settings.*dtype"):
        merge(tmp_path / "no1.jsonl", [one, other])
    clash = _shard_file(tmp_path / "4.jsonl", record, [{"kind": "answer", "key": "k", "text": "8"}])
    with pytest.raises(InputError, match="4.jsonl:2 holds a answer entry that differs"):
        merge(tmp_path / "no2.jsonl", [one, clash])
    with pytest.raises(InputError, match="exists"):
        merge(one, [same])
    assert not (tmp_path / "no1.jsonl").exists() and not (tmp_path / "no2.jsonl").exists()


WRITE = ("import sys\nfrom oar_attrib.instruments import OracleCache\n"
         "OracleCache(sys.argv[1]).put('answer', 'k2', {'text': '2'})\n")


def test_an_oracle_cache_has_one_writer_at_a_time(tmp_path):
    """A second process is refused in one line while the first writes; in one process two
    caches of one path share the lock (a rerun in a notebook)."""
    import subprocess
    import sys

    path = tmp_path / "cache.jsonl"
    first = OracleCache(path)
    first.put("answer", "k1", {"text": "1"})
    again = OracleCache(path)
    again.put("answer", "k3", {"text": "3"})  # the same process: the lock is shared
    busy = subprocess.run([sys.executable, "-c", WRITE, str(path)], capture_output=True, text=True)
    assert busy.returncode != 0 and "is being written by process" in busy.stderr
    first.release()
    again.release()
    done = subprocess.run([sys.executable, "-c", WRITE, str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert {e["key"] for e in OracleCache(path).entries()} == {"k1", "k2", "k3"}


def test_a_cache_of_another_model_is_refused_where_the_instrument_checks_records(tmp_path):
    from oar_attrib.instruments.data.recall import causal_cache
    from oar_attrib.records.settings_record import RecordMismatchError

    record = {"format": 1, "model": {"name": "a", "weights_sha256": "1"}, "dtype": "float32"}
    cache = causal_cache(tmp_path / "cf.jsonl", record=record)
    cache.put("causal", "k", {"causal": [[0, True]]})
    cache.release()
    with pytest.raises(RecordMismatchError):
        causal_cache(tmp_path / "cf.jsonl", record={**record, "dtype": "bfloat16"})
    assert causal_cache(tmp_path / "cf.jsonl", record=record).get("causal", "k")["causal"] == [[0, True]]
