"""Item bank schema v2 (v1 still read): constants and a validator that reports every problem at once.

Pure checks on an in-memory ``xarray.DataTree``; no file I/O here (see ``io.py``).

Reliability checks (at the end of this module; docs/reliability.md): ``bank_id`` is a safe name,
item ids are printable; parameters lie in plausible ranges (|a| <= 50, |b| <= 100,
0 <= c < d <= 1, |omega| <= 50, |phi| <= 50, 1e-3 <= lam <= 1e3, 0 <= b_sd (and any per-item
``*_sd``) <= 1e6, -1 < rho < 1, 0 <= cot_offset <= 1e6); ``calibration_settings`` and ``scale``
are JSON objects; a kept /responses group is a valid response matrix; ``content_sha256`` (written
by ``write_item_bank``) covers every variable of /items and is verified on open.
"""

from __future__ import annotations

import json

import numpy as np

from catengine.models.params import PARAMETER_FIELDS
from catengine.models.response_models import RESPONSE_MODELS
from catengine.models.score_factors import MAX_SCORE_FACTORS
from catengine.validation import is_number

SCHEMA_NAME = "irt-llm-eval.itembank"
SCHEMA_VERSION = 3  # v2 adds optional item-parameter uncertainty (UNCERTAINTY_DESCRIPTIONS); v3 the item content
SUPPORTED_SCHEMA_VERSIONS = (1, 2, 3)

#: from the response-model registry (catengine.models.response_models): the formula text a bank of
#: each model stores in its root attribute ``response_function``, and the item parameters it stores
RESPONSE_FUNCTIONS = {name: model.response_function for name, model in RESPONSE_MODELS.items()}
ITEM_PARAMETERS = {name: model.parameters for name, model in RESPONSE_MODELS.items()}
ALL_ITEM_PARAMETERS = PARAMETER_FIELDS
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

# schema v2: optional item-parameter uncertainty. /items: per-item SDs and covariances;
# /posterior: parameter draws with dims ("draw", "item") on the bank's scale.
UNCERTAINTY_DESCRIPTIONS = {
    "a_sd": ("SD of a", "standard error (posterior SD) of the slope a"),
    "b_sd": PARAMETER_DESCRIPTIONS["b_sd"],
    "ab_cov": ("covariance of a and b", "sampling (posterior) covariance of the slope a and the intercept b"),
    "omega_sd": ("SD of omega", "standard error (posterior SD) of the CoT intensity omega"),
    "phi_sd": ("SD of phi", "standard error (posterior SD) of the CoT speed loading phi"),
    "omega_phi_cov": ("covariance of omega and phi", "sampling (posterior) covariance of omega and phi"),
    "a_draws": ("draws of a", "draws of the slope a on the bank's scale (e.g. a linked bootstrap over LLMs)"),
    "b_draws": ("draws of b", "draws of the intercept b on the bank's scale (e.g. a linked bootstrap over LLMs)"),
}
UNCERTAINTY_SD_VARIABLES = ("a_sd", "b_sd", "omega_sd", "phi_sd")
UNCERTAINTY_COV_VARIABLES = {"ab_cov": ("a_sd", "b_sd"), "omega_phi_cov": ("omega_sd", "phi_sd")}
UNCERTAINTY_ITEM_VARIABLES = UNCERTAINTY_SD_VARIABLES + tuple(UNCERTAINTY_COV_VARIABLES)
UNCERTAINTY_DRAW_VARIABLES = ("a_draws", "b_draws")
LART_ONLY_UNCERTAINTY = ("omega_sd", "phi_sd", "omega_phi_cov")

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
GROUPS = ("items", "posterior", "subjects", "calibration", "responses", "content")


