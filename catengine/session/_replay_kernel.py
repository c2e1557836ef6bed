"""Numba kernel of a whole replayed session: one subject's recorded answers stepped through the
engine's selection and MAP updates in one compiled call (``catengine.session.fast_replay``).

It performs, step by step, what ``CATSession.next_item`` / ``record`` do for the configurations
``fast_replay.CompiledReplay`` accepts, by calling the same compiled pieces the session calls
(``map_newton_1d``, ``item_parameter_sensitivity``, ``topk_info``, the score factors'
``score_factor_mode`` and ``score_factor_topk_gain``) on the same inputs, with the scalar glue (the profiled LaRT Gaussian, the item
uncertainty term, the design-draw probabilities and schedule, the standing among the calibration
runs' answers that switches the design share) written out in the session's order of operations. ``tests/test_fast_replay.py`` compares it with sessions step by step.

The kernels take their arguments in a few named tuples (numba compiles a ``typing.NamedTuple``
of arrays and scalars as one heterogeneous tuple argument; the disk cache keys them by their field
types like any other argument): :class:`ReplayItems` (the bank), :class:`ReplayEstimator` (the MAP
settings), :class:`ReplaySelection` (which steps are design draws, and how they draw),
:class:`ReplayAdaptive` (the adaptive rule and its tables), :class:`ReplaySubject` (one subject's
answers and what the run may use) and :class:`ReplayOutputs` (what the run writes). The scalar
fields' Python types are fixed (int, float, bool), so one compiled specialisation serves every
configuration; arrays are writable and C-contiguous (``fast_replay._own``).

Selector codes: 0 = adaptive steps only, 1 = doubly robust (design draws and adaptive steps),
2 = randomised (every step a design draw). Adaptive codes: 0 = maximum Fisher information,
1 = score-factor D-optimal, 2 = posterior-expected information over the items' (a, b). Model codes as in ``catengine.estimation.state`` (0 = 2PL, 2 = probit).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from catengine.numba_cache import njit

from catengine.estimation.kernels import item_parameter_sensitivity, map_newton_1d
from catengine.models.score_factors import score_factor_mode, score_factor_topk_gain
from catengine.scoring.kernels import expected_logistic
from catengine.selection.kernels import design_draw, topk_expected_info_ab, topk_info

SELECT_MFI, SELECT_DOUBLY_ROBUST, SELECT_RANDOMISED = 0, 1, 2
ADAPTIVE_MFI, ADAPTIVE_SCORE_FACTOR_D, ADAPTIVE_EXPECTED_AB = 0, 1, 2
_INV_SQRT2 = 1.0 / math.sqrt(2.0)


class ReplayItems(NamedTuple):
    """The bank: model code, the accuracy parameters a, b, c, d (J,); whether the estimator adds
    the item-uncertainty term (``has_cov``) with Var(a), Var(b), Cov(a, b) (J,; zeros without);
    whether the bank is LaRT, its CoT parameters phi, lam, omega (J,; zeros for 2PL) and
    ``cot_offset``."""

    model: int
    a: np.ndarray
    b: np.ndarray
    c: np.ndarray
    d: np.ndarray
    has_cov: bool
    va: np.ndarray
    vb: np.ndarray
    vab: np.ndarray
    lart: bool
    phi: np.ndarray
    lam: np.ndarray
    omega: np.ndarray
    cot_offset: float


class ReplayEstimator(NamedTuple):
    """The MAP estimator: whether it reads CoT lengths, the prior precision (q11, q12, q22) and
    mean (mu_t, mu_u) of (theta, tau), and the Newton iterations' ``max_iter`` and ``tol``."""

    use_cot: bool
    q11: float
    q12: float
    q22: float
    mu_t: float
    mu_u: float
    max_iter: int
    tol: float


