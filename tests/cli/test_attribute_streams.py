"""`oar attribute` streams: by default a batch is the lines that fill one pass of the memory
budget (one trace at a time when a trace is bigger than a pass, as on a real model), each batch
is written as soon as it is done, the bar moves as each method finishes, and Ctrl-C keeps every
finished trace; the rerun attributes only the rest (checked by counting what is scored)."""
import json

import pytest

from oar_attrib import attribution, cli
from oar_attrib.models.budget import MAX_TRACES_PER_BATCH, trace_batch_full, trace_work
from oar_attrib.cli import attribute as attribute_cli
from oar_attrib.cli import outputs
from oar_attrib.models import load_model
from oar_attrib.store import Store
from oar_attrib.world import generate_problems

N = 5
REAL_BATCH = attribution._attribute_batch


def _source(tmp_path, n: int = N):
    problems = generate_problems(n, "default", seed=3, split="test")
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"prompt": p.prompt, "response": p.solution}) + "\n" for p in problems))
    return src, [p.solution for p in problems]


def _scored(monkeypatch, stop_after: int | None = None) -> list[str]:
    """The responses `attribute` scores, in order (one entry per response and call); with
    `stop_after`, Ctrl-C once that many responses have been scored."""
    seen: list[str] = []
    real = REAL_BATCH

    def counted(model, tokenizer, prompts, responses, *args, **kwargs):
        if stop_after is not None and len(seen) + len(responses) > stop_after:
            raise KeyboardInterrupt
        seen.extend(responses)
        return real(model, tokenizer, prompts, responses, *args, **kwargs)

    monkeypatch.setattr(attribution, "_attribute_batch", counted)
    return seen


def _writes(monkeypatch) -> list[int]:
    sizes: list[int] = []
    real = outputs.JsonlOutput.write

    def write(self, records):
        sizes.append(len(records))
        return real(self, records)

    monkeypatch.setattr(outputs.JsonlOutput, "write", write)
    return sizes


def test_a_batch_is_what_one_pass_holds():
    model, _ = load_model("arith-tiny")
    assert trace_work(40, 9) == 400  # the clean row and one copy per scored position
    assert trace_batch_full(model, [400], 40, max_batch_tokens=300)  # a trace bigger than a pass
    assert not trace_batch_full(model, [100, 100], 40, max_batch_tokens=300)
    assert trace_batch_full(model, [100, 100, 100], 40, max_batch_tokens=300)
    assert trace_batch_full(model, [1] * MAX_TRACES_PER_BATCH, 40, max_batch_tokens=1 << 20)
    assert not trace_batch_full(model, [1] * 3, 40)  # the tiny model's budget holds many


def test_each_trace_bigger_than_a_pass_is_written_alone_with_the_same_results(tmp_path, monkeypatch):
    src, _ = _source(tmp_path)
    base = ["attribute", "--input", str(src), "--methods", "oar_p", "entropy", "--no-progress"]
    sizes = _writes(monkeypatch)
    # 64 tokens hold every arithmetic row once but not a trace's copies: one trace a batch
    assert cli.main(base + ["--out", str(tmp_path / "one.jsonl"), "--max-batch-tokens", "64"]) == 0
    assert sizes == [1] * N
    sizes.clear()
    assert cli.main(base + ["--out", str(tmp_path / "all.jsonl")]) == 0
    assert sizes == [N]  # the tiny model's budget holds every trace in one pass

    def results(name):
        rows = [json.loads(x) for x in (tmp_path / name).read_text().splitlines()]
        return [{k: v for k, v in r.items() if k not in ("timings", "params")} for r in rows]

    one, together = results("one.jsonl"), results("all.jsonl")
    assert [r["token_ids"] for r in one] == [r["token_ids"] for r in together]
    # padding in a batch moves float32 sums in the last bits (so a weight at the gate's edge
    # may flip: the scores are compared)
    for a, b in zip(one, together):
        assert a["segments"] == b["segments"]
        for method in ("oar_p", "entropy"):
            assert a["scores"][method] == pytest.approx(b["scores"][method], rel=1e-3, abs=1e-4)


