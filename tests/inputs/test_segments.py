"""The segments room: labels, the scored set S and span masks, read without torch."""
import subprocess
import sys

from oar_attrib.instruments.world.recall import oracle_token_mask
from oar_attrib.inputs import spans
from oar_attrib.inputs.segments import SEGMENT_LABELS, n_scored, scored_set, span_mask


def test_span_mask_hand_computed():
    # Tokens "ab", "cd", "", "ef" at [0,2), [2,4), [4,4), [4,6): a half-open overlap counts,
    # touching does not, and an empty token never overlaps.
    offsets = [(0, 2), (2, 4), (4, 4), (4, 6)]
    assert span_mask(offsets, [(1, 2)]).tolist() == [True, False, False, False]
    assert span_mask(offsets, [(2, 4)]).tolist() == [False, True, False, False]
    assert span_mask(offsets, [(3, 5)]).tolist() == [False, True, False, True]
    assert span_mask(offsets, [(0, 1), (5, 9)]).tolist() == [True, False, False, True]
    assert span_mask(offsets, []).tolist() == [False] * 4
    assert oracle_token_mask is span_mask  # one definition for recall, the records and the world


def test_the_scored_set_is_the_reasoning_of_a_trace_with_an_answer():
    labels = ["reasoning", "reasoning", "bridge", "answer", "tail"]
    assert scored_set(labels, True) == [True, True, False, False, False]
    assert scored_set(labels, False) == [False] * 5
    assert (n_scored(labels, True), n_scored(labels, False)) == (2, 0)


def test_segments_agree_with_the_scored_set_and_spans_reads_the_same_labels():
    seg = spans.Segments(("reasoning", "answer", "reasoning"), True)
    assert seg.scored.tolist() == scored_set(seg.labels, True)
    assert spans.Segments(seg.labels, False).scored.tolist() == [False] * 3
    assert spans.SEGMENT_LABELS is SEGMENT_LABELS


def test_labels_and_answer_formats_load_without_torch():
    code = ("import sys; import oar_attrib.inputs.segments, oar_attrib.inputs.spans, "
            "oar_attrib.inputs.steps; print('torch' in sys.modules, 'numpy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
