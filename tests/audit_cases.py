"""Shared cases of the audit tests: small 2PL and LaRT banks, and results without their timings."""

from __future__ import annotations

import numpy as np

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
