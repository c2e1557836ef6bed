"""Parameter-recovery audit (Jiang et al. 2026): treat a bank as truth, simulate, refit, compare.

For every replication r, sample size N and ability distribution: draw N abilities, simulate the
response matrix from the bank (with CoT lengths for LaRT banks; optional missingness), then refit
it with every method on the SAME data (common random numbers across methods) and record the
metrics of docs/math.md §4. Design diagnostics of the truth (|skewness| of the abilities,
insufficient difficulty coverage, marginal reliability) are recorded alongside, so ranking recovery
can be related to them.

Scale: a fit identifies abilities only up to its own standardisation and link, so before RMSEs
(and the intercept correlation) the fit is put on the generating scale: the logistic <-> probit
link factor D = 1.702 where the fitted and the generating response functions differ, then the
mean-sigma link of the fitted abilities to the true ones (``metrics.mean_sigma_link``). Kendall
tau, Pearson(a), Pearson(difficulty), and the probability-based errors need no linking.

Variables of the result (dims ``replication, method, n_subjects, ability``):

====================== ================================================================
kendall_tau            Kendall tau-b(theta, theta^); 0 for a degenerate fit
degenerate             1 if the fit returned the same ability for every subject (collapsed)
pearson_a, pearson_b   Pearson(a, a^), Pearson(b, b^) (b the intercept, after linking)
pearson_difficulty     Pearson(-b/a, -b^/a^) (items with a^ = 0 left out)
rmse_theta/_a/_b       RMSE after linking; rmse_omega/_phi/_lam, error_rho for LaRT fits
aggregate_score_error  mean_i |mean_j pi_ij - mean_j pi^_ij|
item_mean_error        mean_j |mean_i pi_ij - mean_i pi^_ij|
theta_sd_mean          mean posterior SD of theta (linked scale; methods that report SDs)
theta_coverage         share of true thetas inside the 95% interval theta^ +- 1.96 SD
abs_skewness           |G1| of the true abilities
insufficient_coverage  share of subjects with <= 5 item difficulties within 0.2 of theta
marginal_reliability   1 / (1 + mean 1 / I(theta_i)) of the true bank at the true thetas
runtime_s, cpu_s       wall-clock / CPU seconds of the fit; wall_s the whole record
                       (simulate + fit + metrics). Under load cpu_s is the stabler measure
converged, n_iter      from the calibrator (ConvergenceWarning -> converged = 0)
failed, error          1 and the message if the replication raised; metrics then NaN
missing_share          realised share of missing cells
====================== ================================================================
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from calibration.audit import _common as common
from calibration.audit import metrics as M
from calibration.audit.methods import NEEDS_COT, resolve_method
from calibration.common import Z95, stream
from calibration.simulate import MISSINGNESS, simulate_responses
from catengine.models import fisher_information, prob_correct
from catengine.models.response_models import response_model as resolve_response_model

__all__ = ["recovery_audit", "recovery_task", "plan_recovery", "RecoveryPlan", "RECOVERY_METRICS"]

RECOVERY_METRICS = (
    "kendall_tau", "pearson_a", "pearson_b", "pearson_difficulty",
    "rmse_theta", "rmse_a", "rmse_b", "rmse_omega", "rmse_phi", "rmse_lam", "error_rho",
    "aggregate_score_error", "item_mean_error", "theta_sd_mean", "theta_coverage",
    "abs_skewness", "insufficient_coverage", "marginal_reliability",
    "runtime_s", "cpu_s", "wall_s", "converged", "n_iter", "missing_share", "degenerate",
)


def difficulty(a, b) -> np.ndarray:
    """-b/a, NaN where a = 0."""
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    safe = np.where(a != 0, a, 1.0)
    return np.where(a != 0, -b / safe, np.nan)


def design_metrics(params, theta) -> dict:
    """|G1| of theta, insufficient difficulty coverage and marginal reliability of the truth."""
    info = np.asarray(fisher_information(params, theta), dtype=float).sum(axis=-1)
    return {
        "abs_skewness": abs(M.skewness_g1(theta)),
        "insufficient_coverage": M.insufficient_coverage(theta, difficulty(params.a, params.b)),
        "marginal_reliability": M.marginal_reliability(info),
    }


def _link_factor(truth_model, fit) -> float:
    """Multiplier that puts the fitted slopes/intercepts on the truth's link (probit vs logistic);
    ``truth_model``: the truth's response model object (``ItemParams.model``)."""
    truth_probit = truth_model.link == "probit"
    fit_probit = fit.link == "probit"
    if truth_probit == fit_probit:
        return 1.0
    return 1.0 / M.LOGISTIC_PROBIT_D if truth_probit else M.LOGISTIC_PROBIT_D


