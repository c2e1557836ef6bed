"""CAT audit: simulated LLMs take adaptive tests; is the engine's error bar honest?

For every replication: draw ``n_simulees`` abilities (and, for LaRT truths, speed traits tau with
the true rho), simulate each simulee's answers -- and CoT lengths -- to EVERY item of the true bank
once, then run a :class:`catengine.CATSession` per simulee against the engine's bank for every
(selector, scoring) pair, answering from those pre-drawn responses (common random numbers: all
configurations see the same simulees and the same answer to the same item). After each test
length L the MAP/EAP estimate and its posterior SD are compared with the true theta.

``bank`` is what the engine uses, ``true_bank`` what generates the answers (default: the same).
Auditing a bank against a different truth -- e.g. one refitted on a small sample, or
:func:`calibration.audit.alter_bank` for a deliberately wrong one -- shows what trusting it costs.

Scoring (LaRT engine banks): ``"lart"`` scores accuracy and CoT lengths jointly (MAP of (theta,
tau), docs/math.md §1.5), ``"irt"`` the accuracy answers alone (the estimator's ``use_cot=False``).

Variables (dims ``replication, selector, scoring, test_length``):

================  ==================================================================
bias              mean(theta^ - theta)
rmse              sqrt(mean (theta^ - theta)^2)
coverage          share of simulees with |theta^ - theta| <= 1.96 SD (nominal 0.95)
kendall_tau       Kendall tau-b(theta, theta^)
theta_sd_mean     mean posterior SD of theta
sd_ratio          rmse / sqrt(mean SD^2): 1 when the reported SDs are honest
tau_rmse,         the same for the speed trait tau (LaRT scoring of a LaRT truth;
tau_coverage      NaN otherwise)
================  ==================================================================

and per record (``replication, selector, scoring``): ``max_exposure`` (largest share of simulees
given one item within the longest test), ``runtime_s``, ``failed``, ``error``.
"""

from __future__ import annotations

import math
import time

import numpy as np

from calibration.audit import _common as common
from calibration.audit import metrics as M
from calibration.common import Z95, estimator_by_name, stream
from calibration.simulate import simulate_responses

__all__ = ["cat_audit", "CAT_METRICS"]

CAT_METRICS = ("bias", "rmse", "coverage", "kendall_tau", "theta_sd_mean", "sd_ratio", "tau_rmse", "tau_coverage")
SCORINGS = ("lart", "irt")


def _selector(spec):
    from catengine.selection import SELECTORS, ItemSelector

    if isinstance(spec, ItemSelector):
        return spec.name, spec
    if isinstance(spec, str) and spec.strip().lower() == "default":
        return "default", None  # the session's default selector for the bank
    if isinstance(spec, str):
        key = spec.strip().lower()
        if key not in SELECTORS:
            raise ValueError(f"unknown selector {spec!r}; allowed: {', '.join(SELECTORS)}")
        return key, SELECTORS[key]()
    raise TypeError(f"a selector is a registered name or an ItemSelector, got {spec!r}")


def _selectors(selector) -> list:
    """[(name, ItemSelector)] from one selector spec or several, with distinct names."""
    specs = (selector,) if isinstance(selector, str) or not hasattr(selector, "__iter__") else selector
    selectors = [_selector(s) for s in specs]
    names = [n for n, _ in selectors]
    if not selectors or len(set(names)) != len(names):
        raise ValueError(f"give one or more distinct selectors, got {names}")
    return selectors


def _scorings(scoring, lart_ok: bool, why_not: str) -> list[str]:
    """The scorings to run (default: both when LaRT scoring is possible); ``why_not`` explains a refusal."""
    if scoring is None:
        scoring = SCORINGS if lart_ok else ("irt",)
    scorings = [scoring] if isinstance(scoring, str) else list(scoring)
    for s in scorings:
        if s not in SCORINGS:
            raise ValueError(f"unknown scoring {s!r}; allowed: {', '.join(SCORINGS)}")
        if s == "lart" and not lart_ok:
            raise ValueError(f"scoring 'lart' needs {why_not}")
    if len(set(scorings)) != len(scorings) or not scorings:
        raise ValueError(f"give one or more distinct scorings, got {scorings}")
    return scorings


