"""Item bank schema v1: constants and a validator that reports every problem at once.

Pure checks on an in-memory ``xarray.DataTree``; no file I/O here (see ``io.py``).
"""

from __future__ import annotations

import json

import numpy as np

from catengine.validation import is_number

SCHEMA_NAME = "irt-llm-eval.itembank"
SCHEMA_VERSION = 1
SUPPORTED_SCHEMA_VERSIONS = (1,)

RESPONSE_FUNCTIONS = {
    "lart": "P(correct) = Phi(a*theta + b); log(T + cot_offset) ~ Normal(omega - phi*tau, lam^2), "
    "lam an SD; (theta, tau) ~ Normal2(0, [[1, rho], [rho, 1]])",
    "2pl": "P(correct) = 1 / (1 + exp(-(a*theta + b)))",
    "4pl": "P(correct) = c + (d - c) / (1 + exp(-(a*theta + b)))",
}
ITEM_PARAMETERS = {"lart": ("a", "b", "omega", "phi", "lam"), "2pl": ("a", "b"), "4pl": ("a", "b", "c", "d")}
ALL_ITEM_PARAMETERS = ("a", "b", "c", "d", "omega", "phi", "lam")
#: allowed ``calibration_method`` values: "" (none), the methods of calibration.methods.METHODS
#: with their aliases ("psn-laplace" is how banks written before the registry name PSN), and
#: "simulation" (banks drawn, not fitted). catengine does not import calibration, so this list is
#: kept here; tests/test_calibrator_contract.py checks that it matches the registry.
CALIBRATION_METHODS = ("", "saem", "cbmm", "psn", "psn-laplace", "simulation")

PARAMETER_DESCRIPTIONS = {
    "a": ("discrimination (slope)", "slope of the linear predictor z = a*theta + b"),
    "b": ("easiness intercept", "intercept of z = a*theta + b; larger = easier; difficulty = -b/a"),
    "c": ("lower asymptote", "probability of a correct answer as theta -> -infinity"),
    "d": ("upper asymptote", "probability of a correct answer as theta -> +infinity"),
    "omega": ("CoT intensity", "mean of log(T + cot_offset) at tau = 0"),
    "phi": ("CoT speed loading (varphi)", "log CoT length decreases by phi per unit of tau"),
    "lam": ("CoT residual SD (lambda_sd)", "standard deviation (not variance) of log(T + cot_offset) given tau"),
    "rho": ("ability-speed correlation", "correlation of theta and tau in the population"),
    "b_sd": ("posterior SD of b", "posterior standard deviation of the intercept b"),
}

# root attributes: name -> allowed python types
ROOT_ATTRS = {
    "schema": (str,),
    "schema_version": (int, np.integer),
    "bank_id": (str,),
    "bank_version": (int, np.integer),
    "parent_version": (int, np.integer),
    "response_model": (str,),
    "response_function": (str,),
    "calibration_method": (str,),
    "calibration_settings": (str,),
    "responses_sha256": (str,),
    "n_subjects": (int, np.integer),
    "created_at": (str,),
    "library_version": (str,),
    "scale": (str,),
}
JSON_ATTRS = ("calibration_settings", "scale")
GROUPS = ("items", "posterior", "subjects", "calibration", "responses")


