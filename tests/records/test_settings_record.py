"""The settings record (`records.settings_record`): what it holds, how two are compared, the
weights hash, and `attribute()`'s one settings object (the old keywords, OAR-G's analysis
draws, `compute_weights` as a deprecated face of `weigh`)."""
from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import os
import shutil
import warnings

import pytest
import torch

from oar_attrib.models import cache as model_cache
from oar_attrib.attribution import attribute, compute_weights
from oar_attrib.methods import method_spec
from oar_attrib.methods.registry import RUN_ONLY
from oar_attrib.models import load_model, resolve
from oar_attrib.records import settings_record as sr
from oar_attrib.weights import pipeline
from oar_attrib.weights.settings import ReshapeSettings
from oar_attrib.world import generate_problems

EVERY = ["oar_p", "oar_p_step", "oar_g", "ig", "entropy", "grail", "random", "resample", "none"]


@pytest.fixture(scope="module")
def tiny():
    return load_model("arith-tiny")


@pytest.fixture(scope="module")
def pairs():
    problems = generate_problems(2, "default", seed=4)
    return [p.prompt for p in problems], [p.solution for p in problems]


def test_the_record_holds_every_field_with_the_defaults_used():
    record = sr.settings_record(ReshapeSettings(tau=0.3), EVERY, {"oar_g": {"n_noise": 8}},
                                model="arith-tiny", step_unit="line", chat=False)
    assert set(record) == {"format", "methods", "settings", "step_unit", "chat", "dtype", "model", "version"}
    assert set(record["settings"]) == {f.name for f in dataclasses.fields(ReshapeSettings)} - {"method"}
    assert record["settings"]["tau"] == 0.3 and record["step_unit"] == "line" and record["chat"] is False
    assert record["dtype"] == "float32" and record["model"]["name"] == "arith-tiny"
    assert record["methods"]["oar_p"] == {"mask": "pad"}
    assert record["methods"]["oar_g"] == {"n_noise": 8, "noise_std": None}  # the settings' noise_std
    assert record["methods"]["ig"] == {"n_steps": 32}
    assert record["methods"]["resample"]["n_samples"] == 8 and record["methods"]["resample"]["batch_size"] == 64
    for name in EVERY:  # every keyword is either recorded or declared speed-only, never lost
        spec = method_spec(name)
        keywords = {p.name for p in inspect.signature(spec.fn).parameters.values()
                    if p.kind is inspect.Parameter.KEYWORD_ONLY} - {"probe"}
        skipped = set(RUN_ONLY) | set(spec.speed_params)
        assert set(record["methods"][name]) == keywords - skipped, name
    assert {"packing", "overhead_tokens"} <= set(method_spec("oar_p").speed_params)
    assert "internal_batch_size" in method_spec("ig").speed_params


def test_differences_name_identity_fields_and_pass_informational_ones():
    base = sr.settings_record(ReshapeSettings(), ["oar_p", "oar_g"], model="arith-tiny")

    def changed(**edits):
        record = {**base, "settings": dict(base["settings"]), "model": dict(base["model"]),
                  "methods": {k: dict(v) for k, v in base["methods"].items()}}
        for dotted, value in edits.items():
            *path, last = dotted.split("__")
            target = record
            for part in path:
                target = target[part]
            target[last] = value
        return record

    assert sr.record_differences(base, base) == []
    assert sr.record_differences(base, changed(settings__tau=0.9)) == ["settings.tau"]
    assert sr.record_differences(base, changed(methods__oar_g__n_noise=2)) == ["methods.oar_g.n_noise"]
    assert sr.record_differences(base, changed(version="9.9")) == []  # a new release alone resumes
    assert sr.record_differences(base, changed(settings__max_batch_tokens=64)) == []  # speed
    assert sr.record_differences(base, changed(model__name="/elsewhere/arith-tiny")) == []  # same weights
    assert sr.record_differences(base, changed(model__weights_sha256="0" * 64)) == ["model.weights_sha256"]
    unhashed = changed(model__weights_sha256=None)
    assert sr.record_differences(unhashed, {**unhashed, "model": {"name": "x", "weights_sha256": None}}) == ["model.name"]
    other = sr.settings_record(ReshapeSettings(), ["oar_p"], model="arith-tiny")
    assert sr.record_differences(base, other) == ["methods"]
    newer = changed(settings__new_knob=1)  # a field a later release added: not compared
    assert sr.record_differences(base, newer) == []
    assert sr.record_differences({"a": 1}, {"a": 1, "b": 2}, strict=True) == ["b"]
    assert sr.record_differences({"a": 1}, {"a": 1, "record": base}, strict=True) == []