def fit_metrics(truth, theta, fit) -> dict:
    """Recovery metrics of one fit against the truth (``truth`` ItemParams, ``theta`` true abilities)."""
    theta_hat = np.asarray(fit.theta, dtype=float)
    if theta_hat.shape != theta.shape:
        raise ValueError(f"the fit returned {theta_hat.size} abilities for {theta.size} subjects")
    if not np.all(np.isfinite(theta_hat)):
        raise ValueError(f"the fit returned {int((~np.isfinite(theta_hat)).sum())} non-finite abilities")
    p_true = prob_correct(truth, theta)
    p_hat = prob_correct(fit.params, theta_hat)
    f = _link_factor(truth.model, fit)
    A, B = M.mean_sigma_link(theta, theta_hat)
    a_lk, b_lk = M.link_items(np.asarray(fit.params.a) * f, np.asarray(fit.params.b) * f, A, B)
    degenerate = bool(np.all(theta_hat == theta_hat[0]))
    out = {
        # a constant estimate carries no ranking information: tau-b is undefined, recorded as 0
        "kendall_tau": 0.0 if degenerate else M.kendall_tau_b(theta, theta_hat),
        "degenerate": float(degenerate),
        "pearson_a": M.pearson(truth.a, fit.params.a),
        "pearson_b": M.pearson(truth.b, b_lk),
        "pearson_difficulty": M.pearson(difficulty(truth.a, truth.b), difficulty(fit.params.a, fit.params.b)),
        "rmse_theta": M.rmse(A * theta_hat + B, theta),
        "rmse_a": M.rmse(a_lk, truth.a),
        "rmse_b": M.rmse(b_lk, truth.b),
        "aggregate_score_error": M.aggregate_score_error(p_true, p_hat),
        "item_mean_error": M.item_mean_error(p_true, p_hat),
        "theta_sd_mean": math.nan,
        "theta_coverage": math.nan,
        "rmse_omega": math.nan, "rmse_phi": math.nan, "rmse_lam": math.nan, "error_rho": math.nan,
    }
    if fit.theta_sd is not None:
        sd = A * np.asarray(fit.theta_sd, dtype=float)
        ok = np.isfinite(sd)
        if ok.any():
            out["theta_sd_mean"] = float(np.mean(sd[ok]))
            err = np.abs(A * theta_hat + B - theta)
            out["theta_coverage"] = float(np.mean(err[ok] <= Z95 * sd[ok]))
    if truth.model.has_cot and fit.has_cot:
        p = fit.params
        out["rmse_omega"] = M.rmse(p.omega, truth.omega)
        out["rmse_phi"] = M.rmse(p.phi, truth.phi)
        out["rmse_lam"] = M.rmse(p.lam, truth.lam)
        out["error_rho"] = float(p.rho - truth.rho)
    return out


def _record(values: dict, failed: bool, error: str):
    import xarray as xr

    data = {name: ((), float(values.get(name, math.nan))) for name in RECOVERY_METRICS}
    data["failed"] = ((), np.int8(failed))
    data["error"] = ((), str(error))
    return xr.Dataset(data)


def recovery_task(task: dict):
    """One record of a recovery audit: simulate (replication, n, ability), fit with one method, compute
    the metrics; ``task`` is the payload of one of :meth:`RecoveryPlan.tasks` (a failure is recorded,
    never raised)."""
    t_start = time.perf_counter()
    values: dict = {}
    try:
        truth = task["truth"]
        gen = np.random.default_rng(stream(task["entropy"], task["replication"], "data", task["n_subjects"],
                                           task["ability"].label))
        theta = task["ability"].draw(task["n_subjects"], gen, task["ability_sample"])
        data = simulate_responses(truth, theta, rng=gen, missing=task["missing"], missing_rate=task["missing_rate"],
                                  cot_offset=task["cot_offset"])
        values["missing_share"] = float(data.missing_rate())
        values.update(design_metrics(truth, theta))
        fit_rng = np.random.default_rng(stream(task["entropy"], task["replication"], "fit", task["n_subjects"],
                                               task["ability"].label, task["method"]))
        t0, c0 = time.perf_counter(), time.process_time()
        fit = task["fit"](data, fit_rng, **task["options"])
        values["runtime_s"] = time.perf_counter() - t0
        values["cpu_s"] = time.process_time() - c0
        values["converged"] = float(bool(fit.converged))
        values["n_iter"] = float(fit.n_iter)
        values.update(fit_metrics(truth, theta, fit))
        failed, error = False, ""
    except Exception as exc:  # recorded, never raised: one bad replication must not stop the audit
        failed, error = True, common.error_text(exc)
        values = {k: values[k] for k in ("missing_share", "abs_skewness", "insufficient_coverage",
                                         "marginal_reliability", "runtime_s", "cpu_s") if k in values}
    values["wall_s"] = time.perf_counter() - t_start
    return _record(values, failed, error)


