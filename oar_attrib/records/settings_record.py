"""The settings record: one JSON-ready dict of everything that made a result, made by one
function (`settings_record`) and compared by one (`record_differences`).

Every result carries it: each trace's `params` (`TraceAttribution.to_dict()`), the config of a
run store's run, every line of an `oar attribute` JSONL (through its traces), the trainer's run
store, experiment cells and `oar recall`'s outputs and caches. A resume whose record differs
from the stored one is refused (`RecordMismatchError`, one line naming the fields); a
matching one resumes.

The record (`RECORD_FORMAT` 1):

    {"format": 1,
     "methods":  {name: {keyword: value used, ...}, ...},  # defaults included, speed knobs not
     "settings": {every ReshapeSettings field but `method`},  # `methods` says which ran
     "step_unit": "auto", "chat": null, "dtype": "float32",
     "model": {"name": "arith-tiny", "weights_sha256": "..."},
     "version": "0.1.0", **extra}

A method's entry holds every keyword of its function with the value it ran with: the function's
default, under the settings' fields that give its knobs their values (`MethodSpec.setting_knobs`),
under the caller's method_params (which in analysis already hold the method's
`analysis_params`). Keywords that change speed,
memory or display only (`registry.RUN_ONLY`, each method's `speed_params`) stay out, so a
resume with another token budget is not refused.
"""
from __future__ import annotations

import dataclasses
import inspect
import json
import re
from pathlib import Path

from ..errors import InputError
from ..models.cache import config_sha256, weights_sha256

RECORD_FORMAT = 1

# Fields that say where a result came from but not what it is: a resume with them changed goes
# on. The library version (a release that changes results changes a recorded field or the
# format), the token budget (every budgeted method promises the same scores under any budget),
# the model's name when both sides hash the same weights (a moved folder, or a catalogue name
# beside its folder's path).
INFORMATIONAL = ("format", "version", "settings.max_batch_tokens", "model.name")


class RecordMismatchError(InputError):
    """A resume into an output made with other settings: `fields` are the dotted fields that
    differ (`record_differences`), `stored` and `current` the two records, `where` the output
    as the command line names it (e.g. `--out runs/x.jsonl`) and `remedy` what to do."""

    def __init__(self, where: str, fields: list[str], stored: dict, current: dict,
                 remedy: str = "pass a new --out"):
        self.where, self.fields, self.stored, self.current, self.remedy = where, fields, stored, current, remedy
        super().__init__(self.line())

    def line(self, spell=None) -> str:
        """The one line: each field spelled by `spell(field)` (default: the dotted field)."""
        spell = spell or (lambda name: name)
        parts, seen = [], set()
        for name in self.fields:
            flag = spell(name)
            if flag in seen:  # two fields of one flag (e.g. model.name and its hash)
                continue
            seen.add(flag)
            parts.append(f"{flag}: {shown(self.stored, name)} there, {shown(self.current, name)} here")
        return f"{self.where} was made with other settings ({'; '.join(parts)}); {self.remedy}"


# The file a run folder keeps its settings record in (an `oar train` output dir, an `oar align`
# store); align stores made before this name kept it in `record.json`, which is still read.
RECORD_FILE = "settings_record.json"

