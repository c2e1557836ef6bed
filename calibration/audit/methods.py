"""Calibration methods the audits refit with, behind one small interface.

A *method* is a callable ``fit(data, rng, **options) -> Fit``: it calibrates a
:class:`~calibration.ResponseData` and returns the fitted abilities and item parameters on the
fit's own scale. Built-in names (``METHODS``):

==============  ===============================================  ====================
name            calibrator                                       fitted model
==============  ===============================================  ====================
``cbmm``        ``calibration.methods.cbmm.CBMMCalibrator``      2PL (logistic)
``saem``        ``calibration.methods.lart.LaRTSAEMCalibrator``  LaRT (probit + CoT)
``saem-irt``    ``LaRTSAEMCalibrator(use_cot=False)``            probit 2PL
``psn``         ``calibration.methods.psn.PSNCalibrator``        4PL (logistic)
==============  ===============================================  ====================

Every method of the registry ``calibration.methods.METHODS`` is here under its name: its fit reads
the calibrator contract's attributes (``item_params_``, ``theta_``, ``theta_sd_``, ``converged_``,
``n_iter_``); PSN's is rescaled to the standardised scale its banks use.

``options`` are passed to the calibrator's constructor (``progress`` is forced off); the
calibrator's ``rng`` is the replication's own stream. Any module-level function with the same
signature can be passed instead of a name (a lambda works only with ``n_workers=1``: worker
processes receive the function by reference).

A probit fit without CoT parameters (``saem-irt``) is represented as a ``lart`` ItemParams with
placeholder CoT parameters (omega = 0, phi = 1, lam = 1, rho = 0): the audits only evaluate
P(correct) and the accuracy Fisher information of fitted parameters, which ignore them.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace
from functools import partial

import numpy as np

from calibration.base import ConvergenceWarning
from calibration.methods import METHODS as REGISTRY
from calibration.methods import get_method
from catengine.models.params import ItemParams

__all__ = ["Fit", "METHODS", "NEEDS_COT", "fit_registered", "resolve_method"]


@dataclass(frozen=True)
class Fit:
    """What an audit needs from a calibration.

    ``theta`` (N,) abilities and ``params`` (fitted item parameters) on the fit's own scale,
    ``theta_sd`` (N,) posterior SDs if the method has them, ``has_cot``: whether ``params`` holds
    fitted CoT parameters (omega, phi, lam, rho), ``converged`` / ``n_iter`` from the calibrator.
    """

    theta: np.ndarray
    params: ItemParams
    theta_sd: np.ndarray | None = None
    has_cot: bool = False
    converged: bool = True
    n_iter: int = 0

    @property
    def link(self) -> str:
        """"probit" (lart params) or "logistic" (2pl / 4pl): the fitted response model's link."""
        return self.params.model.link


def _probit_params(a, b) -> ItemParams:
    j = np.asarray(a).size
    return ItemParams("lart", a=a, b=b, omega=np.zeros(j), phi=np.ones(j), lam=np.ones(j), rho=0.0)


def _fitted(calibrator_class, data, rng, options):
    """Fit ``calibrator_class(**options)`` quietly; returns (calibrator, converged).

    Converged means the calibrator says so and emitted no ConvergenceWarning on the way.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        cal = calibrator_class(**{"progress": False, **options, "rng": rng}).fit(data)
    converged = bool(getattr(cal, "converged_", True)) and not any(
        issubclass(w.category, ConvergenceWarning) for w in caught
    )
    return cal, converged


def fit_registered(data, rng, *, method: str, **options) -> Fit:
    """Fit with the registered ``method`` (``calibration.methods.METHODS``): the contract's attributes."""
    return _registered_fit(method, data, rng, options)[0]


