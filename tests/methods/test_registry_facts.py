"""Facts about methods live in their `MethodSpec` (unit, cost class, the roles each is a default
for), and every list the package once kept apart is read from there: the web app's step
methods, the advantage instrument's cheap set, align's default comparison, the demo's methods,
the reading set, training's default, `attribute()`'s and the live page's defaults."""
import pytest

from oar_attrib.methods import (available_methods, cheap_methods, default_methods, method_spec,
                                registered_methods, step_methods)
from oar_attrib.methods.registry import COSTS, ROLES, UNITS, register_method, unregister_method


def test_every_registered_method_declares_facts_from_the_allowed_values():
    for name in registered_methods():
        spec = method_spec(name)
        assert spec.unit in UNITS and spec.cost in COSTS and set(spec.defaults) <= set(ROLES), name


def test_the_lists_once_kept_apart_are_the_registrys_facts():
    assert step_methods() == ["oar_p_step", "resample"]
    # measured on arith-tiny: under a second a trace (instruments.advantage.text.default_methods)
    assert set(cheap_methods()) & set(available_methods(grouped=True)) == {
        "entropy", "grail", "ktae", "oar_g", "oar_p_step", "random"}
    assert default_methods("reading") == ["oar_g", "oar_p_hier", "entropy"]
    assert default_methods("demo") == ["oar_g", "oar_p", "entropy", "random"]
    assert default_methods("api") == ["oar_p"]  # attribute() with no method named
    assert default_methods("live") == ["oar_p", "entropy"]  # the live page's request with none


def test_training_reshapes_by_default_with_the_registrys_training_default():
    from oar_attrib.weights.settings import ReshapeSettings

    assert default_methods("training") == [ReshapeSettings().method]


def test_aligns_default_comparison_is_the_registrys_and_its_help_says_so():
    import dataclasses

    from oar_attrib.training.align.settings import AlignSettings, default_method_texts

    texts = default_method_texts()
    assert texts == ["none", "oar_g", "oar_g:n_noise=8", "oar_p", "oar_p_step", "grail", "entropy", "random", "ktae"]
    help_text = {f.name: f for f in dataclasses.fields(AlignSettings)}["methods"].metadata["help"]
    assert f"({' '.join(texts)})" in help_text


def test_a_new_method_joins_a_role_by_its_own_declaration_alone():
    @register_method("probe_fact_demo", cost="cheap", unit="step", defaults=("reading",), listed=0)
    def probe_fact_demo(model, batch, *, probe="as_mean", generator=None):
        return None

    try:
        assert default_methods("reading")[0] == "probe_fact_demo"
        assert "probe_fact_demo" in step_methods() and "probe_fact_demo" in cheap_methods()
    finally:
        unregister_method("probe_fact_demo")


@pytest.mark.parametrize("facts, named", [({"unit": "sentence"}, "unit"), ({"cost": "free"}, "cost"),
                                          ({"defaults": ("everything",)}, "defaults"),
                                          ({"scope": "prompt"}, "scope")])
def test_a_fact_outside_the_allowed_values_is_refused_naming_them(facts, named):
    with pytest.raises(ValueError, match=named):
        register_method("never_registered", **facts)
    with pytest.raises(ValueError, match="reading, training, alignment, demo"):
        default_methods("nothing")
