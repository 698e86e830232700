"""Pages that say why: a trace's reward reason beside its reward, the report's note on step
methods, and the legend that follows the colour mode (its script is run in a browser by
test_webapp_e2e.py)."""
import re

import pytest
from fastapi.testclient import TestClient

from oar_attrib.attribution import attribute
from oar_attrib.inputs.grading import WHYS, grade
from oar_attrib.methods import available_methods
from oar_attrib.store import Store
from oar_attrib.webapp import create_app
from oar_attrib.webapp.demo import graded
from oar_attrib.methods import step_methods
from oar_attrib.webapp.views import REASONS, report_view, reward_reason
from models import wrong_solution
# The store the TestClient tests use (built by the demo's writer from a tiny in-code model).
from test_webapp import client  # noqa: F401 - a pytest fixture (the others are in conftest.py)
from webtools import BASE


def _reason(html: str) -> str | None:
    found = re.search(r'<span class="reason" id="reward-reason">\((.*?)\)</span>', html)
    return None if found is None else found.group(1)


def test_every_grader_reason_has_words():
    assert set(WHYS) <= set(REASONS)


def test_a_world_trace_is_graded_with_its_reason(world):
    problem = world[0][0]
    boxed = problem.solution.replace(f"#### {problem.answer}", f"\\boxed{{{problem.answer}}}")
    assert graded(problem, problem.solution) == {"graded": "correct", "answer_format": "gsm8k"}
    assert graded(problem, wrong_solution(problem))["graded"] == "wrong"
    assert problem.reward(boxed) == 0.0 and graded(problem, boxed)["graded"] == "format_right"
    other = boxed.replace(f"\\boxed{{{problem.answer}}}", f"\\boxed{{{problem.answer + 1}}}")
    assert other != boxed and graded(problem, other)["graded"] == "format"  # another value too
    assert graded(problem, problem.solution.split("####")[0])["graded"] == "no_answer"


def test_the_trace_page_gives_the_reward_reason(client, ids):
    right, wrong = ids["demo_traces"][:2]  # the reference solution, then a wrong final value
    assert _reason(client.get(f"/traces/{right}").text) == "right answer"
    assert _reason(client.get(f"/traces/{wrong}").text) == "wrong value"
    assert _reason(client.get(f"/traces/{ids['no_span']}").text) is None  # no reward stored


def test_reasons_from_the_grader_and_from_the_row(tmp_path, world):
    """A stored grader's reason wins (a format names the format); without one the row says."""
    problems, tokenizer, model = world
    p = problems[0]
    cut = p.solution.split("####")[0]
    texts = [p.solution, cut, wrong_solution(p), p.solution, cut]
    traces = attribute(model, tokenizer, [p.prompt] * 5, texts, ["entropy"])
    path = tmp_path / "r.db"
    with Store(path) as store:
        run = store.add_run("reasons", model="tiny")
        store.add_traces(run, traces, rewards=[0.0] * 5, correct=[False] * 5,
                         extras=[{"graded": "format", "answer_format": "gsm8k"},
                                 {"graded": grade(texts[1], p.answer, "gsm8k").why}, {},
                                 {"graded": "format_right", "answer_format": "gsm8k"},
                                 {"graded": "truncated", "new_tokens": 24}])
        records = [store.trace(i) for i in store.trace_ids(run)]
    assert [reward_reason(r) for r in records] == [
        "answer not in the format graded (gsm8k)", "no answer statement", "wrong value",
        "right value, other format: the grader reads only its own format (gsm8k)",
        "cut off at 24 tokens before an answer; generate with a larger --max-new-tokens"]
    with TestClient(create_app(path), base_url=BASE) as c:
        assert _reason(c.get(f"/traces/{records[0].id}").text) == "answer not in the format graded (gsm8k)"
        right_value = c.get(f"/traces/{records[3].id}").text
        assert 'id="other-format">right value, other format</span>' in right_value
        assert 'class="badge wrong"' not in right_value  # one verdict, not two
        unscored = c.get(f"/traces/{records[4].id}").text  # no answer span: nothing scored
        assert "none scored" in unscored and "scored of" not in unscored and "· probe" not in unscored


def test_the_legend_starts_as_importance_and_has_a_place_for_the_script(client, ids):
    page = client.get(f"/traces/{ids['demo_traces'][0]}").text
    legend = re.search(r'<span id="colour-legend">(.*?)</span> ·', page, re.S).group(1)
    assert "low importance" in legend and "high" in legend
    assert '<option value="advantage">reshaped advantage' in page


def test_the_report_notes_that_a_step_methods_recall_is_constant_within_a_step():
    report = {"recall": [{"subset": "all", "oracle": "direct", "method": m, "recall": 0.5, "ci95": [0, 1],
                          "ap": 0.5, "n": 3} for m in ("oar_p", "oar_p_step")],
              "agreement": {}, "credit": []}
    assert report_view(report, "all")["step_methods"] == ["oar_p_step"]
    report["recall"] = report["recall"][:1]
    assert report_view(report, "all")["step_methods"] == []


def test_the_report_page_shows_the_note_only_with_a_step_method(client, ids, tmp_path, world):
    assert 'id="step-method-note"' not in client.get(f"/runs/{ids['demo']}/report").text
    from oar_attrib.analysis.run_summary import summarise

    problems, tokenizer, model = world
    path = tmp_path / "steps.db"
    with Store(path) as store:
        run = store.add_run("steps", model="tiny")
        p = problems[1]
        traces = attribute(model, tokenizer, [p.prompt] * 2, [p.solution, wrong_solution(p)],
                           ["oar_p", "oar_p_step"])
        store.add_traces(run, traces, rewards=[1.0, 0.0], oracles=[p.oracle(p.solution), p.oracle(wrong_solution(p))])
        summarise(store, run)
    with TestClient(create_app(path), base_url=BASE) as c:
        page = c.get(f"/runs/{run}/report").text
    assert 'id="step-method-note"' in page and "constant within a step" in page