def _registered_fit(name, data, rng, options):
    """(Fit, calibrator) of the registered method ``name``."""
    cal, converged = _fitted(get_method(name).calibrator, data, rng, options)
    params = cal.item_params_
    has_cot = params is not None and params.model.has_cot
    if params is None and hasattr(cal, "omega_"):  # SAEM's IRT-only mode: probit, no CoT parameters
        params = _probit_params(cal.a_, cal.b_)
    sd = np.asarray(cal.theta_sd_, dtype=float)
    return Fit(theta=np.asarray(cal.theta_, dtype=float), params=params, theta_sd=None if np.isnan(sd).all() else sd,
               has_cot=has_cot, converged=converged, n_iter=int(cal.n_iter_)), cal


def fit_cbmm(data, rng, **options) -> Fit:
    """cBMM 2PL calibration (docs/math.md §2); reported scale: standardised over the subjects."""
    return _registered_fit("cbmm", data, rng, options)[0]


def fit_saem(data, rng, **options) -> Fit:
    """LaRT SAEM calibration (docs/math.md §1) with CoT lengths; MAP abilities with posterior SDs."""
    return _registered_fit("saem", data, rng, options)[0]


def fit_saem_irt(data, rng, **options) -> Fit:
    """The IRT-only mode of the SAEM calibrator (probit 2PL, CoT lengths ignored)."""
    return fit_saem(data, rng, **{**options, "use_cot": False})


def fit_psn(data, rng, **options) -> Fit:
    """PSN-IRT 4PL (docs/math.md §3); abilities standardised over the subjects as the bank export does."""
    fit, cal = _registered_fit("psn", data, rng, options)
    post = cal.theta_posterior(standardize=True)  # its location / scale are the bank export's
    theta = (fit.theta - post["location"]) / post["scale"]
    return replace(fit, theta=theta, params=cal.item_params(standardize=True), theta_sd=np.asarray(post["sd"], dtype=float))


def calibrator_for(name: str, options: dict) -> tuple[type, dict]:
    """(calibrator class, constructor options) of a registered method, for banks made by the default
    path (``to_item_bank``); ``saem-irt`` has no bank (an IRT-only LaRT fit has no CoT parameters)."""
    if name in REGISTRY:
        return REGISTRY[name].calibrator, dict(options)
    raise ValueError(f"method {name!r} has no item bank of its own (default path); use bank='fit'")


#: audit fit function of each registered method (``_registered_fit`` unless the method needs a
#: rescaling to its bank's scale), plus variants
_FITS = {"cbmm": fit_cbmm, "saem": fit_saem, "psn": fit_psn}
_VARIANTS = {"saem": {"saem-irt": fit_saem_irt}}  # listed right after the method they vary
METHODS = {
    key: fit
    for name in REGISTRY
    for key, fit in {name: _FITS.get(name, partial(fit_registered, method=name)), **_VARIANTS.get(name, {})}.items()
}
#: methods that need CoT lengths (a ``lart`` truth)
NEEDS_COT = frozenset(name for name, m in REGISTRY.items() if m.needs_cot)


def calibrator_class(name: str):
    """The calibrator class behind audit method ``name`` (a registered method or one of its
    variants, e.g. ``saem-irt``), or None for a name that is neither (a caller's fit function)."""
    if name in REGISTRY:
        return REGISTRY[name].calibrator
    for parent, variants in _VARIANTS.items():
        if name in variants:
            return REGISTRY[parent].calibrator
    return None


def resolve_method(method) -> tuple[str, object]:
    """(name, fit function) of a method given by name, by ``(name, function)`` or as a function."""
    if isinstance(method, str):
        key = method.strip().lower()
        if key not in METHODS:
            raise ValueError(f"unknown method {method!r}; allowed: {', '.join(METHODS)} (or a fit function)")
        return key, METHODS[key]
    if isinstance(method, tuple) and len(method) == 2 and isinstance(method[0], str) and callable(method[1]):
        return method[0], method[1]
    if callable(method):
        name = getattr(method, "__name__", None) or type(method).__name__
        return str(name), method
    raise TypeError(f"a method is a name ({', '.join(METHODS)}), a (name, fit function) pair or a function, got {method!r}")
