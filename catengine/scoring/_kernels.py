"""Compiled sums over a bank's items at a few trait values (the exact passes behind
``catengine.scoring.model_based.SummedCurves``).

One loop over the items and the points, summing into per-group accumulators, instead of (points,
items, nodes) temporaries: the sums of pbar_j(t) and pbar_j (1 - pbar_j) (the response averaged
over each item's Gaussian parameter posterior, as ``item_averaged_response``) and the four CoT
moments of ``cot_curves``. The sums are compensated (Kahan), so a bank of a million items is summed
to about the rounding of one value. Column 0 of each sum is the whole bank, column 1 + g category g.
"""

from __future__ import annotations

import math

import numpy as np
from catengine.numba_cache import njit

from catengine.models._fast_math import exp_neg, pade_exp_parts, sigmoid_pair
from catengine.models.kernels import cholesky_in_place
from catengine.models.score_factors import score_factor_mode

MODEL_2PL, MODEL_4PL, MODEL_LART = 0, 1, 2  # the accuracy model of a bank: its ResponseModel.kernel_code
UNCERTAINTY_NONE, UNCERTAINTY_B, UNCERTAINTY_AB = 0, 1, 2
_SAFE_EXP = 700.0  # |arguments| below which exp and products of two such exps stay finite


@njit(cache=True, inline="always")
def _expit(z):
    if z >= 0.0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


@njit(cache=True, inline="always")
def _add(out, comp, f, i, g, value):
    """Kahan-compensated out[f, i, g] += value."""
    y = value - comp[f, i, g]
    t = out[f, i, g] + y
    comp[f, i, g] = (t - out[f, i, g]) - y
    out[f, i, g] = t


BLOCK = 64  # items summed plainly before the compensated add into the totals


@njit(cache=True)
def _add_block(out, comp, part):
    """Kahan-compensated out += part (every entry), then part = 0."""
    F, P, G = part.shape
    for f in range(F):
        for i in range(P):
            for g in range(G):
                _add(out, comp, f, i, g, part[f, i, g])
                part[f, i, g] = 0.0


