"""Traces: one trace's step view and token heatmap with per-method charts, and its exports."""
from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, Response

from oar_attrib.records.export import EXPORT_KINDS, export
from oar_attrib.defaults import VIEW_STEP_POOL
from oar_attrib.inputs.steps import STEP_POOLS

from ..deps import SettingsDep, StoreDep, TemplatesDep, TraceId
from ..errors import TooLargeError
from ..step_page import LONG_TRACE, compact_payload, step_view, token_pieces
from ..token_views import token_views
from ..views import OUTLINE_SETS, earlier_answer, reward_reason, trace_view

router = APIRouter(tags=["traces"])

# Method names are matched against the trace's own methods, never used to look anything up.
MethodQuery = Annotated[str | None, Query(max_length=64, pattern=r"^[A-Za-z0-9_.\-]*$",
                                          description="method to colour by (default: oar_p)")]
OracleQuery = Annotated[str, Query(max_length=32, pattern=r"^[a-z_]*$",
                                   description=f"oracle set to outline: {', '.join(OUTLINE_SETS)}")]
ExportKind = Literal[EXPORT_KINDS]  # type: ignore[valid-type]
PoolQuery = Annotated[Literal[STEP_POOLS], Query(  # type: ignore[valid-type]
    description="how a step's score pools its tokens' scores (max: a step-level method's own score)")]


def pick_method(requested: str | None, available: list[str]) -> str | None:
    """The requested method if the trace has it, else oar_p, else the first one."""
    for method in (requested, "oar_p", *available):
        if method in available:
            return method
    return None


def bounded_trace(store, settings, trace_id: int):
    """The trace `trace_id`, read only when it is within the settings' size limits (an
    imported 10 MB completion would otherwise be a page of hundreds of MB): else 413."""
    tokens, chars = store.trace_size(trace_id)
    if tokens > settings.max_trace_tokens or chars > settings.max_trace_chars:
        raise TooLargeError(
            f"trace {trace_id} has {tokens} tokens and {chars} characters, more than the web app "
            f"shows ({settings.max_trace_tokens} tokens, {settings.max_trace_chars} characters); "
            f"read it in Python (oar_attrib.store.Store(path).trace({trace_id})) or start the app "
            "with larger WebSettings.max_trace_tokens / max_trace_chars")
    return store.trace(trace_id)


@router.get("/api/traces/{trace_id}", summary="Everything stored about one trace")
def get_trace(trace_id: TraceId, store: StoreDep, settings: SettingsDep) -> dict:
    return bounded_trace(store, settings, trace_id).to_dict()


@router.get("/api/traces/{trace_id}/export/{kind}", summary="One trace exported as a file",
            description="view.html: the trace view as one self-contained HTML file (no script, "
                        "no request when opened); tokens.csv / tokens.json: one row per token "
                        "with every method's score, weight and advantage; steps.csv / "
                        "steps.json: one row per step with every method's step score.")
def export_trace(trace_id: TraceId, kind: ExportKind, store: StoreDep, settings: SettingsDep,
                 method: MethodQuery = None, oracle: OracleQuery = "direct",
                 pool: PoolQuery = VIEW_STEP_POOL) -> Response:
    record = bounded_trace(store, settings, trace_id)
    options = {}
    if kind == "view.html":
        run = store.run(record.row.run_id)
        options = {"title": f"Trace {record.id} of run {run.id}: {run.name}",
                   "random_weights": bool(run.config.get("random_weights")), "oracle_set": oracle}
    text, media = export(record, kind, pick_method(method, list(record.attributions)), pool, **options)
    name = f"trace-{record.id}-{kind}"
    return Response(text, media_type=media,
                    headers={"content-disposition": f'attachment; filename="{name}"'})


def store_argument(store) -> str:
    """The store as `oar attribute --store` takes it, shell-quoted (its file name: the page does
    not show the server's folders)."""
    import shlex

    return shlex.quote(store.path.name)


def _group_without_signal(store, row) -> str | None:
    """When the trace's group has every reward equal (no GRPO signal: advantage 0), what would
    give it one (`signal.remedy`, fitted to a group all right or all wrong); else None."""
    from ...analysis.signal import group_signal, remedy

    if row.group is None or row.reward is None:
        return None
    rows = store.traces(row.run_id, step=row.step, limit=1 << 62)[0]
    signal = group_signal(((r.step, r.group), r.reward, r.correct) for r in rows
                          if (r.step, r.group) == (row.step, row.group))
    return remedy(signal) if signal.flat else None


@router.get("/traces/{trace_id}", response_class=HTMLResponse, summary="Page: one trace")
def trace_page(request: Request, trace_id: TraceId, store: StoreDep, templates: TemplatesDep,
               settings: SettingsDep, method: MethodQuery = None, oracle: OracleQuery = "direct",
               pool: PoolQuery = VIEW_STEP_POOL):
    record = bounded_trace(store, settings, trace_id)
    selected = pick_method(method, list(record.attributions))
    # Long traces: the script builds, colours and titles the token spans (smaller, faster pages).
    long = len(record.tokens) > LONG_TRACE
    view = trace_view(record, selected, oracle, tooltips=not long)
    steps = step_view(record, selected, oracle, pool)
    view["payload"] = compact_payload(view["payload"])
    view["payload"]["views"] = token_views(record)
    view["token_pieces"] = token_pieces(view["pieces"])
    if long:
        view["pieces"] = None
    run = store.run(record.row.run_id)
    context = {"record": record, "run": run, "method": selected, "oracle_set": oracle,
               "no_signal": _group_without_signal(store, record.row), "store_name": store_argument(store),
               "reward_reason": reward_reason(record), "earlier_answer": earlier_answer(record), **view,
               **steps, "pools": STEP_POOLS}
    return templates.TemplateResponse(request, "trace.html", context)
