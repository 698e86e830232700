"""Loading models (a catalogue name such as the bundled `arith-tiny` or `smollm2-135m`, a
.gguf file, or any local Hugging Face folder) and building seeded random Qwen2 models in code (tests, benches, pretraining from scratch)."""
from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from .catalogue import (CATALOGUE, TOKENIZER_FILES, bundled_path,  # noqa: F401 (bundled_path: the face re-exports it)
                        entry_folder, gguf_folder)
from ..errors import ModelLoadError

BUNDLED = tuple(name for name, entry in CATALOGUE.items() if entry.bundled)


def resolve(name_or_path: str | Path) -> Path:
    """The local folder of a catalogue name (`catalogue.CATALOGUE`: fetched and converted on
    first use), a `.gguf` file (converted once) or a Hugging Face checkpoint folder."""
    if str(name_or_path) in CATALOGUE:
        return entry_folder(CATALOGUE[str(name_or_path)])
    path = Path(name_or_path).expanduser()
    if path.suffix == ".gguf":
        return gguf_folder(path)
    if not (path / "config.json").is_file():
        raise ModelLoadError(
            f"{name_or_path!r} is neither a catalogue model ({', '.join(CATALOGUE)}; `oar models` "
            "lists them), a .gguf file nor a folder with a config.json; pass a local Hugging Face "
            "checkpoint folder"
        )
    if not any(path.glob("*.safetensors")):
        raise ModelLoadError(
            f"{path} holds no *.safetensors weights; only safetensors are loaded (convert a .bin "
            "checkpoint with `model.save_pretrained(dir, safe_serialization=True)`)"
        )
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        raise ModelLoadError(
            f"{path} has no tokenizer files ({', '.join(TOKENIZER_FILES)}); save the tokenizer "
            "next to the weights (`tokenizer.save_pretrained(dir)`)"
        )
    return path


# The largest sizes a config.json may ask for (several times those of the largest open models),
# checked on the file's own JSON before transformers reads it or builds anything: 10**9 heads,
# 10**7 layers or a negative hidden_size is one line, never a hang, a traceback or an allocation.
CONFIG_BOUNDS = {
    "vocab_size": 1 << 22, "hidden_size": 1 << 16, "intermediate_size": 1 << 20, "head_dim": 1 << 12,
    "num_hidden_layers": 1 << 10, "num_attention_heads": 1 << 10, "num_key_value_heads": 1 << 10,
    "max_position_embeddings": 1 << 24, "num_experts": 1 << 12, "num_local_experts": 1 << 12,
    # the GPT-2 family's names
    "n_embd": 1 << 16, "n_inner": 1 << 20, "n_layer": 1 << 10, "n_head": 1 << 10, "n_positions": 1 << 24,
}
_NESTED = ("text_config", "decoder", "language_config")  # a multimodal config's language model


def config_problem(config: dict) -> str | None:
    """What is wrong with a config's sizes (`CONFIG_BOUNDS`: each an integer from 1 to its
    bound; the heads dividing the hidden size and into the key-value heads), or None."""
    for key, bound in CONFIG_BOUNDS.items():
        value = config.get(key)
        values = value if isinstance(value, list) else [value]  # a per-layer list: each one
        if value is not None and not all(type(v) is int and 1 <= v <= bound for v in values):
            return f"{key} is {repr(value)[:40]}, not a size from 1 to {bound}"
    hidden, heads = config.get("hidden_size"), config.get("num_attention_heads")
    if hidden and heads and config.get("head_dim") is None and hidden % heads:
        return f"hidden_size {hidden} is not a multiple of num_attention_heads {heads}"
    kv = config.get("num_key_value_heads")
    if heads and kv and heads % kv:
        return f"num_attention_heads {heads} is not a multiple of num_key_value_heads {kv}"
    return next((why for key in _NESTED if isinstance(config.get(key), dict)
                 for why in [config_problem(config[key])] if why), None)


