"""Numba kernels of PSN-IRT training and its Laplace posterior (compute only; no validation).

Callers (``network.py``, ``laplace.py``) validate and convert; every kernel has a slow loop twin in
``tests/naive_psn.py``.

Cell model (native PSN-IRT form, docs/math.md §3): for an observed cell (subject i, item j)
with ability theta and raw item outputs (beta, a, p2, p3)

    z = a (theta - beta),  s = sigmoid(z),  c = sigmoid(p2),
    d = sigmoid(p3)                              (reference head), or
    d = c + (1 - c) sigmoid(p3)                  (``ordered``: guarantees d > c),
    P = c + (d - c) s,   Q = 1 - P = (1 - d) + (d - c) (1 - s)   (no cancellation),
    loss = -y log P - (1 - y) log Q.

``log`` is floored at -100 exactly like ``torch.nn.BCELoss`` (the gradient is 0 where the floor is
active).

Adam (``adam_dense``, ``adam_rows``, ``adam_flush_rows``) is ``torch.optim.Adam`` with coupled
weight decay: g <- g + wd * w, m <- b1 m + (1 - b1) g, v <- b2 v + (1 - b2) g^2,
w <- w - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps). The embedding tables are updated
lazily but exactly: a row that is absent from a mini-batch has gradient wd * w (weight decay only),
so its update at step t depends only on its own (w, m, v) and t. ``adam_rows`` replays the pending
weight-decay-only steps of a row the next time the row appears (in registers, vectorised over the
row), then applies the real update; ``adam_flush_rows`` replays every row up to the current step
(at the end of an epoch). The result equals the dense update of every row at every step, without
streaming the whole table (29,309 x 64 for the seed-002 data) through memory 687 times per epoch.
"""

from __future__ import annotations

import math

import numpy as np
from catengine.numba_cache import njit

_LOG_FLOOR = -100.0  # torch.nn.BCELoss clamps log(P) and log(1 - P) at -100
_EXP_FLOOR = math.exp(_LOG_FLOOR)


@njit(cache=True, nogil=True, inline="always")
def _sig(x):
    if x >= 0.0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


@njit(cache=True, nogil=True, inline="always")
def _asymptotes(p2, p3, ordered):
    """(c, 1 - c, d, 1 - d, dd/dp2, dd/dp3, dc/dp2) with d - c computed by the caller."""
    c = _sig(p2)
    cm = _sig(-p2)
    r = _sig(p3)
    rm = _sig(-p3)
    if ordered:
        d = c + cm * r
        dm = cm * rm
        dd_dp2 = rm * c * cm
        dd_dp3 = cm * r * rm
    else:
        d = r
        dm = rm
        dd_dp2 = 0.0
        dd_dp3 = r * rm
    return c, cm, d, dm, dd_dp2, dd_dp3, c * cm


# ------------------------------------------------------------------------------- loss and gradient


@njit(cache=True, nogil=True)
def cell_loss_grad(theta, out, y, ordered, weight, g_theta, g_out):
    """Weighted BCE summed over cells; fills g_theta (B,) and g_out (B, 4) with its gradient.

    theta (B,), out (B, 4) = raw item outputs (beta, a, p2, p3), y (B,) 0/1; returns
    sum_n weight * loss_n (gradients are of that same weighted sum).
    """
    total = 0.0
    for n in range(theta.shape[0]):
        beta = out[n, 0]
        a = out[n, 1]
        c, cm, d, dm, dd_dp2, dd_dp3, dc_dp2 = _asymptotes(out[n, 2], out[n, 3], ordered)
        dz = theta[n] - beta
        z = a * dz
        s = _sig(z)
        sc = _sig(-z)
        dc_ = d - c
        p = c + dc_ * s
        q = dm + dc_ * sc
        if y[n] > 0.5:
            if p > _EXP_FLOOR:
                total += -weight * math.log(p)
                gp = -weight / p
            else:
                total += -weight * _LOG_FLOOR
                gp = 0.0
        else:
            if q > _EXP_FLOOR:
                total += -weight * math.log(q)
                gp = weight / q
            else:
                total += -weight * _LOG_FLOOR
                gp = 0.0
        gz = gp * dc_ * s * sc
        g_theta[n] = gz * a
        g_out[n, 0] = -gz * a
        g_out[n, 1] = gz * dz
        # dP/dc = 1 - s, dP/dd = s
        g_out[n, 2] = gp * (sc * dc_dp2 + s * dd_dp2)
        g_out[n, 3] = gp * s * dd_dp3
    return total


