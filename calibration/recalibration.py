"""Scripted recalibration of an item bank that keeps theta comparable across versions.

A recalibration loads the latest version of a bank, merges new responses with the ones the bank
keeps in its ``/responses`` group (or uses only the new data), refits with the bank's method and
settings, links the new scale to the previous version through the common items (Stocking-Lord by
default, or mean-sigma), and writes version k+1 with its parent, the linking constants, a change
log and the merged responses. Running it again with the same inputs writes nothing.

Everything here is orchestration: the numerics live in the calibrators and in ``linking.py``.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np

from calibration.data import MISSING, ResponseData
from calibration.linking import LINKING_METHODS, LinkingResult, link
from calibration.methods import all_method_names, get_method

def make_calibrator(method: str, settings: dict | None = None, *, rng=None, progress: bool = False):
    """A calibrator for ``method`` (a name of ``calibration.methods.METHODS`` or an alias) built from
    recorded ``settings`` (a bank's ``calibration_settings``: its notes and export options are not
    constructor settings and are skipped); ``rng`` and ``progress`` replace the recorded ones."""
    cls = get_method(method).calibrator
    calibrator = cls.from_config(dict(settings or {}), ignore_unknown=True)
    names = set(cls._param_names())
    return calibrator.set_params(**{k: v for k, v in (("rng", rng), ("progress", progress)) if k in names})


# ----------------------------------------------------------------------------- merging responses


def merge_responses(old: ResponseData, new: ResponseData, *, on_conflict: str = "error") -> ResponseData:
    """Union of two response sets (subjects and items in first-seen order).

    A cell observed in both with different values raises ValueError naming subject and item,
    unless ``on_conflict="new"`` (the new value wins). Item metadata must agree on shared items. LLM groups
    (``subject_groups``) are kept: a subject's group is the new set's when it names one, else the
    stored set's, else the subject itself.
    """
    if on_conflict not in ("error", "new"):
        raise ValueError(f"on_conflict must be 'error' or 'new', got {on_conflict!r}")
    if old.has_cot != new.has_cot:
        have, lack = ("the stored", "the new") if old.has_cot else ("the new", "the stored")
        raise ValueError(f"{have} responses carry CoT lengths but {lack} do not; both or neither must")
    subjects = list(dict.fromkeys(old.subject_ids + new.subject_ids))
    items = list(dict.fromkeys(old.item_ids + new.item_ids))
    s_pos = {s: k for k, s in enumerate(subjects)}
    i_pos = {i: k for k, i in enumerate(items)}
    correct = np.full((len(subjects), len(items)), MISSING, dtype=np.int8)
    cot = np.full(correct.shape, np.nan) if old.has_cot else None
    rows_old = np.array([s_pos[s] for s in old.subject_ids])
    cols_old = np.array([i_pos[i] for i in old.item_ids])
    rows_new = np.array([s_pos[s] for s in new.subject_ids])
    cols_new = np.array([i_pos[i] for i in new.item_ids])
    correct[np.ix_(rows_old, cols_old)] = old.correct
    block = correct[np.ix_(rows_new, cols_new)]
    seen_both = (block != MISSING) & (new.correct != MISSING)
    differ = seen_both & (block != new.correct)
    if cot is not None:
        cot[np.ix_(rows_old, cols_old)] = old.cot_length
        cot_block = cot[np.ix_(rows_new, cols_new)]
        both_cot = ~np.isnan(cot_block) & ~np.isnan(new.cot_length)
        differ |= both_cot & (cot_block != new.cot_length)
    if differ.any() and on_conflict == "error":
        r, c = (int(x) for x in np.argwhere(differ)[0])
        raise ValueError(
            f"subject {new.subject_ids[r]!r}, item {new.item_ids[c]!r}: the new responses disagree with the stored "
            f"ones ({int(differ.sum())} cell(s) differ); pass on_conflict='new' (--on-conflict new) to let new data win"
        )
    observed_new = new.correct != MISSING
    block = np.where(observed_new, new.correct, block)
    correct[np.ix_(rows_new, cols_new)] = block
    if cot is not None:
        cot_block = cot[np.ix_(rows_new, cols_new)]
        cot[np.ix_(rows_new, cols_new)] = np.where(np.isnan(new.cot_length), cot_block, new.cot_length)
    metadata = {}
    for key in sorted(set(old.item_metadata) | set(new.item_metadata)):
        values = np.full(len(items), "", dtype=object)
        for data in (old, new):
            if key not in data.item_metadata:
                continue
            for item, value in zip(data.item_ids, data.item_metadata[key]):
                k = i_pos[item]
                if values[k] not in ("", value):
                    raise ValueError(f"item {item!r}: metadata {key!r} is {values[k]!r} in the stored data but {value!r} in the new")
                values[k] = value
        metadata[key] = values
    groups = None
    if old.subject_groups is not None or new.subject_groups is not None:
        # a subject's LLM group from whichever set names one (the new one wins); ungrouped rows are their own LLM
        group_of = {s: s for s in subjects}
        for data in (old, new):
            if data.subject_groups is not None:
                group_of.update(zip(data.subject_ids, data.subject_groups))
        groups = [group_of[s] for s in subjects]
    return ResponseData.from_arrays(correct, cot, subject_ids=subjects, item_ids=items, item_metadata=metadata,
                                    subject_groups=groups)


# ----------------------------------------------------------------------------- diffs


DRIFT_CORRECTIONS = ("holm", "bh")
DRIFT_ALPHA = 0.05


@dataclass(frozen=True)
class ItemDrift:
    item: str
    a_old: float
    a_new: float
    b_old: float
    b_new: float
    sign_flip: bool
    statistic: float = float("nan")  # Wald chi-square of the change (NaN: threshold rule, no SEs)
    p_value: float = float("nan")  # unadjusted

    @property
    def reason(self) -> str:
        if self.sign_flip:
            return "discrimination changed sign (possible mis-key)"
        return "parameters drifted (possible contamination or changed item)"


@dataclass(frozen=True)
class BankDiff:
    """What changed between two versions of a bank (both on the same, linked scale)."""

    version_old: int
    version_new: int
    items_added: tuple[str, ...]
    items_removed: tuple[str, ...]
    drifted_items: tuple[ItemDrift, ...]
    subjects_added: tuple[str, ...]
    subjects_removed: tuple[str, ...]
    subjects_moved: tuple[tuple[str, float, float], ...]
    drift_threshold: float
    theta_threshold: float
    drift_test: str = "threshold"  # or e.g. "wald z-test on (a, b), holm, alpha 0.05"
    n_common: int = 0

    def to_dict(self) -> dict:
        return {
            "version_old": self.version_old,
            "version_new": self.version_new,
            "items_added": list(self.items_added),
            "items_removed": list(self.items_removed),
            "drifted_items": [
                {"item": d.item, "a_old": d.a_old, "a_new": d.a_new, "b_old": d.b_old, "b_new": d.b_new, "reason": d.reason,
                 "statistic": None if np.isnan(d.statistic) else d.statistic,
                 "p_value": None if np.isnan(d.p_value) else d.p_value}
                for d in self.drifted_items
            ],
            "drift_test": self.drift_test,
            "n_common": self.n_common,
            "subjects_added": list(self.subjects_added),
            "subjects_removed": list(self.subjects_removed),
            "subjects_moved": [{"subject": s, "theta_old": o, "theta_new": n} for s, o, n in self.subjects_moved],
            "drift_threshold": self.drift_threshold,
            "theta_threshold": self.theta_threshold,
        }

    def format(self, limit: int = 10) -> str:
        def listing(values):
            shown = ", ".join(values[:limit])
            return shown + (f" ... (+{len(values) - limit})" if len(values) > limit else "")

        lines = [f"diff v{self.version_old} -> v{self.version_new}"]
        lines.append(f"  items added:   {len(self.items_added)}" + (f" ({listing(self.items_added)})" if self.items_added else ""))
        lines.append(f"  items removed: {len(self.items_removed)}" + (f" ({listing(self.items_removed)})" if self.items_removed else ""))
        rule = f"|da| or |db| > {self.drift_threshold}" if self.drift_test == "threshold" else self.drift_test
        share = f", {len(self.drifted_items) / self.n_common:.1%} of {self.n_common} common" if self.n_common else ""
        lines.append(f"  items drifted ({rule}): {len(self.drifted_items)}{share}")
        for d in self.drifted_items[:limit]:
            lines.append(f"    {d.item}: a {d.a_old:+.3f} -> {d.a_new:+.3f}, b {d.b_old:+.3f} -> {d.b_new:+.3f}  [{d.reason}]")
        lines.append(f"  subjects added: {len(self.subjects_added)}" + (f" ({listing(self.subjects_added)})" if self.subjects_added else ""))
        lines.append(f"  subjects removed: {len(self.subjects_removed)}")
        lines.append(f"  subjects whose theta moved by more than {self.theta_threshold}: {len(self.subjects_moved)}")
        for s, o, n in self.subjects_moved[:limit]:
            lines.append(f"    {s}: theta {o:+.3f} -> {n:+.3f}")
        return "\n".join(lines)


def diff_banks(old, new, *, drift_threshold: float = 0.5, theta_threshold: float = 0.5, drift_alpha: float = DRIFT_ALPHA,
               drift_correction: str = "holm", nested: bool = False) -> BankDiff:
    """Compare two bank versions item by item and subject by subject (no linking is applied here).

    When both versions store item-parameter uncertainty (schema v2 ``a_sd``/``b_sd``/``ab_cov``),
    an item has drifted when its change is large relative to both versions' SEs: the Wald
    statistic d' (C_old + C_new)^-1 d of d = (a_new - a_old, b_new - b_old) (chi-square with 2
    degrees of freedom; 1 when only b has SEs) has a p-value below ``drift_alpha`` after the
    ``drift_correction`` over the common items ("holm": family-wise error, the default; "bh":
    Benjamini-Hochberg false-discovery rate). By default the two versions' errors are treated as
    independent (C_old + C_new), which over-states the variance of the change when they share
    data, so the test is conservative. ``nested=True`` (the new version was fitted on the old
    data plus more, as a merge recalibration is) uses the Hausman variance C_old - C_new instead
    (falling back to C_old (1 - N_old / N_new) where that difference is not positive definite).
    Banks without SEs fall back to the rule |da| or |db| > ``drift_threshold``. A sign flip of
    a is reported as a possible mis-key only when it is itself a flagged change.
    """
    if drift_correction not in DRIFT_CORRECTIONS:
        raise ValueError(f"drift_correction must be one of {', '.join(DRIFT_CORRECTIONS)}, got {drift_correction!r}")
    if not 0 < drift_alpha < 1:
        raise ValueError(f"drift_alpha must lie in (0, 1), got {drift_alpha!r}")
    old_ids, new_ids = old.item_ids, new.item_ids
    new_pos = {item: k for k, item in enumerate(new_ids)}
    old_set = set(old_ids)
    common = [item for item in old_ids if item in new_pos]
    drifted = []
    test = "threshold"
    if common:
        io = np.array([old.index_of(i) for i in common])
        inew = np.array([new_pos[i] for i in common])
        a_o, b_o = old.params.a[io], old.params.b[io]
        a_n, b_n = new.params.a[inew], new.params.b[inew]
        flip = np.sign(a_o) * np.sign(a_n) < 0
        stat, pval, df = _drift_statistics(old, new, io, inew, a_n - a_o, b_n - b_o, nested)
        if stat is None:
            moved = (np.abs(a_n - a_o) > drift_threshold) | (np.abs(b_n - b_o) > drift_threshold) | flip
            stat = pval = np.full(len(common), np.nan)
            order = np.argsort(-(np.abs(a_n - a_o) + np.abs(b_n - b_o)))
        else:
            moved = _reject(pval, drift_alpha, drift_correction)
            flip = flip & moved
            order = np.argsort(-stat)
            what = "(a, b)" if df == 2 else "b"
            var = "C_old - C_new (nested fits)" if nested else "C_old + C_new"
            test = f"wald test of the change in {what}, variance {var}, {drift_correction}, alpha {drift_alpha:g}"
        drifted = [
            ItemDrift(common[k], float(a_o[k]), float(a_n[k]), float(b_o[k]), float(b_n[k]), bool(flip[k]),
                      float(stat[k]), float(pval[k]))
            for k in order
            if moved[k]
        ]
    s_old, s_new = _subject_thetas(old), _subject_thetas(new)
    moved_subjects = sorted(
        ((s, s_old[s], s_new[s]) for s in s_old if s in s_new and abs(s_new[s] - s_old[s]) > theta_threshold),
        key=lambda row: -abs(row[2] - row[1]),
    )
    return BankDiff(
        version_old=old.version,
        version_new=new.version,
        items_added=tuple(i for i in new_ids if i not in old_set),
        items_removed=tuple(i for i in old_ids if i not in new_pos),
        drifted_items=tuple(drifted),
        subjects_added=tuple(s for s in s_new if s not in s_old),
        subjects_removed=tuple(s for s in s_old if s not in s_new),
        subjects_moved=tuple(moved_subjects),
        drift_threshold=float(drift_threshold),
        theta_threshold=float(theta_threshold),
        drift_test=test,
        n_common=len(common),
    )


def _drift_statistics(old, new, io, inew, da, db, nested=False):
    """(Wald statistic, p-value, degrees of freedom) per common item, or (None, None, 0) when a
    version has no item SEs. Uses (a, b) with their covariance when both versions have a_sd and
    b_sd, else b alone."""
    from scipy import stats

    uo, un = old.item_uncertainty, new.item_uncertainty
    if uo is None or un is None or uo.b_sd is None or un.b_sd is None:
        return None, None, 0
    if uo.a_sd is not None and un.a_sd is not None:
        co, cn = uo.ab_covariance()[io], un.ab_covariance()[inew]
        if nested:
            c = co - cn
            share = 1.0 - min(1.0, int(old.attrs.get("n_subjects", 0)) / max(int(new.attrs.get("n_subjects", 0)), 1))
            bad = (c[:, 0, 0] <= 0) | (c[:, 1, 1] <= 0) | (c[:, 0, 0] * c[:, 1, 1] - c[:, 0, 1] ** 2 <= 0)
            c[bad] = co[bad] * max(share, 1e-6)
        else:
            c = co + cn
        vaa, vab, vbb = c[:, 0, 0], c[:, 0, 1], c[:, 1, 1]
        det = vaa * vbb - vab * vab
        tiny = 1e-12 * (vaa + vbb + 1e-300)
        ok = det > tiny * tiny
        with np.errstate(divide="ignore", invalid="ignore"):
            full = (vbb * da * da - 2 * vab * da * db + vaa * db * db) / det
            # singular 2 x 2 (e.g. a pinned at 0 in both versions: a_sd = 0): test b alone
            b_only = db * db / np.maximum(vbb, 1e-300)
        stat = np.where(ok, full, b_only)
        return stat, stats.chi2.sf(stat, np.where(ok, 2, 1)), 2
    vo, vn = uo.b_sd[io] ** 2, un.b_sd[inew] ** 2
    v = vo + vn
    if nested:
        share = 1.0 - min(1.0, int(old.attrs.get("n_subjects", 0)) / max(int(new.attrs.get("n_subjects", 0)), 1))
        v = np.where(vo - vn > 0, vo - vn, vo * max(share, 1e-6))
    stat = db * db / np.maximum(v, 1e-300)
    return stat, stats.chi2.sf(stat, 1), 1


def _reject(p, alpha: float, correction: str) -> np.ndarray:
    """Which hypotheses are rejected at level ``alpha`` by Holm's step-down or Benjamini-Hochberg."""
    p = np.asarray(p, dtype=np.float64)
    m = p.size
    order = np.argsort(p)
    ranked = p[order]
    out = np.zeros(m, bool)
    if correction == "holm":
        passed = ranked <= alpha / (m - np.arange(m))
        k = m if passed.all() else int(np.argmin(passed))  # first failure stops the step-down
        out[order[:k]] = True
    else:
        below = np.flatnonzero(ranked <= alpha * (np.arange(1, m + 1) / m))
        if below.size:
            out[order[: below[-1] + 1]] = True
    return out


