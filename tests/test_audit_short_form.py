"""Short-form audits (calibration.audit.short_form)."""

from __future__ import annotations

import numpy as np
import pytest

from calibration.audit import short_form_audit, summarize
from audit_cases import _bank_2pl

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