@njit(cache=True)
def accuracy_sums(model, uncertainty, points, items, a, b, c, d, a_var, b_var, ab_cov, x, w, codes, n_cols, pairs):
    """(2, P, n_cols): the sums over ``items`` of pbar_j(t) and pbar_j (1 - pbar_j) at ``points``.

    ``model``: MODEL_*; ``uncertainty``: UNCERTAINTY_NONE (point parameters), UNCERTAINTY_B (b_sd
    only: the variance v_j of z = a t + b does not depend on t) or UNCERTAINTY_AB (a_sd, ab_cov:
    v_j(t) = t^2 a_var + 2 t ab_cov + b_var); ``x``, ``w``: the Gauss-Hermite rule in z of the
    logistic models (the probit average is closed form: Phi(mu / sqrt(1 + v))); ``codes``: each
    item's category (used when n_cols > 1). With b_sd only, a logistic item's nodes share one
    exponential per point (below); ``pairs`` (J, K // 2): exp(sd_j x_k) + exp(-sd_j x_k) of each
    item, computed once per bank (an empty array: computed here, per item)."""
    P = points.size
    K = x.size
    out = np.zeros((2, P, n_cols))
    comp = np.zeros((2, P, n_cols))
    part = np.zeros((2, P, n_cols))
    p = np.empty(P)
    num = np.empty(P)
    den = np.empty(P)
    mid = np.empty(P)
    factor = np.empty(K)
    xmax = 0.0
    for k in range(K):
        xmax = max(xmax, abs(x[k]))
    half = K // 2
    odd = K % 2 == 1
    symmetric = True  # x_k = -x_{K-1-k}, w_k = w_{K-1-k} (and x = 0 in the middle): Gauss-Hermite
    for k in range(half):
        symmetric = symmetric and x[k] == -x[K - 1 - k] and w[k] == w[K - 1 - k]
    if odd:
        symmetric = symmetric and x[half] == 0.0
    w_mid = w[half] if odd else 0.0
    n = items.size
    for start in range(0, n, BLOCK):
        for jj in range(start, min(start + BLOCK, n)):
            j = items[jj]
            aj, bj = a[j], b[j]
            if model == MODEL_LART:  # Phi(mu / sqrt(1 + v)) = erfc(-mu / sqrt(2 (1 + v))) / 2
                if uncertainty == UNCERTAINTY_AB:
                    for i in range(P):
                        t = points[i]
                        v = max(t * t * a_var[j] + 2.0 * t * ab_cov[j] + b_var[j], 0.0)
                        p[i] = 0.5 * math.erfc(-(t * aj + bj) / math.sqrt(2.0 * (1.0 + v)))
                else:
                    scale = 1.0 / math.sqrt(2.0 * (1.0 + max(b_var[j], 0.0)))
                    for i in range(P):
                        p[i] = 0.5 * math.erfc(-(points[i] * aj + bj) * scale)
            elif uncertainty == UNCERTAINTY_NONE:
                for i in range(P):
                    p[i] = _expit(points[i] * aj + bj)
            else:
                sd = math.sqrt(max(b_var[j], 0.0))
                if uncertainty == UNCERTAINTY_B and symmetric and sd * xmax < _SAFE_EXP:
                    # nodes +-x_k in pairs: with e = exp(-|mu|) and g_k = f_k + 1 / f_k, f_k = exp(sd x_k),
                    # sigmoid(mu + sd x_k) + sigmoid(mu - sd x_k) = (2 u^2 + e g_k) / (1 + e g_k + e^2),
                    # u = 1 for mu >= 0, u = e below (no cancellation either way)
                    if pairs.shape[0] > 0:
                        for k in range(half):
                            factor[k] = pairs[j, k]
                    else:
                        for k in range(half):
                            f = math.exp(sd * x[k])
                            factor[k] = f + 1.0 / f
                    for i in range(P):
                        mu = points[i] * aj + bj
                        e = math.exp(-abs(mu))
                        u = 1.0 if mu >= 0.0 else e
                        num[i] = 2.0 * u * u
                        den[i] = 1.0 + e * e
                        p[i] = w_mid * (u / (1.0 + e)) if odd else 0.0
                        mid[i] = e
                    for k in range(half):
                        wk, gk = w[k], factor[k]
                        for i in range(P):
                            t = mid[i] * gk
                            p[i] += wk * ((num[i] + t) / (den[i] + t))
                else:
                    for i in range(P):
                        t = points[i]
                        mu = t * aj + bj
                        if uncertainty == UNCERTAINTY_AB:
                            root = math.sqrt(max(t * t * a_var[j] + 2.0 * t * ab_cov[j] + b_var[j], 0.0))
                        else:
                            root = sd
                        s = 0.0
                        for k in range(K):
                            s += w[k] * _expit(mu + root * x[k])
                        p[i] = s
            if model == MODEL_4PL:
                cj, dj = c[j], d[j]
                for i in range(P):
                    p[i] = cj + (dj - cj) * p[i]
            g = 1 + codes[j] if n_cols > 1 else 0
            for i in range(P):
                q = p[i] * (1.0 - p[i])
                part[0, i, 0] += p[i]
                part[1, i, 0] += q
                if n_cols > 1:
                    part[0, i, g] += p[i]
                    part[1, i, g] += q
        _add_block(out, comp, part)
    return out


@njit(cache=True)
def cot_item_factors(lam):
    """(smear, spread) per item: exp(lam_j^2 / 2) and (exp(lam_j^2) - 1) exp(lam_j^2), the factors of
    the log-normal CoT moments that do not depend on the speed (``cot_sums`` takes them)."""
    smear = np.empty(lam.size)
    spread = np.empty(lam.size)
    for j in range(lam.size):
        lam2 = lam[j] * lam[j]
        smear[j] = math.exp(0.5 * lam2)
        spread[j] = math.expm1(lam2) * math.exp(lam2)
    return smear, spread