@njit(cache=True, nogil=True, error_model="numpy", fastmath=True)
def _fold_rows(T, idx, b1, M, c, hid, out):
    """hid[n] = relu(T[idx[n]] + b1); out[n] = c + hid[n] @ M (M: (H, K))."""
    H = T.shape[1]
    Kc = M.shape[1]
    for n in range(idx.shape[0]):
        r = idx[n]
        for h in range(H):
            x = T[r, h] + b1[h]
            hid[n, h] = x if x > 0.0 else 0.0
        for k in range(Kc):
            acc = c[k]
            for h in range(H):
                acc += hid[n, h] * M[h, k]
            out[n, k] = acc


@njit(cache=True, nogil=True, error_model="numpy")
def prior_loss_grad(theta, out, subj, item, prior, weight, g_theta, g_out):
    """Add the prior's per-cell share to g_theta (B,) and g_out (B, 4); returns its weighted sum.

    ``prior`` = (slope_pen (J,), subject_pen (N,)): cell n of subject i and item j carries
    weight * (slope_pen[j] a^2 + subject_pen[i] theta^2) / 2. The calibrator divides each item's
    (subject's) prior precision by its number of observed cells, so a pass over every cell adds
    each prior term once (``PSNCalibrator``, docs/math.md §3.4).
    """
    slope_pen, subject_pen = prior
    total = 0.0
    for n in range(out.shape[0]):
        pa = slope_pen[item[n]]
        ps = subject_pen[subj[n]]
        a = out[n, 1]
        t = theta[n]
        total += 0.5 * weight * (pa * a * a + ps * t * t)
        g_out[n, 1] += weight * pa * a
        g_theta[n] += weight * ps * t
    return total


@njit(cache=True, nogil=True, error_model="numpy")
def batch_forward_backward(S, I, subj, item, y, s_b1, m_s, c_s, i_b1, M_i, c_i, ordered, prior, g_hs, g_hi, a_s, A,
                           sums):
    """Fused mini-batch pass of the folded network (see ``PSNNetwork.forward_backward``).

    theta_n = relu(S[subj_n] + s_b1) . m_s + c_s, out_n = relu(I[item_n] + i_b1) @ M_i + c_i,
    with m_s (H, 1), c_s (1,), M_i (H, 4), c_i (4,). Fills g_hs, g_hi (B, H): gradients wrt the
    hidden pre-activations (masked by the ReLU); a_s (H,) = sum_n g_theta_n h_s,n; A (H, 4) =
    sum_n h_i,n g_out_n'; sums (5,) = (sum g_theta, sum g_out[:, 0..3]). ``prior``: see
    ``prior_loss_grad`` (zeros for none). Returns the mean BCE plus the prior's share.
    """
    B = subj.shape[0]
    H = S.shape[1]
    hs = np.empty((B, H))
    hi = np.empty((B, H))
    th = np.empty((B, 1))
    out = np.empty((B, 4))
    _fold_rows(S, subj, s_b1, m_s, c_s, hs, th)
    _fold_rows(I, item, i_b1, M_i, c_i, hi, out)
    gt = np.empty(B)
    go = np.empty((B, 4))
    total = cell_loss_grad(th[:, 0], out, y, ordered, 1.0 / B, gt, go)
    total += prior_loss_grad(th[:, 0], out, subj, item, prior, 1.0 / B, gt, go)
    a_s[:] = 0.0
    A[:, :] = 0.0
    sums[:] = 0.0
    for n in range(B):
        g = gt[n]
        g0, g1, g2, g3 = go[n, 0], go[n, 1], go[n, 2], go[n, 3]
        sums[0] += g
        sums[1] += g0
        sums[2] += g1
        sums[3] += g2
        sums[4] += g3
        for h in range(H):
            x = hs[n, h]
            a_s[h] += g * x
            g_hs[n, h] = g * m_s[h, 0] if x > 0.0 else 0.0
            z = hi[n, h]
            gh = g0 * M_i[h, 0] + g1 * M_i[h, 1] + g2 * M_i[h, 2] + g3 * M_i[h, 3]
            g_hi[n, h] = gh if z > 0.0 else 0.0
            A[h, 0] += z * g0
            A[h, 1] += z * g1
            A[h, 2] += z * g2
            A[h, 3] += z * g3
    return total


