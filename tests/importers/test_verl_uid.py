"""`oar import verl` on verl's v1 dumps: a group is the sample part of `uid`
(`{sample}_{rollout}_{output}`), not a run of equal prompt texts, a multi-output rollout is its
last output, and the import says which rule it read each dump with; dumps without uid keep
the old rule, with its note."""
import json

import numpy as np
import pytest

from oar_attrib import cli
from oar_attrib.importers.rows import ADVANTAGE_EPS
from oar_attrib.importers.verl import TEXT_RULE, UID_RULE, parse_uid
from oar_attrib.store import Store

PROMPT = "a=4, b=7. c=a+b. find c.\n"


def _write(folder, rows, step=1):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{step}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _line(uid, output, score, prompt=PROMPT, step=1):
    """A line as verl's v1 trainer dumps it: no reward extras, the uid among the extra keys."""
    return {"input": prompt, "output": output, "gts": "11", "score": score, "step": step, "uid": uid}


def _import(tmp_path, capsys):
    db = tmp_path / "runs.db"
    code = cli.main(["import", "verl", str(tmp_path / "dump"), "--out", str(db)])
    err = capsys.readouterr().err
    with Store(db, readonly=True) as store:
        return code, err, list(store.iter_traces(1))


def _advantage(reward, group):
    return (reward - np.mean(group)) / (np.std(group, ddof=1) + ADVANTAGE_EPS)


def test_two_samples_of_one_prompt_text_are_two_groups(tmp_path, capsys):
    """Two samples x two rollouts of one prompt text: two groups of two, not one of four."""
    rows = [_line("s1_0_0", "c=4+7=11. #### 11", 1.0), _line("s1_1_0", "c=4+7=12. #### 12", 0.0),
            _line("s2_0_0", "c=4+7=11. #### 11", 1.0), _line("s2_1_0", "c=7+4=11. #### 11", 1.0)]
    _write(tmp_path / "dump", rows)
    code, err, traces = _import(tmp_path, capsys)
    assert code == 0 and f"oar import: 1 verl dump {UID_RULE}" in err
    assert [t.row.group for t in traces] == [0, 0, 1, 1]
    want = [_advantage(1.0, [1.0, 0.0]), _advantage(0.0, [1.0, 0.0]), 0.0, 0.0]
    assert [t.row.advantage for t in traces] == pytest.approx(want)
    assert want[0] == pytest.approx(0.7070, abs=1e-3)  # one group of four would give 0.5
    assert traces[0].extra["logged"] == {"uid": "s1_0_0"} and traces[0].extra["gold"] == "11"


def test_a_multi_output_rollout_is_its_last_output(tmp_path, capsys):
    rows = [_line("s1_0_0", "let me see.", 0.0), _line("s1_0_1", "c=4+7=11. #### 11", 1.0),
            _line("s1_1_0", "c=4+7=12. #### 12", 0.0), _line("a_b_2_0_0", "c=11. #### 11", 1.0)]
    _write(tmp_path / "dump", rows)
    code, err, traces = _import(tmp_path, capsys)
    assert code == 0 and "imported 3 rollouts" in err
    assert [t.response for t in traces] == ["c=4+7=11. #### 11", "c=4+7=12. #### 12", "c=11. #### 11"]
    assert [t.row.group for t in traces] == [0, 0, 1]  # a sample uid may hold underscores
    assert [t.extra["row"] for t in traces] == [2, 3, 4]


def test_a_bad_uid_or_a_rollout_split_by_other_rows_is_a_bad_row(tmp_path, capsys):
    rows = [_line("s1_0_0", "c=4+7=11. #### 11", 1.0), _line("s1-0", "c=11. #### 11", 1.0),
            _line("s2_0_0", "c=4+7=12. #### 12", 0.0), _line("s1_0_1", "c=11. #### 11", 1.0)]
    _write(tmp_path / "dump", rows)
    code, err, traces = _import(tmp_path, capsys)
    assert code == 2 and len(traces) == 2
    assert "1.jsonl:2: skipped (fields): uid 's1-0' is not {sample}_{rollout}_{output}" in err
    assert "1.jsonl:4: skipped (fields): rollout s1_0 again after other rows" in err


def test_a_dump_without_uid_keeps_consecutive_prompt_groups_and_says_so(tmp_path, capsys):
    rows = [{k: v for k, v in _line("x_0_0", out, score).items() if k != "uid"}
            for out, score in (("c=4+7=11. #### 11", 1.0), ("c=4+7=12. #### 12", 0.0),
                               ("c=4+7=11. #### 11", 1.0), ("c=7+4=11. #### 11", 1.0))]
    _write(tmp_path / "dump", rows)
    code, err, traces = _import(tmp_path, capsys)
    assert code == 0 and f"oar import: 1 verl dump {TEXT_RULE}" in err
    assert [t.row.group for t in traces] == [0, 0, 0, 0]  # the old rule: one group of four
    assert traces[0].row.advantage == pytest.approx(_advantage(1.0, [1.0, 0.0, 1.0, 1.0]))


@pytest.mark.parametrize("value, parsed", [("s_0_1", ("s", 0, 1)), ("a_b_10_2", ("a_b", 10, 2))])
def test_parse_uid(value, parsed):
    assert parse_uid(value) == parsed
    assert not isinstance(parse_uid("_1_2"), tuple) and not isinstance(parse_uid(7), tuple)