@njit(cache=True)
def cot_sums(points, items, omega, phi, smear_j, spread_j, codes, n_cols):
    """(4, P, n_cols): the sums over ``items`` of exp(mu_j), exp(mu_j)^2, exp(mu_j + lam_j^2 / 2) and
    (exp(lam_j^2) - 1) exp(2 mu_j + lam_j^2), mu_j = omega_j - phi_j t, at ``points``; ``smear_j`` and
    ``spread_j`` are :func:`cot_item_factors` of the items' lam."""
    P = points.size
    out = np.zeros((4, P, n_cols))
    comp = np.zeros((4, P, n_cols))
    part = np.zeros((4, P, n_cols))
    n = items.size
    for start in range(0, n, BLOCK):
        for jj in range(start, min(start + BLOCK, n)):
            j = items[jj]
            g = 1 + codes[j] if n_cols > 1 else 0
            smear = smear_j[j]
            spread = spread_j[j]
            oj, pj = omega[j], phi[j]
            for i in range(P):
                base = math.exp(oj - pj * points[i])
                square = base * base
                part[0, i, 0] += base
                part[1, i, 0] += square
                part[2, i, 0] += base * smear
                part[3, i, 0] += spread * square
                if n_cols > 1:
                    part[0, i, g] += base
                    part[1, i, g] += square
                    part[2, i, g] += base * smear
                    part[3, i, g] += spread * square
        _add_block(out, comp, part)
    return out


@njit(cache=True, inline="always")
def _add_item(part, totals, values, g):
    """totals[k] += values[k] (the bank's block sums) and, for a category ``g`` >= 1,
    part[k, 0, g] += values[k]: one remaining item's terms of a draw's sums."""
    for k in range(len(values)):
        totals[k] += values[k]
        if g > 0:
            part[k, 0, g] += values[k]


@njit(cache=True, inline="always")
def _close_block(out, comp, part, totals):
    """The block's bank totals into column 0 of ``part``, then the compensated add (``_add_block``)."""
    for k in range(totals.size):
        part[k, 0, 0] = totals[k]
        totals[k] = 0.0
    _add_block(out, comp, part)


@njit(cache=True)
def draw_sums(f, pi, remaining, var, has_var, codes, n_cols):
    """(3, n_cols): one design draw's sums over the remaining items R (``catengine.scoring.design.DrawSums``):
    sum_R f, sum_{R, pi > 0} var / pi and sum_{R, pi > 0} f^2 / pi, with var = f (1 - f) unless
    ``has_var`` (then ``var``)."""
    out = np.zeros((3, 1, n_cols))
    comp = np.zeros((3, 1, n_cols))
    part = np.zeros((3, 1, n_cols))
    totals = np.zeros(3)  # the bank's sums over a block
    n = f.size
    for start in range(0, n, BLOCK * 16):
        for j in range(start, min(start + BLOCK * 16, n)):
            if not remaining[j]:
                continue
            fj = f[j]
            if pi[j] > 0.0:
                inverse = 1.0 / pi[j]
                v = (var[j] if has_var else fj * (1.0 - fj)) * inverse  # 0 off pi > 0, even where var is not finite
                terms = (fj, v, fj * fj * inverse)
            else:
                terms = (fj, 0.0, 0.0)
            _add_item(part, totals, terms, 1 + codes[j] if n_cols > 1 else 0)
        _close_block(out, comp, part, totals)
    return out[:, 0, :]


@njit(cache=True)
def cot_draw_sums(omega, phi, smear, tau, offset, pi, remaining, codes, n_cols):
    """(3, n_cols): one design draw's CoT sums over the remaining items R, without (J,) temporaries:
    sum_R g_j of the expected CoT lengths at tau, g_j = exp(omega_j - phi_j tau) smear_j - offset
    (``smear`` = exp(lam^2 / 2)), and over R with pi_j > 0, sum exp(2 (omega_j - phi_j tau)) / pi_j and
    sum g_j^2 / pi_j."""
    out = np.zeros((3, 1, n_cols))
    comp = np.zeros((3, 1, n_cols))
    part = np.zeros((3, 1, n_cols))
    totals = np.zeros(3)
    n = omega.size
    for start in range(0, n, BLOCK * 16):
        for j in range(start, min(start + BLOCK * 16, n)):
            if not remaining[j]:
                continue
            base = math.exp(omega[j] - phi[j] * tau)
            gj = base * smear[j] - offset
            if pi[j] > 0.0:
                inverse = 1.0 / pi[j]
                terms = (gj, base * base * inverse, gj * gj * inverse)
            else:  # off the design's support: exactly 0, even where exp overflows
                terms = (gj, 0.0, 0.0)
            _add_item(part, totals, terms, 1 + codes[j] if n_cols > 1 else 0)
        _close_block(out, comp, part, totals)
    return out[:, 0, :]


