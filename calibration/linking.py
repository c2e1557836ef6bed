"""Linking theta scales across item-bank versions through common items.

Direction convention (read this first)
--------------------------------------
Two calibrations of overlapping item sets live on two theta scales:

* the **reference** scale (``*_ref``): the scale to keep, e.g. bank version k;
* the **new** scale (``*_new``): a fresh calibration, e.g. the refit that becomes version k+1.

Every linking function returns constants ``(A, B)`` that map the NEW scale onto the REFERENCE
scale::

    theta_ref = A * theta_new + B          (A > 0)

With slope-intercept items ``z = a * theta + b`` (docs/math.md §0: ``b`` is an intercept, larger =
easier), expressing a new-scale item on the reference scale keeps ``z`` unchanged::

    a_ref = a_new / A
    b_ref = b_new - a_new * B / A

(4PL asymptotes ``c``, ``d`` and the LaRT CoT-speed parameters ``omega``, ``phi``, ``lam``,
``rho`` do not involve theta and are unchanged.) Difficulties ``delta = -b / a`` move with theta:
``delta_ref = A * delta_new + B``.

So, after a refit, ``apply_to_params(params_new, A, B)`` puts the new items on the reference
scale and ``apply_to_theta(theta_new, A, B)`` does the same for abilities (standard errors scale
by ``A``). ``LinkingResult.inverse()`` gives the constants of the opposite direction.

Example: if the truth is ``theta_new = 1.3 * theta_ref + 0.4``, linking recovers
``A = 1 / 1.3`` and ``B = -0.4 / 1.3``; ``result.inverse()`` has ``A = 1.3``, ``B = 0.4``.

Methods
-------
* :func:`mean_sigma`: matches the mean and SD of the common items' difficulties ``-b/a``
  (items with ``a <= min_slope`` in either calibration are skipped and counted).
* :func:`stocking_lord`: minimises the weighted squared difference between the test
  characteristic curves (sum of P(correct) over the common items) of the reference items and
  of the transformed new items, on a theta grid of the reference scale with standard-normal
  weights by default; started from mean-sigma, analytic gradient, ``scipy.optimize.minimize``.
  For LaRT only the probit accuracy part enters.

Common items are given as ``ItemParams`` aligned by position, as banks (anything with
``.params`` and ``.item_ids``, e.g. :class:`catengine.itembank.ItemBank`) or as a pair
``(ItemParams, item_ids)``; see :func:`stocking_lord` for ``common_items``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize

from catengine.models.params import ItemParams
from catengine.validation import is_integer

__all__ = [
    "LINKING_METHODS",
    "LinkingResult",
    "apply_to_params",
    "apply_to_theta",
    "link",
    "mean_sigma",
    "mean_sigma_difficulties",
    "stocking_lord",
]

LINKING_METHODS = ("mean-sigma", "stocking-lord")

#: Linking below this many common items raises (two is the mathematical minimum).
DEFAULT_MIN_COMMON = 5
#: mean-sigma skips items with a <= this (their difficulty -b/a is unstable) ...
DEFAULT_MIN_SLOPE = 0.1
#: ... and items whose difficulty is beyond +-this on either scale (unmeasured by any population)
DEFAULT_MAX_ABS_DIFFICULTY = 6.0


# ----------------------------------------------------------------------------------- results
@dataclass(frozen=True)
class LinkingResult:
    """Linking constants mapping the new scale onto the reference scale.

    ``theta_ref = A * theta_new + B``; items: ``a_ref = a_new / A``, ``b_ref = b_new - a_new B / A``.

    Attributes
    ----------
    A, B : the constants (A > 0).
    method : ``"mean-sigma"`` or ``"stocking-lord"`` (or ``"identity"`` / ``"inverse of ..."``).
    n_common : number of common items used.
    criterion : the method's objective at the solution. mean-sigma: RMS difference of the
        common items' difficulties after linking, ``sqrt(mean((d_ref - (A d_new + B))^2))``.
        stocking-lord: weighted mean over the theta grid of the squared difference of the two
        test characteristic curves (TCC in expected number correct; weights sum to 1).
    n_excluded : common items left out (mean-sigma: slope ``a <= min_slope`` in either version).
    converged : whether the optimiser reported success (always True for mean-sigma).
    n_iter : optimiser iterations (0 for mean-sigma).
    """

    A: float
    B: float
    method: str
    n_common: int
    criterion: float
    n_excluded: int = 0
    converged: bool = True
    n_iter: int = 0

    def __post_init__(self):
        A, B = float(self.A), float(self.B)
        if not (math.isfinite(A) and A > 0):
            raise ValueError(f"linking slope A must be finite and > 0, got {self.A!r}")
        if not math.isfinite(B):
            raise ValueError(f"linking intercept B must be finite, got {self.B!r}")
        object.__setattr__(self, "A", A)
        object.__setattr__(self, "B", B)
        object.__setattr__(self, "n_common", int(self.n_common))
        object.__setattr__(self, "criterion", float(self.criterion))
        object.__setattr__(self, "n_excluded", int(self.n_excluded))
        object.__setattr__(self, "converged", bool(self.converged))
        object.__setattr__(self, "n_iter", int(self.n_iter))

    def inverse(self) -> "LinkingResult":
        """Constants of the opposite direction: ``theta_new = A' theta_ref + B'``."""
        return LinkingResult(
            1.0 / self.A,
            -self.B / self.A,
            method=f"inverse of {self.method}",
            n_common=self.n_common,
            criterion=self.criterion,
            n_excluded=self.n_excluded,
            converged=self.converged,
            n_iter=self.n_iter,
        )

    def transform_params(self, params: ItemParams) -> ItemParams:
        """New-scale item parameters expressed on the reference scale (see :func:`apply_to_params`)."""
        return apply_to_params(params, self.A, self.B)

    def transform_theta(self, theta):
        """New-scale abilities expressed on the reference scale: ``A * theta + B``."""
        return apply_to_theta(theta, self.A, self.B)

    def to_dict(self) -> dict:
        """Plain JSON-able dict (e.g. for the bank's ``scale`` attribute)."""
        return {
            "direction": "theta_ref = A * theta_new + B",
            "A": self.A,
            "B": self.B,
            "method": self.method,
            "n_common": self.n_common,
            "criterion": self.criterion,
            "n_excluded": self.n_excluded,
            "converged": self.converged,
            "n_iter": self.n_iter,
        }


# ----------------------------------------------------------------------------- transforms
def _check_constants(A, B) -> tuple[float, float]:
    A, B = float(A), float(B)
    if not (math.isfinite(A) and A > 0):
        raise ValueError(f"A must be finite and > 0 (a negative A would flip the scale), got {A!r}")
    if not math.isfinite(B):
        raise ValueError(f"B must be finite, got {B!r}")
    return A, B


def apply_to_params(params: ItemParams, A: float, B: float) -> ItemParams:
    """Item parameters on the scale ``theta* = A * theta + B``.

    ``a* = a / A`` and ``b* = b - a * B / A`` so that ``z = a theta + b = a* theta* + b*`` for every
    subject. With constants from a linking result (new -> reference), this puts new-scale items on
    the reference scale. Other parameters (c, d, omega, phi, lam, rho) are unchanged.
    """
    if not isinstance(params, ItemParams):
        raise TypeError(f"params must be an ItemParams, got {type(params).__name__}")
    A, B = _check_constants(A, B)
    kwargs = {name: getattr(params, name) for name in params.parameter_names}
    kwargs["a"] = params.a / A
    kwargs["b"] = params.b - params.a * B / A
    return ItemParams(params.response_model, rho=params.rho, **kwargs)


def apply_to_theta(theta, A: float, B: float):
    """Abilities on the scale ``theta* = A * theta + B`` (scalars stay scalars; SEs scale by A)."""
    A, B = _check_constants(A, B)
    if np.isscalar(theta):
        return A * float(theta) + B
    return A * np.asarray(theta, dtype=np.float64) + B


# ---------------------------------------------------------------------------- common items
def _unpack(obj, role: str):
    if isinstance(obj, ItemParams):
        return obj, None
    if isinstance(obj, tuple) and len(obj) == 2 and isinstance(obj[0], ItemParams):
        params, ids = obj
        ids = tuple(str(v) for v in ids)
        if len(ids) != params.n_items:
            raise ValueError(f"{role}: {len(ids)} item ids given for {params.n_items} items")
        return params, ids
    params = getattr(obj, "params", None)
    ids = getattr(obj, "item_ids", None)
    if isinstance(params, ItemParams) and ids is not None:
        return params, tuple(str(v) for v in ids)
    raise TypeError(
        f"{role} must be an ItemParams, a bank (with .params and .item_ids) or a pair "
        f"(ItemParams, item_ids); got {type(obj).__name__}"
    )


def _is_index_pair(common) -> bool:
    if not isinstance(common, (tuple, list)) or len(common) != 2:
        return False
    return all(not isinstance(x, str) and np.ndim(x) == 1 for x in common)


def _resolve_common(params_ref, params_new, common_items, min_common: int):
    """(ref ItemParams subset, new ItemParams subset) of the common items, in matching order."""
    p_ref, ids_ref = _unpack(params_ref, "params_ref")
    p_new, ids_new = _unpack(params_new, "params_new")
    if p_ref.model is not p_new.model:
        raise ValueError(
            f"cannot link a {p_new.response_model!r} calibration to a {p_ref.response_model!r} reference: "
            "both must use the same response model"
        )
    if common_items is None:
        if ids_ref is not None and ids_new is not None:
            lookup = {v: k for k, v in enumerate(ids_new)}
            idx_ref = np.array([k for k, v in enumerate(ids_ref) if v in lookup], dtype=np.intp)
            idx_new = np.array([lookup[ids_ref[k]] for k in idx_ref], dtype=np.intp)
        elif p_ref.n_items == p_new.n_items:
            idx_ref = idx_new = np.arange(p_ref.n_items)
        else:
            raise ValueError(
                f"the reference has {p_ref.n_items} items and the new calibration {p_new.n_items}: "
                "without item ids they cannot be aligned by position; pass common_items "
                "(ids, or a pair of index arrays) or banks / (ItemParams, item_ids) pairs"
            )
    elif _is_index_pair(common_items):
        idx_ref, idx_new = (np.asarray(x) for x in common_items)
        for name, idx, p in (("reference", idx_ref, p_ref), ("new", idx_new, p_new)):
            if idx.size and idx.dtype.kind not in "iu":
                raise ValueError(f"common_items {name} indices must be integers, got dtype {idx.dtype}")
            bad = (idx < 0) | (idx >= p.n_items)
            if bad.any():
                raise ValueError(f"common_items {name} index {int(idx[bad][0])} is out of range for {p.n_items} items")
            if np.unique(idx).size != idx.size:
                raise ValueError(f"common_items {name} indices contain repeats")
        if idx_ref.size != idx_new.size:
            raise ValueError(
                f"common_items index arrays differ in length ({idx_ref.size} reference vs {idx_new.size} new)"
            )
        idx_ref = idx_ref.astype(np.intp)
        idx_new = idx_new.astype(np.intp)
    else:
        ids = [str(v) for v in common_items]
        missing_ids = [role for role, x in (("params_ref", ids_ref), ("params_new", ids_new)) if x is None]
        if missing_ids:
            raise ValueError(
                f"common_items given as item ids, but {' and '.join(missing_ids)} carry no item ids; "
                "pass banks or (ItemParams, item_ids) pairs, or index arrays"
            )
        if len(set(ids)) != len(ids):
            dup = next(v for v in ids if ids.count(v) > 1)
            raise ValueError(f"common item {dup!r} is listed more than once")
        out = []
        for role, known in (("reference", ids_ref), ("new calibration", ids_new)):
            lookup = {v: k for k, v in enumerate(known)}
            absent = [v for v in ids if v not in lookup]
            if absent:
                shown = ", ".join(repr(v) for v in absent[:10]) + (f" (+{len(absent) - 10} more)" if len(absent) > 10 else "")
                raise ValueError(f"{len(absent)} common item(s) are not in the {role}: {shown}")
            out.append(np.array([lookup[v] for v in ids], dtype=np.intp))
        idx_ref, idx_new = out
    n = int(idx_ref.size)
    floor = max(2, int(min_common))
    if n < floor:
        raise ValueError(
            f"too few common items to link: {n} (the reference has {p_ref.n_items} items, the new "
            f"calibration {p_new.n_items}); at least {floor} are required"
            + (" (lower min_common to accept fewer, never below 2)" if floor > 2 else "")
        )
    return p_ref.subset(idx_ref), p_new.subset(idx_new)


# ------------------------------------------------------------------------------ mean-sigma
def mean_sigma_difficulties(difficulty_ref, difficulty_new) -> tuple[float, float]:
    """Mean-sigma constants from paired difficulties (``-b/a``) of the same common items.

    Returns ``(A, B)`` with ``theta_ref = A * theta_new + B``: ``A = sd(d_ref) / sd(d_new)``,
    ``B = mean(d_ref) - A * mean(d_new)`` (population SDs). Non-finite pairs raise.
    """
    d_ref = np.asarray(difficulty_ref, dtype=np.float64)
    d_new = np.asarray(difficulty_new, dtype=np.float64)
    if d_ref.ndim != 1 or d_ref.shape != d_new.shape:
        raise ValueError(f"difficulties must be two 1-D arrays of equal length, got shapes {d_ref.shape} and {d_new.shape}")
    if d_ref.size < 2:
        raise ValueError(f"mean-sigma needs at least 2 common items, got {d_ref.size}")
    bad = np.flatnonzero(~(np.isfinite(d_ref) & np.isfinite(d_new)))
    if bad.size:
        raise ValueError(f"difficulty of common item index {int(bad[0])} is not finite")
    sd_ref, sd_new = float(np.std(d_ref)), float(np.std(d_new))
    if sd_new <= 0 or sd_ref <= 0:
        raise ValueError(
            "mean-sigma is undefined: the common items' difficulties do not vary "
            f"(SD reference {sd_ref:g}, SD new {sd_new:g})"
        )
    A = sd_ref / sd_new
    B = float(np.mean(d_ref)) - A * float(np.mean(d_new))
    return A, B


def mean_sigma(
    params_ref,
    params_new,
    common_items=None,
    *,
    min_common: int = DEFAULT_MIN_COMMON,
    min_slope: float = DEFAULT_MIN_SLOPE,
    max_abs_difficulty: float = DEFAULT_MAX_ABS_DIFFICULTY,
) -> LinkingResult:
    """Mean-sigma linking on the common items' difficulties ``-b/a``.

    Parameters
    ----------
    params_ref, params_new : ItemParams, bank (``.params``, ``.item_ids``) or (ItemParams, ids).
    common_items : see :func:`stocking_lord`.
    min_common : fewest usable common items accepted (after skipping low slopes); at least 2.
    min_slope : items with ``a <= min_slope`` in either calibration are skipped (difficulty is
        undefined or unstable for them, e.g. items nobody solved, whose fitted slope is ~0 and
        difficulty ~1e16); how many is reported as ``n_excluded``.
    max_abs_difficulty : items whose difficulty lies outside +-this in either calibration are
        skipped too (they are not measured by any plausible population and would dominate
        the means and SDs).

    Returns a :class:`LinkingResult` with ``theta_ref = A * theta_new + B``.
    """
    ref, new = _resolve_common(params_ref, params_new, common_items, min_common)
    return _mean_sigma_core(ref, new, min_slope=min_slope, min_common=min_common, max_abs_difficulty=max_abs_difficulty)


def _mean_sigma_core(ref: ItemParams, new: ItemParams, *, min_slope: float, min_common: int,
                     max_abs_difficulty: float = DEFAULT_MAX_ABS_DIFFICULTY) -> LinkingResult:
    keep = (ref.a > min_slope) & (new.a > min_slope)
    with np.errstate(divide="ignore", invalid="ignore"):
        d_ref_all = -ref.b / np.where(keep, ref.a, 1.0)
        d_new_all = -new.b / np.where(keep, new.a, 1.0)
    keep &= (np.abs(d_ref_all) <= max_abs_difficulty) & (np.abs(d_new_all) <= max_abs_difficulty)
    n_excluded = int((~keep).sum())
    n = int(keep.sum())
    floor = max(2, int(min_common))
    if n < floor:
        raise ValueError(
            f"too few common items with slope a > {min_slope:g} and |difficulty| <= {max_abs_difficulty:g} for "
            f"mean-sigma: {n} of {ref.n_items} ({n_excluded} skipped); at least {floor} are required"
        )
    d_ref = d_ref_all[keep]
    d_new = d_new_all[keep]
    A, B = mean_sigma_difficulties(d_ref, d_new)
    rms = float(np.sqrt(np.mean((d_ref - (A * d_new + B)) ** 2)))
    return LinkingResult(A, B, method="mean-sigma", n_common=n, criterion=rms, n_excluded=n_excluded)


# --------------------------------------------------------------------------- Stocking-Lord
def _prob_and_slope(params: ItemParams, z: np.ndarray):
    """P(correct) and dP/dz for linear predictors z (any shape, items on the last axis)."""
    return params.model.curve(params, z)


def _grid(quadrature, theta_weights):
    if is_integer(quadrature):
        if quadrature < 5:
            raise ValueError(f"quadrature must have at least 5 points, got {quadrature}")
        theta = np.linspace(-4.0, 4.0, int(quadrature))
    else:
        theta = np.asarray(quadrature, dtype=np.float64)
        if theta.ndim != 1 or theta.size < 5:
            raise ValueError(
                f"quadrature must be a number of points (>= 5) or a 1-D array of >= 5 theta values, got shape {theta.shape}"
            )
        if not np.all(np.isfinite(theta)):
            raise ValueError("quadrature theta values must be finite")
    if theta_weights is None:
        w = np.exp(-0.5 * theta**2)
    else:
        w = np.asarray(theta_weights, dtype=np.float64)
        if w.shape != theta.shape:
            raise ValueError(f"theta_weights has shape {w.shape} but the quadrature grid has {theta.shape}")
        if not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
            raise ValueError("theta_weights must be finite, >= 0 and not all zero")
    return theta, w / w.sum()


def _sl_objective(x, theta, w, tcc_ref, new: ItemParams):
    """Criterion and gradient in (log A, B)."""
    log_a, B = float(x[0]), float(x[1])
    A = math.exp(log_a)
    u = (theta - B) / A  # the new-scale theta that corresponds to reference-scale theta
    z = u[:, None] * new.a[None, :] + new.b[None, :]
    p, dp = _prob_and_slope(new, z)
    resid = tcc_ref - p.sum(axis=1)
    f = float(np.sum(w * resid**2))
    # d tcc_new / dB = sum_j dp_j * a_j * du/dB, du/dB = -1/A ; d/dlogA = A * d/dA, du/dA = -u/A
    s = dp @ new.a  # sum_j dP_j/dz * a_j, per grid point
    dtcc_dB = -s / A
    dtcc_dlogA = -s * u
    g = np.array([-2.0 * np.sum(w * resid * dtcc_dlogA), -2.0 * np.sum(w * resid * dtcc_dB)])
    return f, g


def stocking_lord(
    params_ref,
    params_new,
    common_items=None,
    *,
    quadrature=61,
    theta_weights=None,
    start: tuple[float, float] | None = None,
    min_common: int = DEFAULT_MIN_COMMON,
    tol: float = 1e-12,
    max_iter: int = 500,
) -> LinkingResult:
    """Stocking-Lord characteristic-curve linking.

    Finds ``(A, B)`` (``theta_ref = A * theta_new + B``) minimising

        sum_q w_q [ TCC_ref(theta_q) - TCC_new*(theta_q) ]^2

    where ``TCC(theta) = sum_j P_j(theta)`` over the common items, ``TCC_new*`` uses the new items
    transformed to the reference scale (``a/A``, ``b - a B / A``), and ``theta_q`` is a grid on the
    reference scale with weights ``w_q`` (standard-normal density by default, normalised to sum 1).
    For LaRT only the probit accuracy curve enters; for 4PL the asymptotes are kept.

    Parameters
    ----------
    params_ref, params_new : ``ItemParams`` (aligned by position when ``common_items`` is None),
        banks (anything with ``.params`` and ``.item_ids``) or ``(ItemParams, item_ids)`` pairs.
    common_items : None (all items: by id when both sides carry ids, else by position), a
        sequence of item ids, or a pair ``(ref_indices, new_indices)`` of integer arrays.
    quadrature : number of equally spaced points on [-4, 4], or the reference-scale grid itself.
    theta_weights : weights on the grid (default: standard-normal density).
    start : initial ``(A, B)``; default mean-sigma (or ``(1, 0)`` when it is undefined).
    min_common : fewest common items accepted (at least 2).
    tol, max_iter : BFGS gradient tolerance and iteration cap.

    The optimisation runs over ``(log A, B)`` (so ``A > 0``) with an analytic gradient.
    """
    ref, new = _resolve_common(params_ref, params_new, common_items, min_common)
    theta, w = _grid(quadrature, theta_weights)
    p_ref, _ = _prob_and_slope(ref, theta[:, None] * ref.a[None, :] + ref.b[None, :])
    tcc_ref = p_ref.sum(axis=1)
    if start is None:
        try:
            ms = _mean_sigma_core(ref, new, min_slope=DEFAULT_MIN_SLOPE, min_common=2)
            start = (ms.A, ms.B)
        except ValueError:
            start = (1.0, 0.0)
    A0, B0 = _check_constants(*start)
    res = optimize.minimize(
        _sl_objective,
        np.array([math.log(A0), B0]),
        args=(theta, w, tcc_ref, new),
        jac=True,
        method="BFGS",
        options={"gtol": tol, "maxiter": int(max_iter)},
    )
    x = res.x
    f, g = _sl_objective(x, theta, w, tcc_ref, new)
    # BFGS reports "precision loss" when the criterion is already at rounding level (e.g. a
    # perfect transform); that is convergence too.
    converged = bool(res.success) or (np.max(np.abs(g)) < 1e-8 * max(1.0, ref.n_items))
    if not (np.all(np.isfinite(x)) and abs(x[0]) < math.log(1e3) and abs(x[1]) < 1e3):
        raise ValueError(
            f"Stocking-Lord linking diverged (A = {math.exp(min(float(x[0]), 700.0)):.3g}, B = {float(x[1]):.3g}): "
            "the common items do not pin down the scale; check them (items nobody or everybody solves carry no "
            "information) or link on a chosen anchor set"
        )
    return LinkingResult(
        math.exp(float(x[0])),
        float(x[1]),
        method="stocking-lord",
        n_common=ref.n_items,
        criterion=f,
        converged=converged,
        n_iter=int(res.nit),
    )


def link(
    params_ref,
    params_new,
    common_items=None,
    *,
    method: str = "stocking-lord",
    min_common: int = DEFAULT_MIN_COMMON,
    quadrature=61,
    theta_weights=None,
    min_slope: float = DEFAULT_MIN_SLOPE,
) -> LinkingResult:
    """Link by method name: ``"stocking-lord"`` (default) or ``"mean-sigma"``.

    ``quadrature`` / ``theta_weights`` apply to Stocking-Lord, ``min_slope`` to mean-sigma.
    """
    if method == "stocking-lord":
        return stocking_lord(
            params_ref, params_new, common_items, quadrature=quadrature, theta_weights=theta_weights, min_common=min_common
        )
    if method == "mean-sigma":
        return mean_sigma(params_ref, params_new, common_items, min_common=min_common, min_slope=min_slope)
    raise ValueError(f"unknown linking method {method!r}; allowed: {', '.join(LINKING_METHODS)}")
