"""The held-out check on a response matrix (docs/math.md §7.5): refits on folds of the calibration
LLMs, replays of the held-out ones, and the record of their trait and score curves.

The calibration LLMs are split into ``folds`` groups (:func:`~calibration.heldout.folds.llm_folds`:
the runs of one LLM, ``ResponseData.subject_groups``, stay in one fold). For each fold a bank is
fitted on the other folds by the same calibrator and settings (``make_bank``), and every held-out
LLM is replayed through adaptive tests from its recorded answers
(:func:`~calibration.heldout.replay.replay_llms`), with the bank's default selector, with plain
maximum information (when that is not the default) and with random selection. The trait curves
(c(L), z95(L): ``calibration.heldout.interval_curves``) and the score curves
(``calibration.heldout.score_curves``) are fitted from the pooled replays, and the strength-ordered
sides (``calibration.heldout.strength_ordered``) tell how the bank behaves beyond its calibration
population. The record is what a bank stores in its root attribute ``interval_calibration`` (JSON,
read by ``catengine.estimation.interval_calibration``); a ``CATSession`` applies it by default. The
stored figures are in-sample for c(L) (the same split fitted it); the honest evidence is the nested
replay audit (``calibration audit --kind replay`` with its default ``bank="default"``), whose fold
banks run their own check on their training folds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from calibration.common import stream
from calibration.heldout.fold_replays import FoldReplays
from calibration.heldout.folds import llm_folds, n_llm_groups
from calibration.heldout.item_sd import item_sd_factors, scale_b_sd, trait_spread_problem
from calibration.heldout.limits import DEFAULT_FOLDS, DEFAULT_LENGTHS, MIN_FOLDS, MIN_HELD_OUT
from calibration.heldout.strength_ordered import edge_folds, strength_ordered_check
from calibration.heldout.threads import Workers, threads_for
from catengine.errors import CatEngineError

__all__ = ["FoldFitError", "cross_fit_intervals", "describe_llms", "loses_to_random"]


class FoldFitError(CatEngineError, ValueError):
    """A fold of the held-out check whose training LLMs cannot be calibrated (the check is then skipped)."""


def cross_fit_intervals(data, make_bank, *, folds: int = DEFAULT_FOLDS, test_lengths=DEFAULT_LENGTHS,
                        scoring: str | None = None, estimator: str = "map", rng=0,
                        calibration_method: str = "", full_bank=None, widen_b_sd: bool = False,
                        shortcuts: bool = True, prepare_bank=None, workers=None) -> dict:
    """The held-out check's record (a dict; a bank stores it as ``interval_calibration``) of a
    calibration on ``data``.

    ``make_bank(train_data, rng, bank_id) -> (ItemBank, converged)`` refits the calibration on a
    subset of the LLMs without its own check. ``prepare_bank(bank, train_data) -> ItemBank``
    (optional) completes each refitted bank before its replays (the bank's check attaches the
    score factors there: :class:`~calibration.heldout.refits.FoldScoreFactors`). ``scoring``:
    "lart" (with CoT) or "irt" for LaRT banks (default: the session default, "lart"); ignored
    otherwise. With ``full_bank`` (the bank fitted on all of ``data``) the item SDs are checked too
    (:func:`~calibration.heldout.item_sd.item_sd_factors`); with ``widen_b_sd`` (a calibrator whose
    ``held_out_widens_b_sd`` says so) the fold banks' b_sd are widened by the measured factor
    (>= 1) before the replays, and the record's ``item_sd_factors["b_applied"]`` says by how much
    the full bank's must be widened to match. ``shortcuts`` (default): random-selection tests are
    scored at the tabulated lengths only (:func:`~calibration.heldout.replay.random_replays`) and
    the adaptive tests are replayed by the compiled replay (``catengine.session.fast_replay``);
    False steps every test through sessions (the reference ``benchmarks/check_cost.py`` compares with).

    The refits, replays and score sums are tasks on ``workers`` (a
    :class:`calibration.heldout.threads.Workers`; default: a pool of its own, one thread from
    ``threads.MAX_POOLED_CELLS`` cells on). Every task draws from its own random stream and the
    results are read in fold order, so the record does not depend on how many threads ran them
    (``tests/test_interval_calibration_fast.py``).
    """
    args = (data, make_bank, folds, test_lengths, scoring, estimator, rng, calibration_method, full_bank,
            widen_b_sd, shortcuts, prepare_bank)
    if workers is not None:
        return _cross_fit(*args, workers)
    with Workers(threads_for(data.n_subjects * data.n_items)) as own:
        return _cross_fit(*args, own)


def _cross_fit(data, make_bank, folds, test_lengths, scoring, estimator, rng, calibration_method, full_bank, widen_b_sd,
               shortcuts, prepare_bank, workers) -> dict:
    from catengine.session import CATSession

    t0 = time.perf_counter()
    split = _Split.of(data, folds, test_lengths, rng)
    edges = edge_folds(data, split.n_obs, split.L)
    fold_done, side_done = _submit_refits(data, make_bank, prepare_bank, split, edges, workers)
    fold_banks, n_converged = _fold_banks(fold_done, split, data.n_subjects)
    factors, fold_banks = _item_sd_check(full_bank, fold_banks, split.K, widen_b_sd)
    scoring_used = (scoring or "lart") if fold_banks[0].params.model.has_cot else "irt"
    default_name = CATSession(fold_banks[0]).selector.name  # fold banks carry no check: the usual default
    replay = FoldReplays(data, split.n_obs, split.L, split.lengths, scoring_used, default_name, estimator, split.seed,
                         shortcuts, workers)
    curves, score_curves, beyond = _replayed_curves(data, replay, fold_banks, split, edges, side_done, workers)
    return {
        "version": 1,
        "method": "cross-fitted replay of held-out calibration LLMs (docs/math.md §7.5)",
        "form": "c(L) from the pooled RMS z per length, smoothed over neighbouring lengths, below 1 only by its "
                "70% upper confidence bound (>= 24 LLMs); linear between lengths, constant beyond; the engine "
                "multiplies SD(theta) by c(L). z95(L): a median-unbiased order statistic for the held-out 95% "
                "quantile of |z| after c(L), per length, in [1, 3] (1.96 with <= 23 LLMs); the "
                "engine's 95% interval is theta +- z95(L) SD",
        "calibration_method": calibration_method,
        "folds": split.K,
        "n_llm_groups": split.n_groups,
        "n_subjects": int(data.n_subjects),
        "estimator": estimator,
        "scoring": scoring_used,
        "selection": default_name,
        "curves": curves,
        "score_curves": score_curves,
        "score_form": "delta(L): residual SD per unanswered item (accuracy scale), s(L): log-SD of the unrecorded CoT "
                      "total; the engine adds (delta n_U)^2 to the predicted number correct's variance and a mean-1 "
                      "log-normal factor to the unrecorded CoT (docs/math.md §7.6)",
        "beyond": beyond,
        "n_converged_folds": n_converged,
        "item_sd_factors": factors,
        "seconds": round(time.perf_counter() - t0, 2),
        "seed": str(split.seed),
    }


@dataclass(frozen=True)
class _Split:
    """How one check splits ``data``: ``K`` folds of whole LLMs (``fold_rows``), the LLMs' answer
    counts, the tabulated test lengths (the longest is ``L``) and the check's seed."""

    K: int
    n_groups: int
    seed: int
    fold_rows: list
    n_obs: np.ndarray
    lengths: list

    @property
    def L(self) -> int:
        return self.lengths[-1]

    @classmethod
    def of(cls, data, folds, test_lengths, rng) -> "_Split":
        N = data.n_subjects
        n_groups = n_llm_groups(data)
        K = int(min(folds, n_groups // 2))
        if K < 2:  # every fold holds out at least 2 LLMs, and there are at least 2 folds
            raise FoldFitError(f"{describe_llms(data, n_groups)} are too few to split into {MIN_FOLDS} folds of at "
                               f"least 2 LLMs (needs {2 * MIN_FOLDS} LLMs; the runs of one LLM stay in one fold)")
        if isinstance(rng, np.random.Generator):
            seed = int(rng.integers(2**63))
        else:
            seed = int(np.random.SeedSequence(rng).entropy)
        # the runs of one LLM (data.subject_groups) are held out together: a sibling in the training folds would
        # flatter the check
        fold_rows = llm_folds(data.llm_groups, K, stream(seed, 0, "interval-folds"))
        n_obs = np.count_nonzero(data.correct >= 0, axis=1)
        max_len = int(min(max(test_lengths), data.n_items // 2, np.sort(n_obs)[max(0, N - MIN_HELD_OUT * 2)]))
        lengths = [int(L) for L in test_lengths if L <= max_len] or [max(1, max_len)]
        return cls(K, n_groups, seed, fold_rows, n_obs, lengths)


def _submit_refits(data, make_bank, prepare_bank, split, edges, workers):
    """Futures of the completed fold banks (in fold order) and strength-ordered side banks (by side).

    Every refit is submitted first (folds, then the sides), then each bank's completion: the
    workers take them in this order, so a completion never waits for a refit that has not started."""
    N = data.n_subjects

    def refit(train, key, bank_id):
        train_data = data.subset(subjects=train)
        bank, converged = make_bank(train_data, np.random.default_rng(stream(split.seed, key, "fit")), bank_id)
        return train_data, bank, converged

    def completed(fit):
        train_data, bank, converged = fit.result()
        return (bank if prepare_bank is None else prepare_bank(bank, train_data)), converged

    fits = [workers.submit(refit, np.setdiff1d(np.arange(N), split.fold_rows[k]), k, f"interval_check_fold{k}")
            for k in range(split.K)]
    side_fits = {side: workers.submit(refit, np.setdiff1d(np.arange(N), rows), split.K + r, f"interval_check_{side}")
                 for r, (side, (rows, _)) in enumerate(edges.items())}
    fold_done = [workers.submit(completed, f) for f in fits]
    return fold_done, {side: workers.submit(completed, f) for side, f in side_fits.items()}


def _fold_banks(fold_done, split, N) -> tuple[list, int]:
    """The completed fold banks and how many of their refits converged; FoldFitError when a fold's
    training LLMs cannot be calibrated or its refit gives them no trait spread."""
    n_converged, fold_banks = 0, []
    for k, done in enumerate(fold_done):
        without = f"fold {k + 1} of {split.K} (without {len(split.fold_rows[k])} of the {N} LLM runs)"
        try:
            bank, converged = done.result()
        except ValueError as exc:  # the data without this fold's LLMs cannot be calibrated at all
            raise FoldFitError(f"{without} cannot be calibrated: {exc}") from None
        n_converged += int(converged)
        fold_banks.append(bank)
        spread = trait_spread_problem(bank)
        if spread:
            raise FoldFitError(f"{without}: {spread}")
    return fold_banks, n_converged


def _item_sd_check(full_bank, fold_banks, K: int, widen_b_sd: bool):
    """(the record's ``item_sd_factors``, the fold banks, their b_sd widened by the measured factor
    when ``widen_b_sd`` and it exceeds 1)."""
    factors = item_sd_factors(full_bank, fold_banks, K) if full_bank is not None else {"a": None, "b": None}
    applied = 1.0
    if widen_b_sd and factors.get("b"):
        applied = max(1.0, float(factors["b"]))
        if applied > 1.0:
            fold_banks = [scale_b_sd(b, applied, "") for b in fold_banks]
    factors["b_applied"] = round(applied, 4)
    return factors, fold_banks


def _replayed_curves(data, replay, fold_banks, split, edges, side_done, workers):
    """(curves, score curves, beyond) of the record: the fold banks' replays with the default
    selector, random selection and maximum information (and randomised selection when the score
    curves make it the sessions' default), and the strength-ordered sides'."""
    from catengine.selection import SELECTORS, RandomisedSelection, RandomSelection

    N = data.n_subjects
    first = [("default", None), ("random", RandomSelection())]
    if replay.default_name != "mfi":
        first.append(("mfi", SELECTORS["mfi"]()))
    folds_replayed = replay.folds(fold_banks, split.fold_rows, first)
    sides_replayed = {side: workers.submit(replay.side, side_done[side], np.setdiff1d(np.arange(N), rows), test,
                                           split.K + r) for r, (side, (rows, test)) in enumerate(edges.items())}
    curves, score_curves = replay.curves(*replay.merged([f.result() for f in folds_replayed], first))()
    if loses_to_random(score_curves, replay.default_name):
        # sessions of this bank will default to randomised selection (catengine.selection.default_selector_for):
        # measure it too, on the same fold banks, so that they get its own c(L), z95(L) and score curves
        more = [("randomised", RandomisedSelection())]
        more_replayed = [f.result() for f in replay.folds(fold_banks, split.fold_rows, more)]
        more_curves, more_scores = replay.curves(*replay.merged(more_replayed, more))()
        curves.update(more_curves)
        score_curves.update(more_scores)
    return curves, score_curves, strength_ordered_check(data, edges, sides_replayed, replay)


def loses_to_random(score_curves: dict, selector_name: str) -> bool:
    """Whether the fitted score curves make sessions default to randomised selection
    (``catengine.scoring.calibration.ScoreCalibration.loses_to_random``, the rule sessions apply)."""
    from catengine.scoring.calibration import ScoreCalibration

    scores = ScoreCalibration.from_record({"score_curves": score_curves}, "")
    return scores is not None and scores.loses_to_random(selector_name)


def describe_llms(data, n_groups: int) -> str:
    """"3 LLMs (30 runs)" or "7 LLMs": the calibration LLMs of ``data``, counted as the check counts them."""
    runs = f" ({data.n_subjects} runs)" if n_groups < data.n_subjects else ""
    return f"{n_groups} LLM{'s' if n_groups != 1 else ''}{runs}"
