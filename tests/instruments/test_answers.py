"""The instruments' one sampler of groups (`answers.sampled_group`, GRPO's groups for
`advantage`, KTAE's for `graded`) and their greedy answers: a group is seeded by its cache key,
so it is the same texts whichever run, cache or position asks for it; read back, it is checked
against the hash it was kept with; greedy answers are decoded once and read back."""
import json

import pytest

from oar_attrib.errors import InputError
from oar_attrib.instruments.answers import greedy_answers, sampled_group, texts_hash
from oar_attrib.instruments.base import Run
from oar_attrib.instruments.cache import OracleCache
from oar_attrib.instruments.graded.oracle import GradedSettings
from oar_attrib.world import generate_problems


@pytest.fixture(scope="module")
def prompts(bundled):
    _, tok = bundled
    return [tok(p.prompt)["input_ids"] for p in generate_problems(3, "recall", seed=5, split="test")]


def _run(bundled, path=None, seed=0) -> Run:
    model, tok = bundled
    return Run(model, tok, OracleCache(path), GradedSettings(seed=seed))


def test_a_group_is_the_same_texts_whichever_run_or_position_asks_for_it(bundled, prompts):
    one, other = _run(bundled), _run(bundled)
    first = [sampled_group(one, ids, 3, 1.0, 24) for ids in prompts]
    assert sampled_group(other, prompts[2], 3, 1.0, 24) == first[2]  # alone, in another cache
    assert one.cache.counts["group"] == {"cached": 0, "computed": 3}
    assert [sampled_group(one, ids, 3, 1.0, 24) for ids in prompts] == first  # read back
    assert one.cache.counts["group"] == {"cached": 3, "computed": 3}
    assert sampled_group(_run(bundled, seed=1), prompts[2], 3, 1.0, 24) != first[2]  # the run's seed keys it


def test_a_group_read_back_of_other_texts_or_size_is_refused(bundled, prompts, tmp_path):
    path = tmp_path / "cache.jsonl"
    run = _run(bundled, path)
    texts = sampled_group(run, prompts[0], 2, 1.0, 24)
    run.cache.release()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    entry = next(e for e in lines if e.get("kind") == "group")
    assert entry["sha"] == texts_hash(texts)
    entry["texts"] = [t + "!" for t in entry["texts"]]
    path.write_text("".join(json.dumps(e) + "\n" for e in lines))
    with pytest.raises(InputError, match="not the ones it was written with; pass a new --cf-cache"):
        sampled_group(_run(bundled, path), prompts[0], 2, 1.0, 24)


def test_greedy_answers_are_decoded_once(bundled, prompts):
    run = _run(bundled)
    texts = greedy_answers(run, prompts, 24)
    assert greedy_answers(run, prompts, 24) == texts and len(texts) == len(prompts)
    assert run.cache.counts["answer"] == {"cached": 3, "computed": 3}
