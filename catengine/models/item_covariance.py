"""Per-item 2 x 2 covariance of the accuracy parameters (a_j, b_j): what the engine uses of a bank's
item-parameter uncertainty (docs/math.md §7.2-7.4).

A bank may describe its uncertainty by per-item SDs and a covariance (``/items`` ``a_sd``,
``b_sd``, ``ab_cov``), by bank draws (``/posterior`` ``a_draws``, ``b_draws``, dims (draw, item)),
or, as PSN-IRT banks do, by ``b_sd`` alone (slopes at their MAP). Every form reduces to the three
arrays here (draws: their sample moments), so the selection and estimation kernels have one input.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from catengine.models.params import _as_vector as _vector  # one validator of per-item vectors


@dataclass(frozen=True)
class ItemCovariance:
    """Var(a_j), Var(b_j), Cov(a_j, b_j) of every item (read-only float64 arrays).

    ``source`` says where they came from (e.g. "a_sd/b_sd/ab_cov", "draws (200)", "b_sd only").
    Each 2 x 2 matrix must be positive semi-definite (checked up to rounding).
    """

    a_var: np.ndarray
    b_var: np.ndarray
    ab_cov: np.ndarray
    source: str = ""
    n_items: int = field(init=False)

    def __post_init__(self):
        a = _vector("a_var", self.a_var, None)
        n = a.shape[0]
        b = _vector("b_var", self.b_var, n)
        c = _vector("ab_cov", self.ab_cov, n)
        for name, v in (("a_var", a), ("b_var", b)):
            bad = np.flatnonzero(v < 0)
            if bad.size:
                raise ValueError(f"{name} (a variance) is negative at item index {int(bad[0])} ({v[bad[0]]})")
        bad = np.flatnonzero(c * c > a * b * (1.0 + 1e-9) + 1e-300)
        if bad.size:
            j = int(bad[0])
            raise ValueError(
                f"the 2 x 2 covariance of (a, b) is not positive semi-definite at item index {j}: "
                f"var(a)={a[j]}, var(b)={b[j]}, cov={c[j]}"
            )
        object.__setattr__(self, "a_var", a)
        object.__setattr__(self, "b_var", b)
        object.__setattr__(self, "ab_cov", c)
        object.__setattr__(self, "n_items", n)

    @classmethod
    def from_sds(cls, a_sd=None, b_sd=None, ab_cov=None, *, n_items: int, source: str = "") -> "ItemCovariance":
        """From per-item SDs (missing ones: 0) and covariances (missing: 0)."""
        zeros = np.zeros(n_items)
        a = zeros if a_sd is None else _vector("a_sd", a_sd, n_items)
        b = zeros if b_sd is None else _vector("b_sd", b_sd, n_items)
        c = zeros if ab_cov is None else _vector("ab_cov", ab_cov, n_items)
        return cls(a * a, b * b, c, source=source)

    @classmethod
    def from_draws(cls, a_draws, b_draws, *, source: str = "") -> "ItemCovariance":
        """Sample moments of bank draws, each (n_draws, n_items) (ddof 1)."""
        A = np.asarray(a_draws, dtype=np.float64)
        B = np.asarray(b_draws, dtype=np.float64)
        if A.ndim != 2 or A.shape != B.shape or A.shape[0] < 2:
            raise ValueError(f"a_draws and b_draws must both have shape (n_draws >= 2, n_items), got {A.shape} and {B.shape}")
        Ac, Bc = A - A.mean(0), B - B.mean(0)
        k = A.shape[0] - 1
        return cls((Ac * Ac).sum(0) / k, (Bc * Bc).sum(0) / k, (Ac * Bc).sum(0) / k,
                   source=source or f"draws ({A.shape[0]})")

    @property
    def has_slope_uncertainty(self) -> bool:
        return bool(np.any(self.a_var > 0))

    def subset(self, index) -> "ItemCovariance":
        return ItemCovariance(self.a_var[index], self.b_var[index], self.ab_cov[index], source=self.source)