def schema_version_problem(version: int, written_by) -> str:
    """The message for a bank whose schema this library cannot read, saying how to get one that can
    (an upgrade only when the bank's writer is a newer release than this library)."""
    import re
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed_version

    def _release_number(text) -> tuple[int, ...] | None:  # "0.1.0.dev3" -> (0, 1); None without numbers
        match = re.match(r"\s*v?(\d+(?:\.\d+)*)", text) if isinstance(text, str) else None
        if match is None:
            return None
        numbers = tuple(int(part) for part in match.group(1).split("."))
        while len(numbers) > 1 and numbers[-1] == 0:  # 0.1 and 0.1.0 are one release
            numbers = numbers[:-1]
        return numbers

    try:
        mine = installed_version("irt-llm-eval")
    except PackageNotFoundError:
        mine = "unknown"
    supported = ", ".join(map(str, SUPPORTED_SCHEMA_VERSIONS))
    if version > max(SUPPORTED_SCHEMA_VERSIONS):
        known = isinstance(written_by, str) and written_by and written_by != "unknown"
        by = f" by irt-llm-eval {written_by}" if known else ""
        writer, reader = _release_number(written_by), _release_number(mine)
        if known and writer is not None and reader is not None and writer <= reader:
            # the writer is this release or an older one: no upgrade to it can help
            advice = (f"irt-llm-eval {written_by} is not newer than this library, so a development build wrote it "
                      f"or its schema_version was changed; open it with the build that wrote it, or with a release "
                      f"that reads schema {version}")
        elif known and writer is not None:
            advice = f"upgrade to irt-llm-eval >= {written_by}, e.g. `pip install -U irt-llm-eval`"
        else:
            advice = f"upgrade to a release that reads schema {version}, e.g. `pip install -U irt-llm-eval`"
        return (
            f"unknown schema_version {version}: the bank was written{by} with a newer schema than this library "
            f"(irt-llm-eval {mine}) reads (schema {supported}); {advice}"
        )
    return f"unknown schema_version {version} (this library, irt-llm-eval {mine}, reads schema {supported})"


def _json_problem(name, value):
    try:
        json.loads(value)
    except (TypeError, ValueError, RecursionError) as exc:
        return f"root attribute {name!r} is not valid JSON ({exc})"
    return None


def _nonfinite_items(values, item_ids, limit=5):
    bad = np.flatnonzero(~np.isfinite(values))
    shown = ", ".join(repr(str(item_ids[k])) for k in bad[:limit])
    more = f" and {bad.size - limit} more" if bad.size > limit else ""
    return bad.size, shown + more


def _float_variable_problem(var, path: str, dims: tuple[str, ...]) -> str | None:
    """Why the variable at ``path`` is not a float array with dims ``dims``, or None."""
    if var.dims != dims:
        return f"variable '{path}' has dims {var.dims}, expected {dims}"
    if var.dtype.kind != "f":
        return f"variable '{path}' has dtype {var.dtype}, expected float"
    return None


def _item_vector_problem(var, name: str, item_ids) -> str | None:
    """Why ``/items/<name>`` is not a finite float vector over the items, or None."""
    problem = _float_variable_problem(var, f"/items/{name}", ("item",))
    if problem is None:
        n_bad, shown = _nonfinite_items(var.values, item_ids)
        if n_bad:
            problem = f"variable '/items/{name}' is NaN or infinite for {n_bad} item(s): {shown}"
    return problem


def validate_tree(tree) -> list[str]:
    """Return every schema-v1 problem of ``tree`` (an ``xarray.DataTree``); empty list = valid."""
    problems: list[str] = []
    attrs = dict(tree.attrs)
    for name, types in ROOT_ATTRS.items():
        if name not in attrs:
            problems.append(f"missing root attribute {name!r}")
        elif not isinstance(attrs[name], types) or isinstance(attrs[name], bool):
            problems.append(f"root attribute {name!r} has type {type(attrs[name]).__name__}, expected {types[0].__name__}")
    # the checks below see only well-typed attributes (an array-valued one must not crash them)
    attrs = {k: v for k, v in attrs.items() if not isinstance(v, np.ndarray) and
             (k not in ROOT_ATTRS or (isinstance(v, ROOT_ATTRS[k]) and not isinstance(v, bool)))}
    problems.extend(reliability_problems(tree, attrs, attrs.get("response_model")))
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
    if _has_cot(model):
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
    posterior = tree["posterior"].to_dataset() if "posterior" in tree.children else None
    problems.extend(_validate_uncertainty(tree["items"].to_dataset(), posterior, model))
    if "subjects" in tree.children:
        problems.extend(_validate_subjects(tree["subjects"].to_dataset()))
    if "responses" in tree.children:
        problems.extend(_validate_responses(tree["responses"].to_dataset()))
    problems.extend(_validate_content(tree))
    return problems


