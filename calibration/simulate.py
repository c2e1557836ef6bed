"""Response simulators: abilities, item parameters, responses (LaRT, 2PL, 4PL) and missingness.

Every function that draws takes ``rng`` (``numpy.random.Generator``, an int seed or ``None``) and
calls ``np.random.default_rng(rng)`` exactly once, so the same seed gives the same result and a
Generator passed in is advanced in place. The order of the draws inside each function is fixed
and documented, which gives one useful property: in :func:`simulate_responses` missingness is
drawn last, so the same seed with and without missingness yields the same complete data.

Designs (docs/math.md §1, §2 and §4):

* 2PL (Qu et al. 2026, cBMM): a ~ U(0.5, 1), b ~ N(0, 0.5^2), theta ~ N(0, 1).
* LaRT (Xu et al. 2025): a ~ U(0.5, 1), b ~ N(0, 0.5^2), omega ~ N(0, 1), phi ~ U(0.5, 1.5),
  lam ~ U(0.5, 2) (an SD), rho = -0.8; (theta, tau) standard bivariate normal.
* 4PL: the 2PL design plus c ~ U(0, 0.25), d ~ U(0.85, 1).
* Missingness (Qu et al. 2026, appendix A.6.3): MCAR, MAR, MNAR, see :func:`simulate_responses`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import optimize, special, stats

from calibration.data import MISSING, ResponseData
from catengine.models import lart as lart_model
from catengine.models.params import ItemParams
from catengine.models.response_models import response_model as resolve_response_model
from catengine.validation import is_integer

__all__ = [
    "ABILITY_FAMILIES",
    "MISSINGNESS",
    "SimulationTruth",
    "draw_abilities",
    "draw_item_params",
    "simulate_dataset",
    "simulate_responses",
]

ABILITY_FAMILIES = ("normal", "skew-normal", "bimodal", "student-t", "empirical")
MISSINGNESS = ("mcar", "mar", "mnar")

_FAMILY_ALIASES = {
    "normal": "normal",
    "gaussian": "normal",
    "skew-normal": "skew-normal",
    "skewnormal": "skew-normal",
    "bimodal": "bimodal",
    "mixture": "bimodal",
    "student-t": "student-t",
    "t": "student-t",
    "empirical": "empirical",
}

_IQR_NORMAL = 2.0 * stats.norm.ppf(0.75)  # 1.3490: interquartile range of N(0, 1)


# ------------------------------------------------------------------------------------ validation
def _positive_int(value, name: str) -> int:
    if not is_integer(value) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def _finite(value, name: str) -> float:
    x = float(value)
    if not np.isfinite(x):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return x


def _trait_vector(values, name: str, n: int | None = None) -> np.ndarray:
    arr = np.array(values, dtype=np.float64, copy=True)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D array (one value per subject), got shape {arr.shape}")
    if n is not None and arr.size != n:
        raise ValueError(f"{name} has {arr.size} entries, expected {n} (one per subject)")
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        raise ValueError(f"{name} is not finite at subject index {int(bad[0])} (value {arr[bad[0]]})")
    return arr


def _readonly(arr):
    if arr is None:
        return None
    arr = np.array(arr, copy=True)
    arr.flags.writeable = False
    return arr


# ------------------------------------------------------------------------------------ abilities
def draw_abilities(
    n: int,
    family: str = "normal",
    *,
    rng=None,
    skew: float = 4.0,
    separation: float = 3.0,
    weight: float = 0.5,
    df: float = 1.0,
    sample=None,
    jitter: float = 0.0,
    standardize: bool | str = True,
) -> np.ndarray:
    """Draw ``n`` abilities from a named family (docs/math.md §4), standardised by default.

    Families:

    * ``"normal"``: N(0, 1).
    * ``"skew-normal"``: ``scipy.stats.skewnorm`` with shape ``skew`` (alpha; > 0 = long right
      tail, < 0 = long left tail, 0 = normal).
    * ``"bimodal"``: mixture ``(1 - weight) N(-separation/2, 1) + weight N(+separation/2, 1)``;
      ``separation`` is the distance between the component means in component SDs (bimodal
      for separation > 2 when weight = 0.5).
    * ``"student-t"``: Student t with ``df`` degrees of freedom (the cBMM paper uses df = 1).
    * ``"empirical"``: resample ``sample`` with replacement (a smoothed bootstrap when
      ``jitter`` > 0: Gaussian noise with SD ``jitter * sd(sample)`` is added to each draw).

    ``standardize``:

    * ``True`` or ``"population"`` (default): shift and scale by the family's *theoretical* mean
      and SD (for ``empirical``: those of the resampling distribution, i.e. the sample's mean and
      ``sd * sqrt(1 + jitter^2)``). The result comes from a distribution with mean 0 and SD 1
      exactly, while each draw keeps its sampling noise, as an examinee population should; it
      is also independent of ``n`` and does not couple the draws. Sample standardisation would
      force every sample to mean 0 / SD 1 exactly, understating between-replicate variability
      in simulation studies. For ``student-t`` with ``df <= 2`` the SD does not exist: the
      draws are centred at the median (0) and scaled so the population interquartile range
      equals that of N(0, 1).
    * ``"sample"``: subtract the sample mean, divide by the sample SD (ddof = 1; needs n >= 2).
    * ``False``: leave the draws on the family's native scale.

    Draw order: one call to the family's sampler (for ``bimodal``: component labels, then the
    normal draws; for ``empirical``: resampling indices, then jitter noise).
    """
    n = _positive_int(n, "n")
    key = _FAMILY_ALIASES.get(str(family).strip().lower().replace("_", "-"))
    if key is None:
        raise ValueError(f"unknown ability family {family!r}; allowed: {', '.join(ABILITY_FAMILIES)}")
    mode = _standardize_mode(standardize, n)
    if sample is not None and key != "empirical":
        raise ValueError(f"sample= is only used by family='empirical', not {key!r}")
    gen = np.random.default_rng(rng)
    x, loc, scale = _FAMILY_DRAWS[key](n, gen, skew=skew, separation=separation, weight=weight, df=df, sample=sample,
                                       jitter=jitter)
    x = np.asarray(x, dtype=np.float64)
    if mode == "population":
        x = (x - loc) / scale
    elif mode == "sample":
        sd = float(np.std(x, ddof=1))
        if sd == 0.0:
            raise ValueError("the drawn abilities are constant; standardize='sample' is undefined")
        x = (x - x.mean()) / sd
    return x


def _standardize_mode(standardize, n: int) -> str | None:
    """``draw_abilities``' standardisation: "population", "sample" or None (checked against ``n``)."""
    if standardize is True:
        mode = "population"
    elif standardize is False:
        mode = None
    elif standardize in ("population", "sample"):
        mode = standardize
    else:
        raise ValueError(f"standardize must be True, False, 'population' or 'sample', got {standardize!r}")
    if mode == "sample" and n < 2:
        raise ValueError("standardize='sample' needs n >= 2 (the sample SD of one draw is undefined)")
    return mode


