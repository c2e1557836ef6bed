"""Numba kernels of item selection: one fused pass over the bank per step.

Every ``topk_*`` kernel scores the ELIGIBLE items only (``eligible`` a bool mask over the bank) and
keeps the ``k`` best in ``best_idx`` / ``best_val`` (descending; ties keep the lower item index),
returning how many were filled (0: nothing eligible). No per-item Python, no (G, J) temporaries;
most kernels prune by a trait-free upper bound of each item's score (see below).
Items with a <= 0 carry no accuracy information: their information (and KL index) is 0.

Model codes as in ``catengine.estimation.state``: 0 = 2PL, 1 = 4PL, 2 = probit (LaRT).
Slow twins: ``tests/naive_engine.py``.
"""

from __future__ import annotations

import math

import numpy as np
from catengine.numba_cache import njit

from catengine.numba_helpers import lane_sums, lanes_total
from catengine.models.kernels import info_4pl_z as _info_z
from catengine.models.kernels import log_p_4pl as _log_p_4pl
from catengine.models.kernels import log_phi_cdf, log_sigmoid, probit_info_h

_INV_SQRT2 = 1.0 / math.sqrt(2.0)
#: below this SD of z = a theta + b the expected-information kernels use the short (5-node) rule
NARROW_SZ = 0.5
NARROW_NODES = 5
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


@njit(cache=True)
def probit_h_fast(z):
    """h(z) = phi(z)^2 / (Phi(z) Phi(-z)) with one exp and one erfc (|z| <= 8; beyond: the series form)."""
    t = abs(z)
    if t > 8.0:
        return probit_info_h(t)
    q = 0.5 * math.erfc(t * _INV_SQRT2)  # Phi(-t), accurate in the tail
    ph = _INV_SQRT_2PI * math.exp(-0.5 * t * t)
    return ph * ph / ((1.0 - q) * q)


@njit(cache=True)
def info_at(model, z, a, c, d):
    """Fisher information about theta of one item at linear predictor z (0 when a <= 0).

    Logistic models: the scalar 4PL kernel of ``catengine.models.expected_information`` (c = 0,
    d = 1 for the 2PL); probit: a^2 h(z)."""
    if a <= 0.0:
        return 0.0
    if model == 2:
        return a * a * probit_h_fast(z)
    return _info_z(z, a * a, c, d)


@njit(cache=True)
def log_p_q(model, z, c, d):
    """(log P, log(1 - P)) of one item at linear predictor z."""
    if model == 0:
        return log_sigmoid(z), log_sigmoid(-z)
    if model == 1:
        return _log_p_4pl(z, c, d)
    return log_phi_cdf(z), log_phi_cdf(-z)


@njit(cache=True)
def _better(val, j, other_val, other_j):
    """Ranking order: larger score first, then lower item index."""
    return val > other_val or (val == other_val and j < other_j)


@njit(cache=True)
def _insert(val, j, k, cnt, best_val, best_idx):
    if cnt < k:
        pos = cnt
        cnt += 1
    elif _better(val, j, best_val[k - 1], best_idx[k - 1]):
        pos = k - 1
    else:
        return cnt
    while pos > 0 and _better(val, j, best_val[pos - 1], best_idx[pos - 1]):
        best_val[pos] = best_val[pos - 1]
        best_idx[pos] = best_idx[pos - 1]
        pos -= 1
    best_val[pos] = val
    best_idx[pos] = j
    return cnt


# Branch and bound: every kernel below visits items in ``order`` (decreasing ``bound``, an upper
# bound of the item's score that does not depend on the traits: a^2/4 for the logistic models,
# 2 a^2 / pi for the probit, 0 for a <= 0) and stops as soon as the bound of the next item falls
# strictly below the k-th best score found. Exact (same result as scanning every item; ties by
# lower index), and usually a small fraction of the bank is touched.


