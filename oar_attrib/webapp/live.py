"""Live attribution of a user's prompt + response with the loaded model, bounded in tokens
and in concurrency so that one request cannot take the machine."""
from __future__ import annotations

import threading
from typing import Sequence

from .errors import BusyError, ModelLoadingError, NoModelError, TooLargeError


class LiveAttributor:
    """Runs `oar_attrib.attribute` on one pair at a time (up to `max_concurrent`).

    A request over `max_tokens` is refused before any model work (413); a request that finds
    every slot taken is refused at once (429), never queued, so waiting requests cannot pile
    up behind a slow method.
    """

    def __init__(self, model, tokenizer, *, max_tokens: int, max_concurrent: int, name: str = ""):
        self.model, self.tokenizer, self.name = model, tokenizer, name
        self.max_tokens = max_tokens
        self._slots = threading.BoundedSemaphore(max_concurrent)

    def count_tokens(self, prompt: str, response: str) -> int:
        tok = self.tokenizer
        return len(tok(prompt)["input_ids"]) + len(tok(response, add_special_tokens=False)["input_ids"])

    def run(self, prompt: str, response: str, methods: Sequence[str], probe: str,
            advantage: float | None = None):
        """The `TraceAttribution` of the pair."""
        from oar_attrib.attribution import attribute
        from oar_attrib.weights.settings import ReshapeSettings
        from oar_attrib.inputs.pairs import Skip, judge_record
        from oar_attrib.errors import InputError

        judged = judge_record({"prompt": prompt, "response": response})  # as `oar attribute` does
        if isinstance(judged, Skip):
            raise InputError(str(judged))
        n = self.count_tokens(prompt, response)
        if n > self.max_tokens:
            raise TooLargeError(
                f"prompt + response is {n} tokens; the live page attributes at most "
                f"{self.max_tokens} (shorten the text, or attribute offline with the library)"
            )
        if not self._slots.acquire(blocking=False):
            raise BusyError("another live attribution is running; retry in a few seconds")
        try:
            adv = None if advantage is None else [advantage]
            return attribute(self.model, self.tokenizer, [prompt], [response], list(methods),
                             ReshapeSettings(probe=probe), advantages=adv)[0]
        finally:
            self._slots.release()


class NoLiveModel:
    """Stands in for a LiveAttributor when the app runs without a model."""

    name = ""

    def run(self, *args, **kwargs):
        raise NoModelError(
            "this app was started without a model; restart it with `oar web --model NAME` "
            "(e.g. arith-tiny) to attribute your own text"
        )


class LoadingLiveModel:
    """Stands in for a LiveAttributor while its model loads (or after loading failed)."""

    def __init__(self, name: str, error: Exception | None = None):
        self.name, self.error = name, error

    def run(self, *args, **kwargs):
        if self.error is not None:
            raise NoModelError(f"the model {self.name!r} failed to load: {self.error}")
        raise ModelLoadingError(f"the model {self.name!r} is still loading; retry in a few seconds")