# each family: (draws on the family's native scale, its population mean, its population SD) from
# ``draw_abilities``' keywords; one call to the family's sampler
def _draw_normal(n, gen, **_):
    return gen.standard_normal(n), 0.0, 1.0


def _draw_skew_normal(n, gen, *, skew, **_):
    alpha = _finite(skew, "skew")
    x = stats.skewnorm.rvs(alpha, size=n, random_state=gen)
    delta = alpha / np.sqrt(1.0 + alpha**2)
    return x, delta * np.sqrt(2.0 / np.pi), np.sqrt(1.0 - 2.0 * delta**2 / np.pi)


def _draw_bimodal(n, gen, *, separation, weight, **_):
    sep = _finite(separation, "separation")
    w = _finite(weight, "weight")
    if sep < 0:
        raise ValueError(f"separation must be >= 0, got {separation!r}")
    if not 0.0 < w < 1.0:
        raise ValueError(f"weight (share of the upper component) must lie in (0, 1), got {weight!r}")
    upper = gen.random(n) < w
    x = gen.standard_normal(n) + np.where(upper, sep / 2.0, -sep / 2.0)
    return x, sep * (w - 0.5), np.sqrt(1.0 + w * (1.0 - w) * sep**2)


def _draw_student_t(n, gen, *, df, **_):
    nu = _finite(df, "df")
    if nu <= 0:
        raise ValueError(f"df must be > 0, got {df!r}")
    x = gen.standard_t(nu, size=n)
    if nu > 2:
        return x, 0.0, np.sqrt(nu / (nu - 2.0))
    return x, 0.0, 2.0 * stats.t.ppf(0.75, nu) / _IQR_NORMAL  # infinite variance: match the IQR of N(0, 1)