def _subject_thetas(bank) -> dict[str, float]:
    subjects = bank.subjects
    if subjects is None:
        return {}
    return {str(s): float(t) for s, t in zip(subjects["subject"].values, subjects["theta"].values)}


# ----------------------------------------------------------------------------- linking a bank


def link_bank(bank, linking: LinkingResult, *, reference_version: int):
    """``bank`` moved onto the reference scale: items by ``linking``, subjects' theta and SDs too."""
    tree = bank.to_datatree()
    p = linking.transform_params(bank.params)
    items = tree["items"].to_dataset()
    items["a"] = items["a"].copy(data=np.array(p.a))
    items["b"] = items["b"].copy(data=np.array(p.b))
    _link_uncertainty(items, linking.A, linking.B)
    tree["items"] = items
    if "subjects" in tree.children:
        subjects = tree["subjects"].to_dataset()
        for name in ("theta", "theta_lower", "theta_upper", "theta_mean"):
            if name in subjects:
                subjects[name] = subjects[name].copy(data=linking.A * subjects[name].values + linking.B)
        for name in ("theta_sd",):
            if name in subjects:
                subjects[name] = subjects[name].copy(data=linking.A * subjects[name].values)
        tree["subjects"] = subjects
    scale = json.loads(tree.attrs["scale"])
    scale["linking"] = {
        **linking.to_dict(),
        "reference_version": int(reference_version),
        "applied_to": "items a, b, a_sd, b_sd, ab_cov; subjects theta, theta_sd, theta_lower/upper; "
        "tau and /posterior are left on the fitted scale",
    }
    tree.attrs["scale"] = json.dumps(scale, sort_keys=True)
    from catengine.itembank import ItemBank

    return ItemBank(tree, source=bank.source)


