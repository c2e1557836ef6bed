"""LaRT calibration by SAEM with exact posterior sampling (docs/math.md §1.1-1.5, Xu et al. 2025).

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
from calibration.base import BankParts, BaseCalibrator, choice, integer, non_negative, optional, positive, seed, switch
from calibration.data import ResponseData
from calibration.diagnostics import DEFAULT_MAX_SLOPE, item_diagnostics
from calibration.methods.lart.saem_steps import (
    accuracy_mstep,
    cot_mstep,
    draw_traits,
    impute_censored,
    item_covariance as _item_covariance,
    mean_abs_change,
    px_standardise,
    rho_exact_update,
    rho_mstep,
    saem_converged,
    sa_update,
    step_size,
    sufficient_stats,
)

__all__ = ["LaRTSAEMCalibrator", "spectral_init", "rho_exact_update"]

# ----------------------------------------------------------------------------- helpers


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


class _SAEMState:
    """The working values of one SAEM fit, passed between the steps of :meth:`LaRTSAEMCalibrator._fit`.

    Settings of the run (use_cot, n_burnin, max_iter, eb, censored, y_cap); item parameters a, b,
    omega, phi, lam, rho and the accuracy prior; the current draws theta, tau and the ARS warm
    start theta_start; the history theta_hist[:n_hist] of draws since the burn-in; the running
    statistics st; the cached objective (cache, n_passes, carried, n_passes_total); the CoT
    working arrays (Yw: log lengths with censored cells imputed, Y0: zero where missing, seen_t,
    seen_f, n_t); traces, timings, n_iter and converged.
    """


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
        s = self._initial_state(R, Y, C)
        self._run_saem(s, R, C, rng)
        self._warn_stuck_items(s, responses.item_ids)
        var_a, cov_ab, var_b = self._accuracy_covariance(s, R)
        cov_ab, phi_flipped = self._sign_fix(s, cov_ab)
        map_out = self._map_traits(s, R, Y, C)
        self.timing_ = s.timing
        self.newton_passes_ = s.n_passes_total
        self._store_item_params(s, var_a, cov_ab, var_b, phi_flipped)
        self._store_traits(s, map_out)
        self._store_diagnostics(s, responses.item_ids, R, C)  # warns of a runaway slope itself
        if not s.converged:  # the tolerance was never met
            self._warn_not_converged(s.max_iter, f"mean|da| + mean|db| = {s.trace['delta'][-1]:.2e} > tol = {self.tol}")

    def _initial_state(self, R, Y, C) -> _SAEMState:
        """The state the SAEM loop starts from: spectral (or refit) values, the accuracy prior, the
        CoT working arrays, an empty history of draws and empty traces. Sets ``init_``."""
        N, J = R.shape
        s = _SAEMState()
        s.use_cot = use_cot = bool(self.use_cot)
        s.n_burnin = int(self.n_burnin)
        s.max_iter = int(self.max_iter)
        ridge = 0.0 if self.b_prior_sd is None else 1.0 / float(self.b_prior_sd) ** 2
        s.eb = eb = self.prior == "empirical-bayes"
        s.censored = use_cot and self.censor_at is not None and bool(C.any())
        s.y_cap = np.log(float(self.censor_at) + self.cot_offset) if s.censored else np.inf

        start = self._start
        if start is None:
            init = spectral_init(R, Y)
        else:  # a refit from a fitted calibrator's values (refit_start): a short burn-in forgets them
            init = self._checked_start(start, N, J, use_cot)
            s.n_burnin = min(s.n_burnin, self.REFIT_BURNIN)
        self.init_ = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in init.items()}
        a = s.a = np.ascontiguousarray(init["a"], dtype=np.float64)
        b = s.b = np.ascontiguousarray(init["b"], dtype=np.float64)
        # (a_mean, a_precision, b_mean, b_precision) of the accuracy block's Gaussian prior
        s.prior = (np.array([a.mean(), 1.0 / (a.var() + 1.0), b.mean(), 1.0 / (b.var() + 1.0)]) if eb
                   else np.array([0.0, 0.0, 0.0, ridge]))
        if eb and start is not None and start.get("prior") is not None:
            s.prior = np.array(start["prior"], dtype=np.float64)
        self._initial_cot_state(s, init, Y, C)

        hist_cap = s.max_iter - s.n_burnin if s.n_burnin > 0 else s.max_iter
        s.theta_hist = np.zeros((max(hist_cap, 1), N))
        s.n_hist = 0
        s.theta_start = np.ascontiguousarray(init["theta"], dtype=np.float64)
        s.st = {}  # running averages (SA step) of the CoT and rho sufficient statistics
        s.trace = {"a": [], "b": [], "rho": [], "alpha": [], "delta": []}
        if use_cot:
            s.trace.update(omega=[], phi=[], lam=[])
        s.n_passes = np.zeros(J, dtype=np.int64)
        s.carried = np.zeros(J)  # per item: move since its last exact history pass (see _carry_tol)
        s.cache = np.zeros((J, 6))  # data part of the averaged probit objective at (a, b), see item_newton_cached
        s.n_passes_total = 0
        s.timing = {"s_step": 0.0, "sa_step": 0.0, "m_step_ab": 0.0, "map": 0.0}
        s.converged = False
        s.n_iter = 0
        s.theta = s.theta_start.copy()
        s.tau = init.get("tau", np.zeros(N)).copy()
        return s

    @staticmethod
    def _initial_cot_state(s: _SAEMState, init: dict, Y, C) -> None:
        """The CoT block's start: parameters, rho and the working log lengths (censored cells at the
        cap until the first imputation) with their observed-cell counts; rho = 0 without CoT."""
        if s.use_cot:
            s.omega = init["omega"].copy()
            s.phi = init["phi"].copy()
            s.lam = init["lam"].copy()
            s.rho = float(init["rho"])
            s.seen_t = ~np.isnan(Y)
            s.Yw = Y.copy()  # working log lengths (censored cells imputed)
            if s.censored:
                s.Yw[C] = s.y_cap
            s.seen_f = s.seen_t.astype(np.float64)
            s.n_t = s.seen_f.sum(axis=0)
            s.Y0 = np.where(s.seen_t, s.Yw, 0.0)
        else:
            s.omega = s.phi = s.lam = None
            s.rho = 0.0
            s.seen_t = s.Yw = s.seen_f = s.n_t = s.Y0 = None

    def _run_saem(self, s: _SAEMState, R, C, rng) -> None:
        """The SAEM iterations (S-step, SA-step, PX, M-step, bookkeeping) until the stopping rule
        holds in the averaging phase or ``max_iter`` is reached; ``s.converged`` tells which."""
        from tqdm.auto import tqdm

        bar = tqdm(total=s.max_iter, desc="LaRT SAEM" if s.use_cot else "IRT SAEM", disable=not self.progress, leave=False)
        try:
            for t in range(1, s.max_iter + 1):
                s.n_iter = t
                self._s_step(s, R, C, rng)
                tic = time.perf_counter()
                alpha = self._sa_step(s, t)
                a_old = s.a.copy()
                b_old = s.b.copy()
                if self.px:
                    self._px_step(s)
                s.timing["sa_step"] += time.perf_counter() - tic
                self._m_step(s, R, alpha)
                delta = self._record_iteration(s, alpha, a_old, b_old)
                bar.update(1)
                if self.progress:
                    bar.set_postfix(delta=f"{delta:.2e}", rho=f"{s.rho:+.3f}")
                if saem_converged(t, s.n_burnin, delta, self.tol):
                    s.converged = True
                    break
        finally:
            bar.close()

    def _s_step(self, s: _SAEMState, R, C, rng) -> None:
        """S-step: exact (theta, tau) | R, T for every LLM (:func:`saem_steps.draw_traits`), then the
        censored log lengths re-imputed given tau (:func:`saem_steps.impute_censored`)."""
        tic = time.perf_counter()
        cot = (s.Yw, s.omega, s.phi, s.lam, s.rho) if s.use_cot else None
        s.theta, tau, modes = draw_traits(R, s.a, s.b, rng, sampler=self.sampler, theta_start=s.theta_start, cot=cot)
        if modes is not None:
            s.theta_start = modes
        if s.use_cot:
            s.tau = tau
            if s.censored:
                impute_censored(s.Yw, C, tau, s.omega, s.phi, s.lam, s.y_cap, rng)
                s.Y0 = np.where(s.seen_t, s.Yw, 0.0)
        s.timing["s_step"] += time.perf_counter() - tic

    @staticmethod
    def _sa_step(s: _SAEMState, t: int) -> float:
        """SA-step: store the draw in the history (emptied while alpha_t = 1) and average the
        sufficient statistics with step size alpha_t, which is returned."""
        alpha = step_size(t, s.n_burnin)
        if alpha == 1.0:
            s.n_hist = 0
        s.theta_hist[s.n_hist] = s.theta
        s.n_hist += 1
        new = sufficient_stats(s.theta, s.tau, s.seen_f, s.Y0) if s.use_cot else sufficient_stats(s.theta)
        sa_update(s.st, new, alpha)
        return alpha

    @staticmethod
    def _px_step(s: _SAEMState) -> None:
        """PX step: re-express the history, cache, statistics and draws in standardised coordinates."""
        s.a, s.b, s.theta, s.theta_start, tau = px_standardise(
            s.st, s.theta_hist, s.n_hist, s.cache, s.a, s.b, s.theta, s.theta_start,
            s.tau if s.use_cot else None, s.n_t,
        )
        if s.use_cot:
            s.tau = tau

    def _m_step(self, s: _SAEMState, R, alpha: float) -> None:
        """M-step: the accuracy block by cached Newton (and the empirical-Bayes prior update), then
        the CoT block in closed form and rho."""
        tic = time.perf_counter()
        s.prior = accuracy_mstep(R, s.theta_hist, s.n_hist, alpha, s.a, s.b, s.prior, s.cache, s.n_passes, s.carried,
                                 newton_tol=float(self.newton_tol), carry_tol=self._carry_tol, empirical_bayes=s.eb)
        s.timing["m_step_ab"] += time.perf_counter() - tic
        s.n_passes_total += int(np.abs(s.n_passes).sum())
        if s.use_cot:
            s.omega, s.phi, s.lam = self._cot_mstep(s.st, s.n_t)
            s.rho = rho_mstep(s.st, px=self.px, rule=self.rho_update)

    @staticmethod
    def _record_iteration(s: _SAEMState, alpha: float, a_old, b_old) -> float:
        """Append the iteration's parameters to the traces; returns mean|da| + mean|db|."""
        delta = mean_abs_change(s.a, s.b, a_old, b_old)
        s.trace["a"].append(s.a.copy())
        s.trace["b"].append(s.b.copy())
        s.trace["rho"].append(s.rho)
        s.trace["alpha"].append(alpha)
        s.trace["delta"].append(delta)
        if s.use_cot:
            s.trace["omega"].append(s.omega.copy())
            s.trace["phi"].append(s.phi.copy())
            s.trace["lam"].append(s.lam.copy())
        return delta

    # ------------------------------------------------------------------ after the loop
    def _warn_stuck_items(self, s: _SAEMState, item_ids) -> None:
        """Warn about items whose accuracy M-step (Newton) did not converge in the last iteration."""
        bad_items = np.flatnonzero(s.n_passes < 0)
        if bad_items.size:
            ids = ", ".join(repr(item_ids[k]) for k in bad_items[:5])
            self._warn_convergence(
                f"the accuracy M-step did not converge for {bad_items.size} item(s) ({ids}); their responses "
                "are (nearly) separated by ability -- set b_prior_sd to keep them finite", stacklevel=3)

    def _accuracy_covariance(self, s: _SAEMState, R):
        """(var_a, cov_ab, var_b) of the items at the returned point (exact information, not the
        carried quadratic model); sets ``prior_`` (the accuracy prior used)."""
        if self._carry_tol > 0.0 and s.n_hist > 1 and s.carried.any():
            # the reported information is exact at the returned point, not the quadratic model's
            K.item_objective_cache(R, s.theta_hist, s.n_hist, s.a, s.b, s.cache)
        # item-parameter covariance: inverse of the averaged complete-data information + prior
        prior = s.prior
        var_a, cov_ab, var_b = _item_covariance(s.cache, prior)
        self.prior_ = {"a_mean": float(prior[0]), "a_sd": float(prior[1]) ** -0.5 if prior[1] > 0 else None,
                       "b_mean": float(prior[2]), "b_sd": float(prior[3]) ** -0.5 if prior[3] > 0 else None,
                       "kind": self.prior}
        return var_a, cov_ab, var_b

    def _sign_fix(self, s: _SAEMState, cov_ab):
        """Identifiability (docs/math.md §1.1): sum a > 0 and sum phi > 0; flipping a (theta) or phi
        (tau) flips rho, the traces and cov(a, b) or the prior mean of a. Returns (cov_ab, phi_flipped)."""
        if s.a.sum() < 0:
            s.a = -s.a
            s.rho = -s.rho
            s.theta = -s.theta
            cov_ab = -cov_ab
            self.prior_["a_mean"] = -self.prior_["a_mean"]
            s.trace["a"] = [-x for x in s.trace["a"]]
        phi_flipped = bool(s.use_cot and s.phi.sum() < 0)
        if phi_flipped:
            s.phi = -s.phi
            s.rho = -s.rho
            s.tau = -s.tau
            s.trace["phi"] = [-x for x in s.trace["phi"]]
        return cov_ab, phi_flipped

    def _map_traits(self, s: _SAEMState, R, Y, C):
        """MAP (theta, tau) per LLM with posterior SDs (docs/math.md §1.5), started at the last
        draws; censored cells enter through the Tobit term. Returns the (N, 5) kernel output."""
        N, J = R.shape
        use_cot = s.use_cot
        tic = time.perf_counter()
        map_out = np.empty((N, 5))
        if use_cot:
            Ymap = Y.copy()
            if s.censored:
                Ymap[C] = s.y_cap  # the Tobit term bounds the log length below by log(cap + offset)
        else:
            Ymap = np.full((N, J), np.nan)
        K.map_traits(
            R, np.ascontiguousarray(Ymap), np.ascontiguousarray(C & s.censored), s.a, s.b,
            s.omega if use_cot else np.zeros(J), s.phi if use_cot else np.zeros(J), s.lam if use_cot else np.ones(J),
            s.rho, use_cot, np.ascontiguousarray(s.theta), np.ascontiguousarray(s.tau if use_cot else np.zeros(N)),
            map_out, 1e-9, 200,
        )
        s.timing["map"] = time.perf_counter() - tic
        return map_out

    def _store_item_params(self, s: _SAEMState, var_a, cov_ab, var_b, phi_flipped: bool) -> None:
        """The fitted item parameters, rho and the item-parameter SDs and covariances."""
        self.a_ = s.a
        self.b_ = s.b
        self.a_sd_, self.b_sd_ = np.sqrt(var_a), np.sqrt(var_b)
        self.ab_cov_ = np.clip(cov_ab, -self.a_sd_ * self.b_sd_, self.a_sd_ * self.b_sd_)
        if s.use_cot:
            self.omega_sd_, self.phi_sd_, self.omega_phi_cov_ = self._cot_covariance(s.st, s.n_t, s.lam)
            if phi_flipped:
                self.omega_phi_cov_ = -self.omega_phi_cov_
        else:
            self.omega_sd_ = self.phi_sd_ = self.omega_phi_cov_ = None
        self.omega_ = s.omega
        self.phi_ = s.phi
        self.lam_ = s.lam
        self.rho_ = float(s.rho)

    def _store_traits(self, s: _SAEMState, map_out) -> None:
        """The MAP traits and SDs (tau NaN in the IRT-only mode) and the last draws."""
        N = map_out.shape[0]
        self.theta_ = map_out[:, 0].copy()
        self.theta_sd_ = map_out[:, 2].copy()
        if s.use_cot:
            self.tau_ = map_out[:, 1].copy()
            self.tau_sd_ = map_out[:, 3].copy()
        else:
            self.tau_ = np.full(N, np.nan)
            self.tau_sd_ = np.full(N, np.nan)
        self.theta_draw_ = s.theta
        self.tau_draw_ = s.tau if s.use_cot else None

    def _store_diagnostics(self, s: _SAEMState, item_ids, R, C) -> bool:
        """Convergence, item diagnostics (a runaway slope makes the fit not converged, with a
        warning), traces and counts. Returns ``converged_``."""
        J = R.shape[1]
        self.n_iter_ = s.n_iter
        self.optimizer_converged_ = bool(s.converged)
        seen_r = R >= 0
        n_seen, n_right = seen_r.sum(axis=0), (R == 1).sum(axis=0)
        perfect = (n_right == 0) | (n_right == n_seen)
        self.diagnostics_ = item_diagnostics(
            item_ids, 1.702 * s.a, perfect=np.zeros(J, bool), max_slope=float(self.max_slope),
            a_prior_precision=float(s.prior[1]) if s.eb else None, a_data_precision=-s.cache[:, 3] if s.eb else None,
        )
        self.perfect_items_ = perfect  # answered identically by all who saw them: identified by the prior only
        converged = s.converged
        if converged and not self.diagnostics_.fit_identified:
            self._warn_convergence(f"{type(self).__name__}: {self.diagnostics_.message()}; converged_ is False", stacklevel=3)
            converged = False
        self.converged_ = converged
        self.n_burnin_ = s.n_burnin
        self.trace_ = {k: np.asarray(v) for k, v in s.trace.items()}
        self.loss_trace_ = self.trace_["delta"]  # what the stopping rule watches: mean|da| + mean|db|
        self.item_params_ = self._lart_params() if s.use_cot else None
        self.censored_cells_ = int(C.sum()) if s.censored else 0
        return converged

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

    #: closed-form M-step of the CoT block (:func:`calibration.methods.lart.saem_steps.cot_mstep`)
    _cot_mstep = staticmethod(cot_mstep)

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

    def _bank_parts(self, *, scale: dict | None = None) -> BankParts:
        """The ``lart`` bank's parts (:meth:`BaseCalibrator.to_item_bank`) with subjects and
        calibration traces; ``scale``: entries added to (or replacing) the bank's scale record."""
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
        scale_info = {
            "theta": "population N(0, 1) (unit variance fixed in the model)",
            "tau": "population N(0, 1)",
            "sign_fix": "sum(a) > 0 and sum(phi) > 0",
        }
        scale_info.update(scale or {})
        arrays = {
            "rho": self.rho_,
            "cot_offset": float(self.cot_offset),
            "a": self.a_,
            "b": self.b_,
            "omega": self.omega_,
            "phi": self.phi_,
            "lam": self.lam_,
            "a_sd": self.a_sd_,
            "b_sd": self.b_sd_,
            "ab_cov": self.ab_cov_,
            "omega_sd": self.omega_sd_,
            "phi_sd": self.phi_sd_,
            "omega_phi_cov": self.omega_phi_cov_,
            "uncertainty_method": "observed information at the SAEM fixed point (averaged complete-data information "
            "of (a, b) over the stored theta draws plus the prior precision; CoT block: least-squares covariance)",
        }
        item_vars = {"runaway_slope": self.diagnostics_.runaway_slope.astype(np.int8),
                     "perfect": self.perfect_items_.astype(np.int8)}
        return BankParts("lart", self.calibration_settings(), scale_info, arrays, item_vars,
                         {"subjects": subjects, "calibration": calib})