def _draw_empirical(n, gen, *, sample, jitter, **_):
    if sample is None:
        raise ValueError("family='empirical' needs sample= (the abilities to resample)")
    pool = np.asarray(sample, dtype=np.float64)
    if pool.ndim != 1 or pool.size < 2:
        raise ValueError(f"sample must be a 1-D array of at least 2 abilities, got shape {pool.shape}")
    bad = np.flatnonzero(~np.isfinite(pool))
    if bad.size:
        raise ValueError(f"sample is not finite at index {int(bad[0])} (value {pool[bad[0]]})")
    sd = float(np.std(pool))
    if sd == 0.0:
        raise ValueError("sample is constant: it cannot be standardised or describe a spread of abilities")
    h = _finite(jitter, "jitter")
    if h < 0:
        raise ValueError(f"jitter must be >= 0, got {jitter!r}")
    x = pool[gen.integers(0, pool.size, size=n)]
    if h > 0:
        x = x + h * sd * gen.standard_normal(n)
    return x, float(np.mean(pool)), sd * np.sqrt(1.0 + h**2)


_FAMILY_DRAWS = {
    "normal": _draw_normal,
    "skew-normal": _draw_skew_normal,
    "bimodal": _draw_bimodal,
    "student-t": _draw_student_t,
    "empirical": _draw_empirical,
}


# ------------------------------------------------------------------------------------ item parameters
def draw_item_params(
    response_model: str,
    n_items: int,
    *,
    rng=None,
    design: str = "paper",
    rho: float = -0.8,
    sparsity: float = 0.0,
    omega_mean: float = 0.0,
) -> ItemParams:
    """Draw item parameters from the papers' simulation designs (``design="paper"``).

    * ``2pl`` (Qu et al. 2026): a ~ U(0.5, 1), b ~ N(0, 0.5^2).
    * ``lart`` (Xu et al. 2025): a ~ U(0.5, 1), b ~ N(0, 0.5^2), omega ~ N(omega_mean, 1),
      phi ~ U(0.5, 1.5), lam ~ U(0.5, 2), and ``rho`` (default -0.8). The paper's omega_mean is 0,
      i.e. log T itself is N(0, .)-scaled; ``omega_mean`` ~ 6.5 puts T on the token scale of real
      CoT data (MATH500 median ~ 670 tokens), where clipping ``exp(.) - offset`` at 0 is rare.
    * ``4pl``: the 2PL design plus c ~ U(0, 0.25), d ~ U(0.85, 1).

    ``b`` is the easiness intercept of z = a theta + b. ``sparsity`` (Qu et al. 2026's redundancy
    study): the share of items whose slope is set to exactly 0; ``round(sparsity * n_items)``
    items, chosen uniformly at random without replacement. ``rho`` is used by ``lart`` only.

    Draw order: a, b, then (omega, phi, lam) or (c, d), then the sparsity positions.
    """
    model = resolve_response_model(response_model)  # ValueError naming the allowed models
    n_items = _positive_int(n_items, "n_items")
    if design != "paper":
        raise ValueError(f"unknown design {design!r}; allowed: 'paper'")
    s = _finite(sparsity, "sparsity")
    if not 0.0 <= s <= 1.0:
        raise ValueError(f"sparsity (share of items with a = 0) must lie in [0, 1], got {sparsity!r}")
    gen = np.random.default_rng(rng)
    a = gen.uniform(0.5, 1.0, n_items)
    b = gen.normal(0.0, 0.5, n_items)
    extra: dict = {}
    if model.has_cot:
        extra["omega"] = gen.normal(_finite(omega_mean, "omega_mean"), 1.0, n_items)
        extra["phi"] = gen.uniform(0.5, 1.5, n_items)
        extra["lam"] = gen.uniform(0.5, 2.0, n_items)
        extra["rho"] = _finite(rho, "rho")
    if model.has_asymptotes:
        extra["c"] = gen.uniform(0.0, 0.25, n_items)
        extra["d"] = gen.uniform(0.85, 1.0, n_items)
    n_zero = int(round(s * n_items))
    if n_zero:
        a[gen.choice(n_items, size=n_zero, replace=False)] = 0.0
    return ItemParams(model.name, a=a, b=b, **extra)


