"""GET /api/progress: how far the background fill of the served store has come (`oar demo`)."""
from __future__ import annotations

from fastapi import APIRouter, Request

router = APIRouter()


@router.get("/api/progress", summary="Progress of the store's background fill (empty when none)")
def progress(request: Request) -> dict:
    status = request.app.state.progress
    if status is None:
        return {"line": "", "finished": True, "stages": []}
    status = status.read()
    return {"line": status.line(), "finished": status.finished,
            "stages": [vars(s) for s in status.stages]}
