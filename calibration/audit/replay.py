"""Replay audit: are adaptive error bars honest on *real* LLMs?

The CAT audit (``cat.py``) asks the question on simulated LLMs, where the model is true by
construction. Here the answers are real. The LLMs of a response file are split into ``folds``
groups (the runs of one LLM, ``ResponseData.subject_groups``, always in the same fold). For each fold:

1. calibrate a bank on the other folds (a ``calibration.audit.methods`` method);
2. for every LLM of the fold, score *all* of its observed answers with that bank (the
   full-benchmark estimate theta_full, SD_full), then replay an adaptive test from its recorded
   answers (and CoT lengths), one per (selector, scoring);
3. after L items compare the adaptive estimate theta_L (SD_L) with theta_full.

Under the model, the difference of the nested estimates has variance SD_L^2 - SD_full^2, so the
full-benchmark estimate should fall inside the adaptive 95% interval at least 95% of the time.

Variables (dims ``replication`` (= fold), ``selector, scoring, test_length``):

=================  ================================================================
coverage           share of the fold's LLMs whose 95% interval after L items (the session's own:
                   theta_L +- z95(L) SD_L with a bank's cross-fitted multiplier, else 1.96) holds theta_full
nominal_coverage   what the model promises for that: mean of 2 Phi(1.96 SD_L / d) - 1,
                   d = sqrt(SD_L^2 - SD_full^2) (>= 0.95)
sd_ratio           RMS(theta_L - theta_full) / RMS(d): 1 when the SDs are honest
kendall_tau        Kendall tau-b(theta_full, theta_L) over the fold's LLMs
mean_abs_diff      mean |theta_L - theta_full|
theta_sd_mean      mean SD_L
=================  ================================================================

and per fold ``n_llms`` (LLMs replayed), ``converged`` (the fold's calibration), ``runtime_s``,
``failed``, ``error``. A fold is one record: its bank is fitted once and its full-benchmark
estimates computed once per scoring.
"""

from __future__ import annotations

import math
import time

import numpy as np

from calibration.audit import _common as common
from calibration.audit import metrics as M
from calibration.audit.cat import _scorings, _selectors
from calibration.audit.methods import NEEDS_COT, resolve_method
from calibration.common import Z95, estimator_by_name, stream
from calibration.data import ResponseData
from calibration.heldout import llm_folds, n_llm_groups, replay_llms, with_llm_groups

__all__ = ["replay_audit", "REPLAY_METRICS", "bank_from_fit"]

REPLAY_METRICS = ("coverage", "nominal_coverage", "sd_ratio", "kendall_tau", "mean_abs_diff", "theta_sd_mean")


def _bank_method(method: str) -> str:
    """The bank ``calibration_method`` of an audit method name ("" for fit functions)."""
    from calibration.methods import get_method

    try:
        return get_method(method.removesuffix("-irt")).name
    except ValueError:
        return ""


def bank_from_fit(fit, item_ids, bank_id: str, method: str = ""):
    """A :class:`catengine.ItemBank` holding a :class:`~calibration.audit.methods.Fit`'s parameters."""
    from catengine.itembank import ItemBank

    p = fit.params
    arrays = {name: np.asarray(getattr(p, name), dtype=np.float64) for name in p.parameter_names}
    extra = {"rho": float(p.rho), "cot_offset": 1.0} if p.model.has_cot else {}
    return ItemBank.from_params(p.response_model, [str(i) for i in item_ids], bank_id=bank_id,
                                calibration_method=_bank_method(method), **extra, **arrays)


def replay_metrics(full, full_sd, est, sd, half=None) -> dict:
    """The metrics above for one fold and test length (arrays over the fold's LLMs). ``half``: the
    sessions' 95% interval half-widths (default 1.96 SD)."""
    from scipy.stats import norm

    diff = est - full
    d = np.sqrt(np.clip(sd**2 - full_sd**2, 0.0, None))
    with np.errstate(divide="ignore"):
        nominal = np.where(d > 0, 2.0 * norm.cdf(Z95 * sd / np.where(d > 0, d, 1.0)) - 1.0, 1.0)
    rms_d = float(np.sqrt(np.mean(d * d)))
    return {
        "coverage": float(np.mean(np.abs(diff) <= (Z95 * sd if half is None else half))),
        "nominal_coverage": float(np.mean(nominal)),
        "sd_ratio": float(np.sqrt(np.mean(diff * diff))) / rms_d if rms_d > 0 else math.nan,
        "kendall_tau": M.kendall_tau_b(full, est) if full.size > 1 else math.nan,
        "mean_abs_diff": float(np.mean(np.abs(diff))),
        "theta_sd_mean": float(np.mean(sd)),
    }


