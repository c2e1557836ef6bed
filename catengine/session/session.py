"""``CATSession``: one subject's adaptive test against a bank (the only stateful online object)."""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass, fields

import numpy as np

from catengine.errors import BankExhaustedError
from catengine.estimation import MAPEstimator, ResponseState, TraitEstimate, TraitEstimator
from catengine.estimation.interval_calibration import IntervalCalibration
from catengine.estimation.person_fit import PersonFit, person_fit
from catengine.models.item_covariance import ItemCovariance
from catengine.selection import (
    DrawContext,
    ExposureControl,
    ItemSelector,
    ItemTable,
    SelectionState,
    default_selector_for,
    is_design_draw,
)
from catengine.selection.exposure import ExposureContext
from catengine.session.bank_log import (
    attach_writer,
    bank_fingerprint,
    bank_interval_calibration,
    bank_item_covariance,
    item_table,
    lock_for_resume,
    make_header,
    read_for_resume,
    replay_events,
    strategies_from_config,
)
from catengine.session.config import to_config
from catengine.session.errors import (
    CoTBeyondCalibrationWarning,
    CoTIgnoredWarning,
    CoTOutOfRangeError,
    CorruptLogWarning,
    InvalidResponseError,
    ItemAlreadyAnsweredError,
    LogConfigMismatchError,
    ResumeMismatchWarning,
    SessionLogError,
    UnknownItemError,
)
from catengine.session.log import (
    LogWriter,
    read_log,
    restore_rng,
    rng_state_to_json,
)
from catengine.stopping import StoppingRule, StopState, default_stopping


@dataclass(frozen=True)
class StepRecord:
    """One answer in a session's history (``criterion`` is NaN for items the engine did not propose)."""

    step: int
    item: str
    correct: int
    cot_length: float | None
    theta: float
    theta_sd: float
    tau: float | None
    tau_sd: float | None
    criterion: float
    proposed: bool
    interval_z95: float | None = None  # the 95% interval's multiplier at this step (None: 1.96)
    interval_factor: float = 1.0  # the factor theta_sd / tau_sd were widened by at this step (the model's SD times it)
    design: bool = False  # drawn by the selector's known-probability design (criterion = its probability)
    #: for a design draw, what it was drawn from (answers before it, earlier items of its batch, the
    #: estimate the selector saw); None otherwise
    draw: DrawContext | None = None


def _check_correct(correct) -> int:
    if isinstance(correct, (bool, np.bool_)):
        return int(correct)
    if isinstance(correct, (int, np.integer)) and int(correct) in (0, 1):
        return int(correct)
    if isinstance(correct, (float, np.floating)) and float(correct) in (0.0, 1.0):
        return int(correct)
    raise InvalidResponseError(f"correct must be 0 or 1 (also accepted: 0.0, 1.0, true, false), got {correct!r}")


#: Plausible CoT lengths, in tokens: 0 <= T <= MAX_COT_TOKENS, and T + cot_offset >= MIN_LOG_ARGUMENT
#: (the bank models log(T + cot_offset), which goes negative without bound as it nears 0: a bank
#: with offset 0 needs T >= 0.001; lengths that are averages over runs or simulated continuous
#: lengths may be fractional). Beyond it, :class:`CoTOutOfRangeError`. Per session: ``session.max_cot_length``.
MAX_COT_TOKENS = 1e9
MIN_LOG_ARGUMENT = 1e-3


def _check_cot(cot_length, max_tokens: float = MAX_COT_TOKENS, cot_offset: float = 1.0) -> float | None:
    if cot_length is None:
        return None
    if isinstance(cot_length, (bool, np.bool_)) or not isinstance(cot_length, (int, float, np.integer, np.floating)):
        raise InvalidResponseError(f"cot_length must be a number of tokens >= 0 or None, got {cot_length!r}")
    try:
        value = float(cot_length)
    except OverflowError:  # a JSON integer with hundreds of digits
        raise CoTOutOfRangeError(
            f"cot_length {str(cot_length)[:40]}... tokens is beyond the plausible range [0, {max_tokens:g}]"
        ) from None
    if math.isnan(value) or math.isinf(value) or value < 0:
        raise InvalidResponseError(f"cot_length must be a finite number of tokens >= 0 (None if unknown), got {cot_length!r}")
    if value > max_tokens or value + cot_offset < MIN_LOG_ARGUMENT:
        raise CoTOutOfRangeError(
            f"cot_length {cot_length!r} tokens is outside the plausible range: 0 <= T <= {max_tokens:g} "
            f"(session.max_cot_length) and T + cot_offset >= {MIN_LOG_ARGUMENT:g} (cot_offset {cot_offset:g})"
        )
    return value


def calibration_cot_bound(bank) -> tuple[float, str] | None:
    """The longest CoT length (tokens) the bank's calibration saw, and where that figure comes from:
    the longest ``cot_length`` in the bank's stored calibration responses (``/responses``) when it
    keeps them, else the output cap of its calibration runs (``bank.protocol["calibration_runs"]
    ["max_output_tokens"]``) when it has a protocol; None when the bank states neither."""
    try:
        responses = getattr(bank, "responses", None)
    except (KeyError, ValueError, OSError):  # an in-memory stand-in or an unreadable group: no bound
        responses = None
    if responses is not None and "cot_length" in responses:
        values = np.asarray(responses["cot_length"].values, dtype=np.float64)
        values = values[np.isfinite(values)]
        if values.size:
            return float(values.max()), "the longest CoT length in its stored calibration responses"
    protocol = getattr(bank, "protocol", None)
    runs = protocol.get("calibration_runs") if isinstance(protocol, dict) else None
    cap = runs.get("max_output_tokens") if isinstance(runs, dict) else None
    if isinstance(cap, (int, float)) and not isinstance(cap, bool) and math.isfinite(cap) and cap > 0:
        return float(cap), "the output cap of its calibration runs (protocol calibration_runs.max_output_tokens)"
    return None


