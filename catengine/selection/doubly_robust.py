"""Known-probability design draws, with an optional adaptive share: the design behind the default score.

A session's items come from two kinds of steps. At a *design draw* the item is drawn at random from
the items not yet answered, with a known probability pi_t(j) > 0 for every one of them
(:class:`RandomisedSelection`: sqrt(f (1 - f)) weights, f the model's prediction, mixed with a
uniform floor). At an *adaptive* step the bank's adaptive selector picks the most useful item for
the trait (D-optimal in the score factors, maximum information, ...). Which kind a step is depends
only on the answers before it (a predictable schedule), so the design draws keep the martingale
property behind the design-based score (docs/math.md §7.7-§7.8): whatever the model gets wrong
about the items it did not ask, the draws measure it without bias.

By default every step is a design draw (``share = 1``): the default score is the design-based
estimate with the model as its control variate, and each draw that goes to an adaptive step is a
draw it does not get (on MATH500 with half the steps adaptive its error after 25 items was 1.07x
the mean of as many random items', against 0.89x with every step a draw; docs/validation.md).
With ``share`` < 1 the schedule is: the first ``opening`` steps are design draws (in batches,
``CATSession.next_items``, every slot of a batch chosen before ``opening`` answers are known);
after them, step t (t = 0, 1, ... answers so far) is a design draw when
floor((t + 1) s) > floor(t s), with the share s = ``share`` while the LLM stands inside the
calibration population and s = ``extrapolation_share`` once its answers place it beyond it
(``catengine.scoring.standing``), where the model's prediction of the unasked items is least
trustworthy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from catengine.selection.base import ItemSelector, ItemTable, SelectionState, check_k
from catengine.selection.randomised import RandomisedSelection


def _check_share(name, value):
    ok = not isinstance(value, bool) and isinstance(value, (int, float, np.integer, np.floating)) and math.isfinite(value)
    if not ok or not 0.0 < value <= 1.0:
        raise ValueError(f"{name} must lie in (0, 1], got {value!r}")


def scheduled_design_draw(n_answered: int, share: float) -> bool:
    """Whether step ``n_answered`` + 1 is a design draw under the share ``share`` (floor schedule:
    share 0.5 draws steps 1, 3, 5, ...; share 1 draws every step)."""
    t = int(n_answered)
    return math.floor((t + 1) * share + 1e-9) > math.floor(t * share + 1e-9)


@dataclass(frozen=True)
class DoublyRobustSelection(ItemSelector):
    """Known-probability design draws by ``design`` and, with ``share`` < 1, adaptive steps by
    ``adaptive`` (module docstring).

    ``adaptive``: the selector of the adaptive steps (None: the bank's own adaptive default,
    ``catengine.selection.default_selector``); ``design``: the known-probability rule of the
    design draws (default :class:`RandomisedSelection`: sqrt-variance weights mixed half and half
    with uniform); ``share`` in (0, 1]: the share of design draws while the LLM stands inside the
    calibration population (default 1: every step); ``extrapolation_share`` in [share, 1]: the
    share once it stands beyond it; ``opening`` >= 0: the number of steps drawn by design before
    the schedule starts (with ``share`` < 1). The criterion value of a design draw is its selection
    probability, of an adaptive step the adaptive selector's criterion; :meth:`is_design_draw` tells
    them apart (the session stores it as ``StepRecord.design``)."""

    name: ClassVar[str] = "doubly-robust"
    adaptive: ItemSelector | None = None
    design: RandomisedSelection = field(default_factory=RandomisedSelection)
    share: float = 1.0
    extrapolation_share: float = 1.0
    opening: int = 5

    def __post_init__(self):
        if self.adaptive is not None and not isinstance(self.adaptive, ItemSelector):
            raise TypeError(f"adaptive must be an ItemSelector, got {type(self.adaptive).__name__}")
        if isinstance(self.adaptive, DoublyRobustSelection):
            raise ValueError("adaptive cannot itself be a DoublyRobustSelection")
        if not isinstance(self.design, RandomisedSelection):
            raise TypeError(f"design must be a RandomisedSelection (known probabilities), got {type(self.design).__name__}")
        _check_share("share", self.share)
        _check_share("extrapolation_share", self.extrapolation_share)
        if isinstance(self.opening, bool) or not isinstance(self.opening, (int, np.integer)) or self.opening < 0:
            raise ValueError(f"opening must be an integer >= 0, got {self.opening!r}")
        if self.extrapolation_share < self.share:
            raise ValueError(f"extrapolation_share ({self.extrapolation_share!r}) must be at least share ({self.share!r})")

    @property
    def n_nodes(self) -> int:  # the design rule's quadrature, which the design-based score recomputes
        return self.design.n_nodes

    def adaptive_for(self, items: ItemTable) -> ItemSelector:
        if self.adaptive is not None:
            return self.adaptive
        from catengine.selection import default_selector

        return default_selector(items.params.model, items.covariance is not None, items.score_factors is not None)

    @staticmethod
    def extrapolating(state: SelectionState) -> bool:
        """Whether the answers so far place the LLM beyond the calibration population
        (``catengine.scoring.standing``: against the calibration runs' answers to the same items,
        or by the trait estimate on banks that store no answers)."""
        from catengine.scoring.standing import extrapolation_flag

        r = state.responses
        items, correct = ((), ()) if r is None else (r.items, r.correct)
        return bool(extrapolation_flag(state.items.population, state.estimate.theta, items, correct))

    def share_at(self, state: SelectionState) -> float:
        """The design share that applies at this step (``extrapolation_share`` beyond the calibration population)."""
        if self.extrapolation_share == self.share:
            return self.share
        return self.extrapolation_share if self.extrapolating(state) else self.share

    def is_design_draw(self, state: SelectionState) -> bool:
        n = 0 if state.responses is None else int(state.responses.n)
        # the opening counts the answers known: every slot of a batch chosen before ``opening``
        # answers are in is a design draw (a later slot of a batch knows no more than its first)
        known = n if state.responses is None else int(getattr(state.responses, "answered", n))
        if known < self.opening:
            return True
        return scheduled_design_draw(n, self.share_at(state))

    def probabilities(self, params, state: SelectionState, expected=None) -> np.ndarray:
        """The design rule's probabilities (the probabilities of a design draw at this state)."""
        return self.design.probabilities(params, state, expected=expected)

    def candidates(self, params, state: SelectionState, rng, k: int = 1):
        k = check_k(k)
        if self.is_design_draw(state):
            return self.design.candidates(params, state, rng, k)
        return self.adaptive_for(state.items).candidates(params, state, rng, k)

    def explain_criterion(self, value: float) -> str:
        return f"design-draw probability, or the adaptive step's criterion = {value:.4g}"

    def check_bank(self, items: ItemTable) -> None:
        super().check_bank(items)
        self.adaptive_for(items).check_bank(items)
        self.design.check_bank(items)
