"""PSN-IRT (neural 4PL) in numpy/numba with a scoped last-layer Laplace posterior (the Laplace-PSN-IRT paper, 2026).

* :class:`PSNCalibrator` -- fit / to_item_bank (scikit-learn contract).
* ``network``: :class:`PSNNetwork` (embedding tables, hand-derived backpropagation), :class:`Adam`
  (torch semantics, coupled weight decay, exact lazy table updates), :func:`fit_network`.
* ``laplace``: :class:`ReadoutPosterior`, ability / item-branch posteriors, evidence tuning.
* ``report``: :func:`calibration_report` (held-out NLL / ECE, reliability diagrams).
* ``replication``: :func:`split_half_check`, :func:`compare_ability_fits` (do the ability SDs
  match how far abilities move when the network is refitted?).
"""

from calibration.methods.psn.calibrator import PSNCalibrator
from calibration.methods.psn.laplace import (
    CURVATURES,
    ReadoutPosterior,
    fit_ability_posterior,
    fit_item_posterior,
    laplace_from_network,
    n_separated_pairs,
    p_ahead,
    tune_prior_precision,
)
from calibration.methods.psn.network import Adam, PSNNetwork, TrainingHistory, fit_network
from calibration.methods.psn.replication import RefitComparison, compare_ability_fits, split_half_check
from calibration.methods.psn.report import CalibrationReport, calibration_report, expected_calibration_error, reliability_diagram

__all__ = [
    "CURVATURES",
    "Adam",
    "CalibrationReport",
    "PSNCalibrator",
    "PSNNetwork",
    "ReadoutPosterior",
    "RefitComparison",
    "TrainingHistory",
    "calibration_report",
    "compare_ability_fits",
    "expected_calibration_error",
    "fit_ability_posterior",
    "fit_item_posterior",
    "fit_network",
    "laplace_from_network",
    "n_separated_pairs",
    "p_ahead",
    "reliability_diagram",
    "split_half_check",
    "tune_prior_precision",
]