@njit(cache=True)
def topk_info(model, thetas, weights, a, b, c, d, eligible, order, bound, k, best_idx, best_val):
    """Score_j = sum_q weights[q] * I_j(thetas[q]) (weights sum to <= 1; point information: one node)."""
    n = order.shape[0]
    nq = thetas.shape[0]
    cnt = 0
    for r in range(n):
        j = order[r]
        if cnt == k and bound[j] < best_val[k - 1]:
            break
        if not eligible[j]:
            continue
        v = 0.0
        aj = a[j]
        if model == 0 and nq == 1:  # the hot path: 2PL point information, one exp
            if aj > 0.0:
                e = math.exp(-abs(aj * thetas[0] + b[j]))
                rr = 1.0 + e
                v = weights[0] * aj * aj * e / (rr * rr)
        else:
            for q in range(nq):
                v += weights[q] * info_at(model, aj * thetas[q] + b[j], aj, c[j], d[j])
        if cnt < k or _better(v, j, best_val[k - 1], best_idx[k - 1]):
            cnt = _insert(v, j, k, cnt, best_val, best_idx)
    return cnt


@njit(cache=True)
def topk_expected_info(model, theta, a, b, b_sd, c, d, nodes, weights, eligible, order, bound, k, best_idx, best_val):
    """Score_j = E_{b_j ~ Normal(b_j, b_sd_j^2)} I_j(theta) by Gauss-Hermite: sum_q w_q I(a theta + b + b_sd x_q).

    ``nodes`` / ``weights``: probabilists' Gauss-Hermite rule normalised to sum 1 (expectation
    under a standard normal). Items with b_sd = 0 need one evaluation.
    """
    n = order.shape[0]
    nq = nodes.shape[0]
    cnt = 0
    for r in range(n):
        j = order[r]
        if cnt == k and bound[j] < best_val[k - 1]:
            break
        if not eligible[j]:
            continue
        z0 = a[j] * theta + b[j]
        s = b_sd[j]
        if s == 0.0:
            v = info_at(model, z0, a[j], c[j], d[j])
        else:
            v = 0.0
            for q in range(nq):
                v += weights[q] * info_at(model, z0 + s * nodes[q], a[j], c[j], d[j])
        if cnt < k or _better(v, j, best_val[k - 1], best_idx[k - 1]):
            cnt = _insert(v, j, k, cnt, best_val, best_idx)
    return cnt


@njit(cache=True)
def topk_kl(model, theta_hat, thetas, weights, a, b, c, d, eligible, k, best_idx, best_val):
    """Chang & Ying's KL index: sum_q weights[q] * KL(P_j(theta_hat) || P_j(thetas[q])) (0 for a <= 0).
    Full scan (no trait-free bound is used)."""
    n = a.shape[0]
    nq = thetas.shape[0]
    cnt = 0
    for j in range(n):
        if not eligible[j]:
            continue
        v = 0.0
        if a[j] > 0.0:
            lp0, lq0 = log_p_q(model, a[j] * theta_hat + b[j], c[j], d[j])
            p0 = math.exp(lp0)
            q0 = math.exp(lq0)
            for q in range(nq):
                lp, lq = log_p_q(model, a[j] * thetas[q] + b[j], c[j], d[j])
                v += weights[q] * (p0 * (lp0 - lp) + q0 * (lq0 - lq))
        if cnt < k or _better(v, j, best_val[k - 1], best_idx[k - 1]):
            cnt = _insert(v, j, k, cnt, best_val, best_idx)
    return cnt


@njit(cache=True)
def _lart_score(criterion, u, v, p11, p12, p22):
    A = p11 + u
    D = p22 + v
    det = A * D - p12 * p12
    if criterion == 0:
        return -D / det
    if criterion == 1:
        return det
    return -(A + D) / det


@njit(cache=True)
def topk_lart(criterion, theta, a, b, v, p11, p12, p22, eligible, order, bound, v_max, k, best_idx, best_val):
    """LaRT criteria on the 2 x 2 precision P + diag(u_j, v_j) (docs/math.md §5.3).

    criterion 0 (theta-targeted): score = -[(P + diag(u, v))^-1]_11 = -(P22 + v) / det;
    1 (D-optimal): det; 2 (A-optimal): -trace of the inverse = -(P11 + u + P22 + v) / det.
    All three increase with u and v, so score(bound_j, v_max) bounds item j's score.
    """
    n = order.shape[0]
    cnt = 0
    for r in range(n):
        j = order[r]
        if cnt == k and _lart_score(criterion, bound[j], v_max, p11, p12, p22) < best_val[k - 1]:
            break
        if not eligible[j]:
            continue
        u = info_at(2, a[j] * theta + b[j], a[j], 0.0, 1.0)
        s = _lart_score(criterion, u, v[j], p11, p12, p22)
        if cnt < k or _better(s, j, best_val[k - 1], best_idx[k - 1]):
            cnt = _insert(s, j, k, cnt, best_val, best_idx)
    return cnt


