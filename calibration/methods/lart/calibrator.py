"""LaRT calibration by SAEM with exact posterior sampling (docs/math.md §1.1-1.5, seed 000).

Model (docs/math.md §1.1): P(R_ij = 1) = Phi(a_j theta_i + b_j); log(T_ij + cot_offset) ~
Normal(omega_j - phi_j tau_i, lam_j^2) with ``lam`` a standard deviation; (theta_i, tau_i)
standard bivariate normal with correlation rho. Missing cells are allowed in R and T independently.

Algorithm (one iteration t = 1, 2, ...):

1. **S-step** -- for every LLM one EXACT draw from p(theta_i, tau_i | R_i, T_i; Omega_{t-1})
   (Lemma 1): theta_i from its skew-normal marginal by adaptive rejection sampling
   (``sampler="ars"``, default) or by the SUN construction with a minimax-tilting truncated
   multivariate normal sampler (``sampler="sun"``, a slow O(J^3) cross-check), then tau_i from its
   Gaussian conditional. See :mod:`calibration.methods.lart.sampling`.
2. **SA-step** -- Q~_t = (1 - alpha_t) Q~_{t-1} + alpha_t Q_t with the step-size schedule
   ``alpha_t = 1`` for ``t <= n_burnin`` and ``alpha_t = 1 / (t - n_burnin)`` afterwards
   (``n_burnin = 0`` is the reference schedule alpha_t = 1/t). The burn-in is a stochastic-EM
   phase that forgets the initial values; afterwards Q~_t is the plain average of the
   complete-data log-likelihood over the draws since the burn-in.
3. **M-step** -- Omega_t = argmax Q~_t, exactly:

   * CoT block (omega_j, phi_j, lam_j): closed-form least squares of log T_ij on (1, -tau_i) from
     running averages of the per-item sums of tau, tau^2, tau log T (and log T, log T^2, which
     vary only when censored cells are imputed).
   * accuracy block (a_j, b_j): the averaged probit objective
     (1/m) sum_k sum_i log Phi(s_ij (a_j theta_ik + b_j)) over the m stored draws since the burn-in
     is maximised for all items at once by Newton with backtracking (numba, parallel over items)
     until the Newton step is below ``newton_tol`` (that last step is taken too, so the result is
     within O(newton_tol^2) of the exact maximiser). The plain form is kept: the history holds at
     most ``max_iter - n_burnin`` draws of theta (N floats each). The averaged objective's value,
     gradient and Hessian at the previous maximiser are cached per item, so the first Newton step
     of an iteration costs one pass over the newest draw; each later Newton point is evaluated
     exactly over the whole history (one O(m N) pass per item), except in the averaging phase
     while an item has moved by at most ``_carry_tol`` (0.005, max norm) since its last exact
     pass: there the cached quadratic model of the history is maximised instead (its error moves
     the point by ~``_carry_tol``^2, far below the Monte-Carlo error), which skips about two
     thirds of the history passes on MATH500. The reported information (item SDs) is recomputed
     exactly at the end (``_kernels.item_newton_cached``, ``item_objective_cache``).
   * PX (``px=True``, default; parameter-expanded SAEM, Liu, Rubin & Wu 1998, Lavielle & Meza
     2007): the M-step also maximises over the population means and SDs of theta and tau (the
     averaged first and second moments), then maps back to the unit-variance parameterisation by
     the affine reduction theta' = (theta - m)/s (a' = s a, b' = b + m a; likewise tau with
     phi' = s phi, omega' = omega - phi m). The stored draws, the running CoT statistics and the
     cached objective are re-expressed in the new coordinates, which relabels Q~ exactly. The
     expanded model has the same observed-data likelihood, so the fixed point is the same MLE,
     but EM's very slow drift along the scale of theta (a -> c a, theta -> theta / c: the missing
     information in that direction is almost all of it when J >> N) is removed.
   * rho: with ``px=True`` the exact maximiser of the expanded objective, i.e. the correlation
     of the averaged second moments (in the standardised coordinates this is also the root of
     the unit-variance cubic below). With ``px=False``: ``rho_update="exact"`` solves
     rho (1 - rho^2) + (1 + rho^2) S_tt' - rho (S_tt + S_t't') = 0 in the averaged second moments
     (:func:`rho_exact_update`); ``"average"`` is the reference code's rule (the sample
     correlation of the draws, averaged with the same alpha_t).

   An optional weak Normal(0, ``b_prior_sd``^2) prior on the intercepts b_j (default sd 5) keeps
   items that everyone (or no one) answers correctly finite; ``b_prior_sd=None`` is plain ML.
   The prior is on b only: b is invariant to the scale of theta, so the prior does not pull the
   theta scale (a prior on a would: at the optimum E[sum theta^2] - N = sum a^2 / sd^2).
4. **Stop** in the averaging phase when mean|Delta a| + mean|Delta b| < ``tol``, else at
   ``max_iter`` with a :class:`~calibration.ConvergenceWarning`.

Afterwards: identifiability sign-fix (sum a > 0, sum phi > 0; flipping a or phi flips rho),
then MAP (theta_i, tau_i) per LLM by Newton with posterior SDs sqrt(diag(H^-1)) (docs/math.md §1.5).

``use_cot=False`` is the IRT-only mode: rho = 0, CoT ignored, fit by the same machinery (the
S-step then draws theta from the same sampler with an N(0, 1) prior).

``censor_at`` (tokens, off by default): right-censoring at the generation cap. Cells with
T >= censor_at are treated as log(T + offset) >= log(censor_at + offset) (Tobit). In the S-step
their log-lengths are imputed by data augmentation: given the imputed values (theta, tau) is an
exact Lemma-1 draw, then each censored value is redrawn from its truncated normal given tau. That
makes the S-step a two-block Gibbs kernel, i.e. SAEM-MCMC (Kuhn & Lavielle 2004) for the
censored part; the MAP uses the exact Tobit term log(1 - Phi((log c - mu)/lam)).

Initialisation: spectral (docs/math.md §1.4), with the sign-fix applied.
"""

