"""Static files, served by name from a fixed list (no request names a file path).

plotly.js comes from the installed plotly package, so the app works offline and never
loads a script from a CDN.
"""
from __future__ import annotations

from importlib import resources
from pathlib import Path

from fastapi import APIRouter, HTTPException
from fastapi.responses import FileResponse

router = APIRouter(tags=["assets"], include_in_schema=False)
_STATIC = Path(__file__).resolve().parent.parent / "static"
_MEDIA = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}


def plotly_js() -> Path:
    return Path(str(resources.files("plotly") / "package_data" / "plotly.min.js"))


def _files() -> dict[str, Path]:
    return {"app.css": _STATIC / "app.css", "app.js": _STATIC / "app.js",
            "experiment.js": _STATIC / "experiment.js", "token_views.js": _STATIC / "token_views.js",
            "profiles.js": _STATIC / "profiles.js", "progress.js": _STATIC / "progress.js",
            "text.js": _STATIC / "text.js",
            "plotly.min.js": plotly_js()}


FILES = _files()


@router.get("/static/{name}")
def static_file(name: str) -> FileResponse:
    path = FILES.get(name)
    if path is None:
        raise HTTPException(404, f"no static file {name!r}")
    return FileResponse(path, media_type=_MEDIA[path.suffix],
                        headers={"cache-control": "public, max-age=3600"})