@common.takes_run_options
def recovery_audit(
    bank,
    n_subjects=(30, 100, 400),
    *,
    ability="normal",
    method=("cbmm",),
    replications: int = 10,
    missing: str | None = None,
    missing_rate: float = 0.0,
    method_options: dict | None = None,
    ability_sample=None,
    **run_options,
):
    """Recovery audit of ``bank`` (an ItemBank or a path): simulate from it, refit, compare.

    Parameters
    ----------
    n_subjects : int or sequence of int -- sample sizes N (a dimension of the result).
    ability : str or sequence -- ability distributions (a dimension): ``"normal"``,
        ``"skew-normal:skew=8"``, ``"bimodal:separation=4"``, ``"student-t:df=3"``, ``"bank"``
        (resample the bank's calibration subjects), ``"empirical"`` (resample ``ability_sample``).
    method : name, function, or sequence of them -- ``"cbmm"``, ``"saem"``, ``"saem-irt"``,
        ``"psn"`` (see :mod:`calibration.audit.methods`).
    replications : int -- replications per cell (the ``replication`` dimension).
    missing, missing_rate : missingness of the simulated data (``"mcar"``, ``"mar"``, ``"mnar"``).
    method_options : {method name: {constructor option: value}}, e.g. ``{"saem": {"max_iter": 100}}``.
    ability_sample : the abilities that ``"empirical"`` resamples (``"bank"`` resamples the bank's subjects).
    **run_options : rng, out, n_workers, progress, scheduler -- how the audit runs (:mod:`calibration.audit.runner`).

    Returns
    -------
    xarray.Dataset with dims (replication, method, n_subjects, ability) and the variables listed
    in the module docstring; :func:`calibration.audit.summarize` gives means with Monte-Carlo SEs.
    """
    run = common.RunOptions(**run_options)
    reps = common.check_replications(replications)
    plan = plan_recovery(bank, n_subjects, ability=ability, method=method, missing=missing, missing_rate=missing_rate,
                         method_options=method_options, ability_sample=ability_sample)
    bank, truth = plan.bank, plan.bank.params
    layout = {"cell_dims": plan.cell_dims, "record_dims": {}, "replications": reps}
    store, seed = run.open_store("recovery", plan.config, layout)
    tasks = plan.tasks(reps, seed)
    run.run_tasks(tasks, recovery_task, store, desc="recovery audit")
    ds = store.load()
    ds.attrs.update({"bank_id": bank.bank_id, "response_model": truth.response_model})
    describe(ds)
    return ds


def describe(ds) -> None:
    """Attach the variables' descriptions (in place)."""
    for name, text in _DESCRIPTIONS.items():
        if name in ds:
            ds[name].attrs["description"] = text


@dataclass(frozen=True)
class RecoveryPlan:
    """A validated recovery design on one bank: what the manifest pins and how to make the tasks.

    Built by :func:`plan_recovery`; :func:`recovery_audit` runs one, a study
    (:mod:`calibration.audit.study`) runs several (banks x missingness) through one store.
    """

    bank: object
    methods: list
    n_subjects: list
    abilities: list
    options: dict
    ability_sample: object
    missing: str | None
    missing_rate: float

    @property
    def method_names(self) -> list[str]:
        return [name for name, _ in self.methods]

    @property
    def cell_dims(self) -> dict:
        return {"method": self.method_names, "n_subjects": list(self.n_subjects),
                "ability": [s.label for s in self.abilities]}

    @property
    def config(self) -> dict:
        truth = self.bank.params
        return {
            "bank": common.params_key(truth), "bank_id": self.bank.bank_id, "response_model": truth.response_model,
            "methods": self.method_names, "method_options": self.options, "missing": self.missing,
            "missing_rate": float(self.missing_rate),
            "ability_sample": None if self.ability_sample is None else common.array_fingerprint(self.ability_sample),
        }

    def tasks(self, replications: int, seed, extra_key: dict | None = None, methods=None) -> list:
        """(key, payload) per replication x ability x sample size x method; ``extra_key`` entries
        (e.g. bank and missingness of a study) join every key after ``replication``; ``methods``
        restricts to those names. The random streams do not depend on ``extra_key``: a study's
        cell equals the single audit with the same seed."""
        chosen = [(n, f) for n, f in self.methods if methods is None or n in methods]
        tasks = common.method_cell_tasks(replications, self.abilities, self.n_subjects, chosen, self.options, {
            "truth": self.bank.params, "cot_offset": self.bank.effective_cot_offset, "entropy": seed,
            "ability_sample": self.ability_sample, "missing": self.missing, "missing_rate": float(self.missing_rate),
        })
        if extra_key:
            tasks = [({"replication": key["replication"], **extra_key,
                       **{k: v for k, v in key.items() if k != "replication"}}, payload) for key, payload in tasks]
        return tasks


