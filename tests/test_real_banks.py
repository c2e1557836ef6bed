"""The shipped real banks: cards, namespaced item ids, ``catengine banks``, foreign ids rejected, and
rebuilding from ``scripts/build_real_banks.py`` reproduces them.

Rebuild tests, on the repository's ``data/``: the data each bank was fitted on hashes to the
bank's ``responses_sha256`` (all four, cheap); refitting the parameters reproduces
the stored ones (all four, slow: about 15 s); the full rebuild with the replay audit of the card
reproduces ``chembench_2pl`` (slow: the replay audit of one bank, 15-30 s; the four take minutes).
"""

from __future__ import annotations

import io
import json
import os
import runpy
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from calibration.heldout import attach_score_factors

from catengine import CATSession, list_banks, open_item_bank
from catengine.session.errors import UnknownItemError
from real_data import CHEMBENCH, DATA

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = runpy.run_path(str(ROOT / "scripts" / "build_real_banks.py"))
RECIPES = SCRIPT["RECIPES"]
EXPECTED = {  # bank id -> (benchmark, response model, method, items, LLMs, id prefix)
    "math500_lart": ("MATH500", "lart", "saem", 500, 158, "math500"),
    "math500_2pl": ("MATH500", "2pl", "cbmm", 500, 158, "math500"),
    "amc23_lart": ("AMC23", "lart", "saem", 40, 156, "amc23"),
    "chembench_2pl": ("ChemBench", "2pl", "cbmm", 2854, 22, "chembench"),
}


@pytest.fixture(scope="module")
def banks():
    return {bank_id: open_item_bank(bank_id) for bank_id in EXPECTED}


# ----------------------------------------------------------------------------- cards and ids
@pytest.mark.parametrize("bank_id", EXPECTED)
def test_shipped_bank_carries_its_card(banks, bank_id):
    benchmark, model, method, n_items, n_llms, _ = EXPECTED[bank_id]
    bank = banks[bank_id]
    assert Path(bank.source).parent == ROOT / "item_banks" / bank_id  # the shipped id resolves to the checkout's bank
    assert (bank.bank_id, bank.response_model, bank.n_items) == (bank_id, model, n_items)
    attrs = bank.attrs
    assert attrs["benchmark"] == benchmark and attrs["calibration_method"] == method
    assert attrs["n_subjects"] == n_llms and bank.responses.sizes["subject"] == n_llms
    assert bank.subjects.sizes["subject"] == n_llms
    assert attrs["calibration_date"] == SCRIPT["CALIBRATION_DATE"]
    assert attrs["license"] == "MIT" and attrs["license_text"].startswith("MIT License")
    assert (ROOT / "item_banks" / bank_id / "LICENSE").read_text(encoding="utf-8").strip() == attrs["license_text"]
    source = json.loads(attrs["source"])
    assert source == RECIPES[bank_id].source and len(source["commit"]) == 40
    if "interval_calibration" in attrs:  # the default fit's own cross-fit replaces the script's replay audit
        assert isinstance(json.loads(attrs["interval_calibration"]), dict)
        return
    audit = json.loads(attrs["replay_audit"])
    lengths = list(RECIPES[bank_id].replay_lengths)
    assert audit["test_length"] == lengths and audit["n_llms"] == n_llms
    selectors = audit["selectors"]
    assert set(selectors) == {"lart-theta" if model == "lart" else "mfi", "random"}
    for figures in selectors.values():
        assert all(0 <= v <= 1 for v in figures["coverage"] + figures["promised"])
        assert all(v > 0 for v in figures["sd_ratio"]) and len(figures["coverage"]) == len(lengths)


@pytest.mark.parametrize("bank_id", EXPECTED)
def test_item_ids_name_the_benchmark_and_the_source_position(banks, bank_id):
    prefix = EXPECTED[bank_id][5]
    bank = banks[bank_id]
    assert bank.item_ids == tuple(f"{prefix}/{k}" for k in range(bank.n_items))
    assert set(bank.item_metadata("benchmark")) == {EXPECTED[bank_id][0]}
    assert tuple(str(i) for i in bank.responses["item"].values) == bank.item_ids


def test_chembench_items_carry_the_human_difficulty_labels(banks):
    labels = banks["chembench_2pl"].item_metadata("difficulty")
    assert set(labels) <= {"easy", "intermediate", "hard", "unlabelled"}
    assert {"easy", "intermediate", "hard"} <= set(labels)
    groups = json.loads((CHEMBENCH / "difficulty_dict.json").read_text())
    for label, indices in groups.items():
        assert [k for k in range(labels.size) if labels[k] == label] == sorted(indices)


# ----------------------------------------------------------------------------- catengine banks
def _run(*args, env=None, stdin=None):
    full_env = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    return subprocess.run([sys.executable, "-m", "catengine.cli", *args], cwd=ROOT, env=full_env, input=stdin,
                          capture_output=True, text=True, timeout=300)