class ReplaySelection(NamedTuple):
    """Which steps are design draws and how they draw: the selector code; the doubly robust
    schedule (``opening`` steps, the design ``share``, and ``extrapolation_share`` beyond the
    population: the trait outside ``low`` / ``high`` when ``has_population``, or, when
    ``has_responses``, the answers against the calibration runs' bottom and top bands' answer rates
    ``band_rates`` (2, 2, J: band, [rate, smoothed rate], item; NaN: no band answer) by more than ``margin`` standard errors,
    ``catengine.scoring.standing``); the draw's uniform share ``eps`` and Gauss-Hermite rule
    ``gh_x``, ``gh_w``."""

    selector: int
    opening: int
    share: float
    extrapolation_share: float
    has_population: bool
    low: float
    high: float
    has_responses: bool
    band_rates: np.ndarray
    margin: float
    eps: float
    gh_x: np.ndarray
    gh_w: np.ndarray


class ReplayAdaptive(NamedTuple):
    """The adaptive rule (``rule``, an adaptive code) and its tables: the information scan's
    ``info_order`` / ``info_bound``; the score factors' loadings ``g`` (J, dims), intercepts ``h``,
    gain scan ``g_order`` / ``g_norm2`` and posterior ``sf_tol`` / ``sf_max_iter``; the
    posterior-expected information's item covariance ``pe_va``, ``pe_vb``, ``pe_vab``, its two
    Gauss-Hermite rules (``pe_x``, ``pe_w``; narrow ``pe_xs``, ``pe_ws``) and scan ``pe_order`` /
    ``pe_bound``. Tables of another rule are placeholders."""

    rule: int
    info_order: np.ndarray
    info_bound: np.ndarray
    g: np.ndarray
    h: np.ndarray
    g_order: np.ndarray
    g_norm2: np.ndarray
    sf_tol: float
    sf_max_iter: int
    pe_va: np.ndarray
    pe_vb: np.ndarray
    pe_vab: np.ndarray
    pe_x: np.ndarray
    pe_w: np.ndarray
    pe_xs: np.ndarray
    pe_ws: np.ndarray
    pe_order: np.ndarray
    pe_bound: np.ndarray


class ReplaySubject(NamedTuple):
    """One subject's run: answers ``y`` (J,; negative: none) and CoT lengths ``cot`` (J,; NaN
    unknown or unused), the ``eligible`` items (J, bool; modified in place), the SD ``factors`` by
    number of answers (steps + 1,), the design draws' ``uniforms`` (steps,) and ``steps``."""

    y: np.ndarray
    cot: np.ndarray
    eligible: np.ndarray
    factors: np.ndarray
    uniforms: np.ndarray
    steps: int


class ReplayOutputs(NamedTuple):
    """What a run writes: ``items`` (steps,) int64, ``estimates`` (8, steps + 1), ``criteria``
    (steps,) and ``design`` (steps,) bool."""

    items: np.ndarray
    estimates: np.ndarray
    criteria: np.ndarray
    design: np.ndarray


@njit(cache=True)
def _gaussian(lart, use_cot, q11, q12, q22, mu_t, mu_u, cot_info, cot_score):
    """(q, m, tau_alpha, tau_beta, tau_precision) of ``estimation.base.gaussian_part``."""
    if not lart:
        return q11, mu_t, math.nan, math.nan, math.nan
    f_t = cot_info if use_cot else 0.0
    b_s = cot_score if use_cot else 0.0
    t_prec = q22 + f_t
    rhs0 = q11 * mu_t + q12 * mu_u
    rhs1 = q12 * mu_t + q22 * mu_u + b_s
    det = q11 * t_prec - q12 * q12
    m = (t_prec * rhs0 - q12 * rhs1) / det
    return q11 - q12 * q12 / t_prec, m, (b_s + q22 * mu_u + q12 * mu_t) / t_prec, -q12 / t_prec, t_prec


