"""A run's token table as parquet (store.frames.write_tokens_parquet), for pandas, polars,
DuckDB or Spark."""
from __future__ import annotations

import io

from fastapi import APIRouter
from fastapi.responses import Response

from oar_attrib.store.frames import write_tokens_parquet

from ..deps import RunId, StoreDep

router = APIRouter(tags=["runs"])


@router.get("/api/runs/{run_id}/tokens.parquet", summary="A run's token table (parquet)",
            description="One row per response token of every trace of the run: trace fields, "
                        "token, segment, score_/weight_/advantage_<method> and the policy's "
                        "logprob and entropy (null where not stored).")
def tokens_parquet(run_id: RunId, store: StoreDep) -> Response:
    store.run(run_id)  # a 404 for an unknown run, before anything is written
    buffer = io.BytesIO()
    write_tokens_parquet(store, run_id, buffer)
    return Response(buffer.getvalue(), media_type="application/vnd.apache.parquet",
                    headers={"content-disposition": f'attachment; filename="run-{run_id}-tokens.parquet"'})
