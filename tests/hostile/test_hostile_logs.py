"""Hostile use, round 4: the one append-only JSONL log (`jsonl.AppendLog`) against a kill in
the middle of a write, links, FIFOs and folders; and the graded oracle's cache read back
checked (wrong types, NaN or out-of-range flips, a cut line) and its path refused before any
compute when it is a link, a FIFO or a folder."""
import json
import os
import signal
import subprocess
import sys

import pytest

from oar_attrib.instruments.cache import OracleCache as GradedCache
from oar_attrib.errors import InputError, OutputError
from oar_attrib.jsonl import AppendLog, append_jsonl, iter_jsonl
from oar_attrib.world import generate_problems

# A child that appends 5 whole records, then is killed (SIGKILL, by itself) half way through
# writing the 6th: the kill lands between the two halves of one write.
_KILLED_MID_WRITE = """
import os, signal, sys
from oar_attrib import jsonl
log = jsonl.AppendLog(sys.argv[1])
log.write({"i": i, "text": "caf\\u00e9 " * 20} for i in range(5))
real = os.write
def half_then_die(fd, data):
    real(fd, bytes(data[: len(data) // 2]))
    os.kill(os.getpid(), signal.SIGKILL)
os.write = half_then_die
log.write([{"i": 5, "text": "never whole"}])
"""

# A child that appends large records without end until it is killed from outside.
_APPENDING = """
import sys
from oar_attrib import jsonl
log = jsonl.AppendLog(sys.argv[1])
i = 0
while True:
    log.write({"i": i + k, "pad": "x" * 50000} for k in range(20))
    i += 20
"""


