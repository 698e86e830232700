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
