"""bench/bench_advantage.py at a tiny RANDOM-weight shape on CPU: a shape with no EOS decodes
every continuation to --new-tokens both ways, so batched and one-by-one count the same tokens,
and --one-by-one-seconds stops after the first sample when it cannot wait for more."""
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


def run(bench, capsys, samples: int, new_tokens: int, *flags) -> tuple[list[str], dict]:
    bench.main(["--model", "qwen2-tiny", "--device", "cpu", "--samples", str(samples), "--new-tokens",
                str(new_tokens), "--prompt-tokens", "8", *flags])
    lines = capsys.readouterr().out.strip().splitlines()
    return lines, json.loads(lines[-1])


def test_a_random_shape_decodes_the_same_tokens_batched_and_one_by_one(bench, capsys):
    lines, result = run(bench, capsys, 3, 5)
    assert "RANDOM weights" in lines[0] and "no EOS" in lines[0]
    assert result["weights"] == "RANDOM" and result["eos"] is False
    assert (result["device"], result["dtype"], result["gpu"]) == ("cpu", "float32", None)
    assert result["shape"] == {"hidden": 32, "intermediate": 64, "layers": 2, "heads": 4, "kv_heads": 2,
                               "vocab": 151936}
    assert result["prefix_tokens"] == 8 and result["one_by_one_samples"] == 3
    assert result["batched_tokens"] == result["one_by_one_tokens"] == 3 * 5
    assert result["batched_tokens_per_s"] > 0 and result["one_by_one_tokens_per_s"] > 0
    assert result["ratio_batched_over_one_by_one"] == pytest.approx(
        result["one_by_one_s"] / result["batched_s"], rel=0.05)
    assert result["batched_x_limit"] > 0 and result["one_by_one_x_limit"] > 0


def test_one_by_one_stops_at_its_seconds_after_one_sample(bench, capsys):
    _, result = run(bench, capsys, 2, 3, "--one-by-one-seconds", "1e-9")
    assert result["one_by_one_samples"] == 1 and result["one_by_one_tokens"] == 3
    assert result["batched_tokens"] == 2 * 3


def test_wrong_flags_are_refused_in_one_line(bench, capsys):
    with pytest.raises(SystemExit):
        bench.main(["--model", "qwen2-tiny", "--samples", "0"])
    assert "--samples" in capsys.readouterr().err