def _validate_content(tree) -> list[str]:
    """The optional item content (schema v3): the /content group and the root attribute 'protocol'."""
    from catengine.itembank.content import PROTOCOL_ATTR, content_group_problems, protocol_problems

    problems = []
    protocol = tree.attrs.get(PROTOCOL_ATTR)
    if protocol is not None:
        try:
            problems.extend(protocol_problems(json.loads(protocol)))
        except (TypeError, ValueError, RecursionError) as exc:
            problems.append(f"root attribute {PROTOCOL_ATTR!r} is not valid JSON ({exc})")
    if "content" in tree.children:
        if protocol is None:
            problems.append(f"group '/content' needs the root attribute {PROTOCOL_ATTR!r} (how its items are asked and graded)")
        if "items" in tree.children and "item" in tree["items"].coords:
            problems.extend(content_group_problems(tree["content"].to_dataset(), tree["items"]["item"].values))
    return problems


def _spec(model):
    """The response model object of a (validated) ``response_model`` attribute, or None."""
    return RESPONSE_MODELS.get(model) if isinstance(model, str) else None


def _has_cot(model) -> bool:
    spec = _spec(model)
    return spec is not None and spec.has_cot


def _validate_items(items, model) -> list[str]:
    problems: list[str] = []
    spec = _spec(model)
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
    for name in ALL_ITEM_PARAMETERS:
        if name not in items.data_vars:
            continue
        var = items[name]
        if name in ALL_ITEM_PARAMETERS and name not in required and model is not None:
            problems.append(f"variable '/items/{name}' does not belong to response_model {model!r}")
        problem = _item_vector_problem(var, name, item_ids)
        if problem:
            problems.append(problem)
    if "rho" in items.data_vars:
        rho = items["rho"]
        if rho.dims != ():
            problems.append(f"variable '/items/rho' must be 0-dimensional, has dims {rho.dims}")
        elif not (np.isfinite(rho.values) and -1 < float(rho.values) < 1):
            problems.append(f"variable '/items/rho' must lie strictly in (-1, 1), got {rho.values}")
        elif spec is not None and not spec.has_cot and float(rho.values) != 0:
            problems.append(f"variable '/items/rho' is {float(rho.values)} but only lart banks have rho != 0")
    elif spec is not None and spec.has_cot:
        problems.append(f"missing variable '/items/rho' (required by response_model {model!r})")
    if spec is not None and spec.has_asymptotes and {"c", "d"} <= set(items.data_vars) and not any("'/items/c'" in p or "'/items/d'" in p for p in problems):
        c, d = items["c"].values, items["d"].values
        bad = np.flatnonzero((c < 0) | (d > 1) | (c >= d))
        if bad.size:
            problems.append(
                f"4PL asymptotes need 0 <= c < d <= 1; violated for {bad.size} item(s), first {str(item_ids[bad[0]])!r} "
                f"(c={c[bad[0]]}, d={d[bad[0]]})"
            )
    if spec is not None and spec.has_cot and "lam" in items.data_vars and items["lam"].dtype.kind == "f":
        lam = items["lam"].values
        bad = np.flatnonzero(lam <= 0)
        if bad.size:
            problems.append(f"variable '/items/lam' (an SD) must be > 0; item {str(item_ids[bad[0]])!r} has {lam[bad[0]]}")
    problems.extend(_score_factor_problems(items, item_ids))
    for name, var in items.data_vars.items():
        if name in ALL_ITEM_PARAMETERS + UNCERTAINTY_ITEM_VARIABLES + ("rho",):
            continue
        if "item" not in var.dims:
            continue
        if var.dims[0] != "item":
            problems.append(f"per-item variable '/items/{name}' must have 'item' as its first dim, has {var.dims}")
    return problems


SCORE_FACTOR_VARIABLES = ("score_loading", "score_intercept")


def _score_factor_problems(items, item_ids) -> list[str]:
    """The optional score-factor model: '/items/score_loading' (item, score_factor) with 1 to 3
    factors and '/items/score_intercept' (item,), both finite floats, present together."""
    present = [n for n in SCORE_FACTOR_VARIABLES if n in items.data_vars]
    if not present:
        return []
    if len(present) == 1:
        missing = next(n for n in SCORE_FACTOR_VARIABLES if n not in present)
        return [f"variable '/items/{present[0]}' needs '/items/{missing}' (the score-factor model has both)"]
    problems = []
    loading = items["score_loading"]
    problem = _float_variable_problem(loading, "/items/score_loading", ("item", "score_factor"))
    if problem is None and not 1 <= loading.shape[1] <= MAX_SCORE_FACTORS:
        problem = f"variable '/items/score_loading' has {loading.shape[1]} score factors, expected 1 to {MAX_SCORE_FACTORS}"
    if problem is None:
        bad = np.flatnonzero(~np.isfinite(loading.values).all(axis=1))
        if bad.size:
            problem = (f"variable '/items/score_loading' is NaN or infinite for {bad.size} item(s), first "
                       f"{str(item_ids[bad[0]])!r}")
    if problem:
        problems.append(problem)
    problem = _item_vector_problem(items["score_intercept"], "score_intercept", item_ids)
    if problem:
        problems.append(problem)
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


