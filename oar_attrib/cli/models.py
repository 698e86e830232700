"""`oar models`: the model catalogue (name, architecture, parameters, vocabulary, licence,
how `oar generate` asks it for answers by default, source, whether it is on this machine); `--fetch NAME` brings one onto this machine now,
`--verify` rehashes every converted model in the cache against the hashes recorded when it
was converted, `--rebuild NAME|FILE.gguf` converts one again over a damaged folder."""
from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from ..commands import add_dataclass_args, dataclass_from_args, option
from ..models.catalogue import CATALOGUE, cache_dir, entry_folder, gguf_folder, listing
from ..console import say, terminal_safe
from ..errors import ModelLoadError

COLUMNS = ("name", "architecture", "parameters", "vocabulary", "licence", "answers", "cached", "source")


@dataclass(frozen=True)
class ModelsSettings:
    """What `oar models` does: list the catalogue (as JSON), fetch one model, verify the cache
    or rebuild one folder; every field is its flag."""

    json: bool = option(False, "print the catalogue as JSON", action="store_true")
    fetch: str | None = option(
        None, "bring a catalogue model onto this machine now (its folder is printed)", metavar="NAME")
    verify: bool = option(
        False, "rehash every converted model in the cache against the hashes recorded at "
               "conversion (exit status 2 when one is damaged)", action="store_true")
    rebuild: str | None = option(
        None, "convert a catalogue model or a .gguf file again, replacing its cached folder "
              "(damaged or not)", metavar="NAME_OR_GGUF")


def _answers(answering: dict) -> str:
    """How `oar generate` asks the model by default: `answer_is T0.5 320`."""
    return f"{answering['answer_format']} T{answering['temperature']:g} {answering['max_new_tokens']}"


def _entry(name: str):
    if name not in CATALOGUE:
        raise ModelLoadError(f"no catalogue model {name!r}; known: {', '.join(CATALOGUE)}")
    return CATALOGUE[name]


def _verify() -> int:
    """One line per converted folder of the cache: ok, damaged (why), or unverifiable."""
    from ..models.cache import damage, read_record

    models = cache_dir() / "models"
    folders = sorted(p for p in models.iterdir() if p.is_dir() and not p.name.startswith(".")) \
        if models.is_dir() else []
    bad = 0
    for folder in folders:
        record = read_record(folder) or {}
        why = damage(folder, record.get("sha256", ""), full=True)
        if why is None and "files" not in record:
            say(f"{folder}: not verifiable (converted before file hashes were recorded); "
                f"`oar models --rebuild {record.get('name', folder.name)}` records them")
        elif why is None:
            say(f"{folder}: ok ({len(record['files'])} files as converted)")
        else:
            bad += 1
            name = record.get("name", folder.name)
            say(f"{folder}: damaged: {why}; rebuild it with `oar models --rebuild {name}`")
    if not folders:
        say(f"{models}: no converted model")
    return 2 if bad else 0


def _rebuild(name: str) -> Path:
    if name in CATALOGUE:
        return entry_folder(_entry(name), rebuild=True)
    if Path(name).suffix == ".gguf":
        return gguf_folder(Path(name), rebuild=True)
    raise ModelLoadError(f"--rebuild {name}: pass a catalogue name ({', '.join(CATALOGUE)}) or "
                         "the .gguf file the folder was converted from")


def _cmd_models(args: argparse.Namespace) -> int:
    settings = dataclass_from_args(ModelsSettings, args)
    if settings.verify:
        return _verify()
    if settings.rebuild:
        print(terminal_safe(f"{settings.rebuild}: {_rebuild(settings.rebuild)}"))
        return 0
    if settings.fetch:
        print(f"{settings.fetch}: {entry_folder(_entry(settings.fetch))}")
        return 0
    rows = listing()
    if settings.json:
        print(json.dumps(rows, indent=1))
        return 0
    shown = [[str(row[c]) if c != "answers" else _answers(row["answering"]) for c in COLUMNS] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in shown)) for i, c in enumerate(COLUMNS[:-1])]
    for cells in [list(COLUMNS), *shown]:
        print("  ".join(cell.ljust(w) for cell, w in zip(cells, widths)) + "  " + cells[-1])
    print("\nAlso: any .gguf file (converted once, cached by its hash) or local Hugging Face folder.")
    return 0


def add_parser(sub) -> None:
    parser = sub.add_parser("models", help="the model catalogue: what --model accepts by name")
    add_dataclass_args(parser, ModelsSettings)
    parser.set_defaults(func=_cmd_models)
