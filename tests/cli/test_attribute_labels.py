"""`oar attribute` carries each input line's gold answer, reward and correctness into its
output (the store's right/wrong filter and credit profiles need them)."""
import json

from oar_attrib import cli
from oar_attrib.store import Store

PROMPT = "h=1*7, m=h-6, b=h+8. find b+h.\n"
RIGHT = "h=1*7=7. m=7-6=1. b=7+8=15. #### 22"
WRONG = "h=1*7=7. m=7-6=1. b=7+8=15. #### 21"


def test_gold_and_correct_reach_the_store_and_the_jsonl(tmp_path):
    lines = [{"prompt": PROMPT, "response": RIGHT, "answer": 22},          # graded: right
             {"prompt": PROMPT, "response": WRONG, "gold": "22", "reward": 0.0},  # graded: wrong
             {"prompt": PROMPT, "response": RIGHT, "answer": "22", "correct": False},  # its own verdict
             {"prompt": PROMPT, "response": RIGHT}]                         # nothing known
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(x) + "\n" for x in lines))
    db = tmp_path / "runs.db"
    args = ["attribute", "--input", str(source), "--methods", "entropy", "--no-progress"]
    assert cli.main(args + ["--out", str(db)]) == 0
    with Store(db, readonly=True) as store:
        records = list(store.iter_traces(1))
    assert [r.row.correct for r in records] == [True, False, False, None]
    assert [r.extra.get("gold") for r in records] == ["22", "22", "22", None]
    assert [r.row.reward for r in records] == [None, 0.0, None, None]
    out = tmp_path / "out.jsonl"
    assert cli.main(args + ["--out", str(out)]) == 0
    written = [json.loads(x) for x in out.read_text().splitlines()]
    assert [(w.get("gold"), w.get("correct")) for w in written] == [
        ("22", True), ("22", False), ("22", False), (None, None)]


def test_advantage_and_group_of_generated_lines_reach_the_store_and_the_jsonl(tmp_path):
    """The lines `oar generate` writes (`rollouts.graded_group`: reward, advantage, group per
    answer) keep their advantage and group in `oar attribute`'s output, and the token
    advantages are A * w_t; a line without an advantage stores none."""
    from oar_attrib.rollouts import Question, graded_group

    groups = [graded_group(Question(g, PROMPT, "22", f"q.jsonl:{g + 1}"),
                           [(RIGHT, 20, False), (WRONG, 20, False), (WRONG, 20, False)], "gsm8k")
              for g in (0, 1)]
    lines = [r for group in groups for r in group] + [{"prompt": PROMPT, "response": RIGHT}]
    source = tmp_path / "traces.jsonl"
    source.write_text("".join(json.dumps(x) + "\n" for x in lines))
    args = ["attribute", "--input", str(source), "--methods", "entropy", "--no-progress", "--batch-size", "4"]
    db = tmp_path / "runs.db"
    assert cli.main(args + ["--out", str(db)]) == 0
    with Store(db, readonly=True) as store:
        records = list(store.iter_traces(1))
    want = [r["advantage"] for r in lines[:-1]]
    assert want[0] > 0 > want[1] and len(set(want)) == 2  # one right, two wrong per group
    assert [r.row.advantage for r in records] == [*want, None]
    assert [r.row.group for r in records] == [0, 0, 0, 1, 1, 1, None]
    for record, advantage in zip(records[:-1], want):
        weights = record.attributions["entropy"].weights
        got = record.attributions["entropy"].token_advantages
        assert got is not None and max(abs(a - advantage * w) for a, w in zip(got, weights)) < 1e-5
    assert records[-1].attributions["entropy"].token_advantages is None
    out = tmp_path / "out.jsonl"
    assert cli.main(args + ["--out", str(out)]) == 0
    written = [json.loads(x) for x in out.read_text().splitlines()]
    assert [(w["advantage"], w.get("group")) for w in written] == [
        *[(a, g) for a, g in zip(want, [0, 0, 0, 1, 1, 1])], (None, None)]
    assert written[0]["token_advantages"]["entropy"] and written[-1]["token_advantages"] == {}


