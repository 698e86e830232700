"""The segments of a response (METHOD.md section 2): the label of each token, the scored set S
and the tokens a character span covers.

A response splits into reasoning | bridge | answer | tail (`spans.segment_tokens` labels the
tokens); S is its reasoning tokens, and nothing when no answer span was found. Plain lists and
numpy only, no torch: the store, the records, the pages and the world's oracles read these
without loading a model. The label order is the store's code of each label (`store.codec`).
"""
from __future__ import annotations

from typing import Sequence

REASONING, BRIDGE, ANSWER, TAIL = "reasoning", "bridge", "answer", "tail"
SEGMENT_LABELS = (REASONING, BRIDGE, ANSWER, TAIL)


def scored_set(labels: Sequence[str], span_found: bool) -> list[bool]:
    """Whether each response token is in the scored set S: labelled `reasoning`, in a trace
    whose answer span was found (else nothing is scored). The one spelling of S."""
    return [span_found and label == REASONING for label in labels]


def n_scored(labels: Sequence[str], span_found: bool) -> int:
    """|S|: the number of scored positions of a response (`scored_set`)."""
    return sum(scored_set(labels, span_found))


def span_mask(offsets: Sequence[tuple[int, int]], spans):
    """(T,) bool numpy array: tokens whose non-empty character span [start, end) overlaps any
    of `spans` ((start, end) character spans of the same text)."""
    import numpy as np  # here, so that the labels above load without numpy

    starts = np.array([o[0] for o in offsets], dtype=np.int64)
    ends = np.array([o[1] for o in offsets], dtype=np.int64)
    mask = np.zeros(len(offsets), dtype=bool)
    for s, e in spans:
        mask |= (starts < e) & (s < ends)
    return mask & (ends > starts)