@njit(cache=True, nogil=True)
def cell_probabilities(theta, beta, a, c, d, subj, item):
    """P = c + (d - c) sigmoid(a (theta - beta)) of every listed cell (subject, item)."""
    n = subj.shape[0]
    out = np.empty(n)
    for k in range(n):
        j = item[k]
        out[k] = c[j] + (d[j] - c[j]) * _sig(a[j] * (theta[subj[k]] - beta[j]))
    return out


# ------------------------------------------------------------------------------------------ Adam


@njit(cache=True, nogil=True, inline="always")
def _typed_consts(w, consts):
    """(b1, 1 - b1, b2, 1 - b2, eps, wd) cast to w's dtype, in a scratch array (8,) whose last two
    slots take the per-step factors lr / (1 - b1^t) and 1 / sqrt(1 - b2^t)."""
    tc = np.empty(8, dtype=w.dtype)
    tc[0] = consts[1]
    tc[1] = 1.0 - consts[1]
    tc[2] = consts[2]
    tc[3] = 1.0 - consts[2]
    tc[4] = consts[3]
    tc[5] = consts[4]
    return tc


@njit(cache=True, nogil=True, inline="always")
def _step_factors(tc, consts, t):
    tc[6] = consts[0] / (1.0 - consts[1] ** t)
    tc[7] = 1.0 / math.sqrt(1.0 - consts[2] ** t)


@njit(cache=True, nogil=True, error_model="numpy")
def adam_dense(w, g, m, v, t, consts):
    """One torch.optim.Adam step (coupled weight decay) on flat arrays, in place.

    ``consts`` = float64 (lr, b1, b2, eps, wd); the arithmetic runs in the parameters' dtype (a
    float32 network is updated in float32, as torch does).
    """
    tc = _typed_consts(w, consts)
    _step_factors(tc, consts, t)
    b1, c1, b2, c2, eps, wd, step, isbc2 = tc[0], tc[1], tc[2], tc[3], tc[4], tc[5], tc[6], tc[7]
    for k in range(w.shape[0]):
        gk = g[k] + wd * w[k]
        mk = b1 * m[k] + c1 * gk
        vk = b2 * v[k] + c2 * gk * gk
        m[k] = mk
        v[k] = vk
        w[k] -= step * mk / (np.sqrt(vk) * isbc2 + eps)


def step_factors(n_steps: int, consts, dtype) -> np.ndarray:
    """(n_steps + 1, 2) table of lr / (1 - b1^t) and 1 / sqrt(1 - b2^t) for t = 0..n_steps (row 0
    unused), in ``dtype``: the replay reads them instead of calling pow twice per row and step."""
    t = np.arange(n_steps + 1, dtype=np.float64)
    t[0] = 1.0
    out = np.empty((n_steps + 1, 2), dtype=dtype)
    out[:, 0] = consts[0] / (1.0 - consts[1] ** t)
    out[:, 1] = 1.0 / np.sqrt(1.0 - consts[2] ** t)
    return out


@njit(cache=True, nogil=True, error_model="numpy")
def _replay_row(w, m, v, r, start, stop, tc, fac):
    """Apply the weight-decay-only Adam steps start..stop-1 (1-based step numbers) to row r.

    Vectorised over the row (``error_model="numpy"`` drops the zero-division checks that would
    block SIMD); each step costs one sqrt and one division per element.
    """
    H = w.shape[1]
    b1, c1, b2, c2, eps, wd = tc[0], tc[1], tc[2], tc[3], tc[4], tc[5]
    for s in range(start, stop):
        step = fac[s, 0]
        isbc2 = fac[s, 1]
        for h in range(H):
            gk = wd * w[r, h]
            mk = b1 * m[r, h] + c1 * gk
            vk = b2 * v[r, h] + c2 * gk * gk
            m[r, h] = mk
            v[r, h] = vk
            w[r, h] -= step * mk / (np.sqrt(vk) * isbc2 + eps)


