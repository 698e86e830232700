"""Align store folders made from known vectors, for the statistics and the web page tests."""
import json

import numpy as np


def cos(a, b) -> float:
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def write_store(folder, star, batches, pool_halves=None, rows=8):
    """An align store folder of per-batch gradients `batches` ([{label: (pos, neg)}] in order,
    GRPO under 'none' first) against g* = `star`, with the files `summarise` reads; given
    `pool_halves` (g*_a, g*_b), also each line's dot products with them, as a run writes."""
    folder.mkdir(parents=True, exist_ok=True)
    labels = list(batches[0])
    (folder / "reference").mkdir(exist_ok=True)
    a, b = pool_halves if pool_halves is not None else (star, star)
    reference = {"pool_batches": 4, "halves": {"a": 2, "b": 2}, "split_half_cos": cos(a, b),
                 "sq": float(star @ star), "l1": float(np.abs(star).sum()), "batch_sq_mean": 4 * float(star @ star),
                 "signal_sq": float(a @ b) / 4, "seconds_per_batch": 1.0}
    if pool_halves is not None:
        reference["halves_sq"] = {"a": float(a @ a), "b": float(b @ b)}
    (folder / "reference" / "reference.json").write_text(json.dumps(reference))
    record = {"model": {"name": "test"}, "align": {"preset": "test", "batches": len(batches),
                                                   "methods": {m: {} for m in labels}}}
    (folder / "record.json").write_text(json.dumps(record))
    sums = {m: {"a": np.zeros_like(star), "b": np.zeros_like(star)} for m in labels}
    with open(folder / "results.jsonl", "w") as handle:
        for i, batch in enumerate(batches):
            half = "ab"[i % 2]
            line = {"batch": i, "half": half, "rows": rows, "methods": {}}
            grpo = batch[labels[0]]
            for m, (pos, neg) in batch.items():
                parts = {"all": (pos + neg, grpo[0] + grpo[1]), "pos": (pos, grpo[0]), "neg": (neg, grpo[1])}
                line["methods"][m] = {p: {"dot_star": float(v @ star), "sq": float(v @ v), "dot_grpo": float(v @ w),
                                          "sign_star": float(np.sign(v) @ star),
                                          **({"dot_star_a": float(v @ a), "dot_star_b": float(v @ b)}
                                             if pool_halves is not None else {})} for p, (v, w) in parts.items()}
                line["methods"][m]["seconds"] = {"weights": 0.5, "backward": 1.0}
                sums[m][half] += pos + neg
            handle.write(json.dumps(line) + "\n")
    na, nb = (len(batches) + 1) // 2, len(batches) // 2
    grpo_sums = sums[labels[0]]
    mean = {"halves": {"a": na, "b": nb}, "methods": {m: {
        "ab": float(s["a"] @ s["b"]), "aa": float(s["a"] @ s["a"]), "bb": float(s["b"] @ s["b"]),
        "star": float((s["a"] + s["b"]) @ star),
        "cross_grpo": float(s["a"] @ grpo_sums["b"] + s["b"] @ grpo_sums["a"])} for m, s in sums.items()}}
    (folder / "mean_gradients.json").write_text(json.dumps(mean))
    return folder


def random_batches(rng, n, dim, methods=("none", "m")):
    return [{m: (rng.normal(size=dim), rng.normal(size=dim)) for m in methods} for _ in range(n)]
