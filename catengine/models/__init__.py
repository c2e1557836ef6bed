"""Response models: probabilities, log-likelihoods, trait derivatives and Fisher information.

* ``catengine.models.response_models``: one object per response model (``RESPONSE_MODELS``, name ->
  object; ``response_model(name)``; ``ItemParams.model``): what a bank of the model stores, its
  capabilities (``has_cot``, ``link``, ``has_asymptotes``) and its formulas (probability, slope,
  information, the CoT part, the simulation draw). Callers ask the object, never the name.
* ``catengine.models.logistic``: logistic 1-4PL (banks "2pl", "4pl").
* ``catengine.models.lart``: LaRT, probit accuracy + log-normal CoT length (bank "lart"); CoT
  lengths enter on the log scale, ``lart.log_cot_length(tokens, cot_offset=1.0)`` converts counts.
* ``catengine.models.expected_information``: 4PL information averaged over a Gaussian posterior
  of b (Gauss-Hermite by default, Monte Carlo for comparison).
* ``prob_correct`` / ``fisher_information``: ask ``params.model``.
* Stable numba primitives for other kernels: ``catengine.models.kernels`` (public names; defined
  and documented in ``catengine.models._kernels``).
"""

from . import expected_information, lart, logistic
from .information import fisher_information, prob_correct
from .params import ItemParams, ItemUncertainty
from .response_models import RESPONSE_MODELS, ResponseModel, response_model

__all__ = [
    "ItemParams", "ItemUncertainty", "RESPONSE_MODELS", "ResponseModel", "expected_information", "lart", "logistic",
    "prob_correct", "fisher_information", "response_model",
]
