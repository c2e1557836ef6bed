"""Short-form audit (Jiang et al. 2026, section 5.4): do Fisher-information short forms keep the ranking?

For every replication, sample size N, ability distribution and method: simulate a calibration
sample from the bank, refit it, rank the items by their mean Fisher information over the fitted
abilities (fitted parameters), and keep the top 10% / 20% / 100 items (``sizes``). Then simulate
``n_heldout`` held-out LLMs from the true bank and compute Kendall tau-b between their short-form
and full-form mean scores (proportion correct). Baseline: the mean tau of ``n_random`` random
subsets of the same size (30 in the paper). The held-out sample and the random subsets are shared
by all methods of a replication, so method differences are paired.

The pseudo-method ``"truth"`` selects with the TRUE parameters at the true calibration abilities:
the best an information-based short form can do on this bank.

Variables (dims ``replication, method, n_subjects, ability, form``): ``tau_irt``, ``tau_random``
(mean over the random subsets), ``tau_random_sd`` (their SD), ``gain`` = tau_irt - tau_random,
``form_items`` (items kept); per record ``runtime_s``, ``failed``, ``error``.
"""

from __future__ import annotations

import time

import numpy as np

from calibration.audit import _common as common
from calibration.audit import metrics as M
from calibration.audit.methods import Fit, resolve_method
from calibration.common import stream
from calibration.simulate import simulate_responses
from catengine.models import fisher_information

__all__ = ["short_form_audit", "form_sizes", "select_short_form"]

TRUTH = "truth"


def form_sizes(sizes, n_items: int) -> list[tuple[str, int]]:
    """[(label, number of items)] from specs like "10%", "20%", 100 (labels "10%", "20%", "100")."""
    if isinstance(sizes, (str, int)):
        sizes = [sizes]
    out = []
    for s in sizes:
        if isinstance(s, str) and s.strip().endswith("%"):
            share = float(s.strip()[:-1]) / 100.0
            if not 0.0 < share <= 1.0:
                raise ValueError(f"a percentage form size must lie in (0%, 100%], got {s!r}")
            out.append((s.strip(), max(1, int(round(share * n_items)))))
            continue
        try:
            k = int(s)
        except (TypeError, ValueError):
            raise ValueError(f"a form size is a count (e.g. 100) or a percentage (e.g. '10%'), got {s!r}") from None
        if isinstance(s, bool) or k < 1 or (isinstance(s, float) and s != k):
            raise ValueError(f"a form size count must be a positive integer, got {s!r}")
        if k > n_items:
            raise ValueError(f"form size {k} exceeds the bank ({n_items} items)")
        out.append((str(k), k))
    labels = [label for label, _ in out]
    if not out or len(set(labels)) != len(labels):
        raise ValueError(f"give one or more distinct form sizes, got {labels}")
    return out


def select_short_form(params, theta, k: int) -> np.ndarray:
    """Indices of the ``k`` items with the largest mean Fisher information over ``theta`` (sorted)."""
    info = np.asarray(fisher_information(params, np.asarray(theta, dtype=float)), dtype=float).mean(axis=0)
    info = np.where(np.isfinite(info), info, -np.inf)
    order = np.argsort(-info, kind="stable")
    return np.sort(order[:k])