def _draw_simulees(task):
    """(theta, tau, correct, cot) of the replication's simulees (the same for every configuration)."""
    truth = task["truth"]
    gen = np.random.default_rng(stream(task["entropy"], task["replication"], "simulees", task["ability"].label))
    theta = task["ability"].draw(task["n_simulees"], gen, task["ability_sample"])
    tau = truth.model.draw_tau(truth, theta, gen)  # None (no draw) without a CoT part
    data = simulate_responses(truth, theta, tau=tau, rng=gen, cot_offset=task["cot_offset"])
    return theta, tau, data.correct, data.cot_length


def _step_metrics(theta, est, sd):
    err = est - theta
    rmse = float(np.sqrt(np.mean(err * err)))
    rms_sd = float(np.sqrt(np.mean(sd * sd)))
    return {
        "bias": float(np.mean(err)),
        "rmse": rmse,
        "coverage": float(np.mean(np.abs(err) <= Z95 * sd)),
        "kendall_tau": M.kendall_tau_b(theta, est),
        "theta_sd_mean": float(np.mean(sd)),
        "sd_ratio": rmse / rms_sd if rms_sd > 0 else math.nan,
    }


def _cat_task(task: dict):
    """One record: every simulee of one replication through one (selector, scoring) configuration."""
    from catengine.session import CATSession
    from catengine.stopping import MaxItems

    t_start = time.perf_counter()
    lengths = np.asarray(task["test_lengths"], dtype=int)
    n_len = lengths.size
    out = {name: np.full(n_len, np.nan) for name in CAT_METRICS}
    max_exposure = math.nan
    failed, error = False, ""
    try:
        theta, tau, correct, cot = _draw_simulees(task)
        bank = task["bank"]
        lart_engine = bank.params.model.has_cot
        use_cot = task["scoring"] == "lart"
        give_cot = lart_engine and cot is not None
        estimator = estimator_by_name(task["estimator"], use_cot)
        engine_rng = np.random.default_rng(stream(task["entropy"], task["replication"], "engine",
                                                  task["selector_name"], task["scoring"]))
        L = int(lengths.max())
        n = theta.size
        est = np.empty((n, L))
        sd = np.empty((n, L))
        est_tau = np.full((n, L), np.nan)
        sd_tau = np.full((n, L), np.nan)
        counts = np.zeros(bank.params.n_items)
        index = {item: k for k, item in enumerate(bank.item_ids)}
        for i in range(n):
            s = CATSession(bank, selector=task["selector"], estimator=estimator, stopping=MaxItems(L), rng=engine_rng)
            for step in range(L):
                item = s.next_item()
                j = index[item]
                counts[j] += 1
                c = None
                if give_cot:
                    c = float(cot[i, j])
                e = s.record(item, int(correct[i, j]), c)
                est[i, step] = e.theta
                sd[i, step] = e.theta_sd
                if e.tau is not None and e.tau_sd is not None:
                    est_tau[i, step] = e.tau
                    sd_tau[i, step] = e.tau_sd
        max_exposure = float(counts.max() / n)
        for k, length in enumerate(lengths):
            m = _step_metrics(theta, est[:, length - 1], sd[:, length - 1])
            for name, value in m.items():
                out[name][k] = value
            if tau is not None and use_cot and lart_engine and np.all(np.isfinite(est_tau[:, length - 1])):
                err = est_tau[:, length - 1] - tau
                out["tau_rmse"][k] = float(np.sqrt(np.mean(err * err)))
                out["tau_coverage"][k] = float(np.mean(np.abs(err) <= Z95 * sd_tau[:, length - 1]))
    except Exception as exc:  # recorded, never raised
        failed, error = True, common.error_text(exc)
        out = {name: np.full(n_len, np.nan) for name in CAT_METRICS}
    return common.task_record("test_length", out, {"max_exposure": max_exposure, "runtime_s": time.perf_counter() - t_start},
                       failed, error)


