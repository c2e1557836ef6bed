"""Cross-fitted interval calibration at calibration time (docs/math.md §7.5): how do the adaptive
intervals of a bank behave on held-out *real* LLMs?

The calibration LLMs are split into ``folds`` groups (``calibration.folds.llm_folds``: the runs of
one LLM, ``ResponseData.subject_groups``, stay in one fold). For each fold a bank is fitted on the other
folds by the same calibrator and settings (``make_bank``), and every held-out LLM is replayed
through adaptive tests from its recorded answers (``calibration.audit.replay.replay_llms``), with
the bank's default selector, with plain maximum information (when that is not the default) and
with random selection. After L items, with theta_L / SD_L the
adaptive estimate and theta_F / SD_F the estimate from all of the LLM's answers (same fold bank),

    z_L = (theta_L - theta_F) / d_L,   d_L^2 = SD_L^2 - SD_F^2

should have RMS 1 (the estimates are nested). What the model cannot see (multidimensionality,
local dependence, selection capitalising on chance beyond the item-parameter correction) makes it
larger. The factor c(L) by which the engine multiplies SD_L is fitted so that the calibrated SDs
make the pooled RMS of z exactly 1 at every tabulated length, with the full-length SDs scaled by
the longest length's factor (the engine holds c constant beyond the table):

    c(L_max)^2 = mean(diff^2) / mean(SD_Lmax^2 - SD_F^2)
    c(L)^2     = (mean(diff_L^2) + c(L_max)^2 mean(SD_F^2)) / mean(SD_L^2)

then smoothed over neighbouring lengths (weights 1/4, 1/2, 1/4 in log c). A factor below 1 is
replaced by min(1, its 70% upper confidence bound) (:func:`narrowing_floor`): the check narrows the
model's intervals only with evidence. The table is not forced monotone: measured on MATH500
the excess is U-shaped in L (the first maximum-information items are those whose slopes the
calibration overestimated most; misfit accumulates later), and an isotonic fit pooled the early
excess away. The result is stored in the bank's root
attribute ``interval_calibration`` (JSON, read by ``catengine.estimation.interval_calibration``);
a ``CATSession`` applies it by default. The stored figures are in-sample for c(L) (the same split
fitted it); the honest evidence is the nested replay audit (``calibration audit --kind replay``
with its default ``bank="default"``), whose fold banks run their own check on their training folds.
"""

from __future__ import annotations

import json
import math
import time
import warnings

import numpy as np

from calibration.base import ConvergenceWarning
from calibration.folds import llm_folds, n_llm_groups, with_llm_groups
from calibration.score_factors import DEFAULT_TOL as DEFAULT_SCORE_FACTOR_TOL
from calibration.score_factors import attach_score_factors
from calibration.threads import in_threads

from calibration.audit._common import Z95
from calibration.score_calibration import fit_score_curve, score_residuals, smooth_table

__all__ = ["DEFAULT_FOLDS", "DEFAULT_LENGTHS", "EDGE_SHARE", "MIN_SUBJECTS", "cross_fit_intervals", "describe", "edge_folds", "fit_factors",
           "interval_multipliers", "item_sd_factors", "MIN_LLMS_TO_NARROW", "narrowing_floor", "quantile_bound_order", "robust_scale", "scale_b_sd", "with_interval_check"]

DEFAULT_FOLDS = 5
DEFAULT_LENGTHS = (5, 10, 15, 20, 30, 40, 50, 75, 100)
MIN_SUBJECTS = 8  # fewer calibration LLMs: no check (the bank says so)
MIN_HELD_OUT = 4  # a length is tabulated only with at least this many held-out LLMs
Z95_CONFIDENCE = 0.5  # z95(L) lies above the held-out 95% quantile of |z| with at least this probability
NARROWING_CONFIDENCE = 0.7  # c(L) < 1 only by its upper confidence bound at this confidence
MIN_LLMS_TO_NARROW = 24  # fewer held-out LLMs: c(L) >= 1 and z95(L) = 1.96 (no narrowing without evidence)
Z95_BOUNDS = (1.0, 3.0)  # z95(L) is kept in this range
MAD_TO_SD = 1.0 / 0.6744897501960817  # median |z| of Normal(0, 1) is 0.6745
#: the strength-ordered check holds out the LLMs in the top and in the bottom EDGE_SHARE of accuracy
EDGE_SHARE = 0.2
#: the fold refits' score factors stop at this relative change of the log posterior (the full fit: 1e-7);
#: started from the full fit, their loadings are then within ~1e-4 of the optimum, against fold-to-full
#: differences of order 1 (MATH500)
REFIT_SCORE_FACTOR_TOL = 1e-6