def _replay_task(task: dict):
    """One record: one fold -- its bank fitted once, its LLMs through every (selector, scoring)."""
    import xarray as xr

    t_start = time.perf_counter()
    lengths = np.asarray(task["test_lengths"], dtype=int)
    selectors, scorings = task["selectors"], task["scorings"]
    shape = (len(selectors), len(scorings), lengths.size)
    out = {name: np.full(shape, np.nan) for name in REPLAY_METRICS}
    failed, error, converged, n_llms = False, "", False, 0
    try:
        data: ResponseData = task["responses"]
        L = int(lengths.max())
        test = [i for i in task["test_rows"] if np.count_nonzero(data.correct[i] >= 0) >= L]  # else too few answers
        n_llms = len(test)
        train = np.setdiff1d(np.arange(data.n_subjects), task["test_rows"])
        fit_rng = np.random.default_rng(stream(task["entropy"], task["replication"], "fit"))
        bank, converged = task["make_bank"](data.subset(subjects=train), fit_rng, f"replay_fold{task['replication']}")
        raw = replay_llms(bank, data, test, selectors, scorings, task["estimator"], L, task["entropy"],
                          task["replication"], task["sd_scale"])
        if n_llms:
            for r in range(len(selectors)):
                for c in range(len(scorings)):
                    for t, length in enumerate(lengths):
                        metrics = replay_metrics(raw["full"][c], raw["full_sd"][r, c], raw["est"][r, c, :, length - 1],
                                                 raw["sd"][r, c, :, length - 1], raw["half"][r, c, :, length - 1])
                        for name, value in metrics.items():
                            out[name][r, c, t] = value
    except Exception as exc:  # recorded, never raised
        failed, error = True, common.error_text(exc)
        out = {name: np.full(shape, np.nan) for name in REPLAY_METRICS}
    record = {name: (("selector", "scoring", "test_length"), values) for name, values in out.items()}
    record["n_llms"] = ((), np.int64(n_llms))
    record["converged"] = ((), np.int8(converged))
    record["runtime_s"] = ((), time.perf_counter() - t_start)
    record["failed"] = ((), np.int8(failed))
    record["error"] = ((), error)
    return xr.Dataset(record)


class FitBank:
    """``make_bank`` from an audit fit function: the fitted model parameters only (no item
    uncertainty, no held-out check) -- what the replay audit used before banks carried either."""

    def __init__(self, fit_fn, method: str, options: dict):
        self.fit_fn, self.method, self.options = fit_fn, method, options

    def __call__(self, data, rng, bank_id):
        fit = self.fit_fn(data, rng, **self.options)
        return bank_from_fit(fit, data.item_ids, bank_id, self.method), bool(fit.converged)


class CalibratorBank:
    """``make_bank`` by the default path: ``Calibrator(**options).fit(data).to_item_bank(bank_id)``,
    i.e. with the calibrator's item uncertainty and its own held-out check on ``data``
    (nested inside the audit's folds, so the audit's figures are not optimistic)."""

    def __init__(self, calibrator_class, options: dict, to_bank: dict | None = None):
        self.calibrator_class, self.options, self.to_bank = calibrator_class, options, dict(to_bank or {})

    def __call__(self, data, rng, bank_id):
        from calibration.audit.methods import _fitted

        cal, converged = _fitted(self.calibrator_class, data, rng, self.options)
        return cal.to_item_bank(bank_id, **self.to_bank), converged


