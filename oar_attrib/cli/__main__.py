"""`python -m oar_attrib.cli`: the `oar` command."""
import sys

from . import main

sys.exit(main())
