"""Fit a bank's score factors: a d-factor logistic model of the calibration answers that the engine
uses to choose items for, and predict, the full-benchmark accuracy (docs/score_prediction.md §2).

    P(y_ij = 1) = logistic(g_j . eta_i + h_j),   eta_i ~ Normal(0, I_d),
    g_j ~ Normal(0, SLOPE_VARIANCE I_d),  h_j ~ Normal(0, INTERCEPT_VARIANCE)

fitted by joint maximum a posteriori estimation: alternating Newton steps for every item's
(g_j, h_j) and every LLM's eta_i (each block is strictly concave; steps are capped at 1 per
coordinate), with the traits re-standardised to mean 0 and identity covariance after each sweep
(the loadings and intercepts absorb the linear map, so the fitted probabilities do not change).
The number of factors d is chosen by cross-validation over LLMs: for each held-out LLM half of its
answers give its factor posterior mode and the other half are predicted (mean log loss); a factor
is added only while it wins by more than two standard errors of the paired per-LLM differences.

The numerics take arrays only (``correct`` with -1 for missing answers); the passes over the cells
of the Newton steps and the log posterior are numba kernels (``calibration.heldout._score_factor_kernels``),
the small per-item and per-LLM systems are solved there too. :func:`attach_score_factors`
is the hook that every calibrator's bank goes through (the held-out check, ``calibration.heldout.check``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
from scipy.special import log_expit

from calibration.heldout import _score_factor_kernels as _kernels
from calibration.heldout.folds import llm_folds
from catengine.models.score_factors import MAX_SCORE_FACTORS

__all__ = ["MIN_SCORE_FACTOR_LLMS", "LLMS_PER_FACTOR", "ScoreFactorFit", "attach_score_factors", "choose_factor_count",
           "fit_score_factors", "held_out_log_loss"]

MIN_SCORE_FACTOR_LLMS = 40  # fewer calibration rows (LLM runs): no score factors (their loadings would be mostly noise)
LLMS_PER_FACTOR = 40  # at most one factor per this many calibration rows (LLM runs; and at most 3)
SLOPE_VARIANCE = 4.0  # prior variance of each loading (SD 2 on the N(0, 1) trait scale); see docs/score_prediction.md §2
INTERCEPT_VARIANCE = 25.0  # prior variance of the intercepts: items nobody (or everybody) solved stay finite
CV_FOLDS = 3
DEFAULT_MAX_ITER = 400
DEFAULT_TOL = 1e-7  # relative change of the log posterior over one sweep
RUNAWAY_LOADING_NORM = 50.0  # 25 prior SDs: a fit whose loadings pass this has run away (MATH500's largest: 7.5)


@dataclass(frozen=True)
class ScoreFactorFit:
    """A fitted score-factor model: ``loadings`` (J, d), ``intercepts`` (J,), ``traits`` (N, d) of
    the calibration LLMs, and how the fit went (``record``: JSON-ready)."""

    loadings: np.ndarray
    intercepts: np.ndarray
    traits: np.ndarray
    converged: bool
    n_iter: int
    log_posterior: float
    record: dict = field(default_factory=dict)

    @property
    def dims(self) -> int:
        return int(self.loadings.shape[1])


def _check_matrix(correct) -> tuple[np.ndarray, np.ndarray]:
    y = np.asarray(correct)
    if y.ndim != 2 or y.shape[0] < 2 or y.shape[1] < 2:
        raise ValueError(f"the response matrix must be (LLMs, items) with at least 2 of each, got shape {y.shape}")
    observed = y >= 0
    if np.any(observed & (y > 1)):
        i, j = np.argwhere(observed & (y > 1))[0]
        raise ValueError(f"answers must be 0, 1 or -1 (missing); row {int(i)}, item {int(j)} holds {y[i, j].item()!r}")
    return np.where(observed, y, 0).astype(np.float64), observed.astype(np.float64)


def _objective(Y, M, T, G, h, slope_variance, intercept_variance) -> float:
    ll = _kernels.log_likelihood(*_contiguous(Y, M, T, G, h))
    return float(ll - 0.5 * np.sum(T * T) - 0.5 * np.sum(G * G) / slope_variance - 0.5 * np.sum(h * h) / intercept_variance)


def fit_score_factors(correct, dims: int, *, slope_variance: float = SLOPE_VARIANCE,
                      intercept_variance: float = INTERCEPT_VARIANCE, max_iter: int = DEFAULT_MAX_ITER,
                      tol: float = DEFAULT_TOL, start: tuple | None = None) -> ScoreFactorFit:
    """Joint MAP fit of the d-factor logistic model to ``correct`` (N, J; 0/1, -1 missing).

    ``start``: (traits (N, d), loadings (J, d), intercepts (J,)) to start the sweeps from instead
    of the principal components (the held-out check's fold refits start from the full fit's
    values of their rows); the fixed point is the same, the number of sweeps smaller.

    The sweeps re-standardise the traits after every step (see the module docstring). On a small,
    separable sample (e.g. 32 runs of 16 LLMs) that scheme can run away: each sweep spreads the
    traits, the re-standardisation hands the spread to the loadings, and the capped item steps
    cannot pull them back. When a loading's norm passes ``RUNAWAY_LOADING_NORM`` (or a step fails),
    the fit restarts by plain block ascent of the log posterior (no re-standardisation until it
    has converged; every block step is accepted only if the objective does not fall), which is
    bounded because every parameter has a Normal prior; ``record["fallback"]`` says so."""
    if not (isinstance(dims, (int, np.integer)) and 1 <= dims <= MAX_SCORE_FACTORS):
        raise ValueError(f"dims must be an integer in 1..{MAX_SCORE_FACTORS}, got {dims!r}")
    Y, M = _check_matrix(correct)
    if start is None:
        start = _starting_values(Y, M, int(dims))
    else:
        start = tuple(np.array(x, dtype=np.float64) for x in start)
        if start[0].shape != (Y.shape[0], dims) or start[1].shape != (Y.shape[1], dims) or start[2].shape != (Y.shape[1],):
            raise ValueError(f"start shapes {[x.shape for x in start]} do not fit a {Y.shape} matrix with {dims} factors")
    priors = (slope_variance, intercept_variance)
    fit = _standardised_sweeps(Y, M, *start, *priors, max_iter, tol)
    if fit is not None:
        return fit
    return _block_ascent(Y, M, *start, *priors, max_iter, tol)


def _starting_values(Y, M, d):
    """(traits, loadings, intercepts): the leading principal components of the centred answers."""
    n, J = Y.shape
    n_obs = np.maximum(M.sum(axis=0), 1.0)
    p = np.clip((Y * M).sum(axis=0) / n_obs, 0.02, 0.98)
    h = np.log(p / (1.0 - p))
    centred = M * (Y - p[None, :])
    if n <= J:  # eigenvectors of the smaller Gram matrix
        vals, vecs = np.linalg.eigh(centred @ centred.T)
        S = np.sqrt(np.maximum(vals[::-1][:d], 1e-12))
        U = vecs[:, ::-1][:, :d]
        V = centred.T @ U / S
    else:
        vals, vecs = np.linalg.eigh(centred.T @ centred)
        S = np.sqrt(np.maximum(vals[::-1][:d], 1e-12))
        V = vecs[:, ::-1][:, :d]
        U = centred @ V / S
    return U * math.sqrt(n), V * (S / math.sqrt(n)) * 4.0, h


def _contiguous(*arrays):
    """The arrays as C-contiguous float64 (the kernels' layout; no copy when they already are)."""
    return tuple(np.ascontiguousarray(a, dtype=np.float64) for a in arrays)


def _capped_newton_steps(hess, grad):
    """Per row, hess^-1 grad divided by max(1, max |step|); LinAlgError when a Hessian is not positive definite."""
    steps, ok = _kernels.capped_newton_steps(*_contiguous(hess, grad))
    if not ok:
        raise np.linalg.LinAlgError("a Newton step's Hessian is not positive definite")
    return steps


def _item_step(Y, M, T, G, h, prior_item):
    """One Newton step for every item's (g_j, h_j), capped at 1 per coordinate."""
    d = G.shape[1]
    grad, hess = _kernels.item_newton_sums(*_contiguous(Y, M, T, G, h))
    psi = np.hstack([G, h[:, None]])
    grad -= psi @ prior_item
    hess += prior_item
    psi += _capped_newton_steps(hess, grad)
    return psi[:, :d].copy(), psi[:, d].copy()


def _trait_step(Y, M, T, G, h):
    """One Newton step for every LLM's eta_i (Normal(0, I) prior), capped at 1 per coordinate."""
    grad_t, hess_t = _kernels.trait_newton_sums(*_contiguous(Y, M, T, G, h))
    grad_t -= T
    hess_t += np.eye(G.shape[1])
    return T + _capped_newton_steps(hess_t, grad_t)


def _standardise(T, G, h):
    """eta -> L^-1 (eta - m); g -> L' g, h -> h + g . m: mean 0, identity covariance, same probabilities."""
    T, G, h, ok = _kernels.standardise(*_contiguous(T, G, h))
    if not ok:
        raise np.linalg.LinAlgError("the traits' covariance is not positive definite")
    return T, G, h


def _standardised_sweeps(Y, M, T, G, h, slope_variance, intercept_variance, max_iter, tol):
    """The default scheme: item step, trait step, re-standardisation, per sweep (all sweeps in one
    compiled call, ``_kernels.standardised_sweeps``). None if it runs away or a step fails."""
    T, G, h, status, it, f = _kernels.standardised_sweeps(*_contiguous(Y, M, T, G, h), float(slope_variance),
                                                           float(intercept_variance), int(max_iter), float(tol),
                                                           RUNAWAY_LOADING_NORM)
    if status in (_kernels.RUNAWAY, _kernels.NOT_POSITIVE_DEFINITE):
        return None
    return ScoreFactorFit(G, h, T, status == _kernels.CONVERGED, int(it), float(f))


def _block_ascent(Y, M, T, G, h, slope_variance, intercept_variance, max_iter, tol):
    """Monotone block ascent of the log posterior (steps halved until the objective does not fall),
    re-standardised once at the end. Used when the standardised sweeps run away."""
    d = G.shape[1]
    prior_item = np.diag([1.0 / slope_variance] * d + [1.0 / intercept_variance])

    def objective(T_, G_, h_):
        return _objective(Y, M, T_, G_, h_, slope_variance, intercept_variance)

    f_old = f = objective(T, G, h)
    converged, it = False, 0
    for it in range(1, max_iter + 1):
        G_new, h_new = _item_step(Y, M, T, G, h, prior_item)
        for _ in range(30):  # each block is strictly concave: a short enough Newton step ascends
            f_new = objective(T, G_new, h_new)
            if f_new >= f:
                G, h, f = G_new, h_new, f_new
                break
            G_new, h_new = 0.5 * (G + G_new), 0.5 * (h + h_new)
        T_new = _trait_step(Y, M, T, G, h)
        for _ in range(30):
            f_new = objective(T_new, G, h)
            if f_new >= f:
                T, f = T_new, f_new
                break
            T_new = 0.5 * (T + T_new)
        if abs(f - f_old) <= tol * max(1.0, abs(f)):
            converged = True
            break
        f_old = f
    T, G, h = _standardise(T, G, h)
    return ScoreFactorFit(G, h, T, converged, it, objective(T, G, h),
                          record={"fallback": "block ascent without re-standardisation (the standardised sweeps ran away)"})


def held_out_log_loss(fit_loadings, fit_intercepts, correct, rng) -> np.ndarray:
    """Per row, the mean log loss on a random half of its answers, from the factor posterior mode
    given the other half (the rows are LLMs the model was not fitted on; NaN for rows with fewer
    than 4 answers). The halves depend on ``rng`` and the rows only, so candidates scored with
    generators of the same seed are compared on the same answers."""
    from catengine.models.score_factors import factor_posterior

    y_all = np.asarray(correct)
    out = np.full(y_all.shape[0], np.nan)
    for r, y in enumerate(y_all):
        seen = np.flatnonzero(y >= 0)
        if seen.size < 4:
            continue
        perm = rng.permutation(seen)
        given, scored = perm[: seen.size // 2], perm[seen.size // 2:]
        mode, _ = factor_posterior(fit_loadings, fit_intercepts, given, y[given].astype(float))
        z = fit_loadings[scored] @ mode + fit_intercepts[scored]
        t = y[scored].astype(float)
        out[r] = -float(np.mean(t * log_expit(z) + (1.0 - t) * log_expit(-z)))
    return out


def choose_factor_count(correct, *, max_dims: int, folds: int = CV_FOLDS, rng=0, groups=None,
                        **fit_kwargs) -> tuple[int, dict]:
    """The number of factors (1..max_dims) by cross-validation over LLMs, with the losses per
    candidate (mean held-out log loss per LLM, :func:`held_out_log_loss`). ``groups`` (N,): the LLM
    group of each row (``ResponseData.llm_groups``); the runs of one LLM are held out together, so
    that a sibling run in the training folds cannot make an extra factor look predictive.

    One more factor is taken only while it lowers the held-out loss by more than two standard
    errors of the paired per-LLM differences (every candidate predicts the same halves of the same
    LLMs' answers): a second factor that wins by noise would make the selection chase it. The
    candidates after the first that fails are not fitted (their losses are absent from the
    returned dict). With max_dims = 1 nothing is fitted."""
    if max_dims <= 1:
        return 1, {}
    y = np.asarray(correct)
    N = y.shape[0]
    seed = int(rng) if isinstance(rng, (int, np.integer)) else 0
    fold_rows = llm_folds(np.arange(N) if groups is None else groups, folds, seed)

    def held_out(d):
        losses = np.full(N, np.nan)
        for k, test in enumerate(fold_rows):
            train = np.setdiff1d(np.arange(N), test)
            fit = fit_score_factors(y[train], d, **fit_kwargs)
            losses[test] = held_out_log_loss(fit.loadings, fit.intercepts, y[test], np.random.default_rng([seed, k]))
        return losses

    per_llm = {1: held_out(1)}
    chosen = 1
    for d in range(2, max_dims + 1):  # stop at the first factor that does not earn its place
        per_llm[d] = held_out(d)
        diff = per_llm[d - 1] - per_llm[d]
        diff = diff[np.isfinite(diff)]
        if diff.size < 2 or diff.mean() <= 2.0 * diff.std(ddof=1) / math.sqrt(diff.size):
            break
        chosen = d
    return chosen, {str(d): round(float(np.nanmean(v)), 6) for d, v in per_llm.items()}


def max_factor_count(n_llms: int) -> int:
    return int(max(1, min(MAX_SCORE_FACTORS, n_llms // LLMS_PER_FACTOR)))


def attach_score_factors(bank, data, *, dims: int | None = None, rng=0, start: tuple | None = None,
                         tol: float = DEFAULT_TOL, keep_fit: bool = False):
    """``bank`` with score factors fitted on ``data`` (a ``ResponseData``), or ``bank`` unchanged
    when ``data`` has fewer than ``MIN_SCORE_FACTOR_LLMS`` rows (LLM runs: two runs of one LLM count twice)
    and ``dims`` is None. ``dims`` None:
    chosen by :func:`choose_factor_count`; an integer: fixed, whatever the number of LLMs (the
    held-out check's fold banks use the full bank's, so that they select items as it does).
    ``start`` / ``tol``: passed to :func:`fit_score_factors` (the fold banks start from the full
    fit). ``keep_fit``: return (bank, the :class:`ScoreFactorFit` or None)."""
    N = int(data.n_subjects)
    if dims is None and N < MIN_SCORE_FACTOR_LLMS:
        return (bank, None) if keep_fit else bank
    if data.n_items != bank.n_items or list(map(str, data.item_ids)) != list(bank.item_ids):
        raise ValueError("the response data and the bank have different items: score factors need the bank's items, "
                         "in its order")
    t0 = time.perf_counter()
    losses = {}
    if dims is None:
        dims, losses = choose_factor_count(data.correct, max_dims=max_factor_count(N), rng=rng, groups=data.llm_groups)
    fit = fit_score_factors(data.correct, int(dims), tol=tol, start=start)
    record = {
        "version": 1,
        "model": "P(correct) = logistic(g_j . eta + h_j), eta ~ Normal(0, I_d); joint MAP (docs/score_prediction.md §2)",
        "dims": int(dims),
        "slope_variance": SLOPE_VARIANCE,
        "intercept_variance": INTERCEPT_VARIANCE,
        "n_subjects": N,
        "converged": bool(fit.converged),
        "n_iter": int(fit.n_iter),
        "cv_log_loss": losses,
        "cv_folds": CV_FOLDS if losses else 0,
        "seconds": round(time.perf_counter() - t0, 2),
    }
    if "fallback" in fit.record:
        record["fallback"] = fit.record["fallback"]
    out = bank.with_score_factors(fit.loadings, fit.intercepts, record)
    return (out, fit) if keep_fit else out