from __future__ import annotations

import json
import time

import numpy as np
from scipy import special

from calibration.methods.lart import _kernels as K
from calibration.base import BaseCalibrator, choice, integer, non_negative, optional, positive, seed, switch
from calibration.data import ResponseData
from calibration.diagnostics import DEFAULT_MAX_SLOPE, item_diagnostics
from calibration.methods.lart.sampling import _ars_draws, cot_informed_prior, sample_theta_sun

__all__ = ["LaRTSAEMCalibrator", "spectral_init", "rho_exact_update"]

_LAM_FLOOR = 1e-3


# ----------------------------------------------------------------------------- helpers


def rho_exact_update(m_tt: float, m_uu: float, m_tu: float) -> float:
    """Exact maximiser over rho of -(1/2) log(1 - rho^2) - (m_tt - 2 rho m_tu + m_uu) / (2 (1 - rho^2)).

    (The per-subject averaged bivariate-normal log-likelihood with unit variances; m_* are the
    averaged second moments.) The stationarity condition is the cubic
    rho^3 - m_tu rho^2 + (m_tt + m_uu - 1) rho - m_tu = 0; the real root in (-1, 1) with the
    largest objective is returned.
    """
    A = m_tt + m_uu
    C = m_tu
    roots = np.roots([1.0, -C, A - 1.0, -C])
    cand = [float(r.real) for r in roots if abs(r.imag) < 1e-9 and -1.0 < r.real < 1.0]
    if not cand:  # degenerate second moments (|C| ~ A/2): fall back to the sample correlation
        return float(np.clip(2.0 * C / max(A, 1e-12), -0.999, 0.999))

    def obj(r):
        return -0.5 * np.log1p(-r * r) - (A - 2.0 * r * C) / (2.0 * (1.0 - r * r))

    return max(cand, key=obj)


def _fill_columns(x: np.ndarray, seen: np.ndarray) -> np.ndarray:
    counts = seen.sum(axis=0)
    sums = np.where(seen, x, 0.0).sum(axis=0)
    means = np.divide(sums, counts, out=np.zeros(x.shape[1]), where=counts > 0)
    return np.where(seen, x, means[None, :])


def spectral_init(R: np.ndarray, Y: np.ndarray | None):
    """Spectral initial values (docs/math.md §1.4) with the sign-fix applied.

    ``R`` (N, J) 1/0/-1, ``Y`` (N, J) log CoT lengths (NaN missing) or None. Missing cells are
    filled with column means. SVD of R, keep singular values > 1.01 sqrt(N) (at least one),
    reconstruct, clip to (1e-9, 1 - 1e-9), probit-transform; b0 = column means, the top singular
    triplet of the centred matrix gives theta0 = u sqrt(N), a0 = v s / sqrt(N). On log T:
    omega0 = column means, tau0 = u sqrt(N), phi0 = -v s / sqrt(N), lam0 = residual RMS;
    rho0 = mean(theta0 tau0) (clipped to +-0.95). Returns a dict.
    """
    N, J = R.shape
    seen = R >= 0
    Rf = _fill_columns(R.astype(np.float64), seen)
    U, S, Vt = np.linalg.svd(Rf, full_matrices=False)
    k = max(1, int(np.sum(S > 1.01 * np.sqrt(N))))
    P = (U[:, :k] * S[:k]) @ Vt[:k]
    Z = special.ndtri(np.clip(P, 1e-9, 1.0 - 1e-9))
    b0 = Z.mean(axis=0)
    U1, S1, Vt1 = np.linalg.svd(Z - b0, full_matrices=False)
    theta0 = U1[:, 0] * np.sqrt(N)
    a0 = Vt1[0] * S1[0] / np.sqrt(N)
    out = {"a": a0, "b": b0, "theta": theta0}
    if Y is not None:
        seen_t = ~np.isnan(Y)
        Yf = _fill_columns(np.where(seen_t, Y, 0.0), seen_t)
        omega0 = Yf.mean(axis=0)
        U2, S2, Vt2 = np.linalg.svd(Yf - omega0, full_matrices=False)
        tau0 = U2[:, 0] * np.sqrt(N)
        phi0 = -Vt2[0] * S2[0] / np.sqrt(N)
        resid = (Yf - omega0) - S2[0] * np.outer(U2[:, 0], Vt2[0])
        cnt = np.maximum(seen_t.sum(axis=0), 1)
        lam0 = np.sqrt(np.where(seen_t, resid**2, 0.0).sum(axis=0) / cnt)
        lam0 = np.maximum(lam0, 0.05)
        rho0 = float(np.clip(np.mean(theta0 * tau0), -0.95, 0.95))
        out.update(omega=omega0, phi=phi0, lam=lam0, tau=tau0, rho=rho0)
    else:
        out["rho"] = 0.0
    if out["a"].sum() < 0:
        out["a"] = -out["a"]
        out["theta"] = -out["theta"]
        out["rho"] = -out["rho"]
    if Y is not None and out["phi"].sum() < 0:
        out["phi"] = -out["phi"]
        out["tau"] = -out["tau"]
        out["rho"] = -out["rho"]
    return out


