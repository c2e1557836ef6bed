"""Shared cases of the cBMM tests: simulated 2PL data, a quiet fit, random response matrices, the MATH500 paths."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from calibration.methods.cbmm.calibrator import CBMMCalibrator
from calibration.simulate import draw_abilities, draw_item_params, simulate_responses

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
MATH500 = DATA / "lart" / "accuracy_math500.csv"
REFERENCE = DATA / "reference" / "cbmm_math500"
LBFGS_MATH500_LOSS = 24432.61  # reference/cbmm_math500/README.md: L-BFGS-B optimum on the 140 rows


def _sim(n, j, *, seed=0, missing=None, rate=0.0, sparsity=0.0):
    params = draw_item_params("2pl", j, rng=seed, sparsity=sparsity)
    theta = draw_abilities(n, rng=seed + 1)
    data = simulate_responses(params, theta, rng=seed + 2, missing=missing, missing_rate=rate)
    return data, params, theta


def _fit(data, **kw):
    kw.setdefault("progress", False)
    return CBMMCalibrator(**kw).fit(data)


def _random_problem(n, j, rng, missing=0.3):
    c = (rng.random((n, j)) < 0.5).astype(np.int8)
    c[rng.random((n, j)) < missing] = -1
    return c
