"""Gradient alignment: the `oar align` results of the folders the app was given (`--align`)."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path as FilePath
from typing import Annotated

from fastapi import APIRouter, Path, Request
from fastapi.responses import HTMLResponse

from oar_attrib.reports.align import cpu_seconds
from oar_attrib.reports.align_folder import MEAN_GRADIENTS, REFERENCE_JSON, RESULTS, AlignFolder, AlignFolderError
from oar_attrib.store import NotFoundError

from ..deps import SettingsDep, TemplatesDep
from ..errors import DamagedResultError

router = APIRouter(tags=["align"])
AlignName = Annotated[str, Path(min_length=1, max_length=200, description="name of an align result folder")]


def results(roots) -> dict[str, FilePath]:
    """name -> folder of every align result under the given roots (a result folder holds
    record.json and a finished reference; a root may be one, or hold them), first name wins."""
    found: dict[str, FilePath] = {}
    for root in map(FilePath, roots):
        children = sorted(root.iterdir()) if root.is_dir() and not AlignFolder(root).has_record() else [root]
        for folder in children:
            if AlignFolder(folder).is_results():
                found.setdefault(folder.name, folder)
    return found


def _stamp(folder: FilePath) -> tuple:
    owner = AlignFolder(folder)
    return tuple(owner.file(f).stat().st_mtime_ns if owner.file(f).exists() else 0
                 for f in (RESULTS, MEAN_GRADIENTS, REFERENCE_JSON))


@lru_cache(maxsize=16)
def _summary(folder: str, stamp: tuple) -> dict:
    from oar_attrib.reports.align import summarise
    from oar_attrib.analysis.run_summary import N_BOOT  # the pages' intervals; the command's own summary uses more

    return summarise(folder, n_boot=N_BOOT)


def summary_of(settings, name: str) -> dict:
    folder = results(settings.align_results).get(name)
    if folder is None:
        raise NotFoundError(f"no align result named {name!r}")
    try:
        return _summary(str(folder), _stamp(folder))
    except AlignFolderError as err:  # named by the result's name: the server's paths stay its own
        raise DamagedResultError(err.said(f"align result {name}")) from None


@router.get("/api/align", summary="The names of the align results the app shows")
def list_align(settings: SettingsDep) -> list[str]:
    return list(results(settings.align_results))


@router.get("/api/align/{name}", summary="An align result's statistics: paired differences, bias and variance, power")
def get_align(name: AlignName, settings: SettingsDep) -> dict:
    return summary_of(settings, name)


@router.get("/align", response_class=HTMLResponse, summary="Page: the align results")
def align_list_page(request: Request, settings: SettingsDep, templates: TemplatesDep):
    return templates.TemplateResponse(request, "align_list.html", {"names": list(results(settings.align_results))})


@router.get("/align/{name}", response_class=HTMLResponse, summary="Page: one align result")
def align_page(request: Request, name: AlignName, settings: SettingsDep, templates: TemplatesDep):
    from oar_attrib.reports.align import contrast_rows
    from oar_attrib.reports.align_reading import reading, step_sentence

    summary = summary_of(settings, name)
    cpu = {label: cpu_seconds(m.get("seconds_per_batch")) for label, m in summary["methods"].items()}
    steps = {label: step_sentence(label, m.get("step")) for label, m in summary["methods"].items()}
    return templates.TemplateResponse(request, "align.html", {
        "name": name, "s": summary, "payload": summary, "cpu": cpu, "steps": steps,
        "contrasts": contrast_rows(summary), "words": reading(summary)})

