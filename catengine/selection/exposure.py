"""Exposure and content control, as restrictions of the eligibility mask honoured by every selector.

* :class:`Randomesque` — propose a uniformly random one of the ``k`` best eligible items.
* :class:`SympsonHetter` — item j may be administered with probability K_j. Implemented as one
  Bernoulli(K_j) lottery per item and session, drawn when the session starts: the classic
  procedure draws the same lottery lazily when j is first selected and blocks j for the session
  if it loses, so the two are equal in distribution. If the lottery would leave nothing eligible,
  it is ignored for that step (never a dead end). Control parameters come from
  ``catengine.session.calibrate_sympson_hetter`` (simulation) and can be stored in a side file.
* :class:`ContentBalance` — keeps the share of items per group of a metadata field (e.g.
  benchmark) near target proportions: each step restricts selection to the group furthest below
  its target that still has eligible items (Kingsbury & Zara 1989).
"""

from __future__ import annotations

import json
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from catengine.selection.base import ItemTable
from catengine.validation import is_integer


class ExposureContext:
    """What a control sees at one step: the bank view, the administered item indices, and the
    per-session data its ``start`` returned."""

    __slots__ = ("items", "administered", "data")

    def __init__(self, items: ItemTable, administered: np.ndarray, data: Any):
        self.items = items
        self.administered = administered
        self.data = data


class ExposureControl(ABC):
    """Role: restrict the eligibility mask before selection.

    ``restrict(eligible, ctx)`` returns the new mask (never modifies ``eligible``); ``start``
    (optional) draws per-session data with the session's rng; ``top_k`` > 1 asks the session to
    propose a random one of the top-k candidates.
    """

    name: ClassVar[str] = ""
    top_k: ClassVar[int] = 1

    def start(self, items: ItemTable, rng: np.random.Generator) -> Any:
        return None

    def check_bank(self, items: ItemTable) -> None:
        """Raise ValueError if the control cannot work with this bank."""

    @abstractmethod
    def restrict(self, eligible: np.ndarray, ctx: ExposureContext) -> np.ndarray:
        """The restricted eligibility mask."""


@dataclass(frozen=True)
class Randomesque(ExposureControl):
    """Propose a uniformly random item among the ``k`` best eligible ones (Kingsbury & Zara 1989)."""

    name: ClassVar[str] = "randomesque"
    k: int = 5

    def __post_init__(self):
        if not is_integer(self.k) or self.k < 1:
            raise ValueError(f"randomesque k must be a positive integer, got {self.k!r}")

    @property
    def top_k(self) -> int:  # type: ignore[override]
        return int(self.k)

    def restrict(self, eligible, ctx):
        return eligible


@dataclass(frozen=True)
class SympsonHetter(ExposureControl):
    """Sympson-Hetter exposure control with one control parameter K_j in [0, 1] per item.

    ``control``: the K_j in bank order. Build it with ``catengine.session.calibrate_sympson_hetter``
    and store / load it with :meth:`save` / :meth:`load` (a JSON side file naming the bank).
    """

    name: ClassVar[str] = "sympson-hetter"
    control: tuple[float, ...] = ()
    target_rate: float | None = None

    def __post_init__(self):
        try:
            k = np.asarray(self.control, dtype=np.float64)
        except (TypeError, ValueError):
            raise ValueError("control must be a sequence of numbers in [0, 1], one per item") from None
        if k.ndim != 1 or k.size == 0:
            raise ValueError(f"control must be a non-empty vector of probabilities, got shape {k.shape}")
        bad = np.flatnonzero(~np.isfinite(k) | (k < 0) | (k > 1))
        if bad.size:
            raise ValueError(f"control parameters must lie in [0, 1]; item index {int(bad[0])} has {k[bad[0]]}")
        object.__setattr__(self, "control", tuple(float(v) for v in k))
        if self.target_rate is not None and not (0 < float(self.target_rate) <= 1):
            raise ValueError(f"target_rate must lie in (0, 1], got {self.target_rate!r}")

    def check_bank(self, items: ItemTable) -> None:
        if len(self.control) != items.n_items:
            raise ValueError(f"Sympson-Hetter has {len(self.control)} control parameters for a bank of {items.n_items} items")

    def start(self, items: ItemTable, rng):
        return rng.random(items.n_items) < np.asarray(self.control)

    def restrict(self, eligible, ctx):
        allowed = eligible & ctx.data
        return allowed if allowed.any() else eligible

    def save(self, path, *, bank_id: str, bank_version: int, item_ids) -> Path:
        """Write the control parameters to a JSON side file (item id -> K), never overwriting."""
        path = Path(path)
        item_ids = [str(v) for v in item_ids]
        if len(item_ids) != len(self.control):
            raise ValueError(f"{len(item_ids)} item ids for {len(self.control)} control parameters")
        doc = {
            "format": "catengine.sympson-hetter", "version": 1, "bank_id": bank_id, "bank_version": int(bank_version),
            "target_rate": self.target_rate, "control": dict(zip(item_ids, self.control)),
        }
        from catengine.atomic import atomic_output

        with atomic_output(path, overwrite=False) as tmp:  # never a half-written file; refuses to overwrite
            tmp.write_text(json.dumps(doc, indent=1), encoding="utf-8")
        return path

    @classmethod
    def load(cls, path, *, item_ids, bank_id: str | None = None) -> "SympsonHetter":
        """Read a side file written by :meth:`save`; the item ids must match the bank's. Every
        problem is a ValueError naming the file."""
        try:
            doc = json.loads(Path(path).read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"Sympson-Hetter file {path} is not a JSON side file written by SympsonHetter.save "
                             f"({type(exc).__name__}: {exc})") from None
        if not isinstance(doc, dict) or doc.get("format") != "catengine.sympson-hetter":
            raise ValueError(f"{path} is not a Sympson-Hetter control file")
        if bank_id is not None and doc.get("bank_id") != bank_id:
            raise ValueError(f"{path} was calibrated for bank {doc.get('bank_id')!r}, not {bank_id!r}")
        control = doc.get("control")
        if not isinstance(control, dict):
            raise ValueError(f"{path}: 'control' must map item ids to probabilities, got {type(control).__name__}")
        missing = [i for i in item_ids if str(i) not in control]
        if missing or len(control) != len(item_ids):
            raise ValueError(f"{path} does not cover the bank's items exactly (missing e.g. {missing[:3]})")
        try:
            return cls(control=tuple(float(control[str(i)]) for i in item_ids), target_rate=doc.get("target_rate"))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{path}: {exc}") from None


