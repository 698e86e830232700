"""The distribution's version, written once: `pyproject.toml` reads it from this file, the
package face and the settings record of every result import it (CHANGELOG.md: 0.2.0 is
unreleased)."""

__version__ = "0.2.0.dev0"
