"""Trust audits (issue 7): metric definitions, recovery / short-form / CAT audits, store, runner, report, CLI."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
import xarray as xr
from scipy import stats

from calibration.audit import (
    AbilitySpec,
    StoreMismatchError,
    alter_bank,
    cat_audit,
    load_results,
    recovery_audit,
    render_report,
    GLOSSARY,
    short_form_audit,
    summarize,
    summary_table,
)
from calibration.audit import metrics as M
from calibration.audit.methods import fit_cbmm
from calibration.audit.runner import stream
from calibration.simulate import draw_item_params
from catengine import ItemBank

# runtimes differ between runs; everything else must be bit-identical
TIMING = ["runtime_s", "cpu_s", "wall_s"]


def _bank_2pl(n_items=60, seed=1, a_range=None, bank_id="audit_test"):
    p = draw_item_params("2pl", n_items, rng=seed)
    a = p.a if a_range is None else np.random.default_rng(seed + 1).uniform(*a_range, n_items)
    return ItemBank.from_params("2pl", [f"i{k:03d}" for k in range(n_items)], bank_id=bank_id, a=a, b=p.b)


def _bank_lart(n_items=40, seed=2, rho=-0.8):
    p = draw_item_params("lart", n_items, rng=seed, rho=rho)
    return ItemBank.from_params("lart", [f"i{k:03d}" for k in range(n_items)], bank_id="audit_lart", rho=p.rho,
                                cot_offset=1.0, a=p.a, b=p.b, omega=p.omega + 5.0, phi=p.phi, lam=p.lam)


def _strip(ds):
    return ds.drop_vars([v for v in TIMING if v in ds]).drop_attrs()


# ============================================================================ metric definitions
class TestMetrics:
    def test_kendall_tau_b_without_ties(self):
        # pairs of (1,2,3,4) vs (1,3,2,4): 6 pairs, only (2,3) discordant -> (5 - 1) / 6
        assert M.kendall_tau_b([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(4 / 6)
        assert M.kendall_tau_b([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)

    def test_kendall_tau_b_with_ties(self):
        # x = (1,1,2,3), y = (1,2,2,3): C = 4, D = 0, one pair tied in x only, one tied in y only:
        # tau_b = 4 / sqrt((6 - 1)(6 - 1)) = 0.8 (tau_a would be 4/6)
        assert M.kendall_tau_b([1, 1, 2, 3], [1, 2, 2, 3]) == pytest.approx(0.8)

    def test_kendall_tau_b_degenerate(self):
        assert math.isnan(M.kendall_tau_b([1, 1, 1], [1, 2, 3]))
        assert math.isnan(M.kendall_tau_b([1.0], [2.0]))
        # a non-finite pair is dropped: the rest is (1,2,3) vs (1,2,3)
        assert M.kendall_tau_b([1, 2, np.nan, 3], [1, 2, 5, 3]) == pytest.approx(1.0)

    def test_aggregate_score_and_item_mean_error(self):
        p = np.array([[0.2, 0.4], [0.6, 0.8]])
        q = np.array([[0.2, 0.6], [0.6, 0.8]])
        # subject means: true (0.3, 0.7), fitted (0.4, 0.7) -> mean |diff| = (0.1 + 0) / 2
        assert M.aggregate_score_error(p, q) == pytest.approx(0.05)
        # item means: true (0.4, 0.6), fitted (0.4, 0.7) -> (0 + 0.1) / 2
        assert M.item_mean_error(p, q) == pytest.approx(0.05)
        # errors that cancel within a subject are not errors of its score
        r = np.array([[0.3, 0.3], [0.7, 0.7]])
        assert M.aggregate_score_error(p, r) == pytest.approx(0.0)
        assert M.item_mean_error(p, r) == pytest.approx(0.1)

    def test_pearson_and_rmse(self):
        # dx = (-1, 0, 1), dy = (-7/3, -1/3, 8/3): sxy = 5, sxx = 2, syy = 114/9 -> r = 15 / sqrt(228)
        assert M.pearson([1, 2, 3], [2, 4, 7]) == pytest.approx(15 / math.sqrt(228))
        assert math.isnan(M.pearson([1, 1, 1], [1, 2, 3]))
        assert M.rmse([1, 2], [0, 0]) == pytest.approx(math.sqrt(2.5))
        assert M.rmse([1, np.nan], [0, 0]) == pytest.approx(1.0)

    def test_insufficient_coverage(self):
        theta = [0.0, 1.0]
        d = [0.1, -0.15, 0.2, 0.9, 1.3, np.nan]
        # subject 0: 0.1, -0.15, 0.2 within 0.2 (3 items); subject 1: only 0.9 (1 item)
        assert M.insufficient_coverage(theta, d, max_items=1) == pytest.approx(0.5)
        assert M.insufficient_coverage(theta, d, max_items=3) == pytest.approx(1.0)
        assert M.insufficient_coverage(theta, d, max_items=0) == pytest.approx(0.0)
        # the default (<= 5 items within 0.2): both are insufficient
        assert M.insufficient_coverage(theta, d) == pytest.approx(1.0)

    def test_insufficient_coverage_matches_a_loop(self):
        rng = np.random.default_rng(0)
        theta, d = rng.normal(size=50), rng.normal(size=300)
        loop = np.mean([np.sum(np.abs(d - t) <= 0.2) <= 5 for t in theta])
        assert M.insufficient_coverage(theta, d) == pytest.approx(loop)

    def test_marginal_reliability(self):
        # error variances 1/1 and 1/4: mean 0.625 -> 1 / 1.625
        assert M.marginal_reliability([1.0, 4.0]) == pytest.approx(1 / 1.625)
        assert M.marginal_reliability([0.0, 4.0]) == 0.0

    def test_skewness_g1(self):
        # x = (0, 0, 3): m2 = 2, m3 = 2, g1 = 2 / 2^1.5, G1 = sqrt(3 * 2) / 1 * g1 = sqrt(3)
        assert M.skewness_g1([0, 0, 3]) == pytest.approx(math.sqrt(3))
        x = np.random.default_rng(1).gamma(2.0, size=40)
        assert M.skewness_g1(x) == pytest.approx(stats.skew(x, bias=False))
        assert math.isnan(M.skewness_g1([1, 2]))
        assert math.isnan(M.skewness_g1([2, 2, 2, 2]))

    def test_linking_keeps_the_linear_predictor(self):
        rng = np.random.default_rng(3)
        theta = rng.normal(size=30)
        theta_hat = 0.5 * theta - 1.0
        A, B = M.mean_sigma_link(theta, theta_hat)
        assert A * theta_hat + B == pytest.approx(theta)
        a_hat, b_hat = rng.uniform(0.5, 2, 5), rng.normal(size=5)
        a_s, b_s = M.link_items(a_hat, b_hat, A, B)
        z_hat = np.outer(theta_hat, a_hat) + b_hat
        assert np.outer(A * theta_hat + B, a_s) + b_s == pytest.approx(z_hat)

    def test_mc_standard_error(self):
        # sd(1,2,3,4; ddof 1) = sqrt(5/3); / sqrt(4)
        assert M.mc_standard_error([1, 2, 3, 4]) == pytest.approx(math.sqrt(5 / 3) / 2)
        assert M.mc_standard_error([1, np.nan, 3]) == pytest.approx(1.0)
        assert math.isnan(M.mc_standard_error([1.0]))

    def test_summarize(self):
        ds = xr.Dataset(
            {"x": (("replication", "method"), [[1.0, 10.0], [3.0, np.nan], [2.0, 14.0]]),
             "failed": (("replication", "method"), [[0, 0], [0, 1], [0, 0]])},
            coords={"replication": [0, 1, 2], "method": ["a", "b"]},
        )
        s = summarize(ds)
        assert s["x"].sel({"method": "a", "statistic": "mean"}) == pytest.approx(2.0)
        assert s["x"].sel({"method": "a", "statistic": "mcse"}) == pytest.approx(1 / math.sqrt(3))
        assert s["x"].sel({"method": "b", "statistic": "mean"}) == pytest.approx(12.0)
        assert s["x"].sel({"method": "b", "statistic": "n"}) == 2
        assert s["failed"].sel({"method": "b", "statistic": "mean"}) == pytest.approx(1 / 3)

    def test_input_validation(self):
        with pytest.raises(ValueError, match="same length"):
            M.pearson([1, 2], [1, 2, 3])
        with pytest.raises(ValueError, match="same shape"):
            M.aggregate_score_error(np.zeros((2, 2)), np.zeros((2, 3)))
        with pytest.raises(ValueError, match=">= 0"):
            M.marginal_reliability([-1.0])


# ============================================================================ seeds, specs, banks
def test_streams_are_spawned_children():
    root = np.random.SeedSequence(42)
    children = root.spawn(3)
    for r, child in enumerate(children):
        assert np.array_equal(stream(42, r).generate_state(4), child.generate_state(4))
    # tags descend like spawn, addressed by value
    assert np.array_equal(stream(42, 1, 5).generate_state(4), children[1].spawn(6)[5].generate_state(4))


def test_ability_specs():
    spec = AbilitySpec("skew-normal:skew=8")
    assert spec.family == "skew-normal" and spec.kwargs == {"skew": 8.0}
    x = spec.draw(2000, np.random.default_rng(0))
    assert M.skewness_g1(x) > 0.5
    with pytest.raises(ValueError, match="unknown ability family"):
        AbilitySpec("lognormal")
    with pytest.raises(ValueError, match="key=value"):
        AbilitySpec("normal:skew")
    with pytest.raises(ValueError, match="subjects"):
        recovery_audit(_bank_2pl(), 30, ability="bank", replications=1, n_workers=1, progress=False)


def test_abilities_resampled_from_the_banks_calibration_subjects():
    from calibration.methods.cbmm.calibrator import CBMMCalibrator
    from calibration.simulate import simulate_dataset

    data, truth = simulate_dataset("2pl", 80, 30, rng=4, ability="skew-normal", ability_kwargs={"skew": 6})
    fitted = CBMMCalibrator(progress=False).fit(data).to_item_bank("fitted_bank")
    ds = recovery_audit(fitted, [40], ability="bank", replications=2, rng=1, n_workers=1, progress=False)
    assert list(ds["ability"].values) == ["bank"] and not bool((ds["failed"] == 1).any())


def test_alter_bank():
    bank = _bank_lart(20)
    wrong = alter_bank(bank, a_scale=2.0, b_shift=0.5, rho=0.0, sparsity=0.25, rng=1)
    p, q = bank.params, wrong.params
    zero = q.a == 0
    assert zero.sum() == 5
    assert q.a[~zero] == pytest.approx(2 * p.a[~zero])
    assert q.b == pytest.approx(p.b + 0.5)
    assert q.rho == 0.0 and q.omega == pytest.approx(p.omega)
    assert wrong.item_ids == bank.item_ids


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


# ============================================================================ short-form audit
def test_short_form_audit():
    # discriminations spread over (0.2, 2.5): information-based forms should beat random ones
    bank = _bank_2pl(100, seed=3, a_range=(0.2, 2.5))
    ds = short_form_audit(bank, [100], method=["truth", "cbmm"], sizes=["10%", 20], n_heldout=400, n_random=10,
                          replications=2, rng=5, n_workers=1, progress=False)
    assert tuple(ds["tau_irt"].dims) == ("replication", "method", "n_subjects", "ability", "form")
    assert list(ds["form"].values) == ["10%", "20"]
    assert ds["form_items"].sel({"method": "truth"}).values.ravel().tolist() == [10.0, 20.0] * 2
    assert not bool((ds["failed"] == 1).any())
    s = summarize(ds).sel(statistic="mean")
    assert float(s["gain"].sel({"method": "truth", "form": "10%"}).squeeze()) > 0.02
    # the random baseline is shared by the methods (same held-out LLMs and subsets)
    np.testing.assert_array_equal(ds["tau_random"].sel({"method": "truth"}).values,
                                  ds["tau_random"].sel({"method": "cbmm"}).values)
    with pytest.raises(ValueError, match="exceeds"):
        short_form_audit(bank, [50], sizes=[500], replications=1, n_workers=1, progress=False)


# ============================================================================ CAT audit
def test_cat_audit_detects_a_wrong_bank():
    truth = _bank_2pl(100, seed=9)
    kw = dict(n_simulees=200, test_lengths=(5, 20), selector="mfi", replications=1, rng=3, n_workers=1, progress=False)
    right = cat_audit(truth, **kw)
    assert tuple(right["coverage"].dims) == ("replication", "selector", "scoring", "test_length")
    cov = right["coverage"].sel(test_length=20).item()
    # the nominal 95% interval holds (+-3 binomial SEs at 200 simulees)
    assert 0.95 - 0.05 < cov < 0.995
    assert abs(right["bias"].sel(test_length=20).item()) < 0.1
    assert 0.8 < right["sd_ratio"].sel(test_length=20).item() < 1.25
    # slopes doubled in the engine's bank: over-confident SDs -> coverage far below 95%
    steep = cat_audit(alter_bank(truth, a_scale=2.0), true_bank=truth, **kw)
    assert steep["coverage"].sel(test_length=20).item() < 0.75
    assert steep["sd_ratio"].sel(test_length=20).item() > 1.5
    # intercepts shifted: a systematic bias
    shifted = cat_audit(alter_bank(truth, b_shift=1.0), true_bank=truth, **kw)
    assert shifted["bias"].sel(test_length=20).item() < -0.5
    assert shifted["coverage"].sel(test_length=20).item() < 0.75


def test_cat_audit_lart_vs_irt_scoring():
    bank = _bank_lart(40, rho=-0.8)
    ds = cat_audit(bank, n_simulees=60, test_lengths=(5, 10), selector=("mfi", "random"), replications=1, rng=1,
                   n_workers=1, progress=False)
    assert list(ds["scoring"].values) == ["lart", "irt"] and list(ds["selector"].values) == ["mfi", "random"]
    assert not bool((ds["failed"] == 1).any())
    sd = ds["theta_sd_mean"].squeeze("replication")
    assert bool((sd.sel(scoring="lart") < sd.sel(scoring="irt")).all())
    assert np.all(np.isfinite(ds["tau_rmse"].sel(scoring="lart").values))
    assert np.all(np.isnan(ds["tau_rmse"].sel(scoring="irt").values))
    # common random numbers: the same simulees and answers for every configuration, so a run of the
    # mfi cells alone reproduces them exactly
    alone = cat_audit(bank, n_simulees=60, test_lengths=(5, 10), selector=("mfi",), replications=1, rng=1,
                      n_workers=1, progress=False)
    for name in ("rmse", "coverage", "theta_sd_mean", "max_exposure"):
        np.testing.assert_array_equal(alone[name].sel(selector="mfi").values, ds[name].sel(selector="mfi").values)


def test_cat_audit_validates():
    bank = _bank_2pl(20)
    with pytest.raises(ValueError, match="lart"):
        cat_audit(bank, scoring="lart", test_lengths=(5,), replications=1, n_workers=1, progress=False)
    with pytest.raises(ValueError, match="exceeds"):
        cat_audit(bank, test_lengths=(50,), replications=1, n_workers=1, progress=False)
    with pytest.raises(ValueError, match="unknown selector"):
        cat_audit(bank, selector="best", test_lengths=(5,), replications=1, n_workers=1, progress=False)
    with pytest.raises(ValueError, match="same items"):
        cat_audit(bank, true_bank=_bank_2pl(21), test_lengths=(5,), replications=1, n_workers=1, progress=False)


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
