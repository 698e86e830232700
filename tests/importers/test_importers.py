"""`oar import`: TRL completion logs of a real GRPOTrainer run, verl rollout dumps and plain
JSONL rollouts into a run store; bad rows reported by number and skipped; resumed reruns; the
store's v1 -> v2 migration (the token_stats table)."""
import json
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from oar_attrib import cli
from oar_attrib.importers import group_advantages
from oar_attrib.importers.rows import ADVANTAGE_EPS
from oar_attrib.store import Store
from oar_attrib.store import schema
from models import write_verl_dump


@pytest.fixture(scope="module")
def trl_run(tmp_path_factory):
    """A real TRL GRPOTrainer run of the bundled arith-tiny policy: two CPU steps, 2 prompts x
    4 sampled completions each, completion logging on; returns its output_dir."""
    from trl import GRPOConfig, GRPOTrainer

    from oar_attrib.models import load_model
    from oar_attrib.training.data import world_dataset
    from oar_attrib.training.rewards import world_reward

    out = tmp_path_factory.mktemp("trl") / "out"
    model, tok = load_model("arith-tiny")
    args = GRPOConfig(output_dir=str(out), per_device_train_batch_size=8, num_generations=4,
                      max_completion_length=48, max_steps=2, learning_rate=1e-3, logging_steps=1,
                      report_to=[], bf16=False, use_cpu=True, save_strategy="no",
                      disable_tqdm=True, seed=0, dataloader_num_workers=0, log_completions=True)
    GRPOTrainer(model=model, reward_funcs=[world_reward], args=args, processing_class=tok,
                train_dataset=world_dataset(8, "default", seed=1)).train()
    return out


def oar(*argv) -> int:
    return cli.main([str(a) for a in argv])


def stored(db: Path, run_id: int = 1) -> list:
    with Store(db, readonly=True) as store:
        return list(store.iter_traces(run_id))


