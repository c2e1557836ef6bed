"""Logistic 1-4PL response model (banks with ``response_model`` "2pl" or "4pl").

Slope-intercept form (docs/math.md §0): z_j = a_j theta + b_j, b_j an easiness intercept.

* 2PL (and 1PL = equal slopes): P_j = sigmoid(z_j). A "2pl" ItemParams has no c/d; it is treated as
  c = 0, d = 1 through a specialised fast path.
* 4PL (3PL = d of 1): P_j = c_j + (d_j - c_j) sigmoid(z_j).

Shapes: ``theta`` is a float or an array of any shape S. Per-item outputs have shape S + (n,)
(n = number of selected items); summed outputs (log-likelihood, gradient, Hessian) have shape S,
and are numpy floats when ``theta`` is a scalar. ``items`` is an integer index array into the bank
(``None``: every item, in bank order); ``responses`` holds one 0/1 answer per entry of ``items``.
"""

from __future__ import annotations

import numpy as np

from . import _kernels as K
from ._inputs import _as_items, _as_responses, _as_theta, _summed, _vec
from .params import ItemParams

#: the functions every response-model module provides (lart.py adds its CoT functions to these)
_MODEL_FUNCTIONS = (
    "prob_correct",
    "log_likelihood",
    "trait_gradient",
    "trait_hessian",
    "trait_derivatives",
    "item_information",
)
__all__ = list(_MODEL_FUNCTIONS)


# ----------------------------------------------------------------------------- shared input checks
# (also used by lart.py; the shape helpers live in _inputs.py)


def _check_model(params, allowed: tuple[str, ...], where: str) -> None:
    if not isinstance(params, ItemParams):
        raise TypeError(f"{where} needs an ItemParams, got {type(params).__name__}")
    if params.response_model not in allowed:
        raise ValueError(
            f"{where} works on response_model {' or '.join(map(repr, allowed))}, "
            f"got an ItemParams with response_model {params.response_model!r}"
        )


# ----------------------------------------------------------------------------- public API

_LOGISTIC = ("2pl", "4pl")


def _logistic_kernel(where: str, kernel_2pl, kernel_4pl, params: ItemParams, theta, items, responses=None):
    """Validate the inputs of ``logistic.<where>`` and run the bank's kernel on the selected items:
    ``kernel_2pl(theta, a, b[, y])`` or ``kernel_4pl(theta, a, b, c, d[, y])`` (``y``: the
    ``responses``, when given). Returns (kernel output, the shape S of ``theta``)."""
    _check_model(params, _LOGISTIC, f"logistic.{where}")
    th, shape = _as_theta(theta)
    idx = _as_items(params, items)
    y = () if responses is None else (_as_responses(responses, idx.shape[0]),)
    a, b = _vec(params.a, idx), _vec(params.b, idx)
    if params.response_model == "2pl":
        return kernel_2pl(th, a, b, *y), shape
    return kernel_4pl(th, a, b, _vec(params.c, idx), _vec(params.d, idx), *y), shape


def prob_correct(params: ItemParams, theta, items=None) -> np.ndarray:
    """P(correct) of each selected item: shape S + (n,).

    2PL: sigmoid(a theta + b); 4PL: c + (d - c) sigmoid(a theta + b).
    """
    _check_model(params, _LOGISTIC, "logistic.prob_correct")
    return params.model.compiled_probability(params, theta, items)


def trait_derivatives(params: ItemParams, theta, responses, items=None):
    """(log-likelihood, d/dtheta, d2/dtheta2) of the answers, each of shape S.

    l(theta) = sum_j y_j log P_j + (1 - y_j) log(1 - P_j), computed from log-sigmoids (finite for
    any z). 2PL: dl = sum a (y - P), d2l = -sum a^2 P (1 - P). 4PL: see ``_kernels.derivs_4pl``.
    """
    out, shape = _logistic_kernel("trait_derivatives", K.derivs_2pl, K.derivs_4pl, params, theta, items, responses)
    return _summed(out[:, 0], shape), _summed(out[:, 1], shape), _summed(out[:, 2], shape)


def log_likelihood(params: ItemParams, theta, responses, items=None):
    """Log-likelihood sum_j [y_j log P_j + (1 - y_j) log(1 - P_j)] of the answers; shape S."""
    return trait_derivatives(params, theta, responses, items)[0]


def trait_gradient(params: ItemParams, theta, responses, items=None):
    """d/dtheta of the log-likelihood, sum_j P'_j (y_j - P_j) / (P_j (1 - P_j)); shape S."""
    return trait_derivatives(params, theta, responses, items)[1]


def trait_hessian(params: ItemParams, theta, responses, items=None):
    """d2/dtheta2 of the log-likelihood (observed, negative of the observed information); shape S."""
    return trait_derivatives(params, theta, responses, items)[2]


def item_information(params: ItemParams, theta, items=None) -> np.ndarray:
    """Fisher information of each selected item at theta: shape S + (n,).

    2PL: a^2 P (1 - P). 4PL: a^2 (P - c)^2 (d - P)^2 / ((d - c)^2 P (1 - P)), evaluated as
    a^2 s (1 - s) [(P - c)/P] [(d - P)/(1 - P)] with s = sigmoid(z) (no 0/0 in the tails).
    """
    _check_model(params, _LOGISTIC, "logistic.item_information")
    return params.model.information(params, theta, items)
