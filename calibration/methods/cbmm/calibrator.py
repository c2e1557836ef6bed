"""cBMM: 2PL calibration by constrained block majorization-minimization (docs/math.md §2, Qu et al. 2026).

Model and objective (temperature ``sigma``, observed cells only, ``a >= 0``)::

    X = theta a' + 1 b'        P(correct_ij) = sigmoid(x_ij / sigma)
    loss = sum_observed log(1 + exp(-y_ij x_ij / sigma)),   y = 2 * correct - 1

One MM iteration ("sweep") majorizes the loss at the current X~ by (L/2)||X - Y~||^2 with
L = 1/(4 sigma^2) and working response Y~ = X~ + 4 sigma y * sigmoid(-y X~ / sigma), then makes one
exact block sweep a (non-negative least squares) -> b -> theta of that surrogate. Every sweep
lowers the loss. Sweeps are accelerated by SQUAREM (Varadhan & Roland 2008, scheme S3) with a
monotonicity safeguard: an extrapolated point is kept only if its loss is not above the last
accepted loss, otherwise the plain MM point is used, so ``loss_trace_`` never increases (see
``CBMMCalibrator._iterate``). The stopping rule is the paper's: relative loss change below
``tol`` between consecutive recorded points (with SQUAREM, one per two-sweep cycle).

The numerical work happens in ``_kernels.py``: rank-1 sweeps over >= 128 active items are one
streaming pass over an int8 transposed copy of the matrix made once (``sweep_r1``: one sigmoid per
cell, the working response kept for one column at a time); otherwise two passes per sweep, over
that copy (columns) and the int8 matrix (rows), the working response recomputed on the fly and
never stored. All cores are used on fits above 2.1 M cells (smaller fits run on one thread, see
``_PARALLEL_MIN_CELLS``). Memory: 1 byte per cell (the transposed copy) plus vectors (the fused
sweep's per-chunk row sums: under 1/2 byte per cell); the responses hash at the end copies the
matrix once more (after the copy is freed).

Items whose observed answers are all identical (answered correctly -- or wrongly -- by every
subject who saw them) have no finite 2PL estimate (b -> +-inf), and subjects whose answers are all
identical have theta -> +-inf. Both are detected up front (repeatedly, since dropping one can make
another constant), excluded from the fit (their loss infimum is 0, so the fitted objective is
unchanged) and flagged (``perfect_items_``, ``extreme_subjects_``). They get finite reported
values: a perfect item gets a = 0 and b = logit((k + 1/2) / (n + 1)) from its k correct of n
observed answers; an extreme subject gets the theta at which its expected score on the fitted
items with a > 0 it answered is half an answer short of perfect (or half an answer above zero).

Reported scale: the optimisation variables (``raw_theta_``, ``raw_a_``, ``raw_b_``; tempered) are
standardised over the fitted subjects, theta' = (theta - m) / s, a' = a s, b' = b + a m, and the
temperature is absorbed, so that ``theta_``, ``a_``, ``b_`` satisfy P = sigmoid(a_ theta_ + b_),
the bank's 2PL form. ``scale_`` records m, s and sigma.
"""

from __future__ import annotations

import json
import math
import numbers
from dataclasses import dataclass

import numpy as np

from calibration.methods.cbmm import _kernels as _k
from calibration.base import BankParts, BaseCalibrator, Setting, choice, integer, non_negative, positive, seed, switch
from calibration.data import ResponseData
from calibration.diagnostics import DEFAULT_MAX_SLOPE, item_diagnostics

__all__ = ["CBMMCalibrator", "CBMMPrior", "joint_nll", "penalised_nll"]

_PRIORS = ("empirical-bayes", "none")
_L = 0.25  # curvature bound of the logistic loss at temperature 1 (the majoriser's L)
# Hyper-parameters are frozen once an update moves them by less than _EB_TOL (means in prior SDs,
# variances in log ratio): a prior mean moved by 0.05 prior SDs moves no item estimate by more than that.
_EB_TOL = 0.05
_EB_SCALE_TOL = 0.05  # the EB update re-standardises theta only when its SD or mean drifted by more
_EB_MAX_UPDATES = 25  # at most this many empirical-Bayes updates (then the prior is frozen)
_EB_INNER_ITER = 500  # EM iterations of one update (O(J) each, no data pass)
_EB_EM_TOL = 1e-7  # the EM of one update stops below this move (means, and variances as ratios)
_EB_MIN_VAR = 1e-4  # floor on the prior variances (keeps a 1PL-like bank from collapsing the prior)


@dataclass
class CBMMPrior:
    """Gaussian prior of the temperature-1 fit variables (docs/math.md §7.1):
    a_j ~ N(a_mean, 1 / a_precision) (then projected on a >= 0), b_j ~ N(b_mean, 1 / b_precision),
    theta_i ~ N(0, 1 / theta_precision). ``a`` and ``b`` here are a / sigma and b / sigma."""

    a_mean: float
    a_precision: float
    b_mean: float
    b_precision: float
    theta_precision: float = 1.0

    def penalty(self, theta, a, b, cols=None, rows=None) -> float:
        """Negative log prior (up to a constant) over the active items ``cols`` and subjects ``rows``."""
        aa = a if cols is None else a[cols]
        bb = b if cols is None else b[cols]
        tt = theta if rows is None else theta[rows]
        return 0.5 * (self.a_precision * float(np.sum((aa - self.a_mean) ** 2))
                      + self.b_precision * float(np.sum((bb - self.b_mean) ** 2))
                      + self.theta_precision * float(np.sum(tt * tt)))

    def as_dict(self) -> dict:
        return {"a_mean": float(self.a_mean), "a_sd": float(self.a_precision) ** -0.5,
                "b_mean": float(self.b_mean), "b_sd": float(self.b_precision) ** -0.5,
                "theta_sd": float(self.theta_precision) ** -0.5}

    @classmethod
    def from_dict(cls, d: dict) -> "CBMMPrior":
        allowed = {"a_mean", "a_sd", "b_mean", "b_sd", "theta_sd"}
        unknown = set(d) - allowed
        missing = {"a_mean", "a_sd", "b_mean", "b_sd"} - set(d)
        if unknown or missing:
            raise ValueError(f"a fixed cBMM prior needs keys a_mean, a_sd, b_mean, b_sd (optional theta_sd); "
                             f"unknown {sorted(unknown)}, missing {sorted(missing)}")
        vals = {k: float(v) for k, v in d.items()}
        for k in ("a_sd", "b_sd", "theta_sd"):
            if k in vals and not (math.isfinite(vals[k]) and vals[k] > 0):
                raise ValueError(f"prior {k} must be finite and > 0, got {d[k]!r}")
        for k in ("a_mean", "b_mean"):
            if not math.isfinite(vals[k]):
                raise ValueError(f"prior {k} must be finite, got {d[k]!r}")
        return cls(vals["a_mean"], vals["a_sd"] ** -2, vals["b_mean"], vals["b_sd"] ** -2, vals.get("theta_sd", 1.0) ** -2)


def item_covariance(h0, h1, h2, a_precision=0.0, b_precision=0.0):
    """Per-item 2 x 2 covariance of (a, b) at theta fixed: the inverse of the observed information
    [[sum pq theta^2 + a_precision, sum pq theta], [sum pq theta, sum pq + b_precision]].
    Returns (var_a, cov_ab, var_b); a singular information (e.g. no prior and p q ~ 0) gets a
    tiny ridge (1e-10) so that the variances are large but finite."""
    i_aa = h2 + a_precision
    i_ab = h1
    i_bb = h0 + b_precision
    det = i_aa * i_bb - i_ab * i_ab
    bad = ~(det > 1e-300)
    if bad.any():
        i_aa = np.where(bad, i_aa + 1e-10, i_aa)
        i_bb = np.where(bad, i_bb + 1e-10, i_bb)
        det = i_aa * i_bb - i_ab * i_ab
    return i_bb / det, -i_ab / det, i_aa / det

