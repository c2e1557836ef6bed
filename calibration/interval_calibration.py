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

from calibration.folds import llm_folds, n_llm_groups, with_llm_groups
from calibration.score_factors import DEFAULT_TOL as DEFAULT_SCORE_FACTOR_TOL
from calibration.score_factors import attach_score_factors
from calibration.threads import Workers, threads_for

from calibration.audit._common import Z95
from calibration.score_calibration import fit_score_curve, score_residuals, smooth_table

__all__ = ["DEFAULT_FOLDS", "DEFAULT_LENGTHS", "EDGE_SHARE", "MIN_SUBJECTS", "cross_fit_intervals", "describe", "edge_folds", "fit_factors",
           "interval_multipliers", "item_sd_factors", "MIN_LLMS_TO_NARROW", "narrowing_floor", "quantile_bound_order", "robust_scale", "scale_b_sd", "with_interval_check"]

DEFAULT_FOLDS = 5
MIN_FOLDS = 2  # fewer folds possible (fewer than 4 LLMs): no check (the bank says so)
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
        fs = fb.subjects
        if fs is None:
            continue
        ids = [str(s) for s in fs["subject"].values]
        x = fs["theta"].values
        y = np.array([full_theta.get(i, np.nan) for i in ids])
        ok = np.isfinite(x) & np.isfinite(y)
        if ok.sum() < 3 or not (_has_spread(x[ok]) and _has_spread(y[ok])):
            continue
        A, B = np.polyfit(x[ok], y[ok], 1)
        if not (math.isfinite(A) and math.isfinite(B) and A != 0.0):
            continue
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


def _trait_spread_problem(bank) -> str:
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


