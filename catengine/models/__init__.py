"""Response models: probabilities, log-likelihoods, trait derivatives and Fisher information.

* ``catengine.models.logistic``: logistic 1-4PL (banks "2pl", "4pl").
* ``catengine.models.lart``: LaRT, probit accuracy + log-normal CoT length (bank "lart"); CoT
  lengths enter on the log scale, ``lart.log_cot_length(tokens, cot_offset=1.0)`` converts counts.
* ``catengine.models.expected_information``: 4PL information averaged over a Gaussian posterior
  of b (Gauss-Hermite by default, Monte Carlo for comparison).
* ``prob_correct`` / ``fisher_information``: dispatch on ``params.response_model``.
* Stable numba primitives for other kernels: ``catengine.models._kernels`` (see its docstring).
"""

from . import expected_information, lart, logistic
from .information import fisher_information, prob_correct
from .params import RESPONSE_MODELS, ItemParams, ItemUncertainty

__all__ = [
    "ItemParams", "ItemUncertainty", "RESPONSE_MODELS", "expected_information", "lart", "logistic", "prob_correct", "fisher_information",
]