@dataclass(frozen=True)
class ContentBalance(ExposureControl):
    """Keep the proportion of administered items per group of metadata ``field`` near ``targets``.

    ``targets`` maps group label -> target proportion (non-negative, summing to 1). Each step the
    selection is restricted to the group with the largest deficit target - share among groups
    that still have eligible items (ties: label order); groups absent from ``targets`` are used only
    when no targeted group has an eligible item left.
    """

    name: ClassVar[str] = "content"
    field: str = "benchmark"
    targets: tuple[tuple[str, float], ...] = ()

    def __post_init__(self):
        if not isinstance(self.field, str) or not self.field:
            raise ValueError(f"field must be a non-empty metadata field name, got {self.field!r}")
        targets = self.targets.items() if isinstance(self.targets, dict) else self.targets
        try:
            pairs = tuple(sorted((str(g), float(p)) for g, p in targets))
        except (TypeError, ValueError):
            raise ValueError(f"targets must map group labels to proportions, got {self.targets!r}") from None
        if not pairs:
            raise ValueError("targets must name at least one group")
        if any(not math.isfinite(p) or p < 0 for _, p in pairs):
            raise ValueError(f"target proportions must be finite and >= 0, got {dict(pairs)}")
        if len({g for g, _ in pairs}) != len(pairs):
            raise ValueError(f"targets name a group twice: {pairs}")
        if abs(sum(p for _, p in pairs) - 1.0) > 1e-6:
            raise ValueError(f"target proportions must sum to 1, got {sum(p for _, p in pairs)} for {dict(pairs)}")
        object.__setattr__(self, "targets", pairs)

    def check_bank(self, items: ItemTable) -> None:
        try:
            labels, _ = items.groups(self.field)
        except KeyError as exc:
            raise ValueError(f"content balancing by {self.field!r}: {exc.args[0] if exc.args else exc}") from None
        unknown = [g for g, _ in self.targets if g not in set(labels)]
        if unknown:
            raise ValueError(f"content targets name groups {unknown} that no item of field {self.field!r} has; groups: {list(labels)}")

    def start(self, items: ItemTable, rng):
        labels, codes = items.groups(self.field)
        target = np.zeros(labels.size)
        index = {g: i for i, g in enumerate(labels)}
        for g, p in self.targets:
            target[index[g]] = p
        return codes, target, np.array([g in dict(self.targets) for g in labels])

    def restrict(self, eligible, ctx):
        codes, target, targeted = ctx.data
        G = target.size
        n = ctx.administered.size
        share = np.bincount(codes[ctx.administered], minlength=G) / max(n, 1)
        has = np.bincount(codes[eligible], minlength=G) > 0
        deficit = np.where(targeted, target - share, -np.inf)
        order = np.lexsort((np.arange(G), -deficit))  # largest deficit first, then label order
        for g in order:
            if has[g] and targeted[g]:
                return eligible & (codes == g)
        return eligible
