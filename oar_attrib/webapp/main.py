"""Builds the web app: `create_app(store_path, model=None)`.

Pages are server-rendered (Jinja2, autoescaped) with a little JS per page; every page has a
JSON twin under /api, documented at /docs. The store opens, and the model (when given)
starts loading, in the lifespan, never at import.
"""
from __future__ import annotations

import threading
from contextlib import asynccontextmanager
from pathlib import Path

import jinja2
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.templating import Jinja2Templates
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.trustedhost import TrustedHostMiddleware

from oar_attrib import __version__
from oar_attrib.errors import OARError
from oar_attrib.records.export import isolated_text, visible_text
from oar_attrib.models import check_pair
from oar_attrib.store import NotFoundError, Store, StoreError
from oar_attrib.store.errors import DatabaseError

from .errors import WebError
from .live import LiveAttributor, LoadingLiveModel, NoLiveModel
from .progress import Progress
from .routers import (align, assets, attribute, docs, experiments, profiles, progress as progress_router,
                      report, run_exports, runs, traces)
from .security import HEADERS, BodyLimitMiddleware, SecurityHeadersMiddleware
from .settings import WebSettings

TEMPLATES = Path(__file__).resolve().parent / "templates"


def make_templates() -> Jinja2Templates:
    # Autoescape everything, whatever the file name: every trace text is untrusted.
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    # Untrusted text shows its invisible and bidi controls as markers; `bdi` also isolates it.
    env.filters["visible"] = visible_text
    env.filters["bdi"] = isolated_text
    return Jinja2Templates(env=env)


def _attributor(model, tokenizer, name: str, settings: WebSettings) -> LiveAttributor:
    return LiveAttributor(model, tokenizer, max_tokens=settings.max_live_tokens,
                          max_concurrent=settings.max_live_concurrent, name=name)


def _start_live(app: FastAPI, model, settings: WebSettings,
                dtype: str = "float32") -> threading.Thread | None:
    """Put the live attributor of `model` on `app.state.live`: None (no live attribution), a
    (model, tokenizer) pair, or a bundled name / local folder. A named model loads in a thread,
    so that the pages answer at once; live requests meanwhile get 503 with Retry-After."""
    if model is None:
        app.state.live = NoLiveModel()
        return None
    if isinstance(model, (tuple, list)):
        lm, tokenizer = model
        name = getattr(getattr(lm, "config", None), "name_or_path", "") or type(lm).__name__
        app.state.live = _attributor(lm, tokenizer, name, settings)
        return None
    name = str(model)
    app.state.live = LoadingLiveModel(name)

    def load() -> None:
        from oar_attrib.models import load_model

        try:
            app.state.live = _attributor(*load_model(name, dtype=dtype), name, settings)
        except Exception as err:  # noqa: BLE001 - reported to every live request instead
            app.state.live = LoadingLiveModel(name, err)

    thread = threading.Thread(target=load, name="load-live-model", daemon=True)
    thread.start()
    return thread


def _error(request: Request, status: int, message: str, headers=None):
    """A JSON error under /api, an HTML error page elsewhere (the one path of every error)."""
    message = _printable(message)
    if request.url.path.startswith("/api/"):
        return JSONResponse({"detail": message}, status_code=status, headers=headers)
    templates: Jinja2Templates = request.app.state.templates
    return templates.TemplateResponse(request, "error.html", {"status": status, "message": message},
                                      status_code=status, headers=headers)


def _printable(value):
    """An int, or text with any lone surrogate replaced (they cannot be encoded)."""
    if isinstance(value, int):
        return value
    return str(value).encode("utf-8", "replace").decode("utf-8")