# ------------------------------------------------------------------------------------ responses
@dataclass(frozen=True, eq=False)
class SimulationTruth:
    """The generating values behind a simulated :class:`ResponseData` (arrays are read-only).

    * ``params``: the item parameters.
    * ``theta``: (N,) abilities. ``tau``: (N,) CoT speed traits (``lart``; else ``None``).
    * ``censored``: (N, J) bool, True where an observed CoT length was right-censored at
      ``cot_cap`` (its value then equals the cap); all False without a cap; ``None`` for
      models without CoT lengths. Missing cells are never marked.
    * ``zero_clipped``: (N, J) bool, True where ``exp(.) - cot_offset`` was negative and the
      length was set to 0 (left-censoring at 0); ``None`` without CoT lengths.
    """

    params: ItemParams
    theta: np.ndarray
    tau: np.ndarray | None
    censored: np.ndarray | None
    zero_clipped: np.ndarray | None = None

    def __post_init__(self):
        for name in ("theta", "tau", "censored", "zero_clipped"):
            object.__setattr__(self, name, _readonly(getattr(self, name)))


def _mar_probabilities(n: int, j: int, rate: float) -> np.ndarray:
    """MAR cell probabilities sigmoid(alpha + 2 (S_ij - mean S)), alpha solved so mean p = rate."""
    r = np.arange(n) / (n - 1) if n > 1 else np.zeros(1)
    c = np.arange(j) / (j - 1) if j > 1 else np.zeros(1)
    s = (r[:, None] + c[None, :]) / 2.0
    centred = 2.0 * (s - s.mean())
    alpha = optimize.brentq(lambda al: special.expit(al + centred).mean() - rate, -60.0, 60.0, xtol=1e-12)
    return special.expit(alpha + centred)


def _missing_mask(mechanism: str, rate: float, correct: np.ndarray, gen: np.random.Generator) -> np.ndarray:
    n, j = correct.shape
    if mechanism == "mcar":
        mask = np.zeros(n * j, dtype=bool)
        mask[gen.choice(n * j, size=int(round(rate * n * j)), replace=False)] = True
        return mask.reshape(n, j)
    if mechanism == "mar":
        return gen.random((n, j)) < _mar_probabilities(n, j, rate)
    # mnar: gated columns lose every incorrect answer
    incorrect = correct == 0
    counts = incorrect.sum(axis=0)
    target = rate * n * j
    if target > counts.sum():
        raise ValueError(
            f"missing='mnar' removes only incorrect answers: at most {counts.sum() / (n * j):.4f} of the cells "
            f"can be missing here, missing_rate={rate} is not reachable"
        )
    order = gen.permutation(j)
    cumulative = np.concatenate(([0], np.cumsum(counts[order])))
    k = int(np.argmin(np.abs(cumulative - target)))
    gated = np.zeros(j, dtype=bool)
    gated[order[:k]] = True
    return incorrect & gated[None, :]


