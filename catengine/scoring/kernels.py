"""Public names of this package's compiled score sums, for kernels in other packages (e.g.
``catengine.session._replay_kernel``). Defined and documented in ``catengine/scoring/_kernels.py``;
import them from here, not from the private module.

``expected_logistic(theta, sd, x, w, a, b, c, d, four_pl, out)``: E_q P_j for every item under
q = Normal(theta, sd^2) by the quadrature rule (x, w) (the randomised selector's expected
probabilities; a symmetric rule's nodes taken in pairs).
"""

from catengine.scoring._kernels import expected_logistic

__all__ = ["expected_logistic"]