@njit(cache=True)
def unit_info(model, z, c, d):
    """Information per unit squared slope at logit z: I = a^2 unit_info(z) (probit h(z); logistic 4PL form)."""
    if model == 2:
        return probit_h_fast(z)
    return _info_z(z, 1.0, c, d)


@njit(cache=True)
def expected_info_ab(model, theta, ma, mb, va, vb, cab, c, d, nodes, weights):
    """E[a^2 f(a theta + b)] for (a, b) ~ Normal((ma, mb), [[va, cab], [cab, vb]]) (0 for ma <= 0).

    z = a theta + b is Normal(mz, sz^2), sz^2 = theta^2 va + 2 theta cab + vb, and
    E[a^2 | z] = (ma + k (z - mz))^2 + va - k^2 sz^2 with k = (theta va + cab) / sz^2; so the
    expectation is one Gauss-Hermite sum over z (exact for Gaussian (a, b) up to the rule's error).
    """
    if ma <= 0.0:
        return 0.0
    mz = ma * theta + mb
    s2 = theta * theta * va + 2.0 * theta * cab + vb
    if s2 <= 1e-24:
        return (ma * ma + va) * unit_info(model, mz, c, d)
    sz = math.sqrt(s2)
    cov = theta * va + cab
    k = cov / s2
    rest = va - k * cov
    if rest < 0.0:
        rest = 0.0
    acc = 0.0
    for q in range(nodes.shape[0]):
        x = nodes[q]
        ea = ma + k * sz * x
        acc += weights[q] * (ea * ea + rest) * unit_info(model, mz + sz * x, c, d)
    return acc


@njit(cache=True)
def expected_info_ab_bound(model, theta, ma, mb, va, vb, cab, c, d, x_max):
    """Upper bound of ``expected_info_ab``'s Gauss-Hermite sum with one evaluation (inf if none).

    The weights of E[a^2 | z] sum to E[a^2] = ma^2 + va exactly, and every node z_q = mz + sz x_q
    has |z_q| >= |mz| - x_max sz; f is even and decreasing in |z| for the 2PL and the probit, so the
    sum is at most (ma^2 + va) f(|mz| - x_max sz) once that is > 0. The 4PL's f = s (1 - s) w1 w0
    with 0 <= w1, w0 <= 1 is below the 2PL's s (1 - s), which bounds it the same way."""
    if ma <= 0.0:
        return math.inf
    mz = ma * theta + mb
    s2 = theta * theta * va + 2.0 * theta * cab + vb
    zmin = abs(mz) - x_max * math.sqrt(max(s2, 0.0))
    if zmin <= 0.0:
        return math.inf
    if model == 1:
        return (ma * ma + va) * unit_info(0, zmin, 0.0, 1.0) * (1.0 + 1e-12)
    return (ma * ma + va) * unit_info(model, zmin, c, d) * (1.0 + 1e-12)


@njit(cache=True)
def _max_abs(nodes):
    x_max = 0.0
    for q in range(nodes.shape[0]):
        x_max = max(x_max, abs(nodes[q]))
    return x_max


@njit(cache=True)
def _expected_info_rule(model, theta, a, b, va, vb, cab, c, d, nodes, weights, nodes_s, weights_s):
    """``expected_info_ab`` with the shorter rule when sd(z) < ``NARROW_SZ`` (see ``topk_expected_info_ab``)."""
    if theta * theta * va + 2.0 * theta * cab + vb < NARROW_SZ * NARROW_SZ:
        return expected_info_ab(model, theta, a, b, va, vb, cab, c, d, nodes_s, weights_s)
    return expected_info_ab(model, theta, a, b, va, vb, cab, c, d, nodes, weights)