def test_the_one_line_spells_each_field_once():
    base = sr.settings_record(ReshapeSettings(), ["oar_p"], model="arith-tiny")
    other = {**base, "settings": {**base["settings"], "tau": 0.9},
             "model": {"name": "x", "weights_sha256": "f" * 64}}
    err = sr.RecordMismatchError("--out o.jsonl", sr.record_differences(base, other), base, other)
    spell = {"settings.tau": "--tau", "model.weights_sha256": "--model", "model.name": "--model"}.get
    assert err.line(spell) == ("--out o.jsonl was made with other settings (--model: arith-tiny (weights "
                               f"{base['model']['weights_sha256'][:12]}) there, x (weights ffffffffffff) here; "
                               "--tau: 0.4 there, 0.9 here); pass a new --out")


def test_the_weights_hash_is_of_the_files_and_computed_once_per_process(tmp_path):
    folder = resolve("arith-tiny")
    digest = hashlib.sha256()
    for path in sorted(folder.glob("*.safetensors")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    assert sr.model_identity("arith-tiny")["weights_sha256"] == digest.hexdigest()
    before = model_cache._weights_digest.cache_info()
    for _ in range(3):
        sr.model_identity("arith-tiny")
    after = model_cache._weights_digest.cache_info()
    assert after.misses == before.misses and after.hits == before.hits + 3
    assert sr.weights_sha256(tmp_path) is None  # no weight files: no hash


def test_a_converted_folder_gives_its_recorded_identity_while_its_weights_are_as_recorded(tmp_path):
    """The identity a conversion records (`model_cache.weights_sha256`, read back) is the one
    the files give; it stands while every weight file has its recorded size and time, and the
    files are hashed again when one changed, was added or is gone."""
    folder = tmp_path / "converted"
    shutil.copytree(resolve("arith-tiny"), folder)
    computed = model_cache.weights_sha256(folder)
    planted = "f" * 64  # not a hash of anything: seen back only if the record is read
    record = {"files": model_cache.record_files(folder), "weights_sha256": planted}
    (folder / model_cache.SOURCE_FILE).write_text(json.dumps(record))
    assert sr.model_identity(str(folder))["weights_sha256"] == planted
    extra = folder / "more.safetensors"
    shutil.copy(folder / "model.safetensors", extra)
    assert model_cache.weights_sha256(folder) not in (planted, computed)  # a file added: hashed
    extra.unlink()
    assert model_cache.weights_sha256(folder) == planted
    weights = folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0x01
    weights.write_bytes(bytes(data))
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 10**9))
    changed = model_cache.weights_sha256(folder)
    assert changed not in (planted, computed)  # changed since: hashed, and not as before
    direct = hashlib.sha256(b"model.safetensors\0" + bytes(data)).hexdigest()
    assert changed == direct
    record["files"] = model_cache.record_files(folder)
    for edited in ("<b>x</b>", "F" * 64, "f" * 65, 7):  # not a sha256: never carried into a record
        (folder / model_cache.SOURCE_FILE).write_text(json.dumps({**record, "weights_sha256": edited}))
        assert model_cache.weights_sha256(folder) == direct


def test_a_loaded_model_has_the_identity_of_its_catalogue_name(tiny):
    model, _ = tiny
    assert sr.model_identity(model) == sr.model_identity("arith-tiny")
    assert sr.model_dtype(model.to(torch.bfloat16)) == "bfloat16"
    model.to(torch.float32)
    assert sr.model_identity(torch.nn.Linear(2, 2)) == {"name": None, "weights_sha256": None}


