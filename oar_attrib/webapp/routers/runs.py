"""Runs: the list of runs, and one run's traces in a filterable, sortable table."""
from __future__ import annotations

import math
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from ..deps import RunId, SettingsDep, StoreDep, TemplatesDep
from ..schemas import TraceFilter

router = APIRouter(tags=["runs"])
FilterDep = Annotated[TraceFilter, Query()]


def _page(store, run_id: int, filters: TraceFilter, page_size: int) -> dict:
    rows, total = store.traces(run_id, **filters.store_kwargs(), limit=page_size,
                               offset=(filters.page - 1) * page_size)
    return {"traces": [r.to_dict() for r in rows], "total": total, "page": filters.page,
            "pages": max(1, math.ceil(total / page_size)), "page_size": page_size}


@router.get("/api/runs", summary="Every run in the store, newest first")
def list_runs(store: StoreDep) -> list[dict]:
    return [r.to_dict() for r in store.runs()]


@router.get("/api/runs/{run_id}", summary="One run")
def get_run(run_id: RunId, store: StoreDep) -> dict:
    return {**store.run(run_id).to_dict(), "steps": store.steps(run_id)}


@router.get("/api/runs/{run_id}/traces", summary="A page of a run's traces, filtered and sorted")
def list_traces(run_id: RunId, filters: FilterDep, store: StoreDep, settings: SettingsDep) -> dict:
    return _page(store, run_id, filters, settings.page_size)


@router.get("/", response_class=HTMLResponse, summary="Page: the runs")
def runs_page(request: Request, store: StoreDep, templates: TemplatesDep):
    return templates.TemplateResponse(request, "runs.html", {"runs": store.runs()})


@router.get("/runs/{run_id}", response_class=HTMLResponse, summary="Page: a run's traces")
def run_page(request: Request, run_id: RunId, filters: FilterDep, store: StoreDep,
             templates: TemplatesDep, settings: SettingsDep):
    from ...analysis.signal import flat_groups, signal_line, store_signal

    run = store.run(run_id)
    context = {"run": run, "steps": store.steps(run_id), "filters": filters,
               **_page(store, run_id, filters, settings.page_size)}
    context["signal"] = signal_line(store_signal(store, run_id))
    if context["signal"]:  # the traces of this page whose group has every reward equal
        flat = flat_groups(((r.step, r.group), r.reward, r.correct) for r in store.traces(run_id, limit=1 << 62)[0]
                           if r.group is not None)
        context["no_signal"] = {t["id"] for t in context["traces"] if (t["step"], t["group"]) in flat}
    return templates.TemplateResponse(request, "run.html", context)