def _link_uncertainty(items, A: float, B: float) -> None:
    """a* = a / A, b* = b - a B / A (linear in (a, b)), so Cov* = M Cov M' with M = [[1/A, 0], [-B/A, 1]]
    (the linking constants are treated as known)."""
    names = set(items.data_vars)
    if "b_sd" not in names:
        return
    if "a_sd" not in names:
        return  # b alone (e.g. PSN: a at its MAP): b* = b - a B / A with a fixed keeps b's SD
    va, vb = items["a_sd"].values ** 2, items["b_sd"].values ** 2
    c = items["ab_cov"].values if "ab_cov" in names else np.zeros_like(va)
    r = B / A
    va2 = va / A**2
    c2 = c / A - r * va / A
    vb2 = vb - 2 * r * c + r * r * va
    items["a_sd"] = items["a_sd"].copy(data=np.sqrt(va2))
    items["b_sd"] = items["b_sd"].copy(data=np.sqrt(np.maximum(vb2, 0.0)))
    if "ab_cov" in names:
        bound = np.sqrt(va2 * np.maximum(vb2, 0.0))
        items["ab_cov"] = items["ab_cov"].copy(data=np.clip(c2, -bound, bound))


# ----------------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class RecalibrationConfig:
    """One recalibration, as a TOML file describes it (see :meth:`from_toml`).

    ``responses``: new response files (long .csv/.jsonl, .nc, or wide accuracy CSVs with
    ``wide = true``; ``cot`` lists matching wide CoT files). ``mode``: "merge" (stored + new) or
    "replace" (new only). ``method``: default the bank's own; ``settings`` override its recorded
    calibration settings. ``linking``: "stocking-lord" (default) or "mean-sigma".
    ``interval_check`` (default true): the new version runs the cross-fitted interval and score
    check like every default fit; ``false`` skips it (faster; the bank records that it was skipped,
    and sessions then use the model's own intervals). A later run with the check on over the same
    inputs writes the checked version. ``same_llm_pattern``: a regular expression; new subjects whose
    ids are equal once it is removed are runs of one LLM (``ResponseData.grouped_by``), held out
    together by the checks (the stored responses keep the groups they were calibrated with).
    """

    bank: Path
    responses: tuple[Path, ...]
    cot: tuple[Path, ...] = ()
    wide: bool = False
    items_as_rows: bool = False  # the new response matrices hold one row per item (transposed on reading)
    mode: str = "merge"
    method: str | None = None
    settings: dict = field(default_factory=dict)
    linking: str = "stocking-lord"
    min_common: int = 5
    on_conflict: str = "error"
    drift_threshold: float = 0.5
    theta_threshold: float = 0.5
    drift_alpha: float = DRIFT_ALPHA
    drift_correction: str = "holm"
    drift_variance: str = "independent"  # or "nested" (Hausman: C_old - C_new, merge mode only)
    seed: int = 0
    interval_check: bool = True  # False: skip the cross-fitted interval and score check (the bank says so)
    same_llm_pattern: str | None = None  # ResponseData.grouped_by on the new responses (runs of one LLM)

    def __post_init__(self):
        object.__setattr__(self, "bank", Path(self.bank))
        object.__setattr__(self, "responses", tuple(Path(p) for p in self.responses))
        object.__setattr__(self, "cot", tuple(Path(p) for p in self.cot))
        if not self.responses:
            raise ValueError("a recalibration needs at least one new response file")
        if self.cot and len(self.cot) != len(self.responses):
            raise ValueError(f"{len(self.cot)} CoT file(s) given for {len(self.responses)} response file(s); give one per file or none")
        if self.mode not in ("merge", "replace"):
            raise ValueError(f"mode must be 'merge' or 'replace', got {self.mode!r}")
        if self.linking not in LINKING_METHODS:
            raise ValueError(f"linking must be one of {', '.join(LINKING_METHODS)}, got {self.linking!r}")
        if self.method is not None:
            get_method(self.method)  # raises ValueError naming the allowed methods
        if self.drift_correction not in DRIFT_CORRECTIONS:
            raise ValueError(f"drift_correction must be one of {', '.join(DRIFT_CORRECTIONS)}, got {self.drift_correction!r}")
        if isinstance(self.drift_alpha, bool) or not isinstance(self.drift_alpha, (int, float)) or not 0 < self.drift_alpha < 1:
            raise ValueError(f"drift_alpha must be a number in (0, 1), got {self.drift_alpha!r}")
        if self.drift_variance not in ("independent", "nested"):
            raise ValueError(f"drift_variance must be 'independent' or 'nested', got {self.drift_variance!r}")
        if self.on_conflict not in ("error", "new"):
            raise ValueError(f"on_conflict must be 'error' or 'new', got {self.on_conflict!r}")
        for name in ("interval_check", "wide", "items_as_rows"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        for name in ("drift_threshold", "theta_threshold"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (np.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a number >= 0, got {value!r}")
        for name, low in (("min_common", 1), ("seed", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        if self.method is not None and not isinstance(self.method, str):
            raise ValueError(f"method must be a method name, got {self.method!r}")
        if not isinstance(self.settings, dict):
            raise ValueError(f"settings must be a table of calibrator settings, got {self.settings!r}")
        if self.same_llm_pattern is not None and not isinstance(self.same_llm_pattern, str):
            raise ValueError(f"same_llm_pattern must be a regular expression (a string), got {self.same_llm_pattern!r}")

    @classmethod
    def from_toml(cls, path, **overrides) -> "RecalibrationConfig":
        """Read a ``[recalibration]`` table (relative paths are relative to the TOML file)."""
        path = Path(path)
        try:
            with open(path, "rb") as fh:
                doc = tomllib.load(fh)
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"{path}: not valid TOML ({exc})") from None
        table = doc.get("recalibration")
        if not isinstance(table, dict):
            raise ValueError(f"{path}: expected a [recalibration] table")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(table) - known)
        if unknown:
            raise ValueError(f"{path}: unknown key(s) {unknown} in [recalibration]; allowed: {sorted(known)}")
        given = {k: v for k, v in overrides.items() if v is not None}
        values = {**table, **given}
        base = path.parent  # paths written in the TOML file are relative to it
        if "bank" in table and "bank" not in given:
            if not isinstance(table["bank"], str) or not table["bank"].strip():
                raise ValueError(f"{path}: [recalibration] bank must be the path of a bank directory, got {table['bank']!r}")
            values["bank"] = base / table["bank"]
        for key in ("responses", "cot"):
            if key in table and key not in given:
                raw = table[key]
                paths = [raw] if isinstance(raw, str) else raw
                if not isinstance(paths, list) or not all(isinstance(p, str) and p.strip() for p in paths):
                    raise ValueError(f"{path}: [recalibration] {key} must be a path or a list of paths, got {raw!r}")
                values[key] = [base / p for p in paths]
        try:
            return cls(**values)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{path}: [recalibration] {exc}") from None


@dataclass(frozen=True)
class RecalibrationResult:
    status: str  # "written" | "unchanged"
    message: str
    path: Path | None = None
    version: int | None = None
    linking: LinkingResult | None = None
    diff: BankDiff | None = None


def _read_new_responses(config: RecalibrationConfig) -> ResponseData:
    from calibration.io import load_responses

    parts = [
        load_responses(path, cot=(config.cot[k] if config.cot else None), wide=config.wide,
                       items_as_rows=config.items_as_rows)
        for k, path in enumerate(config.responses)
    ]
    data = parts[0]
    for part in parts[1:]:
        data = merge_responses(data, part, on_conflict=config.on_conflict)
    return data.grouped_by(config.same_llm_pattern) if config.same_llm_pattern else data


SKIPPED_ON_REQUEST = "skipped on request"


def recalibration_key(responses: ResponseData, method: str, settings: dict, config: RecalibrationConfig, parent: int) -> str:
    """Identity of a recalibration: same key = same inputs = nothing new to write."""
    payload = {
        "responses_sha256": responses.sha256(),
        "method": method,
        "settings": settings,
        "linking": config.linking,
        "min_common": config.min_common,
        "seed": config.seed,
        "parent_version": parent,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def recalibrate(config: RecalibrationConfig, *, progress: bool = False) -> RecalibrationResult:
    """Run one recalibration (see the module docstring). Writes at most one new bank version.

    ``progress``: a bar over the stages (read, merge, fit, link, write) plus the refit's own bar.
    """
    from tqdm.auto import tqdm

    with tqdm(total=len(_STAGES), desc="recalibrate", unit="stage", disable=not progress, leave=False) as bar:
        return _recalibrate(config, progress, bar)


_STAGES = ("read", "merge", "fit", "link", "write")


def _stage(bar, name: str) -> None:
    bar.set_postfix_str(name, refresh=False)
    bar.update(1)


def recalibration_lock(directory: Path, bank_id: str) -> Path:
    """The lock file that makes a bank directory single-writer for a recalibration."""
    return Path(directory) / f".{bank_id}.recalibrate.lock"


def _recalibrate(config: RecalibrationConfig, progress: bool, bar) -> RecalibrationResult:
    from catengine import open_item_bank
    from catengine.atomic import exclusive_lock

    found = open_item_bank(config.bank)
    directory = Path(found.source).parent
    # read-merge-fit-write is single-writer: a second recalibration of this directory is refused
    # at once (nothing read, nothing written) instead of writing a sibling of the same parent
    with exclusive_lock(recalibration_lock(directory, found.bank_id), what=f"bank directory {directory}",
                        advice="one recalibration at a time; nothing was written: run this recalibration again "
                               "once that one has finished (its version then becomes the parent of yours)"):
        return _recalibrate_locked(config, progress, bar, directory)


def _latest_version(directory: Path) -> int:
    from catengine.itembank import list_versions

    return max(list_versions(directory), default=0)


def _recalibrate_locked(config: RecalibrationConfig, progress: bool, bar, directory: Path) -> RecalibrationResult:
    from catengine import open_item_bank, write_item_bank

    old = open_item_bank(config.bank)  # read again under the lock: the latest version now
    latest = _latest_version(directory)
    if old.version != latest:
        raise ValueError(
            f"{old.source} is v{old.version} but {directory} holds v{latest}: a recalibration starts from the latest "
            "version (pass the bank directory), otherwise the versions after it would drop out of the line of descent"
        )
    old_method = old.attrs["calibration_method"]
    try:
        method = get_method(config.method or old_method).name
    except ValueError:
        raise ValueError(
            f"bank {old.bank_id!r} v{old.version} was made by {old_method or 'no calibration'!r}; "
            f"choose a method to recalibrate it with (--method {'/'.join(all_method_names())})"
        ) from None
    same_method = old_method in get_method(method).names
    new_data = _read_new_responses(config)
    _stage(bar, "read")
    if config.mode == "merge":
        if old.responses is None:
            raise ValueError(
                f"bank {old.bank_id!r} v{old.version} does not keep its calibration responses, so there is nothing "
                "to merge with; recalibrate with mode = 'replace' (--replace) to fit the new data alone"
            )
        data = merge_responses(ResponseData.from_dataset(old.responses, source=f"{old.source}:/responses"), new_data,
                               on_conflict=config.on_conflict)
    else:
        data = new_data
    _stage(bar, "merge")
    settings = dict(old.calibration_settings) if same_method else {}
    settings.update(config.settings)
    key = recalibration_key(data, method, config.settings, config, old.version)
    check_pending = config.interval_check and str(old.attrs.get("interval_calibration_skipped", "")).startswith(SKIPPED_ON_REQUEST)
    if not check_pending and (old.attrs.get("recalibration_key") == key or (
        old.attrs.get("responses_sha256") == data.sha256() and not config.settings and same_method
    )):
        return RecalibrationResult(
            "unchanged",
            f"no new version: {old.source} (v{old.version}) was already calibrated from these inputs",
            path=Path(old.source),
            version=old.version,
        )
    calibrator = make_calibrator(method, settings, rng=config.seed, progress=progress).fit(data)
    fitted = calibrator.to_item_bank(old.bank_id, interval_check="auto" if config.interval_check else False,
                                     **calibrator.export_options(settings))
    if not config.interval_check:
        fitted = fitted.replace_attrs(interval_calibration_skipped=f"{SKIPPED_ON_REQUEST} (recalibration with "
                                      "interval_check = false): sessions use the model's own intervals")
    _stage(bar, "fit")
    linking = link(old, fitted, method=config.linking, min_common=config.min_common)
    linked = link_bank(fitted, linking, reference_version=old.version)
    diff = diff_banks(old, linked, drift_threshold=config.drift_threshold, theta_threshold=config.theta_threshold,
                      drift_alpha=config.drift_alpha, drift_correction=config.drift_correction,
                      nested=config.drift_variance == "nested" and config.mode == "merge")
    change_log = {
        "reference_version": old.version,
        "mode": config.mode,
        "new_response_files": [str(p) for p in config.responses],
        "n_subjects": data.n_subjects,
        "n_items": data.n_items,
        "linking": linking.to_dict(),
        "diff": diff.to_dict(),
    }
    bank = linked.with_group("responses", data.to_dataset()).replace_attrs(
        recalibration_key=key,
        change_log=json.dumps(change_log, sort_keys=True),
    )
    _stage(bar, "link")
    latest = _latest_version(directory)
    if latest != old.version:  # a writer that does not take the lock (e.g. `calibration fit --out` here)
        raise ValueError(
            f"{directory} gained v{latest} while this recalibration ran from v{old.version}; nothing was written "
            f"(it would have been a second child of v{old.version}, dropping v{latest} from the line of descent): "
            "run this recalibration again"
        )
    path = write_item_bank(bank, directory, parent=old.version)
    _stage(bar, "write")
    written = open_item_bank(path)
    diff = diff_banks(old, written, drift_threshold=config.drift_threshold, theta_threshold=config.theta_threshold,
                      drift_alpha=config.drift_alpha, drift_correction=config.drift_correction,
                      nested=config.drift_variance == "nested" and config.mode == "merge")
    return RecalibrationResult(
        "written",
        f"wrote {path} (v{written.version}, parent v{written.parent_version}); linked by {linking.method}: "
        f"theta_v{old.version} = {linking.A:.4f} * theta_new + {linking.B:+.4f} over {linking.n_common} common items",
        path=path,
        version=written.version,
        linking=linking,
        diff=diff,
    )


def bank_lineage(directory) -> list[dict]:
    """One row per stored version: version, parent, created/written times, method, sizes, linking."""
    from catengine.itembank import list_versions, open_item_bank

    rows = []
    for version, path in list_versions(directory).items():
        bank = open_item_bank(path)
        attrs = bank.attrs
        scale = bank.scale
        rows.append(
            {
                "version": version,
                "parent": bank.parent_version,
                # a recalibration carries its change log; anything else written here is a fresh fit
                "origin": "recalibration" if "change_log" in attrs else ("fit" if bank.parent_version == 0 else "copy"),
                "written_at": attrs.get("written_at", attrs["created_at"]),
                "method": attrs["calibration_method"] or "-",
                "response_model": bank.response_model,
                "n_items": bank.n_items,
                "n_subjects": attrs["n_subjects"],
                "responses_sha256": attrs["responses_sha256"][:12] or "-",
                "linking": (f"{scale['linking']['method']} A={scale['linking']['A']:.4f} B={scale['linking']['B']:+.4f}"
                            if "linking" in scale else "-"),
                "path": str(path),
            }
        )
    return rows
