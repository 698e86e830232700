"""`python -m training`: the same as `oar train` (see training/cli.py)."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