@njit(cache=True, nogil=True, error_model="numpy")
def _gather_rows(idx, grads, slot, acc):
    """Sum gradient rows per distinct table row: returns the distinct rows (in first-seen order)."""
    B = idx.shape[0]
    H = grads.shape[1]
    uniq = np.empty(B, dtype=np.int64)
    k = 0
    for b in range(B):
        r = idx[b]
        if slot[r] < 0:
            slot[r] = k
            uniq[k] = r
            for h in range(H):
                acc[k, h] = grads[b, h]
            k += 1
        else:
            u = slot[r]
            for h in range(H):
                acc[u, h] += grads[b, h]
    for u in range(k):
        slot[uniq[u]] = -1
    return uniq[:k]


@njit(cache=True, nogil=True, error_model="numpy")
def adam_rows(w, m, v, last, idx, grads, t, consts, slot, acc, fac):
    """Adam step t on the rows listed in ``idx`` (repeats summed), replaying skipped steps first.

    w, m, v (R, H); last (R,) int64 = last step applied to each row; idx (B,) row per gradient
    row of grads (B, H); slot (R,) int64 scratch, all -1 on entry and on exit; acc (B, H) scratch
    of w's dtype; consts as in ``adam_dense``; fac = ``step_factors(>= t, consts, w.dtype)``.
    (Serial on purpose: on a shared 2-core machine numba threads made an epoch 4x slower.)
    """
    uniq = _gather_rows(idx, grads, slot, acc)
    H = w.shape[1]
    tc = _typed_consts(w, consts)
    b1, c1, b2, c2, eps, wd = tc[0], tc[1], tc[2], tc[3], tc[4], tc[5]
    step = fac[t, 0]
    isbc2 = fac[t, 1]
    for u in range(uniq.shape[0]):
        r = uniq[u]
        if last[r] + 1 < t:
            _replay_row(w, m, v, r, last[r] + 1, t, tc, fac)
        for h in range(H):
            gk = acc[u, h] + wd * w[r, h]
            mk = b1 * m[r, h] + c1 * gk
            vk = b2 * v[r, h] + c2 * gk * gk
            m[r, h] = mk
            v[r, h] = vk
            w[r, h] -= step * mk / (np.sqrt(vk) * isbc2 + eps)
        last[r] = t


@njit(cache=True, nogil=True, error_model="numpy")
def adam_flush_rows(w, m, v, last, t, consts, fac):
    """Bring every row up to step t (weight-decay-only steps for rows not seen since)."""
    tc = _typed_consts(w, consts)
    for r in range(w.shape[0]):
        if last[r] < t:
            _replay_row(w, m, v, r, last[r] + 1, t + 1, tc, fac)
            last[r] = t


# ------------------------------------------------------------------------------ Laplace curvature

CURVATURE_CODES = {"fisher": 0, "logistic": 1, "exact": 2}


@njit(cache=True, nogil=True)
def cell_curvature(theta, beta, a, c, d, subj, item, y, mode, lam, loglik):
    """Per-cell curvature of the loss wrt the logit eta = a (theta - beta), and the log-likelihood.

    mode 0 ("fisher"): E_y[d2 loss / d eta2] = P_eta^2 / (P Q), P_eta = (d - c) s (1 - s)
    mode 1 ("logistic"): s (1 - s) (the 2PL GGN, ignoring the asymptotes)
    mode 2 ("exact"): d2 loss / d eta2 = P_eta^2 (y / P^2 + (1 - y) / Q^2) - P_etaeta (y - P) / (P Q),
                      P_etaeta = (d - c) s (1 - s) (1 - 2 s)
    Fills lam (n,) and loglik (n,) (log P or log Q, floored at -100).
    """
    for k in range(subj.shape[0]):
        j = item[k]
        z = a[j] * (theta[subj[k]] - beta[j])
        s = _sig(z)
        sc = _sig(-z)
        dc_ = d[j] - c[j]
        p = c[j] + dc_ * s
        q = (1.0 - d[j]) + dc_ * sc
        pe = dc_ * s * sc
        yk = y[k]
        if yk > 0.5:
            loglik[k] = math.log(p) if p > _EXP_FLOOR else _LOG_FLOOR
        else:
            loglik[k] = math.log(q) if q > _EXP_FLOOR else _LOG_FLOOR
        if mode == 0:
            lam[k] = pe * pe / (p * q) if p * q > 0.0 else 0.0
        elif mode == 1:
            lam[k] = s * sc
        else:
            if p * q > 0.0:
                pee = pe * (sc - s)
                lam[k] = pe * pe * (yk / (p * p) + (1.0 - yk) / (q * q)) - pee * (yk - p) / (p * q)
            else:
                lam[k] = 0.0