# ---------------------------------------------------------------------------------------------
# Reliability checks (issue 18): names, plausible ranges, attribute types, content checksum.
#
# Plausible parameter ranges (inclusive), checked when a bank is built and when it is opened.
# They are far outside anything a calibration produces (every shipped bank and every fit in the
# test suite lies well inside) and exist to stop damaged or absurd values (a = 1e300,
# lam = 5e-324) from reaching the numerics, where they would give NaN or singular estimates:
#
#   a (slope)        |a| <= 50      (logistic or probit; a real item has |a| < 10)
#   b (intercept)    |b| <= 100
#   c, d             0 <= c < d <= 1
#   omega            |omega| <= 50  (mean of log(T + offset): e^50 tokens)
#   phi              |phi| <= 50
#   lam (an SD)      1e-3 <= lam <= 1e3
#   b_sd and any other '*_sd' per-item variable: 0 <= sd <= 1e6 (an unidentified item's SD is large, honestly)
#   rho              -1 < rho < 1
#   cot_offset       0 <= cot_offset <= 1e6
#
# content_sha256 (root attribute, written by ``write_item_bank``): the sha256 of the canonical
# bytes of every variable of /items (coordinates included; sorted by name; for each its name,
# dtype, shape and values, strings as JSON), the response model and the cot_offset, and, when the
# bank has item content, the protocol and every variable of /content. ``open`` recomputes it; a
# bank without it still opens, with a warning that damage cannot be detected
# (``catengine banks upgrade`` writes a checksummed version).
# ---------------------------------------------------------------------------------------------
PLAUSIBLE_RANGES = {
    "a": (-50.0, 50.0),
    "b": (-100.0, 100.0),
    "c": (0.0, 1.0),
    "d": (0.0, 1.0),
    "omega": (-50.0, 50.0),
    "phi": (-50.0, 50.0),
    "lam": (1e-3, 1e3),
    "b_sd": (0.0, 1e6),
}
SD_RANGE = (0.0, 1e6)
COT_OFFSET_RANGE = (0.0, 1e6)
CHECKSUM_ATTR = "content_sha256"
_CHECKSUM_FORMAT = "irt-llm-eval.itembank.items/1"


def name_problem(value, what: str) -> str | None:
    """Why ``value`` is not a safe name for ``what`` (a bank id: a file name part), or None.

    A name is a non-empty string without path separators, whitespace or control characters that
    does not start with a dot (so neither '..' nor '.hidden'), at most 200 characters.
    """
    if not isinstance(value, str):
        return f"{what} must be a string, got {type(value).__name__}"
    if not value:
        return f"{what} is empty"
    bad = sorted({ch for ch in value if ch in "/\\" or ch.isspace() or not ch.isprintable()})
    if bad:
        return f"{what} {value!r} contains {', '.join(map(repr, bad))} (no path separators, whitespace or control characters)"
    if value.startswith("."):
        return f"{what} {value!r} starts with a dot (no hidden names, no '.' or '..')"
    if len(value) > 200:
        return f"{what} is {len(value)} characters long (at most 200)"
    return None


