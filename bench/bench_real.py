"""Every importance method on a real model: seconds and peak memory of each, on the model's own
answers, against the targets (peak RSS <= 3 GB per method, all methods <= 10 minutes) and, for
token OAR-P, against the CPU's FLOP limit.

The trace set: SmolLM2-135M-Instruct (fp32) decodes greedily (at most 300 new tokens) the six
GSM8K questions of tests/data/gsm8k_test_sample.jsonl, asked through its chat template to end
with '#### <answer>'; the set is kept in the cache (`catalogue.cache_dir()/bench`) and reused.
Each method then runs alone in a fresh process (`attribute(...)` on the six traces, as
`oar attribute` does), which reports its wall seconds (model load excluded, printed apart) and
its peak resident memory (VmHWM: the whole process, model included). "old" runs the settings
before the memory bounds where that is cheap (OAR-P's fixed 16384-token CPU forwards, one
forward or backward over all rows for OAR-G, GRAIL and entropy; IG's path on whole rows instead
of on the prompt's cache); IG's first setting (all 32 path copies at once) is not run: it
peaked at 13.7 GB on one 300-token trace.

The FLOP limit of token OAR-P: `bench_oar_p.exact_flops` counts what the definition needs with
every reuse it allows (the clean pass of each row, plus per scored t the window
[min(t, q_1), q_K] on the clean cache: 2 x decoder parameters per token, attention per
query-key pair, the head at the probe sites); a square fp32 matrix product timed in the same
process with the same threads gives the CPU's rate; "x limit" = seconds / (FLOPs / rate).

    python bench/bench_real.py                      # new settings, then old ones beside them
    python bench/bench_real.py --methods entropy oar_g --no-old --threads 2
    python bench/bench_real.py --methods oar_p --traces 5   # the short trace: OAR-P's FLOP ratio
    python bench/bench_real.py --methods oar_g --no-old --method-params '{"oar_g": {"n_noise": 8}}'
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

METHODS = ("oar_p", "oar_p_step", "oar_p_hier", "oar_g", "entropy", "grail", "ig", "random")
MODEL = "smollm2-135m"
QUESTIONS = ROOT / "tests" / "data" / "gsm8k_test_sample.jsonl"
MAX_NEW_TOKENS = 300
TARGET_RSS_GB = 3.0
TARGET_TOTAL_S = 600.0
# The settings before the memory bounds (and IG's before the prompt cache), as method
# parameters; IG's first (internal_batch_size=None: every path copy at once) is left out on
# purpose (13.7 GB).
OLD = {
    "ig": {"reuse_prefix": False},
    "oar_p": {"max_batch_tokens": 16384},
    "oar_p_step": {"max_batch_tokens": 16384},
    "oar_p_hier": {"max_batch_tokens": 16384},
    "oar_g": {"max_batch_tokens": 16384},
    "grail": {"max_batch_tokens": 16384},
    "entropy": {"max_batch_tokens": 16384},
    "random": {},
}


def trace_set(model, tokenizer) -> list[dict]:
    """The six (prompt, response) traces, decoded once and cached."""
    from oar_attrib.models.catalogue import cache_dir
    from oar_attrib.models.generation import generate
    from oar_attrib.training.data import format_prompt

    path = cache_dir() / "bench" / f"{MODEL}-gsm8k6.jsonl"
    if path.is_file():
        return [json.loads(line) for line in path.read_text().splitlines()]
    questions = [json.loads(line) for line in QUESTIONS.read_text().splitlines()]
    prompts = [format_prompt(q["question"], tokenizer, "gsm8k") for q in questions]
    texts = [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in prompts]
    ids = generate(model, tokenizer, texts, max_new_tokens=MAX_NEW_TOKENS, batch_size=len(texts))
    traces = [{"prompt": p, "response": tokenizer.decode(row, skip_special_tokens=True)}
              for p, row in zip(prompts, ids)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(t) + "\n" for t in traces))
    return traces


def peak_rss_gb() -> float:
    """This process's peak resident memory (VmHWM), GB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024 / 1e9
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9


