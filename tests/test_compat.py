"""Compatibility, one module per dependency family (`compat`): the ranges a family module
supports are pyproject.toml's, and the private names of transformers, TRL and verl sit behind
one seam each (`compat.transformers`, `training.compat`, `training.verl.verl_private`): every
listed name exists in the installed library (else the test fails with the seam's one line,
naming the versions it was checked on), a missing one is that line at run time, and no other
module reaches them."""
import ast
import dataclasses
import enum
import tomllib
import types
from pathlib import Path

import numpy as np
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
        "transformers.utils.chat_template_utils:_compile_jinja_template",  # a module's function (in every 5.x)
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
    helpers = [getattr(utils, name, seam._STAND_INS[name]) for name in
               ("_alias_reasoning_fields", "_plain_template_data", "_normalize_chat_messages")]
    assert got["messages"] == helpers[0](helpers[1](helpers[2](messages)))
    assert got["eos_token"] == "</s>" and got["add_generation_prompt"] is True
    assert seam.sandbox_environment().filters.keys() == utils._compile_jinja_template("").environment.filters.keys()


def test_each_template_helper_came_in_the_release_the_seam_says():
    import transformers

    installed = Version(transformers.__version__)
    for name, since in seam.TEMPLATE_HELPERS.items():
        assert compat.private_names_missing([f"{seam.CHAT_TEMPLATE_UTILS}:{name}"]) == \
            ([] if installed >= Version(since) else [f"{seam.CHAT_TEMPLATE_UTILS}:{name}"]), name


@dataclasses.dataclass
class _Part:
    type: str
    text: str | None = None


class _Pydantic:  # what the OpenAI SDK's messages look like to the helpers
    def __init__(self, **fields):
        self.fields = fields

    def model_dump(self):
        return dict(self.fields)


class _Role(str, enum.Enum):
    USER = "user"


class _Rich:  # an object with methods a template must not reach
    def write(self):
        raise AssertionError("reached")


# Chats that take every branch of the three helpers: None values, reasoning under each name,
# nested dataclasses and pydantic-like objects, str/int/float subclasses, numpy scalars, bools,
# tuples, a Conversation-like object, rich objects.
CHATS = [
    [{"role": "user", "content": "2 + 3?"}],
    [{"role": "system", "content": "Be brief.", "name": None}, {"role": "user", "content": "hi", "tool_calls": None}],
    [{"role": "assistant", "content": "5", "reasoning": "2+3"}, {"role": "assistant", "content": "", "thinking": "t"},
     {"role": "assistant", "content": "x", "reasoning_content": "r", "thinking": "other"},
     {"role": "assistant", "content": "y", "reasoning_content": None, "reasoning": "late"}],
    [{"role": _Role.USER, "content": [_Part("text", "a"), _Part("image"), {"type": "image", "image": _Rich()}]},
     _Pydantic(role="assistant", content="b", tool_calls=None, extra={"n": np.int64(3), "f": np.float32(0.5),
                                                                     "ok": np.bool_(False), "t": (1, 2.5, True)})],
    types.SimpleNamespace(messages=[{"role": "user", "content": "wrapped"}]),
    [{"role": "user", "content": "n", "count": enum.IntEnum("E", "A B").B, "array": np.zeros(2)}],
]


@pytest.mark.parametrize("chat", CHATS, ids=range(len(CHATS)))
def test_the_stand_ins_equal_transformers_own_helpers(chat):
    """Where the installed transformers has a helper, the seam's own gives what it gives (so on
    an older version, which lacks it, the stand-in builds the template's variables as 5.24 does)."""
    from transformers.utils import chat_template_utils as utils

    def same(a, b):  # equal, and of the same types all the way down
        assert type(a) is type(b)
        if isinstance(a, np.ndarray):
            assert np.array_equal(a, b)
        elif not isinstance(a, (dict, list, tuple)):
            assert a == b
        elif isinstance(a, dict):
            assert list(a) == list(b)
            for key in a:
                same(a[key], b[key])
        elif isinstance(a, (list, tuple)):
            assert len(a) == len(b)
            for x, y in zip(a, b):
                same(x, y)

    present = [name for name in seam.TEMPLATE_HELPERS if hasattr(utils, name)]
    if not present:
        pytest.skip(f"transformers {transformers_version()} has none of the helpers: nothing to compare with")
    normalized = seam._normalize(chat)
    if "_normalize_chat_messages" in present:
        same(normalized, utils._normalize_chat_messages(chat))
    plain = seam._plain(normalized)
    if "_plain_template_data" in present:
        same(plain, utils._plain_template_data(normalized))
    if "_alias_reasoning_fields" in present:
        same(seam._alias(plain), utils._alias_reasoning_fields(plain))


def transformers_version() -> str:
    import transformers

    return transformers.__version__


def test_the_template_variables_are_the_same_where_the_helpers_are_missing(monkeypatch):
    """transformers before 5.21 has none of the helpers: the variables are built by the seam's
    own then, and equal those built by transformers' where it has them."""
    from transformers.utils import chat_template_utils as utils

    tokens = {"eos_token": "</s>", "bos_token": "<s>"}
    chats = [chat for chat in CHATS if isinstance(chat, list)]  # what the callers pass
    with_theirs = [seam.template_variables(chat, tokens) for chat in chats]
    for name in seam.TEMPLATE_HELPERS:
        monkeypatch.delattr(utils, name, raising=False)
    assert repr([seam.template_variables(chat, tokens) for chat in chats]) == repr(with_theirs)


def test_a_chat_renders_where_the_helpers_are_missing(monkeypatch):
    """The bounded render (`inputs.chat_template.chat_ids`) on a version without the helpers:
    the ids `apply_chat_template` gives, not a LibraryVersionError."""
    from transformers.utils import chat_template_utils as utils

    from oar_attrib.inputs.chat_template import chat_ids
    from oar_attrib.models import load_model

    _, tok = load_model("arith-tiny")
    tok.chat_template = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                         "{% if add_generation_prompt %}assistant: {% endif %}")
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2 + 3?"}]
    want = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    want = list(want["input_ids"] if hasattr(want, "keys") else want)
    for name in seam.TEMPLATE_HELPERS:
        monkeypatch.delattr(utils, name, raising=False)
    assert chat_ids(tok, messages) == want


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
    names = {name.split(":")[1].rsplit(".", 1)[-1] for name in seam.TRANSFORMERS_NAMES} | set(seam.TEMPLATE_HELPERS)
    names |= {name.split(":")[1].rsplit(".", 1)[-1] for name in _trl_names().TRL_NAMES}
    from oar_attrib.training.verl import verl_private  # imports no verl: its private names are checked there

    names |= {n for name in verl_private.VERL_NAMES if (n := name.split(":")[1].rsplit(".", 1)[-1]).startswith("_")}
    found = {str(p.relative_to(ROOT)): got for p in sorted((ROOT / "oar_attrib").rglob("*.py")) if p not in SEAMS
             for got in [_reaches(p.read_text(encoding="utf-8"), names)] if got}
    assert found == {}
