"""Item parameters of every response model, as frozen float64 arrays.

One parameterisation for every bank (docs/math.md §0): the linear predictor is slope-intercept,
``z = a * theta + b`` with ``b`` an intercept (larger = easier).

* ``lart``: P(correct) = Phi(z); log(T + offset) ~ Normal(omega - phi * tau, lam^2), with
  (theta, tau) standard bivariate normal with correlation ``rho``. ``lam`` is an SD.
* ``2pl``: P = logistic(z).  (1PL: all a equal.)
* ``4pl``: P = c + (d - c) logistic(z), c the lower and d the upper asymptote (3PL: d = 1).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

RESPONSE_MODELS = ("lart", "2pl", "4pl")

_REQUIRED = {
    "lart": ("a", "b", "omega", "phi", "lam"),
    "2pl": ("a", "b"),
    "4pl": ("a", "b", "c", "d"),
}


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
        if self.response_model not in RESPONSE_MODELS:
            raise ValueError(
                f"unknown response_model {self.response_model!r}; allowed: {', '.join(RESPONSE_MODELS)}"
            )
        required = _REQUIRED[self.response_model]
        n = None
        for name in ("a", "b", "c", "d", "omega", "phi", "lam"):
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
        if self.response_model != "lart" and rho != 0.0:
            raise ValueError(f"rho is only defined for lart banks, got rho={rho} for {self.response_model!r}")
        object.__setattr__(self, "rho", rho)
        if self.response_model == "4pl":
            c, d = self.c, self.d
            bad = np.flatnonzero((c < 0) | (d > 1) | (c >= d))
            if bad.size:
                j = int(bad[0])
                raise ValueError(
                    f"4PL asymptotes need 0 <= c < d <= 1; item index {j} has c={c[j]}, d={d[j]}"
                )
        if self.response_model == "lart":
            bad = np.flatnonzero(self.lam <= 0)
            if bad.size:
                j = int(bad[0])
                raise ValueError(f"lam (CoT residual SD) must be > 0; item index {j} has lam={self.lam[j]}")

    @property
    def parameter_names(self) -> tuple[str, ...]:
        return _REQUIRED[self.response_model]

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
