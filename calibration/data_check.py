"""A check of the response matrix for misaligned or corrupted rows, run at calibration.

A matrix assembled from harness logs can pair an LLM's answers with the wrong items: a batch of
reports concatenated out of order, a block of rows shifted by one, a log read under another
benchmark's item order. Such damage does not show in accuracies (an LLM's mean is unchanged), and a
fit absorbs much of it (thousands of item parameters bend to the swapped answers). What it cannot
hide is that, on the damaged block, the LLM **stops agreeing** with the other LLMs: its answers no
longer go with the items' difficulty as the others see it. This module measures that, item by item
and in item order, with a reference distribution that is known. See ``docs/data_check.md``.

**Agreement.** For row i, x_ij is the mean answer of the *other* LLMs on item j (leaving out every
run of i's LLM, ``ResponseData.subject_groups`` or the run suffix of its id) and
c_ij = (y_ij - mean_i y)(x_ij - mean_i x), over i's observed items. mean(c_i) is the covariance of
i's answers with the others'; r_i, their correlation, is i's **agreement**; r_i sqrt(n_i - 1) is
N(0, 1) when i's answers are unrelated to the others' (a permutation argument).

**Block scan.** The standardised partial sums of c_ij - mean(c_i),
B_i(k) = sum_{j<k} (c_ij - mean c_i) / (sd(c_i) sqrt(n_i)), form a Brownian bridge when the item
order carries no information (every contiguous block is then a random subset of the items). A
block [a, b) on which i stops agreeing pulls the bridge down over the block; the statistic is its
largest **drawdown** D_i = max_{a<b} B_i(a) - B_i(b), and the block is where it is reached (a
change-point pair, at item resolution, without windows). Under the null D_i is the drawdown of a
Brownian bridge, whose tail is half the tail of Kuiper's range statistic:
p_i = 1 - sqrt(1 - Q_K(D_i)) ~ Q_K(D_i) / 2 with Q_K(v) = 2 sum_k (4k^2 v^2 - 1) exp(-2 k^2 v^2)
(:func:`drawdown_p_value`). Rows with few correct (or few wrong) answers give a jump process
whose drawdown is smaller than the bridge's, so the reference is conservative for near-zero and
near-perfect LLMs and for short benchmarks (measured by permuting real rows,
``docs/data_check.md``).

**Flags.** A row is flagged when p_i < alpha / m (Bonferroni over the m rows with a statistic,
family-wise ``alpha`` = 1% by default), and when its agreement is significantly *negative*
(r_i sqrt(n_i - 1) < -z at the same level: 0/1 coded the wrong way round). Flagged rows whose
blocks overlap form a flagged **item block**, located by the drawdown of their summed bridges; on
it the LLMs are split in two groups (the sign of the leading eigenvector of the change in their
pairwise correlations, inside the block minus outside, among the rows the scan can assess), and
the correlation of the two groups' item p-values is reported inside and outside the block and
window by window. Each window of the block is then matched against every offset of the other
group's p-values; offsets that restore the agreement, merged and with their boundaries found item
by item, say how the rows were displaced (a shift, two swapped blocks).

**Power.** A row whose block of a fraction f of the items lost all agreement would move its
statistic by about sqrt(n) f (1 - f) kappa_i, kappa_i = mean(c_i) / sd(c_i). The smallest f that
reaches the threshold is the row's ``min_detectable_fraction``; a row that would not be flagged
even with half its items misaligned is *not assessable* (an LLM near zero or near perfect, or one
that agrees with nobody), and a matrix on which no row is assessable has too few items for the
scan (the summary says how many it would need).

**Person fit.** Given fitted item parameters and traits, lz (the standardised log-likelihood of
each row, ``catengine.estimation.person_fit``) and the mean log-likelihood per answer are reported.
They do not flag: fitted in-sample, the item parameters absorb a misaligned block, and real LLMs
misfit a one-trait model for reasons of their own (measured in ``docs/data_check.md``).

Everything here is vectorised numpy on the (N, J) matrix; a flag never stops a calibration.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "DEFAULT_ALPHA",
    "LZ_NOTE",
    "DataCheck",
    "FlaggedBlock",
    "check_response_data",
    "drawdown_p_value",
    "drawdown_threshold",
]

#: family-wise false-alarm level of the flags (Bonferroni over the rows)
DEFAULT_ALPHA = 0.01
#: person fit below this lz is listed (as a note, never a flag)
LZ_NOTE = -3.0
#: flagged blocks whose rows overlap by at least this share of the shorter block are merged
_OVERLAP = 0.5
#: fewest items outside a block for the groups to be found from the change in pairwise correlations
_MIN_OUTSIDE = 20
#: number of windows of the between-group correlation trace of a flagged block
_TRACE_WINDOWS = 10
_RECORD_VERSION = 1


# ----------------------------------------------------------------------------- the reference


def drawdown_p_value(v) -> np.ndarray:
    """P(largest drawdown of a standard Brownian bridge > v), from Kuiper's range distribution.

    The drawdown is ``max_{s<t} B(s) - B(t)``; the range ``max B - min B`` is the larger of the
    drawdown and the draw-up (its mirror image, equal in law), and has Kuiper's tail
    Q_K(v) = 2 sum_{k>=1} (4 k^2 v^2 - 1) exp(-2 k^2 v^2). Treating the two as independent gives
    1 - sqrt(1 - Q_K(v)): Q_K(v) / 2 in the tail, where the range is a fall or a rise but not
    both (exact there), and within 10% of 30,000 simulated bridges for every v >= 1.
    """
    v = np.asarray(v, dtype=np.float64)
    k = np.arange(1, 41, dtype=np.float64).reshape((-1,) + (1,) * v.ndim)
    v2 = np.where(np.isfinite(v), v, 0.0) ** 2
    kuiper = np.clip(2.0 * np.sum((4.0 * k**2 * v2 - 1.0) * np.exp(-2.0 * k**2 * v2), axis=0), 0.0, 1.0)
    p = np.where(v < 0.5, 1.0, -np.expm1(0.5 * np.log1p(-np.minimum(kuiper, 1.0 - 1e-16))))
    return np.where(np.isfinite(v), p, np.nan)


def drawdown_threshold(p: float) -> float:
    """The drawdown v with :func:`drawdown_p_value` (v) = ``p`` (bisection; ``0 < p < 0.5``)."""
    if not 0.0 < p < 0.5:
        raise ValueError(f"p must lie in (0, 0.5), got {p!r}")
    lo, hi = 0.5, 10.0
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        if float(drawdown_p_value(mid)) > p:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def _normal_quantile_upper(p: float) -> float:
    """z with P(N(0,1) > z) = p."""
    from scipy.special import ndtri

    return float(-ndtri(p))


# ----------------------------------------------------------------------------- result


@dataclass(frozen=True)
class FlaggedBlock:
    """A block of items [start, stop) (0-based positions in the matrix's item order) on which the
    rows ``llms`` stop agreeing with the others.

    ``groups``: the two groups the LLMs split into on the block (the smaller first);
    ``between_corr_in`` / ``between_corr_out``: the correlation of the two groups' item p-values
    inside / outside the block; ``trace``: (start, stop, correlation) over windows of the items;
    ``realignment``: segments (start, stop, offset, correlation) of the block on which group A's
    answers on item j go with group B's on item j + offset, restoring the groups' agreement (a shift
    of the rows is one segment, two swapped blocks are two with opposite offsets); empty when no
    offset restores it.
    """

    start: int
    stop: int
    first_item: str
    last_item: str
    llms: tuple[str, ...]
    groups: tuple[tuple[str, ...], tuple[str, ...]]
    between_corr_in: float
    between_corr_out: float
    trace: tuple[tuple[int, int, float], ...]
    statistic: float
    realignment: tuple[tuple[int, int, int, float], ...] = ()

    def to_dict(self) -> dict:
        return {
            "start": self.start, "stop": self.stop, "first_item": self.first_item, "last_item": self.last_item,
            "llms": list(self.llms), "groups": [list(g) for g in self.groups],
            "between_corr_in": _json_float(self.between_corr_in),
            "between_corr_out": _json_float(self.between_corr_out),
            "trace": [[a, b, _json_float(c)] for a, b, c in self.trace],
            "statistic": _json_float(self.statistic),
            "realignment": [[a, b, k, _json_float(c)] for a, b, k, c in self.realignment],
        }


@dataclass(frozen=True)
class DataCheck:
    """What :func:`check_response_data` found: per-row statistics (arrays of length N, in the
    order of ``subject_ids``), the flagged rows and item blocks, the thresholds and notes.

    Per row: ``agreement`` (r with the other LLMs' mean answers), ``agreement_z``
    (r sqrt(n - 1)), ``statistic`` (the block scan's drawdown D), ``p_value``, ``block_start`` /
    ``block_stop`` (the block of the drawdown, -1 when none), ``r_in`` / ``r_out`` (agreement
    inside / outside that block), ``min_detectable_fraction`` (NaN when not assessable),
    ``flagged`` (block scan), ``anti_agreement``; with fitted items, ``lz`` and
    ``loglik_per_answer`` (else None).
    """

    subject_ids: tuple[str, ...]
    n_items: int
    n_llm_groups: int
    agreement: np.ndarray
    agreement_z: np.ndarray
    statistic: np.ndarray
    p_value: np.ndarray
    block_start: np.ndarray
    block_stop: np.ndarray
    r_in: np.ndarray
    r_out: np.ndarray
    min_detectable_fraction: np.ndarray
    flagged: np.ndarray
    anti_agreement: np.ndarray
    blocks: tuple[FlaggedBlock, ...]
    thresholds: dict
    lz: np.ndarray | None = None
    loglik_per_answer: np.ndarray | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    # ------------------------------------------------------------------ views
    @property
    def n_subjects(self) -> int:
        return len(self.subject_ids)

    @property
    def tested(self) -> np.ndarray:
        """Rows with a block-scan statistic (some spread in their answers and in the reference)."""
        return np.isfinite(self.statistic)

    @property
    def assessable(self) -> np.ndarray:
        """Rows on which half the items misaligned would be flagged."""
        return np.isfinite(self.min_detectable_fraction)

    @property
    def too_few_items(self) -> bool:
        """True when no row is assessable: the block scan cannot see a misaligned half of any row."""
        return not bool(self.assessable.any())

    @property
    def flagged_llms(self) -> tuple[str, ...]:
        """Rows flagged by the block scan or for anti-agreement, in row order."""
        rows = np.flatnonzero(self.flagged | self.anti_agreement)
        return tuple(self.subject_ids[i] for i in rows)

    @property
    def is_flagged(self) -> bool:
        return bool(self.flagged.any() or self.anti_agreement.any())

    @property
    def misfit_llms(self) -> tuple[str, ...]:
        """Rows whose lz lies below :data:`LZ_NOTE` (reported, not flagged)."""
        if self.lz is None:
            return ()
        return tuple(self.subject_ids[i] for i in np.flatnonzero(np.nan_to_num(self.lz, nan=0.0) < LZ_NOTE))

    # ------------------------------------------------------------------ output
    def warnings(self) -> list[str]:
        """One line per flag (empty when nothing is flagged)."""
        out = []
        for blk in self.blocks:
            out.append(f"{len(blk.llms)} LLM(s) stop agreeing with the others on items {blk.start}..{blk.stop - 1} "
                       f"({blk.first_item!r}..{blk.last_item!r}): misaligned or corrupted responses likely")
        anti = [self.subject_ids[i] for i in np.flatnonzero(self.anti_agreement)]
        if anti:
            out.append(f"{len(anti)} LLM(s) answer against the others (agreement significantly negative): "
                       f"{_names(anti)}; are their answers coded 1 = wrong?")
        return out

    def summary(self) -> str:
        """A paragraph for people: the verdict, each flagged block with its groups, then notes."""
        t = self.thresholds
        head = f"data check ({_shape_words(self)}): "
        tested = self.tested
        lines = []
        if self.is_flagged:
            head += "FLAGGED: " + "; ".join(self.warnings())
        elif self.too_few_items:
            head += "no flag; " + _too_few_words(self)
        else:
            largest = float(np.nanmax(self.statistic)) if tested.any() else float("nan")
            frac = float(np.nanmedian(self.min_detectable_fraction))
            head += (f"no misaligned block found (block scan: largest drawdown {largest:.2f}, threshold "
                     f"{t['scan_threshold']:.2f} at family-wise {t['alpha']:g}; {int(self.assessable.sum())} of "
                     f"{self.n_subjects} rows assessable, a typical one flagged once about {100 * frac:.0f}% of its "
                     "items are misaligned in one block)")
        lines.append(head)
        for blk in self.blocks:
            rows = [self.subject_ids.index(s) for s in blk.llms]
            lines.append(f"  items {blk.start}..{blk.stop - 1}: {len(blk.llms)} flagged row(s), drawdown "
                         f"{_range(self.statistic[rows])} (threshold {t['scan_threshold']:.2f}); their agreement "
                         f"falls from {np.nanmedian(self.r_out[rows]):.2f} outside their blocks to "
                         f"{np.nanmedian(self.r_in[rows]):.2f} inside (medians)")
            small, large = blk.groups
            lines.append(f"  on these items the LLMs split into two groups whose item p-values correlate "
                         f"{blk.between_corr_in:.2f} (outside the block: {blk.between_corr_out:.2f}):")
            lines.append(f"    group A ({len(small)}): {_names(small, 12)}")
            lines.append(f"    group B ({len(large)}): {_names(large, 12)}")
            lines.append("    by window: " + ", ".join(f"{a}-{b - 1}: {c:.2f}" for a, b, c in blk.trace))
            for start, stop, offset, corr in blk.realignment:
                lines.append(f"    group A's answers on items {start}..{stop - 1} go with group B's on items "
                             f"{start + offset}..{stop - 1 + offset} (offset {offset:+d}; p-value correlation "
                             f"{corr:.2f})")
            lines.append("    the data show that the groups disagree on these items, not which group's rows are "
                         "misaligned: check both against the item ids in their logs")
        lines.extend(f"  {note}" for note in self.notes)
        return "\n".join(lines)

    def to_record(self) -> dict:
        """The compact JSON-ready record a bank stores (attribute ``data_check``)."""
        t = self.thresholds
        tested = self.tested
        rec = {
            "version": _RECORD_VERSION,
            "n_subjects": self.n_subjects,
            "n_llm_groups": self.n_llm_groups,
            "n_items": self.n_items,
            "alpha": t["alpha"],
            "scan_threshold": round(t["scan_threshold"], 4),
            "agreement_z_threshold": round(t["agreement_z_threshold"], 4),
            "n_tested": int(tested.sum()),
            "n_assessable": int(self.assessable.sum()),
            "too_few_items": self.too_few_items,
            "max_statistic": _json_float(np.nanmax(self.statistic)) if tested.any() else None,
            "median_min_detectable_fraction": (_json_float(np.nanmedian(self.min_detectable_fraction))
                                               if self.assessable.any() else None),
            "flagged": list(self.flagged_llms),
            "anti_agreement": [self.subject_ids[i] for i in np.flatnonzero(self.anti_agreement)],
            "blocks": [b.to_dict() for b in self.blocks],
            "n_not_assessable": int((~self.assessable).sum()),
        }
        if self.lz is not None:
            finite = np.isfinite(self.lz)
            rec["person_fit"] = {
                "lz_note": LZ_NOTE,
                "below": list(self.misfit_llms),
                "min_lz": _json_float(np.min(self.lz[finite])) if finite.any() else None,
                "median_lz": _json_float(np.median(self.lz[finite])) if finite.any() else None,
                "mean_loglik_per_answer": _json_float(np.nanmean(self.loglik_per_answer)),
            }
        return rec

    def to_json(self) -> str:
        return json.dumps(self.to_record(), sort_keys=True)

    def __repr__(self) -> str:
        return (f"DataCheck({_shape_words(self)}, flagged={list(self.flagged_llms)}, "
                f"blocks={[(b.start, b.stop) for b in self.blocks]})")


def _json_float(x):
    x = float(x)
    return round(x, 4) if math.isfinite(x) else None


def _names(names, limit: int = 8) -> str:
    names = list(names)
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _range(values) -> str:
    values = np.asarray(values, dtype=np.float64)
    lo, hi = float(np.nanmin(values)), float(np.nanmax(values))
    return f"{lo:.2f}" if abs(hi - lo) < 0.005 else f"{lo:.2f}-{hi:.2f}"


def _shape_words(check: DataCheck) -> str:
    if check.n_llm_groups < check.n_subjects:
        llms = "1 LLM" if check.n_llm_groups == 1 else f"{check.n_llm_groups} LLMs"
        return f"{check.n_subjects} runs of {llms} x {check.n_items} items"
    return f"{check.n_subjects} LLMs x {check.n_items} items"


def _too_few_words(check: DataCheck) -> str:
    if not check.tested.any():
        return ("the block scan could check no row: each has the same answer on every item, fewer than 4 answers, "
                "or no other LLM answering its items")
    need = check.thresholds.get("items_needed")
    more = f"; LLMs agreeing as these do would need about {need} items" if need else ""
    return (f"the block scan has too few items ({check.n_items}) for these LLMs: no row would be flagged even with "
            f"half its items misaligned (threshold {check.thresholds['scan_threshold']:.2f}{more})")


# ----------------------------------------------------------------------------- the check


def check_response_data(data, *, params=None, theta=None, groups=None, alpha: float = DEFAULT_ALPHA) -> DataCheck:
    """Check a response matrix for misaligned or corrupted rows (see the module docstring).

    ``data``: a :class:`calibration.ResponseData` (runs of one LLM are found from its
    ``subject_groups`` or the run suffix of its ids) or an (N, J) array of 0/1 with -1 or NaN for
    missing answers (then ``groups``, an (N,) group index per row, says which rows are runs of one
    LLM; default every row its own LLM). ``params`` (``ItemParams``) and ``theta`` ((N,) traits on
    their scale, e.g. a fitted calibrator's ``item_params_`` and ``theta_``) add person fit.
    ``alpha``: the family-wise false-alarm level of the flags.
    """
    if not (isinstance(alpha, (float, int)) and 0.0 < float(alpha) < 0.5):
        raise ValueError(f"alpha must lie in (0, 0.5), got {alpha!r}")
    correct, subject_ids, item_ids, groups = _as_arrays(data, groups)
    n_rows, n_items = correct.shape
    obs = correct >= 0
    y = np.where(obs, correct, 0).astype(np.float64)
    x = _reference(y, obs, groups)

    w = obs & np.isfinite(x)
    n = w.sum(axis=1).astype(np.float64)
    n_safe = np.maximum(n, 1.0)
    xw = np.where(w, x, 0.0)
    yw = np.where(w, y, 0.0)
    dy = np.where(w, yw - (yw.sum(axis=1) / n_safe)[:, None], 0.0)
    dx = np.where(w, xw - (xw.sum(axis=1) / n_safe)[:, None], 0.0)
    syy, sxx, sxy = (dy * dy).sum(axis=1), (dx * dx).sum(axis=1), (dy * dx).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        agreement = np.where((syy > 0) & (sxx > 0), sxy / np.sqrt(syy * sxx), np.nan)
    agreement_z = agreement * np.sqrt(np.maximum(n - 1.0, 0.0))

    c = dy * dx
    cbar = c.sum(axis=1) / n_safe
    sc = np.sqrt(np.where(w, (c - cbar[:, None]) ** 2, 0.0).sum(axis=1) / n_safe)
    ok = (sc > 0) & (n >= 4) & np.isfinite(agreement)
    scale = np.where(ok, sc * np.sqrt(n_safe), 1.0)
    bridge = np.zeros((n_rows, n_items + 1))
    np.cumsum(np.where(w, c - cbar[:, None], 0.0), axis=1, out=bridge[:, 1:])
    bridge /= scale[:, None]
    start, stop, statistic = _drawdown(bridge)
    statistic = np.where(ok, statistic, np.nan)
    start, stop = np.where(ok, start, -1), np.where(ok, stop, -1)
    p_value = drawdown_p_value(statistic)

    m = max(int(ok.sum()), 1)
    p_crit = float(alpha) / m
    v_star = drawdown_threshold(min(p_crit, 0.49))
    z_star = _normal_quantile_upper(p_crit)
    flagged = ok & (p_value < p_crit)
    anti = ok & (agreement_z < -z_star)

    with np.errstate(invalid="ignore", divide="ignore"):
        kappa = np.where(ok, cbar / np.where(sc > 0, sc, 1.0), np.nan)
        q = v_star / (np.sqrt(n_safe) * kappa)
    assessable = ok & (kappa > 0) & (q <= 0.25)
    min_frac = np.where(assessable, 0.5 * (1.0 - np.sqrt(np.clip(1.0 - 4.0 * np.where(assessable, q, 0.0), 0.0, 1.0))),
                        np.nan)
    r_in, r_out = _block_agreement(dy, dx, w, start, stop)

    thresholds = {"alpha": float(alpha), "p_threshold": p_crit, "scan_threshold": v_star,
                  "agreement_z_threshold": -z_star, "n_tested": int(ok.sum()), "lz_note": LZ_NOTE}
    if not assessable.any():
        best = float(np.nanmax(np.where(ok & (kappa > 0), kappa, np.nan))) if (ok & (kappa > 0)).any() else float("nan")
        thresholds["items_needed"] = int(math.ceil((4.0 * v_star / best) ** 2)) if math.isfinite(best) else None

    blocks = _flagged_blocks(bridge, flagged, y, obs, dy, dx, w, assessable, subject_ids, item_ids)

    lz = loglik = None
    if params is not None and theta is not None:
        lz, loglik = _person_fit(params, theta, y, obs)

    n_groups = int(np.unique(groups).size)
    notes = _notes(subject_ids, ok, assessable, agreement, agreement_z, flagged, lz, n_items)
    return DataCheck(
        subject_ids=subject_ids, n_items=n_items, n_llm_groups=n_groups, agreement=agreement, agreement_z=agreement_z,
        statistic=statistic, p_value=p_value, block_start=start, block_stop=stop, r_in=r_in, r_out=r_out,
        min_detectable_fraction=min_frac, flagged=flagged, anti_agreement=anti, blocks=blocks,
        thresholds=thresholds, lz=lz, loglik_per_answer=loglik, notes=tuple(notes),
    )


def _as_arrays(data, groups):
    """(correct int8 (N, J) with -1 missing, subject ids, item ids, (N,) group index)."""
    from calibration.data import ResponseData

    if isinstance(data, ResponseData):
        if groups is None:
            from calibration.heldout import with_llm_groups

            grouped, _ = with_llm_groups(data)
            groups = grouped.llm_groups
        return (np.asarray(data.correct, dtype=np.int8), tuple(data.subject_ids), tuple(data.item_ids),
                np.asarray(groups, dtype=np.int64))
    arr = np.asarray(data, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[0] < 2 or arr.shape[1] < 1:
        raise ValueError(f"expected an (N, J) response matrix with N >= 2, got shape {arr.shape}")
    missing = np.isnan(arr) | (arr == -1)
    bad = ~missing & (arr != 0) & (arr != 1)
    if bad.any():
        i, j = np.argwhere(bad)[0]
        raise ValueError(f"responses must be 0, 1, -1 or NaN; row {i}, column {j} holds {float(arr[i, j]):g}")
    correct = np.where(missing, -1, arr).astype(np.int8)
    n_rows, n_items = correct.shape
    groups = np.arange(n_rows) if groups is None else np.asarray(groups)
    if groups.shape != (n_rows,):
        raise ValueError(f"groups must hold one entry per row ({n_rows}), got shape {groups.shape}")
    _, groups = np.unique(groups, return_inverse=True)
    return (correct, tuple(f"row_{i}" for i in range(n_rows)), tuple(str(j) for j in range(n_items)),
            groups.astype(np.int64))


def _reference(y, obs, groups) -> np.ndarray:
    """(N, J): the mean answer on each item of the rows outside each row's LLM group (NaN: none)."""
    n_groups = int(groups.max()) + 1
    sums = np.zeros((n_groups, y.shape[1]))
    counts = np.zeros((n_groups, y.shape[1]))
    np.add.at(sums, groups, y * obs)
    np.add.at(counts, groups, obs.astype(np.float64))
    others = counts.sum(axis=0) - counts[groups]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(others > 0, (sums.sum(axis=0) - sums[groups]) / np.where(others > 0, others, 1.0), np.nan)


def _drawdown(bridge):
    """Per row: the largest fall max_{a<b} B(a) - B(b) and its (a, b) (the block is items a..b-1)."""
    running = np.maximum.accumulate(bridge, axis=1)
    fall = running - bridge
    stop = fall.argmax(axis=1)
    stat = fall[np.arange(bridge.shape[0]), stop]
    cols = np.arange(bridge.shape[1])
    before = np.where(cols[None, :] <= stop[:, None], bridge, -np.inf)
    start = before.argmax(axis=1)
    return start.astype(np.int64), stop.astype(np.int64), stat


def _corr_rows(dy, dx, mask):
    """Row-wise correlation of dy and dx over ``mask`` (each recentred on the mask)."""
    k = np.maximum(mask.sum(axis=1), 1)
    a = np.where(mask, dy - (np.where(mask, dy, 0).sum(axis=1) / k)[:, None], 0.0)
    b = np.where(mask, dx - (np.where(mask, dx, 0).sum(axis=1) / k)[:, None], 0.0)
    saa, sbb = (a * a).sum(axis=1), (b * b).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        enough = (saa > 0) & (sbb > 0) & (mask.sum(axis=1) >= 3)
        return np.where(enough, (a * b).sum(axis=1) / np.sqrt(saa * sbb), np.nan)


def _block_agreement(dy, dx, w, start, stop):
    cols = np.arange(dy.shape[1])
    inside = (cols[None, :] >= start[:, None]) & (cols[None, :] < stop[:, None]) & w
    return _corr_rows(dy, dx, inside), _corr_rows(dy, dx, w & ~inside)


def _flagged_blocks(bridge, flagged, y, obs, dy, dx, w, assessable, subject_ids, item_ids):
    """Flagged rows grouped by overlapping blocks; each group's block from its summed bridges."""
    rows = np.flatnonzero(flagged)
    if rows.size == 0:
        return ()
    start, stop, _ = _drawdown(bridge[rows])
    clusters: list[list[int]] = []
    spans: list[tuple[int, int]] = []
    for k in np.argsort(start, kind="stable"):
        a, b = int(start[k]), int(stop[k])
        for c, (ca, cb) in enumerate(spans):
            overlap = min(b, cb) - max(a, ca)
            if overlap > 0 and overlap >= _OVERLAP * min(b - a, cb - ca):
                clusters[c].append(int(rows[k]))
                spans[c] = (min(a, ca), max(b, cb))
                break
        else:
            clusters.append([int(rows[k])])
            spans.append((a, b))
    out = []
    for members in clusters:
        members = sorted(members)
        joint = bridge[members].sum(axis=0, keepdims=True) / math.sqrt(len(members))
        (a,), (b,), (stat,) = _drawdown(joint)
        a, b = int(a), int(b)
        if b <= a:
            continue
        eligible = np.flatnonzero(assessable | flagged)
        groups = _split(y, obs, eligible, members, a, b)
        inside_g = [[subject_ids[i] for i in g] for g in groups]
        corr_in, corr_out, trace = _between(y, obs, groups, a, b)
        realignment = _realignment(_pvalues(y, obs, groups[0]), _pvalues(y, obs, groups[1]), a, b, corr_out)
        out.append(FlaggedBlock(
            start=a, stop=b, first_item=item_ids[a], last_item=item_ids[b - 1],
            llms=tuple(subject_ids[i] for i in members),
            groups=(tuple(inside_g[0]), tuple(inside_g[1])),
            between_corr_in=corr_in, between_corr_out=corr_out, trace=trace, statistic=float(stat),
            realignment=realignment,
        ))
    return tuple(sorted(out, key=lambda blk: blk.start))


def _centred_rows(y, obs, rows, cols):
    sub_y, sub_o = y[np.ix_(rows, cols)], obs[np.ix_(rows, cols)]
    k = np.maximum(sub_o.sum(axis=1), 1)
    centred = np.where(sub_o, sub_y - (np.where(sub_o, sub_y, 0).sum(axis=1) / k)[:, None], 0.0)
    norm = np.sqrt((centred * centred).sum(axis=1))
    return centred / np.where(norm > 0, norm, 1.0)[:, None]


def _split(y, obs, eligible, members, a, b):
    """Two groups of rows (smaller first): by the leading eigenvector of the change in pairwise
    correlations (inside the block minus outside); flagged vs the rest when the outside is short."""
    n_items = y.shape[1]
    cols_in = np.arange(a, b)
    cols_out = np.r_[0:a, b:n_items]
    eligible = np.asarray(sorted(set(eligible.tolist()) | set(members)))
    if cols_out.size >= _MIN_OUTSIDE and eligible.size >= 3:
        zin = _centred_rows(y, obs, eligible, cols_in)
        zout = _centred_rows(y, obs, eligible, cols_out)
        change = zin @ zin.T - zout @ zout.T
        np.fill_diagonal(change, 0.0)
        _, vectors = np.linalg.eigh(change)
        lead = vectors[:, -1]
        side = lead > 0
        if 0 < side.sum() < side.size:
            first, second = eligible[side], eligible[~side]
        else:
            first, second = np.asarray(members), np.setdiff1d(eligible, members)
    else:
        first, second = np.asarray(members), np.setdiff1d(eligible, members)
    first, second = sorted(first.tolist()), sorted(second.tolist())
    return (first, second) if len(first) <= len(second) else (second, first)


def _pvalues(y, obs, rows):
    if len(rows) == 0:
        return np.full(y.shape[1], np.nan)
    counts = obs[rows].sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, (y[rows] * obs[rows]).sum(axis=0) / np.where(counts > 0, counts, 1), np.nan)


def _corr(a, b) -> float:
    keep = np.isfinite(a) & np.isfinite(b)
    if keep.sum() < 3:
        return float("nan")
    a, b = a[keep] - a[keep].mean(), b[keep] - b[keep].mean()
    den = math.sqrt(float((a * a).sum() * (b * b).sum()))
    return float((a * b).sum() / den) if den > 0 else float("nan")


def _between(y, obs, groups, a, b):
    """Correlation of the two groups' item p-values inside [a, b), outside, and over windows."""
    pa, pb = _pvalues(y, obs, groups[0]), _pvalues(y, obs, groups[1])
    n_items = y.shape[1]
    inside = np.zeros(n_items, bool)
    inside[a:b] = True
    edges = np.unique(np.linspace(0, n_items, _TRACE_WINDOWS + 1).round().astype(int))
    trace = tuple((int(s), int(e), round(_corr(pa[s:e], pb[s:e]), 3)) for s, e in zip(edges[:-1], edges[1:]))
    return _corr(pa[inside], pb[inside]), _corr(pa[~inside], pb[~inside]), trace


def _sliding_corr(u, v):
    """Pearson correlation of the window ``u`` (length m) with every length-m segment of ``v``."""
    m = u.size
    u = u - u.mean()
    norm_u = math.sqrt(float((u * u).sum()))
    dots = np.correlate(v, u, mode="valid")
    c1 = np.concatenate([[0.0], np.cumsum(v)])
    c2 = np.concatenate([[0.0], np.cumsum(v * v)])
    seg_sum, seg_sq = c1[m:] - c1[:-m], c2[m:] - c2[:-m]
    spread = np.maximum(seg_sq - seg_sum * seg_sum / m, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where((spread > 1e-12) & (norm_u > 0), dots / (norm_u * np.sqrt(spread)), np.nan)


def _boundary(pa, pb, left, right, lo, hi) -> int:
    """The item k in [lo, hi] where the offset ``left`` stops and ``right`` starts fitting best:
    argmin of the partial sums of (pa_j - pb_{j+left})^2 - (pa_j - pb_{j+right})^2 (ties go to
    offset 0)."""
    n_items = pa.size
    j = np.arange(lo, hi)
    if j.size == 0:
        return lo

    # an offset that points past the items fits as badly as a random pairing
    unmatched = float(pa.var() + pb.var() + (pa.mean() - pb.mean()) ** 2)

    def err(offset):
        k = j + offset
        inside = (k >= 0) & (k < n_items)
        return np.where(inside, (pa[j] - pb[np.clip(k, 0, n_items - 1)]) ** 2, unmatched)

    sums = np.concatenate([[0.0], np.cumsum(err(left) - err(right))])
    ties = np.flatnonzero(sums <= sums.min() + 1e-12)
    # items that fit both offsets equally stay unshifted: a shift must earn its items
    return int(lo + (ties[-1] if left == 0 and right != 0 else ties[0]))


def _realignment(pa, pb, a, b, corr_out):
    """Segments (start, stop, offset, correlation) of [a, b) on which pa_j goes with pb_{j+offset}
    (windows matched against every offset, merged, boundaries refined item by item)."""
    n_items = pa.size
    pa = np.where(np.isfinite(pa), pa, np.nanmean(pa) if np.isfinite(pa).any() else 0.0)
    pb = np.where(np.isfinite(pb), pb, np.nanmean(pb) if np.isfinite(pb).any() else 0.0)
    m = int(min(np.clip(n_items // 20, 40, 250), b - a))
    if m < 20 or not math.isfinite(corr_out):
        return ()
    noise = math.sqrt(2.0 * math.log(n_items) / m)
    need = max(2.0 / 3.0 * corr_out, 1.5 * noise)
    edges = list(range(a, b - m + 1, m))
    windows = []
    for k, s0 in enumerate(edges):
        s1 = b if k == len(edges) - 1 and b - (s0 + m) < m // 2 else s0 + m
        corr = _sliding_corr(pa[s0:s0 + m], pb)
        if not np.isfinite(corr).any():
            continue
        t = int(np.nanargmax(corr))
        offset, best, here = t - s0, float(corr[t]), corr[s0] if np.isfinite(corr[s0]) else 0.0
        if offset != 0 and best >= need and best - here >= noise:
            windows.append((s0, s1, offset))
    segments: list[list[int]] = []
    for s0, s1, offset in windows:
        if segments and segments[-1][1] == s0 and abs(segments[-1][2] - offset) <= 2:
            segments[-1][1] = s1
        else:
            segments.append([s0, s1, offset])
    out = []
    for k, (s0, s1, offset) in enumerate(segments):
        left = segments[k - 1][2] if k > 0 and segments[k - 1][1] == s0 else 0
        right = segments[k + 1][2] if k + 1 < len(segments) and segments[k + 1][0] == s1 else 0
        lo_a, hi_a = max(0, s0 - m), min(n_items, s0 + m // 2)
        lo_b, hi_b = max(0, s1 - m // 2), min(n_items, s1 + m)
        start = out[-1][1] if left and out and out[-1][2] == left else _boundary(pa, pb, left, offset, lo_a, hi_a)
        stop = _boundary(pa, pb, offset, right, lo_b, hi_b)
        start, stop = max(start, -offset, 0), min(stop, n_items - offset, n_items)
        if out and start < out[-1][1]:
            start = out[-1][1]
        if stop - start >= 3:
            out.append((start, stop, offset, round(_corr(pa[start:stop], pb[start + offset:stop + offset]), 3)))
    return tuple(out)


def _person_fit(params, theta, y, obs):
    """lz and mean log-likelihood per answer of every row at its trait (LaRT: the accuracy part)."""
    from catengine.models import prob_correct

    theta = np.asarray(theta, dtype=np.float64)
    if theta.shape != (y.shape[0],):
        raise ValueError(f"theta must hold one trait per row ({y.shape[0]}), got shape {theta.shape}")
    if params.n_items != y.shape[1]:
        raise ValueError(f"params hold {params.n_items} items, the responses {y.shape[1]}")
    prob = np.clip(prob_correct(params, np.where(np.isfinite(theta), theta, 0.0)), 1e-12, 1.0 - 1e-12)
    log_p, log_q = np.log(prob), np.log1p(-prob)
    l0 = np.where(obs, y * log_p + (1.0 - y) * log_q, 0.0).sum(axis=1)
    expected = np.where(obs, prob * log_p + (1.0 - prob) * log_q, 0.0).sum(axis=1)
    variance = np.where(obs, prob * (1.0 - prob) * (log_p - log_q) ** 2, 0.0).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        lz = np.where((variance > 0) & np.isfinite(theta), (l0 - expected) / np.sqrt(variance), np.nan)
    return lz, l0 / np.maximum(obs.sum(axis=1), 1)


def _notes(subject_ids, ok, assessable, agreement, agreement_z, flagged, lz, n_items) -> list[str]:
    notes = []
    weak = np.flatnonzero(ok & ~assessable & ~flagged)
    if weak.size and assessable.any():
        shown = ", ".join(f"{subject_ids[i]} (r = {agreement[i]:.2f})" for i in weak[np.argsort(agreement[weak])][:6])
        more = f" and {weak.size - 6} more" if weak.size > 6 else ""
        notes.append(f"not assessable by the block scan ({weak.size}): {shown}{more}: their answers agree too little "
                     "with the other LLMs' (near-zero or near-perfect accuracy, random answering, or a column "
                     "misaligned as a whole) for a misaligned half to show")
    untested = np.flatnonzero(~ok)
    if untested.size:
        notes.append(f"no block scan for {untested.size} row(s) with the same answer on every item (all right or all "
                     "wrong), fewer than 4 answers or no other LLM to compare with: "
                     f"{_names([subject_ids[i] for i in untested], 6)}")
    if lz is not None:
        finite = np.isfinite(lz)
        if finite.any():
            low = np.flatnonzero(finite & (lz < LZ_NOTE))
            lowest = ", ".join(f"{subject_ids[i]} {lz[i]:.2f}" for i in np.argsort(np.where(finite, lz, np.inf))[:3])
            notes.append(f"person fit (lz against the fitted items, in-sample): median {np.median(lz[finite]):.2f}, "
                         f"{low.size} row(s) below {LZ_NOTE:g}; lowest {lowest}. Reported, not flagged: the fitted "
                         "items absorb misaligned answers, and real LLMs misfit one trait for reasons of their own")
    return notes
