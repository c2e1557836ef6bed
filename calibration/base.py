"""The calibrator contract shared by every fitting method (scikit-learn style).

Settings go to ``__init__`` and are stored unchanged; ``fit(responses)`` validates, fits, sets
attributes ending in ``_`` (``n_iter_``, ``converged_`` and method-specific ones) and returns
``self``. Reaching ``max_iter`` without meeting the tolerance emits :class:`ConvergenceWarning`.
"""

from __future__ import annotations

import inspect
import warnings
from abc import ABC, abstractmethod

from catengine.errors import CatEngineError


class ConvergenceWarning(UserWarning):
    """The fit stopped at ``max_iter`` before meeting its convergence tolerance."""


class NotFittedError(CatEngineError, AttributeError):
    """A fitted attribute or export was requested before ``fit``."""


class BaseCalibrator(ABC):
    """Base class: parameter introspection, fitted-state checks and the convergence warning."""

    #: calibration_method attr written to banks ("saem" | "cbmm" | "psn-laplace")
    method_name: str = ""

    @classmethod
    def _param_names(cls) -> list[str]:
        sig = inspect.signature(cls.__init__)
        return [
            p.name
            for p in sig.parameters.values()
            if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]

    def get_params(self) -> dict:
        """The constructor settings, as given."""
        return {name: getattr(self, name) for name in self._param_names()}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"

    @abstractmethod
    def fit(self, responses) -> "BaseCalibrator":
        """Fit to a :class:`calibration.ResponseData` and return ``self``."""

    def _check_fitted(self) -> None:
        if not getattr(self, "_fitted", False):
            raise NotFittedError(f"this {type(self).__name__} is not fitted yet; call fit(responses) first")

    def _warn_not_converged(self, max_iter: int, detail: str = "") -> None:
        msg = f"{type(self).__name__} stopped at max_iter={max_iter} without meeting its tolerance"
        warnings.warn(msg + (f" ({detail})" if detail else ""), ConvergenceWarning, stacklevel=3)
