"""Experiments: the grids of training runs (methods x seeds) in the store and their reports."""
from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request
from fastapi.responses import HTMLResponse

from oar_attrib.store import NotFoundError
from oar_attrib.store.experiments import open_readonly

from ..deps import StoreDep, TemplatesDep

router = APIRouter(tags=["experiments"])
ExperimentName = Annotated[str, Path(min_length=1, max_length=200, description="name of an experiment")]


def _names(store) -> list[str]:
    try:
        with open_readonly(store.path) as db:
            return [name for _, name in db.experiments()]
    except NotFoundError:  # a store without experiment tables holds no experiments
        return []


def _report(store, name: str):
    from oar_attrib.reports.experiment import build_report

    with open_readonly(store.path) as db:
        return build_report(db, name)


@router.get("/api/experiments", summary="The names of the experiments in the store")
def list_experiments(store: StoreDep) -> list[str]:
    return _names(store)


@router.get("/api/experiments/{name}", summary="An experiment's report: curves, finals, paired differences")
def get_experiment(name: ExperimentName, store: StoreDep) -> dict:
    return _report(store, name).to_dict()


@router.get("/experiments", response_class=HTMLResponse, summary="Page: the experiments")
def experiments_page(request: Request, store: StoreDep, templates: TemplatesDep):
    return templates.TemplateResponse(request, "experiments.html", {"names": _names(store)})


@router.get("/experiments/{name}", response_class=HTMLResponse, summary="Page: an experiment's report")
def experiment_page(request: Request, name: ExperimentName, store: StoreDep, templates: TemplatesDep):
    from oar_attrib.reports.experiment_figures import accuracy_keys

    report = _report(store, name)
    data = report.to_dict()
    payload = {"methods": report.methods, "curves": data["curves"], "paired": data["paired"],
               "metric": report.metric, "seconds": report.seconds, "accuracy_keys": accuracy_keys(report)}
    rows = []
    for method in report.methods:
        finals = report.finals.get(report.metric, {}).get(method, {})
        rows.append({"method": method, "finals": finals,
                     "mean": sum(finals.values()) / len(finals) if finals else None,
                     "paired": report.paired.get(report.metric, {}).get(method),
                     "seconds": report.seconds.get(method, {}).get("step")})
    context = {"report": report, "rows": rows, "payload": payload,
               "finished": sum(c["finished"] for c in report.cells)}
    return templates.TemplateResponse(request, "experiment.html", context)
