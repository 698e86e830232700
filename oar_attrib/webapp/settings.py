"""The web app's limits and options, validated on construction (a bad one is an `InputError`,
one line on the command line, still a ValueError to Python callers)."""
from __future__ import annotations

from dataclasses import dataclass

from ..defaults import option
from ..errors import InputError

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]", "::1")


@dataclass(frozen=True)
class WebSettings:
    """Options of `create_app`; the defaults suit a local, single-user app."""

    max_body_bytes: int = option(64_000, "largest request body accepted, in bytes (larger: 413)")
    max_live_tokens: int = option(256, "longest prompt + response the live attribution runs on, in tokens (longer: "
                                       "413)")
    max_live_concurrent: int = option(1, "live attributions running at once; more are refused with 429")
    live_methods: tuple[str, ...] | None = option(None, "methods the live page may run (default: every registered "
                                                        "method but the analysis-only ones, e.g. resample, which would"
                                                        " hold the one slot for many seconds; read from the registry "
                                                        "when the settings are made)")
    allowed_hosts: tuple[str, ...] = option(LOOPBACK_HOSTS, "Host headers served (blocks DNS rebinding); ('*',) serves"
                                                            " any")
    page_size: int = option(50, "traces per page of a run's table")
    align_results: tuple[str, ...] = option((), "folders of `oar align` results the /align pages show: a run's folder "
                                                "(with record.json) or a folder of such folders")
    max_trace_tokens: int = option(65_536, "longest trace shown or exported, in tokens (longer: 413, before it is "
                                           "read)")
    max_trace_chars: int = option(4 << 20, "longest trace shown or exported, in characters of prompt and response "
                                           "(longer: 413, before it is read)")

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "max_live_tokens", "max_live_concurrent", "page_size",
                     "max_trace_tokens", "max_trace_chars"):
            if getattr(self, name) < 1:
                raise InputError(f"WebSettings.{name} must be >= 1, got {getattr(self, name)}")
        from ..methods import available_methods, method_spec

        if self.live_methods is None:
            object.__setattr__(self, "live_methods", tuple(
                m for m in available_methods() if not method_spec(m).analysis_only))
        for name in self.live_methods:
            method_spec(name)  # an unknown name raises, listing the registered ones
        if not self.allowed_hosts:
            raise InputError("WebSettings.allowed_hosts is empty; pass ('*',) to serve any host")