_INITS = ("svd", "random")
_ACCELERATIONS = ("squarem", "none")
_INIT_MAX_ABS_X = 10.0  # the reference code rescales its random start so that max |X| <= 10
_SVD_POWER_ITERS = 2
_A_INIT_MAX = 8.0
# Below this many cells a whole fit takes ~30 ms on one core. A second thread saves at most half
# of that on an idle machine, but on a busy one every parallel region waits for a descheduled
# worker (measured with numba's default OpenMP layer on 2 shared cores: 1000 x 1000 fits took
# 100-260 ms on two threads vs 30-55 ms on one), so small fits run single-threaded.
_PARALLEL_MIN_CELLS = 2_100_000


def _sumsq(x: np.ndarray) -> float:
    """sum(x * x) without BLAS: OpenBLAS threads its dot product above ~10^4 entries, and right after a
    numba parallel region (whose OpenMP workers still spin) that call took ~30 ms instead of 0.1 ms on
    2 cores, twice per SQUAREM cycle."""
    x = x.ravel()
    return float(np.einsum("i,i->", x, x))


def _transposed(c: np.ndarray) -> np.ndarray:
    """The (J, N) int8 transposed copy that the column kernels read (1 byte per cell)."""
    ct = np.empty((c.shape[1], c.shape[0]), dtype=np.int8)
    _k.transpose_int8(c, ct)
    return ct


class _Problem:
    """The int8 matrix (and its transpose), the active rows/columns and work buffers of one fit
    (temperature 1)."""

    def __init__(self, correct: np.ndarray, row_on: np.ndarray, col_on: np.ndarray, rank: int, ct=None, counts=None):
        self.c = correct
        self.ct = _transposed(correct) if ct is None else ct
        self.n, self.j = correct.shape
        self.rank = rank
        self.row_on = np.asarray(row_on, bool).astype(np.uint8)
        self.col_on = np.asarray(col_on, bool).astype(np.uint8)
        self.roww = self.row_on.astype(np.float64)
        self.rows = np.flatnonzero(self.row_on).astype(np.int64)
        self.cols = np.flatnonzero(self.col_on).astype(np.int64)
        self.col_mask = self.col_on.astype(bool)
        j = self.j
        self.s0, self.cnt, self.lossj = np.zeros(j), np.zeros(j), np.zeros(j)
        self.prior: CBMMPrior | None = None  # rank 1 only
        self.n_chunks = 0  # column chunks of the fused sweep (0: two passes per sweep)
        if rank == 1:
            self.s1, self.st, self.st2 = np.zeros(j), np.zeros(j), np.zeros(j)
            self.h0, self.h1, self.h2 = np.zeros(j), np.zeros(j), np.zeros(j)
            self.rsum = np.zeros(self.n)
            self.n_chunks = _k.sweep_chunks(self.cols.size)
            self.bounds = (np.arange(self.n_chunks + 1, dtype=np.int64) * self.cols.size) // max(self.n_chunks, 1)
            self._fused_buffers = None  # (u, num, den, dsum), allocated by the first fused sweep
            # dense columns (observed for every active subject) and rows (on every active item) take
            # the kernels' paths without the missing-answer test; ``counts`` are _find_extremes' counts
            # over this active set (row_n, row_k, col_n, col_k), else counted here
            if counts is None:
                counts = [np.zeros(self.n, np.int64), np.zeros(self.n, np.int64), np.zeros(j, np.int64), np.zeros(j, np.int64)]
                _k.count_pass(self.c, self.ct, self.row_on, self.col_on, *counts)
            row_n, _, col_n, _ = counts
            self.full_col = (self.col_on.astype(bool) & (col_n == self.rows.size)).astype(np.uint8)
            self.full_row = (self.row_on.astype(bool) & (row_n == self.cols.size)).astype(np.uint8)
        else:
            self.s1, self.st = np.zeros((j, rank)), np.zeros((j, rank))
            self.gram = np.zeros((j, rank, rank))
            self.rsum = np.zeros((self.n, rank))

    # ------------------------------------------------------------------ passes
    def col_pass(self, theta, a, b, want_loss=True) -> float:
        if self.rank == 1:
            _k.col_pass_r1(self.ct, theta, self.roww, a, b, self.cols, self.full_col, self.s0, self.s1, self.cnt,
                           self.st, self.st2, self.lossj, self.h0, self.h1, self.h2, want_loss)
        else:
            _k.col_pass_rk(self.ct, theta, self.roww, a, b, self.cols, self.s0, self.s1, self.cnt,
                           self.st, self.gram, self.lossj, want_loss)
        return float(self.lossj[self.cols].sum()) if want_loss else math.nan

    def loss(self, theta, a, b) -> float:
        """The objective: data loss plus the prior's penalty when the problem has a prior."""
        loss = self.col_pass(theta, a, b, True)
        return loss + self.penalty(theta, a, b)

    def penalty(self, theta, a, b) -> float:
        return 0.0 if self.prior is None else self.prior.penalty(theta, a, b, self.cols, self.rows)

    def sweep(self, theta, a, b, want_loss=True, on_loss=None):
        """One MM sweep from (theta, a, b): returns (objective at the input or NaN, new theta, new a, new b).

        With a prior each block is the ridge step of docs/math.md §7.1 (the projection on a >= 0 of the
        minimiser of the majoriser plus the quadratic prior), so the penalised loss never increases.
        ``on_loss(objective)`` (optional) is called after the first pass, before the blocks; it may
        change ``self.prior`` (the empirical-Bayes update), which the blocks then use.

        Rank 1 with >= 128 active columns: one fused pass (``_kernels.sweep_r1``: one exp per cell)
        makes the column sums and all three blocks under the current prior; when ``on_loss`` then
        replaces the prior, the blocks are made again under the new one (``_blocks``: a row pass).
        """
        if self.rank == 1 and self.n_chunks:
            pr = self.prior
            theta_new, a_new, b_new = theta.copy(), a.copy(), b.copy()
            if self._fused_buffers is None:
                self._fused_buffers = (np.zeros((self.n_chunks, 2, self.n)), np.zeros((self.n_chunks, self.n)),
                                       np.zeros((self.n_chunks, self.n)), np.zeros((self.n_chunks, 2)))
            has = pr is not None
            _k.sweep_r1(self.ct, theta, self.roww, a, b, self.cols, self.full_col, self.bounds, has,
                        pr.a_precision if has else 0.0, pr.a_mean if has else 0.0,
                        pr.b_precision if has else 0.0, pr.b_mean if has else 0.0,
                        pr.theta_precision / _L if has else 0.0, want_loss,
                        self.s0, self.s1, self.cnt, self.st, self.st2, self.lossj, self.h0, self.h1, self.h2,
                        a_new, b_new, theta_new, *self._fused_buffers)
            loss = float(self.lossj[self.cols].sum()) + self.penalty(theta, a, b) if want_loss else math.nan
            if on_loss is not None:
                on_loss(loss, theta, a, b)
                if self.prior is not pr:
                    return (loss, *self._blocks(theta, a, b))
            return loss, theta_new, a_new, b_new
        loss = self.col_pass(theta, a, b, want_loss)
        if want_loss:
            loss += self.penalty(theta, a, b)
        if on_loss is not None:
            on_loss(loss, theta, a, b)
        return (loss, *self._blocks(theta, a, b))

    def _blocks(self, theta, a, b):
        """The a, b and theta blocks of a sweep from (theta, a, b), the column sums of a pass at that
        point being in the buffers: returns (new theta, new a, new b)."""
        on = self.col_mask
        if self.rank == 1 and self.prior is not None:
            pr = self.prior
            a_new = a.copy()
            a_new[on] = np.maximum(0.0, (_L * (a[on] * self.st2[on] + self.s1[on]) + pr.a_precision * pr.a_mean)
                                   / (_L * self.st2[on] + pr.a_precision))
            b_new = b.copy()
            b_new[on] = ((_L * (self.cnt[on] * b[on] + self.s0[on] + (a[on] - a_new[on]) * self.st[on]) + pr.b_precision * pr.b_mean)
                         / (_L * self.cnt[on] + pr.b_precision))
            an = np.where(on, a_new, 0.0)
            theta_new = theta.copy()
            _k.row_pass_r1(self.c, theta, a, b, an, an * an, an * a, an * (b - b_new),
                           pr.theta_precision / _L, self.rows, self.full_row, theta_new, self.rsum)
        elif self.rank == 1:
            a_new = a.copy()
            ok = on & (self.st2 > 0)
            a_new[ok] = np.maximum(0.0, a[ok] + self.s1[ok] / self.st2[ok])
            b_new = b.copy()
            ok = on & (self.cnt > 0)
            b_new[ok] = b[ok] + (self.s0[ok] + (a[ok] - a_new[ok]) * self.st[ok]) / self.cnt[ok]
            an = np.where(on, a_new, 0.0)
            theta_new = theta.copy()
            _k.row_pass_r1(self.c, theta, a, b, an, an * an, an * a, an * (b - b_new),
                           0.0, self.rows, self.full_row, theta_new, self.rsum)
        else:
            q = np.einsum("juv,jv->ju", self.gram, a) + self.s1
            a_new = a.copy()
            _k.nnls_columns(self.gram, q, a, self.cols, 200, 1e-13, a_new)
            b_new = b.copy()
            ok = on & (self.cnt > 0)
            b_new[ok] = b[ok] + (self.s0[ok] + np.einsum("ju,ju->j", a[ok] - a_new[ok], self.st[ok])) / self.cnt[ok]
            an = np.where(on[:, None], a_new, 0.0)
            theta_new = theta.copy()
            _k.row_pass_rk(self.c, theta, a, b, an, an * (b - b_new)[:, None], self.col_on, self.rows,
                           1e-12, theta_new, self.rsum)
        return theta_new, a_new, b_new

    def loss_grad(self, theta, a, b):
        """Data loss and gradient (temperature 1) over the active cells (no prior); gradients are 0 elsewhere."""
        loss = self.col_pass(theta, a, b, True)
        on = self.col_mask
        ga = np.zeros_like(a)
        gb = np.zeros_like(b)
        gb[on] = -self.s0[on] / 4.0
        if self.rank == 1:
            ga[on] = -self.s1[on] / 4.0
            an = np.where(on, a, 0.0)
            scratch = theta.copy()
            _k.row_pass_r1(self.c, theta, a, b, an, an * an, an * an, np.zeros_like(an), 0.0, self.rows,
                           self.full_row, scratch, self.rsum)
        else:
            ga[on] = -self.s1[on] / 4.0
            an = np.where(on[:, None], a, 0.0)
            scratch = theta.copy()
            _k.row_pass_rk(self.c, theta, a, b, an, np.zeros_like(an), self.col_on, self.rows, 1e-12,
                           scratch, self.rsum)
        gt = np.zeros_like(theta)
        gt[self.rows] = -self.rsum[self.rows] / 4.0
        return loss, gt, ga, gb


