"""Build a store of long traces (real MATH-500 + GSM8K solutions joined to ~4000 Qwen2.5
tokens, attributed by a 2-layer Qwen2 with RANDOM weights) to try the trace browser at real
length. Needs the shared data folder (--shared, else $OAR_SHARED, else ../shared beside the
repository, else the trimmed copy under tests/data: `tests/shared_data.shared_folder`).

    python scripts/build_long_store.py --out long.db                    # every token method
    python scripts/build_long_store.py --out long.db --methods entropy grail random
    oar web --store long.db

OAR-P at 4000 tokens runs one copy per token (O(T^2) work): about half an hour on two CPU
cores; leave it out with --methods for a quick store.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from longtrace import TOKEN_METHODS, build_long_store  # noqa: E402  (tests/longtrace.py)
from shared_data import shared_folder  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="store file (a run is added)")
    parser.add_argument("--shared", help="shared folder with data/ and tokenizers/")
    parser.add_argument("--traces", type=int, default=1, help="long traces to build")
    parser.add_argument("--tokens", type=int, default=4000, help="tokens per trace, at least")
    parser.add_argument("--methods", nargs="+", default=list(TOKEN_METHODS))
    args = parser.parse_args(argv)
    start = time.perf_counter()
    run_id = build_long_store(args.out, shared=args.shared or shared_folder(), n_traces=args.traces,
                              target_tokens=args.tokens, methods=args.methods)
    print(f"run {run_id} in {args.out}: {args.traces} trace(s), methods {', '.join(args.methods)}, "
          f"{time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
