"""The frameworks' facts and presets are data files (rlmperf_lite/sim/data/frameworks/*.json):
every file parses with the same keys, every fact has a source, the files load back to
FRAMEWORKS and PRESETS, the installed package ships them, and a malformed file raises a
ValueError naming the file and the field."""
import json
import re
import shutil
import tomllib
from fnmatch import fnmatch
from pathlib import Path

import pytest

from rlmperf_lite.sim.frameworks import (FACT_FIELDS, FILE_KEYS, FRAMEWORKS, NEMO_RL_PERF_V04,
                                         PRESETS, FrameworkFacts, FrameworkPreset, load_facts,
                                         load_presets, load_step_times, published_speedups)

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "rlmperf_lite" / "sim" / "data"
FILES = sorted((DATA / "frameworks").glob("*.json"))
FACTS = [f for f in FrameworkFacts.__dataclass_fields__
         if f not in ("name", "sources", "cite", "as_of")]
PRESET_KEYS = [f for f in FrameworkPreset.__dataclass_fields__ if f != "framework"]


def test_one_file_per_framework_each_with_the_same_keys():
    assert len(FILES) == len(FRAMEWORKS) == 14
    for path in FILES:
        rec = json.loads(path.read_text(encoding="utf-8"))
        assert list(rec) == list(FILE_KEYS), path.name
        assert path.name == rec["name"].lower() + ".json"
        assert list(rec["facts"]) == FACTS, path.name
        for name, preset in rec["presets"].items():
            assert list(preset) == PRESET_KEYS, (path.name, name)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_fact_field_has_a_source(path):
    rec = json.loads(path.read_text(encoding="utf-8"))
    assert set(rec["sources"]) == set(FACT_FIELDS)
    for fact in FACT_FIELDS:
        source = rec["sources"][fact]
        assert source.startswith(("https://", "arXiv:", "unconfirmed")), (fact, source)
        if source.startswith("unconfirmed"):      # no source, so the fact must say so
            value = rec["facts"][fact]
            assert "unconfirmed" in value or value.startswith("none"), (fact, value)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_file_dates_its_facts_and_table_12_1_shows_the_date(path):
    # Facts go stale (issue 21): each file names the commits or releases read and their date
    # in one field, as_of, and the book's Table 12.1 shows it in its last column.
    rec = json.loads(path.read_text(encoding="utf-8"))
    as_of = rec["as_of"]
    assert isinstance(as_of, str) and re.search(r"\((?:[A-Z][a-z]+\.? )?20\d\d\)", as_of), as_of
    assert FRAMEWORKS[rec["name"]].as_of == as_of
    table = (REPO / "book" / "ch12_frameworks.md").read_text(encoding="utf-8")
    header = next(line for line in table.splitlines() if line.startswith("| framework | default"))
    assert header.rstrip().endswith("| as of |"), header
    row = next(line for line in table.splitlines() if line.startswith(f"| {rec['name']} | "))
    assert row.rstrip().endswith(f"| {as_of} |"), row


def test_refreshed_facts_name_the_pull_requests():
    # OpenRLHF PR #1152 (Jan. 2026): --train.async_queue_size, default 1, replaces the
    # environment variable; prime-rl PR #2631 dropped max_async_level; AReaL PR #1500 colocates
    openrlhf, prime, areal = FRAMEWORKS["OpenRLHF"], FRAMEWORKS["prime-rl"], FRAMEWORKS["AReaL"]
    assert openrlhf.staleness_knob.startswith("--train.async_queue_size")
    assert openrlhf.staleness_default.startswith("1 ") and "unconfirmed" not in \
        openrlhf.staleness_default
    assert "pull/1152" in openrlhf.sources["staleness_knob"]
    assert "--train.partial_rollout_enable" in openrlhf.modes
    assert prime.staleness_knob.startswith("max_off_policy_steps")
    assert "pull/2631" in prime.sources["staleness_knob"]
    assert "colocation" in areal.placements_other and "pull/1500" in \
        areal.sources["placements_other"]
    assert "behav_imp_weight_cap" in areal.modes


