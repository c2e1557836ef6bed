"""A bank's score factors: a small multidimensional logistic model of the answers, used to choose
items for, and predict, the full-benchmark accuracy (docs/score_prediction.md §2).

Real LLMs do not answer as one trait predicts: an LLM better than its theta at one kind of item is
better on all of them. A bank may therefore carry, next to its response model, a d-dimensional
(d = 1..3) logistic factor model fitted on the same calibration matrix,

    P(y_j = 1 | eta) = logistic(g_j . eta + h_j),     eta ~ Normal(0, I_d),

with loadings g_j (J x d) and intercepts h_j (J,). Given a session's answers the factor posterior
is summarised by its mode and the inverse Hessian of the log posterior there (a Laplace
approximation). numpy and numba on arrays; no session, no I/O.
"""

from __future__ import annotations

import functools

from dataclasses import dataclass

import numpy as np
from catengine.numba_cache import njit
from scipy.special import expit, log_expit

from catengine.models.expected_information import gauss_hermite_normal
from catengine.models.kernels import cholesky_in_place, cholesky_solve_in_place

MAX_SCORE_FACTORS = 3
POSTERIOR_TOL = 1e-10
POSTERIOR_MAX_ITER = 100


@dataclass(frozen=True, eq=False)
class ScoreFactors:
    """Loadings (J, d) and intercepts (J,) of a bank's score-factor model (read-only arrays)."""

    loadings: np.ndarray
    intercepts: np.ndarray

    def __post_init__(self):
        g = np.array(self.loadings, dtype=np.float64, copy=True)
        h = np.array(self.intercepts, dtype=np.float64, copy=True)
        if g.ndim != 2 or not 1 <= g.shape[1] <= MAX_SCORE_FACTORS:
            raise ValueError(f"score-factor loadings must have shape (items, d) with 1 <= d <= {MAX_SCORE_FACTORS}, "
                             f"got {g.shape}")
        if h.shape != (g.shape[0],):
            raise ValueError(f"score-factor intercepts must have shape ({g.shape[0]},), got {h.shape}")
        for name, arr in (("loadings", g), ("intercepts", h)):
            if not np.all(np.isfinite(arr)):
                bad = int(np.flatnonzero(~np.isfinite(arr).reshape(arr.shape[0], -1).all(axis=1))[0])
                raise ValueError(f"score-factor {name} are NaN or infinite, first at item index {bad}")
        g.flags.writeable = False
        h.flags.writeable = False
        object.__setattr__(self, "loadings", g)
        object.__setattr__(self, "intercepts", h)
        g_t = np.ascontiguousarray(g.T)  # (d, J): the layout of the compiled sums over items
        g_t.flags.writeable = False
        object.__setattr__(self, "loadings_t", g_t)
        # items by decreasing |g_j|^2: w_j g_j' S g_j <= lambda_max(S) |g_j|^2 / 4 bounds every gain,
        # so the top-k scan stops once no later item can enter (docs/score_prediction.md §2)
        norm2 = np.einsum("jd,jd->j", g, g)
        order = np.argsort(-norm2, kind="stable").astype(np.int64)
        for arr in (norm2, order):
            arr.flags.writeable = False
        object.__setattr__(self, "_norm2", norm2)
        object.__setattr__(self, "_order", order)

    @property
    def n_items(self) -> int:
        return int(self.loadings.shape[0])

    @property
    def gain_scan(self) -> tuple[np.ndarray, np.ndarray]:
        """(items by decreasing |g_j|^2, |g_j|^2): the visiting order and the bound of the
        D-optimal top-k scan (``score_factor_topk_gain``), read-only."""
        return self._order, self._norm2

    @property
    def dims(self) -> int:
        return int(self.loadings.shape[1])

    def probabilities(self, eta, items=None) -> np.ndarray:
        """P(correct) at factor values ``eta`` (K, d) for the selected items: shape (K, n)."""
        idx = slice(None) if items is None else np.asarray(items)
        eta = np.atleast_2d(np.asarray(eta, dtype=np.float64))
        return expit(eta @ self.loadings[idx].T + self.intercepts[idx][None, :])

    def posterior(self, observed, correct, start=None) -> tuple[np.ndarray, np.ndarray]:
        """(mode, covariance) of the factor posterior given the answers (see :func:`factor_posterior`)."""
        return factor_posterior(self.loadings, self.intercepts, observed, correct, start)

    def best_d_optimal(self, mode, cov, eligible, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The (up to) ``k`` eligible items with the largest :meth:`d_optimal_gain`, best first (ties:
        lower index first), and their gains; one compiled pass over the bank (``_topk_gain``)."""
        eligible = np.ascontiguousarray(eligible, dtype=np.bool_)
        cov = np.ascontiguousarray(cov, dtype=np.float64)
        idx = np.empty(k, dtype=np.int64)
        val = np.empty(k)
        lam_max = float(np.linalg.eigvalsh(cov)[-1])
        n = _topk_gain(self.loadings, self.intercepts, np.ascontiguousarray(mode, dtype=np.float64), cov, eligible,
                       self._order, self._norm2, 0.25 * lam_max * (1.0 + 1e-12), k, idx, val)
        return idx[:n], val[:n]

    def d_optimal_gain(self, mode, cov, items) -> np.ndarray:
        """log(1 + w_j g_j' S g_j) per item: the increase of log det of the posterior precision
        that answering item j brings (w_j = P_j (1 - P_j) at the mode, S the posterior covariance)."""
        items = np.asarray(items, dtype=np.int64)
        g = self.loadings[items]
        p = expit(g @ np.asarray(mode, dtype=np.float64) + self.intercepts[items])
        return np.log1p(p * (1.0 - p) * np.einsum("nd,de,ne->n", g, np.asarray(cov, dtype=np.float64), g))


def log_posterior(loadings, intercepts, observed, correct, eta) -> np.ndarray:
    """Unnormalised log posterior of the factors at ``eta`` (K, d): Bernoulli log likelihood of the
    answers plus the Normal(0, I) log prior. Shape (K,). Vectorised over many points (grids, plots);
    the compiled Newton (``_newton_mode``) evaluates it at one point and is tested against it."""
    observed = np.asarray(observed, dtype=np.int64)
    y = np.asarray(correct, dtype=np.float64)
    eta = np.atleast_2d(np.asarray(eta, dtype=np.float64))
    z = eta @ loadings[observed].T + intercepts[observed][None, :]
    return (y * log_expit(z) + (1.0 - y) * log_expit(-z)).sum(axis=1) - 0.5 * np.sum(eta * eta, axis=1)


def factor_posterior(loadings, intercepts, observed, correct, start=None, *, tol: float = POSTERIOR_TOL,
                     max_iter: int = POSTERIOR_MAX_ITER) -> tuple[np.ndarray, np.ndarray]:
    """Mode and Laplace covariance of the factor posterior (Normal(0, I) prior, logistic answers).

    The log posterior is strictly concave, so Newton's method with step halving (the objective
    must not decrease) converges to the unique mode from any start. Returns (mode (d,), cov (d, d)),
    cov the inverse of the negative Hessian at the mode; with no answers, (0, I). Compiled
    (``_newton_mode``): a session asks for it at every step."""
    g_all = np.asarray(loadings, dtype=np.float64)
    d = g_all.shape[1]
    observed = np.asarray(observed, dtype=np.int64).reshape(-1)
    y = np.asarray(correct, dtype=np.float64).reshape(-1)
    if observed.shape != y.shape:
        raise ValueError(f"{observed.size} observed items but {y.size} answers")
    if observed.size == 0:
        return np.zeros(d), np.eye(d)
    if not np.all((y == 0) | (y == 1)):
        raise ValueError("answers must be 0 or 1")
    g = np.ascontiguousarray(g_all[observed])
    h = np.ascontiguousarray(np.asarray(intercepts, dtype=np.float64)[observed])
    eta = np.zeros(d) if start is None else np.array(start, dtype=np.float64).reshape(d)
    mode = np.empty(d)
    cov = np.empty((d, d))
    _newton_mode(g, h, y, eta, float(tol), int(max_iter), mode, cov)
    return mode, cov


@njit(cache=True)
def _log_posterior_at(g, h, y, eta):
    n, d = g.shape
    total = 0.0
    for i in range(n):
        z = h[i]
        for k in range(d):
            z += g[i, k] * eta[k]
        # y log s(z) + (1 - y) log s(-z), stably
        if z >= 0.0:
            total += -np.log1p(np.exp(-z)) - (1.0 - y[i]) * z
        else:
            total += y[i] * z - np.log1p(np.exp(z))
    for k in range(d):
        total -= 0.5 * eta[k] * eta[k]
    return total


@njit(cache=True)
def _gradient_hessian(g, h, y, eta, grad, hess):
    n, d = g.shape
    for k in range(d):
        grad[k] = -eta[k]
        for m in range(d):
            hess[k, m] = 1.0 if k == m else 0.0
    for i in range(n):
        z = h[i]
        for k in range(d):
            z += g[i, k] * eta[k]
        p = 1.0 / (1.0 + np.exp(-z))
        w = p * (1.0 - p)
        r = y[i] - p
        for k in range(d):
            grad[k] += g[i, k] * r
            for m in range(d):
                hess[k, m] += w * g[i, k] * g[i, m]


@njit(cache=True)
def _newton_mode(g, h, y, start, tol, max_iter, mode, cov):
    d = g.shape[1]
    eta = start.copy()
    trial = np.empty(d)
    grad = np.empty(d)
    step = np.empty(d)
    hess = np.empty((d, d))
    chol = np.empty((d, d))
    f = _log_posterior_at(g, h, y, eta)
    for _ in range(max_iter):
        _gradient_hessian(g, h, y, eta, grad, hess)
        chol[:, :] = hess
        cholesky_in_place(chol)  # the negative Hessian is positive definite (the prior adds I)
        step[:] = grad
        cholesky_solve_in_place(chol, step)
        scale = 1.0
        for a in range(d):
            trial[a] = eta[a] + step[a]
        f_new = _log_posterior_at(g, h, y, trial)
        while f_new < f - 1e-12 * max(1.0, abs(f)) and scale >= 1e-8:
            scale *= 0.5
            for a in range(d):
                trial[a] = eta[a] + scale * step[a]
            f_new = _log_posterior_at(g, h, y, trial)
        largest = 0.0
        for a in range(d):
            largest = max(largest, abs(trial[a] - eta[a]))
            eta[a] = trial[a]
        f = f_new
        if largest < tol:
            break
    _gradient_hessian(g, h, y, eta, grad, hess)
    chol[:, :] = hess
    cholesky_in_place(chol)
    column = np.empty(d)
    for a in range(d):
        column[:] = 0.0
        column[a] = 1.0
        cholesky_solve_in_place(chol, column)
        for b in range(d):
            cov[b, a] = column[b]
    for a in range(d):
        mode[a] = eta[a]


@njit(cache=True)
def _topk_gain(g, h, mode, cov, eligible, order, norm2, bound_scale, k, out_idx, out_val):
    """Top-k of log(1 + w_j g_j' S g_j) over the eligible items, best first, ties to the lower index.

    Items are visited by decreasing |g_j|^2 (``order``); the scan stops once the bound
    ``bound_scale`` |g_j|^2 >= w_j g_j' S g_j of the next item is below the k-th best value.
    Ranked by w_j g_j' S g_j (the log is taken for the kept ones); returns how many were found."""
    d = g.shape[1]
    count = 0
    for t in range(order.size):
        j = order[t]
        if count == k and bound_scale * norm2[j] < out_val[k - 1]:
            break
        if not eligible[j]:
            continue
        z = h[j]
        for a in range(d):
            z += g[j, a] * mode[a]
        p = 1.0 / (1.0 + np.exp(-z))
        q = 0.0
        for a in range(d):
            row = 0.0
            for b in range(d):
                row += cov[a, b] * g[j, b]
            q += g[j, a] * row
        val = p * (1.0 - p) * q
        if count < k:
            pos = count
            count += 1
        elif val > out_val[k - 1] or (val == out_val[k - 1] and j < out_idx[k - 1]):
            pos = k - 1
        else:
            continue
        while pos > 0 and (out_val[pos - 1] < val or (out_val[pos - 1] == val and out_idx[pos - 1] > j)):
            out_val[pos] = out_val[pos - 1]
            out_idx[pos] = out_idx[pos - 1]
            pos -= 1
        out_val[pos] = val
        out_idx[pos] = j
    for i in range(count):
        out_val[i] = np.log1p(out_val[i])
    return count


#: public names of the two compiled steps above, for kernels in other packages (the compiled
#: session replay, ``catengine.session._replay_kernel``): ``score_factor_mode(g, h, y, start, tol,
#: max_iter, mode, cov)`` and ``score_factor_topk_gain(g, h, mode, cov, eligible, order, norm2,
#: bound_scale, k, idx, val)``
score_factor_mode = _newton_mode
score_factor_topk_gain = _topk_gain


@functools.lru_cache(maxsize=16)
def standard_product_grid(n_nodes: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    """The product Gauss-Hermite rule for Normal(0, I_d): nodes (n_nodes^d, d) and weights (read-only)."""
    x, w = gauss_hermite_normal(n_nodes)
    grid = np.stack(np.meshgrid(*([x] * d), indexing="ij"), axis=-1).reshape(-1, d)
    weights = np.prod(np.stack(np.meshgrid(*([w] * d), indexing="ij"), axis=-1).reshape(-1, d), axis=1)
    grid.flags.writeable = False
    weights.flags.writeable = False
    return grid, weights


def product_nodes(mode, cov, n_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Hermite product nodes (n_nodes^d, d) and weights for E f(eta), eta ~ Normal(mode, cov)."""
    mode = np.asarray(mode, dtype=np.float64).reshape(-1)
    d = mode.size
    grid, weights = standard_product_grid(int(n_nodes), d)
    chol = np.linalg.cholesky(np.asarray(cov, dtype=np.float64) + 1e-300 * np.eye(d))
    return mode[None, :] + grid @ chol.T, weights
