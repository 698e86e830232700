"""`python -m oar_attrib.training`: the same as `oar train` (see oar_attrib/training/cli.py)."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