def test_catengine_banks_json_lists_the_four_with_their_cards(banks):
    done = _run("banks", "--json")
    assert done.returncode == 0, done.stderr
    cards = {c["bank_id"]: c for c in json.loads(done.stdout)}
    assert set(EXPECTED) <= set(cards)
    for bank_id, (benchmark, model, _, n_items, n_llms, _) in EXPECTED.items():
        c = cards[bank_id]
        assert (c["benchmark"], c["response_model"], c["n_items"], c["n_subjects"]) == (benchmark, model, n_items, n_llms)
        assert c["license"] == "MIT" and c["source"]["commit"] == RECIPES[bank_id].source["commit"]
        assert Path(c["path"]).is_file() and c["shipped"] is True
        assert c["replay_audit"] or c["interval_calibration"]
    text = _run("banks")
    assert text.returncode == 0 and f"math500_lart v{banks['math500_lart'].version}" in text.stdout
    # banks of >= 40 LLMs carry score factors, so the adaptive steps of their default (doubly robust)
    # selector are score-factor-d, and the check measured that default
    assert banks["math500_lart"].score_factors is not None
    assert "interval check (5 folds), doubly-robust" in text.stdout


def test_banks_under_a_directory_and_from_the_environment_are_listed(tmp_path, banks, monkeypatch):
    from catengine import write_item_bank

    small = banks["amc23_lart"].replace_attrs(bank_id="mine")
    write_item_bank(small, tmp_path / "deep" / "mine")
    write_item_bank(small, tmp_path / "deep" / "mine")  # v2: the latest is listed
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "broken_v1.nc").write_text("not netCDF")
    cards = {c["bank_id"]: c for c in list_banks(tmp_path, shipped=False)}
    assert cards["mine"]["version"] == 2 and cards["mine"]["shipped"] is False and cards["mine"]["benchmark"] == "AMC23"
    assert "error" in cards["broken"]
    (single,) = list_banks(tmp_path / "deep" / "mine" / "mine_v1.nc", shipped=False)
    assert single["version"] == 1
    with pytest.raises(FileNotFoundError, match="no directory"):
        list_banks(tmp_path / "absent")
    # CATENGINE_BANKS: searched first, so a bank id found there opens by id
    monkeypatch.setenv("CATENGINE_BANKS", str(tmp_path / "deep"))
    assert open_item_bank("mine").version == 2
    assert {"mine", *EXPECTED} <= {c["bank_id"] for c in list_banks()}
    with pytest.raises(FileNotFoundError, match="catengine banks"):
        open_item_bank("no_such_bank")


# ----------------------------------------------------------------------------- foreign ids
def test_session_rejects_another_benchmarks_ids_naming_them(banks):
    session = CATSession(banks["math500_2pl"])
    with pytest.raises(UnknownItemError, match=r"'chembench/17'.*keyed to benchmark 'chembench', not 'math500'"):
        session.record("chembench/17", 1)
    with pytest.raises(UnknownItemError, match=r"'17' would be 'math500/17'"):
        session.record("17", 1)
    assert session.n_items == 0
    session.record("math500/17", 1)
    assert session.n_items == 1


def _long_csv(path: Path, rows) -> Path:
    path.write_text("item,correct\n" + "".join(f"{i},{c}\n" for i, c in rows), encoding="utf-8")
    return path