def show(value) -> str:
    """A record value as a person types it: lists space-separated, None as `none`."""
    if value is None:
        return "none"
    if isinstance(value, (list, tuple)):
        return " ".join(show(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    return str(value)


def shown(record: dict, dotted: str) -> str:
    """A field's value in the one line; the model as its name and the head of its hash."""
    if dotted.startswith("model."):
        model = record.get("model") or {}
        digest, config = model.get("weights_sha256"), model.get("config_sha256")
        return f"{show(model.get('name'))}" + (f" (weights {digest[:12]})" if digest else "") + (
            f", config, tokenizer and chat template {config[:12]}"
            if dotted.endswith("config_sha256") and isinstance(config, str) else "")
    return show(lookup(record, dotted))


def lookup(record: dict, dotted: str):
    """The value of a dotted field (a `methods` field gives the method names)."""
    value = record
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return sorted(value) if dotted.split(".")[-1] == "methods" and isinstance(value, dict) else value


def plain(value):
    """A JSON-ready copy: tuples as lists, a compiled regex as its pattern, a torch dtype as
    its name, anything else that JSON cannot hold as its repr."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, re.Pattern):
        return value.pattern
    if type(value).__module__ == "torch" and type(value).__name__ == "dtype":
        return str(value).removeprefix("torch.")
    return repr(value)


def method_record(name: str, settings, params: dict | None = None) -> dict:
    """The keywords method `name` runs with (module docstring): (keyword -> value)."""
    from ..methods import method_spec
    from ..methods.registry import RUN_ONLY

    spec = method_spec(name)
    skip = set(RUN_ONLY) | set(spec.speed_params) | {"probe"}  # the probe is a setting
    values = {p.name: p.default for p in inspect.signature(spec.fn).parameters.values()
              if p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is not inspect.Parameter.empty}
    values |= {knob: getattr(settings, setting) for knob, setting in spec.setting_knobs.items()}
    values |= dict(params or {})
    return {k: plain(v) for k, v in sorted(values.items()) if k not in skip}


def _catalogue_name(folder: Path) -> str | None:
    """The catalogue name whose local folder is `folder` (nothing is fetched)."""
    from ..models.catalogue import CATALOGUE, entry_folder

    for name, entry in CATALOGUE.items():
        try:
            found = entry_folder(entry, fetch=False)
        except Exception:  # noqa: BLE001 - a damaged cache folder is not this model's identity
            continue
        if found is not None and Path(found).resolve() == folder.resolve():
            return name
    return None


def model_identity(model) -> dict:
    """{"name", "weights_sha256", "config_sha256"} of a model: a catalogue name or checkpoint
    path (resolved to its folder, fetched as `load_model` would), or a loaded model (its
    `name_or_path` folder). A model built in memory has no files: name and hashes None. The
    hashes are of the files the model was loaded from (its weights; its config, tokenizer and
    chat template, `models.cache.CONFIG_FILES`), not of weights changed since in memory. A
    record written before `config_sha256` existed lacks it, and a field only one side has is
    not compared (`record_differences`): such an output resumes, judged by its weights."""
    if model is None:
        return {"name": None, "weights_sha256": None}
    if isinstance(model, (str, Path)):
        from ..models.catalogue import CATALOGUE
        from ..models import resolve

        folder = resolve(model)
        name = str(model) if str(model) in CATALOGUE else str(Path(model).expanduser())
        return {"name": name, "weights_sha256": weights_sha256(folder), "config_sha256": config_sha256(folder)}
    source = str(getattr(model, "name_or_path", "") or "")
    folder = Path(source).expanduser() if source else None
    if folder is None or not folder.is_dir():
        return {"name": source or None, "weights_sha256": None}
    return {"name": _catalogue_name(folder) or str(folder), "weights_sha256": weights_sha256(folder),
            "config_sha256": config_sha256(folder)}


def model_dtype(model) -> str | None:
    """The dtype name of a loaded model's input embedding (None: no model)."""
    if model is None or isinstance(model, (str, Path)):
        return None
    return plain(model.get_input_embeddings().weight.dtype)


def settings_record(settings, methods, method_params: dict | None = None, *, model=None,
                    dtype=None, step_unit="auto", chat: bool | None = None, **extra) -> dict:
    """The record of a result made under `settings` (`ReshapeSettings`) by `methods` with
    `method_params` as used (analysis: already holding each method's `analysis_params`).

    model: a catalogue name, a checkpoint path or a loaded model (`model_identity`).
    dtype: the model's dtype (a name or torch dtype); default: the loaded model's, else float32.
    step_unit, chat: how reasoning splits into steps, whether prompts get the chat template.
    extra: more JSON-ready fields of the producer (e.g. the input of a store run).
    """
    from ..version import __version__

    params = method_params or {}
    names = [methods] if isinstance(methods, str) else list(methods)
    fields = {f.name: getattr(settings, f.name) for f in dataclasses.fields(settings) if f.name != "method"}
    record = {
        "format": RECORD_FORMAT,
        "methods": {m: method_record(m, settings, params.get(m)) for m in sorted(names)},
        "settings": plain(fields),
        "step_unit": plain(step_unit),
        "chat": chat,
        "dtype": plain(dtype) if dtype is not None else (model_dtype(model) or "float32"),
        "model": model_identity(model),
        "version": __version__,
    }
    return record | plain(extra)


def _informational(name: str, stored: dict, current: dict) -> bool:
    """Whether a differing dotted field is informational (`INFORMATIONAL`, at any depth: a
    record may sit inside a larger settings dict); a model's name only when both sides hash
    its weights."""
    for field in INFORMATIONAL:
        if name == field or name.endswith("." + field):
            if field != "model.name":
                return True
            twin = name[: -len("name")] + "weights_sha256"
            return None not in (lookup(stored, twin), lookup(current, twin))
    return False


def _is_record(value) -> bool:
    return isinstance(value, dict) and "format" in value and "methods" in value


def _differ(stored, current, prefix: str, out: list[str], strict: bool = False) -> None:
    if isinstance(stored, dict) and isinstance(current, dict):
        strict = strict and not (_is_record(stored) or _is_record(current))
        for key in sorted(stored.keys() ^ current.keys()) if strict else ():
            if not _is_record(stored.get(key, current.get(key))):  # a record added since: not compared
                out.append(f"{prefix}{key}")
        for key in sorted(stored.keys() & current.keys()):
            if key == "methods" and isinstance(stored[key], dict) and isinstance(current[key], dict) \
                    and sorted(stored[key]) != sorted(current[key]):
                out.append(f"{prefix}methods")  # other methods ran: their parameters are moot
                continue
            _differ(stored[key], current[key], f"{prefix}{key}.", out, strict)
    elif plain(stored) != plain(current):
        out.append(prefix[:-1])


def record_differences(stored: dict, current: dict, *, strict: bool = False) -> list[str]:
    """The dotted fields in which two records differ (e.g. `settings.tau`,
    `methods.oar_g.n_noise`, `methods` when other methods ran, `model.weights_sha256`), in
    key order; [] when a resume may go on. Works on any nested settings dict that holds a
    record (an experiment cell's settings).

    Not compared: the `INFORMATIONAL` fields, and a field only one side has (a field a newer
    release added; the result it describes was made with what is now its default). The model
    is compared by its weights when both sides hash them, else by its name. With `strict` (a
    plain settings dict around records, e.g. an experiment cell's), a key only one side has
    differs too, unless its value is a record (one that results made before records lack)."""
    out: list[str] = []
    _differ(stored, current, "", out, strict)
    return [name for name in out if not _informational(name, stored, current)]


def check_resume(where: str, stored: dict, current: dict, remedy: str, *, strict: bool = False) -> None:
    """RecordMismatchError unless a result recorded as `stored` may be resumed under `current`
    (`record_differences`, `strict` as there)."""
    fields = record_differences(stored, current, strict=strict)
    if fields:
        raise RecordMismatchError(where, fields, stored, current, remedy)


def legacy_record(trace: dict) -> dict:
    """The partial record of a trace written before records existed (`params` held tau, beta,
    w_min, the method params as given, and granularity, step_pool, weighting only when not
    the defaults): compared field by field, what it lacks is not compared."""
    params = dict(trace.get("params") or {})
    given = params.pop("methods", {}) or {}
    settings = {"probe": trace.get("probe"), "granularity": "token", "weighting": None}
    settings |= {k: params[k] for k in ("tau", "beta", "w_min", "granularity", "step_pool", "weighting")
                 if k in params}
    methods = {m: {k: plain(v) for k, v in (given.get(m) or {}).items()} for m in trace.get("scores") or {}}
    return {"methods": methods, "settings": settings}


def stored_record(trace: dict) -> dict:
    """The record a stored trace dict carries in its `params`, or its `legacy_record`."""
    params = trace.get("params") or {}
    return params if params.get("format") else legacy_record(trace)
