"""Simulation studies from TOML files (issue 16): one grid through one runner, cells = single audits."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from calibration.audit import recovery_audit
from calibration.audit.study import load_study, parse_missingness, run_study
from calibration.simulate import draw_item_params
from catengine import ItemBank, write_item_bank

TIMING = ["runtime_s", "cpu_s", "wall_s"]
ROOT = Path(__file__).resolve().parents[1]


def _strip(ds):
    return ds.drop_vars([v for v in TIMING if v in ds]).drop_attrs()


def _banks(tmp_path):
    p = draw_item_params("2pl", 20, rng=1)
    two = ItemBank.from_params("2pl", [f"i{k:02d}" for k in range(20)], bank_id="tiny_2pl", a=p.a, b=p.b)
    q = draw_item_params("lart", 20, rng=2, rho=-0.5)
    lart = ItemBank.from_params("lart", [f"i{k:02d}" for k in range(20)], bank_id="tiny_lart", rho=q.rho, cot_offset=1.0,
                                a=q.a, b=q.b, omega=q.omega + 5.0, phi=q.phi, lam=q.lam)
    return write_item_bank(two, tmp_path / "banks" / "tiny_2pl"), write_item_bank(lart, tmp_path / "banks" / "tiny_lart")


def _config(tmp_path, **over):
    two, lart = _banks(tmp_path)
    fields = {
        "name": '"tiny"', "replications": "2", "seed": "5",
        "banks": f'["banks/tiny_2pl", "{lart.relative_to(tmp_path).as_posix()}"]',
        "methods": '["cbmm", "saem"]', "n_subjects": "[30]", "abilities": '["normal", "skew-normal:skew=8"]',
        "missingness": '["none", "mcar:0.2"]', "out": '"out"',
    }
    fields.update(over)
    text = "\n".join(f"{k} = {v}" for k, v in fields.items()) + "\n"
    if "saem" in fields["methods"]:
        text += "[method_options.saem]\nmax_iter = 40\nn_burnin = 10\n"
    path = tmp_path / "study.toml"
    path.write_text(text)
    return path


def test_study_cells_equal_the_single_audits(tmp_path):
    path = _config(tmp_path, replications="1", abilities='["skew-normal:skew=8"]')
    study = load_study(path)
    assert study.n_records() == 2 * (1 + 2)  # missingness x (cbmm on the 2pl bank; cbmm and saem on the lart bank)
    ds = run_study(study, n_workers=1, progress=False)
    assert tuple(ds["kendall_tau"].dims) == ("replication", "bank", "missingness", "method", "n_subjects", "ability")
    assert ds["applicable"].sel(bank="tiny_2pl").values.tolist() == [1, 0]
    assert ds["applicable"].sel(bank="tiny_lart").values.tolist() == [1, 1]
    # saem cannot refit the 2PL bank: skipped, not failed
    skipped = ds.sel({"bank": "tiny_2pl", "method": "saem"})
    assert not bool(skipped["done"].any()) and bool(np.isnan(skipped["kendall_tau"]).all())
    assert int(ds["done"].sum()) == study.n_records() and int((ds["failed"] == 1).sum()) == 0
    # a cell of the study is the single recovery audit with the same seed
    single = recovery_audit(tmp_path / "banks" / "tiny_lart", [30], method=["cbmm", "saem"], ability=study.abilities,
                            missing="mcar", missing_rate=0.2, replications=1, rng=5, n_workers=1, progress=False,
                            method_options={"saem": {"max_iter": 40, "n_burnin": 10}})
    cell = ds.sel(bank="tiny_lart", missingness="mcar:0.2").drop_vars(["bank", "missingness", "applicable"])
    xr.testing.assert_identical(_strip(cell), _strip(single))
    assert float(ds["missing_share"].sel(missingness="mcar:0.2").mean()) == pytest.approx(0.2, abs=0.05)
    assert float(ds["missing_share"].sel(missingness="none").max()) == 0.0


def test_cli_study_runs_resumes_and_reports(tmp_path, capsys):
    from calibration.cli import main

    path = _config(tmp_path, methods='["cbmm"]', missingness='["none"]', abilities='["normal"]')
    assert main(["study", str(path), "--dry-run"]) == 0
    assert "4 records" in capsys.readouterr().out
    assert main(["study", str(path), "--workers", "1", "--no-progress"]) == 0
    out = tmp_path / "out"
    for name in ("study_results.nc", "study_summary.nc", "study_report.png", "study_report.html", "audit.json"):
        assert (out / name).exists(), name
    assert "tiny_2pl" in capsys.readouterr().out
    records = {p.name: p.stat().st_mtime_ns for p in (out / "records").glob("*.nc")}
    assert len(records) == 4
    assert main(["study", str(path), "--workers", "1", "--no-progress", "--no-report"]) == 0  # resumed: nothing rerun
    assert {p.name: p.stat().st_mtime_ns for p in (out / "records").glob("*.nc")} == records
    # another seed in the same directory is refused
    path.write_text(path.read_text().replace("seed = 5", "seed = 6"))
    assert main(["study", str(path), "--workers", "1", "--no-progress"]) == 2
    assert "different audit configuration" in capsys.readouterr().err


def test_bad_study_files_are_named(tmp_path):
    cases = [
        ({"methods": '["mml"]'}, "unknown method 'mml'"),
        ({"banks": '["nowhere"]'}, "does not exist"),
        ({"missingness": '["mcar:1.5"]'}, "must lie in \\(0, 1\\)"),
        ({"missingness": '["often"]'}, "is not 'none' or one of"),
        ({"n_subjects": '["30"]'}, "'n_subjects' must hold integers"),
        ({"replication": "3"}, "unknown key\\(s\\) \\['replication'\\]"),
        ({"abilities": '["lognormal"]'}, "unknown ability family"),
        ({"abilities": '["bank"]'}, "has no /subjects group"),
    ]
    for over, message in cases:
        path = _config(tmp_path, **over)
        with pytest.raises(ValueError, match=message) as info:
            load_study(path).plans()
        assert str(path) in str(info.value)
    path.write_text("banks = [")
    with pytest.raises(ValueError, match="not valid TOML"):
        load_study(path)
    assert parse_missingness("none") == (None, 0.0) and parse_missingness("MAR:0.3") == ("mar", 0.3)


def test_shipped_seed003_study_reproduces_the_design():
    study = load_study(ROOT / "studies" / "seed003_design.toml")
    assert study.n_subjects == [30, 100, 180, 400, 1000] and study.replications == 50
    assert study.methods == ["cbmm", "saem", "saem-irt", "psn"] and study.missingness == ["none"]
    assert all(b.exists() for b in study.banks)
    from catengine.itembank import open_item_bank

    # every method on a LaRT bank; saem (it needs CoT lengths) skipped on the others
    methods = sum(4 if open_item_bank(b).params.response_model == "lart" else 3 for b in study.banks)
    assert study.n_records() == methods * 5 * len(study.abilities) * 50
