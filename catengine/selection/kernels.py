"""Public names of this package's compiled selection passes, for kernels in other packages (e.g.
``catengine.session._replay_kernel``). Defined and documented in ``catengine/selection/_kernels.py``;
import them from here, not from the private module.

``topk_info(model, thetas, weights, a, b, c, d, eligible, order, bound, k, best_idx, best_val)``:
the ``k`` eligible items of largest (weighted) Fisher information, best first.

``topk_expected_info_ab(model, theta, a, b, va, vb, cab, c, d, nodes, weights, nodes_s, weights_s,
eligible, order, bound, k, best_idx, best_val)``: the same for the Fisher information averaged over
each item's Gaussian (a, b) (``PosteriorExpectedInformation``), with the shorter rule
(``nodes_s``, ``weights_s``; at most ``NARROW_NODES`` nodes) where sd(z) is small.

``design_draw(values, from_expected, eligible, eps, u, out)``: (item, probability) of one design
draw of ``RandomisedSelection`` (its probabilities into ``out``: ``design_probabilities``; the
draw with the uniform ``u``: ``draw_index``, numpy's choice on the same uniform).
"""

from catengine.selection._kernels import (
    NARROW_NODES,
    design_draw,
    design_probabilities,
    draw_index,
    topk_expected_info_ab,
    topk_info,
)

__all__ = ["NARROW_NODES", "design_draw", "design_probabilities", "draw_index", "topk_expected_info_ab", "topk_info"]