def test_trl_run_imports_every_completion_with_reward_and_advantage(trl_run, tmp_path):
    logs = pd.concat([pd.read_parquet(p) for p in sorted(trl_run.glob("completions/*.parquet"))],
                     ignore_index=True)
    assert sorted(logs["step"].unique()) == [1, 2] and len(logs) == 16
    db = tmp_path / "runs.db"
    assert oar("import", "trl", trl_run, "--out", db) == 0
    records = stored(db)
    assert len(records) == len(logs)
    for record, (_, row) in zip(records, logs.iterrows()):
        assert record.prompt == row["prompt"] and record.response == row["completion"]
        assert record.row.reward == pytest.approx(row["world_reward"])
        assert record.row.advantage == pytest.approx(row["advantage"])
        assert record.row.step == row["step"]
        assert record.row.correct == (row["world_reward"] >= 1.0)
        assert "".join(record.tokens) == record.response
    # A prompt's 4 samples are one group; groups are numbered in order of appearance.
    assert [r.row.group for r in records] == [i // 4 for i in range(16)]
    # The browser lists every completion with its reward and advantage.
    from fastapi.testclient import TestClient

    from oar_attrib.webapp import create_app
    from oar_attrib.webapp.settings import WebSettings

    app = create_app(db, settings=WebSettings(page_size=50))
    with TestClient(app, base_url="http://127.0.0.1") as client:
        page = client.get("/api/runs/1/traces").json()
        html = client.get("/runs/1").text
    assert page["total"] == 16
    assert [t["reward"] for t in page["traces"]] == pytest.approx(logs["world_reward"].tolist())
    assert [t["advantage"] for t in page["traces"]] == pytest.approx(logs["advantage"].tolist())
    assert html.count('href="/traces/') >= 16


def test_an_import_beside_the_trainers_own_store_says_which_to_open(trl_run, tmp_path, capsys):
    import shutil

    run = tmp_path / "out"
    shutil.copytree(trl_run, run)
    Store(run / "runs.db").close()  # as OARGRPOTrainer leaves it: <output_dir>/runs.db
    assert oar("import", "trl", run, "--out", tmp_path / "rollouts.db") == 0
    (line,) = [x for x in capsys.readouterr().err.splitlines() if "own run store" in x]
    assert line.startswith(f"oar import: {run / 'runs.db'} is the OAR trainer's own run store")
    assert "open the first for the credit the run trained on, this one to compare methods" in line


def test_recomputed_advantages_equal_the_ones_trl_trained_with(trl_run, tmp_path):
    # The same logs without the advantage column: the group rule must give TRL's values.
    logs = tmp_path / "logs"
    logs.mkdir()
    for path in sorted(trl_run.glob("completions/*.parquet")):
        pd.read_parquet(path).drop(columns="advantage").to_parquet(logs / path.name)
    db = tmp_path / "runs.db"
    assert oar("import", "trl", logs, "--out", db) == 0
    expected = [a for p in sorted(trl_run.glob("completions/*.parquet"))
                for a in pd.read_parquet(p)["advantage"]]
    got = [r.row.advantage for r in stored(db)]
    np.testing.assert_allclose(got, expected, atol=1e-6)


def test_group_rule_by_hand():
    stats = group_advantages({"a": [1.0, 0.0, 0.0, 1.0], "b": [0.5]})
    mean, std = stats["a"]
    assert mean == 0.5 and std == pytest.approx((1 / 3) ** 0.5)  # Bessel: sum of squares 1 / 3
    assert stats["b"] == (0.5, 0.0)
    assert (1.0 - mean) / (std + ADVANTAGE_EPS) == pytest.approx(0.8658, abs=1e-4)


def test_verl_dump_imports_with_group_advantages_gold_and_verdict(tmp_path):
    lines = write_verl_dump(tmp_path / "rollouts")
    db = tmp_path / "runs.db"
    assert oar("import", "verl", tmp_path / "rollouts", "--out", db) == 0
    records = stored(db)
    assert [(r.prompt, r.response) for r in records] == [(x["input"], x["output"]) for x in lines]
    for i, (record, line) in enumerate(zip(records, lines)):
        group = [x["score"] for x in lines[3 * (i // 3): 3 * (i // 3) + 3]]
        mean, std = np.mean(group), np.std(group, ddof=1)
        assert record.row.advantage == pytest.approx((line["score"] - mean) / (std + 1e-4))
        assert record.row.step == line["step"] and record.row.group == i // 3
        assert record.row.correct is line["acc"]
        assert record.extra["gold"] == line["gts"] and record.extra["logged"] == {"acc": line["acc"], "pred": line["pred"]}


def test_bad_rows_are_reported_by_number_and_skipped(tmp_path, capsys):
    good = write_verl_dump(tmp_path / "rollouts", steps=(1,))
    path = tmp_path / "rollouts" / "1.jsonl"
    lines = path.read_text().splitlines()
    bad = ['{"input": "q", "output": "a", "sc', json.dumps({"input": "q", "score": 1.0}),
           json.dumps({"input": "q", "output": "a", "score": "high"}),
           json.dumps({"input": "q", "output": "  ", "score": 1.0}), "[1, 2]"]
    path.write_text("\n".join(lines[:2] + bad + lines[2:]) + "\n")
    db = tmp_path / "runs.db"
    assert oar("import", "verl", tmp_path / "rollouts", "--out", db) == 2
    err = capsys.readouterr().err
    for number, kind in ((3, "not_json"), (4, "fields"), (5, "bad_reward"), (6, "fields"),
                         (7, "fields")):
        assert f"1.jsonl:{number}: skipped ({kind})" in err
    assert "5 bad rows skipped" in err and "Traceback" not in err
    records = stored(db)
    assert [r.response for r in records] == [x["output"] for x in good]
    assert [r.extra["row"] for r in records] == [1, 2, 8, 9, 10, 11]


def test_rerun_resumes_and_adds_only_new_rows(tmp_path, capsys):
    write_verl_dump(tmp_path / "rollouts", steps=(1,))
    db = tmp_path / "runs.db"
    assert oar("import", "verl", tmp_path / "rollouts", "--out", db) == 0
    # the next step, with the store and run to attribute, is the last line
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"next: oar attribute --store {db} --run 1 attributes it in place, then oar web --store {db} shows it")
    from fastapi.testclient import TestClient

    from oar_attrib.webapp import create_app

    # an unattributed trace's page names the command that attributes it
    with TestClient(create_app(db), base_url="http://127.0.0.1") as client:
        page = client.get("/traces/1").text
    assert f"<code>oar attribute --store <bdi>{db.name}</bdi> --run 1</code> adds one" in page
    write_verl_dump(tmp_path / "rollouts", steps=(2,))  # training went on
    capsys.readouterr()
    assert oar("import", "verl", tmp_path / "rollouts", "--out", db) == 0
    assert "imported 6 rollouts into run 1" in capsys.readouterr().err
    with Store(db, readonly=True) as store:
        assert len(store.runs()) == 1
    assert [r.row.step for r in stored(db)] == [1] * 6 + [2] * 6


def test_all_right_groups_get_advice_that_fits_them(tmp_path, capsys):
    """Every group right: harder questions, never easier ones, and no `--samples`, which `oar
    import` does not have: the RL run's own setting."""
    write_verl_dump(tmp_path / "rollouts", steps=(1,), n=1)  # each prompt's one answer is right
    assert oar("import", "verl", tmp_path / "rollouts", "--out", tmp_path / "runs.db") == 0
    (line,) = [x for x in capsys.readouterr().err.splitlines() if "GRPO signal" in x]
    assert line.startswith("oar import: no group carries a GRPO signal (0 with every answer wrong, 2 with "
                           "every answer right)")
    assert "harder questions (every answer right)" in line and "rollout.n" in line
    assert "easier" not in line and "--samples" not in line


def test_jsonl_rollouts_groups_chat_prompts_and_logged_advantages(tmp_path):
    chat = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "what’s 1+1?"}]
    rows = [{"prompt": chat, "response": "1+1=2. #### 2", "reward": 1, "group": "g1", "answer": 2},
            {"prompt": "2+2?", "response": "2+2=5. #### 5", "reward": 0, "group": "g2"},
            {"prompt": chat, "response": "1+1=3. #### 3", "reward": 0, "group": "g1", "correct": False},
            {"prompt": "2+2?", "response": "2+2=4. #### 4", "reward": 1, "group": "g2", "advantage": 9.0}]
    path = tmp_path / "rollouts.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    db = tmp_path / "runs.db"
    # A real chat model: the chat prompts get its template (arith-tiny has none).
    assert oar("import", "jsonl", path, "--out", db, "--model", "smollm2-135m") == 0
    records = stored(db)
    assert [r.row.group for r in records] == [0, 1, 0, 1]
    assert records[0].extra.get("chat_prompt") and json.loads(records[0].prompt) == chat
    assert records[0].extra["gold"] == "2" and records[0].row.correct is True
    assert records[2].row.correct is False
    # The trace page reads a chat prompt as a conversation: roles and texts, no JSON escapes.
    from fastapi.testclient import TestClient

    from oar_attrib.webapp import create_app

    with TestClient(create_app(db), base_url="http://127.0.0.1") as client:
        html = client.get(f"/traces/{records[0].id}").text
        assert client.get(f"/api/traces/{records[0].id}").json()["conversation"] == chat
    assert '<span class="role">system</span><pre class="prompt" dir="auto">be brief</pre>' in html
    assert "what’s 1+1?" in html and "\\u2019" not in html and "&#34;role&#34;" not in html
    adv = 0.5 / (0.5 ** 0.5 + 1e-4)  # rewards {1, 0}: mean 1/2, std sqrt(1/2)
    assert [r.row.advantage for r in records] == pytest.approx([adv, -adv, -adv, 9.0])


def test_unusable_sources_fail_in_one_line_and_write_nothing(tmp_path, capsys):
    db = tmp_path / "runs.db"
    (tmp_path / "empty").mkdir()
    assert oar("import", "trl", tmp_path / "empty", "--out", db) == 2
    assert "log_completions=True" in capsys.readouterr().err
    assert oar("import", "verl", tmp_path / "nowhere", "--out", db) == 2
    assert "does not exist" in capsys.readouterr().err
    assert oar("import", "verl", tmp_path / "empty", "--out", tmp_path / "runs.jsonl") == 2
    assert "must be a run store" in capsys.readouterr().err
    assert not db.exists()


def test_v1_store_is_migrated_on_a_writable_open_and_read_as_is_read_only(tmp_path):
    db = tmp_path / "old.db"
    write_verl_dump(tmp_path / "rollouts", steps=(1,))
    assert oar("import", "verl", tmp_path / "rollouts", "--out", db) == 0
    conn = sqlite3.connect(db)  # what a version-1 writer left: no token_stats, no draw columns
    conn.execute("DROP TABLE token_stats")
    conn.execute("ALTER TABLE attributions DROP COLUMN draws")
    conn.execute("ALTER TABLE attributions DROP COLUMN split_half")
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()
    with Store(db, readonly=True) as store:
        assert store.trace(1).token_stats == {} and len(store.runs()) == 1
    assert schema.identify(db) == 1  # the read-only open changed nothing
    with Store(db) as store:
        store.add_token_stats([(1, "m", [-0.5] * store.trace(1).row.n_tokens,
                                [0.25] * store.trace(1).row.n_tokens)])
        stats = store.trace(1).token_stats
    assert schema.identify(db) == schema.SCHEMA_VERSION == 3
    assert stats["logprob"].tolist() == [-0.5] * len(stats["logprob"])


def test_attribute_in_place_matches_attribute_and_resumes(tmp_path, capsys):
    from oar_attrib.attribution import attribute
    from oar_attrib.models import load_model

    write_verl_dump(tmp_path / "rollouts", steps=(1,))
    db = tmp_path / "runs.db"
    assert oar("import", "verl", tmp_path / "rollouts", "--out", db) == 0
    assert oar("attribute", "--store", db, "--run", 1, "--methods", "oar_p", "entropy") == 0
    records = stored(db)
    model, tok = load_model("arith-tiny")
    direct = attribute(model, tok, [r.prompt for r in records], [r.response for r in records],
                       ["oar_p", "entropy"], chat=False, advantages=[r.row.advantage for r in records])
    for record, want in zip(records, direct):
        assert record.token_ids == want.token_ids
        for method in ("oar_p", "entropy"):
            got = record.attributions[method]
            np.testing.assert_allclose(got.scores, want.scores[method], atol=1e-5)
            np.testing.assert_allclose(got.token_advantages,
                                       record.row.advantage * np.asarray(want.weights[method]), atol=1e-5)
        # The entropy view is the entropy baseline's value wherever that one scores.
        scored = np.asarray(want.scores["entropy"]) != 0
        assert scored.any()
        np.testing.assert_allclose(record.token_stats["entropy"][scored],
                                   np.asarray(want.scores["entropy"])[scored], atol=1e-5)
        assert (record.token_stats["logprob"] <= 0).all()
    with Store(db, readonly=True) as store:
        agreement = store.report(1)["agreement"]
    assert agreement, "the run's agreement is computed when the run is written"
    capsys.readouterr()
    assert oar("attribute", "--store", db, "--run", 1, "--methods", "oar_p", "entropy") == 0
    assert "attributed 0 traces" in capsys.readouterr().err


def test_attribute_in_place_bad_arguments_fail_in_one_line(tmp_path, capsys):
    write_verl_dump(tmp_path / "rollouts", steps=(1,))
    db = tmp_path / "runs.db"
    assert oar("import", "verl", tmp_path / "rollouts", "--out", db) == 0
    assert oar("attribute", "--store", db, "--run", 7) == 2
    assert "--run 7: no such run" in capsys.readouterr().err
    assert oar("attribute", "--store", db) == 2
    assert "go together" in capsys.readouterr().err
    assert oar("attribute", "--store", db, "--run", 1, "--input", db) == 2
    assert "one or the other" in capsys.readouterr().err