def _trunc_normal_lower(mean, sd, lower, u):
    """Inverse-cdf draw of Normal(mean, sd^2) truncated to [lower, inf) at uniforms u (exact to rounding)."""
    alpha = (lower - mean) / sd
    # upper-tail form: X = mean - sd * ndtri((1 - u) * Phi(-alpha)) keeps precision for large alpha
    q = (1.0 - u) * special.ndtr(-alpha)
    q = np.maximum(q, np.finfo(float).tiny)
    x = mean - sd * special.ndtri(q)
    return np.maximum(x, lower)


def _item_covariance(cache, prior):
    """(var_a, cov_ab, var_b) per item: inverse of the averaged complete-data information of the
    accuracy block (minus the cached data Hessian) plus the prior precision."""
    i_aa = -cache[:, 3] + prior[1]
    i_ab = -cache[:, 4]
    i_bb = -cache[:, 5] + prior[3]
    det = i_aa * i_bb - i_ab * i_ab
    det = np.where(det > 1e-300, det, 1e-300)
    return i_bb / det, -i_ab / det, i_aa / det


_EB_MIN_VAR = 1e-4


def _eb_prior_update(a, b, cache, prior):
    """One EM update of the accuracy prior's hyper-parameters (docs/math.md §7.1) at the M-step's point."""
    va, _, vb = _item_covariance(cache, prior)
    ma, mb = float(a.mean()), float(b.mean())
    var_a = max(float(np.mean((a - ma) ** 2 + va)), _EB_MIN_VAR)
    var_b = max(float(np.mean((b - mb) ** 2 + vb)), _EB_MIN_VAR)
    return np.array([ma, 1.0 / var_a, mb, 1.0 / var_b])


# ----------------------------------------------------------------------------- calibrator


