"""The score curves of the held-out check (docs/math.md §7.6): how far did held-out real LLMs'
full-benchmark scores fall from the model-based prediction, beyond the model's own interval?

They come from the same fold banks and the same adaptive replays of held-out LLMs as the trait
curves (``calibration.heldout.cross_fit``). After L items, with the session's trait SDs multiplied
by the check's own c(L) (as a session of the final bank will do), the prediction of each held-out
LLM with a complete answer row is compared with the truth, the mean of all its answers. With
n_U = J - L unanswered items:

    e_L     = (A^_L - A) J / n_U                  (the mean residual per unanswered item)
    delta^2 = the smallest x >= 0 with  mean( |e_L| <= 1.96 sqrt((SD_L J / n_U)^2 + x) ) >= 0.95,

so that the calibrated 95% intervals (variance SD_L^2 + (delta n_U / J)^2) hold 95% of the held-out
LLMs. The coverage is matched rather than the mean square: held-out residuals of real LLMs are
heavy-tailed, and a mean-square fit widened every CoT interval for the sake of a few LLMs (MATH500:
coverage 0.99 at 2.6 times the mean total in width). For CoT tokens (LaRT banks, complete CoT rows)
the same on the log scale of the unrecorded part U = total - recorded (+ offset per item):

    r_L = log(U_true / U^),   s^2 = the smallest x >= 0 with mean( |r_L| <= 1.96 sqrt(log(1 + SD_L^2 / U^2) + x) ) >= 0.95.

Both tables are smoothed over neighbouring lengths (weights 1/4, 1/2, 1/4 on the variances) and
stored under ``score_curves`` of the bank's ``interval_calibration`` record; the engine reads them
with ``catengine.scoring.calibration``. The in-sample coverages printed with them use a normal
approximation of the calibrated interval; the honest evidence is ``benchmarks/score_prediction.py``
(nested: its fold banks run their own check on their training folds).
"""

from __future__ import annotations

import math

import numpy as np

from calibration.common import Z95
from calibration.heldout.interval_curves import smooth_table
from catengine.scoring.random_items import random_mean_mae

__all__ = ["MIN_COMPLETE_LLMS", "coverage_matching_variance", "fit_score_curve", "score_residuals"]

MIN_COMPLETE_LLMS = 4  # held-out LLMs with complete answers needed to tabulate the check
SCORE_CHECK_NODES = 11  # Gauss-Hermite nodes over theta: the mean and SD of a smooth function


def score_residuals(sessions, data, rows, lengths, factors) -> dict:
    """Per held-out LLM (complete rows only) and length: the scaled residuals of the prediction.

    ``sessions``: the adaptive sessions of ``rows`` (same order), run to at least max(lengths)
    items on a bank without a stored calibration; ``factors``: c(L) per length. Returns arrays
    (llm, length): ``acc_resid`` / ``acc_model_var`` (per unanswered item), ``acc_err`` / ``acc_sd``
    (accuracy scale), ``acc_truth`` (the full-benchmark accuracy, repeated per length), and for LaRT
    banks with complete CoT rows ``cot_log_ratio`` / ``cot_model_var``.
    """
    from catengine.estimation import TraitEstimate
    from catengine.estimation.base import scale_sd
    from catengine.scoring.model_based import predict_accuracy_factors_at_lengths, predict_cot_total_at_lengths
    from catengine.session.scoring import model_cot_total, model_score, score_curve

    acc_resid, acc_var, acc_err, acc_sd, acc_truth, cot_r, cot_v = [], [], [], [], [], [], []
    for s, i in zip(sessions, rows):
        y = data.correct[i]
        if np.any(y < 0):
            continue
        J = y.size
        truth = float(y.mean())
        cot = None if data.cot_length is None or not s.params.model.has_cot else data.cot_length[i]
        cot_ok = cot is not None and bool(np.all(np.isfinite(cot)))
        steps = s.steps
        taus = (None, None) if steps.tau is None else (steps.tau.tolist(), steps.tau_sd.tolist())
        estimates = [scale_sd(TraitEstimate(theta=float(steps.theta[L - 1]), theta_sd=float(steps.theta_sd[L - 1]),
                                            n_items=L, tau=None if taus[0] is None else taus[0][L - 1],
                                            tau_sd=None if taus[1] is None else taus[1][L - 1]), c)
                     for L, c in zip(lengths, factors)]
        curves = [score_curve(s, e.theta, L) for e, L in zip(estimates, lengths)]
        order, answers = steps.order, steps.correct
        if s.items.score_factors is not None:  # the score-factor prediction at every length in one compiled call
            acc, sd = predict_accuracy_factors_at_lengths(
                s.items.score_factors, order, answers, lengths,
                [0.0 if cu is None else cu.residual(L) for cu, L in zip(curves, lengths)])
        else:
            scores = [model_score(s, estimate=e, n_answered=L, by=False, n_nodes=SCORE_CHECK_NODES, intervals=False)
                      for e, L in zip(estimates, lengths)]
            acc, sd = [sc.accuracy for sc in scores], [sc.sd for sc in scores]
        # the CoT check needs every recorded length up to the longest test (else the row is left out)
        known_tokens = steps.cot_length[:lengths[-1]]
        tokens = known_tokens.tolist()
        cot_totals = None
        if cot_ok and estimates[0].tau is not None and not np.isnan(known_tokens).any():
            cot_totals = predict_cot_total_at_lengths(
                s.params, [e.tau for e in estimates], [e.tau_sd for e in estimates], order[:lengths[-1]], tokens,
                lengths, cot_offset=s.cot_offset, n_nodes=SCORE_CHECK_NODES,
                log_extra_sds=[0.0 if cu is None else cu.cot_log(L) for cu, L in zip(curves, lengths)])
            if cot_totals is None:  # a large bank: one prediction per length (sums from the bank's panels)
                history = s.history
                groups = [model_cot_total(s, e, history[:L], order[:L], cu, n_nodes=SCORE_CHECK_NODES,
                                          intervals=False)[0] for e, L, cu in zip(estimates, lengths, curves)]
                cot_totals = ([g.mean for g in groups], [g.sd for g in groups])
        row = ([], [], [], [], [], [], [])
        for t, L in enumerate(lengths):
            n_u = J - L
            row[0].append((acc[t] - truth) * J / n_u)
            row[1].append((sd[t] * J / n_u) ** 2)
            row[2].append(acc[t] - truth)
            row[3].append(sd[t])
            row[4].append(truth)
            if cot_totals is not None:
                recorded = sum(tokens[:L])
                pad = s.cot_offset * n_u
                u_hat = cot_totals[0][t] - recorded + pad
                u_true = float(np.sum(cot)) - recorded + pad
                row[5].append(math.log(u_true / u_hat))
                row[6].append(math.log1p((cot_totals[1][t] / u_hat) ** 2))
        for store, values in zip((acc_resid, acc_var, acc_err, acc_sd, acc_truth, cot_r, cot_v), row):
            if len(values) == len(lengths):
                store.append(values)
    width = len(lengths)
    return {name: np.array(v, dtype=float).reshape(len(v), width) if v else np.empty((0, width)) for name, v in
            (("acc_resid", acc_resid), ("acc_model_var", acc_var), ("acc_err", acc_err), ("acc_sd", acc_sd),
             ("acc_truth", acc_truth), ("cot_log_ratio", cot_r), ("cot_model_var", cot_v))}


