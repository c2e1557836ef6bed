"""Model-agnostic entry points: ask the bank's response model object (``params.model``).

Use these where the caller does not care which response model a bank uses (item selection,
stopping rules). For LaRT they concern the accuracy part only (the information about theta of
one item, u_j = a_j^2 h(a_j theta + b_j)); the 2-D information diag(u_j, v_j) is
``lart.item_information``.
"""

from __future__ import annotations

import numpy as np

from .params import ItemParams

__all__ = ["prob_correct", "fisher_information"]


def _check(params) -> None:
    if not isinstance(params, ItemParams):
        raise TypeError(f"expected an ItemParams, got {type(params).__name__}")


def prob_correct(params: ItemParams, theta, items=None) -> np.ndarray:
    """P(correct) of each selected item under the bank's response model (compiled kernels): shape S + (n,)."""
    _check(params)
    return params.model.compiled_probability(params, theta, items)


def fisher_information(params: ItemParams, theta, items=None) -> np.ndarray:
    """Fisher information about theta of each selected item: shape S + (n,).

    2PL a^2 P(1-P); 4PL a^2 (P-c)^2 (d-P)^2 / ((d-c)^2 P(1-P)); LaRT a^2 h(a theta + b).
    """
    _check(params)
    return params.model.information(params, theta, items)