@njit(cache=True)
def _estimate(items, est, buffers, cot_info, cot_score, n, theta0, warm, factor, out, t):
    """The session's estimate after ``n`` answers (``buffers``, as ``_answer_buffers``) into
    ``out[:, t]``: theta, theta_sd, tau, tau_sd, theta_tau_cov, theta_sd_fixed_items (NaN: none),
    n_iter, converged (MAPEstimator.estimate)."""
    model, lart, has_cov = items.model, items.lart, items.has_cov
    q12 = est.q12
    max_iter, tol = est.max_iter, est.tol
    ab, bb, cb, db, yb, vab_a, vab_b, vab_ab = buffers
    q, m, alpha, beta, t_prec = _gaussian(lart, est.use_cot, est.q11, q12, est.q22, est.mu_t, est.mu_u, cot_info,
                                          cot_score)
    start = theta0 if warm else m
    theta, _, _, hl, n_iter, converged = map_newton_1d(model, ab, bb, cb, db, yb, n, q, m, start, max_iter, tol, False)
    curv = -hl
    tau = math.nan
    tau_sd = math.nan
    cov = math.nan
    if not lart:
        total = q + curv
        if not total > 0:
            total = q
        sd = 1.0 / math.sqrt(total)
    else:
        h11 = q + q12 * q12 / t_prec + curv
        h12 = q12
        h22 = t_prec
        det = h11 * h22 - h12 * h12
        tau = alpha + beta * theta
        sd = math.sqrt(h22 / det)
        tau_sd = math.sqrt(h11 / det)
        cov = -h12 / det
    fixed = math.nan
    if has_cov and n > 0:
        v = sd * sd
        acc = item_parameter_sensitivity(model, theta, ab, bb, cb, db, yb, vab_a, vab_b, vab_ab, n)
        extra = v * v * acc
        fixed = sd
        sd = math.sqrt(v + extra)
        if lart:
            tau_sd = math.sqrt(tau_sd * tau_sd + beta * beta * extra)
            cov = cov + beta * extra
    if factor != 1.0:
        sd = sd * factor
        if lart:
            tau_sd = tau_sd * factor
            cov = cov * factor * factor
    out[0, t] = theta
    out[1, t] = sd
    out[2, t] = tau
    out[3, t] = tau_sd
    out[4, t] = cov
    out[5, t] = fixed
    out[6, t] = n_iter
    out[7, t] = 1.0 if converged else 0.0


@njit(cache=True)
def _answer_buffers(n):
    """The per-answer buffers of ``ResponseState`` for ``n`` answers: a, b, c (0), d (1), y, and
    Var(a), Var(b), Cov(a, b) (0 without item uncertainty)."""
    return (np.empty(n), np.empty(n), np.zeros(n), np.ones(n), np.empty(n), np.zeros(n), np.zeros(n), np.zeros(n))


@njit(cache=True)
def _add_answer(j, n, items, y_row, cot_row, buffers, cot_info, cot_score):
    """``ResponseState.add``: item j's parameters into the per-answer ``buffers`` at position n;
    returns the CoT sums (F_T, B) with its recorded length added (LaRT banks, a length known)."""
    a, b, va, vb, vab = items.a, items.b, items.va, items.vb, items.vab
    phi, lam, omega = items.phi, items.lam, items.omega
    ab, bb, _, _, yb, vab_a, vab_b, vab_ab = buffers
    ab[n] = a[j]
    bb[n] = b[j]
    yb[n] = y_row[j]
    if items.has_cov:
        vab_a[n] = va[j]
        vab_b[n] = vb[j]
        vab_ab[n] = vab[j]
    if items.lart and not math.isnan(cot_row[j]):
        w = phi[j] / (lam[j] * lam[j])
        cot_info += w * phi[j]
        cot_score -= w * (math.log(cot_row[j] + items.cot_offset) - omega[j])
    return cot_info, cot_score


@njit(cache=True)
def _design_draw(model, a, b, theta, sd, gh_x, gh_w, eligible, eps, u, f, pi):
    """(item, probability): the randomised selector's sqrt-variance draw with uniform ``u``
    (``RandomisedSelection.candidates``): f = E_q P_j (``expected_probabilities``: closed form for
    probit items, the compiled quadrature ``expected_logistic`` for logistic ones) into ``f``, then
    the design's probabilities (into ``pi``) and the draw by the compiled passes the session calls
    (``catengine.selection.kernels.design_draw``)."""
    J = a.size
    if model == 2:
        for j in range(J):
            s = a[j] * sd
            x = (a[j] * theta + b[j]) / math.sqrt(1.0 + s * s)
            f[j] = 0.5 * math.erfc(-x * _INV_SQRT2)
    else:
        expected_logistic(theta, sd, gh_x, gh_w, a, b, a, a, False, f)
    return design_draw(f, True, eligible, eps, u, pi)