@common.takes_run_options
def cat_audit(
    bank,
    *,
    true_bank=None,
    n_simulees: int = 200,
    test_lengths=(5, 10, 20, 40),
    selector=("mfi", "random"),
    scoring=None,
    estimator: str = "map",
    ability="normal",
    replications: int = 5,
    ability_sample=None,
    **run_options,
):
    """Adaptive-testing audit of ``bank`` (an ItemBank or a path).

    Parameters
    ----------
    true_bank : ItemBank, path or None -- generates the answers (default: ``bank`` itself).
        Must hold the same items as ``bank``.
    n_simulees : simulated LLMs per replication.
    test_lengths : test lengths L at which to evaluate (each test runs to max(L)).
    selector : selector name(s) (``catengine.selection.SELECTORS``: "mfi", "random", "pwi",
        "kl", "lart-theta", ...) or ItemSelector instances.
    scoring : "lart" and/or "irt" (default: both for a LaRT bank, "irt" otherwise).
    estimator : "map" (default) or "eap".
    ability : ability distribution of the simulees (see :func:`recovery_audit`); one only.
    replications, ability_sample : as for :func:`recovery_audit`.
    **run_options : rng, out, n_workers, progress, scheduler -- how the audit runs (:mod:`calibration.audit.runner`).

    Returns
    -------
    xarray.Dataset with dims (replication, selector, scoring, test_length); see the module
    docstring for the variables. :func:`calibration.audit.summarize` averages over replications.
    """
    run = common.RunOptions(**run_options)
    bank = common.as_bank(bank)
    truth_bank = bank if true_bank is None else common.as_bank(true_bank)
    truth = truth_bank.params
    if tuple(truth_bank.item_ids) != tuple(bank.item_ids):
        raise ValueError("bank and true_bank must hold the same items in the same order")
    reps = common.check_replications(replications)
    n_sim = common.positive_ints(n_simulees, "n_simulees")
    if len(n_sim) != 1:
        raise ValueError("n_simulees is one number")
    lengths = sorted(common.positive_ints(test_lengths, "test_lengths"))
    if lengths[-1] > bank.n_items:
        raise ValueError(f"the longest test ({lengths[-1]} items) exceeds the bank ({bank.n_items} items)")
    specs = common.parse_abilities(ability)
    if len(specs) != 1:
        raise ValueError("cat_audit takes one ability distribution; run it once per distribution")
    sample = common.resolve_ability_sample(specs, truth_bank, ability_sample)
    selectors = _selectors(selector)
    sel_names = [n for n, _ in selectors]
    for _, sel in selectors:
        from catengine.session.bank_log import item_table

        sel.check_bank(item_table(bank))
    lart_engine = bank.params.model.has_cot
    scorings = _scorings(scoring, lart_engine, f"a lart bank; bank {bank.bank_id!r} is {bank.params.response_model!r}")
    estimator_by_name(estimator, True)  # validate the name
    from catengine.session.config import to_config

    cot_offset = truth_bank.effective_cot_offset
    config = {
        "bank": common.params_key(bank.params), "bank_id": bank.bank_id, "true_bank": common.params_key(truth),
        "selectors": [to_config(s) for _, s in selectors], "scorings": scorings, "estimator": estimator,
        "n_simulees": n_sim[0], "ability": specs[0].label,
        "ability_sample": None if sample is None else common.array_fingerprint(sample),
    }
    layout = {"cell_dims": {"selector": sel_names, "scoring": scorings},
              "record_dims": {"test_length": lengths}, "replications": reps}
    store, seed = run.open_store("cat", config, layout)
    tasks = []
    for r in range(reps):
        for name, sel in selectors:
            for sc in scorings:
                key = {"replication": r, "selector": name, "scoring": sc}
                tasks.append((key, {
                    "bank": bank, "truth": truth, "cot_offset": cot_offset, "entropy": seed, "replication": r,
                    "n_simulees": n_sim[0], "ability": specs[0], "ability_sample": sample, "selector": sel,
                    "selector_name": name, "scoring": sc, "estimator": estimator, "test_lengths": lengths,
                }))
    run.run_tasks(tasks, _cat_task, store, desc="CAT audit")
    ds = store.load()
    ds.attrs.update({"bank_id": bank.bank_id, "true_bank_id": truth_bank.bank_id,
                     "response_model": bank.params.response_model, "ability": specs[0].label,
                     "n_simulees": n_sim[0]})
    ds["coverage"].attrs["nominal"] = 0.95
    return ds
