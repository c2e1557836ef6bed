"""Recovery audits: layout, reproducibility, resumable stores, workers (calibration.audit.recovery)."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
import xarray as xr

from calibration.audit import (
    StoreMismatchError,
    alter_bank,
    load_results,
    recovery_audit,
    summarize,
    summary_table,
)
from calibration.audit.methods import fit_cbmm
from audit_cases import _bank_2pl, _bank_lart, _strip

# ============================================================================ recovery audit
def test_recovery_dataset_layout_and_summary():
    bank = _bank_2pl(40)
    from calibration.audit.methods import fit_cbmm

    ds = recovery_audit(bank, [40, 80], method=["cbmm", ("cbmm-again", fit_cbmm)], ability=["normal", "skew-normal:skew=8"],
                        replications=2, rng=0, n_workers=1, progress=False)
    assert tuple(ds["kendall_tau"].dims) == ("replication", "method", "n_subjects", "ability")
    assert ds.sizes == {"replication": 2, "method": 2, "n_subjects": 2, "ability": 2}
    assert bool(ds["done"].all()) and not bool((ds["failed"] == 1).any())
    for name in ("kendall_tau", "pearson_a", "pearson_b", "rmse_theta", "rmse_a", "rmse_b", "aggregate_score_error",
                 "item_mean_error", "abs_skewness", "insufficient_coverage", "marginal_reliability", "runtime_s"):
        assert np.all(np.isfinite(ds[name].values)), name
    # the design diagnostics describe the truth: identical for every method of a replication
    for name in ("abs_skewness", "insufficient_coverage", "marginal_reliability"):
        np.testing.assert_array_equal(ds[name].sel(method="cbmm").values, ds[name].sel(method="cbmm-again").values)
    assert len(np.unique(ds["abs_skewness"].values)) > 1  # ... and differ between replications and designs
    s = summarize(ds)
    assert list(s["statistic"].values) == ["mean", "mcse", "sd", "n"]
    assert "replication" not in s.dims and s["kendall_tau"].sel(statistic="n").min() == 2
    table = summary_table(ds)
    assert len(table) == 8 and "±" in table["kendall"].iloc[0]  # 2 methods x 2 sizes x 2 abilities


def test_correct_model_at_large_n_recovers_parameters():
    # 2PL bank, cBMM (a correctly specified 2PL fit), N = 2000: item parameters near-perfect;
    # abilities limited only by the 150-item test (reliability ~0.9 -> Kendall tau ~0.8)
    bank = _bank_2pl(150, seed=5)
    ds = recovery_audit(bank, [100, 2000], method="cbmm", replications=2, rng=1, n_workers=1, progress=False)
    big = summarize(ds).sel({"n_subjects": 2000, "statistic": "mean", "method": "cbmm", "ability": "normal"})
    small = summarize(ds).sel({"n_subjects": 100, "statistic": "mean", "method": "cbmm", "ability": "normal"})
    assert float(big["pearson_a"]) > 0.9
    assert float(big["pearson_b"]) > 0.98
    assert float(big["pearson_difficulty"]) > 0.95
    assert float(big["rmse_a"]) < 0.1
    assert float(big["rmse_b"]) < 0.1
    assert float(big["item_mean_error"]) < 0.01
    assert float(big["kendall_tau"]) > 0.75
    assert float(big["rmse_theta"]) < 0.4
    # and clearly better than at N = 100
    assert float(big["pearson_a"]) > float(small["pearson_a"]) + 0.1
    assert float(big["item_mean_error"]) < float(small["item_mean_error"])


_CALLS = {"n": 0}


def flaky_fit(data, rng, **options):
    """Fails on every third call (a replication-level error the audit must record)."""
    _CALLS["n"] += 1
    if _CALLS["n"] % 3 == 0:
        raise np.linalg.LinAlgError("singular matrix (deliberate)")
    return fit_cbmm(data, rng, **options)


def test_failures_are_recorded_not_raised():
    _CALLS["n"] = 0
    ds = recovery_audit(_bank_2pl(30), [30], method=[("flaky", flaky_fit)], replications=6, rng=2, n_workers=1,
                        progress=False)
    failed = ds["failed"].values.ravel()
    assert failed.sum() == 2 and bool(ds["done"].all())
    errors = ds["error"].values.ravel()
    assert all("LinAlgError: singular matrix (deliberate)" in e for e in errors[failed == 1])
    assert all(e == "" for e in errors[failed == 0])
    assert np.all(np.isnan(ds["kendall_tau"].values.ravel()[failed == 1]))
    assert np.all(np.isfinite(ds["kendall_tau"].values.ravel()[failed == 0]))
    # the truth's design diagnostics are still recorded for a failed fit
    assert np.all(np.isfinite(ds["abs_skewness"].values))
    s = summarize(ds)
    assert float(s["failed"].sel({"statistic": "mean"}).squeeze()) == pytest.approx(2 / 6)
    assert int(s["kendall_tau"].sel({"statistic": "n"}).squeeze()) == 4


class _InterruptAfter:
    """A cbmm fit that raises KeyboardInterrupt on its k-th call (a Ctrl-C mid-audit)."""

    def __init__(self, k):
        self.k, self.calls = k, 0

    def __call__(self, data, rng, **options):
        self.calls += 1
        if self.calls == self.k:
            raise KeyboardInterrupt
        return fit_cbmm(data, rng, **options)


def test_resume_after_interruption_and_deleted_records(tmp_path):
    bank = _bank_2pl(30)
    kw = dict(n_subjects=[30, 60], replications=3, rng=7, n_workers=1, progress=False)
    reference = recovery_audit(bank, method="cbmm", **kw)

    out = tmp_path / "audit"
    with pytest.raises(KeyboardInterrupt):
        recovery_audit(bank, method=[("cbmm", _InterruptAfter(4))], out=out, **kw)
    records = sorted((out / "records").glob("*.nc"))
    assert len(records) == 3  # the first three tasks were written, nothing partial is left
    assert not list((out / "records").glob(".tmp-*"))
    partial = load_results(out)
    assert tuple(partial["kendall_tau"].dims) == ("replication", "method", "n_subjects", "ability")
    assert int(partial["done"].sum()) == 3 and partial.sizes["replication"] == 3
    assert np.isnan(partial["kendall_tau"].values[~partial["done"].values]).all()

    resumed = recovery_audit(bank, method="cbmm", out=out, **kw)
    xr.testing.assert_identical(_strip(resumed), _strip(reference))

    # delete some records (as if the run had died earlier): a rerun recomputes exactly those
    before = {p.name: os.path.getmtime(p) for p in (out / "records").glob("*.nc")}
    gone = sorted(before)[::2]
    for name in gone:
        (out / "records" / name).unlink()
    again = recovery_audit(bank, method="cbmm", out=out, **kw)
    xr.testing.assert_identical(_strip(again), _strip(reference))
    after = {p.name: os.path.getmtime(p) for p in (out / "records").glob("*.nc")}
    assert set(after) == set(before)
    assert all(after[n] == before[n] for n in before if n not in gone)  # the others were skipped

    # rng=None on resume reuses the stored seed
    xr.testing.assert_identical(_strip(recovery_audit(bank, method="cbmm", out=out, **{**kw, "rng": None})),
                                _strip(reference))
    # more replications extend the same store
    more = recovery_audit(bank, method="cbmm", out=out, **{**kw, "replications": 4})
    xr.testing.assert_identical(_strip(more.isel(replication=slice(0, 3))), _strip(reference))


def test_store_refuses_a_different_configuration(tmp_path):
    bank = _bank_2pl(30)
    recovery_audit(bank, [30], replications=1, rng=1, out=tmp_path, n_workers=1, progress=False)
    with pytest.raises(StoreMismatchError, match="seed"):
        recovery_audit(bank, [30], replications=1, rng=2, out=tmp_path, n_workers=1, progress=False)
    with pytest.raises(StoreMismatchError, match="bank"):
        recovery_audit(alter_bank(bank, b_shift=1.0), [30], replications=1, rng=1, out=tmp_path, n_workers=1,
                       progress=False)
    with pytest.raises(StoreMismatchError, match="dimensions"):
        recovery_audit(bank, [30, 60], replications=1, rng=1, out=tmp_path, n_workers=1, progress=False)


def test_recovery_validates_its_arguments():
    bank = _bank_2pl(20)
    with pytest.raises(ValueError, match="CoT"):
        recovery_audit(bank, [30], method="saem", replications=1, n_workers=1, progress=False)
    with pytest.raises(ValueError, match="unknown method"):
        recovery_audit(bank, [30], method="mml", replications=1, n_workers=1, progress=False)
    with pytest.raises(ValueError, match="replications"):
        recovery_audit(bank, [30], replications=0, n_workers=1, progress=False)
    with pytest.raises(ValueError, match="n_subjects"):
        recovery_audit(bank, [0], replications=1, n_workers=1, progress=False)
    with pytest.raises(ValueError, match="method_options"):
        recovery_audit(bank, [30], method_options={"saem": {}}, replications=1, n_workers=1, progress=False)


def test_recovery_with_missing_data():
    ds = recovery_audit(_bank_2pl(40), [60], method="cbmm", missing="mcar", missing_rate=0.5, replications=2, rng=3,
                        n_workers=1, progress=False)
    assert ds["missing_share"].values == pytest.approx(0.5, abs=0.01)
    assert not bool((ds["failed"] == 1).any())


def test_lart_recovery_with_saem_and_irt_only():
    # LaRT truth refitted by SAEM with CoT and in its IRT-only mode: CoT parameters recovered,
    # posterior SDs reported; with rho = -0.8 the CoT-informed SDs are smaller
    bank = _bank_lart(30, rho=-0.8)
    ds = recovery_audit(bank, [150], method=["saem", "saem-irt"], replications=1, rng=4, n_workers=1, progress=False,
                        method_options={"saem": {"max_iter": 80, "n_burnin": 15}, "saem-irt": {"max_iter": 80, "n_burnin": 15}})
    assert not bool((ds["failed"] == 1).any()), ds["error"].values
    saem = ds.sel({"method": "saem"}).squeeze()
    irt = ds.sel({"method": "saem-irt"}).squeeze()
    assert float(saem["pearson_a"]) > 0.6 and float(saem["pearson_b"]) > 0.8
    assert float(saem["rmse_omega"]) < 0.3 and abs(float(saem["error_rho"])) < 0.2
    assert math.isnan(float(irt["rmse_omega"]))
    assert float(saem["theta_sd_mean"]) < float(irt["theta_sd_mean"])
    assert 0.8 < float(saem["theta_coverage"]) <= 1.0


@pytest.mark.slow
def test_parallel_results_do_not_depend_on_the_number_of_workers(tmp_path):
    bank = _bank_2pl(30)
    kw = dict(n_subjects=[30, 60], method="cbmm", replications=3, rng=11, progress=False)
    serial = recovery_audit(bank, n_workers=1, **kw)
    parallel = recovery_audit(bank, n_workers=2, out=tmp_path, **kw)
    xr.testing.assert_identical(_strip(parallel), _strip(serial))
