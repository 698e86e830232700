"""verl's environment: the transformers verl pins is inside the project's range, the extras
table names verl's own module, and what the plugin and `oar import verl` need works at that
transformers. One part of the core does not: the chat-template sandbox reaches transformers
names that verl's range (5.5.3-5.10.x) lacks, so a chat prompt is refused there in one line
(the plugin never renders a template: verl hands over token ids)."""
from importlib.metadata import packages_distributions, requires, version

import pytest
from packaging.requirements import Requirement

from oar_attrib.errors import LibraryVersionError
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


def test_chat_prompts_encode_or_are_refused_in_one_line():
    from oar_attrib.inputs.encoding import encode_pair
    from oar_attrib.models import load_tokenizer
    from oar_attrib.inputs.chat_template import ROLE_TEMPLATE

    tokenizer, _ = load_tokenizer("arith-tiny")
    tokenizer.chat_template = ROLE_TEMPLATE
    try:
        pair = encode_pair(tokenizer, [{"role": "user", "content": "a=4. find a."}], "a=4. #### 4", chat=True)
    except LibraryVersionError as err:
        assert "\n" not in str(err) and str(err).startswith(f"transformers {version('transformers')} lacks ")
        pytest.xfail("the chat-template sandbox needs transformers names that verl's range lacks")
    assert pair.span_found