def worker(method: str, params: dict, threads: int, picked: list[int] | None) -> dict:
    """Run one method on the trace set in this process; what the parent prints."""
    from bench_oar_p import exact_flops, matrix_rate
    from oar_attrib.attribution import attribute
    from oar_attrib.inputs.encoding import encode_pairs
    from oar_attrib.models import load_model

    torch.set_num_threads(threads)
    start = time.perf_counter()
    model, tokenizer = load_model(MODEL)
    traces = trace_set(model, tokenizer)
    traces = [traces[i] for i in picked] if picked else traces
    with torch.no_grad():  # touches every weight (a lazily mapped file counts once read)
        model(torch.zeros((1, 8), dtype=torch.long))
    load_s = time.perf_counter() - start
    prompts, responses = [t["prompt"] for t in traces], [t["response"] for t in traces]
    batch, _ = encode_pairs(tokenizer, prompts, responses)
    out = dict(method=method, params=params, load_s=load_s, rss_loaded_gb=peak_rss_gb(),
               tokens=[int(n) for n in batch.lengths], scored=int((batch.scored_mask & batch.has_answer[:, None]).sum()))
    if method == "oar_p":
        out["tflop"] = exact_flops(model, batch) / 1e12
        out["rate_gflops"] = matrix_rate("cpu", torch.float32, seconds=2.0) / 1e9
    start = time.perf_counter()
    result = attribute(model, tokenizer, prompts, responses, methods=[method],
                       method_params={method: params})
    out["seconds"] = time.perf_counter() - start
    out["peak_rss_gb"] = peak_rss_gb()
    out["scores_sum"] = float(sum(sum(v for v in t.scores[method] if v == v) for t in result))
    if "tflop" in out:
        out["x_limit"] = out["seconds"] / (out["tflop"] * 1e12 / (out["rate_gflops"] * 1e9))
    return out


def run_one(method: str, params: dict, threads: int, picked: list[int] | None) -> dict:
    """`worker` in a fresh process (its peak memory is its own)."""
    command = [sys.executable, __file__, "--worker", method, "--params", json.dumps(params),
               "--threads", str(threads)] + (["--traces", *map(str, picked)] if picked else [])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        return dict(method=method, params=params, error=done.stderr.strip().splitlines()[-1:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(title: str, rows: list[dict]) -> None:
    print(f"\n{title}")
    print(f"{'method':<11} {'seconds':>8} {'peak RSS GB':>12} {'x FLOP limit':>13}  params")
    for r in rows:
        if "error" in r:
            print(f"{r['method']:<11} failed: {r['error']}")
            continue
        limit = f"{r['x_limit']:.2f}" if "x_limit" in r else ""
        print(f"{r['method']:<11} {r['seconds']:>8.1f} {r['peak_rss_gb']:>12.2f} {limit:>13}  {r['params']}")
    done = [r for r in rows if "error" not in r]
    if done:
        total, peak = sum(r["seconds"] for r in done), max(r["peak_rss_gb"] for r in done)
        print(f"{'total':<11} {total:>8.1f} {peak:>12.2f}   targets: <= {TARGET_TOTAL_S:.0f} s "
              f"({'met' if total <= TARGET_TOTAL_S else 'NOT met'}), <= {TARGET_RSS_GB} GB per "
              f"method ({'met' if peak <= TARGET_RSS_GB else 'NOT met'})")
        first = done[0]
        print(f"trace tokens {first['tokens']}, scored positions {first['scored']}, model load "
              f"{first['load_s']:.1f} s, RSS after load and one forward {first['rss_loaded_gb']:.2f} GB")
        for r in done:
            if "tflop" in r:
                print(f"OAR-P: {r['tflop']:.2f} TFLOP exact, CPU fp32 matmul {r['rate_gflops']:.1f} "
                      f"GFLOP/s -> limit {r['tflop'] * 1e3 / r['rate_gflops']:.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--threads", type=int, default=2, help="torch threads of every method's process")
    parser.add_argument("--no-old", action="store_true", help="skip the old settings' table")
    parser.add_argument("--traces", nargs="+", type=int, help="indices (0-5) of the traces to run "
                        "(default all six)")
    parser.add_argument("--method-params", default="{}", help="JSON {method: {keyword: value}} "
                        "of the new settings' runs, e.g. '{\"oar_g\": {\"n_noise\": 8}}'")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--params", default="{}", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, json.loads(args.params), args.threads, args.traces)))
        return
    print(f"{MODEL} fp32, {args.threads} threads, {os.cpu_count()} CPUs; each method in its own process")
    given = json.loads(args.method_params)
    rows = [run_one(m, given.get(m, {}), args.threads, args.traces) for m in args.methods]
    table("new settings (memory-bounded defaults)", rows)
    old = []
    if not args.no_old:
        old = [run_one(m, OLD[m], args.threads, args.traces) for m in args.methods if m in OLD]
        table("old settings (IG: whole rows, no prompt cache; IG's first default, every path copy "
              "at once, is not run: 137 s, 13.7 GB on one 300-token trace)", old)
    if args.json:
        args.json.write_text(json.dumps({"new": rows, "old": old}, indent=1))


if __name__ == "__main__":
    main()
