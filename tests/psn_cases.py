"""Shared cases of the PSN-IRT tests: tiny networks, random cells and a small simulated 4PL data set."""

from __future__ import annotations

import numpy as np

from calibration.data import ResponseData
from calibration.methods.psn import PSNNetwork
from calibration.methods.psn.network import PARAM_NAMES
from real_data import PSN_IRT

DATA = PSN_IRT / "percent_0.7.csv.gz"  # not shipped (no license stated): tests that read it skip without it


def _random_net(ordered, *, N=4, J=7, H=5, E=6, seed=0, scale=0.7):
    """A tiny float64 network with O(1) weights (the torch init is too small to exercise ReLUs)."""
    net = PSNNetwork(N, J, hidden_dim=H, embedding_dim=E, ordered_asymptotes=ordered, rng=seed)
    rng = np.random.default_rng(seed + 100)
    for name in PARAM_NAMES:
        arr = getattr(net, name)
        arr[...] = rng.normal(0.0, scale, arr.shape)
    return net


def _cells(N, J, n, seed=1):
    rng = np.random.default_rng(seed)
    return rng.integers(0, N, n), rng.integers(0, J, n), rng.integers(0, 2, n).astype(float)


def _sim(N=30, J=60, seed=3, missing=0.0):
    """Small 4PL data set in the native form with a clear ability signal."""
    rng = np.random.default_rng(seed)
    theta = rng.normal(0, 1.2, N)
    beta = rng.normal(0, 1.0, J)
    a = rng.uniform(1.0, 2.0, J)
    c = rng.uniform(0.0, 0.2, J)
    d = rng.uniform(0.85, 1.0, J)
    P = c + (d - c) / (1 + np.exp(-a * (theta[:, None] - beta)))
    Y = (rng.random(P.shape) < P).astype(np.int8)
    if missing:
        Y[rng.random(Y.shape) < missing] = -1
        Y[:, 0] = np.where(Y[:, 0] < 0, 1, Y[:, 0])  # keep every subject observed
    return ResponseData.from_arrays(Y), theta
