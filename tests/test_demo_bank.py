"""The shipped demo bank is valid and is exactly what its build script produces."""

import runpy
from pathlib import Path

import numpy as np
import xarray as xr

from catengine import open_item_bank

ROOT = Path(__file__).resolve().parents[1]


def test_shipped_demo_bank_is_reproducible_from_its_script():
    script = runpy.run_path(str(ROOT / "scripts" / "build_demo_bank.py"))
    rebuilt = script["build_demo_bank"]()
    shipped = open_item_bank(ROOT / "item_banks" / "demo_math500_lart")
    xr.testing.assert_identical(shipped.items, rebuilt.items)
    assert shipped.response_model == "lart" and shipped.n_items == 500
    assert shipped.cot_offset == 1.0


def test_demo_bank_resembles_math500_summaries():
    # The design targets (script docstring): marginal item accuracy Phi(b / sqrt(1 + a^2)) with
    # median ~0.5 and a low tail near 0.1; per-item SD of log(T + 1), sqrt(phi^2 + lam^2), ~2.3.
    from scipy.stats import norm

    p = open_item_bank(ROOT / "item_banks" / "demo_math500_lart").params
    marginal = norm.cdf(p.b / np.sqrt(1 + p.a**2))
    assert 0.4 < np.median(marginal) < 0.6
    assert np.quantile(marginal, 0.05) < 0.25
    assert 2.0 < np.median(np.sqrt(p.phi**2 + p.lam**2)) < 2.6
    assert p.rho < 0
