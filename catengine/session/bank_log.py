"""What ``CATSession`` and ``Engine`` share around a session log: the bank's item table and
fingerprint, the log header, the strategies a header describes, and the replay of a log into
sessions. Both import this module; neither imports the other's (``engine`` builds on ``session``).
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path

import numpy as np

from catengine.errors import CatEngineError
from catengine.estimation.interval_calibration import IntervalCalibration
from catengine.models.item_covariance import ItemCovariance
from catengine.selection import ItemTable
from catengine.session.config import from_config
from catengine.session.errors import SessionLogError
from catengine.session.log import LOG_FORMAT, LOG_VERSION, LogWriter, quarantine_corrupt_tail, read_log, restore_rng


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
    if cv is not None and (cv.has_slope_uncertainty or items.b_sd is None):  # banks with b_sd only: b_sd alone
        for arr in (cv.a_var, cv.b_var, cv.ab_cov):
            h.update(arr.tobytes())
    if items.interval_calibration is not None:
        h.update(json.dumps(items.interval_calibration.record, sort_keys=True).encode())
    if items.score_factors is not None:
        h.update(items.score_factors.loadings.tobytes())
        h.update(items.score_factors.intercepts.tobytes())
    return h.hexdigest()


@lru_cache(maxsize=16)
def item_table(bank) -> ItemTable:
    """The numpy view of an ``ItemBank`` that selectors use (cached for the last 16 banks: it holds
    the bank's sort order for the selection kernels, built once per bank)."""
    fields_ = set(bank.items.data_vars)
    b_sd = bank.item_metadata("b_sd") if "b_sd" in fields_ else None
    return ItemTable(bank.params, bank.item_ids, b_sd=b_sd, metadata=bank.item_metadata,
                     covariance=bank_item_covariance(bank), interval_calibration=bank_interval_calibration(bank),
                     score_factors=getattr(bank, "score_factors", None), population=bank_population(bank))


def bank_population(bank):
    """The calibration LLMs' traits (``/subjects`` theta), full-benchmark accuracies and recorded
    answers (``/responses``: each row's mean over its answered items, and the rows themselves on the
    bank's items, -1 where a run has no answer) as a ``Population``; None when the bank stores no
    traits."""
    from catengine.scoring.standing import Population

    subjects = getattr(bank, "subjects", None)
    if subjects is None or "theta" not in subjects.data_vars:
        return None
    thetas = np.asarray(subjects["theta"].values, dtype=float)
    if not np.any(np.isfinite(thetas)):
        return None
    accuracies = rows = None
    responses = getattr(bank, "responses", None)
    if responses is not None and "correct" in responses.data_vars and responses["correct"].ndim == 2 \
            and "item" in responses["correct"].dims:
        correct = responses["correct"].transpose(..., "item")
        y = np.asarray(correct.values, dtype=float)
        y = np.where((y == 0) | (y == 1), y, np.nan)  # missing cells are stored as a fill value
        with np.errstate(invalid="ignore"):
            counts = np.sum(np.isfinite(y), axis=1)
            accuracies = np.where(counts > 0, np.nansum(y, axis=1) / np.maximum(counts, 1), np.nan)
        # the answers on the bank's items, in its order (an item the responses lack: no answer)
        column = {str(i): k for k, i in enumerate(np.asarray(correct["item"].values).astype(str))}
        where = np.array([column.get(str(i), -1) for i in bank.item_ids], dtype=np.int64)
        if y.shape[0] and np.any(where >= 0):
            taken = np.where(np.isfinite(y), y, -1.0)[:, np.maximum(where, 0)]
            rows = np.where(where[None, :] >= 0, taken, -1.0).astype(np.int8)
    return Population(thetas, accuracies, rows)


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


def lock_for_resume(log, fsync: bool = False) -> LogWriter:
    """The log's single writer, taken *before* the log is read: nobody may append while it is read
    and replayed (a second writer or resume elsewhere gets ``SessionLogLockedError``)."""
    if Path(log).is_dir():
        raise IsADirectoryError(f"session log {log} is a directory, not a log file")
    if not Path(log).is_file():
        raise FileNotFoundError(f"session log {log} does not exist")
    return LogWriter(log, fsync=fsync, must_be_new=False)


def read_for_resume(log, bank=None):
    """``(contents, bank, strategies)`` of a log to resume: the bank (default: opened from the path
    in the header) must match the logged fingerprint; the strategies are rebuilt from the header."""
    contents = read_log(log)
    header = contents.header
    meta = header["bank"]
    if not isinstance(meta, dict) or not isinstance(header["config"], dict):
        raise SessionLogError(f"{log}:1: the header's 'bank' and 'config' must be JSON objects")
    entropy = header.get("seed_entropy")
    if entropy is not None and (isinstance(entropy, bool) or not isinstance(entropy, int) or entropy < 0):
        raise SessionLogError(f"{log}:1: the header's 'seed_entropy' must be a non-negative integer (or null), "
                              f"got {entropy!r}")
    if bank is None:
        from catengine.itembank import open_item_bank

        source = meta.get("source")
        if not source or source == "<memory>":
            raise SessionLogError(f"{log} was written for an in-memory bank; pass bank= to resume it")
        bank = open_item_bank(source)
    fp = bank_fingerprint(item_table(bank))
    if fp != meta.get("fingerprint"):
        raise SessionLogError(
            f"{log} was written for bank {meta.get('bank_id')!r} v{meta.get('bank_version')} with fingerprint "
            f"{str(meta.get('fingerprint'))[:12]}..., but the bank given ({getattr(bank, 'bank_id', '?')!r} "
            f"v{getattr(bank, 'version', '?')}) has {fp[:12]}..."
        )
    try:
        strategies = strategies_from_config(header["config"])
    except (KeyError, TypeError, ValueError) as exc:
        raise SessionLogError(f"{log}: cannot rebuild the configuration from the header ({exc})") from None
    return contents, bank, strategies


def replay_events(log, contents, new_session) -> dict:
    """Sessions by subject, rebuilt by replaying the log's events; ``new_session(subject, rng)``
    makes the session of an ``open`` event. Any inconsistency (a duplicated or out-of-sequence
    line, an unknown item, a bad value) is a SessionLogError naming the file and line: a log is
    never half-trusted. A torn last line is quarantined afterwards."""
    from catengine import __version__

    # a log written by this very version must replay to its recorded estimates exactly; an older
    # version's may differ numerically (a warning, not a refusal)
    strict = contents.header.get("library_version") == __version__
    sessions = {}
    for line, event in zip(contents.lines, contents.events):
        where = f"{log}:{line}"
        subject = event.get("subject")
        if not isinstance(subject, str) or not subject:
            raise SessionLogError(f"{where}: {event['event']} event has subject {subject!r}; subject ids are non-empty strings")
        try:
            if event["event"] == "open":
                if subject in sessions:
                    raise SessionLogError(f"subject {subject!r} is opened twice")
                session = new_session(subject, restore_rng(event["rng"]))
                session._replaying = True
                sessions[subject] = session
                continue
            if subject not in sessions:
                raise SessionLogError(f"{event['event']} event for subject {subject!r} before its open event")
            sessions[subject]._replay(event, strict=strict)
        except (CatEngineError, ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
            message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
            raise SessionLogError(f"{where}: cannot replay this {event['event']} line: {message}") from None
    quarantine_corrupt_tail(contents)
    return sessions


def attach_writer(writer: LogWriter, sessions) -> LogWriter:
    """Hand the (locked) writer to the replayed ``sessions`` for appending."""
    writer.sync_size()
    for session in sessions:
        session._writer = writer
        session._replaying = False
    return writer