@njit(cache=True)
def topk_expected_info_ab(model, theta, a, b, va, vb, cab, c, d, nodes, weights, nodes_s, weights_s, eligible, order,
                          bound, k, best_idx, best_val):
    """Score_j = E_{(a_j, b_j)} I_j(theta) over each item's Gaussian (a, b) (see ``expected_info_ab``).

    ``order`` / ``bound``: items by decreasing (a^2 + Var a) times the peak of the unit information;
    an item whose ``expected_info_ab_bound`` falls below the k-th best is skipped unevaluated.
    ``nodes_s`` / ``weights_s``: a shorter rule used when sd(z) < ``NARROW_SZ`` (5 nodes: error below
    4e-5 of the item's peak information there, tests/test_honest_intervals.py)."""
    n = order.shape[0]
    cnt = 0
    x_max = _max_abs(nodes)
    for r in range(n):
        j = order[r]
        if cnt == k and bound[j] < best_val[k - 1]:
            break
        if not eligible[j]:
            continue
        if cnt == k and expected_info_ab_bound(model, theta, a[j], b[j], va[j], vb[j], cab[j], c[j], d[j], x_max) < best_val[k - 1]:
            continue
        v = _expected_info_rule(model, theta, a[j], b[j], va[j], vb[j], cab[j], c[j], d[j], nodes, weights, nodes_s,
                                weights_s)
        if cnt < k or _better(v, j, best_val[k - 1], best_idx[k - 1]):
            cnt = _insert(v, j, k, cnt, best_val, best_idx)
    return cnt


@njit(cache=True)
def topk_lart_expected(criterion, theta, a, b, va, vb, cab, v, p11, p12, p22, nodes, weights, nodes_s, weights_s,
                       eligible, order, bound, v_max, k, best_idx, best_val):
    """``topk_lart`` with u_j the posterior-expected probit information over (a_j, b_j) (items whose
    bounded u_j cannot win are skipped unevaluated, as in ``topk_expected_info_ab``)."""
    n = order.shape[0]
    cnt = 0
    x_max = _max_abs(nodes)
    for r in range(n):
        j = order[r]
        if cnt == k and _lart_score(criterion, bound[j], v_max, p11, p12, p22) < best_val[k - 1]:
            break
        if not eligible[j]:
            continue
        if cnt == k:
            if _lart_score(criterion, bound[j], v[j], p11, p12, p22) < best_val[k - 1]:
                continue  # even the item's peak information would not win, with its own CoT information
            ub = expected_info_ab_bound(2, theta, a[j], b[j], va[j], vb[j], cab[j], 0.0, 1.0, x_max)
            if ub < math.inf and _lart_score(criterion, ub, v[j], p11, p12, p22) < best_val[k - 1]:
                continue
        u = _expected_info_rule(2, theta, a[j], b[j], va[j], vb[j], cab[j], 0.0, 1.0, nodes, weights, nodes_s, weights_s)
        s = _lart_score(criterion, u, v[j], p11, p12, p22)
        if cnt < k or _better(s, j, best_val[k - 1], best_idx[k - 1]):
            cnt = _insert(s, j, k, cnt, best_val, best_idx)
    return cnt


@njit(cache=True)
def peak_unit_info_4pl(c, d):
    """Per item, an upper bound of max_z of the 4PL's unit information s (1 - s) w1 w0: its maximum on
    a 0.05-step grid over |z| <= 15 plus 1% (the grid misses the peak by at most ~2e-4 relative;
    beyond |z| = 15 the value is below 3e-7)."""
    n = c.shape[0]
    out = np.empty(n)
    for j in range(n):
        m = 0.0
        for k in range(601):
            v = _info_z(-15.0 + 0.05 * k, 1.0, c[j], d[j])
            if v > m:
                m = v
        out[j] = m * 1.01 + 1e-12
    return out


# ------------------------------------------------------------------ design draws (known probabilities)
_DESIGN_OPTS = dict(cache=True, nogil=True, error_model="numpy")  # no exceptions: the passes vectorise
_EPS = 2.220446049250313e-16


