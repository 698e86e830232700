"""Report: oracle recall per method with intervals, method agreement, credit metrics."""
from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from ..deps import RunId, StoreDep, TemplatesDep
from ..views import report_view

router = APIRouter(tags=["report"])
Subset = Annotated[Literal["all", "correct", "wrong"],
                   Query(description="traces the recall is computed on")]


@router.get("/api/runs/{run_id}/report", summary="A run's recall, agreement and credit metrics")
def get_report(run_id: RunId, store: StoreDep) -> dict:
    return store.report(run_id)


@router.get("/runs/{run_id}/report", response_class=HTMLResponse, summary="Page: a run's report")
def report_page(request: Request, run_id: RunId, store: StoreDep, templates: TemplatesDep,
                subset: Subset = "all"):
    report = store.report(run_id)
    context = {"run": store.run(run_id), "report": report, **report_view(report, subset)}
    return templates.TemplateResponse(request, "report.html", context)
