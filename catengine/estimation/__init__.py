"""Trait estimation: MAP (Newton; exact 2-D for LaRT) and EAP (quadrature), with posterior SDs.

* :class:`ResponseState` — one subject's answers as incremental sufficient statistics.
* :class:`TraitEstimator` — the role (``estimate(params, state, start) -> TraitEstimate``);
  :class:`MAPEstimator`, :class:`EAPEstimator` implement it.
* :class:`TraitPrior` — Gaussian population prior; :class:`TraitEstimate` — the result.
* ``ESTIMATORS`` — name -> class registry for configs ("map", "eap").
"""

from catengine.estimation.base import GaussianPart, TraitEstimate, TraitEstimator, TraitPrior, gaussian_part
from catengine.estimation.eap import EAPEstimator, GridEdgeWarning
from catengine.estimation.map import MAPEstimator
from catengine.estimation.state import ResponseState

ESTIMATORS = {cls.name: cls for cls in (MAPEstimator, EAPEstimator)}

__all__ = [
    "ESTIMATORS",
    "EAPEstimator",
    "GridEdgeWarning",
    "GaussianPart",
    "MAPEstimator",
    "ResponseState",
    "TraitEstimate",
    "TraitEstimator",
    "TraitPrior",
    "gaussian_part",
]
