"""bench/bench_advantage.py at a tiny RANDOM-weight shape on CPU: a shape with no EOS decodes
every continuation to its budget on every path, so the three paths write the same tokens (the
oracle's path and its reference the same continuations, checked by the script itself), and
--one-by-one-seconds stops the per-pass paths after the first boundary when it cannot wait."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TINY = (32, 64, 2, 4, 2)  # hidden, intermediate, layers, heads, kv heads (Qwen2's vocabulary)


@pytest.fixture
def bench(monkeypatch):
    """The script as a module, with a tiny shape beside the real ones and a fixed matrix rate
    (timing one would take its two seconds)."""
    pytest.importorskip("torch")
    monkeypatch.setattr(sys, "path", list(sys.path))  # the script puts bench/ on the path
    spec = importlib.util.spec_from_file_location("bench_advantage", ROOT / "bench" / "bench_advantage.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # its dataclass looks its module up
    spec.loader.exec_module(module)
    monkeypatch.setitem(module.SHAPES, "qwen2-tiny", TINY)
    monkeypatch.setattr(module, "matrix_rate", lambda device, dtype, seconds=1.0: 1e10)
    return module


def run(bench, capsys, samples: int, new_tokens: int, boundaries: int, *flags) -> tuple[list[str], dict]:
    bench.main(["--model", "qwen2-tiny", "--device", "cpu", "--samples", str(samples), "--new-tokens",
                str(new_tokens), "--boundaries", str(boundaries), "--prompt-tokens", "8", *flags])
    lines = capsys.readouterr().out.strip().splitlines()
    return lines, json.loads(lines[-1])


def test_a_random_shape_writes_the_same_tokens_on_every_path(bench, capsys):
    lines, result = run(bench, capsys, 3, 6, 3)
    assert "RANDOM weights" in lines[0] and "no EOS" in lines[0]
    assert result["weights"] == "RANDOM" and result["eos"] is False
    assert (result["device"], result["dtype"], result["gpu"]) == ("cpu", "float32", None)
    assert result["shape"] == {"hidden": 32, "intermediate": 64, "layers": 2, "heads": 4, "kv_heads": 2,
                               "vocab": 151936}
    assert (result["prompt_tokens"], result["response_tokens"], result["boundaries"]) == (8, 6, 3)
    margin = bench.REGENERATION_MARGIN
    budget = sum(6 - head + margin for head in (0, 2, 4))  # the heads of 3 equal steps of 6 tokens
    for path in ("together", "one_per_pass", "generate"):
        assert result[f"{path}_boundaries"] == 3 and result[f"{path}_tokens"] == 3 * budget
        assert result[f"{path}_tokens_per_s"] > 0 and result[f"{path}_x_limit"] > 0
    assert result["ratio_together_over_one_per_pass"] == pytest.approx(
        result["one_per_pass_s"] / result["together_s"], rel=0.1)
    assert result["seconds_per_trace"] == result["together_s"] and result["passes_together"] >= 1


def test_one_by_one_stops_at_its_seconds_after_one_boundary(bench, capsys):
    _, result = run(bench, capsys, 2, 4, 2, "--one-by-one-seconds", "1e-9")
    assert result["one_per_pass_boundaries"] == result["generate_boundaries"] == 1
    assert result["together_boundaries"] == 2


def test_wrong_flags_are_refused_in_one_line(bench, capsys):
    with pytest.raises(SystemExit):
        bench.main(["--model", "qwen2-tiny", "--samples", "0"])
    assert "--samples" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench.main(["--model", "qwen2-tiny", "--new-tokens", "2", "--boundaries", "3"])
    assert "--boundaries 3" in capsys.readouterr().err