def _child(script: str, path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.Popen([sys.executable, "-c", script, str(path)], env=env)


def test_a_kill_in_the_middle_of_a_write_is_cut_off_and_the_next_append_is_whole(tmp_path):
    path = tmp_path / "log.jsonl"
    proc = _child(_KILLED_MID_WRITE, path)
    assert proc.wait(timeout=60) == -signal.SIGKILL
    raw = path.read_bytes()
    assert not raw.endswith(b"\n") and raw.count(b"\n") == 5  # the 6th line half written
    assert [v["i"] for _, v in iter_jsonl(path, whole_lines=True)] == [0, 1, 2, 3, 4]
    with AppendLog(path) as log:  # the next open cuts the half line off
        assert path.read_bytes() == raw[: raw.rfind(b"\n") + 1]
        log.write([{"i": 6}])
    values = [v for _, v in iter_jsonl(path)]
    assert [v["i"] for v in values] == [0, 1, 2, 3, 4, 6]
    assert values[0]["text"] == "café " * 20  # UTF-8 both ways


def test_a_kill_from_outside_while_appending_leaves_only_whole_lines_after_reopening(tmp_path):
    path = tmp_path / "log.jsonl"
    proc = _child(_APPENDING, path)
    try:
        for _ in range(600):
            if path.exists() and path.stat().st_size > 3_000_000:
                break
            assert proc.poll() is None
            subprocess.run(["sleep", "0.05"])
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    append_jsonl(path, [{"i": "last"}])
    values = [v for _, v in iter_jsonl(path)]
    assert all(isinstance(v, dict) for v in values)  # no line is a fragment (a NotJSON message)
    numbers = [v["i"] for v in values[:-1]]
    assert numbers == list(range(len(numbers))) and values[-1] == {"i": "last"}


def test_the_log_refuses_a_link_a_fifo_and_a_folder_and_writes_nothing(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("someone else's file\n")
    link = tmp_path / "cache.jsonl"
    link.symlink_to(outside)
    with pytest.raises(OutputError, match="symbolic link.*pass the file itself or a new path") as err:
        append_jsonl(link, [{"a": 1}], "--cf-cache")
    assert str(link) in str(err.value) and "\n" not in str(err.value)
    assert outside.read_text() == "someone else's file\n"
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(OutputError, match="FIFO"):  # refused at once, never blocking on the open
        AppendLog(fifo, "--out")
    with pytest.raises(OutputError, match="folder"):
        AppendLog(tmp_path, "--out")


def test_a_lone_surrogate_is_written_escaped_and_named_when_read(tmp_path):
    path = tmp_path / "log.jsonl"
    append_jsonl(path, [{"text": "ok é"}, {"text": "\ud800"}])
    values = [v for _, v in iter_jsonl(path)]
    assert values[0] == {"text": "ok é"} and values[1].kind == "surrogate"


# ---------------------------------------------------------------------------- the graded cache


def _records(n=2):
    return [{"question": p.prompt, "answer": str(p.answer)}
            for p in generate_problems(n, "recall", seed=0, split="test")]


@pytest.fixture(scope="module")
def cache_lines():
    """Lines of a graded cache as `graded_recall` writes them (an answer, a method's scores
    with an undefined one as null, an oracle: [position, drawn ids, 0/1 flips]); that real
    caches read back is tests/instruments/test_graded_oracle.py's rerun test."""
    entries = [{"kind": "answer", "key": "a" * 32, "text": "3 + 4 = 7. The answer is 7."},
               {"kind": "scores", "key": "b" * 32, "method": "entropy", "scores": [0.25, None, 1.5, 0.0]},
               {"kind": "oracle", "key": "c" * 32, "positions": [[0, [11, 12], [1, 0]], [2, [13, 14], [0, 0]]],
                "decode": {"rows": 4, "seconds": 0.1}},
               {"kind": "answer", "key": "d" * 32, "text": "The answer is 9."}]
    lines = [json.dumps(e) for e in entries]
    path_free = GradedCache(None)
    for e in entries:
        path_free._take(1, e)  # each is one GradedCache takes
    return lines


def _edit(lines, kind, change):
    """The lines with the first entry of `kind` changed by `change(entry)` (which returns text)."""
    out, done = [], False
    for line in lines:
        entry = json.loads(line)
        if entry["kind"] == kind and not done:
            line, done = change(entry), True
        out.append(line)
    assert done
    return out


def _set(key, value):
    return lambda entry: json.dumps({**entry, key: value})


def _flip(value):
    def change(entry):
        entry["positions"][0][2][0] = "FLIP"
        return json.dumps(entry).replace('"FLIP"', value)
    return change


BAD_ENTRIES = {
    "scores as a string": ("scores", _set("scores", "0.1 0.2")),
    "a score that is text": ("scores", _set("scores", [0.1, "high"])),
    "a cut list": ("scores", lambda e: json.dumps(e)[: json.dumps(e).index("[") + 6]),
    "an answer text that is a number": ("answer", _set("text", 42)),
    "NaN flips": ("oracle", _flip("NaN")),
    "an out-of-range flip": ("oracle", _flip("3")),
    "a flip that is a fraction": ("oracle", _flip("0.5")),
    "positions that are a dict": ("oracle", _set("positions", {"0": 1})),
}


@pytest.mark.parametrize("case", sorted(BAD_ENTRIES))
def test_a_bad_cache_entry_is_one_line_before_the_model_loads_and_never_reused(case, cache_lines, tmp_path,
                                                                                no_model, refused):
    kind, change = BAD_ENTRIES[case]
    cache = tmp_path / "cache.jsonl"
    cache.write_text("\n".join(_edit(cache_lines, kind, change)) + "\n", encoding="utf-8")
    before = cache.read_bytes()
    with pytest.raises(InputError, match="pass a new --cf-cache"):
        GradedCache(cache)
    data = tmp_path / "q.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in _records()), encoding="utf-8")
    line = refused("recall", "graded", "--model", "arith-tiny", "--data", data, "--cf-cache", cache,
                   "--no-progress", words=(str(cache), "--cf-cache"))
    assert ":" in line.split(str(cache), 1)[1][:8]  # names the line
    assert cache.read_bytes() == before


@pytest.mark.parametrize("kind", ["fifo", "folder", "link"])
def test_a_cache_path_that_is_no_regular_file_is_refused_before_the_model_loads(kind, tmp_path, no_model,
                                                                                 refused):
    data = tmp_path / "q.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in _records()), encoding="utf-8")
    cache, outside = tmp_path / "cache.jsonl", tmp_path / "outside.txt"
    outside.write_text("keep\n")
    {"fifo": lambda: os.mkfifo(cache), "folder": cache.mkdir, "link": lambda: cache.symlink_to(outside)}[kind]()
    refused("recall", "graded", "--model", "arith-tiny", "--data", data, "--cf-cache", cache,
            "--no-progress", words=(f"--cf-cache {cache}",))
    assert outside.read_text() == "keep\n"
    with pytest.raises(OutputError):
        append_jsonl(cache, [{"kind": "answer"}], "--cf-cache")
    assert outside.read_text() == "keep\n"


def test_a_cut_last_cache_line_does_not_swallow_the_next_entry(cache_lines, tmp_path):
    cache = tmp_path / "cache.jsonl"
    cache.write_text("\n".join(cache_lines[:-1]) + "\n" + cache_lines[-1][:30], encoding="utf-8")
    read = GradedCache(cache)
    assert len(read.items) == len(cache_lines) - 1  # the cut line is left out, not refused
    read.put("answer", "k" * 32, {"text": "The answer is 7."})
    again = GradedCache(cache)
    assert len(again.items) == len(cache_lines)
    assert again.get("answer", "k" * 32)["text"] == "The answer is 7."


def test_counterfactual_cache_entries_are_checked_too(tmp_path):
    from oar_attrib.instruments.data.recall import _read_cache

    cache = tmp_path / "cf.jsonl"
    cache.write_text(json.dumps({"key": "a", "causal": [[0, True], [2, False]]}) + "\n"
                     + json.dumps({"key": "b", "causal": [[1, "yes"]]}) + "\n")
    with pytest.raises(InputError, match=f"--cf-cache {cache}:2"):
        _read_cache(cache)
    cache.write_text(json.dumps({"key": "a", "causal": [[0, True], [2, False]]}) + "\n")
    assert _read_cache(cache) == {"a": {0: True, 2: False}}
