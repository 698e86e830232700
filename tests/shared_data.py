"""The shared folder the real-data tests read (real tokenizer, real math records).

`shared_folder()`: $OAR_SHARED, else `../shared` beside the repository when it holds the full
data sets and the tokenizer, else the trimmed copy vendored under tests/data/shared (its
README.md names the sources and licences), whose xz-compressed tokenizer files are unpacked
once per test process. So the real-tokenizer tests run on a clean clone and never skip.
"""
from __future__ import annotations

import atexit
import lzma
import os
import shutil
import tempfile
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENDORED = ROOT / "tests" / "data" / "shared"
QWEN = "Qwen2.5-7B-Instruct"
VENDORED_GSM8K = 150  # records of gsm8k_test.jsonl in the vendored copy (the first ones)


def _complete(folder: Path) -> bool:
    return (folder / "data").is_dir() and (folder / "tokenizers" / QWEN).is_dir()


@lru_cache(maxsize=None)
def unpacked_vendored() -> Path:
    """The vendored copy laid out as the shared folder, in a temporary folder removed at exit."""
    out = Path(tempfile.mkdtemp(prefix="oar-shared-"))
    atexit.register(shutil.rmtree, out, True)
    shutil.copytree(VENDORED / "data", out / "data")
    target = out / "tokenizers" / QWEN
    target.mkdir(parents=True)
    for path in (VENDORED / "tokenizers" / QWEN).iterdir():
        if path.suffix == ".xz":
            (target / path.stem).write_bytes(lzma.decompress(path.read_bytes()))
        else:
            shutil.copy(path, target / path.name)
    return out


@lru_cache(maxsize=None)
def shared_folder() -> Path:
    for folder in (os.environ.get("OAR_SHARED"), ROOT.parent / "shared"):
        if folder and _complete(Path(folder)):
            return Path(folder)
    return unpacked_vendored()


def is_vendored() -> bool:
    """Whether the tests read the trimmed vendored copy (not the full shared folder)."""
    return shared_folder().name.startswith("oar-shared-")


def qwen_dir() -> Path:
    return shared_folder() / "tokenizers" / QWEN


def data_file(name: str) -> Path:
    return shared_folder() / "data" / f"{name}.jsonl"
