"""The held-out check of a bank's item SDs: fold banks linked to the full bank's trait scale, the
factor by which the item SDs are too narrow, and a bank with its b_sd widened by it.

Fold banks are linked through the LLMs both fitted; a fold whose traits have no spread cannot be
linked (:func:`trait_spread_problem` says why, and the check refuses such a fold).
"""

from __future__ import annotations

import math

import numpy as np

from calibration.heldout.interval_curves import robust_scale

__all__ = ["item_sd_factors", "scale_b_sd", "trait_spread_problem"]


def item_sd_factors(full_bank, fold_banks, folds: int) -> dict:
    """Cross-fitted check of the bank's item SDs: RMS of z_j = (x_fold,j - x_j) / (sd_j / sqrt(K - 1))
    over items and folds, for x = b (and a), each fold bank linked to the full bank's theta scale
    through the LLMs both fitted (theta_full ~ A theta_fold + B: a' = a / A, b' = b - a B / A).
    Nested estimates: a fold fit uses (K - 1)/K of the LLMs, so Var(x_fold - x_full) = sd^2 / (K - 1)
    when the SDs are honest; the factor by which they are too narrow is the normal-consistent scale
    of z, median |z| / 0.6745 (None without SDs), and ``a_rms`` / ``b_rms`` record the RMS. The
    RMS is not used: it is dominated by items with slopes near zero, whose PSN b_sd (|a| times
    beta's SD) is near zero while their intercepts move between refits -- items that carry no
    information. On ChemBench (22 LLMs) the RMS was 3,000-8,000 and widened every b_sd to 35-1,000
    logits, so every interval was 10-25 times too wide. A fold whose LLMs' traits (fold or full fit)
    have no spread cannot be linked and is left out (LLMs of equal accuracy give a cBMM fit with every
    trait 0); with no fold left the factors are None."""
    from catengine.session.session import bank_item_covariance

    cov = bank_item_covariance(full_bank)
    subj = full_bank.subjects
    if cov is None or subj is None:
        return {"a": None, "b": None}
    full_theta = dict(zip((str(s) for s in subj["subject"].values), subj["theta"].values))
    pa, zs = full_bank.params, {"a": [], "b": []}
    for fb in fold_banks:
        linked = _linked_params(fb, full_theta)
        if linked is None:
            continue
        for key, mine, full, var in (("a", linked[0], pa.a, cov.a_var), ("b", linked[1], pa.b, cov.b_var)):
            use = var > 0
            if use.any():
                zs[key].append((mine[use] - full[use]) / np.sqrt(var[use] / (folds - 1)))
    out = {}
    for key, parts in zs.items():
        z = np.concatenate(parts) if parts else np.empty(0)
        z = z[np.isfinite(z)]
        out[key] = round(robust_scale(z), 4) if z.size else None
        out[f"{key}_rms"] = round(float(np.sqrt(np.mean(z * z))), 4) if z.size else None
    return out


def _linked_params(fold_bank, full_theta: dict):
    """(a, b) of ``fold_bank`` on the full bank's trait scale (``full_theta``: subject id -> theta),
    linked by a line through the LLMs both fitted; None when they cannot be linked (fewer than 3
    shared LLMs, no spread, a degenerate line)."""
    fs = fold_bank.subjects
    if fs is None:
        return None
    ids = [str(s) for s in fs["subject"].values]
    x = fs["theta"].values
    y = np.array([full_theta.get(i, np.nan) for i in ids])
    ok = np.isfinite(x) & np.isfinite(y)
    if ok.sum() < 3 or not (_has_spread(x[ok]) and _has_spread(y[ok])):
        return None
    A, B = np.polyfit(x[ok], y[ok], 1)
    if not (math.isfinite(A) and math.isfinite(B) and A != 0.0):
        return None
    fp = fold_bank.params
    return fp.a / A, fp.b - fp.a * B / A


def trait_spread_problem(bank) -> str:
    """Why the traits a fold bank gives its calibration LLMs cannot be checked (they are all equal:
    LLMs of equal accuracy, or items that do not discriminate, give every LLM the same trait, and
    held-out replays then measure nothing), or ""."""
    subjects = bank.subjects
    if subjects is None:
        return ""
    theta = np.asarray(subjects["theta"].values, dtype=float)
    theta = theta[np.isfinite(theta)]
    if theta.size >= 2 and not _has_spread(theta):
        return (f"the refit gives all its {theta.size} LLMs the same trait ({float(theta[0]):.3g}); the data do not "
                "tell the LLMs apart (equal accuracies?), so held-out replays measure nothing")
    return ""


def _has_spread(values) -> bool:
    """Whether ``values`` (finite) differ by more than rounding: a line can be fitted through them
    (``np.polyfit`` on values that are all 0 hands LAPACK a NaN: it prints errors and fails)."""
    return bool(np.ptp(values) > 1e-12 * max(1.0, float(np.max(np.abs(values)))))


def scale_b_sd(bank, factor: float, note: str):
    """``bank`` with ``/items/b_sd`` multiplied by ``factor`` (a PSN bank's cross-fitted posterior width),
    and its ``/posterior`` Gaussian of the b readout widened to match (covariance x factor^2)."""
    from catengine.itembank import ItemBank

    f = float(factor)
    tree = bank.to_datatree()
    items = tree["items"].to_dataset()
    items["b_sd"] = items["b_sd"] * f
    if note:
        items["b_sd"].attrs["description"] = note
    tree["items"] = type(tree)(items)
    if "posterior" in tree.children:  # keep the stored Gaussian (draws of b) consistent with b_sd
        post = tree["posterior"].to_dataset()
        if "b_readout_cov" in post:
            post["b_readout_cov"] = post["b_readout_cov"] * (f * f)
        if "beta_sd" in post:
            post["beta_sd"] = post["beta_sd"] * f
        post.attrs["b_width_factor_cross_fitted"] = f
        tree["posterior"] = type(tree)(post)
    return ItemBank(tree, source=bank.source)
