"""The converted models in the cache, checked before they are used.

A conversion (catalogue.convert_gguf) records in `oar_source.json` where it came from and,
for each file it wrote, its sha256, size and modification time (`record_files`). Each load
checks the folder against that record (`verify`): a file missing, of another size, or
changed since (its time differs and so does its hash) is refused in one line that names the
file and the command that rebuilds the folder (`oar models --rebuild NAME`); a load never
rehashes a file whose size and time are as recorded. `oar models --verify` rehashes every
file. Folders converted before files were recorded are used as they are (`--verify` says
so). `weights_sha256` is the one place a model folder's identity is computed: the settings
record of a result calls it, and a converted folder's recorded value is used while its weight
files are as recorded.
"""
from __future__ import annotations

import hashlib
import json
import re
from fnmatch import fnmatch
from functools import lru_cache
from pathlib import Path

from ..errors import ModelLoadError
from ..files import feed_file, move_into_place

SOURCE_FILE = "oar_source.json"
SHA256 = re.compile(r"[0-9a-f]{64}")
WEIGHTS = "*.safetensors"


def sha256_of(path: Path) -> str:
    """The sha256 of a regular file's bytes, read in 1 MB blocks."""
    return feed_file(hashlib.sha256(), path).hexdigest()


def _stat(path: Path) -> dict:
    info = path.stat()
    return {"size": info.st_size, "mtime_ns": info.st_mtime_ns}


def record_files(folder: Path) -> dict:
    """{file name: {sha256, size, mtime_ns}} of every file in `folder` but the record."""
    return {p.name: {"sha256": sha256_of(p), **_stat(p)} for p in sorted(folder.iterdir())
            if p.is_file() and p.name != SOURCE_FILE}


def read_record(folder: Path) -> dict | None:
    """The folder's oar_source.json as a dict, or None when it is missing or unreadable."""
    try:
        record = json.loads((folder / SOURCE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


@lru_cache(maxsize=None)
def _weights_digest(files: tuple[tuple[str, int, int], ...]) -> str:
    digest = hashlib.sha256()
    for path, _, _ in files:
        digest.update(Path(path).name.encode() + b"\0")
        feed_file(digest, path)
    return digest.hexdigest()


def weights_sha256(folder: str | Path, pattern: str = WEIGHTS) -> str | None:
    """A model folder's identity, as the settings record stores it: one sha256 over its weight
    files (`pattern`, default the safetensors), each file's name, a NUL byte and its bytes, in
    name order; None when the folder has none. A converted folder records it (`convert_gguf`): the
    recorded value is used while the weight files are the ones recorded with the size and time
    recorded, as a load trusts them; otherwise the files are hashed, once per process for files
    of the same size and time."""
    folder = Path(folder)
    files = sorted(folder.glob(pattern))
    if not files:
        return None
    record = read_record(folder) or {}
    recorded = record.get("files") if isinstance(record.get("files"), dict) else {}
    kept = {name for name in recorded if fnmatch(name, pattern)} == {f.name for f in files} and all(
        isinstance(recorded[f.name], dict) and {k: recorded[f.name].get(k) for k in ("size", "mtime_ns")} == _stat(f)
        for f in files)
    if kept and isinstance(record.get("weights_sha256"), str) and SHA256.fullmatch(record["weights_sha256"]):
        return record["weights_sha256"]  # else (not a sha256: an edited record) the files are hashed
    return _weights_digest(tuple((str(f.resolve()), *_stat(f).values()) for f in files))


# The files beside the weights that decide a model's output: its configuration (rms_norm_eps,
# rope_theta, ...), its generation defaults, its tokenizer and its chat template.
CONFIG_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                "special_tokens_map.json", "added_tokens.json", "vocab.json", "merges.txt",
                "tokenizer.model", "chat_template.jinja", "chat_template.json")


def config_sha256(folder: str | Path) -> str | None:
    """One sha256 over the `CONFIG_FILES` a model folder holds (each file's name, a NUL byte
    and its bytes, in that order); None when it holds none. With `weights_sha256`, what the
    settings record names a model by."""
    files = [Path(folder) / name for name in CONFIG_FILES if (Path(folder) / name).is_file()]
    if not files:
        return None
    digest = hashlib.sha256()  # small files: hashed each time, beside the weights' cached digest
    for path in files:
        digest.update(path.name.encode() + b"\0")
        feed_file(digest, path)
    return digest.hexdigest()


def damage(folder: Path, sha256: str, full: bool = False) -> str | None:
    """What is wrong with the converted `folder` of the source whose hash is `sha256`, or
    None when it is as converted. full: rehash every file (else only the changed ones)."""
    record = read_record(folder)
    if record is None:
        return f"{SOURCE_FILE} is missing or unreadable"
    if record.get("sha256") != sha256:
        return f"it holds another conversion (source sha256 {record.get('sha256')}, expected {sha256})"
    files = record.get("files")
    if files is None:  # converted before files were recorded
        return None if (folder / "config.json").is_file() else "config.json is missing"
    for name, known in sorted(files.items()):
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        now = _stat(path)
        if now["size"] != known.get("size"):
            return f"{name} has {now['size']} bytes, {known.get('size')} when converted"
        if (full or now["mtime_ns"] != known.get("mtime_ns")) and sha256_of(path) != known.get("sha256"):
            return f"{name} is not the file converted (its sha256 differs from the one recorded)"
    return None


def verify(folder: Path, sha256: str, rebuild: str, full: bool = False) -> Path:
    """`folder` when it is as converted (`damage`), else one ModelLoadError naming what is
    wrong and the command `rebuild` that rebuilds it."""
    why = damage(folder, sha256, full)
    if why is not None:
        raise ModelLoadError(f"the converted model {folder} is damaged: {why}; rebuild it with "
                             f"`{rebuild}` (or delete that folder)")
    return folder


def cache_error(err: OSError, folder: Path) -> ModelLoadError:
    """One line for a cache that cannot be written: read-only, full, or not a folder."""
    why = {28: "the disk is full", 30: "it is on a read-only file system", 13: "no permission",
           20: "a part of its path is a file, not a folder", 17: "a file is in the way"}.get(
        err.errno, err.strerror or str(err))
    return ModelLoadError(f"the model cache {folder} cannot be written ({why}); set OAR_CACHE_DIR "
                          "to a writable folder with space, or free some, and load the model again")


def replace_folder(new: Path, out: Path) -> None:
    """Move the complete folder `new` to `out`, replacing a damaged `out` (moved aside first,
    then deleted), so that `out` is never half written (`files.move_into_place`)."""
    move_into_place(new, out, replace=True)
