"""Live attribution: run the loaded model on a user's own prompt + response."""
from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from oar_attrib.errors import InputError
from oar_attrib.store import TraceRecord
from oar_attrib.store.records import json_safe

from ..deps import LiveDep, SettingsDep, TemplatesDep
from ..schemas import AttributeRequest
from ..views import trace_view

router = APIRouter(tags=["attribute"])


@router.post(
    "/api/attribute",
    summary="Attribute a prompt + response with the loaded model",
    responses={413: {"description": "body or text over the size limit"},
               422: {"description": "malformed body, unknown method or unscorable text"},
               429: {"description": "a live attribution is already running"},
               503: {"description": "the app was started without a model"}},
)
def attribute_text(body: AttributeRequest, live: LiveDep, settings: SettingsDep) -> dict:
    """The attribution (`TraceAttribution.to_dict()`) and the heatmap view the page draws."""
    methods = list(dict.fromkeys(body.methods))  # a method asked twice runs once
    unknown = [m for m in methods if m not in settings.live_methods]
    if unknown:
        raise InputError(
            f"method(s) {unknown} cannot run live; choose from {list(settings.live_methods)}"
        )
    result = live.run(body.prompt, body.response, methods, body.probe, body.advantage)
    record = TraceRecord.from_attribution(result)
    view = trace_view(record, methods[0], "direct")
    return {"attribution": json_safe(result.to_dict()),
            "view": {"pieces": view["pieces"], "payload": view["payload"]}}


@router.get("/attribute", response_class=HTMLResponse, summary="Page: attribute your own text")
def attribute_page(request: Request, live: LiveDep, templates: TemplatesDep, settings: SettingsDep):
    context = {"model_name": live.name, "settings": settings}
    return templates.TemplateResponse(request, "attribute.html", context)
