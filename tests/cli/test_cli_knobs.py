"""Every method knob of the command line is a keyword of its method, declared once (the
method's knobs, `methods.knobs`), and reaches it."""
import argparse
import dataclasses
import inspect

import pytest

from oar_attrib.cli import build_parser, subcommands
from oar_attrib.cli.choices import METHOD_KNOBS, add_method_knobs, knob_flag, method_params_from
from oar_attrib.methods import method_spec
from oar_attrib.methods.knobs import KNOBS, OarGKnobs


@pytest.mark.parametrize("method, param, kind, help_text", METHOD_KNOBS)
def test_knob_is_a_keyword_of_its_method_with_that_type(method, param, kind, help_text):
    """Each row is a field of the knobs its method registered, with the field's kind and help,
    and a keyword of the method's function whose default is the field's."""
    spec = method_spec(method)
    assert spec.knobs is KNOBS[method]
    knob = {f.name: f for f in dataclasses.fields(spec.knobs)}[param]
    assert (knob.metadata["kind"], knob.metadata["help"]) == (kind, help_text)
    sig = inspect.signature(spec.fn)
    assert param in sig.parameters
    default = sig.parameters[param].default
    assert default == knob.default == getattr(spec.knobs, param)
    if isinstance(kind, type):
        assert default is None or isinstance(default, kind)
    else:  # a parser of its own: it takes the method's default as written
        assert kind(str(default)) == default


def test_the_analysis_flag_and_align_defaults_come_from_one_declaration():
    """OAR-G's n_noise is written once, in `OarGKnobs`: the function's default, the analysis
    default, the flag's help and `oar align`'s `oar_g:n_noise=8` are read from it."""
    from oar_attrib.attribution import analysis_params
    from oar_attrib.training.align.settings import MethodChoice

    knob = {f.name: f for f in dataclasses.fields(OarGKnobs)}["n_noise"]
    spec = method_spec("oar_g")
    assert spec.knobs is OarGKnobs
    assert inspect.signature(spec.fn).parameters["n_noise"].default == OarGKnobs.n_noise == knob.default == 1
    assert spec.analysis_params == {"n_noise": knob.metadata["analysis"]} == {"n_noise": 8}
    assert analysis_params(["oar_g"], None) == {"oar_g": {"n_noise": 8}}
    assert analysis_params(["oar_g"], {"oar_g": {"n_noise": 2}}) == {"oar_g": {"n_noise": 2}}  # the caller's win

    parser = argparse.ArgumentParser()
    add_method_knobs(parser, ("oar_g",))
    flag = next(a for a in parser._actions if knob_flag("oar_g", "n_noise") in a.option_strings)
    assert (flag.dest, flag.help, flag.default) == ("knob__oar_g__n_noise", knob.metadata["help"], None)
    assert method_params_from(parser.parse_args(["--oar-g-n-noise", "8"])) == {"oar_g": spec.analysis_params}

    choice = MethodChoice.parse(f"oar_g:n_noise={knob.metadata['analysis']}")
    choice.check()
    assert (choice.label, choice.params) == ("oar_g:n_noise=8", spec.analysis_params)


def _help(command: str) -> str:
    return subcommands(build_parser())[command].format_help()


def test_help_lists_every_knob():
    text = _help("attribute")
    assert all(knob_flag(m, p) in text for m, p, _, _ in METHOD_KNOBS)
    assert "--chat" in text and "--no-chat" in text
    for name, mode in subcommands(subcommands(build_parser())["recall"]).items():  # each `oar recall` instrument
        if name in ("merge", "intervention"):  # joins caches / corrupts steps: runs no method, offers no knob
            assert "--oar-g-n-noise" not in mode.format_help()
            continue
        recall = mode.format_help()
        assert "--ig-n-steps" in recall and "--oar-g-n-noise" in recall
    for command in ("web", "demo"):
        assert "--max-live-tokens" in _help(command)


def test_knobs_become_method_params_only_when_given():
    parser = argparse.ArgumentParser()
    add_method_knobs(parser)
    assert method_params_from(parser.parse_args([])) is None
    args = parser.parse_args(["--ig-n-steps", "8", "--oar-g-noise-std", "0.5", "--resample-n-samples", "3"])
    base = {"oar_p": {"max_batch_tokens": 64}}
    assert method_params_from(args, base) == {"oar_p": {"max_batch_tokens": 64}, "ig": {"n_steps": 8},
                                              "oar_g": {"noise_std": 0.5}, "resample": {"n_samples": 3}}
    with pytest.raises(SystemExit):
        parser.parse_args(["--ig-n-steps", "0"])


def test_a_knob_reaches_the_method(tmp_path):
    """`--ig-n-steps 1` changes IG's scores on the bundled model (1 path point is not 32)."""
    import json

    from oar_attrib.cli import main
    from oar_attrib.world import generate_problems

    p = generate_problems(1, "default", seed=0, split="test")[0]
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"prompt": p.prompt, "response": p.solution}) + "\n")
    scores = []
    for extra in ([], ["--ig-n-steps", "1"]):
        out = tmp_path / f"out{len(extra)}.jsonl"
        assert main(["attribute", "--input", str(src), "--out", str(out), "--methods", "ig",
                     "--no-progress", *extra]) == 0
        scores.append(json.loads(out.read_text().splitlines()[0])["scores"]["ig"])
    assert scores[0] != scores[1]


def test_mask_flag_parses_names_and_ids():
    parser = argparse.ArgumentParser()
    add_method_knobs(parser)
    args = parser.parse_args(["--oar-p-mask", "eos", "--oar-p-step-mask", "7"])
    assert method_params_from(args) == {"oar_p": {"mask": "eos"}, "oar_p_step": {"mask": 7}}
    with pytest.raises(SystemExit):
        parser.parse_args(["--oar-p-mask", "blank"])


def test_the_mask_flag_reaches_oar_p(tmp_path):
    """`--oar-p-mask eos` changes OAR-P's scores on the bundled model (its eos, id 1, is not
    its pad, id 0) and gives exactly the scores of the eos id passed as a number."""
    import json

    from oar_attrib.cli import main
    from oar_attrib.world import generate_problems

    p = generate_problems(1, "default", seed=0, split="test")[0]
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"prompt": p.prompt, "response": p.solution}) + "\n")
    scores = []
    for extra in ([], ["--oar-p-mask", "eos"], ["--oar-p-mask", "1"]):
        out = tmp_path / f"out{len(scores)}.jsonl"
        assert main(["attribute", "--input", str(src), "--out", str(out), "--methods", "oar_p",
                     "--no-progress", *extra]) == 0
        scores.append(json.loads(out.read_text().splitlines()[0])["scores"]["oar_p"])
    assert scores[0] != scores[1]
    assert scores[1] == scores[2]
