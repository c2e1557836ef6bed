"""Item parameters of every response model, as frozen float64 arrays.

One parameterisation for every bank (docs/math.md §0): the linear predictor is slope-intercept,
``z = a * theta + b`` with ``b`` an intercept (larger = easier).

* ``lart``: P(correct) = Phi(z); log(T + offset) ~ Normal(omega - phi * tau, lam^2), with
  (theta, tau) standard bivariate normal with correlation ``rho``. ``lam`` is an SD.
* ``2pl``: P = logistic(z).  (1PL: all a equal.)
* ``4pl``: P = c + (d - c) logistic(z), c the lower and d the upper asymptote (3PL: d = 1).

``ItemParams.response_model`` is the model's name (what bank files store); ``ItemParams.model`` is
the model object (``catengine.models.response_models``) that callers ask for capabilities and formulas.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .response_models import RESPONSE_MODELS, ResponseModel, response_model  # noqa: F401 (RESPONSE_MODELS re-exported)

#: every item-parameter field of ``ItemParams``, in bank order (a model stores a subset: ``ResponseModel.parameters``)
PARAMETER_FIELDS = ("a", "b", "c", "d", "omega", "phi", "lam")


def _as_vector(name: str, value, n: int | None) -> np.ndarray:
    arr = np.array(value, dtype=np.float64, copy=True)
    if arr.ndim != 1:
        raise ValueError(f"item parameter {name!r} must be one-dimensional, got shape {arr.shape}")
    if n is not None and arr.shape[0] != n:
        raise ValueError(f"item parameter {name!r} has {arr.shape[0]} entries, expected {n} (one per item)")
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        raise ValueError(f"item parameter {name!r} is not finite at item index {int(bad[0])} (value {arr[bad[0]]})")
    arr.flags.writeable = False
    return arr


@dataclass(frozen=True)
class ItemParams:
    """Frozen item parameters of one bank (arrays are read-only float64, one entry per item).

    Parameters not used by ``response_model`` are ``None``. For ``4pl``, ``c`` and ``d`` are
    required (use c = 0, d = 1 for a 2PL shape). ``rho`` is only meaningful for ``lart``.
    """

    response_model: str
    a: np.ndarray
    b: np.ndarray
    c: np.ndarray | None = None
    d: np.ndarray | None = None
    omega: np.ndarray | None = None
    phi: np.ndarray | None = None
    lam: np.ndarray | None = None
    rho: float = 0.0
    n_items: int = field(init=False)

    def __post_init__(self):
        model = response_model(self.response_model)  # ValueError naming the allowed models
        object.__setattr__(self, "response_model", model.name)
        required = model.parameters
        n = None
        for name in PARAMETER_FIELDS:
            value = getattr(self, name)
            if value is None:
                if name in required:
                    raise ValueError(f"response model {self.response_model!r} requires item parameter {name!r}")
                continue
            if name not in required:
                raise ValueError(
                    f"item parameter {name!r} is not part of response model {self.response_model!r} "
                    f"(which uses {', '.join(required)})"
                )
            arr = _as_vector(name, value, n)
            n = arr.shape[0]
            object.__setattr__(self, name, arr)
        if n == 0:
            raise ValueError("an item bank needs at least one item")
        object.__setattr__(self, "n_items", n)
        rho = float(self.rho)
        if not np.isfinite(rho) or not -1.0 < rho < 1.0:
            raise ValueError(f"rho must lie strictly between -1 and 1, got {self.rho}")
        if not model.has_cot and rho != 0.0:  # rho correlates theta with the CoT part's tau
            raise ValueError(f"rho is only defined for lart banks, got rho={rho} for {self.response_model!r}")
        object.__setattr__(self, "rho", rho)
        model.validate(self)

    @property
    def model(self) -> ResponseModel:
        """The response model object (``catengine.models.response_models``) of ``response_model``."""
        return RESPONSE_MODELS[self.response_model]

    @property
    def parameter_names(self) -> tuple[str, ...]:
        return RESPONSE_MODELS[self.response_model].parameters

    def subset(self, index) -> "ItemParams":
        """Parameters of the items selected by ``index`` (integer array, slice or boolean mask)."""
        kwargs = {name: getattr(self, name)[index] for name in self.parameter_names}
        return ItemParams(self.response_model, rho=self.rho, **kwargs)


def params_fingerprint(params: ItemParams, *, item_ids=None, b_sd=None, length: int = 64) -> str:
    """sha256 (hex, first ``length`` characters) of the response model, the item ids (if given),
    every parameter array, rho and the intercepts' posterior SDs (if given).

    The one fingerprint of item parameters: session logs record it with the item ids and ``b_sd``
    (the bank a log was made with), audits record the first 16 characters of the parameters alone.
    """
    import hashlib
    import json

    h = hashlib.sha256()
    h.update(params.response_model.encode())
    if item_ids is not None:
        h.update(json.dumps([str(i) for i in item_ids]).encode())
    for name in params.parameter_names:
        h.update(np.ascontiguousarray(getattr(params, name), dtype=np.float64).tobytes())
    h.update(np.float64(params.rho).tobytes())
    if b_sd is not None:
        h.update(np.ascontiguousarray(b_sd, dtype=np.float64).tobytes())
    return h.hexdigest()[:length]


# ----------------------------------------------------------------------------- item uncertainty
UNCERTAINTY_SDS = ("a_sd", "b_sd", "omega_sd", "phi_sd")
UNCERTAINTY_COVARIANCES = {"ab_cov": ("a_sd", "b_sd"), "omega_phi_cov": ("omega_sd", "phi_sd")}
UNCERTAINTY_DRAWS = ("a_draws", "b_draws")


def _optional_vector(name, value, n):
    if value is None:
        return None
    arr = _as_vector(name, value, n)
    return arr


@dataclass(frozen=True)
class ItemUncertainty:
    """Uncertainty of a bank's item parameters (schema v2; every field optional, arrays read-only).

    * ``a_sd``, ``b_sd`` (J,) marginal SDs of the slope and intercept and ``ab_cov`` (J,) their
      covariance, so that ``ab_covariance()`` is the 2 x 2 covariance of (a_j, b_j) per item;
      ``omega_sd``, ``phi_sd``, ``omega_phi_cov`` the same for LaRT's CoT parameters.
    * ``a_draws``, ``b_draws`` (K, J) draws of the parameters on the bank's scale (e.g. a bootstrap
      over calibration LLMs linked to the main fit), when the bank stores a ``draw`` dimension.
    * ``method`` says how the bank's calibrator obtained them (free text, e.g. "observed
      information, theta at its estimate"; empty when the bank does not say).

    A field that the bank does not carry is ``None`` (e.g. PSN banks carry only ``b_sd``).
    """

    n_items: int
    a_sd: np.ndarray | None = None
    b_sd: np.ndarray | None = None
    ab_cov: np.ndarray | None = None
    omega_sd: np.ndarray | None = None
    phi_sd: np.ndarray | None = None
    omega_phi_cov: np.ndarray | None = None
    a_draws: np.ndarray | None = None
    b_draws: np.ndarray | None = None
    method: str = ""

    def __post_init__(self):
        n = int(self.n_items)
        object.__setattr__(self, "n_items", n)
        for name in UNCERTAINTY_SDS + tuple(UNCERTAINTY_COVARIANCES):
            arr = _optional_vector(name, getattr(self, name), n)
            if arr is not None and name in UNCERTAINTY_SDS and (arr < 0).any():
                j = int(np.flatnonzero(arr < 0)[0])
                raise ValueError(f"{name} (an SD) must be >= 0; item index {j} has {arr[j]}")
            object.__setattr__(self, name, arr)
        for cov_name, (sd1, sd2) in UNCERTAINTY_COVARIANCES.items():
            cov = getattr(self, cov_name)
            if cov is None:
                continue
            s1, s2 = getattr(self, sd1), getattr(self, sd2)
            if s1 is None or s2 is None:
                raise ValueError(f"{cov_name} needs both {sd1} and {sd2}")
            bad = np.flatnonzero(np.abs(cov) > s1 * s2 * (1 + 1e-9) + 1e-300)
            if bad.size:
                j = int(bad[0])
                raise ValueError(
                    f"{cov_name} implies |correlation| > 1 at item index {j} "
                    f"({cov_name}={cov[j]}, {sd1}={s1[j]}, {sd2}={s2[j]})"
                )
        n_draws = None
        for name in UNCERTAINTY_DRAWS:
            value = getattr(self, name)
            if value is None:
                continue
            arr = np.array(value, dtype=np.float64, copy=True)
            if arr.ndim != 2 or arr.shape[1] != n or arr.shape[0] < 1:
                raise ValueError(f"{name} must have shape (n_draws, {n}), got {arr.shape}")
            if n_draws is not None and arr.shape[0] != n_draws:
                raise ValueError(f"a_draws and b_draws need the same number of draws, got {n_draws} and {arr.shape[0]}")
            if not np.isfinite(arr).all():
                k, j = np.argwhere(~np.isfinite(arr))[0]
                raise ValueError(f"{name} is not finite at draw {k}, item index {j}")
            n_draws = arr.shape[0]
            arr.flags.writeable = False
            object.__setattr__(self, name, arr)
        object.__setattr__(self, "method", str(self.method))

    @property
    def n_draws(self) -> int:
        """Number of stored parameter draws (0 when the bank has none)."""
        for name in UNCERTAINTY_DRAWS:
            if getattr(self, name) is not None:
                return int(getattr(self, name).shape[0])
        return 0

    def ab_covariance(self) -> np.ndarray:
        """(J, 2, 2) covariance of (a_j, b_j): missing SDs count as 0, a missing ab_cov as 0."""
        zeros = np.zeros(self.n_items)
        va = zeros if self.a_sd is None else self.a_sd**2
        vb = zeros if self.b_sd is None else self.b_sd**2
        c = zeros if self.ab_cov is None else self.ab_cov
        out = np.empty((self.n_items, 2, 2))
        out[:, 0, 0], out[:, 1, 1], out[:, 0, 1], out[:, 1, 0] = va, vb, c, c
        return out

    def subset(self, index) -> "ItemUncertainty":
        """The uncertainty of the items selected by ``index`` (integer array, slice or boolean mask)."""
        kwargs = {}
        n = None
        for name in UNCERTAINTY_SDS + tuple(UNCERTAINTY_COVARIANCES):
            value = getattr(self, name)
            if value is not None:
                kwargs[name] = value[index]
                n = kwargs[name].shape[0]
        for name in UNCERTAINTY_DRAWS:
            value = getattr(self, name)
            if value is not None:
                kwargs[name] = value[:, index]
                n = kwargs[name].shape[1]
        if n is None:
            n = np.arange(self.n_items)[index].shape[0]
        return ItemUncertainty(n, method=self.method, **kwargs)
