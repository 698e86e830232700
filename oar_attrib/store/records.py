"""What the store hands back: the trace records (`oar_attrib.records.record`, which the store
depends on, never the reverse) and the run it lists."""
from __future__ import annotations

from dataclasses import dataclass

from ..records.record import (AttributionRecord, TraceRecord, TraceRow, json_float,  # noqa: F401
                              json_floats, json_safe, record_steps)


@dataclass(frozen=True)
class RunInfo:
    """One run: a training job, an `oar attribute` call or the demo."""

    id: int
    name: str
    model: str
    config: dict
    created: str
    n_traces: int
    methods: list[str]

    def to_dict(self) -> dict:
        return dict(self.__dict__)