@njit(cache=True, inline="always")
def _ndtr(x):
    """The standard normal CDF (cephes' ndtr: erf near 0, erfc in the tails)."""
    z = x / math.sqrt(2.0)
    if abs(z) < 1.0 / math.sqrt(2.0):
        return 0.5 + 0.5 * math.erf(z)
    y = 0.5 * math.erfc(abs(z))
    return 1.0 - y if z > 0.0 else y


@njit(cache=True)
def mixture_bisection(weights, means, inverse, point_mass, targets, lo, hi, max_iter):
    """Bisection of the mixture CDFs sum_k w_k Phi((q - means[k, g]) inverse[k, g]) (a point mass at
    means[k, g] where ``point_mass``) against ``targets`` (T,), for every (target, group) at once
    until every bracket ``lo`` / ``hi`` (T, G) holds adjacent floats (updated in place)."""
    K, G = means.shape
    T = targets.size
    for _ in range(max_iter):
        done = True
        for t in range(T):
            for g in range(G):
                mid = 0.5 * (lo[t, g] + hi[t, g])
                if mid != lo[t, g] and mid != hi[t, g]:
                    done = False
        if done:
            return
        for t in range(T):
            for g in range(G):
                mid = 0.5 * (lo[t, g] + hi[t, g])
                cdf = 0.0
                for k in range(K):
                    if point_mass[k, g]:
                        cdf += weights[k] * (1.0 if means[k, g] <= mid else 0.0)
                    else:
                        cdf += weights[k] * _ndtr((mid - means[k, g]) * inverse[k, g])
                if cdf < targets[t]:
                    lo[t, g] = mid
                else:
                    hi[t, g] = mid


_VECTOR_OPTS = dict(cache=True, nogil=True, error_model="numpy", fastmath={"nnan", "ninf", "nsz", "contract", "reassoc"})


@njit(**_VECTOR_OPTS)
def factor_node_sums(nodes, loadings_t, intercepts, unknown, codes, n_cols, mean_sums, var_sums):
    """Per node k and group column g, over the unknown items j (``unknown`` 0/1 float) of that group:
    mean_sums[k, g] = sum P_j(eta_k), var_sums[k, g] = sum P_j(eta_k) (1 - P_j(eta_k)), with
    P_j(eta) = logistic(g_j . eta + h_j) the score-factor model (``catengine.models.score_factors``).

    ``nodes`` (K, d), ``loadings_t`` (d, J) (the loadings transposed, C-contiguous), ``intercepts``
    (J,); column 0 is the whole bank, column 1 + c category c (``codes`` (J,), ``n_cols`` = 1 +
    number of categories; codes unused when n_cols = 1). The logistic is ``sigmoid_pair`` (within 3
    ulp of scipy's expit); the loops over the items vectorise."""
    K, d = nodes.shape
    J = intercepts.size
    mean_sums[:, :] = 0.0
    var_sums[:, :] = 0.0
    z = np.empty(J)
    p = np.empty(J)
    pq = np.empty(J)
    for k in range(K):
        for j in range(np.uint64(0), np.uint64(J)):
            z[j] = intercepts[j]
        for f in range(d):
            cf = nodes[k, f]
            for j in range(np.uint64(0), np.uint64(J)):
                z[j] += cf * loadings_t[f, j]
        if n_cols == 1:
            s1 = 0.0
            s2 = 0.0
            for j in range(np.uint64(0), np.uint64(J)):
                x = z[j]
                q, eq = sigmoid_pair(x, unknown[j])  # masked items: q = 1, e q = 0
                s1 += unknown[j] - eq if x >= 0.0 else eq
                s2 += q * eq
            mean_sums[k, 0] = s1
            var_sums[k, 0] = s2
        else:
            for j in range(np.uint64(0), np.uint64(J)):
                x = z[j]
                q, eq = sigmoid_pair(x, unknown[j])
                p[j] = unknown[j] - eq if x >= 0.0 else eq
                pq[j] = q * eq
            s1 = 0.0
            s2 = 0.0
            for j in range(np.uint64(0), np.uint64(J)):
                s1 += p[j]
                s2 += pq[j]
            mean_sums[k, 0] = s1
            var_sums[k, 0] = s2
            for j in range(J):
                g = 1 + codes[j]
                mean_sums[k, g] += p[j]
                var_sums[k, g] += pq[j]