def _item_params(a, b):
    from catengine.models.params import ItemParams

    return ItemParams("2pl", a=a, b=b)


def _find_extremes(c: np.ndarray, ct: np.ndarray):
    """Iteratively set aside items and subjects whose remaining observed answers are all identical.

    Returns (row_on, col_on, counts, raw): boolean activity flags after the cascade, the final
    (row_n, row_k, col_n, col_k) counts over the active set, and the raw (col_n, col_k) over all
    subjects.
    """
    n, j = c.shape
    row_on = np.ones(n, dtype=np.uint8)
    col_on = np.ones(j, dtype=np.uint8)
    row_n, row_k = np.zeros(n, np.int64), np.zeros(n, np.int64)
    col_n, col_k = np.zeros(j, np.int64), np.zeros(j, np.int64)
    raw = None
    while True:
        _k.count_pass(c, ct, row_on, col_on, row_n, row_k, col_n, col_k)
        if raw is None:
            raw = (col_n.copy(), col_k.copy())
        col_bad = (col_on == 1) & ((col_k == 0) | (col_k == col_n))
        # rows are judged on this round's active columns; the next round recounts
        row_bad = (row_on == 1) & ((row_k == 0) | (row_k == row_n))
        if not col_bad.any() and not row_bad.any():
            break
        col_on[col_bad] = 0
        row_on[row_bad] = 0
    return row_on.astype(bool), col_on.astype(bool), (row_n, row_k, col_n, col_k), raw


def joint_nll(correct, theta, a, b, sigma: float = 1.0, *, subjects=None, items=None, gradient: bool = False):
    """The cBMM objective sum_observed log(1 + exp(-y (theta a' + b) / sigma)) at raw parameters.

    ``correct`` is a ResponseData or an (N, J) int8 array (-1 missing); theta (N,) or (N, r), a
    (J,) or (J, r), b (J,). ``subjects`` / ``items`` (boolean masks) restrict the sum (default:
    every observed cell). With ``gradient=True`` returns (loss, d_theta, d_a, d_b).
    """
    c = correct.correct if isinstance(correct, ResponseData) else np.ascontiguousarray(correct, dtype=np.int8)
    n, j = c.shape
    theta = np.asarray(theta, dtype=np.float64)
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    rank = 1 if theta.ndim == 1 else theta.shape[1]
    if theta.shape[0] != n or a.shape[0] != j or b.shape != (j,) or (a.ndim != theta.ndim):
        raise ValueError(f"parameter shapes theta {theta.shape}, a {a.shape}, b {b.shape} do not fit responses {c.shape}")
    sigma = float(sigma)
    row_on = np.ones(n, bool) if subjects is None else np.asarray(subjects, bool)
    col_on = np.ones(j, bool) if items is None else np.asarray(items, bool)
    prob = _Problem(c, row_on, col_on, rank)
    th = np.ascontiguousarray(theta)
    at = np.ascontiguousarray(a / sigma)
    bt = np.ascontiguousarray(b / sigma)
    if not gradient:
        return prob.loss(th, at, bt)
    loss, gt, ga, gb = prob.loss_grad(th, at, bt)
    # chain rule from the temperature-1 variables (theta, a / sigma, b / sigma)
    return loss, gt, ga / sigma, gb / sigma


def penalised_nll(correct, theta, a, b, prior: CBMMPrior | None, sigma: float = 1.0, *, subjects=None, items=None,
                  gradient: bool = False):
    """The penalised cBMM objective (docs/math.md §7.1): ``joint_nll`` plus the negative log prior
    a_prec/2 sum (a/sigma - a_mean)^2 + b_prec/2 sum (b/sigma - b_mean)^2 + theta_prec/2 sum theta^2
    over the ``items`` / ``subjects`` masks (rank 1). ``prior`` None gives ``joint_nll``.
    With ``gradient=True`` returns (objective, d_theta, d_a, d_b)."""
    out = joint_nll(correct, theta, a, b, sigma, subjects=subjects, items=items, gradient=gradient)
    if prior is None:
        return out
    theta, a, b = (np.asarray(v, dtype=np.float64) for v in (theta, a, b))
    if theta.ndim != 1:
        raise ValueError("the cBMM prior is defined for rank-1 fits only")
    sigma = float(sigma)
    rows = np.ones(theta.shape[0], bool) if subjects is None else np.asarray(subjects, bool)
    cols = np.ones(a.shape[0], bool) if items is None else np.asarray(items, bool)
    pen = prior.penalty(theta, a / sigma, b / sigma, cols, rows)
    if not gradient:
        return out + pen
    loss, gt, ga, gb = out
    gt = gt + np.where(rows, prior.theta_precision * theta, 0.0)
    ga = ga + np.where(cols, prior.a_precision * (a / sigma - prior.a_mean) / sigma, 0.0)
    gb = gb + np.where(cols, prior.b_precision * (b / sigma - prior.b_mean) / sigma, 0.0)
    return loss + pen, gt, ga, gb


def _check_prior(value, name):
    """``prior``: "empirical-bayes", "none", or a dict of fixed hyper-parameters (validated)."""
    if isinstance(value, dict):
        CBMMPrior.from_dict(value)
        return dict(value)
    if value not in _PRIORS:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, _PRIORS))} or a dict of fixed hyper-parameters, got {value!r}")
    return value


