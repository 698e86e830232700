"""Compatibility, one module per dependency family (`compat`): the ranges a family module
supports are pyproject.toml's, and the private names of transformers, TRL and verl sit behind
one seam each (`compat.transformers`, `training.compat`, `training.verl.verl_private`): every
listed name exists in the installed library (else the test fails with the seam's one line,
naming the versions it was checked on), a missing one is that line at run time, and no other
module reaches them."""
import ast
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from oar_attrib import compat
from oar_attrib.compat import transformers as seam
from oar_attrib.errors import LibraryVersionError

ROOT = Path(__file__).resolve().parents[1]
SEAMS = {ROOT / "oar_attrib" / "compat" / "transformers.py", ROOT / "oar_attrib" / "training" / "compat.py",
         ROOT / "oar_attrib" / "training" / "verl" / "verl_private.py"}


def _trl_names():
    pytest.importorskip("trl")
    from oar_attrib.training import compat as trl_compat

    return trl_compat


def _requirements() -> dict[str, Requirement]:
    """Every requirement pyproject.toml states (dependencies and extras), by name."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    lines = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    return {(req := Requirement(line)).name: req for line in lines if not line.startswith("oar-attrib")}


def _range(requirement: Requirement) -> tuple[Version, Version]:
    spec = {s.operator: Version(s.version) for s in requirement.specifier}
    assert set(spec) == {">=", "<"}, f"{requirement}: a family with a compat module is pinned to [min, max)"
    return spec[">="], spec["<"]


def test_the_compat_modules_ranges_are_pyprojects():
    from oar_attrib.training import compat as trl_compat
    from oar_attrib.training.verl import verl_private

    requirements = _requirements()
    assert _range(requirements["transformers"]) == (seam.TRANSFORMERS_MIN, seam.TRANSFORMERS_MAX)
    assert _range(requirements["trl"]) == (trl_compat.TRL_MIN, trl_compat.TRL_MAX)
    assert _range(requirements["verl"]) == (verl_private.VERL_MIN, verl_private.VERL_MAX)
    for module, name in ((seam, "TRANSFORMERS"), (trl_compat, "TRL"), (verl_private, "VERL")):
        low, high = getattr(module, f"{name}_MIN"), getattr(module, f"{name}_MAX")
        assert low <= Version(getattr(module, f"{name}_CHECKED_ON")) < high  # checked inside the range


def test_the_range_check_reads_a_planted_pin():
    assert _range(Requirement("trl>=1.16,<1.17")) == (Version("1.16"), Version("1.17"))
    with pytest.raises(AssertionError, match="pinned"):
        _range(Requirement("trl>=1.16"))


def test_every_private_transformers_name_is_there():
    missing = compat.private_names_missing(seam.TRANSFORMERS_NAMES)
    assert missing == [], compat.version_line("transformers", seam.TRANSFORMERS_CHECKED_ON, missing)


def test_every_private_trl_name_is_there():
    trl_compat = _trl_names()
    missing = compat.private_names_missing(trl_compat.TRL_NAMES)
    assert missing == [], compat.version_line("trl", trl_compat.TRL_CHECKED_ON, missing)


def test_the_check_reads_functions_methods_and_instance_attributes():
    _trl_names()
    assert compat.private_names_missing([
        "transformers.utils.chat_template_utils:_plain_template_data",  # a module's function
        "transformers:Trainer._issue_warnings_after_load",  # a class's method
        "trl:GRPOTrainer._metrics",  # set on the instance (`self._metrics = ...`)
    ]) == []
    planted = ["transformers:Trainer._no_such_method", "trl:GRPOTrainer._no_such_attribute",
               "transformers.utils.chat_template_utils:_no_such_function", "transformers:NoSuchClass.x"]
    assert compat.private_names_missing(planted) == planted


def test_a_missing_name_is_one_line_naming_the_versions_it_was_checked_on():
    import transformers

    with pytest.raises(LibraryVersionError) as info:
        seam.check(["transformers:Trainer._renamed_away"])
    line = str(info.value)
    assert "\n" not in line and "transformers:Trainer._renamed_away" in line
    assert f"transformers {transformers.__version__}" in line
    assert f"checked on transformers {seam.TRANSFORMERS_CHECKED_ON}" in line
    trl_compat = _trl_names()
    with pytest.raises(LibraryVersionError, match=f"checked on trl {trl_compat.TRL_CHECKED_ON}"):
        trl_compat.check(["trl:GRPOTrainer._renamed_away"])


def test_the_seam_gives_a_template_what_transformers_gives_it():
    from transformers.utils import chat_template_utils as utils

    messages = [{"role": "user", "content": "2 + 3?"}]
    got = seam.template_variables(messages, {"eos_token": "</s>"})
    want = utils._alias_reasoning_fields(utils._plain_template_data(utils._normalize_chat_messages(messages)))
    assert got["messages"] == want and got["eos_token"] == "</s>" and got["add_generation_prompt"] is True
    assert seam.sandbox_environment().filters.keys() == utils._compile_jinja_template("").environment.filters.keys()


def _reaches(source: str, names: set[str]) -> list[tuple[int, str]]:
    """(line, name) of each private name of `names` that `source` imports or reads, except the
    overrides a subclass defines and the super() calls inside them."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            found += [(node.lineno, a.name) for a in node.names if a.name in names]
        elif isinstance(node, ast.Attribute) and node.attr in names:
            is_super = isinstance(node.value, ast.Call) and getattr(node.value.func, "id", "") == "super"
            if not is_super:
                found.append((node.lineno, node.attr))
    return found


def test_the_reach_check_finds_a_planted_use():
    planted = ("from transformers.utils.chat_template_utils import _plain_template_data\n"
               "class T(Base):\n"
               "    def _calculate_rewards(self, *a):\n"
               "        return super()._calculate_rewards(*a) + self._metrics['train']\n")
    assert _reaches(planted, {"_plain_template_data", "_calculate_rewards", "_metrics"}) == \
        [(1, "_plain_template_data"), (4, "_metrics")]


def test_no_module_but_the_seams_reaches_a_listed_name():
    names = {name.split(":")[1].rsplit(".", 1)[-1] for name in seam.TRANSFORMERS_NAMES}
    names |= {name.split(":")[1].rsplit(".", 1)[-1] for name in _trl_names().TRL_NAMES}
    from oar_attrib.training.verl import verl_private  # imports no verl: its private names are checked there

    names |= {n for name in verl_private.VERL_NAMES if (n := name.split(":")[1].rsplit(".", 1)[-1]).startswith("_")}
    found = {str(p.relative_to(ROOT)): got for p in sorted((ROOT / "oar_attrib").rglob("*.py")) if p not in SEAMS
             for got in [_reaches(p.read_text(encoding="utf-8"), names)] if got}
    assert found == {}