def schema_version_problem(version: int, written_by) -> str:
    """The message for a bank whose schema this library cannot read, saying how to get one that can."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed_version

    try:
        mine = installed_version("irt-llm-eval")
    except PackageNotFoundError:
        mine = "unknown"
    supported = ", ".join(map(str, SUPPORTED_SCHEMA_VERSIONS))
    if version > max(SUPPORTED_SCHEMA_VERSIONS):
        by = f" by irt-llm-eval {written_by}" if isinstance(written_by, str) and written_by else ""
        need = f">= {written_by}" if isinstance(written_by, str) and written_by and written_by != "unknown" else "a newer release"
        return (
            f"unknown schema_version {version}: the bank was written{by} with a newer schema than this library "
            f"(irt-llm-eval {mine}) reads (schema {supported}); upgrade to irt-llm-eval {need}, "
            "e.g. `pip install -U irt-llm-eval`"
        )
    return f"unknown schema_version {version} (this library, irt-llm-eval {mine}, reads schema {supported})"


def _json_problem(name, value):
    try:
        json.loads(value)
    except (TypeError, ValueError) as exc:
        return f"root attribute {name!r} is not valid JSON ({exc})"
    return None


def _nonfinite_items(values, item_ids, limit=5):
    bad = np.flatnonzero(~np.isfinite(values))
    shown = ", ".join(repr(str(item_ids[k])) for k in bad[:limit])
    more = f" and {bad.size - limit} more" if bad.size > limit else ""
    return bad.size, shown + more


def validate_tree(tree) -> list[str]:
    """Return every schema-v1 problem of ``tree`` (an ``xarray.DataTree``); empty list = valid."""
    problems: list[str] = []
    attrs = dict(tree.attrs)
    for name, types in ROOT_ATTRS.items():
        if name not in attrs:
            problems.append(f"missing root attribute {name!r}")
        elif not isinstance(attrs[name], types) or isinstance(attrs[name], bool):
            problems.append(f"root attribute {name!r} has type {type(attrs[name]).__name__}, expected {types[0].__name__}")
    if attrs.get("schema") not in (None, SCHEMA_NAME) and isinstance(attrs.get("schema"), str):
        problems.append(f"root attribute 'schema' is {attrs['schema']!r}, expected {SCHEMA_NAME!r}")
    version = attrs.get("schema_version")
    if isinstance(version, (int, np.integer)) and int(version) not in SUPPORTED_SCHEMA_VERSIONS:
        problems.append(schema_version_problem(int(version), attrs.get("library_version")))
    for name in JSON_ATTRS:
        if isinstance(attrs.get(name), str):
            p = _json_problem(name, attrs[name])
            if p:
                problems.append(p)
    model = attrs.get("response_model")
    if isinstance(model, str) and model not in ITEM_PARAMETERS:
        problems.append(f"unknown response_model {model!r}; allowed: {', '.join(ITEM_PARAMETERS)}")
        model = None
    method = attrs.get("calibration_method")
    if isinstance(method, str) and method not in CALIBRATION_METHODS:
        problems.append(f"unknown calibration_method {method!r}; allowed: {', '.join(m or repr('') for m in CALIBRATION_METHODS)}")
    bank_version, parent = attrs.get("bank_version"), attrs.get("parent_version")
    if isinstance(bank_version, (int, np.integer)) and isinstance(parent, (int, np.integer)):
        if bank_version < 0 or parent < 0 or (bank_version > 0 and parent >= bank_version):
            problems.append(
                f"bank_version {int(bank_version)} / parent_version {int(parent)} are inconsistent "
                "(versions are >= 1 once written, 0 before; a parent precedes its child)"
            )
    if model == "lart":
        offset = attrs.get("cot_offset")
        if not is_number(offset):
            problems.append("lart banks need a numeric root attribute 'cot_offset' (T is modelled as log(T + cot_offset))")
        elif not np.isfinite(offset) or offset < 0:
            problems.append(f"cot_offset must be finite and >= 0, got {offset}")

    unknown_groups = sorted(set(tree.children) - set(GROUPS))
    if unknown_groups:
        problems.append(f"unknown group(s) {unknown_groups}; allowed: {list(GROUPS)}")
    if "items" not in tree.children:
        problems.append("missing group '/items'")
        return problems
    problems.extend(_validate_items(tree["items"].to_dataset(), model))
    if "subjects" in tree.children:
        problems.extend(_validate_subjects(tree["subjects"].to_dataset()))
    if "responses" in tree.children:
        problems.extend(_validate_responses(tree["responses"].to_dataset()))
    return problems


def _validate_items(items, model) -> list[str]:
    problems: list[str] = []
    if "item" not in items.coords or items["item"].dims != ("item",):
        problems.append("group '/items' needs a one-dimensional coordinate 'item' of string ids")
        return problems
    item_ids = items["item"].values
    if item_ids.size == 0:
        problems.append("group '/items' has no items")
    if item_ids.dtype.kind not in "UO":
        problems.append(f"coordinate 'item' must hold string ids, got dtype {item_ids.dtype}")
    _, first, counts = np.unique(item_ids.astype(str), return_index=True, return_counts=True)
    if (counts > 1).any():
        dup = item_ids[np.sort(first[counts > 1])][:5]
        problems.append(f"duplicate item ids: {', '.join(repr(str(v)) for v in dup)}")
    required = ITEM_PARAMETERS.get(model, ())
    for name in required:
        if name not in items.data_vars:
            problems.append(f"missing variable '/items/{name}' (required by response_model {model!r})")
    for name in ALL_ITEM_PARAMETERS + ("b_sd",):
        if name not in items.data_vars:
            continue
        var = items[name]
        if name in ALL_ITEM_PARAMETERS and name not in required and model is not None:
            problems.append(f"variable '/items/{name}' does not belong to response_model {model!r}")
        if var.dims != ("item",):
            problems.append(f"variable '/items/{name}' has dims {var.dims}, expected ('item',)")
            continue
        if var.dtype.kind != "f":
            problems.append(f"variable '/items/{name}' has dtype {var.dtype}, expected float")
            continue
        n_bad, shown = _nonfinite_items(var.values, item_ids)
        if n_bad:
            problems.append(f"variable '/items/{name}' is NaN or infinite for {n_bad} item(s): {shown}")
    if "rho" in items.data_vars:
        rho = items["rho"]
        if rho.dims != ():
            problems.append(f"variable '/items/rho' must be 0-dimensional, has dims {rho.dims}")
        elif not (np.isfinite(rho.values) and -1 < float(rho.values) < 1):
            problems.append(f"variable '/items/rho' must lie strictly in (-1, 1), got {rho.values}")
        elif model in ("2pl", "4pl") and float(rho.values) != 0:
            problems.append(f"variable '/items/rho' is {float(rho.values)} but only lart banks have rho != 0")
    elif model == "lart":
        problems.append("missing variable '/items/rho' (required by response_model 'lart')")
    if model == "4pl" and {"c", "d"} <= set(items.data_vars) and not any("'/items/c'" in p or "'/items/d'" in p for p in problems):
        c, d = items["c"].values, items["d"].values
        bad = np.flatnonzero((c < 0) | (d > 1) | (c >= d))
        if bad.size:
            problems.append(
                f"4PL asymptotes need 0 <= c < d <= 1; violated for {bad.size} item(s), first {str(item_ids[bad[0]])!r} "
                f"(c={c[bad[0]]}, d={d[bad[0]]})"
            )
    if model == "lart" and "lam" in items.data_vars and items["lam"].dtype.kind == "f":
        lam = items["lam"].values
        bad = np.flatnonzero(lam <= 0)
        if bad.size:
            problems.append(f"variable '/items/lam' (an SD) must be > 0; item {str(item_ids[bad[0]])!r} has {lam[bad[0]]}")
    if "b_sd" in items.data_vars and items["b_sd"].dtype.kind == "f" and (items["b_sd"].values < 0).any():
        problems.append("variable '/items/b_sd' (a posterior SD) has negative entries")
    for name, var in items.data_vars.items():
        if name in ALL_ITEM_PARAMETERS + ("b_sd", "rho"):
            continue
        if "item" not in var.dims:
            continue
        if var.dims[0] != "item":
            problems.append(f"per-item variable '/items/{name}' must have 'item' as its first dim, has {var.dims}")
    return problems


def _validate_subjects(subjects) -> list[str]:
    problems = []
    if "subject" not in subjects.coords:
        problems.append("group '/subjects' needs a coordinate 'subject' of string ids")
        return problems
    for name in ("theta", "theta_sd"):
        if name not in subjects.data_vars:
            problems.append(f"missing variable '/subjects/{name}'")
        elif subjects[name].dims != ("subject",):
            problems.append(f"variable '/subjects/{name}' has dims {subjects[name].dims}, expected ('subject',)")
    if "theta" in subjects.data_vars and subjects["theta"].dims == ("subject",):
        n_bad, shown = _nonfinite_items(subjects["theta"].values, subjects["subject"].values)
        if n_bad:
            problems.append(f"variable '/subjects/theta' is NaN or infinite for {n_bad} subject(s): {shown}")
    return problems


def _validate_responses(responses) -> list[str]:
    """The optional /responses group: the calibration data (subject x item), kept for recalibration."""
    if "correct" not in responses.data_vars:
        return ["group '/responses' needs a variable 'correct' (subject x item, int8, -1 = missing)"]
    correct = responses["correct"]
    problems = []
    if set(correct.dims) != {"subject", "item"}:
        problems.append(f"variable '/responses/correct' has dims {correct.dims}, expected ('subject', 'item')")
    if correct.dtype.kind not in "iu":
        problems.append(f"variable '/responses/correct' has dtype {correct.dtype}, expected int8")
    return problems
