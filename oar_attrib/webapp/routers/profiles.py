"""Credit profiles of a run (analysis.profiles): the page, and its JSON and CSV exports."""
from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, Response

from oar_attrib.analysis.profiles import DEFAULT_BINS, credit_profile, profile_rows
from oar_attrib.records.export import rows_csv

from ..deps import RunId, StoreDep, TemplatesDep
from .traces import MethodQuery, pick_method

router = APIRouter(tags=["profiles"])
BinsQuery = Annotated[int, Query(ge=1, le=200, description="relative-position bins")]


def _profile(store, run_id: int, method: str | None, bins: int) -> dict:
    run = store.run(run_id)
    chosen = pick_method(method, run.methods)
    if chosen is None:
        return {"method": None, "bins": bins, "n_traces": 0, "methods": []}
    return {**credit_profile(store.iter_traces(run_id), chosen, bins), "methods": run.methods}


@router.get("/api/runs/{run_id}/profiles", summary="A run's credit profile (JSON)")
def profile_json(run_id: RunId, store: StoreDep, method: MethodQuery = None,
                 bins: BinsQuery = DEFAULT_BINS) -> dict:
    return _profile(store, run_id, method, bins)


@router.get("/api/runs/{run_id}/profiles.csv", summary="A run's credit profile (CSV)",
            description="One row per (part, bin): part all / correct / wrong / step N, the "
                        "bin's relative position range, mean weight and traces; then one row "
                        "per step with its mean ESS ratio and top-10% mass.")
def profile_csv(run_id: RunId, store: StoreDep, method: MethodQuery = None,
                bins: BinsQuery = DEFAULT_BINS) -> Response:
    profile = _profile(store, run_id, method, bins)
    text = rows_csv(profile_rows(profile)) if profile["method"] else ""
    name = f"run-{run_id}-profile-{profile['method'] or 'none'}.csv"
    return Response(text, media_type="text/csv; charset=utf-8",
                    headers={"content-disposition": f'attachment; filename="{name}"'})


@router.get("/runs/{run_id}/profiles", response_class=HTMLResponse, summary="Page: credit profiles")
def profile_page(request: Request, run_id: RunId, store: StoreDep, templates: TemplatesDep,
                 method: MethodQuery = None, bins: BinsQuery = DEFAULT_BINS):
    profile = _profile(store, run_id, method, bins)
    return templates.TemplateResponse(request, "profiles.html",
                                      {"run": store.run(run_id), "profile": profile})
