"""The `oar` subcommands of the other packages come through entry points; a core subcommand is
never a plugin's, so an install whose metadata still lists one (as `generate` was before it
moved into the core) neither loads it nor clashes with it."""
import importlib.metadata

from oar_attrib import cli


class _Entry:
    def __init__(self, name, register):
        self.name, self._register = name, register

    def load(self):
        return self._register


def test_an_entry_point_named_like_a_core_command_is_not_loaded(monkeypatch):
    loaded = []

    def stale(sub):
        raise AssertionError("the stale plugin was loaded")

    def web(sub):
        loaded.append("web")
        sub.add_parser("web")

    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda group: [_Entry("generate", stale), _Entry("web", web)])
    commands = cli.subcommands(cli.build_parser())
    assert loaded == ["web"] and {"generate", "web", "attribute", "recall"} <= set(commands)
    assert "--samples" in commands["generate"].format_help()  # the core's own `oar generate`
