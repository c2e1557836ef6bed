"""Calibration check of the PSN-IRT Laplace posterior on held-out cells (the Laplace-PSN-IRT paper, 2026, appendix A).

For every configuration the predictive probability of a held-out cell is the mean of the 4PL P
over joint posterior draws (MAP: no draws):

==============  ==================================================================================
``map``         the trained network, no sampling
``ability``     theta sampled from the ability-branch posterior (jointly over subjects), items at MAP
``b``           beta (difficulty) sampled from the b-only item posterior (jointly over items);
                a, c, d and theta at MAP -- the scoped posterior the paper recommends
``ab``          beta and a sampled jointly from the item posterior over both readout rows
``ability+b``   theta and beta sampled together (the paper's combined two-branch predictive)
==============  ==================================================================================

Metrics: NLL = mean -[y log p + (1 - y) log(1 - p)] (p clipped to [1e-12, 1 - 1e-12]), ECE with
10 equal-width bins = sum_b n_b / n |mean(y)_b - mean(p)_b|, Brier score, and the reliability
diagram (per bin: count, mean predicted, observed frequency).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from calibration.data import ResponseData
from catengine.validation import is_integer

CONFIGURATIONS = ("map", "ability", "b", "ab", "ability+b")
DEFAULT_CONFIGURATIONS = ("map", "ability", "b", "ab")


def reliability_diagram(p, y, n_bins: int = 10) -> dict:
    """Equal-width bins on [0, 1] (p = 1 falls in the last): edges, counts, mean p, frequency of y."""
    p = np.asarray(p, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if p.shape != y.shape or p.ndim != 1:
        raise ValueError("p and y must be 1-D arrays of equal length")
    if not is_integer(n_bins) or n_bins < 1:
        raise ValueError(f"n_bins must be a positive integer, got {n_bins!r}")
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    k = np.clip(np.floor(p * n_bins).astype(np.int64), 0, n_bins - 1)
    count = np.bincount(k, minlength=n_bins).astype(np.int64)
    sum_p = np.bincount(k, weights=p, minlength=n_bins)
    sum_y = np.bincount(k, weights=y, minlength=n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_p = np.where(count > 0, sum_p / np.maximum(count, 1), np.nan)
        freq = np.where(count > 0, sum_y / np.maximum(count, 1), np.nan)
    return {"bin_lower": edges[:-1], "bin_upper": edges[1:], "count": count, "mean_predicted": mean_p, "observed_frequency": freq}


def expected_calibration_error(p, y, n_bins: int = 10) -> float:
    """ECE with ``n_bins`` equal-width bins: sum_b (n_b / n) |mean(y)_b - mean(p)_b|."""
    rd = reliability_diagram(p, y, n_bins)
    ok = rd["count"] > 0
    n = rd["count"].sum()
    return float(np.sum(rd["count"][ok] / n * np.abs(rd["observed_frequency"][ok] - rd["mean_predicted"][ok])))


def _nll(p, y) -> float:
    q = np.clip(p, 1e-12, 1 - 1e-12)
    return float(-np.mean(y * np.log(q) + (1 - y) * np.log1p(-q)))


@dataclass(frozen=True)
class CalibrationReport:
    """Rows of the calibration table and the reliability-diagram data per configuration."""

    rows: tuple  # dicts: configuration, ece, nll, brier, n_cells, n_draws
    reliability: dict  # configuration -> reliability_diagram dict
    n_bins: int

    def as_dict(self) -> dict:
        return {r["configuration"]: {k: v for k, v in r.items() if k != "configuration"} for r in self.rows}

    def __str__(self) -> str:
        lines = [f"{'configuration':<12} {'ECE':>7} {'NLL':>7} {'Brier':>7} {'cells':>7} {'draws':>6}"]
        for r in self.rows:
            lines.append(
                f"{r['configuration']:<12} {r['ece']:>7.3f} {r['nll']:>7.3f} {r['brier']:>7.3f} {r['n_cells']:>7d} {r['n_draws']:>6d}"
            )
        return "\n".join(lines)


def _heldout_cells(calibrator, heldout):
    if isinstance(heldout, ResponseData):
        if heldout.subject_ids != tuple(calibrator.subject_ids_) or heldout.item_ids != tuple(calibrator.item_ids_):
            raise ValueError("held-out ResponseData must have the calibration's subject and item ids, in the same order")
        s, i = np.nonzero(heldout.correct >= 0)
        return s.astype(np.int64), i.astype(np.int64), heldout.correct[s, i].astype(np.float64)
    try:
        s, i, y = (np.asarray(x) for x in heldout)
    except (TypeError, ValueError):
        raise TypeError("heldout must be a ResponseData or a (subject index, item index, y) triple") from None
    s = s.astype(np.int64)
    i = i.astype(np.int64)
    y = y.astype(np.float64)
    if not (s.shape == i.shape == y.shape) or s.ndim != 1 or s.size == 0:
        raise ValueError("heldout cells must be three non-empty 1-D arrays of equal length")
    if s.min() < 0 or s.max() >= calibrator.n_subjects_ or i.min() < 0 or i.max() >= calibrator.n_items_:
        raise ValueError("held-out cell indices are out of range for the fitted calibration")
    if not np.all((y == 0) | (y == 1)):
        raise ValueError("held-out labels must be 0 or 1")
    return s, i, y


def _p4(theta, beta, a, c, d):
    z = a * (theta - beta)
    e = np.exp(-np.abs(z))
    s = np.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))
    return c + (d - c) * s


def predictive_probabilities(calibrator, cells, configuration: str, *, n_draws: int = 200, rng=None, batch: int = 50) -> np.ndarray:
    """Posterior-predictive P(correct) of ``cells`` under one configuration (module docstring)."""
    if configuration not in CONFIGURATIONS:
        raise ValueError(f"unknown configuration {configuration!r}; allowed: {', '.join(CONFIGURATIONS)}")
    s, i, _ = cells
    theta, beta, a, c, d = calibrator.native_theta_, calibrator.beta_, calibrator.a_, calibrator.c_, calibrator.d_
    if configuration == "map":
        return _p4(theta[s], beta[i], a[i], c[i], d[i])
    gen = np.random.default_rng(rng)
    uniq_i, inv_i = np.unique(i, return_inverse=True)
    uniq_s, inv_s = np.unique(s, return_inverse=True)
    acc = np.zeros(s.shape[0])
    done = 0
    while done < n_draws:
        m = min(batch, n_draws - done)
        th = np.broadcast_to(theta[s], (m, s.size))
        be = np.broadcast_to(beta[i], (m, s.size))
        aa = np.broadcast_to(a[i], (m, s.size))
        if configuration in ("ability", "ability+b"):
            th = calibrator.ability_posterior_.sample(m, gen, idx=uniq_s)[:, inv_s]
        if configuration in ("b", "ability+b"):
            be = calibrator.item_posterior_.sample(m, gen, idx=uniq_i)[:, inv_i]
        if configuration == "ab":
            draws = calibrator.joint_item_posterior().sample(m, gen, idx=uniq_i)
            be = draws[:, inv_i, 0]
            aa = draws[:, inv_i, 1]
        acc += _p4(th, be, aa, c[i], d[i]).sum(axis=0)
        done += m
    return acc / n_draws


def calibration_report(
    calibrator,
    heldout,
    *,
    configurations=DEFAULT_CONFIGURATIONS,
    n_draws: int = 200,
    n_bins: int = 10,
    rng=None,
) -> CalibrationReport:
    """NLL / ECE / Brier and reliability diagrams of a fitted :class:`PSNCalibrator` on held-out cells.

    ``heldout``: a :class:`ResponseData` with the calibration's ids whose observed cells were not
    used for fitting, or a (subject index, item index, y) triple. ``configurations``: any of
    ``CONFIGURATIONS``. One ``rng`` stream drives all draws (reproducible).
    """
    calibrator._check_fitted()
    if not is_integer(n_draws) or n_draws < 1:
        raise ValueError(f"n_draws must be a positive integer, got {n_draws!r}")
    cells = _heldout_cells(calibrator, heldout)
    y = cells[2]
    gen = np.random.default_rng(rng)
    rows, rel = [], {}
    for conf in configurations:
        p = predictive_probabilities(calibrator, cells, conf, n_draws=n_draws, rng=gen)
        rd = reliability_diagram(p, y, n_bins)
        rows.append(
            {
                "configuration": conf,
                "ece": expected_calibration_error(p, y, n_bins),
                "nll": _nll(p, y),
                "brier": float(np.mean((p - y) ** 2)),
                "n_cells": int(y.size),
                "n_draws": 0 if conf == "map" else int(n_draws),
            }
        )
        rel[conf] = rd
    return CalibrationReport(tuple(rows), rel, int(n_bins))
