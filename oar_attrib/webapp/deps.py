"""Typed dependencies of the routers: the store, templates, settings and live model, and the
validated forms of ids. Tests swap any of them with `app.dependency_overrides`."""
from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Path, Request
from fastapi.templating import Jinja2Templates

from oar_attrib.store import Store

from .live import LiveAttributor, LoadingLiveModel, NoLiveModel
from .settings import WebSettings

# SQLite integers are signed 64-bit: a larger id would overflow in the driver, not 404.
MAX_ID = 2**63 - 1


def get_store(request: Request) -> Store:
    return request.app.state.store


def get_templates(request: Request) -> Jinja2Templates:
    return request.app.state.templates


def get_settings(request: Request) -> WebSettings:
    return request.app.state.settings


def get_live(request: Request) -> LiveAttributor | LoadingLiveModel | NoLiveModel:
    return request.app.state.live


StoreDep = Annotated[Store, Depends(get_store)]
TemplatesDep = Annotated[Jinja2Templates, Depends(get_templates)]
SettingsDep = Annotated[WebSettings, Depends(get_settings)]
LiveDep = Annotated[LiveAttributor | LoadingLiveModel | NoLiveModel, Depends(get_live)]
RunId = Annotated[int, Path(ge=1, le=MAX_ID, description="id of a run in the store")]
TraceId = Annotated[int, Path(ge=1, le=MAX_ID, description="id of a trace in the store")]