#: no reassociation (the Cody-Waite split and the order of the pairs' sums stay as written)
_EXACT_OPTS = dict(cache=True, nogil=True, error_model="numpy", fastmath={"nnan", "ninf", "nsz", "contract"})
#: items per block of ``expected_logistic`` (its per-item scratch stays in L1)
EXPECTED_BLOCK = 512
#: node magnitudes y = |a sd x| below which exp(-y) needs no clamp (``_exp_neg_ratio``)
_RATIO_MAX = 700.0


@njit(inline="always", **_EXACT_OPTS)
def _exp_neg_ratio(y, clamp):
    """(n, m) with n / m = exp(-y) for 0 <= y <= 700 (``clamp``: larger y taken as 700; exp(-700) ~
    1e-304): the Cody-Waite reduction of ``sigmoid_pair`` and its [6/6] Pade pair on the remainder f
    (|f| <= ln2 / 2, relative error < 1e-18 there), n = 2^k N(f), m = N(-f); no division."""
    scale, numerator, denominator = pade_exp_parts(max(-y, -_RATIO_MAX) if clamp else -y)
    return scale * numerator, denominator


@njit(inline="always", **_EXACT_OPTS)
def _pair_sum(y, e, u2, clamp):
    """logistic(mu + y) + logistic(mu - y) from e = exp(-|mu|), u2 = 2 u^2 and y >= 0 (see
    ``expected_logistic``)."""
    num, den = _exp_neg_ratio(y, clamp)
    p = num * den
    q = e * (num * num + den * den)
    return (u2 * p + q) / ((1.0 + e * e) * p + q)


@njit(**_EXACT_OPTS)
def expected_logistic(theta, sd, x, w, a, b, c, d, four_pl, out):
    """out[j] = sum_k w[k] P_j(theta + sd x[k]) for logistic items, P_j(t) = logistic(a_j t + b_j)
    (2PL), or c_j + (d_j - c_j) logistic(a_j t + b_j) with ``four_pl`` (c, d unused otherwise): the
    expectation of P_j under Normal(theta, sd^2) by the rule (x, w) (Gauss-Hermite: symmetric).

    A symmetric rule's nodes +-x_k are taken in pairs: with mu = a theta + b, y = |a sd x_k|,
    e = exp(-|mu|) and E = exp(-y),

        logistic(mu + y) + logistic(mu - y) = (2 u^2 E + e (1 + E^2)) / (E + e (1 + E^2) + e^2 E),

    u = 1 for mu >= 0 and u = e below: positive terms only (no cancellation, a few ulps whatever
    the magnitude), one exponential and one division per pair instead of two of each; E = n / m
    from ``_exp_neg_ratio``, the fraction multiplied through by m^2. The pairs are added outermost
    (smallest weight) first, then the middle node u / (1 + e); two pairs per pass over a block of
    items. Agrees with the sum of the K logistic values to within the rounding of the arguments (a
    few ulps of |mu| + y_k per node) and a few ulps per term (tests/test_score_sums_kernels.py,
    tests/test_default_step_probabilities.py). Items with |a sd| max|x| >= 700 take the clamped
    exponential (as ``sigmoid_pair`` clamps); a rule that is not symmetric is summed node by node."""
    K = x.size
    J = a.size
    half = K // 2
    odd = K % 2 == 1
    symmetric = True
    x_max = 0.0
    for k in range(half):
        symmetric = symmetric and x[k] == -x[K - 1 - k] and w[k] == w[K - 1 - k]
        x_max = max(x_max, abs(x[k]))
    if odd:
        symmetric = symmetric and x[half] == 0.0
    if not symmetric:
        for j in range(J):
            out[j] = 0.0
        for k in range(K):
            t = theta + sd * x[k]
            wk = w[k]
            for j in range(J):
                z = t * a[j] + b[j]
                q, eq = sigmoid_pair(z, 1.0)
                out[j] += wk * (q if z >= 0.0 else eq)
    else:
        w_mid = w[half] if odd else 0.0
        B = EXPECTED_BLOCK
        e_ = np.empty(B)
        u_ = np.empty(B)
        u2_ = np.empty(B)
        s_ = np.empty(B)
        acc = np.empty(B)
        for start in range(0, J, B):
            n = min(B, J - start)
            wide = 0
            for i in range(n):
                j = start + i
                mu = a[j] * theta + b[j]
                e = exp_neg(-abs(mu))
                u = 1.0 if mu >= 0.0 else e
                e_[i] = e
                u_[i] = u
                u2_[i] = 2.0 * u * u
                s = abs(a[j] * sd)
                big = s * x_max >= _RATIO_MAX  # such items are redone with the clamp below
                s_[i] = 0.0 if big else s
                wide += 1 if big else 0
                acc[i] = 0.0
            # x[k] < 0 for k < half: the pair's node magnitude is -x[k]
            for k in range(0, half - 1, 2):
                x1, w1, x2, w2 = -x[k], w[k], -x[k + 1], w[k + 1]
                for i in range(n):
                    e, u2, s = e_[i], u2_[i], s_[i]
                    acc[i] = (acc[i] + w1 * _pair_sum(s * x1, e, u2, False)) + w2 * _pair_sum(s * x2, e, u2, False)
            if half % 2 == 1:
                xk, wk = -x[half - 1], w[half - 1]
                for i in range(n):
                    acc[i] += wk * _pair_sum(s_[i] * xk, e_[i], u2_[i], False)
            if wide > 0:
                for i in range(n):
                    s = abs(a[start + i] * sd)
                    if s * x_max >= _RATIO_MAX:
                        t = 0.0
                        for k in range(half):
                            t += w[k] * _pair_sum(s * -x[k], e_[i], u2_[i], True)
                        acc[i] = t
            for i in range(n):
                out[start + i] = acc[i] + w_mid * (u_[i] / (1.0 + e_[i]))
    if four_pl:
        for j in range(J):
            out[j] = c[j] + (d[j] - c[j]) * out[j]


