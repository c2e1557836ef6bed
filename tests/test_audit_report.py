"""Audit report and the calibration audit command (calibration.audit.report, calibration.cli.audit)."""

from __future__ import annotations

import pytest
import xarray as xr

from calibration.audit import GLOSSARY, recovery_audit, render_report, summary_table
from audit_cases import _bank_2pl

# ============================================================================ report and CLI
def test_render_report(tmp_path):
    ds = recovery_audit(_bank_2pl(30), [30, 60], method="cbmm", replications=2, rng=1, n_workers=1, progress=False)
    paths = render_report(ds, tmp_path)
    assert paths["png"].stat().st_size > 10_000
    page = paths["html"].read_text()
    assert "data:image/png;base64," in page and "<table" in page and "±" in page
    # columns say what they are, and the HTML explains every one of them
    table = summary_table(ds)
    assert "kendall" in table.columns and not {"tau", "rel", "insuff cov", "item err"} & set(table.columns)
    assert "What the columns mean" in page
    for column in table.columns:
        if column in GLOSSARY:
            assert f"<dt><b>{column}</b></dt>" in page.replace("&#x27;", "'")
    assert {"kendall", "reliability", "thin coverage", "item mean error"} <= set(GLOSSARY)
    with pytest.raises(ValueError, match="not an audit"):
        render_report(xr.Dataset(), tmp_path)


def test_cli(tmp_path, capsys):
    from catengine import write_item_bank

    from calibration.cli import main as calibration_main

    def main(argv):
        return calibration_main(["audit", *argv])

    bank_path = write_item_bank(_bank_2pl(30), tmp_path / "bank")
    out = tmp_path / "out"
    argv = ["--bank", str(bank_path), "--subjects", "30,60", "--method", "cbmm", "--reps", "2", "--out", str(out),
            "--seed", "3", "--workers", "1", "--no-progress"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "cbmm" in printed and "±" in printed
    for name in ("recovery_results.nc", "recovery_summary.nc", "recovery_report.png", "recovery_report.html", "audit.json"):
        assert (out / name).exists(), name
    with xr.open_dataset(out / "recovery_results.nc") as ds:
        assert ds.sizes["replication"] == 2 and ds.sizes["n_subjects"] == 2
    # same command again: everything is resumed from the records (and the stored seed): no record is
    # rewritten and the results are identical
    records = {p: p.stat().st_mtime_ns for p in (out / "records").glob("*.nc")}
    with xr.open_dataset(out / "recovery_results.nc") as ds:
        before = ds.load()
    assert main(argv[:-5] + ["--workers", "1", "--no-progress", "--no-report"]) == 0
    assert records and {p: p.stat().st_mtime_ns for p in (out / "records").glob("*.nc")} == records
    with xr.open_dataset(out / "recovery_results.nc") as ds:
        xr.testing.assert_identical(ds.load(), before)
    # a different configuration in the same directory is refused with exit status 2
    assert main([*argv[:3], "30", *argv[4:]]) == 2
    assert "different" in capsys.readouterr().err
    # the CAT audit through the CLI
    assert main(["--bank", str(bank_path), "--kind", "cat", "--simulees", "20", "--test-lengths", "5,10",
                 "--reps", "1", "--out", str(tmp_path / "cat"), "--seed", "1", "--workers", "1", "--no-progress",
                 "--no-report"]) == 0
    with xr.open_dataset(tmp_path / "cat" / "cat_results.nc") as ds:
        assert ds["coverage"].sizes == {"replication": 1, "selector": 2, "scoring": 1, "test_length": 2}


def test_docs_glossary_matches_the_report_glossary():
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "audit_reports.md").read_text()
    for column, meaning in GLOSSARY.items():
        assert f"| `{column}` | {meaning} |" in doc, column
