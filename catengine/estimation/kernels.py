"""Public names of this package's compiled estimation steps, for kernels in other packages (e.g.
``catengine.session._replay_kernel``, which replays whole sessions in one call). Each is a numba
``@njit`` function defined and documented in ``catengine/estimation/_kernels.py``; import them from
here, not from the private module.

``map_newton_1d(model, a, b, c, d, y, n, q, m, theta0, max_iter, tol, grid_start)``: the MAP of
theta given the first ``n`` answers' parameters; ``item_parameter_sensitivity(model, theta, a, b, c,
d, y, va, vb, vab, n)``: the item-uncertainty term of the trait variance (docs/math.md §7.3).
"""

from catengine.estimation._kernels import item_parameter_sensitivity, map_newton_1d

__all__ = ["item_parameter_sensitivity", "map_newton_1d"]