def _simulate(
    params: ItemParams,
    theta,
    *,
    tau,
    gen: np.random.Generator,
    missing,
    missing_rate,
    cot_cap,
    cot_offset,
    subject_ids,
    item_ids,
):
    if not isinstance(params, ItemParams):
        raise ValueError(f"params must be an ItemParams, got {type(params).__name__}")
    theta = _trait_vector(theta, "theta")
    n, j = theta.size, params.n_items
    lart = params.model.has_cot  # the model has a CoT part (tau, CoT lengths)
    if not lart:
        if tau is not None:
            raise ValueError(f"tau is only used by the lart response model, not {params.response_model!r}")
        if cot_cap is not None:
            raise ValueError(f"cot_cap is only used by the lart response model, not {params.response_model!r}")
    rate = _finite(missing_rate, "missing_rate")
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"missing_rate must lie in [0, 1), got {missing_rate!r}")
    if missing is not None and missing not in MISSINGNESS:
        raise ValueError(f"unknown missingness mechanism {missing!r}; allowed: {', '.join(MISSINGNESS)} or None")
    if rate > 0 and missing is None:
        raise ValueError(f"missing_rate={missing_rate} needs a mechanism: missing='mcar', 'mar' or 'mnar'")
    offset = _finite(cot_offset, "cot_offset")
    if offset < 0:
        raise ValueError(f"cot_offset must be >= 0, got {cot_offset!r}")
    if cot_cap is not None:
        cap = _finite(cot_cap, "cot_cap")
        if cap <= 0:
            raise ValueError(f"cot_cap (tokens) must be > 0, got {cot_cap!r}")

    # 1. tau | theta from the standard bivariate normal with correlation rho
    if lart:
        tau = params.model.draw_tau(params, theta, gen) if tau is None else _trait_vector(tau, "tau", n)
    # 2. correctness, 3. CoT lengths log(T + offset) ~ N(omega - phi tau, lam^2): the model's draw
    correct, log_t = params.model.simulate(params, theta, tau, gen)
    cot = censored = clipped = None
    if lart:
        clipped = np.exp(log_t) < offset  # T = exp(log_t) - offset would be negative
        cot = lart_model.cot_tokens(log_t, offset)  # continuous lengths (the engine's examinees round)
        censored = np.zeros((n, j), dtype=bool)
        if cot_cap is not None:
            censored = cot > cap
            cot[censored] = cap
    # 4. missingness (drawn last), 5. re-observe one cell of any all-missing row
    if missing is not None and rate > 0:
        mask = _missing_mask(missing, rate, correct, gen)
        for i in np.flatnonzero(mask.all(axis=1)):
            mask[i, gen.integers(j)] = False
        correct[mask] = MISSING
        if lart:
            cot[mask] = np.nan
            censored &= ~mask
            clipped &= ~mask
    data = ResponseData.from_arrays(correct, cot, subject_ids=subject_ids, item_ids=item_ids)
    return data, (tau if lart else None), censored, clipped