def test_the_bar_moves_as_each_method_finishes_before_the_batch_is_written(tmp_path, monkeypatch):
    src, _ = _source(tmp_path, 2)
    events = []
    real_progress = attribute_cli.method_progress

    def recorded(bar, n_methods):
        inner = real_progress(bar, n_methods)

        def on_scored(method, rows):
            inner(method, rows)
            events.append((method, rows, round(bar.n, 3)))
        return on_scored

    monkeypatch.setattr(attribute_cli, "method_progress", recorded)
    real_write = outputs.JsonlOutput.write
    monkeypatch.setattr(outputs.JsonlOutput, "write",
                        lambda self, records: (events.append(("write", len(records))), real_write(self, records)))
    assert cli.main(["attribute", "--input", str(src), "--out", str(tmp_path / "o.jsonl"),
                     "--methods", "oar_p", "entropy", "--max-batch-tokens", "64"]) == 0
    # half a trace per method, then the written trace counted whole
    assert events == [("oar_p", 1, 0.5), ("entropy", 1, 1.0), ("write", 1),
                      ("oar_p", 1, 1.5), ("entropy", 1, 2.0), ("write", 1)]


def test_ctrl_c_keeps_the_finished_traces_and_the_rerun_does_only_the_rest(tmp_path, monkeypatch, capsys):
    src, responses = _source(tmp_path)
    out = tmp_path / "out.jsonl"
    argv = ["attribute", "--input", str(src), "--out", str(out), "--methods", "oar_p",
            "--max-batch-tokens", "64", "--no-progress"]
    seen = _scored(monkeypatch, stop_after=2)
    assert cli.main(argv) == 130
    assert "interrupted; 2 lines kept" in capsys.readouterr().err
    kept = out.read_text()
    assert [json.loads(x)["line"] for x in kept.splitlines()] == [1, 2]
    assert seen == responses[:2]
    seen = _scored(monkeypatch)
    assert cli.main(argv) == 0
    assert seen == responses[2:]  # nothing scored twice
    text = out.read_text()
    assert text.startswith(kept)  # the kept lines unchanged
    assert [json.loads(x)["line"] for x in text.splitlines()] == [1, 2, 3, 4, 5]
    err = capsys.readouterr().err
    assert "wrote 3 attributions" in err and "2 lines already there" in err


def test_ctrl_c_in_place_keeps_the_finished_traces_and_the_rerun_does_only_the_rest(tmp_path, monkeypatch, capsys):
    src, responses = _source(tmp_path)
    db = tmp_path / "runs.db"
    assert cli.main(["attribute", "--input", str(src), "--out", str(db), "--methods", "entropy",
                     "--no-progress"]) == 0
    argv = ["attribute", "--store", str(db), "--run", "1", "--methods", "oar_p",
            "--max-batch-tokens", "64", "--no-progress"]
    seen = _scored(monkeypatch, stop_after=3)
    assert cli.main(argv) == 130
    assert "interrupted; 3 traces of run 1 attributed and kept" in capsys.readouterr().err
    with Store(db, readonly=True) as store:
        assert len(store.trace_ids(1, missing="oar_p")) == N - 3
    assert sorted(seen) == sorted(responses[:3])
    seen = _scored(monkeypatch)
    assert cli.main(argv) == 0
    assert sorted(seen) == sorted(responses[3:])  # nothing scored twice
    with Store(db, readonly=True) as store:
        assert store.trace_ids(1, missing="oar_p") == []


def test_the_chat_template_line_is_said_once_and_only_for_plain_string_prompts():
    told = []
    messages = [{"role": "user", "content": "q"}]
    items = [(1, messages, "r"), (2, messages, "r")]
    assert list(attribute_cli.tell_plain_once(iter(items), told.append)) == items and told == []
    items += [(3, "plain q", "r"), (4, "plain q", "r")]
    assert list(attribute_cli.tell_plain_once(iter(items), told.append)) == items
    assert told == [attribute_cli.CHAT_LINE]


def test_a_command_hides_the_librarys_loading_bar(tmp_path):
    """transformers' "Loading weights" bar is not printed by a command (its own bar is)."""
    import subprocess
    import sys

    src, _ = _source(tmp_path, 1)
    done = subprocess.run([sys.executable, "-m", "oar_attrib.cli", "attribute", "--input", str(src),
                           "--out", str(tmp_path / "o.jsonl"), "--methods", "random"],
                          capture_output=True, text=True)
    assert done.returncode == 0 and "attribute:" in done.stderr
    assert "Loading weights" not in done.stderr
