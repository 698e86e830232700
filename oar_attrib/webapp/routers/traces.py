"""Traces: one trace's heatmap over the reasoning text, with per-method charts."""
from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from ..deps import StoreDep, TemplatesDep, TraceId
from ..views import OUTLINE_SETS, trace_view

router = APIRouter(tags=["traces"])

# Method names are matched against the trace's own methods, never used to look anything up.
MethodQuery = Annotated[str | None, Query(max_length=64, pattern=r"^[A-Za-z0-9_.\-]*$",
                                          description="method to colour by (default: oar_p)")]
OracleQuery = Annotated[str, Query(max_length=32, pattern=r"^[a-z_]*$",
                                   description=f"oracle set to outline: {', '.join(OUTLINE_SETS)}")]


def pick_method(requested: str | None, available: list[str]) -> str | None:
    """The requested method if the trace has it, else oar_p, else the first one."""
    for method in (requested, "oar_p", *available):
        if method in available:
            return method
    return None


@router.get("/api/traces/{trace_id}", summary="Everything stored about one trace")
def get_trace(trace_id: TraceId, store: StoreDep) -> dict:
    return store.trace(trace_id).to_dict()


@router.get("/traces/{trace_id}", response_class=HTMLResponse, summary="Page: one trace")
def trace_page(request: Request, trace_id: TraceId, store: StoreDep, templates: TemplatesDep,
               method: MethodQuery = None, oracle: OracleQuery = "direct"):
    record = store.trace(trace_id)
    selected = pick_method(method, list(record.attributions))
    view = trace_view(record, selected, oracle)
    run = store.run(record.row.run_id)
    context = {"record": record, "run": run, "method": selected, "oracle_set": oracle, **view}
    return templates.TemplateResponse(request, "trace.html", context)
