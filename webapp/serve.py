"""The trace browser as an ASGI app factory, for an ASGI server run from a checkout:

    OAR_STORE=runs/train-arith-tiny/runs.db OAR_MODEL=arith-tiny \
        uvicorn --factory --app-dir webapp serve:create --host 127.0.0.1 --port 8000

Environment: OAR_STORE (required) the run store to browse; OAR_MODEL (optional) a bundled
model name or checkpoint folder for the live page, loaded in the app's lifespan; OAR_DTYPE
(default float32). The code is `oar_attrib.webapp` (`oar web` runs the same app); this folder
is not a package.
"""
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # a checkout without `pip install`

from oar_attrib.webapp.main import create_app  # noqa: E402


def create():
    """The app over $OAR_STORE, with $OAR_MODEL for the live page when set."""
    store = os.environ.get("OAR_STORE")
    if not store:
        raise SystemExit("set OAR_STORE to a run store (.db), e.g. OAR_STORE=runs/x/runs.db")
    return create_app(store, model=os.environ.get("OAR_MODEL") or None,
                      dtype=os.environ.get("OAR_DTYPE", "float32"))
