"""`calibration fit`: leaving LLMs out (--include/--exclude-subjects, ResponseData.select_subjects) and
a truthful lineage when a fresh fit lands in a directory that already holds versions (issue 19)."""

from __future__ import annotations

import numpy as np
import pytest

from calibration import ResponseData
from calibration.cli import main
from catengine import open_item_bank


def _data(n_subjects=40, n_items=25, seed=3):
    rng = np.random.default_rng(seed)
    theta = rng.standard_normal(n_subjects)
    a, b = rng.uniform(0.8, 1.6, n_items), rng.normal(0, 1, n_items)
    y = (rng.random((n_subjects, n_items)) < 1 / (1 + np.exp(-(np.outer(theta, a) + b)))).astype(np.int8)
    return ResponseData.from_arrays(y, subject_ids=[f"llm{i:02d}" for i in range(n_subjects)])


def test_select_subjects_include_exclude_and_unknown_ids():
    data = _data()
    held = data.select_subjects(exclude=["llm03", "llm07"])
    assert held.n_subjects == 38 and "llm03" not in held.subject_ids and "llm07" not in held.subject_ids
    only = data.select_subjects(include=["llm09", "llm01", "llm05"], exclude=["llm05"])
    assert only.subject_ids == ("llm01", "llm09")  # stored order, minus the excluded
    np.testing.assert_array_equal(only.correct, data.correct[[1, 9]])
    assert data.select_subjects() is data
    with pytest.raises(ValueError, match=r"exclude: 2 unknown subject id\(s\): 'gpt-9', 'llm99'"):
        data.select_subjects(exclude=["llm01", "gpt-9", "llm99"])
    with pytest.raises(ValueError, match="no subject is left"):
        data.select_subjects(include=["llm01"], exclude=["llm01"])
    with pytest.raises(TypeError, match="not one string"):
        data.select_subjects(exclude="llm01")


def test_cli_fit_leaves_llms_out_by_ids_or_file(tmp_path, capsys):
    data = _data()
    src = tmp_path / "acc.nc"
    data.to_netcdf(src)
    out = tmp_path / "banks"
    assert main(["fit", "--method", "cbmm", "--responses", str(src), "--bank-id", "held", "--out", str(out),
                 "--exclude-subjects", "llm00,llm11", "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "calibrating on 38 of 40 LLMs" in err
    bank = open_item_bank(out / "held")
    assert bank.attrs["n_subjects"] == 38
    stored = ResponseData.from_dataset(bank.responses)
    assert stored.sha256() == data.select_subjects(exclude=["llm00", "llm11"]).sha256()
    ids = tmp_path / "ids.txt"
    ids.write_text("# the ten to keep\n" + "\n".join(f"llm{i:02d}" for i in range(10)) + "\n")
    assert main(["fit", "--method", "cbmm", "--responses", str(src), "--bank-id", "ten", "--out", str(out),
                 "--include-subjects", str(ids), "--no-progress"]) == 0
    assert open_item_bank(out / "ten").attrs["n_subjects"] == 10
    capsys.readouterr()
    assert main(["fit", "--method", "cbmm", "--responses", str(src), "--bank-id", "bad", "--out", str(out),
                 "--exclude-subjects", "llm00,nobody", "--no-progress"]) == 2
    assert "unknown subject id(s): 'nobody'" in capsys.readouterr().err
    assert not (out / "bad").exists()


def test_fresh_fit_into_an_existing_bank_directory_is_a_new_lineage_root(tmp_path, capsys):
    from calibration.recalibration import bank_lineage

    data = _data()
    src = tmp_path / "acc.nc"
    data.to_netcdf(src)
    out = tmp_path / "banks"
    argv = ["fit", "--method", "cbmm", "--responses", str(src), "--bank-id", "b", "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    assert "new lineage root" not in capsys.readouterr().err
    assert main(argv + ["--exclude-subjects", "llm01"]) == 0
    err = capsys.readouterr().err
    assert "already holds v1..v1" in err and "new lineage root (parent 0)" in err and "calibration recalibrate" in err
    assert open_item_bank(out / "b", version=2).parent_version == 0
    rows = bank_lineage(out / "b")
    assert [(r["version"], r["parent"], r["origin"]) for r in rows] == [(1, 0, "fit"), (2, 0, "fit")]
    assert main(["log", str(out / "b")]) == 0
    log = capsys.readouterr().out
    assert "origin" in log.splitlines()[0] and "note: 2 lineage roots (v1, v2)" in log


@pytest.mark.parametrize("method_name", ["cbmm", "saem", "psn"])
def test_fit_help_shows_every_fixed_choice_and_the_methods_seed(method_name, capsys):
    """Each setting with a fixed set of values lists them in `calibration fit METHOD --help` (argparse
    hides them behind a metavar), and --seed states the seed the method uses when it is not given."""
    from calibration.methods import get_method

    method = get_method(method_name)
    with pytest.raises(SystemExit):
        main(["fit", method_name, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    settings = {**method.calibrator.SETTINGS, **method.calibrator.EXPORT_SETTINGS}
    with_choices = [s for s in settings.values() if s.flag and s.choices and s.switch_value is None]
    assert with_choices, "every method has at least one setting with fixed values"
    for setting in with_choices:
        assert f"{setting.flag} {{{','.join(map(str, setting.choices))}}}" in text
    own = str(method.cli_seed) if method.cli_seed is not None else "none: a fresh seed each run"
    assert f"random seed (default {own})" in text


def test_fit_names_the_file_whose_answers_cannot_be_calibrated(tmp_path, capsys):
    path = tmp_path / "all_correct.csv"
    ResponseData.from_arrays(np.ones((6, 4), dtype=np.int8), subject_ids=[f"m{i}" for i in range(6)],
                             item_ids=[f"q{j}" for j in range(4)]).to_wide_csv(path)
    code = main(["fit", "cbmm", "--responses", str(path), "--wide", "--bank-id", "b", "--out", str(tmp_path / "banks")])
    assert code == 2
    assert "calibration fit: error: all_correct.csv: nothing to calibrate" in capsys.readouterr().err
    assert not (tmp_path / "banks").exists()


def test_the_console_script_prints_warnings_as_one_line(tmp_path, capsys, monkeypatch):
    """Run as the `calibration` command (argv from sys.argv), a ConvergenceWarning is one line naming
    the program, not Python's file:line format quoting the library's source."""
    from calibration import simulate_dataset

    data, _ = simulate_dataset("lart", 12, 8, rng=2, cot_offset=1.0)
    path = tmp_path / "r.nc"
    data.to_netcdf(path)
    monkeypatch.setattr("sys.argv", ["calibration", "fit", "saem", "--responses", str(path), "--bank-id", "w",
                                     "--out", str(tmp_path / "banks"), "--max-iter", "3", "--burnin", "1", "--no-progress"])
    assert main() == 0
    err = capsys.readouterr().err
    line = next(l for l in err.splitlines() if "ConvergenceWarning" in l)
    assert line.startswith("calibration: ConvergenceWarning: LaRTSAEMCalibrator stopped at max_iter=3"), line
    assert ".py:" not in err