@common.takes_run_options
def replay_audit(
    responses: ResponseData,
    *,
    method="cbmm",
    method_options: dict | None = None,
    folds: int = 4,
    test_lengths=(10, 25, 50),
    selector=("mfi", "random"),
    scoring=None,
    estimator: str = "map",
    sd_scale: float = 1.0,
    bank: str = "default",
    interval_check=None,
    **run_options,
):
    """Replay real LLMs' recorded answers through adaptive tests against cross-fitted banks.

    Parameters
    ----------
    responses : the real response data (``calibration.ResponseData``; CoT lengths for ``saem``).
    method : calibration method name (``cbmm``, ``saem``, ``saem-irt``, ``psn``) or fit function;
        ``method_options`` go to its calibrator.
    folds : number of LLM groups (each is held out once; the ``replication`` dimension); the number
        of LLMs gives leave-one-LLM-out.
    test_lengths : test lengths L at which to compare (each test runs to max(L)); LLMs with fewer
        observed answers than max(L) are skipped.
    selector : selector name(s) or ItemSelector instances (as :func:`cat_audit`); ``"default"``: the
        session's default selector for the fold's bank (posterior-expected information when the bank
        carries item uncertainty).
    scoring : "lart" and/or "irt" (default: both for ``saem``, "irt" otherwise).
    estimator : as for :func:`cat_audit`.
    sd_scale : the estimator's ``sd_scale`` (1: the model's SDs or the bank's stored calibration);
        an explicit factor overrides the stored calibration.
    bank : ``"default"``: each fold's bank is made by the default path (``Calibrator(**options)
        .fit(train).to_item_bank(id)``: the calibrator's item uncertainty and its own cross-fitted
        held-out check, run on the training folds only -- nested, so the figures are not
        optimistic); ``"fit"``: the fitted model parameters only (no uncertainty, no held-out check).
    interval_check : passed to ``to_item_bank`` with ``bank="default"`` (None: its default, "auto").
    **run_options : rng, out, n_workers, progress, scheduler -- how the audit runs (:mod:`calibration.audit.runner`).
    """
    run = common.RunOptions(**run_options)
    if not isinstance(responses, ResponseData):
        raise TypeError(f"replay_audit expects a calibration.ResponseData, got {type(responses).__name__}")
    name, fit_fn = resolve_method(method)
    if name in NEEDS_COT and not responses.has_cot:
        raise ValueError(f"method {name!r} needs CoT lengths; these responses have none")
    n_folds = common.check_replications(folds)
    responses, groups_from = with_llm_groups(responses)  # runs of one LLM in one fold, given or detected
    n_groups = n_llm_groups(responses)
    if n_folds < 2 or n_folds > n_groups:
        raise ValueError(f"folds must lie in 2..{n_groups} for {n_groups} LLMs "
                         f"(folds = number of LLMs: leave one LLM out), got {folds!r}")
    lengths = sorted(common.positive_ints(test_lengths, "test_lengths"))
    if lengths[-1] > responses.n_items:
        raise ValueError(f"the longest test ({lengths[-1]} items) exceeds the {responses.n_items} items")
    selectors = _selectors(selector)
    sel_names = [n for n, _ in selectors]
    scorings = _scorings(scoring, name in NEEDS_COT, f"a LaRT fit (method 'saem'), not {name!r}")
    estimator_by_name(estimator, True, sd_scale)  # validate the name and the scale
    from catengine.session.config import to_config

    options = dict(method_options or {})
    if bank == "default":
        from calibration.audit.methods import calibrator_for

        cal_class, cal_options = calibrator_for(name, options)
        to_bank = {} if interval_check is None else {"interval_check": interval_check}
        make_bank = CalibratorBank(cal_class, cal_options, to_bank)
    elif bank == "fit":
        make_bank = FitBank(fit_fn, name, options)
    else:
        raise ValueError(f"bank must be 'default' or 'fit', got {bank!r}")
    config = {"responses": responses.sha256(), "method": name, "method_options": options,
              "selectors": [s if s is None else to_config(s) for _, s in selectors], "scorings": scorings,
              "estimator": estimator, "sd_scale": float(sd_scale), "folds": n_folds, "bank": bank,
              "interval_check": interval_check}
    layout = {"cell_dims": {}, "record_dims": {"selector": sel_names, "scoring": scorings, "test_length": lengths},
              "replications": n_folds}
    store, seed = run.open_store("replay", config, layout)
    fold_rows = llm_folds(responses.llm_groups, n_folds, stream(seed, 0, "folds"))  # an LLM's runs stay together
    tasks = [({"replication": r}, {
        "responses": responses, "test_rows": fold_rows[r], "make_bank": make_bank,
        "entropy": seed, "replication": r, "selectors": selectors, "scorings": scorings, "estimator": estimator,
        "sd_scale": float(sd_scale), "test_lengths": lengths,
    }) for r in range(n_folds)]
    run.run_tasks(tasks, _replay_task, store, desc="replay audit")
    ds = store.load()
    ds.attrs.update({"method": name, "folds": n_folds, "n_llms": responses.n_subjects, "n_llm_groups": n_groups,
                     "llm_groups": groups_from,
                     "n_items": responses.n_items,
                     "bank_id": f"cross-fitted {name} banks ({n_folds} folds)"})
    ds["coverage"].attrs["nominal"] = "nominal_coverage (>= 0.95)"
    return ds