def simulate_responses(
    params: ItemParams,
    theta,
    *,
    tau=None,
    rng=None,
    missing: str | None = None,
    missing_rate: float = 0.0,
    cot_cap: float | None = None,
    cot_offset: float = 1.0,
    subject_ids=None,
    item_ids=None,
) -> ResponseData:
    """Simulate a response matrix from item parameters and abilities ``theta`` (N,).

    * Correctness: R_ij ~ Bernoulli(P_j(theta_i)) with Phi(z) (lart), logistic(z) (2pl) or
      c + (d - c) logistic(z) (4pl), z = a theta + b.
    * CoT lengths (lart only): log(T_ij + cot_offset) ~ N(omega_j - phi_j tau_i, lam_j^2),
      T = exp(.) - cot_offset clipped at 0 (continuous, not rounded to integers). With
      ``cot_offset = 0`` T is exactly lognormal and never clipped. ``cot_cap``: right-censor at
      that many tokens (cells above are set to the cap). If ``tau`` is None it is drawn from
      tau | theta ~ N(rho theta, 1 - rho^2), the conditional of the standard bivariate normal.
      The drawn tau and the censoring masks are returned by :func:`simulate_dataset`
      (``SimulationTruth``); here, pass ``tau`` yourself to know it, and the right-censored cells
      are exactly those with ``cot_length == cot_cap``.
    * Missingness (a missing cell loses both correctness and CoT length), ``missing_rate`` in
      [0, 1) of all N x J cells:

      - ``"mcar"``: exactly ``round(rate * N * J)`` cells chosen uniformly without replacement.
      - ``"mar"``: each cell independently with probability sigmoid(alpha + 2 (S_ij - mean S)),
        S_ij = (i/(N-1) + j/(J-1))/2 (0-based i, j: later subjects and items are missed more),
        alpha solved by ``scipy.optimize.brentq`` so the expected rate equals ``missing_rate``.
      - ``"mnar"``: gated columns lose all their incorrect answers (Qu et al. 2026 appendix A.6.3,
        where gates are Bernoulli(rho_c)). Here columns are gated in a random order and the
        number gated is the one whose removed-cell count is closest to ``rate * N * J`` - the
        gate share rho_c that hits the overall rate; the realised rate is off by at most
        half of one column's incorrect count (<= 1/(2J)). Raises if the rate exceeds the share
        of incorrect cells.
      - Any subject left with no observed cell gets one cell (chosen at random) re-observed,
        so the rate can come out slightly below the target when the rate is extreme.

    Draw order: tau (if drawn), correctness uniforms, CoT normals, missingness; so the complete
    data do not depend on the missingness settings.
    """
    gen = np.random.default_rng(rng)
    data, *_ = _simulate(
        params,
        theta,
        tau=tau,
        gen=gen,
        missing=missing,
        missing_rate=missing_rate,
        cot_cap=cot_cap,
        cot_offset=cot_offset,
        subject_ids=subject_ids,
        item_ids=item_ids,
    )
    return data


def simulate_dataset(
    response_model: str,
    n_subjects: int,
    n_items: int,
    *,
    rng=None,
    ability="normal",
    ability_kwargs: dict | None = None,
    rho: float = -0.8,
    design: str = "paper",
    sparsity: float = 0.0,
    omega_mean: float = 0.0,
    missing: str | None = None,
    missing_rate: float = 0.0,
    cot_cap: float | None = None,
    cot_offset: float = 1.0,
) -> tuple[ResponseData, SimulationTruth]:
    """Draw abilities, item parameters and responses in one call; returns ``(data, truth)``.

    ``ability``: a family name for :func:`draw_abilities` (with ``ability_kwargs``, e.g.
    ``{"skew": -4}``) or an array of ``n_subjects`` abilities used as given. ``rho`` is used
    by ``lart`` only. The other keywords go to :func:`draw_item_params` and
    :func:`simulate_responses`. Draw order: abilities, item parameters, responses.
    """
    n_subjects = _positive_int(n_subjects, "n_subjects")
    gen = np.random.default_rng(rng)
    if isinstance(ability, str):
        theta = draw_abilities(n_subjects, ability, rng=gen, **dict(ability_kwargs or {}))
    else:
        if ability_kwargs:
            raise ValueError("ability_kwargs is only used when ability is a family name")
        theta = _trait_vector(ability, "ability", n_subjects)
    params = draw_item_params(
        response_model,
        n_items,
        rng=gen,
        design=design,
        rho=rho,
        sparsity=sparsity,
        omega_mean=omega_mean,
    )
    data, tau, censored, clipped = _simulate(
        params,
        theta,
        tau=None,
        gen=gen,
        missing=missing,
        missing_rate=missing_rate,
        cot_cap=cot_cap,
        cot_offset=cot_offset,
        subject_ids=None,
        item_ids=None,
    )
    return data, SimulationTruth(params=params, theta=theta, tau=tau, censored=censored, zero_clipped=clipped)
