"""Every instrument that takes `--data` runs on the bundled model, which has no chat template:
word problems (`--data wordworld:tiny`) are asked as plain text (`data.recall.record_prompt`)
and the run ends with a report; a record whose prompt is a list of chat messages cannot be
encoded for that model and is refused in one line that says what to do (exit 2, no
traceback), before any oracle runs."""
import dataclasses
import json

import pytest

from oar_attrib import cli
from oar_attrib.instruments import available_instruments, instrument_spec

# Each instrument's smallest run: a few units, the cheapest settings.
SMALL = {
    "data": ["--methods", "random", "--cf-positions", "2"],
    "graded": ["--methods", "random", "--graded-k", "2", "--positions", "2"],
    "advantage": ["--methods", "random", "--continuations", "2", "--group-samples", "2"],
    "intervention": ["--continuations", "2"],
}
TAKES_DATA = [name for name in available_instruments()
              if "data" in {f.name for f in dataclasses.fields(instrument_spec(name).settings)}]


def test_every_instrument_that_takes_data_is_run_here():
    assert sorted(TAKES_DATA) == sorted(SMALL)


@pytest.mark.parametrize("name", TAKES_DATA)
def test_word_problems_run_on_the_bundled_model(name, capsys):
    argv = ["recall", name, "--model", "arith-tiny", "--data", "wordworld:tiny", "--n", "2", "--json",
            "--no-progress", *SMALL[name]]
    assert cli.main(argv) == 0
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    assert json.loads(out)["n"] >= 2


@pytest.mark.parametrize("name", TAKES_DATA)
def test_a_chat_prompt_for_a_model_without_a_template_is_one_line(name, tmp_path, capsys):
    data = tmp_path / "chat.jsonl"
    record = {"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "a=1+2. find a."}],
              "response": "a=1+2=3. #### 3", "answer": "3"}
    data.write_text(json.dumps(record) + "\n" + json.dumps(record) + "\n")
    argv = ["recall", name, "--model", "arith-tiny", "--data", str(data), "--n", "2", "--no-progress", *SMALL[name]]
    assert cli.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and err.startswith(f"oar recall {name}: error: ")
    assert "has no chat" in err and "--model" in err and ("as text" in err or "as a string" in err)