def fit_factors(diff: np.ndarray, sd: np.ndarray, full_sd: np.ndarray) -> dict:
    """c(L) from pooled replays: ``diff`` and ``sd`` (llm, length), ``full_sd`` (llm,). See the module docstring."""
    diff, sd, full_sd = (np.asarray(v, dtype=float) for v in (diff, sd, full_sd))
    d2 = np.clip(sd * sd - full_sd[:, None] ** 2, 1e-300, None)
    mse = np.mean(diff * diff, axis=0)
    c_max2 = float(mse[-1] / np.mean(d2[:, -1]))
    c2 = (mse + c_max2 * np.mean(full_sd**2)) / np.mean(sd * sd, axis=0)
    c2[-1] = c_max2
    raw = np.sqrt(c2)
    c = narrowing_floor(smooth_table(raw, log_scale=True), diff.shape[0])
    rms_z = np.sqrt(mse / np.mean(d2, axis=0))
    cover = np.mean(np.abs(diff) <= Z95 * sd, axis=0)
    cal_sd = sd * c[None, :]
    cal_d = np.sqrt(np.clip(cal_sd**2 - (c[-1] * full_sd[:, None]) ** 2, 1e-300, None))
    z95 = interval_multipliers(np.abs(diff) / cal_sd)
    return {
        "c": [round(float(v), 4) for v in c],
        "z95": [round(float(v), 4) for v in z95],
        "coverage_z95_in_sample": [round(float(v), 4) for v in np.mean(np.abs(diff) <= z95[None, :] * cal_sd, axis=0)],
        "c_raw": [round(float(v), 4) for v in raw],
        "rms_ratio_model": [round(float(v), 4) for v in rms_z],
        "coverage_model": [round(float(v), 4) for v in cover],
        "rms_ratio_calibrated_in_sample": [round(float(v), 4) for v in np.sqrt(mse / np.mean(cal_d**2, axis=0))],
        "coverage_calibrated_in_sample": [round(float(v), 4) for v in np.mean(np.abs(diff) <= Z95 * cal_sd, axis=0)],
        "n_llms": int(diff.shape[0]),
    }


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
    logits, so every interval was 10-25 times too wide."""
    from catengine.session.session import bank_item_covariance

    cov = bank_item_covariance(full_bank)
    subj = full_bank.subjects
    if cov is None or subj is None:
        return {"a": None, "b": None}
    full_theta = dict(zip((str(s) for s in subj["subject"].values), subj["theta"].values))
    pa, zs = full_bank.params, {"a": [], "b": []}
    for fb in fold_banks:
        fs = fb.subjects
        if fs is None:
            continue
        ids = [str(s) for s in fs["subject"].values]
        x = fs["theta"].values
        y = np.array([full_theta.get(i, np.nan) for i in ids])
        ok = np.isfinite(x) & np.isfinite(y)
        if ok.sum() < 3:
            continue
        A, B = np.polyfit(x[ok], y[ok], 1)
        fp = fb.params
        a_l, b_l = fp.a / A, fp.b - fp.a * B / A
        for key, mine, full, var in (("a", a_l, pa.a, cov.a_var), ("b", b_l, pa.b, cov.b_var)):
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


def narrowing_floor(c, n: int) -> np.ndarray:
    """c(L) below 1 only with evidence: where the fitted factor is below 1 it is replaced by
    min(1, its upper confidence bound), c sqrt(n / chi2_{n, 1 - NARROWING_CONFIDENCE}) (n held-out
    LLMs; n c_hat^2 / c^2 ~ chi2_n for normal z), and by 1 with fewer than ``MIN_LLMS_TO_NARROW``
    (24) held-out LLMs: the chi-square bound assumes normal z, and real misses are heavy-tailed (on
    ChemBench PSN banks, 17 held-out LLMs per check, fold seed 1, it let coverage after 25 items fall
    to 0.78).
    A plain floor at 1 made the check's noise widen only: on a simulated 2PL, whose model is true,
    the intervals after 10 items came out 12% too wide."""
    from scipy.stats import chi2

    c = np.asarray(c, dtype=float)
    if n < MIN_LLMS_TO_NARROW:
        return np.maximum(c, 1.0)
    upper = c * np.sqrt(n / chi2.ppf(1.0 - NARROWING_CONFIDENCE, n))
    return np.where(c >= 1.0, c, np.minimum(1.0, upper))


def robust_scale(z) -> float:
    """The normal-consistent scale of ``z``: median |z| / 0.6745 (1 for standard normal draws)."""
    return float(np.median(np.abs(np.asarray(z, dtype=float)))) * MAD_TO_SD


def quantile_bound_order(n: int, level: float = 0.95, confidence: float | None = None) -> int:
    """The smallest k with P(Binomial(n, level) <= k - 1) >= ``confidence``: the k-th smallest of n
    draws lies above the ``level`` quantile with at least that probability (n + 1: no such order)."""
    from scipy.stats import binom

    confidence = Z95_CONFIDENCE if confidence is None else confidence
    return int(binom.ppf(confidence, n, level)) + 1  # ppf: the smallest j with P(B <= j) >= confidence


def interval_multipliers(abs_z: np.ndarray) -> np.ndarray:
    """z95(L): the multiplier of the calibrated SD that makes the 95% interval, per test length.

    ``abs_z`` (llm, length): |theta_L - theta_F| / (c(L) SD_L) of the held-out LLMs. c(L) makes the
    RMS of z honest, but the held-out z are not normal: on MATH500 after c(L) a few LLMs sit far
    out and the rest well inside, so +-1.96 SD covered 99% of them. z95(L) estimates the 95%
    quantile of |z| at each length: the k-th smallest of the n held-out values, k the smallest order
    with P(Binomial(n, 0.95) < k) >= ``Z95_CONFIDENCE`` (0.5: a median-unbiased estimate), kept in
    ``Z95_BOUNDS`` and not smoothed over lengths. With fewer than ``MIN_LLMS_TO_NARROW`` (24) LLMs
    it is the normal 1.96: no narrowing without evidence. The engine's 95% interval is
    theta +- z95(L) SD; the SD stays the RMS-honest one. The forms tried before (a 70% bound,
    smoothing, floors of 1.5 and of 1.96 where c <= 1) and what each did on the nested audit are in
    docs/honest_intervals.md.
    """
    abs_z = np.asarray(abs_z, dtype=float)
    n = abs_z.shape[0]
    k = quantile_bound_order(n)
    if n < MIN_LLMS_TO_NARROW or k > n:
        return np.full(abs_z.shape[1], Z95)
    return np.clip(np.sort(abs_z, axis=0)[k - 1], *Z95_BOUNDS)


def cross_fit_intervals(data, make_bank, *, folds: int = DEFAULT_FOLDS, test_lengths=DEFAULT_LENGTHS,
                        scoring: str | None = None, estimator: str = "map", rng=0,
                        calibration_method: str = "", full_bank=None, widen_b_sd: bool = False,
                        shortcuts: bool = True) -> dict:
    """The ``interval_calibration`` record (a dict) of a calibration on ``data``.

    ``make_bank(train_data, rng, bank_id) -> (ItemBank, converged)`` refits the calibration on a
    subset of the LLMs without its own check. ``scoring``: "lart" (with CoT) or "irt" for LaRT
    banks (default: the session default, "lart"); ignored otherwise. With ``full_bank`` (the bank
    fitted on all of ``data``) the item SDs are checked too (:func:`item_sd_factors`); with
    ``widen_b_sd`` (PSN banks) the fold banks' b_sd are widened by the measured factor (>= 1)
    before the replays, and the record's ``item_sd_factors["b_applied"]`` says by how much the full
    bank's must be widened to match. ``shortcuts`` (default): random-selection tests are scored at
    the tabulated lengths only (:func:`_random_replays`) and the adaptive tests are replayed by the
    compiled replay (``catengine.session.fast_replay``); False steps every test through sessions
    (the reference ``benchmarks/check_cost.py`` compares with).
    """
    from calibration.audit.runner import stream
    from catengine.session import CATSession

    t0 = time.perf_counter()
    N = data.n_subjects
    n_groups = n_llm_groups(data)
    K = int(min(folds, n_groups // 2))
    seed = int(np.random.SeedSequence(rng).entropy) if not isinstance(rng, np.random.Generator) else int(rng.integers(2**63))
    # the runs of one LLM (data.subject_groups) are held out together: a sibling in the training folds would flatter the check
    fold_rows = llm_folds(data.llm_groups, K, stream(seed, 0, "interval-folds"))
    n_obs = np.count_nonzero(data.correct >= 0, axis=1)
    max_len = int(min(max(test_lengths), data.n_items // 2, np.sort(n_obs)[max(0, N - MIN_HELD_OUT * 2)]))
    lengths = [int(L) for L in test_lengths if L <= max_len] or [max(1, max_len)]
    L = lengths[-1]
    n_converged = 0
    fold_banks = []
    for k in range(K):
        train = np.setdiff1d(np.arange(N), fold_rows[k])
        try:
            bank, converged = make_bank(data.subset(subjects=train), np.random.default_rng(stream(seed, k, "fit")),
                                        f"interval_check_fold{k}")
        except ValueError as exc:  # the data without this fold's LLMs cannot be calibrated at all
            raise FoldFitError(f"fold {k + 1} of {K} (without {len(fold_rows[k])} of the {N} LLM runs) cannot be "
                               f"calibrated: {exc}") from None
        n_converged += int(converged)
        fold_banks.append(bank)
    factors = item_sd_factors(full_bank, fold_banks, K) if full_bank is not None else {"a": None, "b": None}
    applied = 1.0
    if widen_b_sd and factors.get("b"):
        applied = max(1.0, float(factors["b"]))
        if applied > 1.0:
            fold_banks = [scale_b_sd(b, applied, "") for b in fold_banks]
    factors["b_applied"] = round(applied, 4)
    scoring_used = (scoring or "lart") if fold_banks[0].response_model == "lart" else "irt"
    default_name = CATSession(fold_banks[0]).selector.name  # fold banks carry no check: the usual default
    first = [("default", None), ("random", _random())] + ([] if default_name == "mfi" else [("mfi", _mfi())])
    pooled, replayed = _replay_folds(fold_banks, fold_rows, first, default_name, data, n_obs, L, lengths,
                                     scoring_used, estimator, seed, shortcuts)
    curves, score_curves = _fit_curves(pooled, replayed, data, lengths)
    if _loses_to_random(score_curves, default_name):
        # sessions of this bank will default to randomised selection (catengine.selection.default_selector_for):
        # measure it too, on the same fold banks, so that they get its own c(L), z95(L) and score check
        pooled, replayed = _replay_folds(fold_banks, fold_rows, [("randomised", _randomised())], default_name, data,
                                         n_obs, L, lengths, scoring_used, estimator, seed, shortcuts)
        more_curves, more_scores = _fit_curves(pooled, replayed, data, lengths)
        curves.update(more_curves)
        score_curves.update(more_scores)
    beyond = _strength_ordered_check(data, make_bank, default_name, n_obs, L, lengths, scoring_used, estimator,
                                     seed, K, shortcuts)
    return {
        "version": 1,
        "method": "cross-fitted replay of held-out calibration LLMs (docs/math.md §7.5)",
        "form": "c(L) from the pooled RMS z per length, smoothed over neighbouring lengths, below 1 only by its "
                "70% upper confidence bound (>= 24 LLMs); linear between lengths, constant beyond; the engine "
                "multiplies SD(theta) by c(L). z95(L): a median-unbiased order statistic for the held-out 95% "
                "quantile of |z| after c(L), per length, in [1, 3] (1.96 with <= 23 LLMs); the "
                "engine's 95% interval is theta +- z95(L) SD",
        "calibration_method": calibration_method,
        "folds": K,
        "n_llm_groups": n_groups,
        "n_subjects": int(N),
        "estimator": estimator,
        "scoring": scoring_used,
        "selection": default_name,
        "curves": curves,
        "score_curves": score_curves,
        "score_form": "delta(L): residual SD per unanswered item (accuracy scale), s(L): log-SD of the unrecorded CoT "
                      "total; the engine adds (delta n_U)^2 to the predicted number correct's variance and a mean-1 "
                      "log-normal factor to the unrecorded CoT (docs/math.md §7.6)",
        "beyond": beyond,
        "n_converged_folds": n_converged,
        "item_sd_factors": factors,
        "seconds": round(time.perf_counter() - t0, 2),
        "seed": str(seed),
    }


def edge_folds(data, n_obs, min_answers: int) -> dict:
    """The held-out rows of the strength-ordered check: ``{"above": rows, "below": rows}``.

    "above" holds the runs of the LLMs (``data.llm_groups``) in the top ``EDGE_SHARE`` of
    full-benchmark accuracy (the mean over an LLM's runs of its answered items' accuracy), kept
    only where strictly above every LLM left for calibration (ties at the boundary stay in), and
    only the runs with at least ``min_answers`` answers; "below" the mirror image. A side is left
    out when fewer than ``MIN_HELD_OUT`` runs would be held out or fewer than ``MIN_SUBJECTS``
    would remain to calibrate on."""
    groups = np.asarray(data.llm_groups)
    answered = data.correct >= 0
    with np.errstate(invalid="ignore", divide="ignore"):
        run_acc = np.where(answered, data.correct, 0).sum(axis=1) / answered.sum(axis=1)
    n_groups = int(groups.max()) + 1 if groups.size else 0
    group_acc = np.array([np.nanmean(run_acc[groups == g]) if np.any(np.isfinite(run_acc[groups == g])) else np.nan
                          for g in range(n_groups)])
    finite = np.flatnonzero(np.isfinite(group_acc))
    n_edge = int(math.floor(EDGE_SHARE * finite.size))
    out = {}
    if n_edge < 1 or finite.size - n_edge < 2:
        return out
    ranked = finite[np.argsort(group_acc[finite], kind="stable")]
    for side, chosen, rest in (("above", ranked[-n_edge:], ranked[:-n_edge]), ("below", ranked[:n_edge], ranked[n_edge:])):
        bound = group_acc[rest].max() if side == "above" else group_acc[rest].min()
        beyond = chosen[group_acc[chosen] > bound] if side == "above" else chosen[group_acc[chosen] < bound]
        rows = np.flatnonzero(np.isin(groups, beyond))
        test = rows[n_obs[rows] >= min_answers]
        if test.size >= MIN_HELD_OUT and data.n_subjects - rows.size >= MIN_SUBJECTS:
            out[side] = (rows, test)
    return out


def _strength_ordered_check(data, make_bank, default_name, n_obs, L, lengths, scoring_used, estimator, seed, K,
                            shortcuts=True):
    """The ``beyond`` part of the record (docs/math.md §7.5): per side ("above", "below"), a bank
    fitted without the strongest (weakest) LLMs, the held-out ones replayed with the default
    selector, and their trait and score curves fitted as for the random folds. Sessions whose
    trait estimate stands beyond the calibration population on that side widen the model-based
    score by the larger of these score curves and the random folds' (``catengine.session.scoring
    .score_curve``); the trait curves are reported with the bank. None when neither side has
    enough LLMs."""
    from calibration.audit.runner import stream

    out = {}
    sides = []  # the banks first (each refit uses both cores), then both sides replayed side by side
    for r, (side, (rows, test)) in enumerate(edge_folds(data, n_obs, L).items()):
        train = np.setdiff1d(np.arange(data.n_subjects), rows)
        try:
            bank, _ = make_bank(data.subset(subjects=train), np.random.default_rng(stream(seed, K + r, "fit")),
                                f"interval_check_{side}")
        except ValueError:  # the LLMs left cannot be calibrated: this side is not checked
            continue
        sides.append((r, side, train, test, bank))

    def replayed_side(entry):
        r, _, _, test, bank = entry
        pooled, replayed = _replay_folds([bank], [test], [("default", None)], default_name, data, n_obs, L, lengths,
                                         scoring_used, estimator, seed, shortcuts, replication_offset=K + r)
        return _fit_curves(pooled, replayed, data, lengths)

    for (r, side, train, test, bank), (curves, score_curves) in zip(sides, in_threads(replayed_side, sides)):
        if curves:
            n_cal = data.correct[train] >= 0
            acc = np.where(n_cal, data.correct[train], 0).sum(axis=1) / np.maximum(n_cal.sum(axis=1), 1)
            out[side] = {"n_held_out": int(test.size), "n_calibration": int(train.size),
                         "calibration_accuracy_range": [round(float(acc.min()), 4), round(float(acc.max()), 4)],
                         "curves": curves, "score_curves": score_curves}
    if not out:
        return None
    return {"form": f"the LLMs in the top (above) / bottom (below) {EDGE_SHARE:.0%} of accuracy held out, strictly "
                    "beyond every calibration LLM; a bank fitted on the others; the held-out LLMs replayed with the "
                    "default selector; c(L), z95(L) and the score curves fitted as for the random folds. Sessions "
                    "whose trait estimate stands beyond the calibration population widen the model-based score by "
                    "the larger of these score curves and the random folds'; the trait curves are reported", **out}


def _replay_folds(fold_banks, fold_rows, selectors, default_name, data, n_obs, L, lengths, scoring_used, estimator,
                  seed, shortcuts=True, replication_offset=0):
    """Replay every fold's held-out LLMs (those with at least L answers) against its fold bank with
    ``selectors``; pooled (diff, sd, full_sd) and replayed sessions per selector name."""
    from calibration.audit.replay import replay_llms

    pooled: dict[str, list] = {}
    replayed: dict[str, list] = {}  # selector -> [(sessions, held-out rows)] per fold, for the score check
    idx = np.asarray(lengths) - 1
    # random selection does not look at the answers: its tests are scored at the tabulated lengths
    # only (_random_replays), the adaptive selectors step by step (replay_llms)
    stepped = [(name, sel) for name, sel in selectors if name != "random" or not shortcuts]

    def one_fold(k):
        test = [i for i in fold_rows[k] if n_obs[i] >= L]
        if not test:
            return None
        raw = replay_llms(fold_banks[k], data, test, stepped, [scoring_used], estimator, L, seed, k + replication_offset,
                          keep_sessions=True, compiled=shortcuts)
        random = None
        if len(stepped) < len(selectors):
            random = _random_replays(fold_banks[k], data, test, lengths, scoring_used, estimator, seed,
                                     k + replication_offset)
        return test, raw, random

    # the folds draw from their own streams, so they replay side by side (the compiled replays release
    # the GIL) and give what they give one after another; merged in fold order
    for done in in_threads(one_fold, range(len(fold_banks))):
        if done is None:
            continue
        test, raw, random = done
        for r, (name, _) in enumerate(stepped):
            key = default_name if name == "default" else name
            pooled.setdefault(key, []).append((raw["est"][r, 0][:, idx] - raw["full"][0][:, None],
                                               raw["sd"][r, 0][:, idx], raw["full_sd"][r, 0]))
            replayed.setdefault(key, []).append((raw["sessions"][r][0], test))
        if random is not None:
            est, sd, sessions = random
            # fold banks carry no interval calibration, so SD_F is the same for every selector
            pooled.setdefault("random", []).append((est - raw["full"][0][:, None], sd, raw["full_sd"][0, 0]))
            replayed.setdefault("random", []).append((sessions, test))
    return pooled, replayed


def _random_replays(bank, data, rows, lengths, scoring, estimator, seed, replication):
    """Random-selection tests of the LLMs ``rows`` against ``bank``, scored at ``lengths`` only.

    A random test is a uniformly random order of the LLM's answered items (what a session with
    ``RandomSelection`` draws), and its estimate after L items is the MAP of those L answers, which
    ``CATSession.estimate_from`` computes in one solve (the same posterior as recording them one
    by one; tests/test_interval_calibration_fast.py compares the two), here all lengths of an LLM
    in one compiled call where the estimator allows (``CompiledReplay.estimates_at``, the same
    estimates; tests/test_fast_replay.py). Returns est, sd (llm,
    length) and one ``ReplayedSession`` per LLM whose history holds every administered item with
    the estimate at the tabulated lengths (NaN at the other steps: the score check reads no other)."""
    from calibration.audit.cat import _estimator
    from calibration.audit.runner import stream
    from calibration.score_calibration import ReplayedSession
    from catengine.session import CATSession
    from catengine.session.fast_replay import CompiledReplay
    from catengine.session.session import StepRecord

    ids = list(bank.item_ids)
    give_cot = scoring == "lart" and data.cot_length is not None
    session = CATSession(bank, selector=_random(), estimator=_estimator(estimator, scoring == "lart"))
    rng = np.random.default_rng(stream(seed, replication, "engine", "random", scoring))
    L_max = int(lengths[-1])
    est, sd = np.empty((len(rows), len(lengths))), np.empty((len(rows), len(lengths)))
    sessions = []
    nan = math.nan
    fast = CompiledReplay.for_estimates(session)  # the same estimates in one compiled call per LLM
    for k, i in enumerate(rows):
        order = rng.permutation(np.flatnonzero(data.correct[i] >= 0))[:L_max]
        items = [ids[j] for j in order]
        correct = [int(data.correct[i, j]) for j in order]
        cots = [None] * len(order)
        if give_cot:
            cots = [None if np.isnan(data.cot_length[i, j]) else float(data.cot_length[i, j]) for j in order]
        if fast is not None:
            at = dict(zip((L - 1 for L in lengths), fast.estimates_at(
                order, data.correct[i], data.cot_length[i] if give_cot else None, lengths)))
        else:
            at = {L - 1: session.estimate_from(items[:L], correct[:L], cots[:L]) for L in lengths}
        for t, L in enumerate(lengths):
            est[k, t], sd[k, t] = at[L - 1].theta, at[L - 1].theta_sd
        history = []
        for step in range(len(order)):
            e = at.get(step)
            history.append(StepRecord(
                step=step + 1, item=items[step], correct=correct[step], cot_length=cots[step],
                theta=nan if e is None else e.theta, theta_sd=nan if e is None else e.theta_sd,
                tau=None if e is None else e.tau, tau_sd=None if e is None else e.tau_sd,
                criterion=nan, proposed=True))
        sessions.append(ReplayedSession(session.bank, session.items, session.params, session.estimator,
                                        session.selector, session.cot_offset, tuple(history)))
    return est, sd, sessions


def _fit_curves(pooled, replayed, data, lengths):
    """The interval and score curves of every selector with at least MIN_HELD_OUT held-out LLMs."""
    curves, score_curves = {}, {}
    for key, parts in pooled.items():
        diff = np.concatenate([p[0] for p in parts])
        sd = np.concatenate([p[1] for p in parts])
        full_sd = np.concatenate([p[2] for p in parts])
        if diff.shape[0] < MIN_HELD_OUT:
            continue
        curves[key] = {"test_length": lengths, **fit_factors(diff, sd, full_sd)}
        score = _score_curve(replayed[key], data, lengths, curves[key]["c"])
        if score is not None:
            score_curves[key] = score
    return curves, score_curves


def _loses_to_random(score_curves: dict, selector_name: str) -> bool:
    """Whether the fitted score curves make sessions default to randomised selection
    (``catengine.scoring.calibration.ScoreCalibration.loses_to_random``, the rule sessions apply)."""
    from catengine.scoring.calibration import ScoreCalibration

    scores = ScoreCalibration.from_record({"score_curves": score_curves}, "")
    return scores is not None and scores.loses_to_random(selector_name)


def _score_curve(replayed, data, lengths, factors):
    """The score check of one selector: pooled residuals of its replays with SDs x c(L), fitted."""
    parts = in_threads(lambda fold: score_residuals(fold[0], data, fold[1], lengths, factors), replayed)
    pooled = {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}
    return fit_score_curve(pooled, lengths, data.n_items)


def _random():
    from catengine.selection import RandomSelection

    return RandomSelection()


def _mfi():
    from catengine.selection import SELECTORS

    return SELECTORS["mfi"]()


def _randomised():
    from catengine.selection import RandomisedSelection

    return RandomisedSelection()


class RefitBank:
    """``make_bank`` for a fitted calibrator: the same class and settings refitted on a subset, its
    bank made without its own check (``interval_check=False``).

    The refits start from the full fit: a calibrator with ``refit_start(rows)`` / ``fit_from(data,
    start)`` begins at its own item parameters (LaRT SAEM: and its accuracy prior) and the training
    subjects' traits, with the settings of its ``refit_settings()`` (SAEM: a short burn-in, a
    tolerance ``REFIT_TOL_FACTOR`` times looser); a ``refit_start`` of None (cBMM with its
    empirical-Bayes prior, whose result depends on the start) refits cold. The score factors begin at the full bank's
    (``score_fit``) and stop at ``REFIT_SCORE_FACTOR_TOL``. The refit still maximises the training
    folds' own likelihood; what the start saves is the way there (docs/math.md §7.5 and
    ``benchmarks/check_cost.py``: the check's figures agree with cold-started refits within
    their Monte-Carlo error). ``warm=False``: cold refits, as a plain ``fit``."""

    def __init__(self, calibrator, to_bank: dict | None = None, score_dims: int | None = None, score_fit=None,
                 score_ids=None, warm: bool = True):
        self.cls = type(calibrator)
        self.params = {k: v for k, v in calibrator.get_params().items() if k not in ("progress", "rng")}
        self.to_bank = dict(to_bank or {})
        #: the full bank's number of score factors (None: it has none); each fold bank fits its own
        self.score_dims = score_dims
        self.full = calibrator if warm and hasattr(calibrator, "refit_start") else None
        if self.full is not None:
            self.params.update(getattr(calibrator, "refit_settings", dict)())
        self.subject_rows = {str(s): k for k, s in enumerate(getattr(calibrator, "subject_ids_", ()) or ())}
        #: the full bank's ScoreFactorFit and the subject ids of its rows: the fold fits' start
        self.score_fit = score_fit if warm else None
        self.score_rows = {str(s): k for k, s in enumerate(score_ids if score_ids is not None else ())}

    def __call__(self, data, rng, bank_id):
        ids = [str(s) for s in data.subject_ids]
        with warnings.catch_warnings(record=True) as caught:  # quiet, as calibration.audit.methods._fitted
            warnings.simplefilter("always", ConvergenceWarning)
            cal = self.cls(**{**self.params, "progress": False, "rng": rng})
            start = None
            if self.full is not None and all(i in self.subject_rows for i in ids):
                start = self.full.refit_start([self.subject_rows[i] for i in ids])  # None: refit cold
            if start is not None:
                cal.fit_from(data, start)
            else:
                cal.fit(data)
        converged = bool(getattr(cal, "converged_", True)) and not any(
            issubclass(w.category, ConvergenceWarning) for w in caught)
        bank = cal.to_item_bank(bank_id, interval_check=False, **self.to_bank)
        if self.score_dims is not None:
            start, tol = None, DEFAULT_SCORE_FACTOR_TOL
            fit = self.score_fit
            if fit is not None and fit.dims == self.score_dims and all(i in self.score_rows for i in ids):
                rows = [self.score_rows[i] for i in ids]
                start, tol = (fit.traits[rows], fit.loadings, fit.intercepts), REFIT_SCORE_FACTOR_TOL
            bank = attach_score_factors(bank, data, dims=self.score_dims, start=start, tol=tol)
        return bank, converged


class FoldFitError(ValueError):
    """A fold of the interval check whose training LLMs cannot be calibrated (the check is then skipped)."""


def with_interval_check(calibrator, bank, interval_check="auto", *, cold_start: bool = False, **to_bank):
    """The hook every ``to_item_bank`` calls last: ``bank`` with its ``interval_calibration`` attribute.

    ``interval_check``: "auto" (default) runs the cross-fit when the calibrator kept its training
    data and it has at least ``MIN_SUBJECTS`` LLMs (else the bank records why not); True requires
    it; False skips it (the fold banks of the check itself). Costs ``folds`` refits plus replays.
    The refits start from the full fit (:class:`RefitBank`); ``cold_start=True`` refits from
    scratch and steps every test, random ones too, through sessions (the reference of
    ``benchmarks/check_cost.py``).
    """
    if interval_check is False or interval_check is None:
        return bank
    if interval_check not in ("auto", True):
        raise ValueError(f"interval_check must be 'auto', True or False, got {interval_check!r}")
    data = getattr(calibrator, "training_data_", None)
    reason = ""
    if data is None:
        reason = "the calibrator did not keep its training data"
    elif data.n_subjects < MIN_SUBJECTS:
        reason = f"{data.n_subjects} calibration LLMs (needs {MIN_SUBJECTS})"
    if reason:
        if interval_check is True:
            raise ValueError(f"interval check impossible: {reason}")
        return bank.replace_attrs(interval_calibration_skipped=reason)
    method = bank.attrs.get("calibration_method", "")
    psn = method in ("psn", "psn-laplace") and "b_sd" in bank.items.data_vars
    data, groups_from = with_llm_groups(data)  # runs of one LLM are held out together, given or detected
    # score factors come with the check, never without: the check's score curves make their intervals honest
    without_factors = bank
    bank, score_fit = attach_score_factors(bank, data, rng=_seed_of(calibrator), keep_fit=True)
    dims = bank.score_factors.dims if bank.score_factors is not None else None
    refit = RefitBank(calibrator, to_bank, score_dims=dims, score_fit=score_fit, score_ids=data.subject_ids,
                      warm=not cold_start)
    try:
        record = cross_fit_intervals(data, refit, rng=_seed_of(calibrator), calibration_method=method,
                                     full_bank=bank, widen_b_sd=psn, shortcuts=not cold_start)
    except FoldFitError as exc:  # e.g. one LLM holds all the information: no held-out check is possible
        if interval_check is True:
            raise ValueError(f"interval check impossible: {exc}") from None
        return without_factors.replace_attrs(interval_calibration_skipped=str(exc))
    if groups_from.startswith("detected"):  # given groups (or none) leave the record as it was
        record["llm_groups"] = groups_from
    if not record["curves"]:
        return without_factors.replace_attrs(interval_calibration_skipped="too few held-out LLMs with enough answers")
    factor = record["item_sd_factors"]["b_applied"]
    if psn and factor > 1.0:
        bank = scale_b_sd(bank, factor, f"posterior SD of b, widened x{factor:.3g} to the spread of refits on "
                          f"{record['folds']} folds of the calibration LLMs (cross-fitted, interval_calibration)")
    return bank.replace_attrs(interval_calibration=json.dumps(record, sort_keys=True))


def _seed_of(calibrator):
    rng = getattr(calibrator, "rng", None)
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        return int(rng)
    return 0


def describe(record: dict) -> str:
    """One line per curve: c(L) and the measured RMS ratio before calibration."""
    groups = record.get("n_llm_groups")
    over = (f"{record['n_subjects']} runs of {groups} LLMs" if groups and groups < record["n_subjects"]
            else f"{record['n_subjects']} LLMs")
    lines = [f"interval check: {record['folds']} folds over {over}, {record['seconds']} s; "
             "sessions multiply SD(theta) by c(L) after L items"]
    how = record.get("llm_groups", "")
    if how.startswith("detected"):
        lines.append(f"  runs of one LLM held out together, grouped by the run suffix of their ids ({how}); "
                     "--same-llm-pattern sets the groups yourself")
    for name, cur in record["curves"].items():
        pairs = ", ".join(f"L={L}: c={c:.2f} (RMS z {r:.2f})" for L, c, r in
                          zip(cur["test_length"], cur["c"], cur["rms_ratio_model"]))
        lines.append(f"  {name}: {pairs}")
    for name, cur in (record.get("score_curves") or {}).items():
        pairs = ", ".join(f"L={L}: {d:.3f}" for L, d in zip(cur["test_length"], cur["residual_sd"]))
        lines.append(f"  score check, {name}: residual SD per unanswered item {pairs}")
        if cur.get("cot_log_sd"):
            pairs = ", ".join(f"L={L}: {d:.2f}" for L, d in zip(cur["test_length"], cur["cot_log_sd"]))
            lines.append(f"  score check, {name}: CoT-total log-SD {pairs}")
    for side, part in (record.get("beyond") or {}).items():
        if not isinstance(part, dict) or "curves" not in part:
            continue
        lo, hi = part["calibration_accuracy_range"]
        for name, cur in part["curves"].items():
            pairs = ", ".join(f"L={L}: c={c:.2f}" for L, c in zip(cur["test_length"], cur["c"]))
            lines.append(f"  beyond the calibration range ({side}: {part['n_held_out']} runs held out, a bank from "
                         f"accuracies {lo:.2f}-{hi:.2f}), {name}: {pairs}")
        for name, cur in (part.get("score_curves") or {}).items():
            if cur.get("accuracy_mae") and cur.get("random_mean_mae"):
                pairs = ", ".join(f"L={L}: {m / r:.2f}x" for L, m, r in
                                  zip(cur["test_length"], cur["accuracy_mae"], cur["random_mean_mae"]) if r > 0)
                lines.append(f"  beyond ({side}), {name}: the model's score error vs the mean of as many random items {pairs}")
    b = record.get("item_sd_factors", {}).get("b_applied", 1.0)
    if b and b > 1.0:
        lines.append(f"  b_sd widened x{b:.2f} to the cross-fitted refit spread")
    return "\n".join(lines)