def test_keyword_and_settings_forms_give_the_same_traces(tiny, pairs):
    model, tok = tiny
    settings = ReshapeSettings(tau=0.6, beta=1.5, granularity="step", step_pool="max", seed=2)
    methods = ["oar_p", "oar_g", "random"]
    new = attribute(model, tok, *pairs, methods, settings)
    with pytest.warns(DeprecationWarning, match=r"settings=ReshapeSettings\(tau=\.\.\."):
        old = attribute(model, tok, *pairs, methods, tau=0.6, beta=1.5, granularity="step",
                        step_pool="max", seed=2)
    for a, b in zip(new, old):
        a, b = a.to_dict(), b.to_dict()
        assert a.pop("timings").keys() == b.pop("timings").keys()
        assert a == b  # scores, weights, record: bit for bit
    with pytest.raises(TypeError, match="unexpected keyword argument 'tua'"):
        attribute(model, tok, *pairs, methods, tua=0.6)


def test_analysis_reads_oar_g_with_8_draws_and_the_trace_says_so(tiny, pairs):
    model, tok = tiny
    default = attribute(model, tok, *pairs, ["oar_g"])[0]
    assert default.to_dict()["params"]["methods"]["oar_g"]["n_noise"] == 8
    eight = attribute(model, tok, *pairs, ["oar_g"], method_params={"oar_g": {"n_noise": 8}})[0]
    one = attribute(model, tok, *pairs, ["oar_g"], method_params={"oar_g": {"n_noise": 1}})[0]
    assert default.scores["oar_g"] == eight.scores["oar_g"] != one.scores["oar_g"]
    assert one.to_dict()["params"]["methods"]["oar_g"]["n_noise"] == 1  # the caller's own wins


def test_training_records_the_papers_one_draw(tmp_path):
    from oar_attrib.training.config import OARConfig

    args = OARConfig(output_dir=str(tmp_path), oar_method="oar_g", use_cpu=True, report_to=[])
    record = args.settings_record("arith-tiny")
    assert record["methods"] == {"oar_g": {"n_noise": 1, "noise_std": None}}
    assert record["training"]["learning_rate"] == args.learning_rate


def test_compute_weights_is_a_deprecated_face_of_weigh(monkeypatch):
    calls = []
    original = pipeline.weigh

    def spy(importances, scored, settings, step_ids=None):
        calls.append(settings)
        return original(importances, scored, settings, step_ids)

    monkeypatch.setattr(pipeline, "weigh", spy)
    importance = torch.rand(2, 7, generator=torch.Generator().manual_seed(0))
    mask = torch.rand(2, 7, generator=torch.Generator().manual_seed(1)) > 0.3
    with pytest.warns(DeprecationWarning, match="weigh"):
        got = compute_weights("entropy", importance, mask, tau=0.5, weighting="top_rho", rho=0.4)
    want = original(importance, mask, ReshapeSettings(method="entropy", tau=0.5, weighting="top_rho", rho=0.4))
    assert len(calls) == 1 and torch.equal(got, want)


def test_a_trace_from_before_records_is_compared_on_what_it_held():
    old = {"probe": "as_mean", "scores": {"oar_p": [0.0]},
           "params": {"tau": 0.4, "beta": 2.0, "w_min": 0.1, "methods": {}}}
    now = sr.settings_record(ReshapeSettings(), ["oar_p"], model="arith-tiny")
    assert sr.record_differences(sr.stored_record(old), now) == []
    tau = sr.settings_record(ReshapeSettings(tau=0.9), ["oar_p"], model="arith-tiny")
    assert sr.record_differences(sr.stored_record(old), tau) == ["settings.tau"]
    step = sr.settings_record(ReshapeSettings(granularity="step"), ["oar_p"], model="arith-tiny")
    assert sr.record_differences(sr.stored_record(old), step) == ["settings.granularity"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert sr.stored_record({"params": now}) is now