def strategy_words(part: str, cfg) -> str:
    """A strategy config (:meth:`CATSession.config`'s ``part``: selector, estimator, stopping or
    exposure) in a few words: the stopping rule as ``catengine.console.describe_stopping`` says it,
    the others as ``type(field=value, ...)``."""
    if part == "stopping":
        from catengine.console import describe_stopping
        from catengine.session.config import from_config

        try:
            return describe_stopping(from_config(cfg))
        except (KeyError, TypeError, ValueError):
            pass
    if part == "exposure" and isinstance(cfg, (list, tuple)):
        return ", ".join(strategy_words("", c) for c in cfg) if cfg else "none"

    def words(value):
        if isinstance(value, dict) and "type" in value:
            fields_ = [f"{k}={words(v)}" for k, v in value.items() if k != "type"]
            return str(value["type"]) + (f"({', '.join(fields_)})" if fields_ else "")
        if isinstance(value, (list, tuple)):
            return "[" + ", ".join(words(v) for v in value) + "]"
        return repr(value)

    return words(cfg)


def _checked_answers(correct) -> np.ndarray:
    """The answers as floats, checked as :func:`_check_correct` checks each (at once when they are
    plain numbers; one by one, for its error, otherwise)."""
    arr = np.asarray(correct) if not isinstance(correct, np.ndarray) else correct
    if arr.ndim == 1 and arr.dtype.kind in "biuf" and bool(np.all((arr == 0) | (arr == 1))):
        return arr.astype(np.float64)
    return np.array([_check_correct(c) for c in correct], dtype=np.float64)


def _checked_log_cots(cot_lengths, max_tokens: float, cot_offset: float) -> np.ndarray:
    """log(T + cot_offset) per answer (NaN where T is None), each T checked as :func:`_check_cot`
    checks it and logged by ``math.log`` as :meth:`CATSession.record` does (so the same bits). At
    once when every entry is None or a finite real in range; one by one, for the error, otherwise."""
    values = list(cot_lengths)
    n = len(values)
    out = np.full(n, math.nan)
    known = [k for k, v in enumerate(values) if v is not None]
    if not known:
        return out
    plain = all(isinstance(values[k], (int, float, np.integer, np.floating))
                and not isinstance(values[k], (bool, np.bool_)) for k in known)
    if plain:
        try:
            t = np.array([values[k] for k in known], dtype=np.float64)
        except OverflowError:
            plain = False
    if not plain or not bool(np.all((t >= 0) & (t <= max_tokens) & (t + cot_offset >= MIN_LOG_ARGUMENT))):
        t = np.array([_check_cot(values[k], max_tokens, cot_offset) for k in known])  # raises for the first bad one
    out[known] = [math.log(v) for v in (t + cot_offset).tolist()]
    return out


def _estimate_json(est: TraitEstimate) -> dict:
    return {"theta": est.theta, "theta_sd": est.theta_sd, "tau": est.tau, "tau_sd": est.tau_sd}


def _nan_to_none(v):
    return None if isinstance(v, float) and math.isnan(v) else v


#: a replayed estimate within REPLAY_RTOL of the logged one is the same; beyond it a warning; beyond
#: REPLAY_EDIT_RTOL a log of this library version is refused as edited or damaged (the MAP iterates to
#: a Newton step below 1e-10, so machines differ far less; one changed answer moves theta by orders of magnitude more)
REPLAY_RTOL = 1e-9
REPLAY_EDIT_RTOL = 1e-5


def _close(a, b, rtol: float = REPLAY_RTOL) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) <= rtol * (1.0 + abs(b))