@njit(cache=True, nogil=True)
def _band_flag(excess, spread, margin):
    """``catengine.scoring.standing.flag_of_evidence`` fired (either side) for the band sums:
    z = excess / sqrt(spread) per band (0 where the band answered none of the items)."""
    z_below = excess[0] / math.sqrt(spread[0]) if spread[0] > 0.0 else 0.0
    z_above = excess[1] / math.sqrt(spread[1]) if spread[1] > 0.0 else 0.0
    return z_above - margin > 0.0 or -z_below - margin > 0.0


@njit(cache=True, nogil=True)
def replay_kernel(items, est, selection, adaptive_steps, subject, out):
    """Replay one subject's answers (``subject.y`` over the bank, ``subject.cot`` the CoT lengths,
    NaN when unknown or unused) for ``subject.steps`` steps from the ``subject.eligible`` items
    (modified in place). Returns (steps done, uniforms used). ``out.estimates`` (8, steps + 1):
    the estimate before any answer and after each (``_estimate``); ``out.items`` /
    ``out.criteria`` / ``out.design`` (steps,): the step's item, its criterion value and whether it
    was a design draw. ``subject.factors`` (steps + 1,): the SD factor by number of answers.
    ``selection.responses`` (runs, J) int8, the calibration runs' answers (-1: none; used when
    ``has_responses``): the standing that switches the design share to ``extrapolation_share`` is
    the band evidence of the answers so far beyond ``margin`` (``catengine.scoring.standing``);
    without them the trait beyond ``low`` / ``high``."""
    model, a, b, c, d = items.model, items.a, items.b, items.c, items.d
    selector, opening, share, extrapolation_share = (selection.selector, selection.opening, selection.share,
                                                     selection.extrapolation_share)
    has_population, low, high = selection.has_population, selection.low, selection.high
    has_responses, band_rates, margin = selection.has_responses, selection.band_rates, selection.margin
    eps, gh_x, gh_w = selection.eps, selection.gh_x, selection.gh_w
    adaptive = adaptive_steps.rule
    info_order, info_bound = adaptive_steps.info_order, adaptive_steps.info_bound
    g, h, g_order, g_norm2 = adaptive_steps.g, adaptive_steps.h, adaptive_steps.g_order, adaptive_steps.g_norm2
    sf_tol, sf_max_iter = adaptive_steps.sf_tol, adaptive_steps.sf_max_iter
    pe_va, pe_vb, pe_vab = adaptive_steps.pe_va, adaptive_steps.pe_vb, adaptive_steps.pe_vab
    pe_x, pe_w, pe_xs, pe_ws = adaptive_steps.pe_x, adaptive_steps.pe_w, adaptive_steps.pe_xs, adaptive_steps.pe_ws
    pe_order, pe_bound = adaptive_steps.pe_order, adaptive_steps.pe_bound
    y_row, cot_row, eligible = subject.y, subject.cot, subject.eligible
    factors, uniforms, L = subject.factors, subject.uniforms, subject.steps
    out_items, out_est, out_crit, out_design = out.items, out.estimates, out.criteria, out.design
    J = a.size
    buffers = _answer_buffers(L)
    yb = buffers[4]
    # per band (bottom, top): the answers minus the band's rates, and the rates' variances, on the items answered
    excess = np.zeros(2)
    spread = np.zeros(2)
    dims = g.shape[1]
    gb = np.empty((L, dims))
    hb = np.empty(L)
    f = np.empty(J)
    pi = np.empty(J)
    thetas = np.empty(1)
    ones = np.ones(1)
    best_idx = np.empty(1, dtype=np.int64)
    best_val = np.empty(1)
    sf_mode = np.zeros(dims)
    sf_start = np.zeros(dims)
    sf_cov = np.empty((dims, dims))
    cot_info = 0.0
    cot_score = 0.0
    _estimate(items, est, buffers, cot_info, cot_score, 0, 0.0, False, factors[0], out_est, 0)
    used = 0
    for n in range(L):
        n_elig = 0
        for j in range(J):
            if eligible[j]:
                n_elig += 1
        if n_elig == 0:
            return n, used
        theta = out_est[0, n]
        sd = out_est[1, n]
        design = selector == SELECT_RANDOMISED
        if selector == SELECT_DOUBLY_ROBUST:
            if n < opening:
                design = True
            else:
                s = share
                if extrapolation_share != share:
                    if has_responses:
                        if _band_flag(excess, spread, margin):
                            s = extrapolation_share
                    elif has_population and (theta > high or theta < low):
                        s = extrapolation_share
                design = math.floor((n + 1) * s + 1e-9) > math.floor(n * s + 1e-9)
        if design:
            j, crit = _design_draw(model, a, b, theta, sd, gh_x, gh_w, eligible, eps, uniforms[used], f, pi)
            used += 1
        elif adaptive == ADAPTIVE_MFI:
            thetas[0] = theta
            topk_info(model, thetas, ones, a, b, c, d, eligible, info_order, info_bound, 1, best_idx, best_val)
            j, crit = best_idx[0], best_val[0]
        elif adaptive == ADAPTIVE_EXPECTED_AB:
            topk_expected_info_ab(model, theta, a, b, pe_va, pe_vb, pe_vab, c, d, pe_x, pe_w, pe_xs, pe_ws, eligible,
                                  pe_order, pe_bound, 1, best_idx, best_val)
            j, crit = best_idx[0], best_val[0]
        else:
            # with no answer the Newton stays at its start, 0, and returns the prior: mode 0, covariance I
            for p in range(dims):
                sf_start[p] = sf_mode[p]
            score_factor_mode(gb[:n], hb[:n], yb[:n], sf_start, sf_tol, sf_max_iter, sf_mode, sf_cov)
            lam_max = np.linalg.eigvalsh(sf_cov)[-1]
            score_factor_topk_gain(g, h, sf_mode, sf_cov, eligible, g_order, g_norm2, 0.25 * lam_max * (1.0 + 1e-12), 1,
                       best_idx, best_val)
            j, crit = best_idx[0], best_val[0]
        out_items[n] = j
        out_crit[n] = crit
        out_design[n] = design
        eligible[j] = False
        if has_responses:
            for side in range(2):
                rate = band_rates[side, 0, j]
                if rate == rate:  # a band run answered j (not NaN)
                    smooth = band_rates[side, 1, j]
                    excess[side] += y_row[j] - rate
                    spread[side] += smooth * (1.0 - smooth)
        cot_info, cot_score = _add_answer(j, n, items, y_row, cot_row, buffers, cot_info, cot_score)
        for p in range(dims):
            gb[n, p] = g[j, p]
        hb[n] = h[j]
        _estimate(items, est, buffers, cot_info, cot_score, n + 1, theta, True, factors[n + 1], out_est, n + 1)
    return L, used


@njit(cache=True, nogil=True)
def estimates_at_lengths(items, est, cot_row, factors, order, y_row, lengths, out_est):
    """The estimate from the first ``lengths[t]`` answers of ``order`` (bank indices; answers
    ``y_row``, CoT lengths ``cot_row`` over the bank) for each t, into ``out_est[:, t]`` (as
    ``replay_kernel``'s): each one solve from the prior mean, as ``CATSession.estimate_from``
    makes it, with the answers added in order (the CoT sums accumulated as ``ResponseState``
    does) and ``factors[t]`` the SD factor."""
    buffers = _answer_buffers(lengths[lengths.size - 1])
    cot_info = 0.0
    cot_score = 0.0
    n = 0
    for t in range(lengths.size):
        while n < lengths[t]:
            cot_info, cot_score = _add_answer(order[n], n, items, y_row, cot_row, buffers, cot_info, cot_score)
            n += 1
        _estimate(items, est, buffers, cot_info, cot_score, n, 0.0, False, factors[t], out_est, t)