def squarem_step(w0, w1, w2, step_max: float, a_on):
    """The SQUAREM extrapolation (S3 steplength, Varadhan & Roland 2008) of the two MM sweeps
    w1 = F(w0), w2 = F(w1): w' = w0 - 2 alpha r + alpha^2 v with r = w1 - w0, v = w2 - 2 w1 + w0,
    alpha = -|r|/|v| clipped to [-step_max, -1], the slopes of the items ``a_on`` projected to >= 0
    (the others kept at w0's). Returns (alpha, w'); w' is ``w2`` itself when alpha = -1."""
    r = [x1 - x0 for x0, x1 in zip(w0, w1)]
    v = [x2 - 2 * x1 + x0 for x0, x1, x2 in zip(w0, w1, w2)]
    rr = sum(_sumsq(x) for x in r)
    vv = sum(_sumsq(x) for x in v)
    alpha = -math.sqrt(rr / vv) if vv > 0 else -1.0
    alpha = max(-step_max, min(-1.0, alpha))
    if alpha == -1.0:
        return alpha, w2
    wn = tuple(x0 - 2 * alpha * ri + alpha * alpha * vi for x0, ri, vi in zip(w0, r, v))
    wn[1][...] = np.where(a_on, np.maximum(wn[1], 0.0), w0[1])
    return alpha, wn


class _MMLoop:
    """The MM sweeps of one cBMM fit (:meth:`CBMMCalibrator._iterate`): plain MM or SQUAREM cycles
    (:meth:`run`), the recorded loss trace and its stopping rule (:meth:`record`) and the
    empirical-Bayes prior updates at accepted points (:meth:`on_loss`, :meth:`eb_step`).

    After :meth:`run`: ``best`` (the returned point), ``trace``, ``sweeps``, ``rejected``
    (rejected extrapolations), ``eb_updates``, ``eb_frozen``, ``pass_at`` (the theta the buffers of
    ``prob`` describe) and ``restart`` (a pending re-standardised point, or None).
    """

    def __init__(self, prob: _Problem, tol: float, max_iter: int, eb_update, *, accelerate: bool, eb_on: bool,
                 progress: bool):
        from tqdm.auto import tqdm

        self.prob, self.tol, self.max_iter, self.eb_update = prob, tol, max_iter, eb_update
        self.accelerate = accelerate
        self.bar = tqdm(total=max_iter, desc="cBMM", unit="sweep", disable=not progress, delay=0.5, leave=False)
        self.trace: list[float] = []
        self.sweeps, self.rejected, self.status = 0, 0, None
        self.restart = self.pass_at = None
        self.a_on = prob.col_mask if prob.rank == 1 else prob.col_mask[:, None]
        self.eb_on, self.eb_frozen, self.eb_updates = eb_on, False, 0
        self.best = None

    # ------------------------------------------------------------------ bookkeeping
    def record(self, loss: float) -> str:
        """Record the loss of a candidate point: 'worse' (not recorded), 'stop' or 'ok'."""
        trace = self.trace
        if not math.isfinite(loss) or (trace and loss > trace[-1]):
            return "worse"
        trace.append(loss)
        if len(trace) >= 2:
            self.bar.set_postfix(loss=f"{loss:.6g}", refresh=False)
            if (trace[-2] - loss) <= self.tol * max(abs(loss), 1e-300):
                return "stop"
        return "ok"

    def on_loss(self, loss, th, a_, b_) -> None:
        """Record the objective at the sweep's input w; at an accepted w, the empirical-Bayes
        update. A new prior that keeps w in place is used by this very sweep's blocks (no extra
        pass); one that re-standardises w asks the loop to restart from the moved point."""
        prob = self.prob
        status = self.record(loss)
        self.restart = None
        self.pass_at = th  # the buffers (loss, information) now describe this point
        if status != "worse" and self.eb_on and not self.eb_frozen:
            data_loss = loss - prob.penalty(th, a_, b_)
            change, w_std, new_prior = self.eb_update(prob, (th, a_, b_))
            self.eb_updates += 1
            if change < _EB_TOL or self.eb_updates >= _EB_MAX_UPDATES:
                self.eb_frozen = True
            else:
                prob.prior = new_prior
                self.trace.clear()  # a new objective: its trace starts again
                if w_std[0] is th:
                    self.trace.append(data_loss + prob.penalty(th, a_, b_))
                else:
                    self.restart = w_std
                status = "ok"
        self.status = status

    def eb_step(self, w, status):
        """(status, w, restart): when the EB update moved the point, the loop restarts from it."""
        if self.restart is None:
            return status, w, False
        w_std, self.restart = self.restart, None
        return status, w_std, True

    def sweep(self, w, want_loss=True):
        """One MM sweep from w: (status of w's loss or None, the swept point)."""
        self.sweeps += 1
        self.bar.update(1)
        _, t2, a2, b2 = self.prob.sweep(*w, want_loss, self.on_loss if want_loss else None)
        return (self.status if want_loss else None), (t2, a2, b2)

    # ------------------------------------------------------------------ loops
    def run(self, w0) -> bool:
        """Sweep from ``w0`` until the stopping rule or ``max_iter`` sweeps; returns whether the
        stopping rule ended it (the point is ``best``)."""
        self.best = w0
        try:
            status, w1 = self.sweep(w0)
            status, w0, restart = self.eb_step(w0, status)
            if restart:
                self.best = w0
                status, w1 = self.sweep(w0)
            return self._squarem(w0, w1) if self.accelerate else self._plain(w1)
        finally:
            self.bar.close()

    def _plain(self, w1) -> bool:
        """Plain MM: every iterate's loss comes free with its sweep and is recorded."""
        while self.sweeps < self.max_iter:
            status, w2 = self.sweep(w1)
            if status != "worse":
                self.best = w1
                status, w1r, restart = self.eb_step(w1, status)
                if restart:
                    self.best = w1 = w1r
                    continue
            if status != "ok":
                return True
            w1 = w2
        return False

    def _squarem(self, w0, w1) -> bool:
        """SQUAREM cycles: two sweeps, the extrapolation (:func:`squarem_step`) and a sweep from it;
        a worse extrapolation falls back to the MM point w2 and shrinks the step bound."""
        step_max = 1.0
        while self.sweeps < self.max_iter:
            _, w2 = self.sweep(w1, want_loss=False)
            if self.sweeps >= self.max_iter:
                break
            alpha, wn = squarem_step(w0, w1, w2, step_max, self.a_on)
            status, w3 = self.sweep(wn)
            if status == "worse" and wn is not w2:
                self.rejected += 1
                step_max = max(1.0, step_max / 4.0)
                if self.sweeps >= self.max_iter:
                    break
                wn = w2
                status, w3 = self.sweep(wn)
            elif status != "worse" and alpha == -step_max:
                step_max *= 4.0
            if status == "worse":  # the MM point w2 is not below w0: rounding at the floor
                return True
            self.best = wn
            status, wr, restart = self.eb_step(wn, status)
            if restart:
                self.best = wn = wr
                status, w3 = self.sweep(wn)
                step_max = 1.0
            if status == "stop":
                return True
            w0, w1 = wn, w3
        return False


