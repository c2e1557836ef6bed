"""``ResponseState``: what one subject has answered so far, kept as incremental sufficient statistics.

The session owns one per subject and calls :meth:`ResponseState.add` once per answer (O(1)): the
administered items' parameters are copied into contiguous per-answer buffers (so a likelihood pass
touches ``n`` contiguous entries, never the whole bank), and the LaRT CoT statistics

    F_T = sum_j phi_j^2 / lam_j^2,     B = -sum_j phi_j (log_cot_j - omega_j) / lam_j^2

(docs/math.md §1.3) are running sums over the items whose CoT length was observed. Estimators read the
state; incremental caches of estimators (e.g. the EAP grid log-likelihood) live in ``scratch`` and
are rebuilt from the answers, in answer order, whenever they fall out of step.
"""

from __future__ import annotations

import math

import numpy as np

from catengine.models.params import ItemParams

#: integer codes of the accuracy models used by the numba kernels (``ResponseModel.kernel_code``)
MODEL_2PL, MODEL_4PL, MODEL_PROBIT = 0, 1, 2


def model_code(params: ItemParams) -> int:
    """Kernel code of the accuracy part of ``params``: 0 = 2PL, 1 = 4PL, 2 = probit (LaRT)."""
    return params.model.kernel_code


def full_cd(params: ItemParams) -> tuple[np.ndarray, np.ndarray]:
    """(c, d) arrays of the bank, also for models without asymptotes (c = 0, d = 1)."""
    if params.model.has_asymptotes:
        return params.c, params.d
    n = params.n_items
    return np.zeros(n), np.ones(n)


class ResponseState:
    """Answers of one subject in administration order, with incremental sufficient statistics.

    Attributes (read them, do not write them): ``n`` answers so far; ``items`` / ``correct`` /
    ``log_cot`` (views of length ``n``); ``administered`` (bool mask over the bank); ``cot_info``
    (F_T) and ``cot_score`` (B) over the answers with an observed CoT length; per-answer parameter
    buffers ``a``, ``b``, ``c``, ``d``, ``y`` (first ``n`` entries valid).

    ``covariance`` (optional :class:`~catengine.models.item_covariance.ItemCovariance` of the bank):
    the answered items' Var(a), Var(b), Cov(a, b) are then kept in per-answer buffers ``va``, ``vb``,
    ``vab`` too (estimators widen the trait SD by them, docs/math.md §7.3). ``interval_curve`` (optional,
    set by the session): the bank's cross-fitted SD factor c(L) by test length (docs/math.md §7.5).
    """

    __slots__ = ("params", "model", "_asymptotes", "_cot", "n", "_items", "_y", "_log_cot", "administered",
                 "a", "b", "c", "d", "cot_info", "cot_score", "n_correct", "scratch",
                 "covariance", "va", "vb", "vab", "interval_curve")

    def __init__(self, params: ItemParams, covariance=None, interval_curve=None):
        if not isinstance(params, ItemParams):
            raise TypeError(f"ResponseState needs an ItemParams, got {type(params).__name__}")
        if covariance is not None and covariance.n_items != params.n_items:
            raise ValueError(f"item covariance has {covariance.n_items} items, the bank {params.n_items}")
        J = params.n_items
        self.params = params
        self.model = model_code(params)
        self._asymptotes, self._cot = params.model.has_asymptotes, params.model.has_cot
        self.n = 0
        self._items = np.empty(J, dtype=np.int64)
        self._y = np.empty(J)
        self._log_cot = np.full(J, np.nan)
        self.administered = np.zeros(J, dtype=bool)
        self.a = np.empty(J)
        self.b = np.empty(J)
        self.c = np.zeros(J)
        self.d = np.ones(J)
        self.cot_info = 0.0
        self.cot_score = 0.0
        self.n_correct = 0
        self.scratch: dict = {}
        self.covariance = covariance
        self.interval_curve = interval_curve
        if covariance is not None:
            self.va, self.vb, self.vab = np.zeros(J), np.zeros(J), np.zeros(J)
        else:
            self.va = self.vb = self.vab = None

    # views -------------------------------------------------------------------------------------
    @property
    def items(self) -> np.ndarray:
        return self._items[: self.n]

    @property
    def correct(self) -> np.ndarray:
        return self._y[: self.n]

    @property
    def y(self) -> np.ndarray:
        return self._y

    @property
    def log_cot(self) -> np.ndarray:
        return self._log_cot[: self.n]

    # updates -----------------------------------------------------------------------------------
    def _take(self, rows, items) -> None:
        """Copy the parameters (and parameter variances) of ``items`` to the answer positions ``rows``
        and mark them administered: one item at one position, or several at a slice."""
        p = self.params
        self.a[rows] = p.a[items]
        self.b[rows] = p.b[items]
        if self._asymptotes:
            self.c[rows] = p.c[items]
            self.d[rows] = p.d[items]
        if self.covariance is not None:
            cv = self.covariance
            self.va[rows] = cv.a_var[items]
            self.vb[rows] = cv.b_var[items]
            self.vab[rows] = cv.ab_cov[items]
        self.administered[items] = True

    def add(self, item: int, correct: int, log_cot: float = math.nan) -> None:
        """Append one answer (no validation here: the session validates before calling)."""
        p = self.params
        k = self.n
        self._items[k] = item
        self._y[k] = float(correct)
        self._take(k, item)
        self.n_correct += int(correct)
        if self._cot and not math.isnan(log_cot):
            self._log_cot[k] = log_cot
            phi, lam = float(p.phi[item]), float(p.lam[item])
            w = phi / (lam * lam)
            self.cot_info += w * phi
            self.cot_score -= w * (float(log_cot) - float(p.omega[item]))
        self.n = k + 1

    def add_many(self, items, correct, log_cot=None) -> None:
        """Append several answers at once: the state :meth:`add` would reach adding them in order
        (the CoT sums accumulated in the same order, so bit for bit). ``items`` must be distinct
        and not yet administered (no validation here)."""
        items = np.asarray(items, dtype=np.int64).reshape(-1)
        y = np.asarray(correct, dtype=np.float64).reshape(-1)
        m = items.size
        if m == 0:
            return
        p = self.params
        k = self.n
        rows = slice(k, k + m)
        self._items[rows] = items
        self._y[rows] = y
        self._take(rows, items)
        self.n_correct += int(y.sum())
        if self._cot and log_cot is not None:
            t = np.asarray(log_cot, dtype=np.float64).reshape(-1)
            has = ~np.isnan(t)
            self._log_cot[rows] = np.where(has, t, np.nan)
            if has.any():
                it = items[has]
                phi, lam = p.phi[it], p.lam[it]
                w = phi / (lam * lam)
                self.cot_info = float(np.cumsum(np.concatenate(([self.cot_info], w * phi)))[-1])
                self.cot_score = float(np.cumsum(np.concatenate(([self.cot_score], -(w * (t[has] - p.omega[it])))))[-1])
        self.n = k + m

    def snapshot(self) -> tuple:
        """Scalars needed to undo the next :meth:`add` exactly (see :meth:`restore`)."""
        return self.n, self.cot_info, self.cot_score, self.n_correct

    def restore(self, snap: tuple) -> None:
        """Undo the answers added since ``snap`` was taken (bit-exact: no floating-point subtraction).
        Estimator caches are dropped; they rebuild from the remaining answers in answer order."""
        n, self.cot_info, self.cot_score, self.n_correct = snap
        self.scratch.clear()
        for k in range(n, self.n):
            self.administered[self._items[k]] = False
            self._log_cot[k] = np.nan
        self.n = n