def _short_form_task(task: dict):
    t_start = time.perf_counter()
    forms = task["forms"]
    n_f = len(forms)
    out = {name: np.full(n_f, np.nan) for name in ("tau_irt", "tau_random", "tau_random_sd", "gain", "form_items")}
    failed, error = False, ""
    runtime = np.nan
    try:
        truth = task["truth"]
        J = truth.n_items
        label = task["ability"].label
        gen = np.random.default_rng(stream(task["entropy"], task["replication"], "data", task["n_subjects"], label))
        theta = task["ability"].draw(task["n_subjects"], gen, task["ability_sample"])
        data = simulate_responses(truth, theta, rng=gen, cot_offset=task["cot_offset"])
        t0 = time.perf_counter()
        if task["method"] == TRUTH:
            fit = Fit(theta=theta, params=truth)
        else:
            fit_rng = np.random.default_rng(stream(task["entropy"], task["replication"], "fit", task["n_subjects"],
                                                   label, task["method"]))
            fit = task["fit"](data, fit_rng, **task["options"])
        runtime = time.perf_counter() - t0
        if not np.all(np.isfinite(fit.theta)):
            raise ValueError("the fit returned non-finite abilities")
        # held-out LLMs: shared by every method and sample size of the replication
        hgen = np.random.default_rng(stream(task["entropy"], task["replication"], "heldout", label))
        theta_h = task["ability"].draw(task["n_heldout"], hgen, task["ability_sample"])
        held = simulate_responses(truth, theta_h, rng=hgen, cot_offset=task["cot_offset"]).correct.astype(float)
        full = held.mean(axis=1)
        for f, (form, k) in enumerate(forms):
            chosen = select_short_form(fit.params, fit.theta, k)
            out["tau_irt"][f] = M.kendall_tau_b(held[:, chosen].mean(axis=1), full)
            rgen = np.random.default_rng(stream(task["entropy"], task["replication"], "random", label, form))
            taus = np.array([
                M.kendall_tau_b(held[:, rgen.choice(J, size=k, replace=False)].mean(axis=1), full)
                for _ in range(task["n_random"])
            ])
            taus = taus[np.isfinite(taus)]
            if taus.size:
                out["tau_random"][f] = float(taus.mean())
                out["tau_random_sd"][f] = float(taus.std(ddof=1)) if taus.size > 1 else np.nan
            out["gain"][f] = out["tau_irt"][f] - out["tau_random"][f]
            out["form_items"][f] = k
    except Exception as exc:  # recorded, never raised
        failed, error = True, common.error_text(exc)
        out = {name: np.full(n_f, np.nan) for name in out}
    return common.task_record("form", out, {"runtime_s": runtime, "wall_s": time.perf_counter() - t_start}, failed, error)


@common.takes_run_options
def short_form_audit(
    bank,
    n_subjects=(100,),
    *,
    method=("cbmm",),
    ability="normal",
    sizes=("10%", "20%", 100),
    n_heldout: int = 1000,
    n_random: int = 30,
    replications: int = 10,
    method_options: dict | None = None,
    ability_sample=None,
    **run_options,
):
    """Fisher-information short forms vs random subsets on held-out simulated LLMs.

    ``method`` may include ``"truth"`` (select with the true parameters). ``sizes``: counts or
    percentages of the bank. ``n_heldout``: held-out LLMs per replication (the paper used 4000).
    ``n_random``: random subsets per form (the baseline). Returns a Dataset with dims (replication,
    method, n_subjects, ability, form).

    Parameters
    ----------
    n_subjects, ability, replications, method_options, ability_sample : as for :func:`recovery_audit`.
    **run_options : rng, out, n_workers, progress, scheduler -- how the audit runs (:mod:`calibration.audit.runner`).
    """
    run = common.RunOptions(**run_options)
    bank = common.as_bank(bank)
    truth = bank.params
    ns = common.positive_ints(n_subjects, "n_subjects")
    specs = common.parse_abilities(ability)
    reps = common.check_replications(replications)
    forms = form_sizes(sizes, truth.n_items)
    n_held = common.positive_ints(n_heldout, "n_heldout")
    n_rand = common.positive_ints(n_random, "n_random")
    if len(n_held) != 1 or len(n_rand) != 1 or n_held[0] < 2:
        raise ValueError("n_heldout (>= 2) and n_random are single numbers")
    methods, names, options = common.audited_methods(
        method, bank, method_options, resolve=lambda m: (TRUTH, None) if m == TRUTH else resolve_method(m)
    )
    sample = common.resolve_ability_sample(specs, bank, ability_sample)
    cot_offset = bank.effective_cot_offset
    config = {
        "bank": common.params_key(truth), "bank_id": bank.bank_id, "methods": names, "method_options": options,
        "n_heldout": n_held[0], "n_random": n_rand[0],
        "ability_sample": None if sample is None else common.array_fingerprint(sample),
    }
    layout = {"cell_dims": {"method": names, "n_subjects": ns, "ability": [s.label for s in specs]},
              "record_dims": {"form": [label for label, _ in forms]}, "replications": reps}
    store, seed = run.open_store("short-form", config, layout)
    tasks = common.method_cell_tasks(reps, specs, ns, methods, options, {
        "truth": truth, "cot_offset": cot_offset, "entropy": seed, "ability_sample": sample,
        "forms": forms, "n_heldout": n_held[0], "n_random": n_rand[0],
    })
    run.run_tasks(tasks, _short_form_task, store, desc="short-form audit")
    ds = store.load()
    ds.attrs.update({"bank_id": bank.bank_id, "response_model": truth.response_model, "n_heldout": n_held[0]})
    ds["form_items"].attrs["long_name"] = "items in the short form"
    return ds