def item_id_problems(item_ids) -> list[str]:
    """Item ids must be non-empty, printable (no newline, tab or other control character) and
    without leading or trailing whitespace; '/' is allowed (e.g. 'gsm8k/17')."""
    texts = item_ids.tolist() if isinstance(item_ids, np.ndarray) else list(item_ids)
    if not all(type(t) is str for t in texts):
        texts = [str(t) for t in texts]
    # the common, clean case in a few C-level passes: once printable, the only whitespace left is ' '
    joined = "\x1f".join(texts)
    if texts and min(map(len, texts)) > 0 and joined.replace("\x1f", "").isprintable() and not (
            joined.startswith(" ") or joined.endswith(" ") or " \x1f" in joined or "\x1f " in joined):
        return []
    bad = [t for t in texts if not t or not t.isprintable() or t != t.strip()]
    if not bad:
        return []
    shown = ", ".join(repr(v) for v in bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
    return [f"{len(bad)} item id(s) are empty, have control characters or surrounding whitespace: {shown}"]


def _range_problem(name, values, low, high, item_ids):
    with np.errstate(invalid="ignore"):
        bad = np.flatnonzero(~((values >= low) & (values <= high)) & np.isfinite(values))
    if not bad.size:
        return None
    k = int(bad[0])
    where = f"item {str(item_ids[k])!r}" if item_ids is not None and np.ndim(values) else "it"
    return (f"variable '/items/{name}' is outside its plausible range [{low:g}, {high:g}] for {bad.size} item(s); "
            f"{where} has {values.flat[k]!r}")


def range_problems(items, item_ids) -> list[str]:
    """Parameters outside :data:`PLAUSIBLE_RANGES` (see the table above)."""
    problems = []
    for name, var in items.data_vars.items():
        if name in PLAUSIBLE_RANGES:
            low, high = PLAUSIBLE_RANGES[name]
        elif name.endswith("_sd") and var.dims[:1] == ("item",):
            low, high = SD_RANGE
        else:
            continue
        if var.dtype.kind != "f" or var.dims[:1] != ("item",):
            continue
        p = _range_problem(name, var.values, low, high, item_ids)
        if p:
            problems.append(p)
    return problems


def attribute_value_problems(attrs) -> list[str]:
    """JSON attributes must hold objects; cot_offset must lie in its plausible range."""
    problems = []
    for name in JSON_ATTRS:
        value = attrs.get(name)
        if isinstance(value, str):
            try:
                decoded = json.loads(value)
            except (ValueError, RecursionError):
                continue  # reported by the JSON check
            if not isinstance(decoded, dict):
                problems.append(f"root attribute {name!r} must be a JSON object, got {type(decoded).__name__} {value[:60]!r}")
    offset = attrs.get("cot_offset")
    if isinstance(offset, (float, int, np.floating, np.integer)) and not isinstance(offset, bool) and np.isfinite(offset):
        low, high = COT_OFFSET_RANGE
        if not low <= float(offset) <= high:
            problems.append(f"cot_offset {float(offset)!r} is outside its plausible range [{low:g}, {high:g}]")
    return problems


def _canonical_bytes(values: np.ndarray) -> tuple[str, bytes]:
    if values.dtype.kind in "OUS":
        texts = [v if isinstance(v, str) else str(v) for v in values.ravel().tolist()]
        return "str", json.dumps(texts, ensure_ascii=False).encode("utf-8", "surrogatepass")
    little = values.dtype.newbyteorder("<")
    return little.str, np.ascontiguousarray(values, dtype=little).tobytes()


def content_sha256(tree) -> str:
    """sha256 of the canonical content of /items (every variable, generically) + model + cot_offset."""
    import hashlib

    items = tree["items"].to_dataset()
    offset = tree.attrs.get("cot_offset")
    head = {"format": _CHECKSUM_FORMAT, "response_model": str(tree.attrs.get("response_model")),
            "cot_offset": None if offset is None else float(offset)}
    h = hashlib.sha256(json.dumps(head, sort_keys=True).encode())
    _hash_variables(h, items, "")
    # the item content (schema v3) and its protocol, when the bank has them (a bank without keeps its v1/v2 hash)
    if "content" in tree.children:
        h.update(json.dumps(["protocol", str(tree.attrs.get("protocol"))]).encode())
        _hash_variables(h, tree["content"].to_dataset(), "content/")
    return h.hexdigest()


def _hash_variables(h, dataset, prefix: str) -> None:
    for name in sorted(map(str, dataset.variables)):
        values = np.asarray(dataset.variables[name].values)
        dtype, data = _canonical_bytes(values)
        h.update(json.dumps([prefix + name, dtype, list(values.shape), len(data)]).encode())
        h.update(data)


def checksum_problems(tree) -> list[str]:
    """The recorded content_sha256 (if any) against the content (used when a file is opened)."""
    recorded = tree.attrs.get(CHECKSUM_ATTR)
    if recorded is None:
        return []
    if not isinstance(recorded, str):
        return [f"root attribute {CHECKSUM_ATTR!r} has type {type(recorded).__name__}, expected str"]
    actual = content_sha256(tree)
    if recorded != actual:
        return [f"the item parameters hash to {actual[:16]}... but the file records {CHECKSUM_ATTR} "
                f"{recorded[:16]}...: the file is damaged or was modified"]
    return []


def responses_group_problems(tree) -> list[str]:
    """A kept /responses group must be a valid response matrix whose recorded sha256 matches."""
    if "responses" not in tree.children:
        return []
    from catengine.responses.data import ResponseData

    try:
        ResponseData.from_dataset(tree["responses"].to_dataset(), source="group '/responses'")
    except (ValueError, TypeError, KeyError) as exc:
        return [f"group '/responses' is not a valid response matrix: {exc}"]
    return []


def reliability_problems(tree, attrs, model) -> list[str]:
    """Every check above that applies to an in-memory tree (not the checksum: see checksum_problems)."""
    problems = []
    p = name_problem(attrs.get("bank_id"), "bank_id")
    if p and isinstance(attrs.get("bank_id"), str):
        problems.append(p)
    problems.extend(attribute_value_problems(attrs))
    if "items" in tree.children:
        items = tree["items"].to_dataset()
        if "item" in items.coords and items["item"].dims == ("item",):
            item_ids = items["item"].values
            problems.extend(item_id_problems(item_ids))
            problems.extend(range_problems(items, item_ids))
    problems.extend(responses_group_problems(tree))
    return problems


def _validate_uncertainty(items, posterior, model) -> list[str]:
    """Schema v2's optional item-parameter uncertainty: SDs finite and >= 0, |correlation| <= 1,
    draws finite with dims ("draw", "item") over the bank's items."""
    problems: list[str] = []
    if "item" not in items.coords:
        return problems
    item_ids = items["item"].values
    good = {}
    for name in UNCERTAINTY_ITEM_VARIABLES:
        if name not in items.data_vars:
            continue
        var = items[name]
        if name in LART_ONLY_UNCERTAINTY and model is not None and not _has_cot(model):
            problems.append(f"variable '/items/{name}' belongs to lart banks only, not to response_model {model!r}")
        problem = _item_vector_problem(var, name, item_ids)
        if problem:
            problems.append(problem)
            continue
        values = var.values
        if name in UNCERTAINTY_SD_VARIABLES and (values < 0).any():
            j = int(np.flatnonzero(values < 0)[0])
            problems.append(f"variable '/items/{name}' (an SD) must be >= 0; item {str(item_ids[j])!r} has {values[j]}")
            continue
        good[name] = values
    for cov, (sd1, sd2) in UNCERTAINTY_COV_VARIABLES.items():
        if cov not in items.data_vars:
            continue
        if sd1 not in items.data_vars or sd2 not in items.data_vars:
            problems.append(f"variable '/items/{cov}' needs '/items/{sd1}' and '/items/{sd2}'")
            continue
        if cov in good and sd1 in good and sd2 in good:
            bad = np.flatnonzero(np.abs(good[cov]) > good[sd1] * good[sd2] * (1 + 1e-9) + 1e-300)
            if bad.size:
                j = int(bad[0])
                problems.append(
                    f"variable '/items/{cov}' implies |correlation| > 1 for {bad.size} item(s), first {str(item_ids[j])!r} "
                    f"({cov}={good[cov][j]}, {sd1}={good[sd1][j]}, {sd2}={good[sd2][j]})"
                )
    if posterior is None:
        return problems
    n_draws = set()
    for name in UNCERTAINTY_DRAW_VARIABLES:
        if name not in posterior.data_vars:
            continue
        var = posterior[name]
        problem = _float_variable_problem(var, f"/posterior/{name}", ("draw", "item"))
        if problem:
            problems.append(problem)
            continue
        ids = posterior["item"].values if "item" in posterior.coords else None
        if ids is None or ids.shape != item_ids.shape or (ids.astype(str) != item_ids.astype(str)).any():
            problems.append(f"variable '/posterior/{name}' needs the coordinate 'item' equal to '/items/item' (same ids, same order)")
            continue
        if not np.isfinite(var.values).all():
            draw, j = np.argwhere(~np.isfinite(var.values))[0]
            problems.append(f"variable '/posterior/{name}' is NaN or infinite, first at draw {int(draw)}, item {str(item_ids[j])!r}")
        if var.sizes["draw"] < 1:
            problems.append(f"variable '/posterior/{name}' has no draws")
        n_draws.add(var.sizes["draw"])
    if len(n_draws) > 1:
        problems.append(f"'/posterior/a_draws' and '/posterior/b_draws' have different numbers of draws: {sorted(n_draws)}")
    return problems
