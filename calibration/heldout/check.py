"""The held-out check every default ``to_item_bank`` ends with (:func:`with_held_out_check`): a
bank with its record (root attribute ``interval_calibration``), its score factors and, for a
calibrator whose ``held_out_widens_b_sd`` says so, its item SDs widened to the spread of the refits
-- or, when the check cannot run, the bank without them and the reason
(``interval_calibration_skipped``).

The check itself is :func:`~calibration.heldout.cross_fit.cross_fit_intervals`; what a calibrator
contributes is read from it, never from its name: its training data (``training_data_``), its
settings for the refits (:class:`~calibration.heldout.refits.RefitBank`), its seed (``rng``) and
``held_out_widens_b_sd``.
"""

from __future__ import annotations

import json
import warnings

import numpy as np

from calibration.heldout.cross_fit import FoldFitError, cross_fit_intervals, describe_llms
from calibration.heldout.folds import n_llm_groups, with_llm_groups
from calibration.heldout.item_sd import scale_b_sd
from calibration.heldout.limits import MIN_FOLDS, MIN_SUBJECTS
from calibration.heldout.refits import FoldScoreFactors, RefitBank
from calibration.heldout.score_factors import attach_score_factors
from calibration.heldout.threads import Workers, threads_for

__all__ = ["with_held_out_check"]


def with_held_out_check(calibrator, bank, interval_check="auto", *, cold_start: bool = False, **to_bank):
    """The hook every ``to_item_bank`` calls last: ``bank`` with its held-out check, stored in the
    root attribute ``interval_calibration``.

    ``interval_check``: "auto" (default) runs the check when the calibrator kept its training data
    and it has at least ``MIN_SUBJECTS`` LLM runs of at least ``2 * MIN_FOLDS`` LLMs (else the bank
    records why not); True requires it; False skips it (the fold banks of the check itself).
    Costs ``folds`` refits plus replays. The check never makes the fit fail: with "auto", a check
    that cannot run (a fold that cannot be calibrated, or any other failure of the check, which
    also issues a RuntimeWarning) leaves the bank as it is without the check, its reason in the
    root attribute ``interval_calibration_skipped``; sessions then use the model's own intervals
    and scores, as for any bank without a check.
    The refits start from the full fit (:class:`~calibration.heldout.refits.RefitBank`);
    ``cold_start=True`` refits from scratch and steps every test, random ones too, through
    sessions (the reference of ``benchmarks/check_cost.py``).
    """
    if interval_check is False or interval_check is None:
        return bank
    if interval_check not in ("auto", True):
        raise ValueError(f"interval_check must be 'auto', True or False, got {interval_check!r}")
    data = getattr(calibrator, "training_data_", None)
    reason = _why_not(data)
    if not reason:
        data, groups_from = with_llm_groups(data)  # runs of one LLM are held out together, given or detected
        reason = _why_not_grouped(data)
    if reason:
        if interval_check is True:
            raise ValueError(f"interval check impossible: {reason}")
        return bank.replace_attrs(interval_calibration_skipped=reason)
    widen = bool(getattr(calibrator, "held_out_widens_b_sd", False)) and "b_sd" in bank.items.data_vars
    try:
        checked, record = _run(calibrator, bank, data, widen, cold_start, to_bank)
    except FoldFitError as exc:  # e.g. one LLM holds all the information: no held-out check is possible
        if interval_check is True:
            raise ValueError(f"interval check impossible: {exc}") from None
        return bank.replace_attrs(interval_calibration_skipped=str(exc))
    except Exception as exc:  # noqa: BLE001 - the check never makes the fit fail: the bank says why it has none
        if interval_check is True:
            raise
        reason = f"the check failed ({type(exc).__name__}: {str(exc)[:300]})"
        warnings.warn(f"interval check skipped: {reason}; the bank is written without it", RuntimeWarning, stacklevel=3)
        return bank.replace_attrs(interval_calibration_skipped=reason)
    if groups_from.startswith("detected"):  # given groups (or none) leave the record as it was
        record["llm_groups"] = groups_from
    if not record["curves"]:  # score factors come with the check, never without
        return bank.replace_attrs(interval_calibration_skipped="too few held-out LLMs with enough answers")
    factor = record["item_sd_factors"]["b_applied"]
    if widen and factor > 1.0:
        checked = scale_b_sd(checked, factor, f"posterior SD of b, widened x{factor:.3g} to the spread of refits on "
                             f"{record['folds']} folds of the calibration LLMs (cross-fitted, interval_calibration)")
    return checked.replace_attrs(interval_calibration=json.dumps(record, sort_keys=True))


def _why_not(data) -> str:
    """Why the check cannot run on the calibrator's training data ``data`` (None: not kept), or ""."""
    if data is None:
        return "the calibrator did not keep its training data"
    if data.n_subjects < MIN_SUBJECTS:
        return f"{data.n_subjects} calibration LLMs (needs {MIN_SUBJECTS})"
    return ""


def _why_not_grouped(data) -> str:
    """Why ``data`` (its runs grouped into LLMs) holds too few LLMs to hold out, or ""."""
    n_groups = n_llm_groups(data)
    if n_groups < 2 * MIN_FOLDS:
        return (f"{describe_llms(data, n_groups)}: too few to hold out (needs {2 * MIN_FOLDS} LLMs, {MIN_FOLDS} folds "
                "of at least 2; the runs of one LLM stay in one fold)")
    return ""


def _run(calibrator, bank, data, widen: bool, cold_start: bool, to_bank: dict):
    """(``bank`` with its score factors, the check's record): the full bank's score factors (their
    number chosen by cross-validation) are fitted beside the refits, on the same workers; the score
    curves of the check are what make their intervals honest."""
    seed = _seed_of(calibrator)
    with Workers(threads_for(data.n_subjects * data.n_items)) as workers:
        full_factors = workers.submit(attach_score_factors, bank, data, rng=seed, keep_fit=True)
        record = cross_fit_intervals(data, RefitBank(calibrator, to_bank, warm=not cold_start), rng=seed,
                                     calibration_method=bank.attrs.get("calibration_method", ""), full_bank=bank,
                                     widen_b_sd=widen, shortcuts=not cold_start, workers=workers,
                                     prepare_bank=FoldScoreFactors(full_factors, data.subject_ids, warm=not cold_start))
        checked, _ = full_factors.result()
    return checked, record


def _seed_of(calibrator) -> int:
    """The check's seed: the calibrator's ``rng`` when it is an int, else 0."""
    rng = getattr(calibrator, "rng", None)
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        return int(rng)
    return 0
