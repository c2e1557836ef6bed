"""Wrong-bank worlds for the default score's checks (test support, also used by
``benchmarks/score_misspecification.py``): a 2PL bank fitted by cBMM on answers drawn from another
model: 3PL/4PL with guessing floors and ceilings (``guess``), two abilities (``twofactor``), or the
guessing model with the bank's items shuffled (``shuffled``)."""

from __future__ import annotations

import warnings

import numpy as np
from scipy.special import expit

from calibration import CBMMCalibrator, ResponseData

J, N_CALIBRATION = 200, 150
WORLDS = ("guess", "twofactor", "shuffled")


def truth_model(kind, rng, n_items=J):
    """The answer probabilities of a world: ``p(theta, eta)`` (eta: the second ability, ``twofactor`` only)."""
    a, b = rng.uniform(0.7, 2.0, n_items), rng.normal(0.0, 1.2, n_items)
    if kind in ("guess", "shuffled"):
        c, d = rng.uniform(0.15, 0.3, n_items), rng.uniform(0.85, 1.0, n_items)
        return lambda theta, eta=0.0: c + (d - c) * expit(np.multiply.outer(theta, a) + b)
    g = rng.normal(0.0, 1.2, n_items)
    return lambda theta, eta: expit(np.multiply.outer(theta, a) + np.multiply.outer(eta, g) + b)


def fitted_bank(correct, item_ids, item_metadata=None):
    """What ``calibration fit --method cbmm`` writes (responses kept), without the interval check."""
    data = ResponseData.from_arrays(correct, item_ids=item_ids)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bank = CBMMCalibrator(rng=0, progress=False).fit(data).to_item_bank("misspecified", interval_check=False,
                                                                          item_metadata=item_metadata)
    return bank.with_group("responses", data.to_dataset())


#: the item categories of :func:`world` with ``categories=True``: their sizes (the field "area")
CATEGORY_SIZES = (15, 35, 60, 90)


def world(kind, seed, categories=False):
    """(bank, answer probabilities, generator, strongest calibration trait) of one wrong-bank world;
    ``categories``: the items fall in categories of ``CATEGORY_SIZES`` items at random, the bank's
    field "area" (c15, c35, ...), drawn after everything else (the rest is the same world)."""
    rng = np.random.default_rng(seed)
    p = truth_model(kind, rng)
    theta, eta = rng.normal(0.0, 1.0, N_CALIBRATION), rng.normal(0.0, 1.0, N_CALIBRATION)
    y = (rng.random((N_CALIBRATION, J)) < p(theta, eta)).astype(np.int8)
    if kind == "shuffled":
        y = y[:, rng.permutation(J)]  # the bank's items carry other items' parameters
    metadata = None
    if categories:
        labels = np.repeat([f"c{n}" for n in CATEGORY_SIZES], CATEGORY_SIZES)
        metadata = {"area": labels[np.random.default_rng([seed, 1]).permutation(J)]}
    return fitted_bank(y, [f"q{j:03d}" for j in range(J)], metadata), p, rng, float(theta.max())
