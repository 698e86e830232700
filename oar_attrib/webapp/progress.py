"""The progress of a store being filled in the background (`oar demo`): a small JSON file
beside the store, written atomically by the filling process and read by the pages.

Each stage is {"name", "done", "total", "unit", "state", "note"}; `state` is one of
`waiting`, `running`, `done`, `skipped` (with a one-line `note` saying why) or `failed`.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..files import write_file

STATES = ("waiting", "running", "done", "skipped", "failed")


@dataclass
class Stage:
    name: str
    done: int = 0
    total: int = 0
    unit: str = "traces"
    state: str = "waiting"
    note: str = ""

    def line(self) -> str:
        if self.state in ("skipped", "failed"):
            return f"{self.name}: {self.state} ({self.note})"
        if self.state == "done":
            return f"{self.name}: done"
        if self.state != "running":
            return f"{self.name}: waiting"
        parts = [f"{self.done}/{self.total} {self.unit}"] if self.total else []
        return f"{self.name}: " + ", ".join(parts + [self.note] if self.note else parts or ["running"])


@dataclass
class Progress:
    """The stages of a background fill, kept in `path` (see the module docstring)."""

    path: Path
    stages: list[Stage] = field(default_factory=list)

    @classmethod
    def of_store(cls, store_path: str | Path) -> "Progress":
        return cls(Path(str(store_path) + ".progress.json"))

    def stage(self, name: str, **fields) -> Stage:
        """The stage `name` (added when new), its fields updated, and the file written."""
        found = next((s for s in self.stages if s.name == name), None)
        if found is None:
            found = Stage(name)
            self.stages.append(found)
        for key, value in fields.items():
            setattr(found, key, value)
        self.write()
        return found

    def write(self) -> None:
        write_file(self.path, json.dumps({"stages": [asdict(s) for s in self.stages]}))

    def read(self) -> "Progress":
        try:
            data = json.loads(self.path.read_text())
            self.stages = [Stage(**{k: s[k] for k in Stage.__dataclass_fields__ if k in s})
                           for s in data.get("stages", [])]
        except (OSError, ValueError, TypeError, AttributeError):
            self.stages = []  # not started, or written by another version: show nothing
        return self

    @property
    def finished(self) -> bool:
        return bool(self.stages) and all(s.state in ("done", "skipped", "failed") for s in self.stages)

    def where(self) -> str:
        """How far every stage is, in one line ('arithmetic world: 16/96 traces; ...')."""
        return "; ".join(s.line() for s in self.stages) or "before its first trace"

    def line(self) -> str:
        """One line for the pages; empty when nothing is under way."""
        if not self.stages or self.finished and all(s.state == "done" for s in self.stages):
            return ""
        prefix = "Finished filling this store" if self.finished else \
            "Filling this store in the background (reload to see more)"
        return f"{prefix}: {self.where()}"
