"""The strength-ordered part of the held-out check (docs/math.md §7.5, record ``beyond``): the
strongest (weakest) LLMs held out together, a bank fitted on the others, and their replays' curves
-- how the bank's intervals and scores behave for an LLM beyond the calibration population."""

from __future__ import annotations

import math

import numpy as np

from calibration.heldout.limits import MIN_HELD_OUT, MIN_SUBJECTS

__all__ = ["EDGE_SHARE", "edge_folds", "strength_ordered_check"]

#: the strength-ordered check holds out the LLMs in the top and in the bottom EDGE_SHARE of accuracy
EDGE_SHARE = 0.2


def edge_folds(data, n_obs, min_answers: int) -> dict:
    """The held-out rows of the strength-ordered check: ``{"above": rows, "below": rows}``.

    "above" holds the runs of the LLMs (``data.llm_groups``) in the top ``EDGE_SHARE`` of
    full-benchmark accuracy (the mean over an LLM's runs of its answered items' accuracy), kept
    only where strictly above every LLM left for calibration (ties at the boundary stay in), and
    only the runs with at least ``min_answers`` answers; "below" the mirror image. A side is left
    out when fewer than ``MIN_HELD_OUT`` runs would be held out or fewer than ``MIN_SUBJECTS``
    would remain to calibrate on."""
    groups = np.asarray(data.llm_groups)
    answered = data.correct >= 0
    with np.errstate(invalid="ignore", divide="ignore"):
        run_acc = np.where(answered, data.correct, 0).sum(axis=1) / answered.sum(axis=1)
    n_groups = int(groups.max()) + 1 if groups.size else 0
    group_acc = np.array([np.nanmean(run_acc[groups == g]) if np.any(np.isfinite(run_acc[groups == g])) else np.nan
                          for g in range(n_groups)])
    finite = np.flatnonzero(np.isfinite(group_acc))
    n_edge = int(math.floor(EDGE_SHARE * finite.size))
    out = {}
    if n_edge < 1 or finite.size - n_edge < 2:
        return out
    ranked = finite[np.argsort(group_acc[finite], kind="stable")]
    for side, chosen, rest in (("above", ranked[-n_edge:], ranked[:-n_edge]), ("below", ranked[:n_edge], ranked[n_edge:])):
        bound = group_acc[rest].max() if side == "above" else group_acc[rest].min()
        beyond = chosen[group_acc[chosen] > bound] if side == "above" else chosen[group_acc[chosen] < bound]
        rows = np.flatnonzero(np.isin(groups, beyond))
        test = rows[n_obs[rows] >= min_answers]
        if test.size >= MIN_HELD_OUT and data.n_subjects - rows.size >= MIN_SUBJECTS:
            out[side] = (rows, test)
    return out


def strength_ordered_check(data, edges, sides_replayed, replay):
    """The ``beyond`` part of the record (docs/math.md §7.5): per side ("above", "below" of
    :func:`edge_folds`), a bank fitted without the strongest (weakest) LLMs, the held-out ones
    replayed with the default selector (``sides_replayed``: side -> future of
    :meth:`~calibration.heldout.fold_replays.FoldReplays.side`), and their trait and score curves fitted as for the random folds. Sessions
    whose standing lies beyond the calibration population on that side (docs/math.md §7.8) widen the
    model-based score by the larger of these score curves and the random folds' (``catengine.session
    .scoring.score_curve``); the trait curves are reported with the bank. None when neither side
    has enough LLMs (or the LLMs left on both cannot be calibrated)."""
    pending = {}
    for side, done in sides_replayed.items():
        result = done.result()
        if result is not None:  # None: the LLMs left cannot be calibrated, this side is not checked
            pending[side] = (result[0], replay.curves(*result[1]))  # both sides' score sums queued before either is read
    out = {}
    for side, (train, finish) in pending.items():
        curves, score_curves = finish()
        if curves:
            n_cal = data.correct[train] >= 0
            acc = np.where(n_cal, data.correct[train], 0).sum(axis=1) / np.maximum(n_cal.sum(axis=1), 1)
            out[side] = {"n_held_out": int(edges[side][1].size), "n_calibration": int(train.size),
                         "calibration_accuracy_range": [round(float(acc.min()), 4), round(float(acc.max()), 4)],
                         "curves": curves, "score_curves": score_curves}
    if not out:
        return None
    return {"form": f"the LLMs in the top (above) / bottom (below) {EDGE_SHARE:.0%} of accuracy held out, strictly "
                    "beyond every calibration LLM; a bank fitted on the others; the held-out LLMs replayed with the "
                    "default selector; c(L), z95(L) and the score curves fitted as for the random folds. Sessions "
                    "whose standing lies beyond the calibration population widen the model-based score by "
                    "the larger of these score curves and the random folds'; the trait curves are reported", **out}
