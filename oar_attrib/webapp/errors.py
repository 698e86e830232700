"""Errors of the web app that map to an HTTP status (see main.py's handlers)."""
from __future__ import annotations

from oar_attrib.errors import OARError


class WebError(OARError):
    """An error with the HTTP status it is answered with (and a Retry-After, in seconds,
    when retrying soon can succeed)."""

    status = 400
    retry_after: int | None = None


class TooLargeError(WebError):
    """A body or a live attribution over its size limit."""

    status = 413


class BusyError(WebError):
    """Every live-attribution slot is taken; retry in a moment."""

    status = 429
    retry_after = 5


class NoModelError(WebError):
    """Live attribution asked of an app started without a model (or whose model failed)."""

    status = 503


class ModelLoadingError(NoModelError):
    """Live attribution asked while the model is still loading."""

    retry_after = 5


class DamagedResultError(WebError):
    """A result folder the app was given (`--align`) whose files are not what their writer
    writes; the message names it by its name, never by the server's path."""

    status = 422
