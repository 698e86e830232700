"""The cost of one `oar align` batch per method, to size a run: CPU and wall seconds of each
method's weights and backward on the same screened batch, and of the screening per prompt.

The batch is the first training-sized set of mixed groups the trainer of `--preset` samples
(the same call `oar align` makes); every method is measured inside one shared forward, as a run
measures it, so the first method's backward also carries the batch's forward. CPU seconds are
this process's (`time.process_time`), the figure to size a run on a shared machine by; wall
seconds depend on the load. One thread unless --threads.

    python bench/bench_align.py --preset smollm2-words temperature=0.5         # SmolLM2, minutes of CPU
    python bench/bench_align.py --preset arith-tiny --methods none oar_g random # smoke run
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    from oar_attrib.training.align.cli import SETTING
    from oar_attrib.training.align.gradients import (ParamLayout, base_settings, check_trainer,
                                                     method_gradient, shared_forward)
    from oar_attrib.training.align.rollouts import collate, group_rows, prompt_order, screen_call
    from oar_attrib.training.align.run import trainer_settings
    from oar_attrib.training.align.settings import AlignSettings, resolve_methods
    from oar_attrib.training.launch import build_configs, build_trainer

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="smollm2-words")
    parser.add_argument("--model", default=None)
    parser.add_argument("--methods", nargs="+", default=None, help="default: oar align's default list")
    parser.add_argument("--batch-prompts", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    methods_given = [m for m in args.methods or () if not SETTING.match(m)]
    overrides = [m for m in args.methods or () if SETTING.match(m)] + list(args.overrides)
    settings = AlignSettings(preset=args.preset, model=args.model, overrides=tuple(overrides),
                             methods=tuple(methods_given), batch_prompts=args.batch_prompts, seed=args.seed)
    methods = resolve_methods(settings.methods)
    run, config = build_configs(trainer_settings(settings, Path("runs/bench-align")))
    trainer, _ = build_trainer(run, config, data_seed=args.seed)
    check_trainer(trainer)
    order, parts, prompts, screen_cpu, screen_wall, call = prompt_order(len(trainer.train_dataset), args.seed), [], 0, 0.0, 0.0, 0
    while len(parts) < args.batch_prompts:
        start = call * args.batch_prompts
        cpu, wall = time.process_time(), time.perf_counter()
        output, lines = screen_call(trainer, trainer.train_dataset, order[start:start + args.batch_prompts], call)
        screen_cpu += time.process_time() - cpu
        screen_wall += time.perf_counter() - wall
        prompts += len(lines)
        parts += [group_rows(output, g, trainer.num_generations) for g, line in enumerate(lines) if line["mixed"]]
        call += 1
    batch = collate(parts[:args.batch_prompts], trainer._tokenizer.pad_token_id, trainer.pad_to_multiple_of)
    layout, base = ParamLayout(trainer.model), base_settings(trainer)
    rows = {}
    with shared_forward(trainer):
        for choice in methods:
            gradient = method_gradient(trainer, layout, batch, choice, base)
            rows[choice.label] = gradient.seconds
            print(f"{choice.label:<18} weights {gradient.seconds['weights_cpu']:7.1f} s CPU   backward "
                  f"{gradient.seconds['backward_cpu']:6.1f} s CPU   (wall {gradient.seconds['weights']:.1f} + "
                  f"{gradient.seconds['backward']:.1f})", flush=True)
    total = sum(r["weights_cpu"] + r["backward_cpu"] for r in rows.values())
    kept = len(parts)
    summary = {"preset": args.preset, "model": run.model, "rows": int(batch["advantages"].numel()),
               "tokens": int(batch["num_items_in_batch"]), "parameters": layout.size,
               "screen": {"prompts": prompts, "mixed": kept, "cpu_seconds_per_prompt": screen_cpu / prompts,
                          "wall_seconds_per_prompt": screen_wall / prompts},
               "methods": rows, "methods_cpu_seconds": total,
               "batch_cpu_seconds": total + screen_cpu / max(kept, 1) * args.batch_prompts}
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
