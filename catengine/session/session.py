"""``CATSession``: one subject's adaptive test against a bank (the only stateful online object)."""

from __future__ import annotations

import hashlib
import json
import math
import warnings
from dataclasses import dataclass, fields
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path

import numpy as np

from catengine.errors import BankExhaustedError
from catengine.estimation import MAPEstimator, ResponseState, TraitEstimate, TraitEstimator
from catengine.estimation.interval_calibration import IntervalCalibration
from catengine.estimation.person_fit import PersonFit, person_fit
from catengine.models.item_covariance import ItemCovariance
from catengine.models import lart
from catengine.selection import ExposureControl, ItemSelector, ItemTable, SelectionState, default_selector
from catengine.selection import _kernels as SK
from catengine.selection.exposure import ExposureContext
from catengine.session.config import from_config, to_config
from catengine.session.errors import (
    CoTIgnoredWarning,
    InvalidResponseError,
    ItemAlreadyAnsweredError,
    ResumeMismatchWarning,
    SessionLogError,
    UnknownItemError,
)
from catengine.session.log import (
    LOG_FORMAT,
    LOG_VERSION,
    LogWriter,
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


def bank_fingerprint(items: ItemTable) -> str:
    """sha256 over the item ids and every parameter array (identifies the bank a log was made with)."""
    h = hashlib.sha256()
    p = items.params
    h.update(p.response_model.encode())
    h.update(json.dumps(list(items.item_ids)).encode())
    for name in p.parameter_names:
        h.update(np.ascontiguousarray(getattr(p, name), dtype=np.float64).tobytes())
    h.update(np.float64(p.rho).tobytes())
    if items.b_sd is not None:
        h.update(items.b_sd.tobytes())
    cv = items.covariance
    if cv is not None and (cv.has_slope_uncertainty or items.b_sd is None):  # banks with b_sd only: as before
        for arr in (cv.a_var, cv.b_var, cv.ab_cov):
            h.update(arr.tobytes())
    if items.interval_calibration is not None:
        h.update(json.dumps(items.interval_calibration.record, sort_keys=True).encode())
    return h.hexdigest()


@lru_cache(maxsize=16)
def item_table(bank) -> ItemTable:
    """The numpy view of an ``ItemBank`` that selectors use (cached for the last 16 banks: it holds
    the bank's sort order for the selection kernels, built once per bank)."""
    fields_ = set(bank.items.data_vars)
    b_sd = bank.item_metadata("b_sd") if "b_sd" in fields_ else None
    return ItemTable(bank.params, bank.item_ids, b_sd=b_sd, metadata=bank.item_metadata,
                     covariance=bank_item_covariance(bank), interval_calibration=bank_interval_calibration(bank))


def bank_item_covariance(bank) -> ItemCovariance | None:
    """The bank's item-parameter uncertainty as per-item (a, b) covariances (None if it has none):
    ``bank.item_uncertainty`` when the bank offers it, else ``/items`` a_sd / b_sd / ab_cov, else
    ``/posterior`` a_draws / b_draws (their sample moments)."""
    unc = getattr(bank, "item_uncertainty", None)
    unc = unc() if callable(unc) else unc
    n = bank.n_items
    if unc is not None:
        a_draws, b_draws = getattr(unc, "a_draws", None), getattr(unc, "b_draws", None)
        a_sd, b_sd = getattr(unc, "a_sd", None), getattr(unc, "b_sd", None)
        if a_sd is None and b_sd is None and a_draws is not None and b_draws is not None:
            return ItemCovariance.from_draws(a_draws, b_draws)
        if a_sd is not None or b_sd is not None:
            return ItemCovariance.from_sds(a_sd, b_sd, getattr(unc, "ab_cov", None), n_items=n, source="bank item_uncertainty")
    fields_ = set(bank.items.data_vars)
    if {"a_sd", "b_sd"} & fields_:
        get = lambda k: bank.item_metadata(k) if k in fields_ else None  # noqa: E731
        return ItemCovariance.from_sds(get("a_sd"), get("b_sd"), get("ab_cov"), n_items=n, source="/items a_sd, b_sd, ab_cov")
    post = bank.posterior
    if post is not None and {"a_draws", "b_draws"} <= set(post.data_vars):
        return ItemCovariance.from_draws(post["a_draws"].transpose("draw", "item").values,
                                         post["b_draws"].transpose("draw", "item").values)
    return None


def bank_interval_calibration(bank) -> IntervalCalibration | None:
    """The bank's stored cross-fitted interval calibration (root attribute ``interval_calibration``), or None."""
    text = bank.attrs.get("interval_calibration")
    if not text:
        return None
    return IntervalCalibration.from_json(text, source=f"bank {getattr(bank, 'bank_id', '?')!r}")


def _check_correct(correct) -> int:
    if isinstance(correct, (bool, np.bool_)):
        return int(correct)
    if isinstance(correct, (int, np.integer)) and int(correct) in (0, 1):
        return int(correct)
    if isinstance(correct, (float, np.floating)) and float(correct) in (0.0, 1.0):
        return int(correct)
    raise InvalidResponseError(f"correct must be 0 or 1 (or a bool), got {correct!r}")


def _check_cot(cot_length) -> float | None:
    if cot_length is None:
        return None
    if isinstance(cot_length, (bool, np.bool_)) or not isinstance(cot_length, (int, float, np.integer, np.floating)):
        raise InvalidResponseError(f"cot_length must be a number of tokens >= 0 or None, got {cot_length!r}")
    value = float(cot_length)
    if math.isnan(value) or math.isinf(value) or value < 0:
        raise InvalidResponseError(f"cot_length must be a finite number of tokens >= 0 (None if unknown), got {cot_length!r}")
    return value


def _estimate_json(est: TraitEstimate) -> dict:
    return {"theta": est.theta, "theta_sd": est.theta_sd, "tau": est.tau, "tau_sd": est.tau_sd}


def _nan_to_none(v):
    return None if isinstance(v, float) and math.isnan(v) else v


def _close(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) <= 1e-9 * (1.0 + abs(b))


class CATSession:
    """An adaptive test of one subject (an LLM) against an item bank.

    >>> s = CATSession(bank, rng=7)
    >>> while not s.finished:
    ...     item = s.next_item()
    ...     s.record(item, correct, cot_length=tokens)   # tokens: LaRT banks only
    >>> s.estimate.theta, s.estimate.theta_sd

    * ``selector``: an :class:`~catengine.selection.ItemSelector` (default: theta-targeted precision for
      LaRT banks, maximum Fisher information otherwise).
    * ``estimator``: :class:`~catengine.estimation.MAPEstimator` (default) or ``EAPEstimator``.
    * ``stopping``: a :class:`~catengine.stopping.StoppingRule` (default: SD(theta) <= 0.3 after at
      least 5 items, or 50 items).
    * ``exposure``: exposure / content controls applied in order (Randomesque, SympsonHetter,
      ContentBalance).
    * ``rng``: Generator | int | None; drawn from only by random selection, randomesque and the
      Sympson-Hetter lottery.
    * ``log``: a path: every proposal and answer is appended to this JSONL file (flushed per
      line; ``fsync=True`` also syncs it to disk); :meth:`resume` rebuilds the session from it.

    ``next_item()`` proposes (and keeps proposing, until answered) an item id; ``record()`` takes an
    answer for any unanswered item of the bank — proposed or not — exactly once. Bad input raises a
    :class:`~catengine.errors.CatEngineError` subclass and leaves the session unchanged.
    """

    def __init__(self, bank, *, selector: ItemSelector | None = None, estimator: TraitEstimator | None = None,
                 stopping: StoppingRule | None = None, exposure=(), rng=None, subject: str = "subject",
                 log=None, fsync: bool = False, _items: ItemTable | None = None, _writer=None):
        self.bank = bank
        self.items = _items if _items is not None else item_table(bank)
        self.params = self.items.params
        self.subject = str(subject)
        self.selector = selector if selector is not None else default_selector(
            self.params.response_model, self.items.covariance is not None)
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
        self._history: list[StepRecord] = []
        self._stop_cache: tuple[int, str | None] | None = None
        self._top_k = max([1] + [int(c.top_k) for c in self.exposure])
        self._replaying = False
        # the log: a standalone session writes its own header; an Engine passes its shared writer
        self._owns_writer = False
        self._writer = _writer
        if log is not None:
            if _writer is not None:
                raise ValueError("pass either log or _writer")
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
    def pending_item(self) -> str | None:
        """The proposed item awaiting an answer, if any."""
        return None if self._pending is None else self.items.item_ids[self._pending[0]]

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
            why = self.stopping.reason(StopState(n, self._estimate, self._n_available, self._max_information))
        self._stop_cache = (n, why)
        return why

    @property
    def finished(self) -> bool:
        return self.stop_reason is not None

    def _max_information(self) -> float:
        if self._n_available == 0:
            return 0.0
        t = self.items
        idx = np.empty(1, dtype=np.int64)
        val = np.empty(1)
        SK.topk_info(t.model, np.array([self._estimate.theta]), np.ones(1), self.params.a, self.params.b,
                     t.c, t.d, self._available, t.info_order, t.info_bound, 1, idx, val)
        return float(val[0])

    # ------------------------------------------------------------------ the adaptive loop
    def _index(self, item_id) -> int:
        try:
            return self.bank.index_of(item_id)
        except KeyError:
            raise UnknownItemError(
                f"item {item_id!r} is not in bank {getattr(self.bank, 'bank_id', '?')!r} ({self.params.n_items} items)"
            ) from None

    def eligible_mask(self) -> np.ndarray:
        """Items the selector may propose now: unanswered, not excluded, allowed by exposure control."""
        mask = self._available
        if self.exposure:
            administered = self._responses.items
            for control, data in zip(self.exposure, self._exposure_data):
                mask = control.restrict(mask, ExposureContext(self.items, administered, data))
        return mask

    def next_item(self) -> str:
        """The item to administer next (the same one until it, or another item, is answered).

        Raises :class:`BankExhaustedError` when every item has been answered or excluded. It keeps
        proposing after the stopping rule is met; check :attr:`finished` to stop.
        """
        if self._pending is not None:
            return self.items.item_ids[self._pending[0]]
        if self._n_available == 0:
            raise BankExhaustedError(
                f"bank exhausted for subject {self.subject!r}: all {self.params.n_items} items answered or excluded"
            )
        rng_before = rng_state_to_json(self._rng) if self._writer is not None else None
        mask = self.eligible_mask()
        state = SelectionState(self._estimate, mask, self._responses, self.items, self._log_posterior)
        cand, vals = self.selector.candidates(self.params, state, self._rng, self._top_k)
        pick = int(self._rng.integers(cand.size)) if self._top_k > 1 and cand.size > 1 else 0
        j, crit = int(cand[pick]), float(vals[pick])
        if not self._available[j]:  # a selector bug must never reach the user
            raise RuntimeError(f"selector {type(self.selector).__name__} proposed ineligible item index {j}")
        self._pending = (j, crit)
        self._emit({"event": "propose", "subject": self.subject, "step": self._responses.n + 1,
                    "item": self.items.item_ids[j], "criterion": crit if math.isfinite(crit) else None, "rng": rng_before})
        return self.items.item_ids[j]

    def _log_posterior(self, thetas):
        return self.estimator.log_posterior(self.params, self._responses, thetas)

    def record(self, item_id, correct, cot_length=None) -> TraitEstimate:
        """Record an answer (0/1) and, for LaRT banks, the CoT length in tokens; returns the new estimate.

        The item may be any unanswered item of the bank (it need not be the proposed one); it counts
        once. Errors (unknown item, answered twice, correct not 0/1, CoT length negative / NaN /
        infinite) leave the session unchanged. A CoT length for a logistic bank is ignored with a
        :class:`CoTIgnoredWarning`; ``None`` means unknown.
        """
        j = self._index(item_id)
        item = self.items.item_ids[j]
        if self._responses.administered[j]:
            raise ItemAlreadyAnsweredError(f"item {item!r} was already answered by subject {self.subject!r}")
        y = _check_correct(correct)
        if self.params.response_model != "lart":
            if cot_length is not None:
                warnings.warn(
                    f"CoT length {cot_length!r} ignored: bank response model {self.params.response_model!r} does not use CoT lengths",
                    CoTIgnoredWarning, stacklevel=2,
                )
            cot = None
        else:
            cot = _check_cot(cot_length)
        log_t = math.nan
        if cot is not None:
            try:
                log_t = float(lart.log_cot_length(cot, self.cot_offset))
            except ValueError as exc:
                raise InvalidResponseError(str(exc)) from None
        return self._apply(j, y, cot, log_t)

    def _apply(self, j: int, y: int, cot: float | None, log_t: float, logged: dict | None = None) -> TraitEstimate:
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
        rec = StepRecord(step=state.n, item=self.items.item_ids[j], correct=y, cot_length=cot,
                         theta=est.theta, theta_sd=est.theta_sd, tau=est.tau, tau_sd=est.tau_sd,
                         criterion=crit, proposed=proposed)
        try:
            self._emit({"event": "record", "subject": self.subject, "step": state.n, "item": rec.item, "correct": y,
                        "cot_length": cot, "proposed": proposed, "estimate": _estimate_json(est)})
        except BaseException:
            state.restore(snap)
            raise
        if logged is not None and "estimate" in logged:
            old = logged["estimate"]
            if not all(_close(getattr(est, k), old.get(k)) for k in ("theta", "theta_sd", "tau", "tau_sd")):
                warnings.warn(
                    f"replayed estimate for {self.subject!r} at step {state.n} differs from the logged one "
                    f"({_estimate_json(est)} vs {old}); continuing with the recomputed value",
                    ResumeMismatchWarning, stacklevel=3,
                )
        if self._available[j]:
            self._available[j] = False
            self._n_available -= 1
        self._excluded.discard(j)
        self._estimate = est
        self._history.append(rec)
        self._pending = None
        return est

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
        self._stop_cache = None

    # ------------------------------------------------------------------ logging / resume
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

    def _replay(self, event: dict) -> None:
        kind = event["event"]
        if kind == "propose":
            self._rng.bit_generator.state = restore_rng(event["rng"]).bit_generator.state
            self._pending = None
            got = self.next_item()
            if got != event["item"]:
                raise SessionLogError(
                    f"replaying subject {self.subject!r}: the engine proposes {got!r} where the log has {event['item']!r} "
                    "(was the bank, the configuration or the library changed?)"
                )
        elif kind == "record":
            j = self._index(event["item"])
            cot = event.get("cot_length")
            log_t = math.nan
            if cot is not None and self.params.response_model == "lart":
                log_t = float(lart.log_cot_length(float(cot), self.cot_offset))
            self._apply(j, _check_correct(event["correct"]), None if cot is None else float(cot), log_t, logged=event)
        elif kind == "exclude":
            self.exclude(event["item"])
        else:
            raise SessionLogError(f"unexpected {kind!r} event for subject {self.subject!r} during replay")

    @classmethod
    def resume(cls, log, bank=None, *, subject: str | None = None, fsync: bool = False) -> "CATSession":
        """Rebuild a session from its log (same answers, estimates, pending proposal, rng state) and
        keep appending to the log. ``bank``: the bank it was run on (default: opened from the path in
        the log header); it must match the logged fingerprint. A torn last line is reported
        (CorruptLogWarning), moved to ``<log>.corrupt`` and skipped."""
        from catengine.session.engine import Engine

        engine = Engine.resume(log, bank, fsync=fsync)
        subjects = list(engine.sessions)
        if subject is None:
            if len(subjects) != 1:
                raise SessionLogError(f"{log} holds {len(subjects)} subjects {subjects[:5]}; name one with subject=")
            subject = subjects[0]
        if subject not in engine.sessions:
            raise SessionLogError(f"{log} has no session for subject {subject!r}; it has {subjects[:10]}")
        session = engine.sessions[subject]
        session._owns_writer = True
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
        if self.params.response_model == "lart":
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
            "pending": None if self._pending is None else (self._pending[0], _nan_to_none(self._pending[1])),
            "available": self._available.copy(),
            "excluded": sorted(self._excluded),
            "rng": rng_state_to_json(self._rng),
            "exposure": [np.asarray(d[0] if isinstance(d, tuple) else d).tolist() if d is not None else None
                         for d in self._exposure_data],
        }


def make_header(bank, items: ItemTable, config: dict, seed_entropy=None) -> dict:
    from catengine import __version__

    source = getattr(bank, "source", "<memory>")
    if source and source != "<memory>":
        source = str(Path(source).resolve())
    return {
        "event": "header",
        "format": LOG_FORMAT,
        "version": LOG_VERSION,
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "library_version": __version__,
        "bank": {
            "bank_id": getattr(bank, "bank_id", ""),
            "bank_version": int(getattr(bank, "version", 0)),
            "source": source,
            "response_model": items.params.response_model,
            "n_items": items.n_items,
            "fingerprint": bank_fingerprint(items),
        },
        "config": config,
        "seed_entropy": seed_entropy,
    }


def strategies_from_config(config: dict) -> dict:
    """Keyword arguments (selector, estimator, stopping, exposure) from a logged config."""
    return {
        "selector": from_config(config["selector"]),
        "estimator": from_config(config["estimator"]),
        "stopping": from_config(config["stopping"]),
        "exposure": tuple(from_config(c) for c in config.get("exposure", [])),
    }


__all__ = ["CATSession", "StepRecord", "bank_fingerprint", "bank_interval_calibration", "bank_item_covariance", "item_table",
           "make_header", "strategies_from_config"]
