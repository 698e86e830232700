"""Request and query models of the JSON API (they document it at /docs)."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..defaults import PROBE, PROBES
from .deps import MAX_ID


class TraceFilter(BaseModel):
    """Filters, sort and page of a run's trace table. Empty values (from a form) mean 'any'."""

    model_config = ConfigDict(extra="forbid")

    correct: Literal["all", "correct", "wrong"] = "all"
    step: int | None = Field(None, ge=0, le=MAX_ID, description="training step")
    min_reward: float | None = Field(None, allow_inf_nan=False)
    max_reward: float | None = Field(None, allow_inf_nan=False)
    sort: Literal["id", "step", "reward", "advantage", "n_tokens"] = "id"
    order: Literal["asc", "desc"] = "asc"
    page: int = Field(1, ge=1, le=1_000_000)

    @field_validator("step", "min_reward", "max_reward", mode="before")
    @classmethod
    def _empty_is_none(cls, value):
        return None if value == "" else value

    def store_kwargs(self) -> dict:
        """Keyword arguments of `Store.traces` (without the page)."""
        correct = {"all": None, "correct": True, "wrong": False}[self.correct]
        return {"correct": correct, "step": self.step, "min_reward": self.min_reward,
                "max_reward": self.max_reward, "sort": self.sort,
                "descending": self.order == "desc"}


def _live_defaults() -> list[str]:
    """The methods the live page runs when a request names none: the registry's `live` role."""
    from ..methods import default_methods

    return default_methods("live")


class AttributeRequest(BaseModel):
    """A prompt + response to attribute live with the loaded model."""

    model_config = ConfigDict(extra="forbid")

    prompt: str = Field(..., min_length=1, max_length=4000,
                        examples=["a=4, b=7, c=3. d=a+b, e=d-c, f=b*c. find e+f.\n"])
    response: str = Field(..., min_length=1, max_length=8000,
                          examples=["d=4+7=11. e=11-3=8. f=7*3=21. #### 29"])
    methods: list[str] = Field(default_factory=_live_defaults, min_length=1, max_length=8,
                               description="methods to run (default: the registry's `live` set, "
                                           "token OAR-P and entropy)")
    probe: str = Field(PROBE, description=f"outcome probe: one of {', '.join(PROBES)}")
    advantage: float | None = Field(1.0, allow_inf_nan=False, ge=-1e6, le=1e6, description=(
        "sequence advantage A_i to reshape (default 1.0); null for none"))

    @field_validator("probe")
    @classmethod
    def _known_probe(cls, value: str) -> str:
        from ..methods.probes import check_probe  # the probe list lives with the probes (loads torch)

        check_probe(value)  # UnknownNameError (a ValueError) lists the probes: a 422
        return value
