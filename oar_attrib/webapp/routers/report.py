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
    run = store.run(run_id)
    context = {"run": run, "report": report, "resume": _resume_command(store, run), **report_view(report, subset)}
    return templates.TemplateResponse(request, "report.html", context)


def _resume_command(store, run) -> str | None:
    """The command that finishes an `oar attribute --out` run and computes its summaries (the
    run's config names its input), or None for a run another command wrote."""
    import shlex

    from .traces import store_argument

    source = run.config.get("input")
    if not isinstance(source, str):
        return None
    return f"oar attribute --input {shlex.quote(source)} --out {store_argument(store)}"
