"""The fold banks of the held-out check: the same calibrator and settings refitted on the training
folds (:class:`RefitBank`, started from the full fit) and completed with score factors fitted on the
same folds (:class:`FoldScoreFactors`)."""

from __future__ import annotations

from calibration.heldout.score_factors import DEFAULT_TOL as DEFAULT_SCORE_FACTOR_TOL
from calibration.heldout.score_factors import attach_score_factors

__all__ = ["REFIT_SCORE_FACTOR_TOL", "FoldScoreFactors", "RefitBank"]

#: the fold refits' score factors stop at this relative change of the log posterior (the full fit: 1e-7);
#: started from the full fit, their loadings are then within ~1e-4 of the optimum, against fold-to-full
#: differences of order 1 (MATH500)
REFIT_SCORE_FACTOR_TOL = 1e-6


class RefitBank:
    """``make_bank`` for a fitted calibrator: the same class and settings refitted on a subset, its
    bank made without its own check (``interval_check=False``).

    The refits start from the full fit: a calibrator with ``refit_start(rows)`` / ``fit_from(data,
    start)`` begins at its own item parameters (LaRT SAEM: and its accuracy prior) and the training
    subjects' traits, with the settings of its ``refit_settings()`` (SAEM: a short burn-in, a
    tolerance ``REFIT_TOL_FACTOR`` times looser); a ``refit_start`` of None (cBMM with its
    empirical-Bayes prior, whose result depends on the start) refits cold. The refit still
    maximises the training folds' own likelihood; what the start saves is the way there
    (docs/math.md §7.5 and ``benchmarks/check_cost.py``: the check's figures agree with
    cold-started refits within their Monte-Carlo error). ``warm=False``: cold refits, as a plain
    ``fit``. A refit's convergence warnings are not shown: it counts as converged when its
    ``converged_`` holds and it issued none (``convergence_warnings_``)."""

    def __init__(self, calibrator, to_bank: dict | None = None, warm: bool = True):
        self.cls = type(calibrator)
        self.params = {k: v for k, v in calibrator.get_params().items() if k not in ("progress", "rng")}
        self.to_bank = dict(to_bank or {})
        self.full = calibrator if warm and hasattr(calibrator, "refit_start") else None
        if self.full is not None:
            self.params.update(getattr(calibrator, "refit_settings", dict)())
        self.subject_rows = {str(s): k for k, s in enumerate(getattr(calibrator, "subject_ids_", ()) or ())}

    def __call__(self, data, rng, bank_id):
        ids = [str(s) for s in data.subject_ids]
        cal = self.cls(**{**self.params, "progress": False, "rng": rng})
        cal.quiet_convergence = True
        start = None
        if self.full is not None and all(i in self.subject_rows for i in ids):
            start = self.full.refit_start([self.subject_rows[i] for i in ids])  # None: refit cold
        if start is not None:
            cal.fit_from(data, start)
        else:
            cal.fit(data)
        converged = bool(getattr(cal, "converged_", True)) and not getattr(cal, "convergence_warnings_", ())
        return cal.to_item_bank(bank_id, interval_check=False, **self.to_bank), converged


class FoldScoreFactors:
    """``prepare_bank`` of the check: a fold bank with score factors, as many as the full bank's, fitted
    on the fold's training LLMs (none when the full bank has none).

    ``full`` is the future of ``attach_score_factors(full bank, data, keep_fit=True)`` (the check
    starts it beside the refits) and ``subject_ids`` the ids of its rows. The fold fits begin at the
    full fit's values of their rows and stop at ``REFIT_SCORE_FACTOR_TOL``; ``warm=False`` starts
    them cold at the full fit's tolerance."""

    def __init__(self, full, subject_ids, warm: bool = True):
        self.full = full
        self.rows = {str(s): k for k, s in enumerate(subject_ids)}
        self.warm = warm

    def __call__(self, bank, data):
        full_bank, fit = self.full.result()
        if full_bank.score_factors is None:
            return bank
        dims = full_bank.score_factors.dims
        ids = [str(s) for s in data.subject_ids]
        start, tol = None, DEFAULT_SCORE_FACTOR_TOL
        if self.warm and fit is not None and fit.dims == dims and all(i in self.rows for i in ids):
            rows = [self.rows[i] for i in ids]
            start, tol = (fit.traits[rows], fit.loadings, fit.intercepts), REFIT_SCORE_FACTOR_TOL
        return attach_score_factors(bank, data, dims=dims, start=start, tol=tol)
