"""`oar attribute` tokenizes each response once: the encoding that judged a line (too long,
unscorable, ...) is the one the methods score, and it gives the same traces as encoding again."""
import json

from oar_attrib.attribution import attribute
from oar_attrib.cli import main
from oar_attrib.inputs import encoding
from oar_attrib.inputs.encoding import encode_pair
from oar_attrib.models import load_model
from oar_attrib.world import generate_problems


def test_each_response_is_tokenized_once_on_the_command_line(tmp_path, monkeypatch):
    problems = generate_problems(3, "default", seed=1, split="test")
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"prompt": p.prompt, "response": p.solution}) + "\n" for p in problems)
                   + json.dumps({"prompt": "x", "response": ""}) + "\n")  # judged bad before any encoding
    seen = []
    real = encoding._encode_response

    def counted(tokenizer, response, ids):
        seen.append(response)
        return real(tokenizer, response, ids)

    monkeypatch.setattr(encoding, "_encode_response", counted)
    out = tmp_path / "out.jsonl"
    assert main(["attribute", "--input", str(src), "--out", str(out), "--methods", "entropy",
                 "--batch-size", "2", "--no-progress"]) == 2  # the empty line is skipped
    assert sorted(seen) == sorted(p.solution for p in problems)  # once each (twice before)
    assert [json.loads(x)["line"] for x in out.read_text().splitlines()] == [1, 2, 3]


def test_attributing_the_encoded_pairs_equals_attributing_the_texts():
    model, tokenizer = load_model("arith-tiny")
    problems = generate_problems(3, "default", seed=2, split="test")
    prompts, responses = [p.prompt for p in problems], [p.solution for p in problems]
    pairs = [encode_pair(tokenizer, q, r) for q, r in zip(prompts, responses)]
    methods = ["oar_p", "entropy"]
    again = attribute(model, tokenizer, prompts, responses, methods, batch_size=2)
    once = attribute(model, tokenizer, prompts, responses, methods, batch_size=2, encoded=pairs)
    result = lambda t: {k: v for k, v in t.to_dict().items() if k != "timings"}  # noqa: E731 (seconds vary)
    assert [result(t) for t in once] == [result(t) for t in again]
    assert sum(sum(t.scored) for t in once) > 0
