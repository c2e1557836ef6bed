"""Trust audits (Jiang et al. 2026): can a fitted bank and the adaptive engine be trusted?

* :func:`recovery_audit` -- treat a bank as truth, simulate, refit, compare (parameter and
  ranking recovery, docs/math.md §4); :func:`recovery_task` is one of its records (one
  replication, sample size, ability distribution and method), e.g. to time a cell.
* :func:`short_form_audit` -- Fisher-information short forms vs random subsets on held-out
  simulated LLMs.
* :func:`cat_audit` -- simulated LLMs take adaptive tests: bias, RMSE, 95% coverage and Kendall
  tau vs test length, per selector, LaRT vs IRT-only scoring.
* :func:`replay_audit` -- real LLMs' recorded answers replayed through adaptive tests against
  cross-fitted banks: do the adaptive 95% intervals contain the full-benchmark estimate?
* :func:`summarize` -- means with Monte-Carlo standard errors over replications.
* :func:`render_report` -- a one-page report (figures + table) as PNG and HTML.
* :func:`run_study` -- a factorial recovery grid (banks x missingness x methods x sizes x
  abilities) from a TOML file (:mod:`calibration.audit.study`), as one audit.

All audits run in parallel over replications (``n_workers``) -- or on a Dask cluster with
``scheduler=`` (:mod:`calibration.audit.dask_backend`, the ``[distributed]`` extra) -- are seeded
so that results depend neither on the number of workers nor on the backend, and with
``out=DIR`` write one netCDF record per replication and cell, so an interrupted audit resumes by
running the same call again.
"""

from calibration.audit._common import AbilitySpec, alter_bank, summarize
from calibration.audit.methods import METHODS, Fit
from calibration.audit.cat import cat_audit
from calibration.audit.recovery import recovery_audit, recovery_task
from calibration.audit.replay import replay_audit
from calibration.audit.report import GLOSSARY, render_report, summary_table
from calibration.audit.short_form import short_form_audit
from calibration.audit.store import ResultStore, StoreMismatchError
from calibration.audit.worker import RecordsLostError
from calibration.audit.study import load_study, run_study


def load_results(directory):
    """The combined Dataset of an audit output directory (finished or interrupted)."""
    return ResultStore.open(directory).load()


__all__ = [
    "AbilitySpec",
    "Fit",
    "METHODS",
    "RecordsLostError",
    "StoreMismatchError",
    "alter_bank",
    "cat_audit",
    "load_results",
    "load_study",
    "recovery_audit",
    "recovery_task",
    "replay_audit",
    "GLOSSARY",
    "run_study",
    "render_report",
    "short_form_audit",
    "summarize",
    "summary_table",
]