class CBMMCalibrator(BaseCalibrator):
    """2PL calibration by constrained block majorization-minimization (cBMM), SQUAREM-accelerated.

    Parameters
    ----------
    sigma : float, default 1.0
        Temperature: P(correct) = sigmoid((theta a + b) / sigma). Only the raw (unstandardised)
        parameters depend on it; the reported ``a_``, ``b_`` absorb it.
    rank : int, default 1
        Number of ability dimensions r (non-negative a in R^{J x r}). Banks hold r = 1 only.
    init : {"svd", "random"}, default "svd"
        "random" is the paper's start (theta ~ N(0,1), log a ~ N(0,1), b ~ N(0,1), rescaled so
        max |X| <= 10); "svd" starts theta at the leading singular vectors of the item-centred
        response matrix (two streamed power iterations from the subjects' logit scores), b at
        the item logits and a at the regression slope of the answers on theta over p (1 - p).
        It is deterministic and saves a couple of sweeps (7-9 vs 9-11 on the paper's design).
    tol : float, default 1e-6
        Stop when the relative decrease of the loss between consecutive recorded points (one per
        SQUAREM cycle of two sweeps; one per sweep without acceleration) is below ``tol``. The
        paper's 1e-4 stops its plain MM 0.33% above the optimum on MATH500, where near-perfect
        items drift and the loss is flat. Measured relative gaps to the long L-BFGS-B optimum
        there (24432.61): 9.9e-4 at tol 1e-4, 2.8e-4 at 1e-5, 6.7e-5 at 1e-6 (82 sweeps, 20 ms),
        1.4e-6 at 1e-8. The default 1e-6 meets issue 3's 1e-3 with a 15x margin and costs 7-9
        sweeps on the paper's simulated design.
    max_iter : int, default 1000
        Maximum number of MM sweeps (each two passes over the data); reaching it emits a
        ``ConvergenceWarning``.
    acceleration : {"squarem", "none"}, default "squarem"
        "none" runs the plain MM iteration of the paper.
    prior : "empirical-bayes" (default), "none" or a dict
        Gaussian priors on the item parameters and theta (docs/math.md §7.1, ``docs/calibration_priors.md``):
        a_j ~ N(mu_a, s_a^2) (a >= 0 kept by projection), b_j ~ N(mu_b, s_b^2), theta_i ~ N(0, 1),
        on the temperature-1 variables (a / sigma, b / sigma). Each MM block is then a ridge step
        and the penalised loss still never increases. "empirical-bayes" sets (mu_a, s_a, mu_b, s_b)
        from the data by EM-style updates alternating with the sweeps (frozen once they move by less
        than 1e-3, after which the trace is monotone); a dict {"a_mean", "a_sd", "b_mean", "b_sd"
        (, "theta_sd")} fixes them; "none" is the paper's unpenalised joint ML (slopes can run away
        when few subjects separate an item). Rank > 1 fits are unpenalised.
    max_slope : float, default 10
        A fitted item whose bank-scale slope exceeds this is flagged as not identified
        (``diagnostics_.runaway_slope``) and ``converged_`` is then False.
    rng : Generator, int or None
        Randomness of ``init="random"`` (``init="svd"`` is deterministic).
    progress : bool, default True
        Show a tqdm progress bar (appears only on fits longer than half a second).

    Fitted attributes
    -----------------
    theta_ (N,) or (N, r), a_ (J,) or (J, r), b_ (J,)
        Standardised parameters, P = sigmoid(a_ theta_ + b_); ``item_params_`` the same as a
        ``2pl`` ItemParams (None for rank > 1); ``theta_sd_`` NaN (joint ML has no posterior);
        ``elapsed_`` seconds (the contract of ``calibration.base``).
    raw_theta_, raw_a_, raw_b_ : the optimisation variables (X = theta a' + b, tempered).
    scale_ : dict with theta_mean m, theta_sd s and sigma (theta_ = (raw_theta - m) / s ...).
    loss_ : final loss over the fitted cells; loss_trace_ : loss at every accepted point
        (non-increasing); n_iter_ : MM sweeps run; n_rejected_ : rejected SQUAREM extrapolations;
        converged_ : bool: the sweeps stopped by the tolerance, the empirical-Bayes prior settled and
        no fitted item has a runaway slope (see ``diagnostics_``).
    optimizer_converged_ : bool: the sweeps met the tolerance (and the prior settled), whatever the items.
    nll_ : the data part of ``loss_`` (``loss_`` and ``loss_trace_`` are the penalised objective).
    prior_ : the prior used (:class:`CBMMPrior`, temperature-1 variables) or None;
        n_prior_updates_ : empirical-Bayes updates made.
    a_sd_, b_sd_, ab_cov_ (J,) : item-parameter SEs and covariance on the bank scale, from the
        inverse observed information (2 x 2 per item, theta at its estimate, prior precision
        included; docs/math.md §7.2). Perfect items: a_sd = 0 (a pinned at 0), b_sd from the counts.
    diagnostics_ : :class:`calibration.diagnostics.ItemDiagnostics` (perfect, runaway slopes,
        prior-dominated, non-discriminating items).
    perfect_items_ (J,) bool : all observed answers identical -> excluded, a = 0, b from counts.
    extreme_subjects_ (N,) bool : all answers identical -> excluded, theta from a half-answer rule.
    non_discriminating_ (J,) bool : fitted items with a = 0 (all r loadings zero).
    init_params_ : dict of the raw starting point (theta, a, b), e.g. for a fair comparison.
    """

    method_name = "cbmm"
    accepts_arrays = True
    _start = None
    SETTINGS = {
        "sigma": positive("temperature of the logistic link (default 1)", "--sigma"),
        "rank": integer(1),
        "init": choice(_INITS, "starting point (default svd)", "--init"),
        "tol": non_negative("relative loss-change tolerance (default 1e-6)", "--tol"),
        "max_iter": integer(1, "maximum MM sweeps (default 1000)", "--max-iter"),
        "acceleration": choice(_ACCELERATIONS, "SQUAREM acceleration or the paper's plain MM (default squarem)",
                               "--acceleration"),
        "prior": Setting(_check_prior, "Gaussian priors on a, b, theta with data-set strength (default) or the "
                         "paper's plain joint ML (docs/calibration_priors.md)", "--prior", type=str, choices=_PRIORS),
        "max_slope": positive("flag a fitted slope above this (bank scale) as not identified (default 10)", "--max-slope"),
        "rng": seed(),
        "progress": switch(),
    }

    def __init__(
        self,
        *,
        sigma: float = 1.0,
        rank: int = 1,
        init: str = "svd",
        tol: float = 1e-6,
        max_iter: int = 1000,
        acceleration: str = "squarem",
        prior="empirical-bayes",
        max_slope: float = DEFAULT_MAX_SLOPE,
        rng=None,
        progress: bool = True,
    ):
        self._store_settings(locals())

    # ------------------------------------------------------------------ fit
    def _fit(self, data) -> None:
        """Fit to the checked ResponseData (small fits run on one numba thread)."""
        import numba

        sigma, rank, tol, max_iter = float(self.sigma), int(self.rank), float(self.tol), int(self.max_iter)
        c = np.ascontiguousarray(data.correct, dtype=np.int8)
        threads = numba.get_num_threads()
        if c.size < _PARALLEL_MIN_CELLS:
            numba.set_num_threads(1)
        try:
            self._fit_matrix(data, c, sigma, rank, tol, max_iter)
        finally:
            numba.set_num_threads(threads)

    def _fit_matrix(self, data, c, sigma, rank, tol, max_iter):
        n, j = c.shape
        if rank > min(n, j):
            raise ValueError(f"rank={rank} exceeds min(N, J) = {min(n, j)} of the {n} x {j} response matrix")
        ct = _transposed(c)
        row_on, col_on, counts, (col_n_raw, col_k_raw) = _find_extremes(c, ct)
        # items nobody answered were refused by BaseCalibrator.fit (calibration.base._check_informative)
        if row_on.sum() < 2 or col_on.sum() < 1:
            raise ValueError(
                f"nothing to calibrate: after setting aside {int((~col_on).sum())} item(s) and "
                f"{int((~row_on).sum())} subject(s) whose observed answers are all identical, "
                f"{int(row_on.sum())} subject(s) x {int(col_on.sum())} item(s) remain (need >= 2 subjects "
                "with mixed answers on >= 1 item with mixed answers)"
            )
        prob = _Problem(c, row_on, col_on, rank, ct=ct, counts=counts)
        rng = np.random.default_rng(self.rng)  # a Generator is returned as is
        start = self._start
        if start is None:
            theta, a, b = self._initial(prob, sigma, rank, rng, counts)
        else:
            theta, a, b = self._checked_start(start, prob, sigma, rank)
        self.init_params_ = {"theta": theta.copy(), "a": a * sigma, "b": b * sigma}
        prob.prior = self._initial_prior(prob, a, b) if rank == 1 else None
        self.n_prior_updates_ = 0

        theta, a, b, trace, n_sweeps, n_rejected, converged = self._iterate(prob, theta, a, b, tol, max_iter)
        if not converged:
            self._warn_not_converged(max_iter, f"last relative loss change above tol={tol:g}")
        self.prior_ = prob.prior
        if rank == 1 and self._stats_at_best and trace:
            nll = float(trace[-1]) - prob.penalty(theta, a, b)  # the last pass was at the returned point
        else:  # one more pass: loss and item information at the returned point
            nll = prob.col_pass(theta, a, b, True) if rank == 1 else prob.loss(theta, a, b)
        if rank == 1:
            pa = 0.0 if prob.prior is None else prob.prior.a_precision
            pb = 0.0 if prob.prior is None else prob.prior.b_precision
            var_a, cov_ab, var_b = item_covariance(prob.h0, prob.h1, prob.h2, pa, pb)
            a_data_precision = prob.h2.copy()

        # pinned values of items left out of the fit (a = 0, b from the raw counts)
        off = ~col_on
        a[off] = 0.0
        b[off] = np.log((col_k_raw[off] + 0.5) / (col_n_raw[off] - col_k_raw[off] + 0.5))
        # finite abilities of subjects left out of the fit
        ext = np.flatnonzero(~row_on)
        if ext.size:
            self._extreme_abilities(prob, c, theta, a, b, ext)

        raw_theta, raw_a, raw_b = theta, a * sigma, b * sigma
        t_fit = raw_theta[row_on]
        m = t_fit.mean(axis=0)
        s = t_fit.std(axis=0)
        s = np.where(s > 0, s, 1.0)
        self.raw_theta_, self.raw_a_, self.raw_b_ = raw_theta, raw_a, raw_b
        self.theta_ = (raw_theta - m) / s
        self.a_ = raw_a * s / sigma
        shift = raw_a @ m if rank > 1 else raw_a * m
        self.b_ = (raw_b + shift) / sigma
        self.scale_ = {
            "theta_mean": m.tolist() if rank > 1 else float(m),
            "theta_sd": s.tolist() if rank > 1 else float(s),
            "sigma": sigma,
        }
        self.loss_trace_ = np.asarray(trace, dtype=np.float64)
        self.loss_ = float(trace[-1])
        self.nll_ = float(nll)
        self.optimizer_converged_ = bool(converged)
        if rank == 1:
            self._item_uncertainty(var_a, cov_ab, var_b, s, m, col_on, col_n_raw, col_k_raw)
            self.diagnostics_ = item_diagnostics(
                data.item_ids, self.a_, perfect=~col_on, max_slope=float(self.max_slope),
                a_prior_precision=None if prob.prior is None else prob.prior.a_precision,
                a_data_precision=a_data_precision,
            )
            if converged and not self.diagnostics_.fit_identified:
                self._warn_convergence(f"{type(self).__name__}: {self.diagnostics_.message()}; converged_ is False", stacklevel=3)
                converged = False
        else:
            self.a_sd_ = self.b_sd_ = self.ab_cov_ = None
            self.diagnostics_ = None
        self.n_iter_ = int(n_sweeps)
        self.n_rejected_ = int(n_rejected)
        self.converged_ = bool(converged)
        self.perfect_items_ = ~col_on
        self.extreme_subjects_ = ~row_on
        a_fit = raw_a if rank == 1 else raw_a.max(axis=1)
        self.non_discriminating_ = col_on & (a_fit <= 0.0)
        self.p_correct_ = col_k_raw / col_n_raw
        self.n_observed_ = col_n_raw
        self.n_cells_ = int(counts[2][col_on].sum())
        self.theta_sd_ = np.full(n, np.nan)  # joint ML: no posterior SDs
        self.item_params_ = _item_params(self.a_, self.b_) if rank == 1 else None
        # the transposed copy is freed on return, before fit hashes the responses (one more copy)

    # ------------------------------------------------------------------ refits
    def refit_start(self, rows) -> dict | None:
        """The starting values of a refit on the fitted subjects at positions ``rows``: this fit's
        raw (temperature-scale) item parameters and those subjects' raw abilities. Pass it to
        :meth:`fit_from` (the held-out check's fold refits do). None with the empirical-Bayes
        prior: its updates stop once they move the hyper-parameters by less than ``_EB_TOL``, which
        leaves them where the start put them (on a simulated 240 x 50 2PL, a refit on 3/4 of the
        subjects started at the full fit ended with a prior SD of a 15% nearer the full fit's than a
        cold refit's), so such refits start cold. Joint ML and a fixed prior have one optimum."""
        self._check_fitted()
        if self.prior == "empirical-bayes":
            return None
        rows = np.asarray(rows, dtype=np.int64)
        return {"theta": np.array(self.raw_theta_[rows]), "a": np.array(self.raw_a_), "b": np.array(self.raw_b_),
                "sigma": float(self.sigma)}

    def fit_from(self, data, start: dict) -> "CBMMCalibrator":
        """:meth:`fit`, started at ``start`` (a :meth:`refit_start` of a fit on a superset of these
        subjects, same items and temperature) instead of the SVD start. The MM sweeps, their
        monotone descent and the stopping rule are those of :meth:`fit`; the optimum is the same
        (the loss is convex in each block and the start only shortens the way to it)."""
        self._start = start
        try:
            return self.fit(data)
        finally:
            self._start = None

    @staticmethod
    def _checked_start(start: dict, prob: "_Problem", sigma: float, rank: int):
        """(theta, a, b) at temperature 1 from a :meth:`refit_start` dict (a = 0 on inactive items)."""
        if float(start.get("sigma", sigma)) != sigma:
            raise ValueError(f"the start was fitted at sigma={start['sigma']}, this fit uses sigma={sigma}")
        theta = np.array(start["theta"], dtype=np.float64)
        a = np.array(start["a"], dtype=np.float64) / sigma
        b = np.array(start["b"], dtype=np.float64) / sigma
        want = ((prob.n,), (prob.j,)) if rank == 1 else ((prob.n, rank), (prob.j, rank))
        if theta.shape != want[0] or a.shape != want[1] or b.shape != (prob.j,):
            raise ValueError(f"start shapes theta {theta.shape}, a {a.shape}, b {b.shape} do not fit a "
                             f"{prob.n} x {prob.j} rank-{rank} problem")
        if not (np.all(np.isfinite(theta)) and np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
            raise ValueError("the start holds non-finite values")
        on = prob.col_mask
        a = np.maximum(np.where(on if rank == 1 else on[:, None], a, 0.0), 0.0)
        return np.ascontiguousarray(theta), np.ascontiguousarray(a), np.ascontiguousarray(b)

    # ------------------------------------------------------------------ pieces
    def _initial_prior(self, prob: _Problem, a, b) -> CBMMPrior | None:
        """The fixed prior, or the empirical-Bayes starting prior (moments of the start, widened by 1)."""
        if isinstance(self.prior, dict):
            return CBMMPrior.from_dict(self.prior)
        if self.prior == "none":
            return None
        aa, bb = a[prob.cols], b[prob.cols]
        return CBMMPrior(float(aa.mean()), 1.0 / (float(aa.var()) + 1.0), float(bb.mean()), 1.0 / (float(bb.var()) + 1.0), 1.0)

    def _item_uncertainty(self, var_a, cov_ab, var_b, s, m, col_on, col_n, col_k):
        """Bank-scale (a_sd_, b_sd_, ab_cov_) from the temperature-1 covariance: a = a1 s,
        b = b1 + a1 m, so Cov = M C M' with M = [[s, 0], [m, 1]] (theta's scale held fixed)."""
        s, m = float(s), float(m)
        va = s * s * var_a
        cab = s * (m * var_a + cov_ab)
        vb = m * m * var_a + 2 * m * cov_ab + var_b
        off = ~col_on
        k, n = col_k[off].astype(float), col_n[off].astype(float)
        va[off], cab[off] = 0.0, 0.0
        vb[off] = 1.0 / (k + 0.5) + 1.0 / (n - k + 0.5)  # delta-method SD of the pinned logit
        sd_a, sd_b = np.sqrt(np.maximum(va, 0.0)), np.sqrt(np.maximum(vb, 0.0))
        self.a_sd_, self.b_sd_ = sd_a, sd_b
        self.ab_cov_ = np.clip(cab, -sd_a * sd_b, sd_a * sd_b)

    def _initial(self, prob: _Problem, sigma, rank, rng, counts):
        """Starting point at temperature 1 (theta, a / sigma, b / sigma)."""
        n, j = prob.n, prob.j
        on = prob.col_mask
        if self.init == "random":
            theta = rng.standard_normal((n, rank))
            a = np.exp(rng.standard_normal((j, rank)))
            b = rng.standard_normal(j)
            if rank == 1:
                hi, lo = theta[:, 0].max(), theta[:, 0].min()
                mx = float(np.max(np.maximum(np.abs(hi * a[:, 0] + b), np.abs(lo * a[:, 0] + b))))
            else:
                mx = float(np.linalg.norm(theta, axis=1).max() * np.linalg.norm(a, axis=1).max() + np.abs(b).max())
            if mx > _INIT_MAX_ABS_X:
                f = _INIT_MAX_ABS_X / mx
                theta *= math.sqrt(f)
                a *= math.sqrt(f)
                b *= f
            a, b = a / sigma, b / sigma  # X is on the tempered scale; the kernels use X / sigma
        else:
            theta, a, b = self._svd_start(prob, rank, counts)
        if rank == 1:
            theta, a = np.ascontiguousarray(theta[:, 0]), np.ascontiguousarray(a[:, 0])
        a = np.where(on if rank == 1 else on[:, None], a, 0.0)
        return np.ascontiguousarray(theta), np.ascontiguousarray(a), np.ascontiguousarray(b)

    def _svd_start(self, prob: _Problem, rank, counts):
        """theta from a few streamed power iterations on Z = W o (C - 1 mu') started at the row
        scores; b = item logits; a = slope of the answers on theta divided by mu (1 - mu)."""
        c, ct, rows, on = prob.c, prob.ct, prob.rows, prob.col_mask
        n, j = prob.n, prob.j
        rn, rk_, cn, ck = counts
        mu = np.where(cn > 0, ck / np.maximum(cn, 1), 0.5)
        u = np.zeros((n, rank))
        score = np.where(rn > 0, (rk_ + 0.5) / (rn + 1.0), 0.5)
        logit = np.log(score / (1 - score))
        u[rows, 0] = logit[rows] - logit[rows].mean()
        if rank > 1:
            u[rows, 1:] = np.random.default_rng(0).standard_normal((rows.size, rank - 1))
        v = np.zeros((j, rank))
        for _ in range(_SVD_POWER_ITERS):
            u[rows] = np.linalg.qr(u[rows])[0] if rank > 1 else u[rows] / max(np.linalg.norm(u[rows]), 1e-300)
            _k.ztu_cols(ct, u, prob.roww, mu, prob.cols, v)
            _k.zv_rows(c, v, mu, prob.col_on, rows, u)
        theta = np.zeros((n, rank))
        t = u[rows]
        t = t - t.mean(axis=0)
        sd = t.std(axis=0)
        t = t / np.where(sd > 0, sd, 1.0)
        theta[rows] = t
        _k.ztu_cols(ct, theta, prob.roww, mu, prob.cols, v)  # v_j = sum_i w (gamma_ij - mu_j) theta_i
        sign = np.where(v[on].sum(axis=0) < 0, -1.0, 1.0)
        theta *= sign
        v *= sign
        muc = np.clip(mu, 0.01, 0.99)
        slope = v / np.maximum(cn, 1)[:, None]  # regression slope of the answers on theta (theta ~ N(0, 1))
        a = np.clip(slope / (muc * (1 - muc))[:, None], 0.0, _A_INIT_MAX)
        b = np.log(muc / (1 - muc))
        return theta, a, b

    def _iterate(self, prob: _Problem, theta, a, b, tol, max_iter):
        """MM sweeps, SQUAREM-accelerated unless acceleration='none'; returns the best point.

        Plain MM: the loss of every iterate is computed (free, in the sweep's first pass) and
        recorded. SQUAREM (S3 steplength, Varadhan & Roland 2008): a cycle is two sweeps
        w1 = F(w0), w2 = F(w1), the extrapolation w' = w0 - 2 alpha r + alpha^2 v (r = w1 - w0,
        v = w2 - 2 w1 + w0, alpha = -|r|/|v| clipped to [-step_max, -1], a projected to >= 0)
        and a sweep from w', which yields loss(w'). w' is accepted if loss(w') <= loss(w0); else
        the cycle falls back to w2, whose loss cannot exceed loss(w0) (up to rounding). Only
        cycle end points are recorded, so the trace never increases. In both modes the fit stops
        when the relative decrease between consecutive recorded points is below ``tol``; a
        recorded increase can only be rounding at the floor of the loss and also stops the fit,
        at the better point. The loop itself is :class:`_MMLoop`.
        """
        loop = _MMLoop(prob, tol, max_iter, self._eb_update, accelerate=self.acceleration == "squarem",
                       eb_on=prob.prior is not None and self.prior == "empirical-bayes", progress=self.progress)
        converged = loop.run((theta, a, b))
        best = loop.best
        self._stats_at_best = loop.pass_at is best[0] and loop.restart is None
        theta, a, b = (np.array(x, copy=True) for x in best)
        self.n_prior_updates_ = loop.eb_updates
        if loop.eb_on and not loop.eb_frozen:
            converged = False  # the hyper-parameters never settled
        return theta, a, b, loop.trace, loop.sweeps, loop.rejected, converged

    @staticmethod
    def _eb_update(prob: _Problem, w):
        """Empirical-Bayes update of the Gaussian prior of (a, b) at the accepted point ``w``.

        1. Re-standardise: theta' = (theta - m) / s over the fitted subjects, a' = a s,
           b' = b + a m (the data loss is unchanged). This pins the scale: with the slopes' prior
           SD estimated jointly, the penalised objective would otherwise trade a smaller spread of
           a against a larger theta scale without bound (its profile has a -J log(scale) term).
        2. Per item, the data information H_j = sum_i p q [theta', 1][theta', 1]^T and gradient
           (the pass that accepted ``w`` left their sums in prob) give the quadratic model of the
           item's log-likelihood at x_j: H_j x_j^ML = H_j x_j - grad_j, so no unstable ML estimate
           is ever formed (weak items get little weight through H_j).
        3. The Gaussian hierarchical model x_j ~ N(mu, diag(s_a^2, s_b^2)) is solved by EM to its
           fixed point on these quadratic likelihoods (O(J) per iteration, no data pass):
           V_j = (H_j + S^-1)^-1, m_j = V_j (H_j x_j^ML + S^-1 mu), mu = mean m_j,
           s^2 = mean((m_j - mu)^2 + diag V_j) (docs/math.md §7.1's update, iterated).
        Returns (change, standardised w, new prior); change is the largest move of a hyper-parameter
        (means in prior SDs, variances in log ratio) on the standardised scale.
        """
        theta, a, b = w
        pr = prob.prior
        rows, cols = prob.rows, prob.cols
        m = float(theta[rows].mean())
        sd = float(theta[rows].std())
        sd = sd if sd > 0 else 1.0
        if abs(math.log(sd)) <= _EB_SCALE_TOL and abs(m) <= _EB_SCALE_TOL:
            m, sd = 0.0, 1.0  # the theta prior's own slight shrinkage is not a drift: leave it
        h0, h1, h2 = prob.h0[cols], (prob.h1[cols] - m * prob.h0[cols]) / sd, None
        h2 = (prob.h2[cols] - 2 * m * prob.h1[cols] + m * m * prob.h0[cols]) / (sd * sd)
        x_a, x_b = a[cols] * sd, b[cols] + a[cols] * m
        # minus the data-loss gradient (the pass left -4x it in s1, s0), on the new coordinates
        r_a = (prob.s1[cols] - m * prob.s0[cols]) / (4.0 * sd)
        r_b = prob.s0[cols] / 4.0
        # H_j x_j^ML of the quadratic model at x_j: one Newton step, H x - grad
        g_a = h2 * x_a + h1 * x_b + r_a
        g_b = h1 * x_a + h0 * x_b + r_b
        mi = np.array([[1.0 / sd, 0.0], [-m / sd, 1.0]])
        p_old = mi.T @ np.diag([pr.a_precision, pr.b_precision]) @ mi
        mu_old = np.array([pr.a_mean * sd, pr.b_mean + pr.a_mean * m])
        mu_a, mu_b = float(x_a.mean()), float(x_b.mean())
        var_a = max(1.0 / p_old[0, 0], _EB_MIN_VAR)
        var_b = max(1.0 / p_old[1, 1], _EB_MIN_VAR)
        mu_a, mu_b, var_a, var_b = _k.eb_prior_em(*(np.ascontiguousarray(v, dtype=np.float64) for v in (h0, h1, h2, g_a, g_b)),
                                                  mu_a, mu_b, var_a, var_b, _EB_MIN_VAR, _EB_INNER_ITER, _EB_EM_TOL)
        change = max(abs(mu_a - mu_old[0]) * math.sqrt(p_old[0, 0]), abs(mu_b - mu_old[1]) * math.sqrt(p_old[1, 1]),
                     abs(math.log(var_a * p_old[0, 0])), abs(math.log(var_b * p_old[1, 1])))
        if sd != 1.0 or m != 0.0:
            change = max(change, 2 * _EB_TOL)  # re-standardised: the point moved, so restart
        prior = CBMMPrior(mu_a, 1.0 / var_a, mu_b, 1.0 / var_b, pr.theta_precision)
        if sd == 1.0 and m == 0.0:
            return change, w, prior
        t_new = theta.copy()
        t_new[rows] = (theta[rows] - m) / sd
        a_new = a.copy()
        b_new = b.copy()
        a_new[cols], b_new[cols] = x_a, x_b
        return change, (t_new, a_new, b_new), prior

    def _extreme_abilities(self, prob: _Problem, c, theta, a, b, ext):
        """theta of subjects left out of the fit: on the fitted items with a > 0 that the subject
        answered (n of them), the expected score is n - 1/2 (all correct) or 1/2 (all wrong).
        For rank r > 1 theta moves along the all-ones direction. No such item: the mean theta."""
        fit = np.flatnonzero(prob.row_on)
        a_eff = a if prob.rank == 1 else a.sum(axis=1)
        n = prob.n
        rn, rk_ = np.zeros(n, np.int64), np.zeros(n, np.int64)
        cn, ck = np.zeros(prob.j, np.int64), np.zeros(prob.j, np.int64)
        all_rows = np.ones(n, np.uint8)
        informative = (prob.col_mask & (a_eff > 0)).astype(np.uint8)
        _k.count_pass(c, prob.ct, all_rows, informative, rn, rk_, cn, ck)
        if prob.rank == 1:
            t_fit = theta[fit]
        else:
            t_fit = theta[fit].mean(axis=1)
        spread = max(float(t_fit.std()), 1e-3)
        lo = float(t_fit.min() - 100 * spread)
        hi = float(t_fit.max() + 100 * spread)
        nn = rn[ext]
        target = np.where(rk_[ext] == nn, nn - 0.5, 0.5).astype(np.float64)
        out = np.zeros(n)
        _k.extreme_theta(c, ext.astype(np.int64), np.ascontiguousarray(a_eff), b, informative, target, lo, hi, 100, out)
        vals = np.where(nn > 0, out[ext], float(t_fit.mean()))  # no fitted item observed: no information
        if prob.rank == 1:
            theta[ext] = vals
        else:
            theta[ext] = vals[:, None]

    # ------------------------------------------------------------------ export
    def fit_summary(self, data) -> str:
        return (
            f"cBMM: {data.n_subjects} subjects x {data.n_items} items, {self.n_iter_} sweeps, loss {self.loss_:.6g}, "
            f"converged={self.converged_}; {int(self.perfect_items_.sum())} perfect item(s), "
            f"{int(self.extreme_subjects_.sum())} extreme subject(s), {int(self.non_discriminating_.sum())} "
            "non-discriminating item(s)"
        )

    def _bank_parts(self, *, include_subjects: bool = True) -> BankParts:
        """The ``2pl`` bank's parts (:meth:`BaseCalibrator.to_item_bank`): the standardised parameters,
        their observed-information uncertainty, the fit's flags and trace; ``include_subjects``:
        with the calibration subjects' thetas (``/subjects``)."""
        if self.rank != 1:
            raise ValueError(f"item banks hold one ability dimension; this fit has rank={self.rank}")
        import xarray as xr

        settings = self.bank_settings(
            {
                "objective": "sum over observed cells of log(1 + exp(-y (theta a + b) / sigma)), a >= 0",
                "stopping_rule": "relative loss decrease between consecutive recorded points < tol "
                "(one point per SQUAREM cycle of two sweeps, or per sweep without acceleration)",
                "extremes": "items and subjects whose observed answers are all identical are excluded from "
                "the fit (repeatedly); such items (flag 'perfect') get a = 0, b = log((k + 1/2) / (n - k + 1/2)) "
                "from k correct of n observed; such subjects (flag 'extreme') get the theta whose expected "
                "score on the fitted items with a > 0 they answered is half an answer from perfect (or from zero)",
                "prior_used": None if self.prior_ is None else self.prior_.as_dict(),
                "prior_scale": "temperature-1 fit variables a / sigma, b / sigma, theta (before standardisation)",
                "n_prior_updates": int(self.n_prior_updates_),
                "uncertainty": "a_sd, b_sd, ab_cov: inverse observed information per item (2 x 2, theta at its "
                "estimate, prior precision included), mapped to the bank scale",
            }
        )
        scale = {
            "method": "standardised over the fitted subjects (extreme subjects excluded)",
            "transform": "theta = (theta_raw - theta_mean) / theta_sd; a = a_raw * theta_sd / sigma; "
            "b = (b_raw + a_raw * theta_mean) / sigma",
            **self.scale_,
        }
        item_vars = {
            "perfect": self.perfect_items_.astype(np.int8),
            "non_discriminating": self.non_discriminating_.astype(np.int8),
            "p_correct": np.asarray(self.p_correct_, dtype=np.float64),
            "n_observed": np.asarray(self.n_observed_, dtype=np.int64),
            "runaway_slope": self.diagnostics_.runaway_slope.astype(np.int8),
            "prior_dominated": self.diagnostics_.prior_dominated.astype(np.int8),
        }
        subjects = None
        if include_subjects:
            ids = np.asarray(self.subject_ids_, dtype=object)
            subjects = xr.Dataset(
                {
                    "theta": ("subject", np.asarray(self.theta_, dtype=np.float64),
                              {"long_name": "ability (standardised scale)"}),
                    "theta_sd": ("subject", np.full(self.n_subjects_, np.nan),
                                 {"long_name": "standard error of theta", "description": "not estimated by cBMM (joint ML)"}),
                    "extreme": ("subject", self.extreme_subjects_.astype(np.int8),
                                {"long_name": "all answers identical; theta from the half-answer rule, not fitted"}),
                },
                coords={"subject": ("subject", ids)},
            )
        calibration = xr.Dataset(
            {"loss_trace": ("iteration", self.loss_trace_, {"long_name": "cBMM loss at accepted points"})},
            attrs={
                "n_iter": int(self.n_iter_),
                "converged": int(self.converged_),
                "final_loss": float(self.loss_),
                "n_rejected_extrapolations": int(self.n_rejected_),
                "n_cells": int(self.n_cells_),
                "optimizer_converged": int(self.optimizer_converged_),
                "diagnostics": json.dumps(self.diagnostics_.summary()),
            },
        )
        arrays = {
            "a": np.asarray(self.a_, dtype=np.float64),
            "b": np.asarray(self.b_, dtype=np.float64),
            "a_sd": self.a_sd_,
            "b_sd": self.b_sd_,
            "ab_cov": self.ab_cov_,
            "uncertainty_method": "observed information (2 x 2 per item, theta at its estimate, prior included)",
        }
        return BankParts("2pl", settings, scale, arrays, item_vars, {"subjects": subjects, "calibration": calibration})
