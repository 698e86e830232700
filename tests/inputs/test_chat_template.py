"""The bounded chat template sandbox (inputs/chat_template.py): the ids it gives equal
transformers' `apply_chat_template` on real templates (Qwen2.5's, with its tools branch and
namespace, SmolLM2's) and on the sandbox's whole vocabulary (loop controls, tojson, filters,
macros, `~` joins, `%` formatting); each bound stops exactly the work it names."""
import pytest
from transformers import AutoTokenizer

from shared_data import qwen_dir

from oar_attrib.inputs.chat_template import (ChatTemplateError, TemplateLimits, TemplateRefusedError,
                                             chat_ids, render_chat)
from oar_attrib.models import load_model

SMOLLM2 = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
           "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
           "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
           "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
           "{{ '<|im_start|>assistant\n' }}{% endif %}")
# Every construct of the sandbox the checks wrap: calls, filters, binops, joins, macros.
EVERYTHING = ("{% macro turn(m) %}[{{ m.role | upper }}]{{ m.content | trim }}{% endmacro %}"
              "{% set ns = namespace(n=0) %}{% for m in messages %}{% if m.role == 'skip' %}"
              "{% continue %}{% endif %}{% set ns.n = ns.n + 1 %}{{ turn(m) ~ '|' ~ loop.index }}"
              "{{ '%03d' % ns.n }}{{ m | tojson }}{{ m.content.replace('a', 'b') * 2 }}"
              "{{ (m.content | length) ** 2 }}{{ m.content | center(9) }}{% endfor %}"
              "{{ messages | map(attribute='role') | join(',') }}{{ '{} {}'.format(bos_token, eos_token) }}"
              "{% if add_generation_prompt %}<gen>{% endif %}")
CHATS = [
    [{"role": "user", "content": "What is 2 + 3?"}],
    [{"role": "system", "content": "be brief"}, {"role": "user", "content": "x <|im_end|> y"},
     {"role": "assistant", "content": "a\u202eb"}, {"role": "user", "content": "  again  "}],
]


@pytest.fixture(scope="module")
def qwen():
    return AutoTokenizer.from_pretrained(str(qwen_dir()))


@pytest.mark.parametrize("template", [None, SMOLLM2, EVERYTHING], ids=["qwen2.5", "smollm2", "everything"])
@pytest.mark.parametrize("chat", CHATS, ids=["one turn", "four turns"])
def test_the_bounded_render_gives_transformers_ids(qwen, template, chat):
    if template is not None:
        qwen.chat_template = template
    want = qwen.apply_chat_template(chat, add_generation_prompt=True, tokenize=True, return_dict=False)
    assert chat_ids(qwen, chat) == list(want)
    assert render_chat(qwen, chat) == qwen.apply_chat_template(chat, add_generation_prompt=True,
                                                               tokenize=False)


@pytest.fixture
def tokenizer():
    _, tok = load_model("arith-tiny")
    return tok


def _render(tokenizer, template: str, limits=TemplateLimits(seconds=5.0, max_chars=1000)):
    tokenizer.chat_template = template
    return render_chat(tokenizer, [{"role": "user", "content": "abc"}], limits)


@pytest.mark.parametrize("template, length", [
    ("{{ 'x' * 1000 }}", 1000),  # exactly the limit
    ("{{ ('x' * 500) ~ ('y' * 500) }}", 1000),
    ("{{ 'x' | center(1000) }}", 1000),
    ("{{ 2 ** 60000 > 0 }}", len("True")),
])
def test_work_up_to_a_bound_is_done(tokenizer, template, length):
    assert len(_render(tokenizer, template)) == length


@pytest.mark.parametrize("template, words", [
    ("{{ 'x' * 1001 }}", "built a value of more than 1000 characters"),
    ("{{ ('x' * 500) ~ ('y' * 501) }}", "built a value of more than 1000 characters"),
    ("{{ 'x' | center(1001) }}", "was asked for a width or count of 1001"),
    ("{{ ['x' * 600] * 2 }}", "built a value of more than 1000 characters"),
    ("{{ 2 ** 70000 }}", "built an integer of more than 65536 bits"),
    ("{% for i in range(600) %}xx{% endfor %}", "wrote more than 1000 characters"),
    ("{{ range(1001) | list }}", "was asked for a width or count of 1001"),
])
def test_work_past_a_bound_is_refused_naming_the_model(tokenizer, template, words):
    with pytest.raises(TemplateRefusedError) as err:
        _render(tokenizer, template)
    assert str(err.value).startswith(f"the chat template of {tokenizer.name_or_path} {words}")


def test_a_template_past_its_time_is_refused(tokenizer):
    tokenizer.chat_template = ("{% for i in range(1000) %}{% for j in range(1000) %}{% for k in "
                               "range(1000) %}{% endfor %}{% endfor %}{% endfor %}")
    with pytest.raises(TemplateRefusedError, match="ran for more than 0.5 s"):
        render_chat(tokenizer, [{"role": "user", "content": "abc"}], TemplateLimits(seconds=0.5))


def test_a_template_error_is_per_prompt_and_the_tracer_is_given_back(tokenizer):
    import sys

    before = sys.gettrace()
    with pytest.raises(ChatTemplateError, match=r"failed on this prompt \(TemplateError: no\)") as err:
        _render(tokenizer, "{{ raise_exception('no') }}")
    assert not isinstance(err.value, TemplateRefusedError)  # another prompt may render
    assert sys.gettrace() is before
    assert _render(tokenizer, "{{ messages[0].content }}") == "abc"


def test_a_tokenizer_without_a_template_is_one_line_naming_what_to_do(tokenizer):
    """The bundled model has no chat template: a chat prompt is a TokenizerError (one line
    through every command), not jinja's TypeError from compiling None."""
    from oar_attrib.errors import TokenizerError

    assert tokenizer.chat_template is None
    with pytest.raises(TokenizerError) as info:
        chat_ids(tokenizer, [{"role": "system", "content": "be brief"}, {"role": "user", "content": "1+2?"}])
    line = str(info.value)
    assert "\n" not in line and "no chat template" in line and "pass the prompt as text" in line
