"""Exception types, one per failure family. Messages say what was wrong and what to do."""


class OARError(Exception):
    """Base class of every error raised by oar_attrib."""


class WorldConfigError(OARError, ValueError):
    """A problem-generator setting that cannot produce a valid problem."""


class UnknownNameError(OARError, ValueError):
    """A method, probe, preset or format name that is not registered."""


class TokenizerError(OARError, ValueError):
    """The tokenizer lacks something the computation needs (pad token, offsets)."""


class InputError(OARError, ValueError):
    """A prompt/response pair that cannot be scored as given (too long, empty, malformed)."""


class ModelLoadError(OARError, OSError):
    """A model name or folder that cannot be loaded."""


def unknown_name(kind: str, name: str, known) -> UnknownNameError:
    """Build the standard error for an unknown registry name."""
    return UnknownNameError(f"unknown {kind} {name!r}; known: {', '.join(sorted(known))}")


def renamed_keyword(old: str, old_value, new: str, new_value, default):
    """The value of a renamed keyword argument: the new one, or the old one (with a
    FutureWarning) when only that was given; both given and different is an InputError."""
    import warnings

    if old_value is None:
        return new_value
    if new_value != default and new_value != old_value:
        raise InputError(f"{old}= is the old spelling of {new}=; pass only {new}=")
    warnings.warn(f"{old}= is now {new}= (one name in Python, OARConfig and the CLI); the old name "
                  "still works", FutureWarning, stacklevel=3)
    return old_value


class OutputError(OARError, OSError):
    """An `--out` that cannot be written (missing folder, a folder, no permission, a full disk)."""


class LibraryVersionError(OARError, ImportError):
    """An installed library (transformers, TRL) that lacks a private name the project reaches;
    the message is one line naming the names and the versions the seam was checked on
    (`compat.transformers`, `training.compat`)."""


class MissingExtraError(OARError, ImportError):
    """A use of the library that needs an optional extra which is not installed; the message
    is one line naming the extra and the command that installs it (`extras.require_extra`)."""