def narrowing_floor(c, n: int) -> np.ndarray:
    """c(L) below 1 only with evidence: where the fitted factor is below 1 it is replaced by
    min(1, its upper confidence bound), c sqrt(n / chi2_{n, 1 - NARROWING_CONFIDENCE}) (n held-out
    LLMs; n c_hat^2 / c^2 ~ chi2_n for normal z), and by 1 with fewer than ``MIN_LLMS_TO_NARROW``
    (24) held-out LLMs: the chi-square bound assumes normal z, and real misses are heavy-tailed (on
    ChemBench PSN banks, 17 held-out LLMs per check, fold seed 1, it let random selection's coverage
    after 25 items fall to 0.86; docs/honest_intervals.md).
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
                        shortcuts: bool = True, prepare_bank=None, workers=None) -> dict:
    """The ``interval_calibration`` record (a dict) of a calibration on ``data``.

    ``make_bank(train_data, rng, bank_id) -> (ItemBank, converged)`` refits the calibration on a
    subset of the LLMs without its own check. ``prepare_bank(bank, train_data) -> ItemBank``
    (optional) completes each refitted bank before its replays (the bank's check attaches the
    score factors there: :class:`FoldScoreFactors`). ``scoring``: "lart" (with CoT) or "irt" for LaRT
    banks (default: the session default, "lart"); ignored otherwise. With ``full_bank`` (the bank
    fitted on all of ``data``) the item SDs are checked too (:func:`item_sd_factors`); with
    ``widen_b_sd`` (PSN banks) the fold banks' b_sd are widened by the measured factor (>= 1)
    before the replays, and the record's ``item_sd_factors["b_applied"]`` says by how much the full
    bank's must be widened to match. ``shortcuts`` (default): random-selection tests are scored at
    the tabulated lengths only (:func:`_random_replays`) and the adaptive tests are replayed by the
    compiled replay (``catengine.session.fast_replay``); False steps every test through sessions
    (the reference ``benchmarks/check_cost.py`` compares with).

    The refits, replays and score sums are tasks on ``workers`` (a
    :class:`calibration.threads.Workers`; default: a pool of its own, one thread from
    ``threads.MAX_POOLED_CELLS`` cells on). Every task draws from its own random stream and the
    results are read in fold order, so the record does not depend on how many threads ran them
    (``tests/test_interval_calibration_fast.py``).
    """
    if workers is not None:
        return _cross_fit(data, make_bank, folds, test_lengths, scoring, estimator, rng, calibration_method, full_bank,
                          widen_b_sd, shortcuts, prepare_bank, workers)
    with Workers(threads_for(data.n_subjects * data.n_items)) as own:
        return _cross_fit(data, make_bank, folds, test_lengths, scoring, estimator, rng, calibration_method, full_bank,
                          widen_b_sd, shortcuts, prepare_bank, own)


def _cross_fit(data, make_bank, folds, test_lengths, scoring, estimator, rng, calibration_method, full_bank, widen_b_sd,
               shortcuts, prepare_bank, workers) -> dict:
    from calibration.audit.runner import stream
    from catengine.session import CATSession

    t0 = time.perf_counter()
    N = data.n_subjects
    n_groups = n_llm_groups(data)
    K = int(min(folds, n_groups // 2))
    if K < 2:  # every fold holds out at least 2 LLMs, and there are at least 2 folds
        raise FoldFitError(f"{_llms(data, n_groups)} are too few to split into {MIN_FOLDS} folds of at least 2 LLMs "
                           f"(needs {2 * MIN_FOLDS} LLMs; the runs of one LLM stay in one fold)")
    seed = int(np.random.SeedSequence(rng).entropy) if not isinstance(rng, np.random.Generator) else int(rng.integers(2**63))
    # the runs of one LLM (data.subject_groups) are held out together: a sibling in the training folds would flatter the check
    fold_rows = llm_folds(data.llm_groups, K, stream(seed, 0, "interval-folds"))
    n_obs = np.count_nonzero(data.correct >= 0, axis=1)
    max_len = int(min(max(test_lengths), data.n_items // 2, np.sort(n_obs)[max(0, N - MIN_HELD_OUT * 2)]))
    lengths = [int(L) for L in test_lengths if L <= max_len] or [max(1, max_len)]
    L = lengths[-1]

    # every refit first (folds, then the strength-ordered sides), then each bank completed: the
    # workers take them in this order, so a completion never waits for a refit that has not started
    def refit(train, key, bank_id):
        train_data = data.subset(subjects=train)
        bank, converged = make_bank(train_data, np.random.default_rng(stream(seed, key, "fit")), bank_id)
        return train_data, bank, converged

    def completed(fit):
        train_data, bank, converged = fit.result()
        return (bank if prepare_bank is None else prepare_bank(bank, train_data)), converged

    edges = edge_folds(data, n_obs, L)
    fits = [workers.submit(refit, np.setdiff1d(np.arange(N), fold_rows[k]), k, f"interval_check_fold{k}")
            for k in range(K)]
    side_fits = {side: workers.submit(refit, np.setdiff1d(np.arange(N), rows), K + r, f"interval_check_{side}")
                 for r, (side, (rows, _)) in enumerate(edges.items())}
    fold_banks_done = [workers.submit(completed, f) for f in fits]
    side_banks_done = {side: workers.submit(completed, f) for side, f in side_fits.items()}

    n_converged = 0
    fold_banks = []
    for k, done in enumerate(fold_banks_done):
        try:
            bank, converged = done.result()
        except ValueError as exc:  # the data without this fold's LLMs cannot be calibrated at all
            raise FoldFitError(f"fold {k + 1} of {K} (without {len(fold_rows[k])} of the {N} LLM runs) cannot be "
                               f"calibrated: {exc}") from None
        n_converged += int(converged)
        fold_banks.append(bank)
        spread = _trait_spread_problem(bank)
        if spread:
            raise FoldFitError(f"fold {k + 1} of {K} (without {len(fold_rows[k])} of the {N} LLM runs): {spread}")
    factors = item_sd_factors(full_bank, fold_banks, K) if full_bank is not None else {"a": None, "b": None}
    applied = 1.0
    if widen_b_sd and factors.get("b"):
        applied = max(1.0, float(factors["b"]))
        if applied > 1.0:
            fold_banks = [scale_b_sd(b, applied, "") for b in fold_banks]
    factors["b_applied"] = round(applied, 4)
    scoring_used = (scoring or "lart") if fold_banks[0].response_model == "lart" else "irt"
    default_name = CATSession(fold_banks[0]).selector.name  # fold banks carry no check: the usual default
    replay = _Replays(data, n_obs, L, lengths, scoring_used, default_name, estimator, seed, shortcuts, workers)
    first = [("default", None), ("random", _random())] + ([] if default_name == "mfi" else [("mfi", _mfi())])
    folds_replayed = replay.folds(fold_banks, fold_rows, first)
    sides_replayed = {side: workers.submit(replay.side, side_banks_done[side], np.setdiff1d(np.arange(N), rows), test,
                                           K + r) for r, (side, (rows, test)) in enumerate(edges.items())}
    curves, score_curves = replay.curves(*replay.merged([f.result() for f in folds_replayed], first))()
    if _loses_to_random(score_curves, default_name):
        # sessions of this bank will default to randomised selection (catengine.selection.default_selector_for):
        # measure it too, on the same fold banks, so that they get its own c(L), z95(L) and score check
        more = [("randomised", _randomised())]
        more_replayed = [f.result() for f in replay.folds(fold_banks, fold_rows, more)]
        more_curves, more_scores = replay.curves(*replay.merged(more_replayed, more))()
        curves.update(more_curves)
        score_curves.update(more_scores)
    beyond = _strength_ordered_check(data, edges, sides_replayed, replay)
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


def _strength_ordered_check(data, edges, sides_replayed, replay):
    """The ``beyond`` part of the record (docs/math.md §7.5): per side ("above", "below" of
    :func:`edge_folds`), a bank fitted without the strongest (weakest) LLMs, the held-out ones
    replayed with the default selector (``sides_replayed``: side -> future of
    :meth:`_Replays.side`), and their trait and score curves fitted as for the random folds. Sessions
    whose standing lies beyond the calibration population on that side (docs/math.md §7.8) widen the
    model-based score by the larger of these score curves and the random folds' (``catengine.session
    .scoring.score_curve``); the trait curves are reported with the bank. None when neither side
    has enough LLMs (or the LLMs left on both cannot be calibrated)."""
    pending = {}
    for side, done in sides_replayed.items():
        result = done.result()
        if result is not None:  # None: the LLMs left cannot be calibrated, this side is not checked
            pending[side] = (result[0], replay.curves(*result[1]))  # both sides' score sums queued before either is read
    out = {}
    for side, (train, finish) in pending.items():
        curves, score_curves = finish()
        if curves:
            n_cal = data.correct[train] >= 0
            acc = np.where(n_cal, data.correct[train], 0).sum(axis=1) / np.maximum(n_cal.sum(axis=1), 1)
            out[side] = {"n_held_out": int(edges[side][1].size), "n_calibration": int(train.size),
                         "calibration_accuracy_range": [round(float(acc.min()), 4), round(float(acc.max()), 4)],
                         "curves": curves, "score_curves": score_curves}
    if not out:
        return None
    return {"form": f"the LLMs in the top (above) / bottom (below) {EDGE_SHARE:.0%} of accuracy held out, strictly "
                    "beyond every calibration LLM; a bank fitted on the others; the held-out LLMs replayed with the "
                    "default selector; c(L), z95(L) and the score curves fitted as for the random folds. Sessions "
                    "whose standing lies beyond the calibration population widen the model-based score by "
                    "the larger of these score curves and the random folds'; the trait curves are reported", **out}


class _Replays:
    """The replays of one check and their curves, as tasks on the check's workers.

    ``folds`` submits one task per fold (its held-out LLMs with at least L answers, replayed against
    its fold bank with the given selectors); ``merged`` pools their results in fold order: (diff, sd,
    full_sd) per selector for the trait curves and the replayed sessions with their rows for the
    score check; ``curves`` fits the trait curves at once and queues the score sums
    (:func:`score_residuals`, one task per fold and selector), returning the function that waits
    for them and fits the score curves."""

    def __init__(self, data, n_obs, L, lengths, scoring, default_name, estimator, seed, shortcuts, workers):
        self.data, self.n_obs, self.L, self.lengths = data, n_obs, L, lengths
        self.scoring, self.default_name = scoring, default_name
        self.estimator, self.seed, self.shortcuts = estimator, seed, shortcuts
        self.workers = workers

    def one_fold(self, bank, rows, selectors, replication):
        from calibration.audit.replay import replay_llms

        test = [i for i in rows if self.n_obs[i] >= self.L]
        if not test:
            return None
        # random selection does not look at the answers: its tests are scored at the tabulated lengths
        # only (_random_replays), the adaptive selectors step by step (replay_llms)
        stepped = [(name, sel) for name, sel in selectors if name != "random" or not self.shortcuts]
        raw = replay_llms(bank, self.data, test, stepped, [self.scoring], self.estimator, self.L, self.seed, replication,
                          keep_sessions=True, compiled=self.shortcuts)
        random = None
        if len(stepped) < len(selectors):
            random = _random_replays(bank, self.data, test, self.lengths, self.scoring, self.estimator, self.seed,
                                     replication)
        return test, raw, random

    def folds(self, fold_banks, fold_rows, selectors, replication_offset=0) -> list:
        return [self.workers.submit(self.one_fold, bank, rows, selectors, k + replication_offset)
                for k, (bank, rows) in enumerate(zip(fold_banks, fold_rows))]

    def merged(self, replayed_folds, selectors):
        """(pooled, replayed) per selector name from the results of :meth:`one_fold`, in fold order."""
        idx = np.asarray(self.lengths) - 1
        stepped = [name for name, _ in selectors if name != "random" or not self.shortcuts]
        pooled: dict[str, list] = {}
        replayed: dict[str, list] = {}  # selector -> [(sessions, held-out rows)] per fold, for the score check
        for done in replayed_folds:
            if done is None:
                continue
            test, raw, random = done
            for r, name in enumerate(stepped):
                key = self.default_name if name == "default" else name
                pooled.setdefault(key, []).append((raw["est"][r, 0][:, idx] - raw["full"][0][:, None],
                                                   raw["sd"][r, 0][:, idx], raw["full_sd"][r, 0]))
                replayed.setdefault(key, []).append((raw["sessions"][r][0], test))
            if random is not None:
                est, sd, sessions = random
                # fold banks carry no interval calibration, so SD_F is the same for every selector
                pooled.setdefault("random", []).append((est - raw["full"][0][:, None], sd, raw["full_sd"][0, 0]))
                replayed.setdefault("random", []).append((sessions, test))
        return pooled, replayed

    def side(self, bank_done, train, test, replication):
        """A strength-ordered side: (its training rows, (pooled, replayed)) of its held-out LLMs
        ``test`` replayed with the default selector, or None when its training LLMs cannot be
        calibrated (``bank_done``, the future of its completed bank, raised ValueError)."""
        try:
            bank, _ = bank_done.result()
        except ValueError:
            return None
        one = [("default", None)]
        return train, self.merged([self.one_fold(bank, test, one, replication)], one)

    def curves(self, pooled, replayed):
        """The trait curves of every selector with at least MIN_HELD_OUT held-out LLMs (fitted now)
        and a function returning (curves, score curves) once the queued score sums are in."""
        curves, pending = {}, {}
        for key, parts in pooled.items():
            diff = np.concatenate([p[0] for p in parts])
            sd = np.concatenate([p[1] for p in parts])
            full_sd = np.concatenate([p[2] for p in parts])
            if diff.shape[0] < MIN_HELD_OUT:
                continue
            curves[key] = {"test_length": self.lengths, **fit_factors(diff, sd, full_sd)}
            pending[key] = [self.workers.submit(score_residuals, sessions, self.data, rows, self.lengths,
                                                curves[key]["c"]) for sessions, rows in replayed[key]]

        def finish():
            score_curves = {}
            for key, parts in pending.items():
                parts = [p.result() for p in parts]
                pooled_scores = {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}
                score = fit_score_curve(pooled_scores, self.lengths, self.data.n_items)
                if score is not None:
                    score_curves[key] = score
            return curves, score_curves

        return finish


def _random_replays(bank, data, rows, lengths, scoring, estimator, seed, replication):
    """Random-selection tests of the LLMs ``rows`` against ``bank``, scored at ``lengths`` only.

    A random test is a uniformly random order of the LLM's answered items (what a session with
    ``RandomSelection`` draws), and its estimate after L items is the MAP of those L answers, which
    ``CATSession.estimate_from`` computes in one solve (the same posterior as recording them one
    by one; tests/test_interval_calibration_fast.py compares the two), here all lengths of an LLM
    in one compiled call where the estimator allows (``CompiledReplay.estimates_at``, the same
    estimates; tests/test_fast_replay.py). Returns est, sd (llm, length) and one
    ``ReplayedSession`` per LLM whose steps hold every administered item with the estimate at the
    tabulated lengths (NaN at the other steps: the score check reads no other)."""
    from calibration.audit.cat import _estimator
    from calibration.audit.runner import stream
    from calibration.score_calibration import ReplayedSession
    from catengine.session import CATSession
    from catengine.session.fast_replay import CompiledReplay

    ids = list(bank.item_ids)
    give_cot = scoring == "lart" and data.cot_length is not None
    session = CATSession(bank, selector=_random(), estimator=_estimator(estimator, scoring == "lart"))
    rng = np.random.default_rng(stream(seed, replication, "engine", "random", scoring))
    L_max = int(lengths[-1])
    at_steps = np.asarray(lengths, dtype=np.int64) - 1
    est, sd = np.empty((len(rows), len(lengths))), np.empty((len(rows), len(lengths)))
    sessions = []
    fast = CompiledReplay.for_estimates(session)  # the same estimates in one compiled call per LLM
    for k, i in enumerate(rows):
        order = rng.permutation(np.flatnonzero(data.correct[i] >= 0))[:L_max]
        if fast is not None:
            found = fast.estimates_at(order, data.correct[i], data.cot_length[i] if give_cot else None, lengths)
        else:
            items = [ids[j] for j in order]
            cots = [None if not give_cot or np.isnan(v) else float(v) for v in
                    (data.cot_length[i, order] if give_cot else np.full(order.size, np.nan))]
            correct = [int(v) for v in data.correct[i, order]]
            found = [session.estimate_from(items[:L], correct[:L], cots[:L]) for L in lengths]
        est[k] = [e.theta for e in found]
        sd[k] = [e.theta_sd for e in found]
        sessions.append(ReplayedSession(session.bank, session.items, session.params, session.estimator,
                                        session.selector, session.cot_offset,
                                        _random_steps(data, i, order, give_cot, at_steps, found)))
    return est, sd, sessions


def _random_steps(data, row, order, give_cot, at_steps, found):
    """The :class:`~calibration.score_calibration.ReplayedSteps` of a random test: the items
    ``order`` of data row ``row``, with the estimates ``found`` at the steps ``at_steps`` (NaN
    elsewhere)."""
    from calibration.score_calibration import ReplayedSteps

    n = order.size

    def at(values):
        out = np.full(n, math.nan)
        out[at_steps] = values
        return out

    has_tau = any(e.tau is not None for e in found)
    return ReplayedSteps(
        order.astype(np.int64), data.correct[row, order].astype(np.float64),
        data.cot_length[row, order].astype(np.float64) if give_cot else np.full(n, math.nan),
        at([e.theta for e in found]), at([e.theta_sd for e in found]),
        at([math.nan if e.tau is None else e.tau for e in found]) if has_tau else None,
        at([math.nan if e.tau_sd is None else e.tau_sd for e in found]) if has_tau else None)


def _loses_to_random(score_curves: dict, selector_name: str) -> bool:
    """Whether the fitted score curves make sessions default to randomised selection
    (``catengine.scoring.calibration.ScoreCalibration.loses_to_random``, the rule sessions apply)."""
    from catengine.scoring.calibration import ScoreCalibration

    scores = ScoreCalibration.from_record({"score_curves": score_curves}, "")
    return scores is not None and scores.loses_to_random(selector_name)


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
    empirical-Bayes prior, whose result depends on the start) refits cold. The refit still
    maximises the training folds' own likelihood; what the start saves is the way there
    (docs/math.md §7.5 and ``benchmarks/check_cost.py``: the check's figures agree with
    cold-started refits within their Monte-Carlo error). ``warm=False``: cold refits, as a plain
    ``fit``. A refit's convergence warnings are not shown: it counts as converged when its
    ``converged_`` holds and it issued none (``convergence_warnings_``)."""

    def __init__(self, calibrator, to_bank: dict | None = None, warm: bool = True):
        self.cls = type(calibrator)
        self.params = {k: v for k, v in calibrator.get_params().items() if k not in ("progress", "rng")}
        self.to_bank = dict(to_bank or {})
        self.full = calibrator if warm and hasattr(calibrator, "refit_start") else None
        if self.full is not None:
            self.params.update(getattr(calibrator, "refit_settings", dict)())
        self.subject_rows = {str(s): k for k, s in enumerate(getattr(calibrator, "subject_ids_", ()) or ())}

    def __call__(self, data, rng, bank_id):
        ids = [str(s) for s in data.subject_ids]
        cal = self.cls(**{**self.params, "progress": False, "rng": rng})
        cal.quiet_convergence = True
        start = None
        if self.full is not None and all(i in self.subject_rows for i in ids):
            start = self.full.refit_start([self.subject_rows[i] for i in ids])  # None: refit cold
        if start is not None:
            cal.fit_from(data, start)
        else:
            cal.fit(data)
        converged = bool(getattr(cal, "converged_", True)) and not getattr(cal, "convergence_warnings_", ())
        return cal.to_item_bank(bank_id, interval_check=False, **self.to_bank), converged


