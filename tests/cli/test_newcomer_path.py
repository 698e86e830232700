"""A newcomer's path through the real model: questions -> `oar generate` (SmolLM2-135M) ->
`oar attribute` interrupted as soon as its first trace is written, then resumed -> the pages.
Kept cheap: one question, two short answers, one method."""
from __future__ import annotations

import json
import re

import pytest

from oar_attrib import attribution, cli
from oar_attrib.cli import outputs
from oar_attrib.errors import ModelLoadError
from oar_attrib.models import load_model


@pytest.fixture(scope="module")
def smollm2_cached():
    try:
        load_model("smollm2-135m")
    except ModelLoadError as err:  # not cached and offline: the path has no model to run
        pytest.skip(str(err).splitlines()[0])


def test_generate_attribute_interrupted_resumed_and_the_pages(tmp_path, monkeypatch, capsys, smollm2_cached):
    from fastapi.testclient import TestClient

    from oar_attrib.webapp.main import create_app

    questions = tmp_path / "questions.jsonl"
    questions.write_text(json.dumps({"question": "Tom has 2 apples and buys 3 more. How many apples "
                                     "does he have?", "answer": "5"}) + "\n")
    answers = tmp_path / "t.jsonl"
    assert cli.main(["generate", "--data", str(questions), "--out", str(answers), "--samples", "2",
                     "--max-new-tokens", "24", "--no-progress"]) == 0
    generated = [json.loads(x) for x in answers.read_text().splitlines()]
    assert len(generated) == 2
    db = tmp_path / "runs.db"
    # --batch-size 1: an answer cut off at 24 tokens has nothing scored, and such cheap traces
    # share a batch by default (tests/cli/test_attribute_streams.py checks the default batches)
    argv = ["attribute", "--input", str(answers), "--out", str(db), "--methods", "oar_p", "--no-progress",
            "--batch-size", "1"]
    real_write = outputs.StoreOutput.write

    def write_then_stop(self, records):  # Ctrl-C as soon as the first trace is written
        real_write(self, records)
        raise KeyboardInterrupt

    monkeypatch.setattr(outputs.StoreOutput, "write", write_then_stop)
    assert cli.main(argv) == 130
    err = capsys.readouterr().err
    assert "interrupted; 1 lines kept" in err
    assert "plain-string prompts" not in err  # `oar generate` wrote chat messages
    monkeypatch.setattr(outputs.StoreOutput, "write", real_write)
    scored: list[str] = []
    real_batch = attribution._attribute_batch

    def counted(model, tokenizer, prompts, responses, *args, **kwargs):
        scored.extend(responses)
        return real_batch(model, tokenizer, prompts, responses, *args, **kwargs)

    monkeypatch.setattr(attribution, "_attribute_batch", counted)
    assert cli.main(argv) == 0
    assert scored == [generated[1]["response"]]  # the first answer is not scored again
    assert "1 lines already there" in capsys.readouterr().err
    with TestClient(create_app(str(db)), base_url="http://127.0.0.1") as client:
        run_page = client.get("/runs/1")
        trace = client.get("/traces/1")
    linked = set(re.findall(r'href="/traces/(\d+)', run_page.text))  # a trace may be linked twice
    assert run_page.status_code == 200 and len(linked) == 2
    assert trace.status_code == 200 and "No attribution is stored" not in trace.text