@njit(cache=True, nogil=True)
def factor_score_trajectory(loadings, loadings_t, intercepts, order, correct, lengths, residual_sds, grid, weights,
                            tol, max_iter, out_mean, out_var):
    """The score-factor prediction of the number correct after each of ``lengths`` answers of one
    answer sequence (``order`` bank indices, ``correct`` 0/1, in answer order; ``lengths``
    increasing): out_mean[t] the plug-in total at the factor posterior's mode, out_var[t] its mean
    square error under the Laplace posterior plus (residual_sds[t] n_U)^2 -- what
    ``model_based.predict_accuracy_factors`` gives for the whole bank (centre "mode", no interval).

    Each length starts the posterior's Newton from 0 as ``factor_posterior`` does; the product rule
    ``grid`` / ``weights`` is ``score_factors.standard_product_grid``, moved to the posterior by
    its Cholesky factor; the sums over the unanswered items are ``factor_node_sums``."""
    J, d = loadings.shape
    n_max = lengths[lengths.size - 1]
    K = grid.shape[0]
    unknown = np.ones(J)
    gb = np.empty((n_max, d))
    hb = np.empty(n_max)
    yb = np.empty(n_max)
    zero = np.zeros(d)
    mode = np.zeros(d)
    cov = np.empty((d, d))
    chol = np.empty((d, d))
    nodes = np.empty((K, d))
    at_mode = np.empty((1, d))
    sums_mean = np.empty((K, 1))
    sums_var = np.empty((K, 1))
    point = np.empty((1, 1))
    scratch = np.empty((1, 1))
    codes = np.zeros(1, dtype=np.int64)
    known = 0.0
    n = 0
    for t in range(lengths.size):
        L = lengths[t]
        while n < L:
            j = order[n]
            unknown[j] = 0.0
            for p in range(d):
                gb[n, p] = loadings[j, p]
            hb[n] = intercepts[j]
            yb[n] = correct[n]
            known += correct[n]
            n += 1
        score_factor_mode(gb[:n], hb[:n], yb[:n], zero, tol, max_iter, mode, cov)  # n = 0: the prior, 0 and I
        for p in range(d):
            for q in range(d):
                chol[p, q] = cov[p, q] + (1e-300 if p == q else 0.0)
        cholesky_in_place(chol)
        for k in range(K):
            for p in range(d):
                s = mode[p]
                for q in range(p + 1):
                    s += chol[p, q] * grid[k, q]
                nodes[k, p] = s
        factor_node_sums(nodes, loadings_t, intercepts, unknown, codes, 1, sums_mean, sums_var)
        for p in range(d):
            at_mode[0, p] = mode[p]
        factor_node_sums(at_mode, loadings_t, intercepts, unknown, codes, 1, point, scratch)
        common = residual_sds[t] * (J - n)
        mean = 0.0
        for k in range(K):
            mean += weights[k] * (sums_mean[k, 0] + known)
        var = 0.0
        for k in range(K):
            gap = sums_mean[k, 0] + known - mean
            v = sums_var[k, 0]
            if common > 0.0:
                v += common * common
            var += weights[k] * v + weights[k] * gap * gap
        plug_in = point[0, 0] + known
        var += (mean - plug_in) * (mean - plug_in)
        out_mean[t] = plug_in
        out_var[t] = var