class FoldScoreFactors:
    """``prepare_bank`` of the check: a fold bank with score factors, as many as the full bank's, fitted
    on the fold's training LLMs (none when the full bank has none).

    ``full`` is the future of ``attach_score_factors(full bank, data, keep_fit=True)`` (the check
    starts it beside the refits) and ``subject_ids`` the ids of its rows. The fold fits begin at the
    full fit's values of their rows and stop at ``REFIT_SCORE_FACTOR_TOL``; ``warm=False`` starts
    them cold at the full fit's tolerance."""

    def __init__(self, full, subject_ids, warm: bool = True):
        self.full = full
        self.rows = {str(s): k for k, s in enumerate(subject_ids)}
        self.warm = warm

    def __call__(self, bank, data):
        full_bank, fit = self.full.result()
        if full_bank.score_factors is None:
            return bank
        dims = full_bank.score_factors.dims
        ids = [str(s) for s in data.subject_ids]
        start, tol = None, DEFAULT_SCORE_FACTOR_TOL
        if self.warm and fit is not None and fit.dims == dims and all(i in self.rows for i in ids):
            rows = [self.rows[i] for i in ids]
            start, tol = (fit.traits[rows], fit.loadings, fit.intercepts), REFIT_SCORE_FACTOR_TOL
        return attach_score_factors(bank, data, dims=dims, start=start, tol=tol)