def plan_recovery(bank, n_subjects=(30, 100, 400), *, ability="normal", method=("cbmm",), missing=None,
                  missing_rate: float = 0.0, method_options: dict | None = None, ability_sample=None,
                  skip_inapplicable: bool = False) -> RecoveryPlan:
    """Validate a recovery design (arguments as for :func:`recovery_audit`).

    ``skip_inapplicable``: drop methods that need CoT lengths when the bank is not LaRT instead of
    raising (a study's grid over mixed banks); their options are dropped too.
    """
    bank = common.as_bank(bank)
    truth = bank.params
    ns = common.positive_ints(n_subjects, "n_subjects")
    specs = common.parse_abilities(ability)
    methods = [resolve_method(m) for m in ((method,) if isinstance(method, str) or callable(method) else method)]
    names = [n for n, _ in methods]
    if not methods or len(set(names)) != len(names):
        raise ValueError(f"give one or more distinct methods, got {names}")
    unknown = set(method_options or {}) - set(names)
    if unknown:
        raise ValueError(f"method_options given for methods not audited: {sorted(unknown)}")
    if skip_inapplicable:
        methods = [(n, f) for n, f in methods if applicable(n, truth.model)]
        names = [n for n, _ in methods]
    for name in names:
        if not applicable(name, truth.model):
            raise ValueError(f"method {name!r} needs CoT lengths, which only a lart bank simulates "
                             f"(bank {bank.bank_id!r} is {truth.response_model!r})")
    if missing is not None and missing not in MISSINGNESS:
        raise ValueError(f"missing must be one of {', '.join(MISSINGNESS)} or None, got {missing!r}")
    options = {name: dict((method_options or {}).get(name, {})) for name in names}
    sample = common.resolve_ability_sample(specs, bank, ability_sample)
    return RecoveryPlan(bank=bank, methods=methods, n_subjects=ns, abilities=specs, options=options,
                        ability_sample=sample, missing=missing, missing_rate=float(missing_rate))


def applicable(method_name: str, response_model) -> bool:
    """Whether a method can refit data simulated from a bank of ``response_model`` (the model object
    or its name): methods that need CoT lengths need a model that simulates them."""
    return method_name not in NEEDS_COT or resolve_response_model(response_model).has_cot


_DESCRIPTIONS = {
    "kendall_tau": "Kendall tau-b between true and estimated abilities",
    "pearson_a": "Pearson correlation of true and fitted slopes",
    "pearson_b": "Pearson correlation of true and fitted intercepts (fit linked to the true scale)",
    "pearson_difficulty": "Pearson correlation of true and fitted difficulties -b/a",
    "rmse_theta": "RMSE of abilities after the mean-sigma link",
    "rmse_a": "RMSE of slopes after linking (probit scale for LaRT banks)",
    "rmse_b": "RMSE of intercepts after linking",
    "aggregate_score_error": "mean_i |mean_j pi_ij - mean_j pi^_ij|",
    "item_mean_error": "mean_j |mean_i pi_ij - mean_i pi^_ij|",
    "abs_skewness": "|adjusted Fisher-Pearson G1| of the true abilities",
    "insufficient_coverage": "share of subjects with <= 5 item difficulties within 0.2 of their true ability",
    "marginal_reliability": "1 / (1 + mean 1/I(theta)) of the true bank at the true abilities",
    "runtime_s": "wall-clock seconds spent in the fit",
    "cpu_s": "CPU seconds of this process spent in the fit (one numba thread per worker)",
    "wall_s": "seconds for the whole record (simulation, fit, metrics)",
    "failed": "1 if the replication raised (see error)",
    "error": "the exception of a failed replication",
}