def coverage_matching_variance(resid, model_var, level_z: float = Z95, target: float = 0.95) -> np.ndarray:
    """Per column, the smallest extra variance x >= 0 with mean(|resid| <= z sqrt(model_var + x)) >= target.

    The held-out residuals of real LLMs are heavy-tailed (a few LLMs far off), so a mean-square fit
    would widen every interval for the sake of those few; matching the coverage targets the promise
    itself. Bisection in x (the coverage is monotone in it)."""
    resid, model_var = np.atleast_2d(resid), np.atleast_2d(model_var)
    out = np.zeros(resid.shape[1])
    for t in range(resid.shape[1]):
        r2, v = resid[:, t] ** 2, model_var[:, t]

        def covered(x):
            return np.mean(r2 <= level_z**2 * (v + x))

        if covered(0.0) >= target:
            continue
        lo, hi = 0.0, float(np.max(r2)) / level_z**2 + 1e-12
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            lo, hi = (lo, mid) if covered(mid) >= target else (mid, hi)
        out[t] = hi
    return out


def _mean_random_mae(truths, n_items: int, length: int) -> float:
    """The mean over LLMs of the random mean's exact MAE after ``length`` items (once per distinct accuracy)."""
    values, counts = np.unique(np.asarray(truths, dtype=float), return_counts=True)
    return float(np.dot(counts, [random_mean_mae(a, n_items, length) for a in values]) / counts.sum())


def fit_score_curve(pooled: dict, lengths, n_items: int) -> dict | None:
    """The stored ``score_curves`` entry from pooled :func:`score_residuals` (None: too few LLMs)."""
    e, v = pooled["acc_resid"], pooled["acc_model_var"]
    if e.shape[0] < MIN_COMPLETE_LLMS:
        return None
    delta2 = smooth_table(coverage_matching_variance(e, v))
    err, sd = pooled["acc_err"], pooled["acc_sd"]
    n_u = n_items - np.asarray(lengths, dtype=float)
    cal_sd = np.sqrt(sd * sd + (np.sqrt(delta2) * n_u / n_items)[None, :] ** 2)
    curve = {
        "test_length": [int(L) for L in lengths],
        "residual_sd": [round(float(math.sqrt(d)), 5) for d in delta2],
        "n_llms": int(e.shape[0]),
        "accuracy_mae": [round(float(m), 5) for m in np.mean(np.abs(err), axis=0)],
        "random_mean_mae": [round(_mean_random_mae(pooled["acc_truth"][:, t], n_items, L), 5) for t, L in enumerate(lengths)],
        "accuracy_rms_z_model": [round(float(m), 4) for m in np.sqrt(np.mean(err * err, axis=0) / np.mean(sd * sd, axis=0))],
        "accuracy_rms_z_calibrated_in_sample": [round(float(m), 4) for m in
                                                np.sqrt(np.mean(err * err, axis=0) / np.mean(cal_sd * cal_sd, axis=0))],
        "accuracy_coverage_model_normal": [round(float(m), 4) for m in np.mean(np.abs(err) <= Z95 * sd, axis=0)],
        "accuracy_coverage_calibrated_in_sample_normal": [round(float(m), 4) for m in
                                                          np.mean(np.abs(err) <= Z95 * cal_sd, axis=0)],
        "cot_log_sd": None,
    }
    r, cv = pooled["cot_log_ratio"], pooled["cot_model_var"]
    if r.shape[0] >= MIN_COMPLETE_LLMS and r.shape[1] == len(lengths):
        s2 = smooth_table(coverage_matching_variance(r, cv))
        curve["cot_log_sd"] = [round(float(math.sqrt(x)), 5) for x in s2]
        curve["cot_n_llms"] = int(r.shape[0])
        curve["cot_log_rms_model"] = [round(float(m), 4) for m in np.sqrt(np.mean(r * r, axis=0))]
        curve["cot_coverage_calibrated_in_sample_normal"] = [
            round(float(m), 4) for m in np.mean(np.abs(r) <= Z95 * np.sqrt(cv + s2[None, :]), axis=0)]
    return curve