@njit(**_DESIGN_OPTS)
def _sum_lanes(x, n):
    """sum(x[:n]) in eight interleaved partial sums (``lane_sums``; the last n % 8 values go to the
    first) combined pairwise: a fixed order (the same bits whatever the caller or the vector width)
    that vectorises without reassociation."""
    m = n - n % 8
    s0, s1, s2, s3, s4, s5, s6, s7 = lane_sums(x, 0, m, (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0))
    for j in range(m, n):
        s0 += x[j]
    return lanes_total((s0, s1, s2, s3, s4, s5, s6, s7))


@njit(**_DESIGN_OPTS)
def design_probabilities(values, from_expected, eligible, eps, out):
    """The design rule's selection probability of every item into ``out``; returns the number of
    eligible items (0: nothing eligible; ``out`` then holds zeros).

    pi_j = (1 - eps) w_j / W + eps / n for the n eligible items (W = sum of their w_j), 0 for the
    others, with w_j = sqrt(f_j (1 - f_j)) from the expected responses f = ``values`` when
    ``from_expected`` (``RandomisedSelection``'s "sqrt-variance" weight), else w = ``values``.
    Computed as alpha w_j + beta with alpha = (1 - eps) / W and beta = eps / n (a few ulps from
    the formula; the sum of pi is 1 within the rounding of W). A W that is not finite and positive
    gives the uniform design over the eligible items. Three vectorised passes (the weights; W in a
    fixed order, ``_sum_lanes``; pi), no temporaries."""
    J = values.size
    n = 0
    for j in range(J):
        e = eligible[j]
        if from_expected:
            v = values[j] * (1.0 - values[j])
            w = math.sqrt(0.0 if v < 0.0 else v)  # NaN stays NaN: the design turns uniform
        else:
            w = values[j]
        out[j] = w if e else 0.0
        n += 1 if e else 0
    if n == 0:
        return 0
    total = _sum_lanes(out, J)
    if not (math.isfinite(total) and total > 0.0):
        share = 1.0 / n
        for j in range(J):
            out[j] = share if eligible[j] else 0.0
        return n
    alpha = (1.0 - eps) / total
    beta = eps / n
    for j in range(J):
        out[j] = alpha * out[j] + beta if eligible[j] else 0.0
    return n


@njit(**_DESIGN_OPTS)
def draw_index(pi, u, total_hint):
    """The index numpy's ``Generator.choice(pi.size, p=pi)`` takes for the uniform ``u`` in [0, 1):
    the first j whose normalised cumulative probability cumsum(pi)_j / sum(pi) exceeds u (the
    cumulative sums in index order, as ``numpy.cumsum``, normalised by the last;
    ``searchsorted(..., side="right")``). ``pi`` >= 0 with a positive, finite sum; the index returned
    has pi > 0. ``total_hint``: sum(pi) within 1e-10 relative when the caller knows it (1 for the
    design's probabilities), else NaN (then summed here, ``_sum_lanes``).

    One pass keeps the cumulative sum in index order, its total and where it first exceeds
    u hint (1 - 1e-9) (no earlier index can have cumsum / total > u); the divisions are made from
    there, with the same partial sums (from the start when the hint was not within 1e-10)."""
    J = pi.size
    approx = total_hint if math.isfinite(total_hint) else _sum_lanes(pi, J)
    lo = u * approx * (1.0 - 1e-9)
    run = 0.0
    start = -1
    before = 0.0
    for j in range(J):
        prev = run
        run += pi[j]
        if start < 0 and run > lo:
            start = j
            before = prev
    total = run
    if start < 0 or not abs(total - approx) <= 1e-10 * total:
        start = 0
        before = 0.0
    run = before
    for j in range(start, J):
        run += pi[j]
        if run / total > u:
            return j
    return J - 1  # not reached for u < 1: the last normalised sum is exactly 1


@njit(**_DESIGN_OPTS)
def design_draw(values, from_expected, eligible, eps, u, out):
    """(item, probability): one draw of the design with the probabilities of
    :func:`design_probabilities` (into ``out``) and the uniform ``u`` (:func:`draw_index`; the
    probabilities sum to 1 within rounding); (-1, 0) when nothing is eligible."""
    if design_probabilities(values, from_expected, eligible, eps, out) == 0:
        return -1, 0.0
    j = draw_index(out, u, 1.0)
    return j, out[j]