def test_evaluate_rejects_answers_keyed_to_another_benchmark(tmp_path):
    chem = _long_csv(tmp_path / "chem.csv", [(f"chembench/{k}", k % 2) for k in range(40)])
    done = _run("evaluate", "--bank", "math500_2pl", "--responses", str(chem))
    assert done.returncode == 2
    assert "40 item ids are not in bank 'math500_2pl'" in done.stderr
    assert "'chembench/0', 'chembench/1', 'chembench/2', 'chembench/3', 'chembench/4' and 35 more" in done.stderr
    # the benchmark's own ids (positions) are read with the bank's prefix when all of them are its items
    bare = _long_csv(tmp_path / "bare.csv", [(str(k), k % 2) for k in range(40)])
    done = _run("evaluate", "--bank", "math500_2pl", "--responses", str(bare), "--max-items", "5")
    assert done.returncode == 0 and "with the bank's prefix 'math500/'" in done.stderr
    beyond = _long_csv(tmp_path / "beyond.csv", [(str(k), k % 2) for k in range(498, 502)])
    done = _run("evaluate", "--bank", "math500_2pl", "--responses", str(beyond))
    assert done.returncode == 2 and "'498' would be 'math500/498'" in done.stderr and "'chembench_2pl'" in done.stderr
    mixed = _long_csv(tmp_path / "mixed.csv", [(f"math500/{k}", k % 2) for k in range(30)] + [("chembench/9", 1)])
    done = _run("evaluate", "--bank", "math500_2pl", "--responses", str(mixed), "--max-items", "10")
    assert done.returncode == 2 and "'chembench/9'" in done.stderr and "--ignore-unknown-items" in done.stderr
    done = _run("evaluate", "--bank", "math500_2pl", "--responses", str(mixed), "--max-items", "10",
                "--ignore-unknown-items", "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.splitlines()[-1])["summary"]
    assert summary["ignored_unknown_items"] == 1 and summary["full_n_items"] == 30


def test_serve_rejects_a_foreign_id_and_keeps_going(banks):
    from catengine.session import Engine, serve

    requests = [{"op": "record", "subject": "m", "item": "amc23/3", "correct": 1, "id": 1},
                {"op": "record", "subject": "m", "item": "math500/3", "correct": 1, "id": 2}]
    out = io.StringIO()
    engine = Engine(banks["math500_lart"])
    engine.start("m")
    serve(engine, io.StringIO("".join(json.dumps(r) + "\n" for r in requests)), out)
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert first["ok"] is False and first["error"] == "UnknownItemError"
    assert "'amc23/3'" in first["message"] and "keyed to benchmark 'amc23'" in first["message"]
    assert second["ok"] is True and second["estimate"]["n_items"] == 1


def test_demo_runs_against_the_real_math500_bank():
    done = _run("demo", "--seed", "1", "--max-items", "8")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.startswith("bank math500_lart v") and "MATH500, calibrated by saem on 158 LLM runs" in out
    steps = [line.split() for line in out.splitlines() if line[:4].strip().isdigit()]
    assert 5 <= len(steps) <= 8 and all(s[1].startswith("math500/") for s in steps)
    # the result as every entry point words it: the score with its interval and items used, the stop, and
    # one ranking statement (the score's percentile among the calibration LLM runs, ScoreEstimate.percentile)
    assert f"), from {len(steps)} of 500 items\n" in out and "predicted full-benchmark accuracy " in out
    stops = [line for line in out.splitlines() if line.startswith("stopped: ")]
    assert len(stops) == 1 and (len(steps) < 8 or stops[0] == "stopped: reached 8 items")
    standing = [line for line in out.splitlines() if line.startswith("standing: ")]
    assert len(standing) == 1 and standing[0].startswith("standing: ahead of ")
    assert "% of the 158 calibration LLM runs" in standing[0]
    assert "ranks above" not in out and "% of the calibration population" not in out
    if "replay_audit" in open_item_bank("math500_lart").attrs:
        assert "intervals were" in out and "too narrow" in out


# ----------------------------------------------------------------------------- rebuild reproduces
@pytest.mark.parametrize("bank_id", EXPECTED)
def test_the_data_of_each_bank_is_what_its_script_reads(banks, bank_id):
    from calibration import ResponseData

    data = SCRIPT["load_data"](RECIPES[bank_id], DATA)
    bank = banks[bank_id]
    assert data.sha256() == bank.attrs["responses_sha256"]
    stored = ResponseData.from_dataset(bank.responses)  # checks the stored copy's own hash
    assert stored.sha256() == data.sha256()
    assert SCRIPT["license_text"](RECIPES[bank_id], DATA) == bank.attrs["license_text"]


@pytest.mark.slow
# chembench_2pl is rebuilt whole (parameters included) by the next test
@pytest.mark.parametrize("bank_id", [b for b in EXPECTED if b != "chembench_2pl"])
def test_refitting_reproduces_the_shipped_parameters(banks, bank_id):
    recipe = RECIPES[bank_id]
    data = SCRIPT["load_data"](recipe, DATA)
    bank = SCRIPT["fit_bank"](recipe, data, interval_check=False)  # the check is reproduced by the full rebuild below
    # the score factors come with the check; refit them as its hook does (same data, same seed)
    bank = attach_score_factors(bank, data, rng=SCRIPT["SEED"])
    rebuilt = bank.replace_attrs(**SCRIPT["bank_card"](recipe, data, DATA, None))
    rebuilt = rebuilt.with_content(*SCRIPT["content_for"](recipe, DATA))
    assert SCRIPT["compare"](banks[bank_id], rebuilt) == []
    assert np.max(np.abs(rebuilt.params.a - banks[bank_id].params.a)) <= SCRIPT["PARAMETER_ATOL"][recipe.method]


#: the check record's figures are rounded to 4 or 5 decimals: one rounding step
_RECORD_ROUNDING = 1e-4


def _record_differences(rebuilt, shipped, path: str = "", n: int | None = None) -> list[str]:
    """Where a rebuilt bank's check record differs from the shipped one beyond its tolerance.

    Keys, strings, integers (``n_llms``, ``test_length``, ``folds`` ...) and list lengths must be
    equal. The figures are statistics of the adaptive replays of held-out LLMs. Rebuilt on another
    CPU (another vector width, FMA contraction, summation order) the fit agrees within
    ``PARAMETER_ATOL`` (``compare``), but a replay that meets a near-tie of its selection criterion
    can take another item and from there run another session for that LLM. So a figure pooled over
    the n LLMs of its block (the ``n_llms`` beside it) may move by a fraction of its Monte-Carlo
    error: within half the standard error of an RMS (or mean absolute error) over n values,
    0.5 / sqrt(2 n) of itself (n = 22: 7.5%; the strength-ordered blocks' n = 4: 18%), and a
    coverage (a fraction of the n LLMs) by one LLM, 1 / n; each plus one rounding step. A figure
    outside such a block (``item_sd_factors``, ``calibration_accuracy_range``: functions of the fit
    and the data, no replay) is held to one rounding step."""
    if isinstance(shipped, dict):
        if not isinstance(rebuilt, dict) or set(rebuilt) != set(shipped):
            return [f"{path}: keys {sorted(set(rebuilt) ^ set(shipped)) if isinstance(rebuilt, dict) else rebuilt!r}"]
        if isinstance(shipped.get("n_llms"), int):
            n = shipped["n_llms"]
        return [d for k in shipped for d in _record_differences(rebuilt[k], shipped[k], f"{path}.{k}", n)]
    if isinstance(shipped, list):
        if not isinstance(rebuilt, list) or len(rebuilt) != len(shipped):
            return [f"{path}: {rebuilt!r} vs {shipped!r}"]
        return [d for k, (r, s) in enumerate(zip(rebuilt, shipped)) for d in _record_differences(r, s, f"{path}[{k}]", n)]
    if isinstance(shipped, float) and isinstance(rebuilt, float):
        if n is None:
            tol = _RECORD_ROUNDING
        elif "coverage" in path.rsplit(".", 1)[-1]:
            tol = 1.0 / n + _RECORD_ROUNDING
        else:
            tol = 0.5 / np.sqrt(2.0 * n) * abs(shipped) + _RECORD_ROUNDING
        return [] if abs(rebuilt - shipped) <= tol else [f"{path}: {rebuilt} vs {shipped} (tolerance {tol:.3g})"]
    return [] if rebuilt == shipped and type(rebuilt) is type(shipped) else [f"{path}: {rebuilt!r} vs {shipped!r}"]


@pytest.mark.slow
def test_full_rebuild_reproduces_chembench_2pl_with_its_replay_audit(banks):
    rebuilt, _ = SCRIPT["build_bank"]("chembench_2pl", DATA, replay=True, workers=1)
    shipped = banks["chembench_2pl"]
    assert SCRIPT["compare"](shipped, rebuilt) == []
    key = "interval_calibration" if "interval_calibration" in shipped.attrs else "replay_audit"
    def reproducible(record):  # the check's wall time is recorded too, like created_at: not part of the rebuild
        return {k: v for k, v in json.loads(record).items() if k != "seconds"}

    # field by field, within the tolerances of _record_differences (bit for bit on the machine that built it)
    assert _record_differences(reproducible(rebuilt.attrs[key]), reproducible(shipped.attrs[key])) == []


def test_compare_reports_a_changed_parameter(banks):
    bank = banks["math500_2pl"]
    tree = bank.to_datatree()
    tree["items"]["a"] = tree["items"]["a"] + 1e-3
    from catengine import ItemBank

    problems = SCRIPT["compare"](bank, ItemBank(tree))
    assert problems and "/items/a differs by up to" in problems[0]


def test_a_built_package_ships_the_banks_as_package_data(tmp_path):
    """``setup.py``'s build hook copies item_banks/ into the build as catengine/item_banks, where an
    installed (non-editable) catengine finds them."""
    pytest.importorskip("setuptools")
    import shutil

    src = tmp_path / "src"
    src.mkdir()
    for name in ("setup.py", "pyproject.toml", "README.md", "MANIFEST.in"):
        shutil.copy(ROOT / name, src / name)
    for name in ("catengine", "calibration", "item_banks"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / "build"
    done = subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(out)], cwd=src,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    shipped = out / "catengine" / "item_banks"
    for bank_id in EXPECTED:
        assert list((shipped / bank_id).glob(f"{bank_id}_v*.nc")) and (shipped / bank_id / "LICENSE").is_file()
    listed = subprocess.run([sys.executable, "-m", "catengine.cli", "banks", "--json"], cwd=tmp_path,
                            env=dict(os.environ, PYTHONPATH=str(out)), capture_output=True, text=True, timeout=300)
    assert listed.returncode == 0, listed.stderr
    paths = {c["bank_id"]: Path(c["path"]) for c in json.loads(listed.stdout)}
    assert all(paths[b].parent.parent == shipped for b in EXPECTED)
