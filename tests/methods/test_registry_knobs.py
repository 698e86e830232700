"""A method's knobs are declared once, with the method (`register_method(knobs=...)`): the
built-in declarations the command line reads are the registered ones, registration refuses knobs
that are not keywords with the knob's default, analysis and `oar align` read a plugin's knobs as
they read the built-ins', and a plugin method without knobs still registers and runs."""
from dataclasses import dataclass, field

import pytest

from oar_attrib.methods import method_spec, register_method, registered_methods, unregister_method
from oar_attrib.methods.knobs import KNOBS, mask_choice
from oar_attrib.methods.registry import knob
from oar_attrib.training.align.settings import MethodChoice
from oar_attrib.training.errors import AlignError


@dataclass(frozen=True)
class ScaleKnobs:
    scale: float = knob(1.0, "test: the scale", float, analysis=2.0)
    mask: str | int = knob("pad", "test: a mask", mask_choice)


@pytest.fixture
def plugin():
    """A plugin method with knobs, registered for one test: `name` -> its spec."""
    def scaled(model, batch, *, probe="as_mean", generator=None, scale: float = ScaleKnobs.scale,
               mask=ScaleKnobs.mask):
        return batch.scored_mask.float() * scale

    register_method("test_scaled", knobs=ScaleKnobs)(scaled)
    try:
        yield method_spec("test_scaled")
    finally:
        unregister_method("test_scaled")


def test_the_command_lines_declarations_are_the_registered_knobs():
    registered = {name: method_spec(name).knobs for name in registered_methods()}
    assert {name: knobs for name, knobs in registered.items() if knobs is not None} == KNOBS
    assert list(KNOBS) == ["ig", "oar_g", "resample", "oar_p", "oar_p_step", "oar_p_hier"]


def test_only_oar_g_reads_another_value_in_analysis():
    assert {name: method_spec(name).analysis_params for name in registered_methods()
            if method_spec(name).analysis_params} == {"oar_g": {"n_noise": 8}}


def test_a_plugins_knobs_give_its_analysis_defaults_and_its_align_syntax(plugin):
    assert plugin.knobs is ScaleKnobs and plugin.analysis_params == {"scale": 2.0}
    assert plugin.analysis_kwargs({"mask": "eos"}) == {"scale": 2.0, "mask": "eos"}
    for text in ("test_scaled:scale=0.5", "test_scaled:mask=eos", "test_scaled:mask=7"):
        MethodChoice.parse(text).check()
    for bad, words in (("test_scaled:bogus=1", "takes no bogus; its knobs: scale, mask"),
                       ("test_scaled:scale=-1", "scale must be a finite number > 0"),
                       ("test_scaled:scale=abc", "scale must be a number"),
                       ("test_scaled:mask=blank", "'blank' is not one of")):
        with pytest.raises(AlignError, match=words):
            MethodChoice.parse(bad).check()


def test_a_plugin_without_knobs_registers_and_takes_no_keyword_in_align():
    register_method("test_plain")(lambda model, batch, **kw: batch.scored_mask.float())
    try:
        spec = method_spec("test_plain")
        assert spec.knobs is None and spec.analysis_params == {} and spec.analysis_kwargs({"x": 1}) == {"x": 1}
        MethodChoice.parse("test_plain").check()
        with pytest.raises(AlignError, match="takes no x; its knobs: none"):
            MethodChoice.parse("test_plain:x=1").check()
    finally:
        unregister_method("test_plain")


@dataclass(frozen=True)
class Plain:
    scale: float = field(default=1.0, metadata={"help": "no kind"})


@pytest.mark.parametrize("fn, knobs, words", [
    (lambda model, batch, *, other=1.0: None, ScaleKnobs, "'scale' .* is not a keyword"),
    (lambda model, batch, *, scale=3.0, mask="pad": None, ScaleKnobs, "default 3.0 is not the knob's 1.0"),
    (lambda model, batch, *, scale=1.0: None, Plain, "declare it with"),
    (lambda model, batch, *, scale=1.0: None, {"scale": 1.0}, "give a dataclass"),
])
def test_registration_refuses_knobs_that_are_not_the_functions_keywords(fn, knobs, words):
    with pytest.raises(ValueError, match=words):
        register_method("test_bad_knobs", knobs=knobs)(fn)
    assert "test_bad_knobs" not in registered_methods()


def test_a_knob_a_setting_gives_reaches_the_method_by_one_road_checked_by_its_bounds():
    """OAR-G's noise_std is the knob `ReshapeSettings.noise_std` (`oar_noise_std` in training)
    gives its value: the settings' value unless the method params give one, and a value past
    the knob's bounds is refused naming the knob, from the settings and from the params alike."""
    from oar_attrib.errors import InputError
    from oar_attrib.methods.knobs import NOISE_STD_MAX

    spec = method_spec("oar_g")
    assert spec.setting_knobs == {"noise_std": "noise_std"}
    assert spec.kwargs({"noise_std": 0.3})["noise_std"] == 0.3
    with pytest.raises(InputError, match="noise_std must be"):
        spec.kwargs({"noise_std": NOISE_STD_MAX * 10})
    with pytest.raises(InputError, match="'oar_g': noise_std must be"):
        spec.check_knobs({"noise_std": float("inf"), "n_noise": 2})
    with pytest.raises(TypeError):
        register_method("test_old_road", train_params=("noise_std",))  # the second road is gone
