"""Reshaped GRPO from a checkout: the script launchers run (the code is `oar_attrib.training`).

    python training/train.py --preset arith-tiny --dry-run
    accelerate launch --config_file training/accelerate/zero2.yaml training/train.py --preset math-7b model=...
    python -m torch.distributed.run --nproc_per_node 2 training/train.py --preset arith-tiny

Takes what `oar train` takes (`--help`). This folder is not a package: `oar_attrib` is the only
import name, found from the installed package or, in a plain checkout, the repository root.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # a checkout without `pip install`

from oar_attrib.training.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
