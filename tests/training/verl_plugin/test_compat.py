"""verl's environment: the transformers verl pins is inside the project's range, the extras
table names verl's own module, and what the plugin and `oar import verl` need works at that
transformers, chat prompts included (verl's range, 5.5.3-5.10.x, lacks the template helpers of
5.21 and later: `compat.transformers` builds the template's variables with its own copies)."""
from importlib.metadata import packages_distributions, requires, version

from packaging.requirements import Requirement

from oar_attrib.extras import EXTRAS, missing_modules


def _pin(dist: str, name: str, extra: str | None = None):
    for spec in requires(dist) or []:
        req = Requirement(spec)
        if req.name.lower() == name and (req.marker is None or req.marker.evaluate({"extra": extra or ""})):
            return req.specifier
    raise AssertionError(f"{dist} does not require {name}")


def test_transformers_is_in_verls_pin_and_the_projects_range():
    installed = version("transformers")
    assert installed in _pin("verl", "transformers") and installed in _pin("oar-attrib", "transformers")
    assert installed in _pin("trl", "transformers") if packages_distributions().get("trl") else True


def test_the_verl_extra_is_installed_and_its_module_is_verls():
    assert missing_modules("verl") == [] and EXTRAS["verl"] == ("verl",)
    assert "verl" in packages_distributions()["verl"]
    assert version("verl").startswith("0.9.") and packages_distributions().get("transfer_queue")


def test_chat_prompts_encode_as_apply_chat_template_does():
    from oar_attrib.inputs.chat_template import ROLE_TEMPLATE, chat_ids
    from oar_attrib.inputs.encoding import encode_pair
    from oar_attrib.models import load_tokenizer

    tokenizer, _ = load_tokenizer("arith-tiny")
    tokenizer.chat_template = ROLE_TEMPLATE
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "a=4. find a."}]
    want = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    assert chat_ids(tokenizer, messages) == list(want)
    assert encode_pair(tokenizer, messages[1:], "a=4. #### 4", chat=True).span_found