def _mend(name_or_path) -> str:
    """How to mend a damaged model folder: a converted one is rebuilt, a checkpoint saved again."""
    from .catalogue import CATALOGUE, rebuild_command

    if str(name_or_path) in CATALOGUE or Path(str(name_or_path)).suffix == ".gguf":
        return f"rebuild it with `{rebuild_command(name_or_path)}`"
    return "copy or save the checkpoint again"


def read_config(name_or_path, path: Path):
    """The config of the model folder `path`, its sizes bounded (`config_problem`) on the
    file's JSON before transformers reads it; one ModelLoadError otherwise (`_read`)."""
    import json

    file = path / "config.json"
    try:
        raw = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        raw = None  # `_read` names the damage
    why = config_problem(raw) if isinstance(raw, dict) else None
    if why:
        raise ModelLoadError(f"{file}: {why}; fix config.json to the checkpoint's sizes, or {_mend(name_or_path)}")
    return _read(name_or_path, path, "config.json", AutoConfig)


def check_weights(path: Path, config) -> None:
    """ModelLoadError when a safetensors file is damaged or holds tensors of other shapes than
    `config` builds (e.g. a vocab_size that differs from the embedding's rows), or when the
    config's sizes are out of bounds (`config_problem`). Reads only the files' headers and
    builds the model on the meta device (no memory)."""
    from safetensors import SafetensorError, safe_open

    why = config_problem(config.to_dict())
    if why:
        raise ModelLoadError(f"{path}/config.json: {why}; fix config.json to the checkpoint's sizes")

    held = {}
    for file in sorted(path.glob("*.safetensors")):
        try:
            with safe_open(file, framework="pt") as handle:
                held.update((k, tuple(handle.get_slice(k).get_shape())) for k in handle.keys())
        except (SafetensorError, OSError) as err:
            raise ModelLoadError(f"{file} is damaged ({err}); copy or save the checkpoint again") from None
    with torch.device("meta"):
        wanted = {k: tuple(v.shape) for k, v in AutoModelForCausalLM.from_config(config).state_dict().items()}
    for key in sorted(held.keys() & wanted.keys()):
        if held[key] != wanted[key]:
            raise ModelLoadError(
                f"{path}/config.json does not match its weights: {key} is {held[key]} in the "
                f"weights but {wanted[key]} by the config; fix config.json (e.g. vocab_size, "
                "hidden_size) to the checkpoint's shapes"
            )


def check_pair(model, tokenizer) -> None:
    """ModelLoadError unless every id the tokenizer can produce indexes the model's embedding
    (an id past it is an IndexError deep in the forward pass otherwise)."""
    n_ids = len(tokenizer)
    rows = model.get_input_embeddings().num_embeddings
    if n_ids == 0:
        raise ModelLoadError("the tokenizer is empty (no vocabulary); load the tokenizer the "
                             "model was trained with")
    if n_ids > rows:
        raise ModelLoadError(
            f"the tokenizer has {n_ids} ids but the model's embedding only {rows} rows; load the "
            "tokenizer the model was trained with, or resize the embedding "
            "(`model.resize_token_embeddings(len(tokenizer))`) and fine-tune"
        )


def check_device(device: str | None) -> torch.device | None:
    """The torch device named `device`, or ModelLoadError saying which devices exist."""
    if device is None:
        return None
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError):
        raise ModelLoadError(f"unknown device {device!r}; use cpu, cuda, cuda:N or mps") from None
    if dev.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ModelLoadError(f"device {device!r} asked but this machine has no CUDA GPU "
                                 "(or this torch has no CUDA); use --device cpu")
        if dev.index is not None and dev.index >= count:
            raise ModelLoadError(f"device {device!r} asked but there are {count} CUDA GPUs "
                                 f"(cuda:0 to cuda:{count - 1})")
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise ModelLoadError(f"device {device!r} asked but MPS is not available; use --device cpu")
    elif dev.type not in ("cpu", "cuda", "mps"):
        raise ModelLoadError(f"device {device!r} is not supported here; use cpu, cuda, cuda:N or mps")
    return dev