@pytest.mark.slow
def test_step_level_methods_are_exactly_those_constant_within_each_step(world):
    """The step methods (`unit` "step" in the registry, the report's note) against every registered method's scores: a
    method is listed iff its scores are equal on every step's scored tokens."""
    problems, tokenizer, model = world
    p = problems[2]
    methods = available_methods()
    (trace,) = attribute(model, tokenizer, p.prompt, p.solution, methods,
                         method_params={"resample": {"n_samples": 2}})
    assert len(trace.steps) >= 2
    for method in methods:
        scores = trace.scores[method]
        constant = all(len({scores[i] for i in range(a, b) if trace.scored[i]}) <= 1 for a, b in trace.steps)
        assert constant == (method in step_methods()), method


def test_the_run_page_counts_groups_without_signal_and_marks_them(tmp_path, world):
    """Group 0 all wrong (no GRPO signal), group 1 mixed: the run page says 1 of 2 groups in
    one line with the remedy and marks group 0's traces; their trace pages say it too."""
    problems, tokenizer, model = world
    p = problems[0]
    texts = [wrong_solution(p), wrong_solution(p), p.solution, wrong_solution(p)]
    traces = attribute(model, tokenizer, [p.prompt] * 4, texts, ["entropy"])
    path = tmp_path / "g.db"
    with Store(path) as store:
        run = store.add_run("groups", model="tiny")
        store.add_traces(run, traces, rewards=[0.0, 0.0, 1.0, 0.0], correct=[False, False, True, False],
                         groups=[0, 0, 1, 1])
        ids = store.trace_ids(run)
    with TestClient(create_app(path), base_url=BASE) as c:
        page = c.get(f"/runs/{run}").text
        assert ('<p class="warn" id="signal">1 of 2 groups carry no GRPO signal (1 with every answer '
                "wrong, 0 with every answer right)") in page
        assert page.count(">no signal</span>") == 2
        flat = c.get(f"/traces/{ids[0]}").text
        assert 'id="no-signal"' in flat and "easier questions (every answer wrong)" in flat and "harder" not in flat
        assert 'id="no-signal"' not in c.get(f"/traces/{ids[2]}").text


def test_the_report_of_a_run_without_oracle_or_summaries_says_why_and_what_to_run(tmp_path, monkeypatch):
    """A JSONL's run has no oracle: no `direct`/`chain` columns, a line saying why. A run
    stopped by Ctrl-C has no summaries yet: the page names the command that finishes it."""
    import json

    from oar_attrib import attribution, cli
    from oar_attrib.world import generate_problems

    src, db = tmp_path / "in.jsonl", tmp_path / "runs.db"
    problems = generate_problems(2, "default", seed=3, split="test")
    src.write_text("".join(json.dumps({"prompt": p.prompt, "response": p.solution}) + "\n" for p in problems))
    argv = ["attribute", "--input", str(src), "--out", str(db), "--methods", "random", "--batch-size", "1",
            "--no-progress"]
    real, calls = attribution._attribute_batch, []

    def stopped_at_the_second(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(attribution, "_attribute_batch", stopped_at_the_second)
    assert cli.main(argv) == 130
    with TestClient(create_app(db), base_url=BASE) as c:
        page = c.get("/runs/1/report").text
    assert 'id="no-summary"' in page and "summarise(Store(path)" not in page
    assert f"<code><bdi>oar attribute --input {src} --out runs.db</bdi></code> resumes it" in page
    monkeypatch.setattr(attribution, "_attribute_batch", real)
    assert cli.main(argv) == 0  # resumed and summarised
    with TestClient(create_app(db), base_url=BASE) as c:
        page = c.get("/runs/1/report").text
    assert 'id="no-summary"' not in page and 'id="no-oracle"' in page
    assert "<th>direct" not in page and "<th>chain" not in page


def test_an_answer_stated_inside_the_reasoning_is_said_on_the_trace_page(tmp_path, world):
    """`The answer is 63.` stated, then more reasoning, then the final statement: the first is
    reasoning (the span is the last), scored, and the page says so; a plain trace says nothing."""
    from oar_attrib.weights.settings import ReshapeSettings
    from oar_attrib.webapp.views import earlier_answer

    problems, tokenizer, model = world
    twice = "k=2+3=5. The answer is 63. m=5*2=10.\nThe answer is 63."
    plain = "k=2+3=5. m=5*2=10.\nThe answer is 10."
    traces = attribute(model, tokenizer, [problems[0].prompt] * 2, [twice, plain], ["random"],
                       ReshapeSettings(answer_format="answer_is"))
    path = tmp_path / "twice.db"
    with Store(path) as store:
        run = store.add_run("twice", model="tiny")
        store.add_traces(run, traces)
        first, second = (store.trace(i) for i in store.trace_ids(run))
    assert earlier_answer(first) == "The answer is 63" and earlier_answer(second) is None
    assert first.scored[[i for i, (a, _) in enumerate(first.offsets) if a == twice.index("63")]].all()
    with TestClient(create_app(path), base_url=BASE) as c:
        assert 'id="earlier-answer"' in c.get(f"/traces/{first.id}").text
        assert 'id="earlier-answer"' not in c.get(f"/traces/{second.id}").text
