"""Public names of this package's compiled selection passes, for kernels in other packages (e.g.
``catengine.session._replay_kernel``). Defined and documented in ``catengine/selection/_kernels.py``;
import them from here, not from the private module.

``topk_info(model, thetas, weights, a, b, c, d, eligible, order, bound, k, best_idx, best_val)``:
the ``k`` eligible items of largest (weighted) Fisher information, best first.
"""

from catengine.selection._kernels import topk_info

__all__ = ["topk_info"]