class CATSession:
    """An adaptive test of one subject (an LLM) against an item bank.

    >>> s = CATSession(bank, rng=7)
    >>> while not s.finished:
    ...     item = s.next_item()
    ...     s.record(item, correct, cot_length=tokens)   # tokens: LaRT banks only
    >>> s.estimate.theta, s.estimate.theta_sd

    * ``selector``: an :class:`~catengine.selection.ItemSelector` (default:
      :func:`~catengine.selection.default_selector_for` the bank: ``DoublyRobustSelection``, every
      step a known-probability design draw favouring the items whose answer the model finds
      uncertain; ``RandomisedSelection`` when the bank's own score check found its model-based
      score worse than as many random items).
    * ``estimator``: :class:`~catengine.estimation.MAPEstimator` (default) or ``EAPEstimator``.
    * ``stopping``: a :class:`~catengine.stopping.StoppingRule` (default:
      :func:`~catengine.stopping.default_stopping`: the predicted full-benchmark accuracy known to
      within +-5 points, half its 95% interval, after at least 10 items, or 100 items).
    * ``exposure``: exposure / content controls applied in order (Randomesque, SympsonHetter,
      ContentBalance).
    * ``rng``: Generator | int | None; drawn from by the design draws (every step of the default
      selector), random selection, randomesque and the Sympson-Hetter lottery.
    * ``log``: a path: every proposal and answer is appended to this JSONL file (flushed per
      line; ``fsync=True`` also syncs it to disk); :meth:`resume` rebuilds the session from it.

    ``next_item()`` proposes (and keeps proposing, until answered) an item id; ``record()`` takes an
    answer for any unanswered item of the bank — proposed or not — exactly once. Bad input raises a
    :class:`~catengine.errors.CatEngineError` subclass and leaves the session unchanged.
    """

    #: CoT lengths above this (tokens) raise CoTOutOfRangeError (set it per session to allow longer chains)
    max_cot_length: float = MAX_COT_TOKENS
    #: whether this session has warned of a CoT length beyond the bank's calibration (once per session)
    _cot_beyond_warned: bool = False

    def __init__(self, bank, *, selector: ItemSelector | None = None, estimator: TraitEstimator | None = None,
                 stopping: StoppingRule | None = None, exposure=(), rng=None, subject: str = "subject",
                 log=None, fsync: bool = False):
        self._set_up(bank, item_table(bank), selector=selector, estimator=estimator, stopping=stopping,
                     exposure=exposure, rng=rng, subject=subject, log=log, fsync=fsync)

    @classmethod
    def sharing(cls, items: ItemTable, bank, *, writer=None, **options) -> "CATSession":
        """A session on the item table ``items`` of ``bank`` that another object already built (an
        :class:`~catengine.session.Engine`'s subjects share one), appending to ``writer``, an open
        shared log (whose header the owner wrote), when given. ``options`` as for the constructor
        (not ``log``)."""
        if "log" in options:
            raise TypeError("a session sharing a log writer takes no log of its own")
        self = cls.__new__(cls)
        self._set_up(bank, items, writer=writer, **options)
        return self

    def _set_up(self, bank, items: ItemTable, *, selector=None, estimator=None, stopping=None, exposure=(), rng=None,
                subject: str = "subject", log=None, fsync: bool = False, writer=None) -> None:
        self.bank = bank
        self.items = items
        self.params = self.items.params
        self.subject = str(subject)
        self.selector = selector if selector is not None else default_selector_for(self.items)
        self.estimator = estimator if estimator is not None else MAPEstimator()
        self.stopping = stopping if stopping is not None else default_stopping(self.params.n_items)
        if isinstance(exposure, ExposureControl):
            exposure = (exposure,)
        self.exposure = tuple(exposure)
        self._validate_strategies()
        self.cot_offset = bank.effective_cot_offset
        self._rng = np.random.default_rng(rng)
        calib = self.items.interval_calibration
        self._responses = ResponseState(self.params, self.items.covariance,
                                        None if calib is None else calib.curve(self.selector.name))
        J = self.params.n_items
        self._available = np.ones(J, dtype=bool)
        self._n_available = J
        self._excluded: set[int] = set()
        self._pending: tuple[int, float] | None = None
        self._pending_draw: DrawContext | None = None  # the pending proposal's context when it is a design draw
        self._pending_outlived = False  # another item was answered while the pending proposal stayed pending
        self._batch: dict[int, float] = {}  # proposed batch items awaiting answers -> criterion
        self._batch_draws: dict[int, DrawContext] = {}  # the batch's design draws awaiting answers -> context
        self._history: list[StepRecord] = []
        self._stop_cache: tuple[int, str | None] | None = None
        self._top_k = max([1] + [int(c.top_k) for c in self.exposure])
        self._replaying = False
        # the log: a standalone session writes its own header; an Engine passes its shared writer
        self._owns_writer = False
        self._writer = writer
        if log is not None:
            self._writer = LogWriter(log, fsync=fsync)
            self._owns_writer = True
            self._writer.write(make_header(bank, self.items, self.config()))
        self._emit({"event": "open", "subject": self.subject, "rng": rng_state_to_json(self._rng)})
        self._exposure_data = [c.start(self.items, self._rng) for c in self.exposure]
        self._estimate = self.estimator.estimate(self.params, self._responses)

    # ------------------------------------------------------------------ configuration
    def _validate_strategies(self) -> None:
        if not isinstance(self.selector, ItemSelector):
            raise TypeError(f"selector must be an ItemSelector, got {type(self.selector).__name__}")
        if not isinstance(self.estimator, TraitEstimator):
            raise TypeError(f"estimator must be a TraitEstimator, got {type(self.estimator).__name__}")
        if not isinstance(self.stopping, StoppingRule):
            raise TypeError(f"stopping must be a StoppingRule, got {type(self.stopping).__name__}")
        for c in self.exposure:
            if not isinstance(c, ExposureControl):
                raise TypeError(f"exposure controls must be ExposureControl instances, got {type(c).__name__}")
            c.check_bank(self.items)
        self.selector.check_bank(self.items)

    def config(self) -> dict:
        """The strategies as a JSON-able config (what the log header stores)."""
        return {
            "selector": to_config(self.selector),
            "estimator": to_config(self.estimator),
            "stopping": to_config(self.stopping),
            "exposure": [to_config(c) for c in self.exposure],
        }

    # ------------------------------------------------------------------ read-only views
    @property
    def estimate(self) -> TraitEstimate:
        """Current posterior summary (theta, SD; tau, SD for LaRT banks; items used)."""
        return self._estimate

    def person_fit(self) -> PersonFit:
        """Person fit of the answers so far (lz at the current theta): does this LLM fit the bank?"""
        return person_fit(self.params, self._responses, self._estimate.theta)

    @property
    def history(self) -> list[StepRecord]:
        return list(self._history)

    @property
    def n_items(self) -> int:
        return self._responses.n

    @property
    def administered(self) -> list[str]:
        ids = self.items.item_ids
        return [ids[j] for j in self._responses.items]

    @property
    def n_unproposed(self) -> int:
        """Answers recorded for items the engine had not proposed: the test is adaptive only without them."""
        return sum(not r.proposed for r in self._history)

    @property
    def pending_item(self) -> str | None:
        """The proposed item awaiting an answer, if any (of a pending batch: the first unanswered one)."""
        if self._pending is None:
            return self.items.item_ids[next(iter(self._batch))] if self._batch else None
        return self.items.item_ids[self._pending[0]]

    @property
    def pending_items(self) -> list[str]:
        """The proposed items awaiting answers: the rest of a batch (:meth:`next_items`), or the
        single pending proposal, or none."""
        ids = self.items.item_ids
        if self._batch:
            return [ids[j] for j in self._batch]
        return [] if self._pending is None else [ids[self._pending[0]]]

    @property
    def pending_is_design_draw(self) -> bool:
        """Whether the pending proposal was drawn by the randomised design (known probability) rather
        than chosen by the adaptive rule."""
        if self._pending is not None:
            return self._pending_draw is not None
        return bool(self._batch) and next(iter(self._batch)) in self._batch_draws

    @property
    def pending_criterion(self) -> float | None:
        """Criterion value of the pending proposal (None if there is none or the selector has no criterion)."""
        if self._pending is None or not math.isfinite(self._pending[1]):
            return None
        return self._pending[1]

    @property
    def rng(self) -> np.random.Generator:
        return self._rng

    @property
    def stop_reason(self) -> str | None:
        """Why the test may stop now (stopping rule met, or no item left), else None."""
        n = self._responses.n
        if self._stop_cache is not None and self._stop_cache[0] == n:
            return self._stop_cache[1]
        if self._n_available == 0:
            why = "no item left in the bank"
        else:
            why = self.stopping.reason(StopState(n, self._estimate, self._n_available, self._max_information,
                                                 self._stopping_score))
        self._stop_cache = (n, why)
        return why

    @property
    def finished(self) -> bool:
        return self.stop_reason is not None

    def _stopping_score(self, level: float):
        """The score a stopping rule sees. One that cannot be computed (a numerical failure on an
        extreme bank) is reported as unknown, the whole range [0, 1], with a RuntimeWarning: the
        rules that read it are then not met, and the session can always go on (the item cap still
        stops it)."""
        try:
            return self.predicted_score(level=level, by=False)
        except Exception as exc:  # noqa: BLE001 - a failed score must never block the test
            from catengine.scoring import ScoreEstimate

            warnings.warn(f"the predicted score of subject {self.subject!r} after {self._responses.n} answers "
                          f"could not be computed ({type(exc).__name__}: {str(exc)[:200]}); the stopping rule "
                          "takes it as unknown", RuntimeWarning, stacklevel=2)
            return ScoreEstimate(accuracy=math.nan, low=0.0, high=1.0, sd=math.nan, level=level,
                                 n_observed=self._responses.n, n_items=self.params.n_items)

    def _max_information(self) -> float:
        if self._n_available == 0:
            return 0.0
        return self.items.max_information(self._estimate.theta, self._available)

    # ------------------------------------------------------------------ the adaptive loop
    def _index(self, item_id) -> int:
        try:
            return self.bank.index_of(item_id)
        except KeyError:
            from catengine.itembank.ids import foreign_ids_message

            raise UnknownItemError(
                foreign_ids_message(getattr(self.bank, "bank_id", "?"), self.items.item_ids, [item_id])
            ) from None

    def eligible_mask(self, also_administered=()) -> np.ndarray:
        """Items the selector may propose now: unanswered, not excluded, allowed by exposure control.
        ``also_administered``: item indices to treat as administered too (a batch being built)."""
        mask = self._available
        if len(also_administered):
            extra = np.asarray(also_administered, dtype=np.int64)
            mask = mask.copy()
            mask[extra] = False
        if self.exposure:
            administered = self._responses.items
            if len(also_administered):
                administered = np.concatenate([administered, extra])
            for control, data in zip(self.exposure, self._exposure_data):
                mask = control.restrict(mask, ExposureContext(self.items, administered, data))
        return mask

    def next_item(self) -> str:
        """The item to administer next (the same one until it is answered or excluded: answering another
        item keeps it pending).

        Raises :class:`BankExhaustedError` when every item has been answered or excluded. It keeps
        proposing after the stopping rule is met; check :attr:`finished` to stop.
        """
        if self._pending is not None:
            return self.items.item_ids[self._pending[0]]
        if self._batch:
            return self.items.item_ids[next(iter(self._batch))]
        if self._n_available == 0:
            raise BankExhaustedError(
                f"bank exhausted for subject {self.subject!r}: all {self.params.n_items} items answered or excluded"
            )
        rng_before = rng_state_to_json(self._rng) if self._writer is not None else None
        mask = self.eligible_mask()
        state = SelectionState(self._estimate, mask, self._responses, self.items, self._log_posterior)
        design = is_design_draw(self.selector, state)
        cand, vals = self.selector.candidates(self.params, state, self._rng, self._top_k)
        pick = int(self._rng.integers(cand.size)) if self._top_k > 1 and cand.size > 1 else 0
        j, crit = int(cand[pick]), float(vals[pick])
        if not self._available[j]:  # a selector bug must never reach the user
            raise RuntimeError(f"selector {type(self.selector).__name__} proposed ineligible item index {j}")
        self._emit({"event": "propose", "subject": self.subject, "step": self._responses.n + 1,
                    "item": self.items.item_ids[j], "criterion": crit if math.isfinite(crit) else None, "rng": rng_before})
        self._pending = (j, crit)  # only once the proposal is in the log
        self._pending_draw = DrawContext(self._responses.n, (), self._estimate) if design else None
        return self.items.item_ids[j]

    def next_items(self, k: int) -> list[str]:
        """The next ``k`` items to administer, chosen jointly (for harnesses that run items in parallel).

        Greedy selection under the posterior fantasised with each chosen item's expected information
        (``catengine.selection.batch``), with the exposure and content controls; ``k = 1`` proposes
        exactly what :meth:`next_item` would. A batch never runs past the stopping rule's item limit
        (its MaxItems). Answer them with :meth:`record` in any order. Until
        every item of the batch is answered or excluded, this returns the batch's unanswered items
        (whatever ``k``), and :meth:`next_item` the first of them. A pending single proposal opens
        the batch. Fewer than ``k`` items come back when fewer are eligible; BankExhaustedError when
        none is. The batch is logged, so a resumed session keeps a half-answered batch.
        """
        from catengine.selection.base import check_k
        from catengine.selection.batch import BatchPick, select_batch
        from catengine.stopping.rules import item_limit

        k = check_k(k)
        limit = item_limit(self.stopping)
        if limit is not None and limit > self._responses.n:
            k = min(k, limit - self._responses.n)  # a batch never runs past the stopping rule's item limit
        ids = self.items.item_ids
        if self._batch:
            return [ids[j] for j in self._batch]
        if self._n_available == 0:
            raise BankExhaustedError(
                f"bank exhausted for subject {self.subject!r}: all {self.params.n_items} items answered or excluded"
            )
        rng_before = rng_state_to_json(self._rng) if self._writer is not None else None
        picks = select_batch(
            k, selector=self.selector, items=self.items, estimate=self._estimate, responses=self._responses,
            log_posterior=self._log_posterior, eligible=self.eligible_mask, rng=self._rng, top_k=self._top_k,
            use_cot=bool(getattr(self.estimator, "use_cot", True)), sd_scale=float(getattr(self.estimator, "sd_scale", 1.0)),
            start=[] if self._pending is None else [BatchPick(
                self._pending[0], self._pending[1], self._pending_draw is not None,
                self._pending_draw or DrawContext(self._responses.n, (), self._estimate))],
        )
        for p in picks:
            if not self._available[p.index]:  # a selector bug must never reach the user
                raise RuntimeError(f"selector {type(self.selector).__name__} proposed ineligible item index {p.index}")
        self._emit({"event": "propose_batch", "subject": self.subject, "step": self._responses.n + 1, "k": k,
                    "items": [ids[p.index] for p in picks],
                    "criteria": [p.criterion if math.isfinite(p.criterion) else None for p in picks],
                    "design": [bool(p.design) for p in picks], "rng": rng_before})
        self._pending = None
        self._pending_draw = None
        self._pending_outlived = False
        self._batch = {p.index: p.criterion for p in picks}
        self._batch_draws = {p.index: p.context for p in picks if p.design}
        return [ids[p.index] for p in picks]

    def _log_posterior(self, thetas):
        return self.estimator.log_posterior(self.params, self._responses, thetas)

    def record(self, item_id, correct, cot_length=None, *, evidence: dict | None = None) -> TraitEstimate:
        """Record an answer (0/1) and, for LaRT banks, the CoT length in tokens; returns the new estimate.

        The CoT length is the number of completion tokens of the model's reply, reasoning included:
        what an OpenAI-compatible API reports as ``usage.completion_tokens`` (its
        ``completion_tokens_details.reasoning_tokens`` are a part of it, not to be added), as the LaRT
        banks' calibration runs counted it (``bank.protocol["calibration_runs"]["cot_length"]``). A
        reply cut off at the output cap still counts the tokens it has.

        The item may be any unanswered item of the bank (it need not be the proposed one); it counts
        once. Errors (unknown item, answered twice, correct not 0/1, CoT length negative / NaN /
        infinite) leave the session unchanged. A CoT length for a logistic bank is ignored with a
        :class:`CoTIgnoredWarning`; ``None`` means unknown. A CoT length longer than any the bank's
        calibration saw (:func:`calibration_cot_bound`: the longest in its stored calibration
        responses, else its protocol's output cap) is recorded with a
        :class:`CoTBeyondCalibrationWarning`, once per session: tau, the speed estimate, then
        extrapolates beyond the calibration data. ``evidence`` (a JSON-able dict: the LLM's
        reply, its grade, its token counts) is stored in the answer's log line, in the same write,
        so a log holds each answer with what it was graded from (``catengine run`` uses it).
        """
        j = self._index(item_id)
        item = self.items.item_ids[j]
        if self._responses.administered[j]:
            raise ItemAlreadyAnsweredError(f"item {item!r} was already answered by subject {self.subject!r}")
        y = _check_correct(correct)
        if not self.params.model.has_cot:
            if cot_length is not None:
                _check_cot(cot_length)  # an invalid value is an error on any bank, even where lengths are not used
                warnings.warn(
                    f"CoT length {cot_length!r} ignored: bank response model {self.params.response_model!r} does not use CoT lengths",
                    CoTIgnoredWarning, stacklevel=2,
                )
            cot = None
        else:
            cot = _check_cot(cot_length, self.max_cot_length, self.cot_offset)
        # _check_cot guarantees a finite T with T + offset >= MIN_LOG_ARGUMENT: the scalar form of lart.log_cot_length
        log_t = math.nan if cot is None else math.log(cot + self.cot_offset)
        if evidence is not None and not isinstance(evidence, dict):
            raise InvalidResponseError(f"evidence must be a JSON object (dict) or None, got {type(evidence).__name__}")
        bound = None if cot is None or self._cot_beyond_warned else self._calibration_cot_bound()
        est = self._apply(j, y, cot, log_t, evidence=evidence)
        if bound is not None and cot > bound[0]:
            self._cot_beyond_warned = True
            warnings.warn(
                f"CoT length {cot:g} tokens (item {item!r}, subject {self.subject!r}) is beyond the longest the "
                f"calibration of bank {getattr(self.bank, 'bank_id', '?')!r} saw: {bound[0]:,.0f} tokens, {bound[1]}. "
                "The answer is recorded, but tau (the speed estimate) now extrapolates beyond the calibration data, "
                "and theta with it through their correlation. Check that the length is the reply's completion tokens "
                "(reasoning included) and that the model ran within the calibration's output cap. "
                "(Said once per session.)",
                CoTBeyondCalibrationWarning, stacklevel=2,
            )
        return est

    def _calibration_cot_bound(self) -> tuple[float, str] | None:
        """:func:`calibration_cot_bound` of the session's bank, read once per session."""
        if "_cot_bound" not in self.__dict__:
            self._cot_bound = calibration_cot_bound(self.bank)
        return self._cot_bound

    def _compare_replayed(self, est: TraitEstimate, logged, step: int, strict: bool) -> None:
        """The estimate recomputed from a replayed answer against the one the log recorded. Beyond
        REPLAY_RTOL a warning; beyond REPLAY_EDIT_RTOL, in a log written by this library version
        (``strict``), a SessionLogError: the log was edited or damaged. (The resume is abandoned
        then, so the session's state does not matter.)"""
        if not isinstance(logged, dict):
            raise SessionLogError(f"the record's estimate must be a JSON object, got {logged!r}")
        fields = ("theta", "theta_sd", "tau", "tau_sd")
        if all(_close(getattr(est, k), logged.get(k)) for k in fields):
            return
        if strict and not all(_close(getattr(est, k), logged.get(k), REPLAY_EDIT_RTOL) for k in fields):
            raise SessionLogError(
                f"the answers replayed for {self.subject!r} up to step {step} give {_estimate_json(est)}, but the log "
                f"recorded {logged}: the log was edited or damaged (it was written by this library version, which "
                "reproduces its estimates to rounding)")
        warnings.warn(
            f"replayed estimate for {self.subject!r} at step {step} differs from the logged one "
            f"({_estimate_json(est)} vs {logged}); continuing with the recomputed value",
            ResumeMismatchWarning, stacklevel=4,
        )

    def _apply(self, j: int, y: int, cot: float | None, log_t: float, logged: dict | None = None,
               strict_replay: bool = False, evidence: dict | None = None) -> TraitEstimate:
        state = self._responses
        snap = state.snapshot()
        state.add(j, y, log_t)
        try:
            est = self.estimator.estimate(self.params, state, start=self._estimate)
        except BaseException:
            state.restore(snap)
            raise
        proposed = self._pending is not None and self._pending[0] == j
        crit = self._pending[1] if proposed else math.nan
        draw = self._pending_draw if proposed else None
        if not proposed and j in self._batch:
            proposed, crit, draw = True, self._batch[j], self._batch_draws.get(j)
        rec = StepRecord(step=state.n, item=self.items.item_ids[j], correct=y, cot_length=cot,
                         theta=est.theta, theta_sd=est.theta_sd, tau=est.tau, tau_sd=est.tau_sd,
                         criterion=crit, proposed=proposed, interval_z95=est.interval_z95,
                         interval_factor=est.interval_factor, design=draw is not None, draw=draw)
        try:
            line = {"event": "record", "subject": self.subject, "step": state.n, "item": rec.item, "correct": y,
                    "cot_length": cot, "proposed": proposed, "estimate": _estimate_json(est)}
            if evidence is not None:
                line["evidence"] = evidence
            self._emit(line)
        except BaseException:
            state.restore(snap)
            raise
        if logged is not None:
            self._compare_replayed(est, logged["estimate"], state.n, strict_replay)
        if self._available[j]:
            self._available[j] = False
            self._n_available -= 1
        self._excluded.discard(j)
        self._estimate = est
        self._history.append(rec)
        if self._pending is None or self._pending[0] == j:
            self._pending = None
            self._pending_draw = None
            self._pending_outlived = False
        else:  # an answer to another item: the proposal stays pending, its draw made before this answer
            self._pending_outlived = True
        self._batch.pop(j, None)
        self._batch_draws.pop(j, None)
        return est

    def estimate_from(self, item_ids, correct, cot_lengths=None) -> TraitEstimate:
        """The posterior these answers alone give, estimated once; nothing is recorded or logged.

        The same estimate as recording them one by one (the item covariance and interval curve of
        this session apply), without re-estimating after each: scoring a whole benchmark's answers
        is one MAP solve instead of J. Inputs are checked as :meth:`record` checks them."""
        cot_lengths = [None] * len(item_ids) if cot_lengths is None else list(cot_lengths)
        if not len(item_ids) == len(correct) == len(cot_lengths):
            raise ValueError(f"{len(item_ids)} items, {len(correct)} answers and {len(cot_lengths)} CoT lengths")
        state = ResponseState(self.params, self.items.covariance, self._responses.interval_curve)
        n = len(item_ids)
        index = np.fromiter(map(self._index, item_ids), dtype=np.int64, count=n)
        counts = np.bincount(index, minlength=self.params.n_items)
        if n and counts.max() > 1:
            j = int(index[np.flatnonzero(counts[index] > 1)[0]])
            raise ItemAlreadyAnsweredError(f"item {self.items.item_ids[j]!r} appears twice")
        y = _checked_answers(correct)
        log_t = np.full(n, math.nan)
        if self.params.model.has_cot:
            log_t = _checked_log_cots(cot_lengths, self.max_cot_length, self.cot_offset)
        state.add_many(index, y, log_t)
        return self.estimator.estimate(self.params, state)

    def exclude(self, item_id) -> None:
        """Make an unanswered item unavailable to this subject (e.g. no answer exists for it)."""
        j = self._index(item_id)
        if self._responses.administered[j]:
            raise ItemAlreadyAnsweredError(f"item {self.items.item_ids[j]!r} was already answered; it cannot be excluded")
        if j in self._excluded:
            return
        self._emit({"event": "exclude", "subject": self.subject, "item": self.items.item_ids[j]})
        self._excluded.add(j)
        self._available[j] = False
        self._n_available -= 1
        if self._pending is not None and self._pending[0] == j:
            self._pending = None
            self._pending_draw = None
            self._pending_outlived = False
        self._batch.pop(j, None)
        self._batch_draws.pop(j, None)
        self._stop_cache = None

    # ------------------------------------------------------------------ full-benchmark score
    def predicted_score(self, level: float = 0.95, method: str = "auto", *, by=None, record: bool = False):
        """The full-benchmark accuracy (and, for LaRT banks, CoT tokens) with an interval at ``level``.

        ``method="model"``: the IRT prediction from the reported posterior (answered items count as
        answered; docs/math.md §7.6); ``"design"``: the design-based estimate with the model as its
        control variate, unbiased whatever the model gets wrong, for sessions with known-probability
        draws (``DoublyRobustSelection``, the default, or ``RandomisedSelection``; raises
        ``DesignNotRandomisedError`` otherwise; docs/math.md §7.7-§7.8); ``"doubly-robust"``: the same,
        labelled so; ``"auto"`` (the default): the design-based estimate when the session's draws
        support it, else the model's. The estimate's ``method`` says which. ``by``: the item column of the per-category breakdown (default: the
        bank's declared or first categorical column; ``False`` for none). ``record=True`` also
        appends the estimate to the session log as a ``score`` event. See docs/score_prediction.md.
        """
        from catengine.session.scoring import predicted_score

        score = predicted_score(self, level=level, method=method, by=by)
        if record:
            self._emit({"event": "score", "subject": self.subject, "step": self._responses.n, "score": score.to_dict()})
        return score

    # ------------------------------------------------------------------ logging / resume
    def note(self, payload: dict) -> None:
        """Append a ``note`` event (a JSON-able dict, e.g. the settings of a run) to the session log;
        notes do not change the session and are skipped on resume (read them with ``read_log``)."""
        if not isinstance(payload, dict):
            raise TypeError(f"a note is a dict, got {type(payload).__name__}")
        self._emit({"event": "note", "subject": self.subject, **{k: v for k, v in payload.items() if k not in ("event", "subject")}})

    def _emit(self, event: dict) -> None:
        if self._writer is not None and not self._replaying:
            self._writer.write(event)

    def close(self) -> None:
        """Close the log file (if this session owns it)."""
        if self._owns_writer and self._writer is not None:
            self._writer.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _check_replay_sequence(self, kind: str, event: dict) -> None:
        """Refuse a logged event that cannot follow the state replayed so far (a duplicated,
        reordered or forged line): resuming must rebuild the session, never a different one."""
        # a batch may open with the pending single proposal (``next_items`` after ``next_item``)
        opens = (kind == "propose_batch" and not self._batch and self._pending is not None
                 and list(event.get("items") or [])[:1] == [self.items.item_ids[self._pending[0]]])
        if kind in ("propose", "propose_batch") and (self._pending is not None or self._batch) and not opens:
            waiting = self.items.item_ids[self._pending[0]] if self._pending is not None else self.pending_items
            raise SessionLogError(f"out of sequence: a second proposal while {waiting!r} awaits its answer")
        if kind in ("record", "exclude"):
            j = self._index(event["item"])
            if self._responses.administered[j]:
                raise SessionLogError(f"duplicated: item {event['item']!r} was already answered by subject {self.subject!r}")
            if kind == "exclude" and j in self._excluded:
                raise SessionLogError(f"duplicated: item {event['item']!r} was already excluded")
            if kind == "record" and "proposed" in event:
                pending = (self._pending is not None and self._pending[0] == j) or j in self._batch
                if bool(event["proposed"]) != pending:
                    raise SessionLogError(
                        f"out of sequence: the record says proposed={event['proposed']!r} for {event['item']!r}, "
                        f"but the pending proposal is {self.pending_item!r}"
                    )
        n = self._responses.n
        step = event.get("step")
        if step is not None and step != n + (1 if kind in ("propose", "propose_batch", "record") else 0):
            raise SessionLogError(f"out of sequence: {kind} for step {step!r}, but subject {self.subject!r} has {n} answer(s)")

    def _drop_outlived_pending(self, kind: str, event: dict) -> None:
        """Replaying a log of a library version that dropped a single pending proposal once another
        item was answered: an event that shows the proposal was dropped (a new single proposal, a
        batch that does not open with it, or its answer recorded as not proposed) drops it here too.
        A log of this version has none of these while a proposal is pending (``next_item`` repeats it,
        a batch opens with it, and its answer is recorded as proposed)."""
        if self._pending is None or not self._pending_outlived:
            return
        pending = self.items.item_ids[self._pending[0]]
        if (kind == "propose" or (kind == "propose_batch" and list(event.get("items") or [])[:1] != [pending])
                or (kind == "record" and event.get("item") == pending and event.get("proposed") is False)):
            self._pending = None
            self._pending_draw = None
            self._pending_outlived = False

    def _replay(self, event: dict, strict: bool = False) -> None:
        """Apply one logged event (``strict``: the log is this library version's, see ``_compare_replayed``)."""
        kind = event["event"]
        self._drop_outlived_pending(kind, event)
        self._check_replay_sequence(kind, event)
        if kind == "propose":
            self._rng.bit_generator.state = restore_rng(event["rng"]).bit_generator.state
            self._pending = None
            self._pending_draw = None
            self._pending_outlived = False
            got = self.next_item()
            if got != event["item"]:
                raise SessionLogError(
                    f"replaying subject {self.subject!r}: the engine proposes {got!r} where the log has {event['item']!r} "
                    "(was the bank, the configuration or the library changed?)"
                )
        elif kind == "propose_batch":
            self._rng.bit_generator.state = restore_rng(event["rng"]).bit_generator.state
            got = self.next_items(int(event.get("k", len(event["items"]))))
            if got != list(event["items"]):
                raise SessionLogError(
                    f"replaying subject {self.subject!r}: the engine proposes the batch {got} where the log has "
                    f"{event['items']} (was the bank, the configuration or the library changed?)"
                )
        elif kind == "record":
            j = self._index(event["item"])
            cot = event.get("cot_length")
            log_t = math.nan
            if cot is not None and self.params.model.has_cot:
                cot = _check_cot(cot, self.max_cot_length, self.cot_offset)
                log_t = math.log(cot + self.cot_offset)
            self._apply(j, _check_correct(event["correct"]), None if cot is None else float(cot), log_t, logged=event,
                        strict_replay=strict)
        elif kind == "exclude":
            self.exclude(event["item"])
        elif kind in ("score", "note"):
            pass  # a reported score (derived from the answers, recomputed on demand) or a note (see note())
        else:
            raise SessionLogError(f"unexpected {kind!r} event for subject {self.subject!r} during replay")

    @classmethod
    def resume(cls, log, bank=None, *, subject: str | None = None, fsync: bool = False) -> "CATSession":
        """Rebuild a session from its log (same answers, estimates, pending proposal, rng state) and
        keep appending to the log. ``bank``: the bank it was run on (default: opened from the path in
        the log header); it must match the logged fingerprint. A torn last line is reported
        (CorruptLogWarning), moved to ``<log>.corrupt`` and skipped."""
        writer = lock_for_resume(log, fsync)
        try:
            contents, bank, strategies = read_for_resume(log, bank)
            items = item_table(bank)
            sessions = replay_events(
                log, contents, lambda name, rng: cls.sharing(items, bank, subject=name, rng=rng, **strategies)
            )
            subjects = list(sessions)
            if subject is None:
                if len(subjects) != 1:
                    raise SessionLogError(f"{log} holds {len(subjects)} subjects {subjects[:5]}; name one with subject=")
                subject = subjects[0]
            if subject not in sessions:
                raise SessionLogError(f"{log} has no session for subject {subject!r}; it has {subjects[:10]}")
            attach_writer(writer, sessions.values())
        except BaseException:
            writer.close()
            raise
        session = sessions[subject]
        session._owns_writer = True
        return session

    @classmethod
    def open(cls, bank, *, log, subject: str = "subject", rng=None, fsync: bool = False,
             **strategies) -> "CATSession":
        """Start or resume: the session of ``subject`` logged to ``log``, resumed (:meth:`resume`) when
        the log exists and holds that subject's session, else started as a new one (``CATSession(bank,
        log=log, subject=subject, rng=rng, **strategies)``). A script written with it runs again as it
        is, and goes on where the last run stopped:

        >>> session = CATSession.open(bank, log="run.jsonl", subject="my-llm", stopping=MaxItems(20))

        ``strategies`` (``selector``, ``estimator``, ``stopping``, ``exposure``) and ``rng`` (an int
        seed or a Generator) set up a new session. On resume the log's own configuration is used;
        those that are given must equal the recorded ones, else a :class:`LogConfigMismatchError`
        names each difference (recorded and given). Leave them out to go on with the log's, or
        choose a new log to use them. A log without this subject's session is a
        :class:`SessionLogError` naming the subjects it has.
        """
        unknown = sorted(set(strategies) - {"selector", "estimator", "stopping", "exposure"})
        if unknown:
            raise TypeError(f"CATSession.open() got unexpected keyword argument(s) {', '.join(unknown)} "
                            "(strategies are selector, estimator, stopping and exposure)")
        from pathlib import Path

        path = Path(log)
        if not path.exists() or path.stat().st_size == 0:
            return cls(bank, log=path, subject=subject, rng=rng, fsync=fsync, **strategies)
        subject = str(subject)
        with warnings.catch_warnings():  # a torn last line: reported once, by resume below
            warnings.simplefilter("ignore", CorruptLogWarning)
            contents = read_log(path)
        opened = {e["subject"]: e for e in contents.events if e.get("event") == "open"}
        if subject not in opened:
            held = ", ".join(repr(name) for name in list(opened)[:5]) + (
                f" and {len(opened) - 5} more" if len(opened) > 5 else "")
            raise SessionLogError(
                f"{path} holds the session{'s' if len(opened) != 1 else ''} of {held or 'no subject'}, not "
                f"{subject!r}: give this subject a log of its own (log=...), or add it to this one with "
                f"Engine.resume({str(path)!r}).start({subject!r})")
        session = cls.resume(path, bank, subject=subject, fsync=fsync)
        try:
            recorded = session.config()
            differences = []
            for name in ("selector", "estimator", "stopping", "exposure"):
                value = strategies.get(name)
                if value is None:
                    continue
                if name == "exposure":
                    value = (value,) if isinstance(value, ExposureControl) else tuple(value)
                    given = [to_config(c) for c in value]
                else:
                    given = to_config(value)
                if given != recorded[name]:
                    differences.append(f"{name}: recorded {strategy_words(name, recorded[name])}; "
                                       f"given {strategy_words(name, given)}")
            if rng is not None and not isinstance(rng, np.random.Generator) and opened[subject].get("rng") != \
                    rng_state_to_json(np.random.default_rng(rng)):
                differences.append(f"rng: the log's session was started from another seed than {rng!r}")
            elif isinstance(rng, np.random.Generator) and opened[subject].get("rng") != rng_state_to_json(rng):
                differences.append("rng: the log's session was started from another generator state than the one given")
            if differences:
                raise LogConfigMismatchError(
                    f"{path} holds the session of {subject!r} with another configuration than the one given:\n  "
                    + "\n  ".join(differences)
                    + "\nA resumed session keeps the configuration its log records: leave these arguments out to go "
                      "on with the log's, or choose a new log to use them.")
        except BaseException:
            session.close()
            raise
        return session

    # ------------------------------------------------------------------ export
    def to_dataset(self):
        """The history as an ``xarray.Dataset`` over ``step`` (item, correct, CoT length, estimates, criterion)."""
        import xarray as xr

        h = self._history
        n = len(h)
        nan = math.nan

        def col(name, conv=float):
            return np.array([nan if getattr(r, name) is None else conv(getattr(r, name)) for r in h], dtype=float)

        data = {
            "item": ("step", np.array([r.item for r in h], dtype=object)),
            "correct": ("step", np.array([r.correct for r in h], dtype=np.int8)),
            "cot_length": ("step", col("cot_length")),
            "theta": ("step", col("theta")),
            "theta_sd": ("step", col("theta_sd")),
            "criterion": ("step", col("criterion")),
            "proposed": ("step", np.array([r.proposed for r in h], dtype=bool)),
        }
        if self.params.model.has_cot:
            data["tau"] = ("step", col("tau"))
            data["tau_sd"] = ("step", col("tau_sd"))
        est = self._estimate
        attrs = {
            "subject": self.subject,
            "bank_id": getattr(self.bank, "bank_id", ""),
            "bank_version": int(getattr(self.bank, "version", 0)),
            "response_model": self.params.response_model,
            "config": json.dumps(self.config()),
            "theta": est.theta,
            "theta_sd": est.theta_sd,
            "stop_reason": self.stop_reason or "",
            "n_unproposed": self.n_unproposed,
        }
        if est.tau is not None:
            attrs["tau"], attrs["tau_sd"] = est.tau, est.tau_sd
        attrs["interval_calibration"] = est.interval_calibration
        fit = self.person_fit()
        attrs["person_fit_lz"] = fit.lz
        attrs["person_fit"] = fit.message
        return xr.Dataset(data, coords={"step": np.arange(1, n + 1)}, attrs=attrs)

    def state_summary(self) -> dict:
        """Everything that defines the session's state (used to compare a resumed session with the original)."""
        return {
            "subject": self.subject,
            "history": [tuple(_nan_to_none(getattr(r, f.name)) for f in fields(r)) for r in self._history],
            "estimate": self._estimate,
            "pending": None if self._pending is None else (self._pending[0], _nan_to_none(self._pending[1]),
                                                           self._pending_draw),
            "batch": [(j, _nan_to_none(c), self._batch_draws.get(j)) for j, c in self._batch.items()],
            "available": self._available.copy(),
            "excluded": sorted(self._excluded),
            "rng": rng_state_to_json(self._rng),
            "exposure": [np.asarray(d[0] if isinstance(d, tuple) else d).tolist() if d is not None else None
                         for d in self._exposure_data],
        }


__all__ = ["CATSession", "StepRecord", "bank_fingerprint", "bank_interval_calibration", "bank_item_covariance", "item_table",
           "make_header", "strategies_from_config"]
