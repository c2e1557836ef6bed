"""The held-out check: how a bank's adaptive intervals and scores behave on calibration LLMs it
did not see (docs/math.md §7.5-§7.6, docs/honest_intervals.md).

Every default ``to_item_bank`` ends with :func:`with_held_out_check`. It refits the bank on folds
of the calibration LLMs (the runs of one LLM stay in one fold), replays every held-out LLM's
recorded answers through adaptive tests against its fold bank, and stores the trait curves (the
SD factor c(L) and the 95% multiplier z95(L)), the score curves and the strength-ordered sides in
the bank's root attribute ``interval_calibration``, which sessions apply. The bank's score factors
are fitted with the check.

Modules, each doing one thing:

=====================  =========================================================================
``check``              the hook: runs the check for a calibrator's bank, or records why it cannot
``cross_fit``          the check on a response matrix: refits, replays, the record
``folds``              folds of whole LLMs (runs grouped by ``subject_groups`` or their id suffix)
``refits``             the fold banks: warm-started refits, their score factors
``replay``             replays of held-out LLMs (adaptive and random tests)
``replayed``           what a replayed test leaves for the score curves
``fold_replays``       the replays of one check as tasks on its workers, pooled into curves
``interval_curves``    c(L) and z95(L) from the pooled replays
``score_curves``       the score curves (residual SD per unanswered item, CoT log-SD)
``strength_ordered``   the strongest / weakest LLMs held out (record ``beyond``)
``item_sd``            the item SDs checked against the refits' spread, b_sd widened
``score_factors``      the bank's score factors (fitted with the check)
``threads``            worker threads for the check's independent tasks
``report``             the record as text
``limits``             the check's defaults and minimum sizes
=====================  =========================================================================

The names below load on first use, so ``import calibration.heldout`` is cheap.
"""

from catengine.lazy import lazy_package

_LAZY = {
    "with_held_out_check": "calibration.heldout.check",
    "FoldFitError": "calibration.heldout.cross_fit",
    "cross_fit_intervals": "calibration.heldout.cross_fit",
    "describe": "calibration.heldout.report",
    "RefitBank": "calibration.heldout.refits",
    "FoldScoreFactors": "calibration.heldout.refits",
    "detect_run_pattern": "calibration.heldout.folds",
    "llm_folds": "calibration.heldout.folds",
    "n_llm_groups": "calibration.heldout.folds",
    "with_llm_groups": "calibration.heldout.folds",
    "replay_llms": "calibration.heldout.replay",
    "ReplayedSession": "calibration.heldout.replayed",
    "attach_score_factors": "calibration.heldout.score_factors",
    "choose_factor_count": "calibration.heldout.score_factors",
    "fit_score_factors": "calibration.heldout.score_factors",
    "MIN_SCORE_FACTOR_LLMS": "calibration.heldout.score_factors",
    "ScoreFactorFit": "calibration.heldout.score_factors",
    "Workers": "calibration.heldout.threads",
    "DEFAULT_FOLDS": "calibration.heldout.limits",
    "DEFAULT_LENGTHS": "calibration.heldout.limits",
    "MIN_SUBJECTS": "calibration.heldout.limits",
}

__all__, __getattr__, __dir__ = lazy_package(__name__, _LAZY)