class FoldFitError(ValueError):
    """A fold of the interval check whose training LLMs cannot be calibrated (the check is then skipped)."""


def with_interval_check(calibrator, bank, interval_check="auto", *, cold_start: bool = False, **to_bank):
    """The hook every ``to_item_bank`` calls last: ``bank`` with its ``interval_calibration`` attribute.

    ``interval_check``: "auto" (default) runs the cross-fit when the calibrator kept its training
    data and it has at least ``MIN_SUBJECTS`` LLM runs of at least ``2 * MIN_FOLDS`` LLMs (else the
    bank records why not); True requires it; False skips it (the fold banks of the check itself).
    Costs ``folds`` refits plus replays. The check never makes the fit fail: with "auto", a check
    that cannot run (a fold that cannot be calibrated, or any other failure of the check, which
    also issues a RuntimeWarning) leaves the bank as it is without the check, its reason in the
    root attribute ``interval_calibration_skipped``; sessions then use the model's own intervals
    and scores, as for any bank without a check.
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
    n_groups = n_llm_groups(data)
    if n_groups < 2 * MIN_FOLDS:
        reason = (f"{_llms(data, n_groups)}: too few to hold out (needs {2 * MIN_FOLDS} LLMs, {MIN_FOLDS} folds of "
                  "at least 2; the runs of one LLM stay in one fold)")
        if interval_check is True:
            raise ValueError(f"interval check impossible: {reason}")
        return bank.replace_attrs(interval_calibration_skipped=reason)
    # score factors come with the check, never without: the check's score curves make their intervals honest
    without_factors = bank
    try:
        with Workers(threads_for(data.n_subjects * data.n_items)) as workers:
            # the full bank's score factors (their number chosen by cross-validation) are fitted beside the refits
            full_factors = workers.submit(attach_score_factors, bank, data, rng=_seed_of(calibrator), keep_fit=True)
            record = cross_fit_intervals(data, RefitBank(calibrator, to_bank, warm=not cold_start),
                                         rng=_seed_of(calibrator), calibration_method=method, full_bank=bank,
                                         widen_b_sd=psn, shortcuts=not cold_start, workers=workers,
                                         prepare_bank=FoldScoreFactors(full_factors, data.subject_ids, warm=not cold_start))
            bank, _ = full_factors.result()
    except FoldFitError as exc:  # e.g. one LLM holds all the information: no held-out check is possible
        if interval_check is True:
            raise ValueError(f"interval check impossible: {exc}") from None
        return without_factors.replace_attrs(interval_calibration_skipped=str(exc))
    except Exception as exc:  # noqa: BLE001 - the check never makes the fit fail: the bank says why it has none
        if interval_check is True:
            raise
        reason = f"the check failed ({type(exc).__name__}: {str(exc)[:300]})"
        warnings.warn(f"interval check skipped: {reason}; the bank is written without it", RuntimeWarning, stacklevel=3)
        return without_factors.replace_attrs(interval_calibration_skipped=reason)
    if groups_from.startswith("detected"):  # given groups (or none) leave the record as it was
        record["llm_groups"] = groups_from
    if not record["curves"]:
        return without_factors.replace_attrs(interval_calibration_skipped="too few held-out LLMs with enough answers")
    factor = record["item_sd_factors"]["b_applied"]
    if psn and factor > 1.0:
        bank = scale_b_sd(bank, factor, f"posterior SD of b, widened x{factor:.3g} to the spread of refits on "
                          f"{record['folds']} folds of the calibration LLMs (cross-fitted, interval_calibration)")
    return bank.replace_attrs(interval_calibration=json.dumps(record, sort_keys=True))


def _llms(data, n_groups: int) -> str:
    """"3 LLMs (30 runs)" or "7 LLMs": the calibration LLMs of ``data``, counted as the check counts them."""
    runs = f" ({data.n_subjects} runs)" if n_groups < data.n_subjects else ""
    return f"{n_groups} LLM{'s' if n_groups != 1 else ''}{runs}"


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