def _add_handlers(app: FastAPI) -> None:
    @app.exception_handler(NotFoundError)
    async def not_found(request: Request, exc: NotFoundError):
        return _error(request, 404, str(exc))

    @app.exception_handler(WebError)
    async def web_error(request: Request, exc: WebError):
        headers = {"retry-after": str(exc.retry_after)} if exc.retry_after else None
        return _error(request, exc.status, str(exc), headers)

    @app.exception_handler(StoreError)
    async def store_error(request: Request, exc: StoreError):
        return _error(request, 500, f"the store could not be read: {exc}")

    @app.exception_handler(DatabaseError)
    async def database_error(request: Request, exc: DatabaseError):
        # A damaged page, a file replaced under the app: the store, not the request, is wrong.
        return _error(request, 503, f"the store could not be read: {exc}; check it with "
                                    "`sqlite3 FILE 'PRAGMA integrity_check'` or rebuild it")

    @app.exception_handler(Exception)
    async def internal_error(request: Request, exc: Exception):
        # Answered by Starlette outside every middleware: the headers are added here.
        return _error(request, 500, "internal error; the server log has the details",
                      dict((k.decode(), v.decode()) for k, v in HEADERS))

    @app.exception_handler(OARError)
    async def input_error(request: Request, exc: OARError):
        # InputError, UnknownNameError, TokenizerError: the request's text or names.
        return _error(request, 422, str(exc))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError):
        # Only where and what, never the input: it may be NaN or a lone surrogate, which no
        # JSON or HTML response can carry.
        errors = [{"loc": [_printable(part) for part in e.get("loc", ())],
                   "msg": _printable(e.get("msg", "")), "type": _printable(e.get("type", ""))}
                  for e in exc.errors()]
        if request.url.path.startswith("/api/"):
            return JSONResponse({"detail": errors}, status_code=422)
        fields = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in errors)
        return _error(request, 422, f"invalid request ({fields})")

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        return _error(request, exc.status_code, str(exc.detail), getattr(exc, "headers", None))


def create_app(store_path: str | Path, model=None, *, settings: WebSettings | None = None,
               dtype: str = "float32", progress: Progress | None = None) -> FastAPI:
    """The web app over the store at `store_path`.

    model: None (no live attribution), a bundled model name or a local checkpoint folder
    (loaded at startup in `dtype`), or a (model, tokenizer) pair. progress: the progress file
    of a store being filled in the background (`oar demo`); every page shows its line.
    Raises StoreError now, not at the first request, when the path is not a readable store.
    """
    settings = settings or WebSettings()
    if isinstance(model, (tuple, list)):
        check_pair(*model)  # the check load_model makes, for a pair given directly
    path = Path(store_path)
    Store(path, readonly=True).close()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        app.state.store = Store(path, readonly=True)
        app.state.live_loader = _start_live(app, model, settings, dtype)
        try:
            yield
        finally:
            app.state.store.close()
            if app.state.live_loader is not None:
                # A Ctrl-C in the first seconds finds the model loading: the interpreter must not
                # exit under a thread inside torch (the process aborts, SIGABRT, not 130).
                app.state.live_loader.join(timeout=60)

    app = FastAPI(
        title="oar-attrib", version=__version__, lifespan=lifespan,
        docs_url=None, redoc_url=None,  # /docs is served by routers/docs.py, without a CDN
        description="Token importances of reasoning traces (OAR and baselines): runs, traces, "
                    "heatmaps, oracle recall reports, and live attribution. Every page has a "
                    "JSON twin under /api.",
    )
    app.state.settings = settings
    app.state.progress = progress
    app.state.templates = make_templates()
    app.state.templates.env.globals["progress_line"] = lambda: progress.read().line() if progress else ""
    _add_handlers(app)
    for router in (runs.router, traces.router, report.router, attribute.router, assets.router,
                   docs.router, experiments.router, progress_router.router, profiles.router,
                   run_exports.router, align.router):
        app.include_router(router)
    # Added last = outermost: the host check and the size limit run before anything else,
    # and the security headers go on every answer, the host check's 400 included.
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    if "*" not in settings.allowed_hosts:
        app.add_middleware(TrustedHostMiddleware, allowed_hosts=list(settings.allowed_hosts))
    app.add_middleware(SecurityHeadersMiddleware)
    return app