def test_the_files_load_back_to_the_tables(tmp_path):
    shutil.copytree(DATA / "frameworks", tmp_path / "fw")
    assert load_facts(tmp_path / "fw") == FRAMEWORKS
    assert load_presets(tmp_path / "fw") == PRESETS
    assert list(load_presets(tmp_path / "fw")) == list(PRESETS)     # table order, not file order
    assert list(FRAMEWORKS)[:3] == ["verl", "OpenRLHF", "TRL"]
    assert FRAMEWORKS["verl"].cite == ("sheng2024hybridflow", "verlonestepoff", "verlfullyasync")
    # trl/experimental/async_grpo/async_grpo_config.py (@019ac735): max_staleness = 4
    assert FRAMEWORKS["TRL"].staleness_default == "4"
    assert PRESETS["trl-async"].staleness == 4.0


def test_nemo_rl_table_is_the_published_one():
    # NVIDIA-NeMo/RL docs/about/performance-summary.md (@06beed91), v0.4: Llama3.1-8B on 16
    # H100s, 97.7 s/step on-policy and 74.6 s one-step off-policy
    assert NEMO_RL_PERF_V04["rows"]["Llama3.1-8B"] == ((16, 97.7), (16, 74.6))
    assert set(NEMO_RL_PERF_V04) == {"source", "rows"}
    assert published_speedups()["Llama3.1-8B"]["step_speedup"] == pytest.approx(97.7 / 74.6)


def test_pyproject_ships_every_data_file():
    globs = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))[
        "tool"]["setuptools"]["package-data"]["rlmperf_lite.sim"]
    files = [p.relative_to(DATA.parent).as_posix() for p in DATA.rglob("*") if p.is_file()]
    assert files and all(any(fnmatch(f, g) for g in globs) for f in files), (files, globs)


def _broken(tmp_path, name: str, edit) -> Path:
    """A copy of the shipped files with ``edit(record)`` applied to ``name``.json."""
    folder = tmp_path / "fw"
    shutil.copytree(DATA / "frameworks", folder)
    path = folder / f"{name}.json"
    rec = json.loads(path.read_text(encoding="utf-8"))
    edit(rec)
    path.write_text(json.dumps(rec), encoding="utf-8")
    return folder


@pytest.mark.parametrize("edit, words", [
    (lambda r: r["facts"].pop("runtime"), ["verl.json", "'facts'", "runtime"]),
    (lambda r: r["sources"].pop("weight_sync"), ["verl.json", "'sources'", "weight_sync"]),
    (lambda r: r["facts"].update(modes=""), ["verl.json", "modes", "non-empty"]),
    (lambda r: r.update(colour="red"), ["verl.json", "colour"]),
    (lambda r: r.update(name="VeRL-2"), ["verl.json", "'name'"]),
    (lambda r: r.update(table_row=2), ["table_row", "1..14"]),
    (lambda r: r.update(as_of=" "), ["verl.json", "'as_of'", "non-empty"]),
    (lambda r: r.pop("as_of"), ["verl.json", "missing keys", "as_of"]),
    (lambda r: r["presets"]["verl"].update(layout="ring"), ["verl.json", "'verl'", "layout"]),
    (lambda r: r["presets"]["verl"].pop("mode"), ["verl.json", "'verl'", "mode"]),
    (lambda r: r["presets"]["verl"].update(staleness="1"), ["verl.json", "staleness"]),
])
def test_a_malformed_file_names_the_file_and_the_field(tmp_path, edit, words):
    folder = _broken(tmp_path, "verl", edit)
    with pytest.raises(ValueError) as err:
        load_facts(folder)
        load_presets(folder)
    assert all(w in str(err.value) for w in words), str(err.value)


def test_invalid_json_and_a_bad_step_table_name_the_file(tmp_path):
    folder = tmp_path / "fw"
    shutil.copytree(DATA / "frameworks", folder)
    (folder / "trl.json").write_text('{"name": "TRL",', encoding="utf-8")
    with pytest.raises(ValueError, match=r"trl\.json: not valid JSON"):
        load_facts(folder)
    table = tmp_path / "table.json"
    table.write_text(json.dumps({"source": "x", "rows": {"m": [[16, 97.7]]}}), encoding="utf-8")
    with pytest.raises(ValueError, match=r"table\.json: not a table of step times"):
        load_step_times(table)
