"""The item-selection role, the per-step selection state and the bank view selectors see."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from catengine.errors import BankExhaustedError
from catengine.estimation.base import TraitEstimate
from catengine.estimation.state import ResponseState, full_cd, model_code
from catengine.estimation.interval_calibration import IntervalCalibration
from catengine.models.item_covariance import ItemCovariance
from catengine.models.params import ItemParams
from catengine.models.response_models import RESPONSE_MODELS
from catengine.models.score_factors import ScoreFactors
from catengine.selection import _kernels as SK
from catengine.validation import is_integer


class ItemTable:
    """What selectors and exposure controls may know about a bank, as numpy arrays (no xarray).

    Built once per bank by the session: ``params``, ``item_ids``, optional ``b_sd`` (posterior SD of
    the intercepts), optional ``covariance`` (per-item Var(a), Var(b), Cov(a, b); from ``b_sd`` alone
    when only that is given), optional ``interval_calibration`` (the bank's stored c(L)), and
    ``metadata(field)`` (a per-item array, e.g. the benchmark of each item), optional
    ``score_factors`` (:class:`~catengine.models.score_factors.ScoreFactors`, the bank's model for
    the full-benchmark score), optional ``population`` (the calibration LLMs' traits and
    accuracies, :class:`~catengine.scoring.standing.Population`).
    Derived arrays (c/d filled in, LaRT CoT information phi^2/lam^2) are computed once and cached.
    """

    def __init__(self, params: ItemParams, item_ids=None, b_sd=None, metadata: Callable[[str], np.ndarray] | None = None,
                 covariance: ItemCovariance | None = None, interval_calibration: IntervalCalibration | None = None,
                 score_factors: ScoreFactors | None = None, population=None):
        if not isinstance(params, ItemParams):
            raise TypeError(f"ItemTable needs an ItemParams, got {type(params).__name__}")
        self.params = params
        self.n_items = params.n_items
        self.item_ids = tuple(str(v) for v in item_ids) if item_ids is not None else tuple(str(k) for k in range(params.n_items))
        if len(self.item_ids) != self.n_items:
            raise ValueError(f"{len(self.item_ids)} item ids for {self.n_items} items")
        if b_sd is not None:
            b_sd = np.ascontiguousarray(b_sd, dtype=np.float64)
            if b_sd.shape != (self.n_items,) or not np.all(np.isfinite(b_sd)) or np.any(b_sd < 0):
                raise ValueError("b_sd must hold one finite, non-negative posterior SD per item")
            b_sd.flags.writeable = False
        self.b_sd = b_sd
        if covariance is None and b_sd is not None:
            covariance = ItemCovariance.from_sds(b_sd=b_sd, n_items=self.n_items, source="b_sd only (slopes at their MAP)")
        if covariance is not None and covariance.n_items != self.n_items:
            raise ValueError(f"item covariance has {covariance.n_items} items, the bank {self.n_items}")
        #: per-item 2 x 2 covariance of (a, b) (None: the bank carries no item-parameter uncertainty)
        self.covariance = covariance
        #: the bank's cross-fitted interval calibration (None: not stored)
        self.interval_calibration = interval_calibration
        if score_factors is not None:
            if not isinstance(score_factors, ScoreFactors):
                raise TypeError(f"score_factors must be a ScoreFactors, got {type(score_factors).__name__}")
            if score_factors.n_items != self.n_items:
                raise ValueError(f"score factors have {score_factors.n_items} items, the bank {self.n_items}")
        #: the bank's score-factor model (None: the bank carries none)
        self.score_factors = score_factors
        #: the calibration LLMs' traits and accuracies (``catengine.scoring.standing.Population``; None: not stored)
        self.population = population
        self._metadata = metadata
        self.model = model_code(params)
        self.c, self.d = full_cd(params)
        self.cot_info = params.model.cot_information(params)  # None without a CoT part
        self.cot_info_max = float(self.cot_info.max()) if self.cot_info is not None else 0.0
        # trait-free upper bound of each item's information about theta (a^2/4 logistic, 2a^2/pi
        # probit, 0 for a <= 0), inflated by 1e-12 against rounding, and the items in decreasing
        # order of it: the selection kernels stop scanning once no remaining item can win.
        a = params.a
        peak = params.model.information_peak
        bound = np.where(a > 0, a * a * peak, 0.0) * (1.0 + 1e-12)
        bound.flags.writeable = False
        self.info_bound = bound
        self.info_order = np.argsort(-bound, kind="stable").astype(np.int64)
        self.info_order.flags.writeable = False
        # the same for the posterior-expected information over (a, b): E[a^2] = a^2 + Var(a)
        if covariance is not None:
            if params.model.has_asymptotes:  # the asymptotes lower each item's peak below 1/4
                from catengine.selection._kernels import peak_unit_info_4pl

                peak = peak_unit_info_4pl(np.ascontiguousarray(self.c), np.ascontiguousarray(self.d))
            ebound = np.where(a > 0, (a * a + covariance.a_var) * peak, 0.0) * (1.0 + 1e-12)
            ebound.flags.writeable = False
            self.expected_info_bound = ebound
            self.expected_info_order = np.argsort(-ebound, kind="stable").astype(np.int64)
            self.expected_info_order.flags.writeable = False
        else:
            self.expected_info_bound = self.expected_info_order = None
        self._groups: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def max_information(self, theta: float, available: np.ndarray) -> float:
        """The largest Fisher information about theta (accuracy part) among the ``available`` items."""
        idx = np.empty(1, dtype=np.int64)
        val = np.empty(1)
        SK.topk_info(self.model, np.array([theta], dtype=np.float64), np.ones(1), self.params.a, self.params.b,
                     self.c, self.d, available, self.info_order, self.info_bound, 1, idx, val)
        return float(val[0])

    def metadata(self, field: str) -> np.ndarray:
        if self._metadata is None:
            raise KeyError(f"this item table has no metadata (asked for {field!r})")
        return np.asarray(self._metadata(field))

    def groups(self, field: str) -> tuple[np.ndarray, np.ndarray]:
        """(labels, codes): the distinct values of a metadata field and each item's code into them."""
        if field not in self._groups:
            labels, codes = np.unique(np.asarray(self.metadata(field)).astype(str), return_inverse=True)
            self._groups[field] = (labels, codes.astype(np.int64))
        return self._groups[field]


class SelectionState:
    """What a selector sees at one step.

    ``estimate`` (current posterior summary), ``eligible`` (bool mask over the bank: not yet
    administered and allowed by exposure / content control; selectors must never propose outside
    it), ``responses`` (the answers so far), ``items`` (the bank view) and ``log_posterior`` (the
    unnormalised marginal log posterior of theta at given points, from the session's estimator).
    """

    __slots__ = ("estimate", "eligible", "responses", "items", "log_posterior")

    def __init__(self, estimate: TraitEstimate, eligible: np.ndarray, responses: ResponseState, items: ItemTable,
                 log_posterior: Callable[[np.ndarray], np.ndarray] | None = None):
        self.estimate = estimate
        self.eligible = eligible
        self.responses = responses
        self.items = items
        self.log_posterior = log_posterior


class ItemSelector(ABC):
    """Role: rank the eligible items of a bank for the next administration.

    ``candidates(params, state, rng, k)`` returns up to ``k`` distinct eligible item indices, best
    first (ties: lower index first), and the criterion value of each; it raises
    :class:`BankExhaustedError` when nothing is eligible. ``select`` is the k = 1 shortcut.
    Implementations are frozen dataclasses validated in ``__post_init__``.
    """

    name: ClassVar[str] = ""
    #: whether the selector needs a response model with a CoT part (the (theta, tau) precision)
    needs_cot: ClassVar[bool] = False

    @abstractmethod
    def candidates(self, params: ItemParams, state: SelectionState, rng: np.random.Generator, k: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """(indices, criterion values) of up to ``k`` best eligible items, best first."""

    def select(self, params: ItemParams, state: SelectionState, rng: np.random.Generator) -> int:
        return int(self.candidates(params, state, rng, 1)[0][0])

    def explain_criterion(self, value: float) -> str:
        """The criterion value of a proposed item in words, with the sign and units a reader expects."""
        return f"information at the current estimate = {value:.4g}"

    def check_bank(self, items: ItemTable) -> None:
        """Raise ValueError if this selector cannot work with the bank (called once per session)."""
        if self.needs_cot and not items.params.model.has_cot:
            allowed = [name for name, model in RESPONSE_MODELS.items() if model.has_cot]
            raise ValueError(
                f"selector {type(self).__name__} works with response models {', '.join(allowed)}, "
                f"not {items.params.response_model!r}"
            )


@dataclass(frozen=True)
class DrawContext:
    """What a proposal was chosen from: the first ``answered`` answers of the session's history, the
    items proposed before it in the same batch (``selected``, bank indices: not administrable when it
    was chosen) and the trait ``estimate`` the selector saw (in a batch, the session's estimate
    fantasised over those items, ``catengine.selection.batch``). A design draw's probabilities and
    the model's predictions at it are recomputed from this (``catengine.session.scoring``): they
    must be those of the moment the item was drawn, before the answers to it and to the items drawn
    after it in the batch."""

    answered: int
    selected: tuple[int, ...]
    estimate: TraitEstimate


def is_design_draw(selector: ItemSelector, state: SelectionState) -> bool:
    """Whether ``selector``'s next item is a known-probability design draw (its criterion value is
    then the item's selection probability): every step of a selector that draws every item with
    known probabilities (``draws_by_design = True``), the scheduled steps of one that mixes
    (``is_design_draw(state)``), never for the others."""
    if getattr(selector, "draws_by_design", False):
        return True
    rule = getattr(selector, "is_design_draw", None)
    return bool(rule(state)) if callable(rule) else False


def run_topk(kernel, k: int, *args) -> tuple[np.ndarray, np.ndarray]:
    """Call a ``topk_*`` kernel with fresh output buffers; raise BankExhaustedError if nothing is eligible."""
    best_idx = np.empty(k, dtype=np.int64)
    best_val = np.empty(k)
    cnt = kernel(*args, k, best_idx, best_val)
    if cnt == 0:
        raise BankExhaustedError("no eligible item is left to administer (all administered, excluded or blocked)")
    return best_idx[:cnt], best_val[:cnt]


def check_k(k) -> int:
    if not is_integer(k) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    return int(k)