def _read(name_or_path, path: Path, what: str, auto):
    """`auto.from_pretrained(path)` (AutoConfig, AutoTokenizer), or one ModelLoadError naming
    the folder, the damaged file and how to mend it (a converted model: the rebuild command)."""
    try:
        return auto.from_pretrained(path, local_files_only=True)
    except Exception as err:  # noqa: BLE001 - whatever transformers or its validators raise on a bad file
        why = " ".join(str(err).split())[:200]
        raise ModelLoadError(f"{path}: the {what} cannot be read ({type(err).__name__}: {why}); "
                             f"{_mend(name_or_path)}") from None


def load_tokenizer(name_or_path: str | Path):
    """(tokenizer, config) of a catalogue name, a .gguf file or a local folder, without the
    weights (the pad token set as `load_model` sets it); a folder that holds only a tokenizer
    (a run folder) gives config None."""
    path = Path(name_or_path).expanduser()
    if path.is_dir() and not (path / "config.json").is_file() and any(
            (path / name).is_file() for name in TOKENIZER_FILES):
        config = None
    else:
        path = resolve(name_or_path)
        config = read_config(name_or_path, path)
    return _padded(_read(name_or_path, path, "tokenizer files", AutoTokenizer)), config


def _padded(tokenizer):
    """The tokenizer, its pad token the EOS when it has none (batches are padded)."""
    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(name_or_path: str | Path = "arith-tiny", device: str | None = None, dtype=None):
    """(model, tokenizer) from a catalogue name (`oar models`), a .gguf file or a local
    folder; model in eval mode.

    Weights load from safetensors only; a catalogue model not yet on this machine is fetched
    once (see `catalogue`). The device, the weights' files and shapes
    and the tokenizer's fit to the embedding are checked first (`ModelLoadError` saying what
    to do, never a traceback deep in transformers). `dtype` is a torch dtype or its name
    ("float32", "bfloat16"); default float32.
    """
    path = resolve(name_or_path)
    check_device(device)
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    config = read_config(name_or_path, path)
    check_weights(path, config)
    tokenizer = _read(name_or_path, path, "tokenizer files", AutoTokenizer)
    model = AutoModelForCausalLM.from_pretrained(
        path, config=config, dtype=dtype or torch.float32, use_safetensors=True,
        local_files_only=True,
    )
    check_pair(model, tokenizer)
    _padded(tokenizer)
    model.eval()
    if device is not None:
        model.to(device)
    return model, tokenizer


def random_qwen2(
    vocab_size: int, *, seed: int | None = 0, hidden: int = 32, layers: int = 2, heads: int = 4,
    kv_heads: int | None = None, intermediate: int | None = None, max_positions: int = 256,
    init_std: float = 0.3, tie: bool = True, pad_id: int | None = None, eos_id: int | None = None,
    dtype: torch.dtype = torch.float32, attn: str | None = None, **config,
):
    """A Qwen2 causal LM with RANDOM weights (seeded; `seed=None` keeps the global RNG), in
    eval mode. kv_heads defaults to heads // 2, intermediate to 2 * hidden; `config` passes
    other Qwen2Config fields (rope_parameters, sliding_window, bos_token_id, ...). pad_id and
    eos_id go into the model's config and its generation config.

    init_std 0.3 (the default here, far above the usual 0.02) makes a tiny model's logits
    peaked, so that importances sit well above float32 rounding and greedy text depends on
    its context; pass 0.02 for a model of real shape.
    """
    from transformers import Qwen2Config, Qwen2ForCausalLM

    if seed is not None:
        torch.manual_seed(seed)
    cfg = Qwen2Config(
        vocab_size=vocab_size, hidden_size=hidden, intermediate_size=intermediate or 2 * hidden,
        num_hidden_layers=layers, num_attention_heads=heads,
        num_key_value_heads=kv_heads or max(1, heads // 2), max_position_embeddings=max_positions,
        initializer_range=init_std, tie_word_embeddings=tie, pad_token_id=pad_id, eos_token_id=eos_id,
        **config,
    )
    if attn is not None:
        cfg._attn_implementation = attn
    model = Qwen2ForCausalLM(cfg).to(dtype)
    model.generation_config.pad_token_id = pad_id
    model.generation_config.eos_token_id = eos_id
    return model.eval()
