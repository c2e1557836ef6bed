"""CAT audits (calibration.audit.cat)."""

from __future__ import annotations

import numpy as np
import pytest

from calibration.audit import alter_bank, cat_audit
from audit_cases import _bank_2pl, _bank_lart

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