@njit(cache=True, nogil=True)
def cot_total_trajectory(omega, phi, lam, order, tokens, lengths, taus, tau_sds, log_extra_sds, gh_x, gh_w,
                         cot_offset, min_smearing, out_mean, out_var):
    """The model-based prediction of the CoT total (tokens) after each of ``lengths`` answers of one
    answer sequence with recorded lengths (``order`` bank indices, ``tokens`` the lengths, in
    answer order), at that length's speed posterior Normal(taus[t], tau_sds[t]^2): what
    ``model_based.predict_cot_total_from_curves`` gives for the whole bank (smeared residuals from
    ``min_smearing`` recorded lengths on, log-normal moments before; the extra log-SD
    ``log_extra_sds[t]``; no interval) with the bank's sums taken directly (``cot_sums``)."""
    J = omega.size
    P = gh_x.size
    unknown = np.ones(J, dtype=np.bool_)
    codes = np.zeros(1, dtype=np.int64)
    points = np.empty(P)
    node_mean = np.empty(P)
    node_var = np.empty(P)
    item_smear, item_spread = cot_item_factors(lam)
    n = 0
    for t in range(lengths.size):
        L = lengths[t]
        while n < L:
            unknown[order[n]] = False
            n += 1
        items = np.flatnonzero(unknown)
        tau = taus[t]
        for i in range(P):
            points[i] = tau + tau_sds[t] * gh_x[i]
        sums = cot_sums(points, items, omega, phi, item_smear, item_spread, codes, 1)
        tokens_sum = 0.0
        for k in range(n):
            tokens_sum += tokens[k]
        n_unknown = J - n
        smeared = n >= min_smearing
        m1 = 0.0
        m2 = 0.0
        spread = 0.0
        rel_var = 0.0
        if smeared:
            for k in range(n):
                j = order[k]
                e = math.exp(math.log(tokens[k] + cot_offset) - (omega[j] - phi[j] * tau))
                m1 += e
                m2 += e * e
            m1 /= n
            m2 /= n
            spread = max(m2 - m1 * m1, 0.0)
            rel_var = spread * n / max(n - 1, 1) / (n * m1 * m1)
        has_common = smeared
        extra = log_extra_sds[t]
        if extra > 0.0:
            has_common = True
            rel_var = (1.0 + rel_var) * math.exp(extra * extra) - 1.0
        # per node: the conditional mean and variance of the total, and the common factor's part
        for i in range(P):
            if smeared:
                node_mean[i] = sums[0, i, 0] * m1 - cot_offset * n_unknown + tokens_sum
                node_var[i] = sums[1, i, 0] * spread
                common = sums[0, i, 0] * m1
            else:
                node_mean[i] = sums[2, i, 0] - cot_offset * n_unknown + tokens_sum
                node_var[i] = sums[3, i, 0]
                common = sums[2, i, 0]
            if has_common and rel_var > 0.0:
                node_var[i] += rel_var * common * common
        mean = 0.0
        for i in range(P):
            mean += gh_w[i] * node_mean[i]
        var = 0.0
        for i in range(P):
            gap = node_mean[i] - mean
            var += gh_w[i] * node_var[i] + gh_w[i] * gap * gap
        out_mean[t] = mean
        out_var[t] = var