def test_lines_without_an_answer_are_counted_in_the_summary(tmp_path, capsys):
    """A line without an answer span is attributed at no cost (weight 1, no score) and the
    summary says how many there were, in which format, and the flag that changes it."""
    lines = [{"prompt": PROMPT, "response": RIGHT}, {"prompt": PROMPT, "response": "h=1*7=7. m=7-6=1."},
             {"prompt": PROMPT, "response": "b=7+8=15, so b+h is 22"}]
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = tmp_path / "out.jsonl"
    assert cli.main(["attribute", "--input", str(source), "--methods", "oar_p", "--no-progress",
                     "--out", str(out)]) == 0
    summary = capsys.readouterr().err.strip().splitlines()[-1]
    assert "2 without an answer in format 'auto': not scored, every weight 1" in summary
    assert "--answer-format" in summary
    written = [json.loads(x) for x in out.read_text().splitlines()]
    assert [w["span_found"] for w in written] == [True, False, False]
    for w in written[1:]:
        assert set(w["scores"]["oar_p"]) == {0.0} and set(w["weights"]["oar_p"]) == {1.0}


def test_a_label_that_is_not_what_it_must_be_is_said_and_stored_as_absent(tmp_path, capsys):
    """NaN, Infinity, a string or a bool as `reward` or `advantage`, a float or a string as
    `group`, a string as `correct`: the line is attributed and stored without that label (a
    `correct` left out is graded against the gold answer), and one line per label names the
    file, the line and the value; null is an absent label, said nowhere."""
    source = tmp_path / "in.jsonl"
    source.write_text(
        json.dumps({"prompt": PROMPT, "response": RIGHT, "advantage": 0.5, "group": 3}) + "\n"
        + '{"prompt": %s, "response": %s, "advantage": NaN, "reward": Infinity}\n' % (json.dumps(PROMPT), json.dumps(RIGHT))
        + json.dumps({"prompt": PROMPT, "response": WRONG, "reward": "high", "advantage": True, "group": 1.5}) + "\n"
        + json.dumps({"prompt": PROMPT, "response": WRONG, "reward": None, "answer": 22, "correct": "yes"}) + "\n")
    db = tmp_path / "runs.db"
    assert cli.main(["attribute", "--input", str(source), "--methods", "entropy", "--no-progress",
                     "--out", str(db)]) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if "stored without it" in line]
    tail = "; the line is attributed and stored without it"
    assert said == [f"{source}:2: its reward 'inf' is not a finite number{tail}",
                    f"{source}:2: its advantage 'nan' is not a finite number{tail}",
                    f"{source}:3: its reward 'high' is not a finite number{tail}",
                    f"{source}:3: its advantage 'True' is not a finite number{tail}",
                    f"{source}:3: its group '1.5' is not an integer{tail}",
                    f"{source}:4: its correct 'yes' is not true or false{tail}"]
    with Store(db, readonly=True) as store:
        records = list(store.iter_traces(1))
    assert [r.row.advantage for r in records] == [0.5, None, None, None]
    assert [r.row.reward for r in records] == [None, None, None, None]
    assert [r.row.group for r in records] == [3, None, None, None]
    assert [r.row.correct for r in records] == [None, None, None, False]  # graded: 21 is not 22


def test_a_label_notice_is_not_counted_as_a_skipped_line(tmp_path):
    """read_pairs says a bad label through `notice`, not `report` (which counts a skipped line
    on the progress bar): the line is still yielded, once."""
    from collections import Counter

    import oar_attrib as oa
    from oar_attrib.cli.attribute import read_pairs

    _, tok = oa.load_model("arith-tiny")
    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps({"prompt": PROMPT, "response": RIGHT, "group": "g1"}) + "\n")
    reported, noticed = [], []
    pairs = list(read_pairs(source, tok, "auto", lambda n: False, Counter(), report=reported.append,
                            notice=noticed.append))
    assert [p[0] for p in pairs] == [1] and reported == []
    assert noticed == [f"{source}:1: its group 'g1' is not an integer; the line is attributed and stored without it"]
