"""``ScoreEstimate``: a predicted full-benchmark score with its interval (what users ask for)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Mapping

METHODS = ("model", "design", "doubly-robust")
_FIGURES = ("accuracy", "low", "high", "sd", "cot_total", "cot_total_low", "cot_total_high", "cot_total_sd")


@dataclass(frozen=True)
class ScoreEstimate:
    """The full-benchmark accuracy of one subject, predicted from the items it answered.

    * ``accuracy``: predicted proportion correct over all ``n_items`` items of the bank (or of one
      category): answered items count as answered, the others as predicted;
    * ``low``, ``high``: the interval at ``level``; ``sd``: the standard deviation of the
      full-benchmark accuracy given what was observed (``method="model"``) or the standard error of
      the estimator (``method="design"``);
    * ``n_observed``: answered items (among ``n_items``);
    * ``method``: ``"model"`` (the IRT model's prediction, law of total variance), ``"design"``
      (the design-based estimate with the model as its control variate: unbiased under the
      known-probability draws whatever the model gets wrong) or ``"doubly-robust"`` (the same
      estimate, for a session of the default ``DoublyRobustSelection``, docs/math.md §7.8);
      ``n_design`` the design draws it used;
    * ``percentile``: the share of the bank's calibration LLM runs that answered fewer of this
      LLM's items correctly than it did, on the same items (ties half; on a bank that stores no
      calibration answers, whose trait lies below this LLM's), and ``extrapolation``: ``"above"`` /
      ``"below"`` when that places it beyond the calibration population
      (``catengine.scoring.standing``), ``""`` inside it or unknown;
    * LaRT banks: ``cot_total`` (predicted chain-of-thought tokens for running every item once)
      with ``cot_total_low`` / ``cot_total_high`` / ``cot_total_sd``, and the per-item mean
      ``cot_mean`` (= cot_total / n_items) with ``cot_mean_low`` / ``cot_mean_high``; ``None``
      otherwise;
    * ``by_category``: category label -> ScoreEstimate of that category's items (a read-only
      mapping; empty when no category column is used), ``category_field`` the item column;
    * ``calibration``: how the model-based interval was widened by the bank's cross-fitted score
      check (``catengine.scoring.calibration``; empty: not calibrated).
    """

    accuracy: float
    low: float
    high: float
    sd: float
    level: float
    n_observed: int
    n_items: int
    method: str = "model"
    cot_total: float | None = None
    cot_total_low: float | None = None
    cot_total_high: float | None = None
    cot_total_sd: float | None = None
    category_field: str | None = None
    by_category: Mapping[str, "ScoreEstimate"] = field(default_factory=dict)
    calibration: str = ""
    n_design: int = 0
    percentile: float | None = None
    extrapolation: str = ""

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        if not 0.0 < self.level < 1.0:
            raise ValueError(f"level must lie in (0, 1), got {self.level}")
        if self.extrapolation not in ("", "above", "below"):
            raise ValueError(f"extrapolation must be '', 'above' or 'below', got {self.extrapolation!r}")
        object.__setattr__(self, "by_category", MappingProxyType(dict(self.by_category)))
        for name in _FIGURES:  # a clip or a projection at 0 can leave -0.0, which prints as "-0"
            value = getattr(self, name)
            if isinstance(value, float) and value == 0.0:
                object.__setattr__(self, name, 0.0)

    __hash__ = None  # holds a mapping

    @property
    def cot_mean(self) -> float | None:
        return None if self.cot_total is None else self.cot_total / self.n_items

    @property
    def cot_mean_low(self) -> float | None:
        return None if self.cot_total_low is None else self.cot_total_low / self.n_items

    @property
    def cot_mean_high(self) -> float | None:
        return None if self.cot_total_high is None else self.cot_total_high / self.n_items

    def to_dict(self) -> dict:
        """JSON-able form (NaN -> None; ``by_category`` nested; cot_mean included for LaRT banks)."""
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "by_category":
                value = {k: v.to_dict() for k, v in value.items()}
            elif isinstance(value, float) and not math.isfinite(value):
                value = None
            out[f.name] = value
        if self.cot_total is not None:
            out["cot_mean"], out["cot_mean_low"], out["cot_mean_high"] = self.cot_mean, self.cot_mean_low, self.cot_mean_high
        return out

    @classmethod
    def from_dict(cls, data: Mapping) -> "ScoreEstimate":
        """Inverse of :meth:`to_dict` (e.g. a ``score`` event of a session log)."""
        names = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in names}
        kwargs["by_category"] = {k: cls.from_dict(v) for k, v in (data.get("by_category") or {}).items()}
        for k in ("accuracy", "low", "high", "sd"):
            if kwargs.get(k) is None:
                kwargs[k] = math.nan
        return cls(**kwargs)

    def __str__(self) -> str:
        pct = round(100 * self.level)
        text = (f"accuracy {100 * self.accuracy:.1f}% ({pct}% interval {100 * self.low:.1f}-{100 * self.high:.1f}%, "
                f"sd {100 * self.sd:.1f} points; {self.n_observed} of {self.n_items} items answered; {self.method})")
        if self.cot_total is not None:
            text += (f"; CoT tokens for the whole benchmark {self.cot_total:,.0f} "
                     f"({self.cot_total_low:,.0f}-{self.cot_total_high:,.0f})")
        if self.extrapolation:
            text += f"; {self.extrapolation} the calibration population: the model extrapolates"
        return text
