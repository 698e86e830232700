"""Loading models: the bundled `arith-tiny` checkpoint or any local Hugging Face folder."""
from __future__ import annotations

from importlib import resources
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from .errors import ModelLoadError

BUNDLED = ("arith-tiny",)


def bundled_path(name: str = "arith-tiny") -> Path:
    """Folder of a checkpoint shipped inside the package."""
    if name not in BUNDLED:
        raise ModelLoadError(f"no bundled model {name!r}; bundled: {', '.join(BUNDLED)}")
    return Path(str(resources.files("oar_attrib") / "assets" / name))


def resolve(name_or_path: str | Path) -> Path:
    if str(name_or_path) in BUNDLED:
        return bundled_path(str(name_or_path))
    path = Path(name_or_path).expanduser()
    if not (path / "config.json").is_file():
        raise ModelLoadError(
            f"{name_or_path!r} is neither a bundled model ({', '.join(BUNDLED)}) nor a folder with "
            "a config.json; pass a local Hugging Face checkpoint folder (nothing is downloaded)"
        )
    if not any(path.glob("*.safetensors")):
        raise ModelLoadError(
            f"{path} holds no *.safetensors weights; only safetensors are loaded (convert a .bin "
            "checkpoint with `model.save_pretrained(dir, safe_serialization=True)`)"
        )
    return path


def load_model(name_or_path: str | Path = "arith-tiny", device: str | None = None, dtype=None):
    """(model, tokenizer) from a bundled name or a local folder; model in eval mode.

    Weights load from safetensors only, offline. `dtype` is a torch dtype or its name
    ("float32", "bfloat16"); default float32.
    """
    path = resolve(name_or_path)
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=dtype or torch.float32, use_safetensors=True, local_files_only=True
    )
    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token
    model.eval()
    if device is not None:
        model.to(device)
    return model, tokenizer
