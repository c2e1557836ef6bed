"""Full-benchmark scores from an adaptive test: the model-based prediction (docs/math.md §7.6) and the
design-based estimate that uses the model only as a control variate (docs/math.md §7.7-§7.8). Numerics only: arrays in,
``ScoreEstimate`` pieces out (the session glue is ``catengine.session.scoring``)."""

from catengine.scoring.design import (
    DesignEstimate,
    DesignNotRandomisedError,
    DrawSums,
    design_estimate,
    design_terms,
    design_terms_from_sums,
    draw_sums,
    group_sums,
    model_variance_terms,
    model_variances_from_sums,
    power_tuning,
    predictable_power_tuning,
)
from catengine.scoring.estimate import ScoreEstimate
from catengine.scoring.model_based import (
    DEFAULT_SCORE_NODES,
    MIN_SMEARING_ITEMS,
    SCORE_FACTOR_NODES,
    GroupPrediction,
    expected_cot_lengths,
    expected_probabilities,
    predict_accuracy,
    predict_accuracy_factors,
    predict_cot_total,
    response_and_slope,
    smearing_moments,
    z_quantile,
)
from catengine.scoring.random_items import random_mean_mae

__all__ = [
    "DEFAULT_SCORE_NODES",
    "DesignEstimate",
    "DesignNotRandomisedError",
    "DrawSums",
    "GroupPrediction",
    "MIN_SMEARING_ITEMS",
    "SCORE_FACTOR_NODES",
    "ScoreEstimate",
    "design_estimate",
    "design_terms",
    "design_terms_from_sums",
    "draw_sums",
    "expected_cot_lengths",
    "expected_probabilities",
    "group_sums",
    "model_variance_terms",
    "model_variances_from_sums",
    "power_tuning",
    "predictable_power_tuning",
    "predict_accuracy",
    "predict_accuracy_factors",
    "predict_cot_total",
    "random_mean_mae",
    "response_and_slope",
    "smearing_moments",
    "z_quantile",
]