class LaRTSAEMCalibrator(BaseCalibrator):
    """Calibrate a LaRT item bank by SAEM with exact posterior sampling (see the module docstring).

    Parameters
    ----------
    max_iter : int
        Maximum number of SAEM iterations (burn-in included).
    n_burnin : int
        Iterations with alpha_t = 1 (stochastic EM) before the 1/(t - n_burnin) averaging.
        0 gives alpha_t = 1/t from the start (the reference code's schedule).
    tol : float
        Stop when mean|Delta a| + mean|Delta b| < tol in the averaging phase.
    use_cot : bool
        False: IRT-only mode (rho = 0, CoT lengths ignored).
    sampler : {"ars", "sun"}
        Exact S-step sampler of theta: adaptive rejection sampling (fast) or the SUN
        construction with a minimax-tilting TMVN sampler (O(J^3) per LLM; cross-check).
    px : bool
        Parameter-expanded SAEM (default True): the M-step also maximises over the population
        means and SDs of theta and tau, then maps back to the unit-variance parameterisation
        (see the module docstring). Removes EM's slow drift along the scale of theta.
    rho_update : {"exact", "average"}
        Rule for rho when ``px=False``: the exact M-step (root of the cubic) or the reference
        code's averaged sample correlation. With ``px=True`` rho is the exact M-step of the
        expanded model: the correlation of the averaged second moments.
    b_prior_sd : float or None
        With ``prior="none"``: SD of a weak Normal(0, sd^2) prior on each intercept b_j (None:
        plain maximum likelihood; items answered correctly by everyone or no one then have no
        finite estimate). Ignored by the empirical-Bayes prior.
    prior : {"empirical-bayes", "none"}
        "empirical-bayes" (default): Gaussian priors a_j ~ N(mu_a, s_a^2), b_j ~ N(mu_b, s_b^2)
        on the accuracy parameters (probit scale) in the M-step, the hyper-parameters updated
        after every M-step by the EM rule mu = mean(x), s^2 = mean((x - mu)^2 + V_jj) with V_j the
        inverse of the item's averaged complete-data information plus the prior precision
        (docs/math.md §7.1; docs/calibration_priors.md). PX keeps theta standardised, so the prior on
        a cannot pull the theta scale. "none": the b_prior_sd rule above.
    max_slope : float
        Items whose slope exceeds this on the logistic scale (probit a x 1.702) are flagged as not
        identified in ``diagnostics_`` and ``converged_`` is then False.
    cot_offset : float
        T is modelled as log(T + cot_offset) (1 by default: zero-length chains exist).
    censor_at : float or None
        Generation cap in tokens: cells with T >= censor_at are right-censored (Tobit; SAEM-MCMC
        imputation in the S-step). None (default): treat every length as observed.
    newton_tol : float
        Step tolerance of the accuracy-block Newton M-step and of the MAP Newton.
    rng : numpy Generator, int or None
        Randomness of the S-step (``np.random.default_rng(rng)`` is called once per fit).
    progress : bool
        Show a tqdm progress bar.

    Fitted attributes
    -----------------
    a_, b_, omega_, phi_, lam_ (J,) item parameters (lam_ an SD; omega_/phi_/lam_ are None in
    IRT-only mode), rho_, theta_, theta_sd_, tau_, tau_sd_ (N,) MAP traits and posterior SDs
    (tau_ NaN in IRT-only mode), n_iter_, converged_, trace_ (dict of per-iteration arrays),
    item_params_ (lart ItemParams; None in IRT-only mode), loss_trace_ (the per-iteration
    mean|da| + mean|db| of the stopping rule), init_ (spectral initial values), elapsed_ (seconds).
    """

    method_name = "saem"
    #: the burn-in of a refit started at a fit's values (:meth:`fit_from`)
    REFIT_BURNIN = 5
    #: the held-out check's fold refits stop at this multiple of ``tol`` (:meth:`refit_settings`)
    REFIT_TOL_FACTOR = 2.0
    _start = None
    #: averaging phase: an item's M-step skips the O(m N) history pass while its moves since the
    #: last exact pass sum to at most this (max norm), maximising the cached quadratic model instead
    #: (``_kernels.item_newton_cached``); 0 gives the exact M-step at every iteration
    _carry_tol = 0.005
    SETTINGS = {
        "max_iter": integer(1, "maximum SAEM iterations (default 200)", "--max-iter"),
        "n_burnin": integer(0, "iterations with step size 1 (default 30)", "--burnin"),
        "tol": non_negative("stop when mean|da| + mean|db| < tol (default 1e-3)", "--tol"),
        "use_cot": switch(),
        "sampler": choice(("ars", "sun"), "exact S-step sampler (default ars)", "--sampler"),
        "px": switch(),
        "rho_update": choice(("exact", "average")),
        "b_prior_sd": optional(positive("with --prior none: SD of the weak N(0, sd^2) prior on intercepts b "
                                        "(0 = none; default 5)", "--b-prior-sd", from_cli=lambda value: value or None)),
        "prior": choice(("empirical-bayes", "none"), "Gaussian priors on a, b with data-set strength (default) or the "
                        "--b-prior-sd rule (docs/calibration_priors.md)", "--prior"),
        "max_slope": positive("flag a slope above this (logistic scale) as not identified (default 10)", "--max-slope"),
        "cot_offset": non_negative("model log(T + offset) (default 1)", "--cot-offset"),
        "censor_at": optional(positive("generation cap in tokens: lengths >= cap are right-censored (Tobit); "
                                       "default off", "--censor-at")),
        "newton_tol": positive(),
        "rng": seed(),
        "progress": switch(),
    }

    def __init__(
        self,
        *,
        max_iter: int = 200,
        n_burnin: int = 30,
        tol: float = 1e-3,
        use_cot: bool = True,
        sampler: str = "ars",
        px: bool = True,
        rho_update: str = "exact",
        b_prior_sd: float | None = 5.0,
        prior: str = "empirical-bayes",
        max_slope: float = DEFAULT_MAX_SLOPE,
        cot_offset: float = 1.0,
        censor_at: float | None = None,
        newton_tol: float = 1e-5,
        rng=None,
        progress: bool = False,
    ):
        self._store_settings(locals())

    def _check_settings(self, values: dict) -> None:
        if values["n_burnin"] >= values["max_iter"]:
            raise ValueError(f"n_burnin ({self.n_burnin}) must be smaller than max_iter ({self.max_iter}); lower n_burnin or raise max_iter")

    def _prepare(self, responses):
        R = np.ascontiguousarray(responses.correct, dtype=np.int8)
        N, J = R.shape
        if N < 3:
            raise ValueError(f"SAEM needs at least 3 subjects, got {N}")
        Y = None
        C = np.zeros((N, J), dtype=np.bool_)
        if self.use_cot:
            if responses.cot_length is None:
                raise ValueError("these responses have no CoT lengths; pass use_cot=False for the IRT-only mode")
            T = np.asarray(responses.cot_length, dtype=np.float64)
            seen = ~np.isnan(T)
            if self.cot_offset == 0 and np.any(T[seen] <= 0):
                raise ValueError("zero-length chains cannot be modelled as log(T) with cot_offset=0; use cot_offset=1")
            Y = np.full((N, J), np.nan)
            np.log(T + self.cot_offset, out=Y, where=seen)
            few = np.flatnonzero(seen.sum(axis=0) < 3)
            if few.size:
                raise ValueError(
                    f"item {responses.item_ids[few[0]]!r} has fewer than 3 observed CoT lengths "
                    f"({few.size} such item(s)); the CoT block needs at least 3 per item"
                )
            if self.censor_at is not None:
                C = seen & (T >= self.censor_at)
        return R, Y, C

    # ------------------------------------------------------------------ fit
    def _fit(self, responses) -> None:
        """Fit to a :class:`calibration.ResponseData` (with CoT lengths unless ``use_cot=False``)."""
        R, Y, C = self._prepare(responses)
        rng = np.random.default_rng(self.rng)
        N, J = R.shape
        use_cot = bool(self.use_cot)
        K_burn = int(self.n_burnin)
        max_iter = int(self.max_iter)
        ridge = 0.0 if self.b_prior_sd is None else 1.0 / float(self.b_prior_sd) ** 2
        eb = self.prior == "empirical-bayes"
        censored = use_cot and self.censor_at is not None and bool(C.any())
        y_cap = np.log(float(self.censor_at) + self.cot_offset) if censored else np.inf

        start = self._start
        if start is None:
            init = spectral_init(R, Y)
        else:  # a refit from a fitted calibrator's values (refit_start): a short burn-in forgets them
            init = self._checked_start(start, N, J, use_cot)
            K_burn = min(K_burn, self.REFIT_BURNIN)
        self.init_ = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in init.items()}
        a = np.ascontiguousarray(init["a"], dtype=np.float64)
        b = np.ascontiguousarray(init["b"], dtype=np.float64)
        # (a_mean, a_precision, b_mean, b_precision) of the accuracy block's Gaussian prior
        prior = (np.array([a.mean(), 1.0 / (a.var() + 1.0), b.mean(), 1.0 / (b.var() + 1.0)]) if eb
                 else np.array([0.0, 0.0, 0.0, ridge]))
        if eb and start is not None and start.get("prior") is not None:
            prior = np.array(start["prior"], dtype=np.float64)
        if use_cot:
            omega = init["omega"].copy()
            phi = init["phi"].copy()
            lam = init["lam"].copy()
            rho = float(init["rho"])
            seen_t = ~np.isnan(Y)
            Yw = Y.copy()  # working log lengths (censored cells imputed)
            if censored:
                Yw[C] = y_cap
            seen_f = seen_t.astype(np.float64)
            n_t = seen_f.sum(axis=0)
            Y0 = np.where(seen_t, Yw, 0.0)
        else:
            omega = phi = lam = None
            rho = 0.0

        hist_cap = max_iter - K_burn if K_burn > 0 else max_iter
        theta_hist = np.zeros((max(hist_cap, 1), N))
        n_hist = 0
        theta_start = np.ascontiguousarray(init["theta"], dtype=np.float64)
        # running averages (SA step) of the CoT and rho sufficient statistics
        st = {}
        trace = {"a": [], "b": [], "rho": [], "alpha": [], "delta": []}
        if use_cot:
            trace.update(omega=[], phi=[], lam=[])
        n_passes = np.zeros(J, dtype=np.int64)
        carried = np.zeros(J)  # per item: move since its last exact history pass (see _carry_tol)
        cache = np.zeros((J, 6))  # data part of the averaged probit objective at (a, b), see item_newton_cached
        n_passes_total = 0
        timing = {"s_step": 0.0, "sa_step": 0.0, "m_step_ab": 0.0, "map": 0.0}
        converged = False
        n_iter = 0
        theta = theta_start.copy()
        tau = init.get("tau", np.zeros(N)).copy()

        from tqdm.auto import tqdm

        bar = tqdm(total=max_iter, desc="LaRT SAEM" if use_cot else "IRT SAEM", disable=not self.progress, leave=False)
        try:
            for t in range(1, max_iter + 1):
                n_iter = t
                # ---------------- S-step: exact (theta, tau) | R, T
                tic = time.perf_counter()
                if use_cot:
                    mu, v, s2, Bsum = cot_informed_prior(Yw, omega, phi, lam, rho)
                else:
                    mu = np.zeros(N)
                    v = np.ones(N)
                if self.sampler == "ars":
                    theta, modes = _ars_draws(R, a, b, mu, v, theta_start, rng)
                    theta_start = modes
                else:
                    theta = sample_theta_sun(R, a, b, mu, v, rng=rng)
                if use_cot:
                    tau = s2 * (Bsum + rho * theta / (1.0 - rho * rho)) + np.sqrt(s2) * rng.standard_normal(N)
                    if censored:
                        mean = omega[None, :] - phi[None, :] * tau[:, None]
                        u = rng.random(int(C.sum()))
                        Yw[C] = _trunc_normal_lower(mean[C], np.broadcast_to(lam, (N, J))[C], y_cap, u)
                        Y0 = np.where(seen_t, Yw, 0.0)
                timing["s_step"] += time.perf_counter() - tic
                tic = time.perf_counter()
                # ---------------- SA-step
                alpha = 1.0 if t <= K_burn + 1 else 1.0 / (t - K_burn)
                if alpha == 1.0:
                    n_hist = 0
                theta_hist[n_hist] = theta
                n_hist += 1
                new = {"m_t": np.mean(theta), "tt": np.mean(theta * theta)}
                if use_cot:
                    new.update(
                        m_u=np.mean(tau),
                        uu=np.mean(tau * tau),
                        tu=np.mean(theta * tau),
                        s_u=tau @ seen_f,
                        s_uu=(tau * tau) @ seen_f,
                        s_uy=tau @ Y0,
                        s_y=Y0.sum(axis=0),
                        s_yy=(Y0 * Y0).sum(axis=0),
                        corr=float(np.corrcoef(theta, tau)[0, 1]),
                    )
                for k, val in new.items():
                    st[k] = val if alpha == 1.0 else (1.0 - alpha) * st[k] + alpha * val
                a_old = a.copy()
                b_old = b.copy()
                # ---------------- PX step: re-express the history in standardised coordinates
                if self.px:
                    m_t = st["m_t"]
                    s_t = float(np.sqrt(max(st["tt"] - m_t * m_t, 1e-12)))
                    theta_hist[:n_hist] -= m_t
                    theta_hist[:n_hist] /= s_t
                    theta = (theta - m_t) / s_t
                    theta_start = (theta_start - m_t) / s_t
                    b = b + a * m_t  # warm start of the Newton M-step in the new coordinates
                    a = a * s_t
                    # the cached history objective, re-expressed: (a', b') = (s a, b + m a)
                    g_a = (cache[:, 1] - m_t * cache[:, 2]) / s_t
                    h_aa = (cache[:, 3] - 2.0 * m_t * cache[:, 4] + m_t * m_t * cache[:, 5]) / (s_t * s_t)
                    h_ab = (cache[:, 4] - m_t * cache[:, 5]) / s_t
                    cache[:, 1] = g_a
                    cache[:, 3] = h_aa
                    cache[:, 4] = h_ab
                    st["m_t"], st["tt"] = 0.0, 1.0
                    if use_cot:
                        m_u = st["m_u"]
                        s_u = float(np.sqrt(max(st["uu"] - m_u * m_u, 1e-12)))
                        cov = st["tu"] - m_t * m_u
                        st["s_uu"] = (st["s_uu"] - 2.0 * m_u * st["s_u"] + n_t * m_u * m_u) / (s_u * s_u)
                        st["s_uy"] = (st["s_uy"] - m_u * st["s_y"]) / s_u
                        st["s_u"] = (st["s_u"] - n_t * m_u) / s_u
                        st["m_u"], st["uu"] = 0.0, 1.0
                        st["tu"] = cov / (s_t * s_u)
                        tau = (tau - m_u) / s_u
                # ---------------- M-step
                timing["sa_step"] += time.perf_counter() - tic
                tic = time.perf_counter()
                K.item_newton_cached(R, theta_hist, n_hist, alpha, a, b, prior, cache, float(self.newton_tol), 100, n_passes,
                                     self._carry_tol, carried)
                if eb:
                    prior = _eb_prior_update(a, b, cache, prior)
                timing["m_step_ab"] += time.perf_counter() - tic
                n_passes_total += int(np.abs(n_passes).sum())
                if use_cot:
                    omega, phi, lam = self._cot_mstep(st, n_t)
                    if self.px:
                        rho = float(np.clip(st["tu"], -0.999, 0.999))
                    elif self.rho_update == "exact":
                        rho = rho_exact_update(st["tt"], st["uu"], st["tu"])
                    else:
                        rho = float(np.clip(st["corr"], -0.999, 0.999))
                delta = float(np.mean(np.abs(a - a_old)) + np.mean(np.abs(b - b_old)))
                trace["a"].append(a.copy())
                trace["b"].append(b.copy())
                trace["rho"].append(rho)
                trace["alpha"].append(alpha)
                trace["delta"].append(delta)
                if use_cot:
                    trace["omega"].append(omega.copy())
                    trace["phi"].append(phi.copy())
                    trace["lam"].append(lam.copy())
                bar.update(1)
                if self.progress:
                    bar.set_postfix(delta=f"{delta:.2e}", rho=f"{rho:+.3f}")
                if t > K_burn + 1 and delta < self.tol:
                    converged = True
                    break
        finally:
            bar.close()

        bad_items = np.flatnonzero(n_passes < 0)
        if bad_items.size:
            ids = ", ".join(repr(responses.item_ids[k]) for k in bad_items[:5])
            self._warn_convergence(
                f"the accuracy M-step did not converge for {bad_items.size} item(s) ({ids}); their responses "
                "are (nearly) separated by ability -- set b_prior_sd to keep them finite", stacklevel=2)

        if self._carry_tol > 0.0 and n_hist > 1 and carried.any():
            # the reported information is exact at the returned point, not the quadratic model's
            K.item_objective_cache(R, theta_hist, n_hist, a, b, cache)
        # item-parameter covariance: inverse of the averaged complete-data information + prior
        var_a, cov_ab, var_b = _item_covariance(cache, prior)
        self.prior_ = {"a_mean": float(prior[0]), "a_sd": float(prior[1]) ** -0.5 if prior[1] > 0 else None,
                       "b_mean": float(prior[2]), "b_sd": float(prior[3]) ** -0.5 if prior[3] > 0 else None,
                       "kind": self.prior}
        # ---------------- sign-fix (docs/math.md §1.1)
        if a.sum() < 0:
            a = -a
            rho = -rho
            theta = -theta
            cov_ab = -cov_ab
            self.prior_["a_mean"] = -self.prior_["a_mean"]
            trace["a"] = [-x for x in trace["a"]]
        phi_flipped = bool(use_cot and phi.sum() < 0)
        if phi_flipped:
            phi = -phi
            rho = -rho
            tau = -tau
            trace["phi"] = [-x for x in trace["phi"]]

        # ---------------- MAP traits
        tic = time.perf_counter()
        map_out = np.empty((N, 5))
        if use_cot:
            Ymap = Y.copy()
            if censored:
                Ymap[C] = y_cap  # the Tobit term bounds the log length below by log(cap + offset)
        else:
            Ymap = np.full((N, J), np.nan)
        K.map_traits(
            R, np.ascontiguousarray(Ymap), np.ascontiguousarray(C & censored), a, b,
            omega if use_cot else np.zeros(J), phi if use_cot else np.zeros(J), lam if use_cot else np.ones(J),
            rho, use_cot, np.ascontiguousarray(theta), np.ascontiguousarray(tau if use_cot else np.zeros(N)),
            map_out, 1e-9, 200,
        )
        timing["map"] = time.perf_counter() - tic
        self.timing_ = timing
        self.newton_passes_ = n_passes_total

        self.a_ = a
        self.b_ = b
        self.a_sd_, self.b_sd_ = np.sqrt(var_a), np.sqrt(var_b)
        self.ab_cov_ = np.clip(cov_ab, -self.a_sd_ * self.b_sd_, self.a_sd_ * self.b_sd_)
        if use_cot:
            self.omega_sd_, self.phi_sd_, self.omega_phi_cov_ = self._cot_covariance(st, n_t, lam)
            if phi_flipped:
                self.omega_phi_cov_ = -self.omega_phi_cov_
        else:
            self.omega_sd_ = self.phi_sd_ = self.omega_phi_cov_ = None
        self.omega_ = omega
        self.phi_ = phi
        self.lam_ = lam
        self.rho_ = float(rho)
        self.theta_ = map_out[:, 0].copy()
        self.theta_sd_ = map_out[:, 2].copy()
        if use_cot:
            self.tau_ = map_out[:, 1].copy()
            self.tau_sd_ = map_out[:, 3].copy()
        else:
            self.tau_ = np.full(N, np.nan)
            self.tau_sd_ = np.full(N, np.nan)
        self.theta_draw_ = theta
        self.tau_draw_ = tau if use_cot else None
        self.n_iter_ = n_iter
        self.optimizer_converged_ = bool(converged)
        seen_r = R >= 0
        n_seen, n_right = seen_r.sum(axis=0), (R == 1).sum(axis=0)
        perfect = (n_right == 0) | (n_right == n_seen)
        self.diagnostics_ = item_diagnostics(
            responses.item_ids, 1.702 * a, perfect=np.zeros(J, bool), max_slope=float(self.max_slope),
            a_prior_precision=float(prior[1]) if eb else None, a_data_precision=-cache[:, 3] if eb else None,
        )
        self.perfect_items_ = perfect  # answered identically by all who saw them: identified by the prior only
        if converged and not self.diagnostics_.fit_identified:
            self._warn_convergence(f"{type(self).__name__}: {self.diagnostics_.message()}; converged_ is False", stacklevel=2)
            converged = False
        self.converged_ = converged
        self.n_burnin_ = K_burn
        self.trace_ = {k: np.asarray(v) for k, v in trace.items()}
        self.loss_trace_ = self.trace_["delta"]  # what the stopping rule watches: mean|da| + mean|db|
        self.item_params_ = self._lart_params() if use_cot else None
        self.censored_cells_ = int(C.sum()) if censored else 0
        if not converged:
            self._warn_not_converged(max_iter, f"mean|da| + mean|db| = {trace['delta'][-1]:.2e} > tol = {self.tol}")

    def refit_start(self, rows) -> dict:
        """The starting values of a refit on the fitted subjects at positions ``rows``: this fit's
        item parameters, rho, accuracy prior and those subjects' MAP traits. Pass it to
        :meth:`fit_from` (the held-out check's fold refits do)."""
        self._check_fitted()
        rows = np.asarray(rows, dtype=np.int64)
        prior = self.prior_
        return {
            "a": self.a_.copy(), "b": self.b_.copy(), "theta": self.theta_[rows].copy(),
            "omega": None if self.omega_ is None else self.omega_.copy(),
            "phi": None if self.phi_ is None else self.phi_.copy(),
            "lam": None if self.lam_ is None else self.lam_.copy(),
            "tau": self.tau_[rows].copy(), "rho": float(self.rho_),
            "prior": (None if prior.get("kind") != "empirical-bayes" or not prior.get("a_sd") or not prior.get("b_sd")
                      else [prior["a_mean"], prior["a_sd"] ** -2, prior["b_mean"], prior["b_sd"] ** -2]),
        }

    def refit_settings(self) -> dict:
        """The settings of the held-out check's fold refits that differ from this fit's: the
        tolerance ``REFIT_TOL_FACTOR`` times looser (the averaging phase then stops after about half
        the iterations; the Monte-Carlo error of the fold parameters, ~0.03 in a on MATH500, stays
        well below their fold-to-full differences, ~0.12)."""
        return {"tol": float(self.tol) * self.REFIT_TOL_FACTOR}

    def fit_from(self, responses, start: dict) -> "LaRTSAEMCalibrator":
        """:meth:`fit`, started at ``start`` (a :meth:`refit_start` of a fit on a superset of these
        subjects, in the same item order) instead of the spectral values, with a burn-in of at
        most ``REFIT_BURNIN`` iterations. The burn-in is stochastic EM: each of its M-steps is the
        maximiser given the current draws alone, so the start is forgotten geometrically fast
        (docs/math.md §1.4); the fixed point and the stopping rule are those of :meth:`fit`."""
        self._start = start
        try:
            return self.fit(responses)
        finally:
            self._start = None

    @staticmethod
    def _checked_start(start: dict, N: int, J: int, use_cot: bool) -> dict:
        out = {"a": np.asarray(start["a"], dtype=np.float64), "b": np.asarray(start["b"], dtype=np.float64),
               "theta": np.asarray(start["theta"], dtype=np.float64)}
        if use_cot:
            if start.get("omega") is None:
                raise ValueError("a LaRT refit needs a start with CoT parameters (omega, phi, lam, tau)")
            out.update(omega=np.asarray(start["omega"], dtype=np.float64), phi=np.asarray(start["phi"], dtype=np.float64),
                       lam=np.asarray(start["lam"], dtype=np.float64), tau=np.asarray(start["tau"], dtype=np.float64),
                       rho=float(start["rho"]))
        for key, size in (("a", J), ("b", J), ("theta", N), ("omega", J), ("phi", J), ("lam", J), ("tau", N)):
            if key in out and out[key].shape != (size,):
                raise ValueError(f"start[{key!r}] has shape {out[key].shape}, expected ({size},)")
        if not all(np.all(np.isfinite(v)) for v in out.values() if isinstance(v, np.ndarray)):
            raise ValueError("the start holds non-finite values")
        return out

    @staticmethod
    def _cot_covariance(st, n, lam):
        """SDs and covariance of (omega_j, phi_j) of the CoT regression log T = omega - phi tau +
        lam e (tau at its averaged sufficient statistics): lam^2 [[n, -S_tau], [-S_tau, S_tautau]]^-1."""
        su, suu = st["s_u"], st["s_uu"]
        det = n * suu - su * su
        det = np.where(det > 1e-300, det, 1e-300)
        v_o = lam**2 * suu / det
        v_p = lam**2 * n / det
        c = lam**2 * su / det  # Cov(omega, phi): the design column is -tau, so the sign is +
        so, sp = np.sqrt(v_o), np.sqrt(v_p)
        return so, sp, np.clip(c, -so * sp, so * sp)

    @staticmethod
    def _cot_mstep(st, n):
        """Closed-form argmax of the averaged CoT objective: regression of log T on (1, -tau)."""
        su, suu, suy, sy, syy = st["s_u"], st["s_uu"], st["s_uy"], st["s_y"], st["s_yy"]
        sxx = suu - su * su / n
        sxy = suy - su * sy / n
        slope = sxy / sxx  # d log T / d tau = -phi
        phi = -slope
        omega = (sy - slope * su) / n
        rss = syy + n * omega**2 + phi**2 * suu - 2.0 * omega * sy + 2.0 * phi * suy - 2.0 * omega * phi * su
        lam = np.sqrt(np.maximum(rss / n, _LAM_FLOOR**2))
        return omega, phi, lam

    # ------------------------------------------------------------------ outputs
    def _lart_params(self):
        """The fitted item parameters as a ``lart`` :class:`~catengine.models.params.ItemParams`."""
        from catengine.models.params import ItemParams

        return ItemParams("lart", a=self.a_, b=self.b_, omega=self.omega_, phi=self.phi_, lam=self.lam_, rho=self.rho_)

    def fit_summary(self, data) -> str:
        return (
            f"LaRT SAEM: {data.n_subjects} LLMs x {data.n_items} items, {self.n_iter_} iterations, "
            f"converged={self.converged_}, rho = {self.rho_:+.3f}, {self.elapsed_:.1f} s"
        )

    def calibration_settings(self) -> dict:
        """The settings a bank records (:meth:`bank_settings`: every constructor setting, then notes
        on the schedule, the rho rule and the S-step)."""
        out = {}
        out["alpha_schedule"] = "1 for t <= n_burnin + 1, then 1/(t - n_burnin)"
        out["rho_rule"] = "exact cubic maximiser" if self.rho_update == "exact" else "averaged sample correlation"
        out["s_step"] = "exact: ARS on the skew-normal marginal" if self.sampler == "ars" else "exact: SUN + minimax-tilting TMVN"
        if self.censor_at is not None:
            out["s_step"] += " (censored cells: SAEM-MCMC data augmentation)"
        return self.bank_settings(out)

    def to_item_bank(self, bank_id: str, *, item_metadata: dict | None = None, scale: dict | None = None,
                     interval_check="auto"):
        """The fitted ``lart`` bank (``catengine.ItemBank``) with subjects and calibration traces.

        ``interval_check`` ("auto" | True | False): run the held-out check and store it
        (``calibration.heldout.with_held_out_check``; costs 5 refits plus replays)."""
        self._check_fitted()
        if self.omega_ is None:
            raise ValueError(
                "an IRT-only fit (use_cot=False) has no CoT parameters; a lart bank needs them "
                "(fit with use_cot=True)"
            )
        import xarray as xr


        subjects = xr.Dataset(
            {
                "theta": ("subject", self.theta_, {"long_name": "MAP ability"}),
                "theta_sd": ("subject", self.theta_sd_, {"long_name": "posterior SD of theta (Laplace at the MAP)"}),
                "tau": ("subject", self.tau_, {"long_name": "MAP CoT speed trait"}),
                "tau_sd": ("subject", self.tau_sd_, {"long_name": "posterior SD of tau (Laplace at the MAP)"}),
            },
            coords={"subject": ("subject", np.asarray(self.subject_ids_, dtype=object))},
        )
        tr = self.trace_
        calib = xr.Dataset(
            {
                name: (("iteration", "item"), tr[name], {"long_name": f"trace of {name}"})
                for name in ("a", "b", "omega", "phi", "lam")
            }
            | {
                "rho": ("iteration", tr["rho"], {"long_name": "trace of rho"}),
                "alpha": ("iteration", tr["alpha"], {"long_name": "SA step size alpha_t"}),
                "delta": ("iteration", tr["delta"], {"long_name": "mean|da| + mean|db| per iteration"}),
            },
            coords={
                "iteration": ("iteration", np.arange(1, self.n_iter_ + 1)),
                "item": ("item", np.asarray(self.item_ids_, dtype=object)),
            },
            attrs={"n_iter": int(self.n_iter_), "converged": int(bool(self.converged_)),
                   "optimizer_converged": int(bool(self.optimizer_converged_)),
                   "diagnostics": json.dumps(self.diagnostics_.summary()),
                   "prior_used": json.dumps(self.prior_),
                   "n_burnin": int(self.n_burnin_), "elapsed_s": float(self.elapsed_)},
        )
        meta = dict(self.item_metadata_)
        meta.update(item_metadata or {})
        scale_info = {
            "theta": "population N(0, 1) (unit variance fixed in the model)",
            "tau": "population N(0, 1)",
            "sign_fix": "sum(a) > 0 and sum(phi) > 0",
        }
        scale_info.update(scale or {})
        bank = self._bank_from_params(
            "lart",
            bank_id,
            self.calibration_settings(),
            scale_info,
            item_metadata=meta or None,
            subjects=subjects,
            calibration=calib,
            rho=self.rho_,
            cot_offset=float(self.cot_offset),
            a=self.a_,
            b=self.b_,
            omega=self.omega_,
            phi=self.phi_,
            lam=self.lam_,
            a_sd=self.a_sd_,
            b_sd=self.b_sd_,
            ab_cov=self.ab_cov_,
            omega_sd=self.omega_sd_,
            phi_sd=self.phi_sd_,
            omega_phi_cov=self.omega_phi_cov_,
            uncertainty_method="observed information at the SAEM fixed point (averaged complete-data information of "
            "(a, b) over the stored theta draws plus the prior precision; CoT block: least-squares covariance)",
            item_vars={"runaway_slope": self.diagnostics_.runaway_slope.astype(np.int8),
                       "perfect": self.perfect_items_.astype(np.int8)},
        )
        from calibration.heldout import with_held_out_check

        return with_held_out_check(self, bank, interval_check, item_metadata=item_metadata, scale=scale)
