"""Scoped last-layer Laplace posterior of PSN-IRT (docs/math.md §3; the Laplace-PSN-IRT paper, 2026).

Two conditional Gaussian posteriors over readout weights, each with the other side at its MAP:

* ability branch: the theta readout w_t = [t_w; t_b] (E + 1 numbers); theta_i = [u_i; 1]' w_t.
* item branch: the b row of the item readout w_b (E + 1); beta_j = [v_j; 1]' w_b (a, c, d and
  theta at their MAP). Option ``joint_a=True`` puts the a row in as well ([w_b; w_a], 2 (E + 1)
  numbers) -- miscalibrated in the paper, kept for the calibration comparison.

Negative log posterior of the readout w (prior Normal(0, I / delta)):

    NLP(w) = -sum_n log p(y_n | eta_n(w)) + (delta / 2) ||w||^2,
    eta_n = a_j (theta_i - beta_j)   (linear in w_t and in w_b; bilinear in (w_b, w_a)).

Hessian (``curvature``; GGN H = sum_n Lambda_n J_n J_n' + delta I, J_n = d eta_n / d w):

* ``"fisher"`` (default): Lambda_n = E_y[d2 loss / d eta2] = P'(eta)^2 / (P (1 - P)), the 4PL
  Fisher curvature. Positive semi-definite, and near zero where an item saturates at c or d.
  For c = 0, d = 1 (2PL) it equals the exact curvature s (1 - s), so there the GGN is the exact
  Hessian of NLP.
* ``"logistic"``: Lambda_n = s (1 - s) with s = sigmoid(eta), the 2PL GGN (ignores c and d; it
  overstates the information of items whose fitted P sits at an asymptote).
* ``"exact"``: Lambda_n = d2 loss_n / d eta2 at the observed y. Because eta is linear in w_t and
  in w_b, H is then the exact Hessian of NLP for the ability and b-only posteriors (not for the
  joint a-and-b one, where eta is bilinear); it can be indefinite away from the MAP.

The features repeat (docs/math.md §3.3): theta has N distinct features and beta J distinct ones, so
H_t = Phi' diag(W) Phi + delta I with W_i = sum_j a_j^2 Lambda_ij, and likewise for items with
W_j = sum_i a_j^2 Lambda_ij; the joint branch uses per-item weights for the (b, b), (b, a) and
(a, a) blocks: sum_i Lambda a^2, sum_i Lambda (-a)(theta - beta), sum_i Lambda (theta - beta)^2.

The posterior mean is the trained readout (the standard post-hoc Laplace); ``prior_precision``
delta defaults to 1.0 and can be tuned by maximising the Laplace evidence

    log Z(delta) = log p(D | w*) / T - (delta / 2) ||w*||^2 + (P / 2) log delta
                   - (1 / 2) sum_k log(lambda_k / T + delta),

lambda_k the eigenvalues of the data part of H (computed once, so each evaluation is O(P)).

``temperature`` T (default 1: the plain posterior) tempers the likelihood, H = GGN / T + delta I,
as laplace-torch's ``temperature``. With every observed cell in the GGN the last-layer posterior is
very narrow (predictions at its draws equal the MAP's to three decimals on the seed-002 data);
T = number of cells is the Laplace approximation of the *mean* loss the network was trained on
(the Laplace-PSN-IRT paper's setting); ``PSNCalibrator(temperature="split-half")`` chooses T from refits instead
(``calibration.methods.psn.replication``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
from scipy import linalg, optimize

from calibration.methods.psn import _kernels as K

CURVATURES = tuple(K.CURVATURE_CODES)


def _check_curvature(curvature: str) -> int:
    if curvature not in K.CURVATURE_CODES:
        raise ValueError(f"unknown curvature {curvature!r}; allowed: {', '.join(CURVATURES)}")
    return K.CURVATURE_CODES[curvature]


def _check_delta(delta) -> float:
    d = float(delta)
    if not np.isfinite(d) or d <= 0:
        raise ValueError(f"prior_precision must be a positive finite number, got {delta!r}")
    return d


def cell_curvature(theta, beta, a, c, d, subj, item, y, curvature: str = "fisher"):
    """Per-cell curvature Lambda_n wrt the logit and log p(y_n), for the listed cells.

    ``theta`` (N,), ``beta``, ``a``, ``c``, ``d`` (J,) native 4PL parameters; ``subj``, ``item``
    (n,) indices; ``y`` (n,) 0/1. Returns ``(lam, loglik)``, both (n,).
    """
    mode = _check_curvature(curvature)
    arrs = [np.ascontiguousarray(x, dtype=np.float64) for x in (theta, beta, a, c, d)]
    subj = np.ascontiguousarray(subj, dtype=np.int64)
    item = np.ascontiguousarray(item, dtype=np.int64)
    y = np.ascontiguousarray(y, dtype=np.float64)
    lam = np.empty(subj.shape[0])
    ll = np.empty(subj.shape[0])
    K.cell_curvature(*arrs, subj, item, y, mode, lam, ll)
    return lam, ll


@dataclass(frozen=True, eq=False)
class ReadoutPosterior:
    """Gaussian posterior N(mean, H^-1) of readout weights, with the features it acts on.

    ``features`` (M, P): row m is [embedding_m; 1]; ``n_outputs`` readout rows share them
    (1: theta or beta; 2: beta and a, weights stacked as [w_beta; w_a]). The quantity of
    interest for row m and output k is f_mk = features[m] . w_k.

    ``ggn`` is the data part of the Hessian (without the prior), ``precision`` = ggn + delta I.
    """

    mean: np.ndarray  # (n_outputs * P,)
    ggn: np.ndarray  # (n_outputs * P, n_outputs * P)
    features: np.ndarray  # (M, P)
    prior_precision: float
    curvature: str
    log_likelihood: float  # log p(D | mean) over the cells used
    n_cells: int
    n_outputs: int = 1
    tuned: bool = False
    meta: dict = field(default_factory=dict)
    temperature: float = 1.0

    def __post_init__(self):
        t = float(self.temperature)
        if not np.isfinite(t) or t <= 0:
            raise ValueError(f"temperature must be a positive finite number, got {self.temperature!r}")
        object.__setattr__(self, "temperature", t)
        for name in ("mean", "ggn", "features"):
            arr = np.array(getattr(self, name), dtype=np.float64, copy=True)
            arr.flags.writeable = False
            object.__setattr__(self, name, arr)

    # ------------------------------------------------------------------ linear algebra
    @property
    def n_weights(self) -> int:
        return self.mean.shape[0]

    @cached_property
    def precision(self) -> np.ndarray:
        out = self.ggn / self.temperature + self.prior_precision * np.eye(self.n_weights)
        out.flags.writeable = False
        return out

    @cached_property
    def _chol(self) -> np.ndarray:
        """Lower Cholesky factor L of the precision (H = L L')."""
        try:
            return linalg.cholesky(self.precision, lower=True)
        except linalg.LinAlgError:
            raise np.linalg.LinAlgError(
                f"the Laplace precision ({self.curvature!r} curvature, prior_precision="
                f"{self.prior_precision:g}) is not positive definite; use curvature='fisher' or a "
                "larger prior_precision"
            ) from None

    @cached_property
    def covariance_weights(self) -> np.ndarray:
        """Posterior covariance of the readout weights, H^-1."""
        inv_l = linalg.solve_triangular(self._chol, np.eye(self.n_weights), lower=True)
        cov = inv_l.T @ inv_l
        cov = 0.5 * (cov + cov.T)
        cov.flags.writeable = False
        return cov

    def _design(self, idx, output: int) -> np.ndarray:
        """(m, n_weights) design rows: f_m,output = row . w."""
        F = self.features if idx is None else self.features[np.asarray(idx)]
        P = self.features.shape[1]
        X = np.zeros((F.shape[0], self.n_weights))
        X[:, output * P : (output + 1) * P] = F
        return X

    # ------------------------------------------------------------------ marginals
    def predictive_mean(self, idx=None, output: int = 0) -> np.ndarray:
        P = self.features.shape[1]
        F = self.features if idx is None else self.features[np.asarray(idx)]
        return F @ self.mean[output * P : (output + 1) * P]

    def marginal_variance(self, idx=None, output: int = 0) -> np.ndarray:
        """Var(f_m) = x_m' H^-1 x_m for the listed rows (all when ``idx`` is None)."""
        X = self._design(idx, output)
        Z = linalg.solve_triangular(self._chol, X.T, lower=True)
        return np.einsum("ij,ij->j", Z, Z)

    def marginal_sd(self, idx=None, output: int = 0) -> np.ndarray:
        return np.sqrt(self.marginal_variance(idx, output))

    def covariance(self, idx=None, output: int = 0) -> np.ndarray:
        """Cov(f_m, f_k) = x_m' H^-1 x_k of the listed rows (an (m, m) matrix)."""
        X = self._design(idx, output)
        Z = linalg.solve_triangular(self._chol, X.T, lower=True)
        return Z.T @ Z

    # ------------------------------------------------------------------ draws
    def sample_weights(self, n_draws: int, rng=None) -> np.ndarray:
        """(n_draws, n_weights) joint draws of the readout weights."""
        gen = np.random.default_rng(rng)
        z = gen.standard_normal((self.n_weights, int(n_draws)))
        dev = linalg.solve_triangular(self._chol, z, lower=True, trans="T")  # L^-T z ~ N(0, H^-1)
        return self.mean[None, :] + dev.T

    def sample(self, n_draws: int, rng=None, idx=None) -> np.ndarray:
        """Joint draws of f for the listed rows: (n_draws, m), or (n_draws, m, n_outputs) if > 1."""
        W = self.sample_weights(n_draws, rng)
        P = self.features.shape[1]
        F = self.features if idx is None else self.features[np.asarray(idx)]
        out = np.stack([W[:, k * P : (k + 1) * P] @ F.T for k in range(self.n_outputs)], axis=-1)
        return out[..., 0] if self.n_outputs == 1 else out

    # ------------------------------------------------------------------ evidence
    @cached_property
    def ggn_eigenvalues(self) -> np.ndarray:
        return np.linalg.eigvalsh(self.ggn)

    def log_marginal_likelihood(self, prior_precision=None) -> float:
        """Laplace evidence log Z(delta) (module docstring) at ``prior_precision`` (default: own)."""
        delta = self.prior_precision if prior_precision is None else _check_delta(prior_precision)
        return _log_evidence(delta, self.log_likelihood / self.temperature, float(self.mean @ self.mean), self.ggn_eigenvalues / self.temperature)

    def with_prior_precision(self, prior_precision: float, *, tuned: bool = False) -> "ReadoutPosterior":
        return self._replace(prior_precision=_check_delta(prior_precision), tuned=tuned)

    def with_temperature(self, temperature: float) -> "ReadoutPosterior":
        """The same posterior with the likelihood tempered by ``temperature`` (H = GGN / T + delta I)."""
        return self._replace(temperature=float(temperature))

    def _replace(self, **changes) -> "ReadoutPosterior":
        kw = dict(
            mean=self.mean, ggn=self.ggn, features=self.features, prior_precision=self.prior_precision,
            curvature=self.curvature, log_likelihood=self.log_likelihood, n_cells=self.n_cells,
            n_outputs=self.n_outputs, tuned=self.tuned, meta=dict(self.meta), temperature=self.temperature,
        )
        kw.update(changes)
        return ReadoutPosterior(**kw)


def _log_evidence(delta, loglik, wnorm2, eig) -> float:
    lam = eig + delta
    if np.any(lam <= 0):
        return -np.inf
    P = eig.shape[0]
    return float(loglik - 0.5 * delta * wnorm2 + 0.5 * P * np.log(delta) - 0.5 * np.sum(np.log(lam)))


def tune_prior_precision(post: ReadoutPosterior, *, bounds=(1e-6, 1e6)) -> ReadoutPosterior:
    """The posterior with delta maximising the Laplace evidence (1-D bounded search on log delta)."""
    lo, hi = (float(np.log(b)) for b in bounds)
    wnorm2 = float(post.mean @ post.mean)
    eig = post.ggn_eigenvalues / post.temperature
    loglik = post.log_likelihood / post.temperature

    def neg(logd):
        val = _log_evidence(float(np.exp(logd)), loglik, wnorm2, eig)
        return 1e300 if not np.isfinite(val) else -val

    # coarse grid first (the evidence can be flat or multi-modal in log delta), then Brent
    grid = np.linspace(lo, hi, 49)
    vals = np.array([neg(g) for g in grid])
    k = int(np.argmin(vals))
    a, b = grid[max(k - 1, 0)], grid[min(k + 1, grid.size - 1)]
    res = optimize.minimize_scalar(neg, bounds=(a, b), method="bounded", options={"xatol": 1e-6})
    best = float(res.x) if res.fun <= vals[k] else float(grid[k])
    return post.with_prior_precision(float(np.exp(best)), tuned=True)


# ------------------------------------------------------------------------------------ fitting


def _as_cells(cells):
    subj, item, y = cells
    subj = np.ascontiguousarray(subj, dtype=np.int64)
    item = np.ascontiguousarray(item, dtype=np.int64)
    y = np.ascontiguousarray(y, dtype=np.float64)
    if not (subj.shape == item.shape == y.shape) or subj.ndim != 1:
        raise ValueError("cells must be three 1-D arrays (subject index, item index, 0/1 label) of equal length")
    if subj.size == 0:
        raise ValueError("the Laplace posterior needs at least one observed cell")
    return subj, item, y


def _with_bias(emb: np.ndarray) -> np.ndarray:
    emb = np.asarray(emb, dtype=np.float64)
    return np.hstack([emb, np.ones((emb.shape[0], 1))])


def fit_ability_posterior(
    subject_embeddings,
    theta_readout,
    item_params,
    cells,
    *,
    prior_precision: float = 1.0,
    curvature: str = "fisher",
    tune: bool = False,
    temperature: float = 1.0,
) -> ReadoutPosterior:
    """Laplace posterior of the theta readout, items held at their MAP.

    ``subject_embeddings`` (N, E) = u_i; ``theta_readout`` (E + 1,) = [t_w; t_b]; ``item_params``
    = (beta, a, c, d), each (J,); ``cells`` = (subject index, item index, y) of the observed cells.
    """
    delta = _check_delta(prior_precision)
    _check_curvature(curvature)
    subj, item, y = _as_cells(cells)
    Phi = _with_bias(subject_embeddings)
    w = np.asarray(theta_readout, dtype=np.float64)
    if w.shape != (Phi.shape[1],):
        raise ValueError(f"theta_readout has shape {w.shape}, expected ({Phi.shape[1]},)")
    beta, a, c, d = (np.asarray(x, dtype=np.float64) for x in item_params)
    theta = Phi @ w
    lam, ll = cell_curvature(theta, beta, a, c, d, subj, item, y, curvature)
    W = np.bincount(subj, weights=a[item] ** 2 * lam, minlength=Phi.shape[0])
    ggn = (Phi * W[:, None]).T @ Phi
    post = ReadoutPosterior(w, ggn, Phi, delta, curvature, float(ll.sum()), subj.size, 1, False, {"branch": "ability", "weights": W}, temperature)
    return _maybe_tune(post, tune)


def fit_item_posterior(
    item_embeddings,
    beta_readout,
    theta,
    item_params,
    cells,
    *,
    a_readout=None,
    prior_precision: float = 1.0,
    curvature: str = "fisher",
    tune: bool = False,
    temperature: float = 1.0,
) -> ReadoutPosterior:
    """Laplace posterior of the beta row of the item readout (and the a row if ``a_readout``).

    ``item_embeddings`` (J, E) = v_j; ``beta_readout`` / ``a_readout`` (E + 1,) = [i_W[:, k];
    i_b[k]]; ``theta`` (N,) held at the MAP; ``item_params`` = (beta, a, c, d) at the MAP.
    """
    delta = _check_delta(prior_precision)
    _check_curvature(curvature)
    subj, item, y = _as_cells(cells)
    Psi = _with_bias(item_embeddings)
    J = Psi.shape[0]
    wb = np.asarray(beta_readout, dtype=np.float64)
    if wb.shape != (Psi.shape[1],):
        raise ValueError(f"beta_readout has shape {wb.shape}, expected ({Psi.shape[1]},)")
    beta, a, c, d = (np.asarray(x, dtype=np.float64) for x in item_params)
    theta = np.asarray(theta, dtype=np.float64)
    lam, ll = cell_curvature(theta, beta, a, c, d, subj, item, y, curvature)
    Wbb = np.bincount(item, weights=a[item] ** 2 * lam, minlength=J)
    if a_readout is None:
        ggn = (Psi * Wbb[:, None]).T @ Psi
        return _maybe_tune(
            ReadoutPosterior(wb, ggn, Psi, delta, curvature, float(ll.sum()), subj.size, 1, False, {"branch": "b", "weights": Wbb}, temperature),
            tune,
        )
    wa = np.asarray(a_readout, dtype=np.float64)
    if wa.shape != wb.shape:
        raise ValueError(f"a_readout has shape {wa.shape}, expected {wb.shape}")
    dz = theta[subj] - beta[item]
    # d eta / d w_b = -a psi, d eta / d w_a = (theta - beta) psi
    Waa = np.bincount(item, weights=dz**2 * lam, minlength=J)
    Wab = np.bincount(item, weights=-a[item] * dz * lam, minlength=J)
    Hbb = (Psi * Wbb[:, None]).T @ Psi
    Hab = (Psi * Wab[:, None]).T @ Psi
    Haa = (Psi * Waa[:, None]).T @ Psi
    ggn = np.block([[Hbb, Hab], [Hab.T, Haa]])
    post = ReadoutPosterior(np.concatenate([wb, wa]), ggn, Psi, delta, curvature, float(ll.sum()), subj.size, 2, False, {"branch": "ab"}, temperature)
    return _maybe_tune(post, tune)


def _maybe_tune(post, tune):
    return tune_prior_precision(post) if tune else post


def laplace_from_network(net, cells, *, prior_precision=1.0, curvature="fisher", tune=False, joint_a=False, temperature=1.0):
    """(ability posterior, item posterior) of a trained :class:`PSNNetwork` on ``cells``."""
    from calibration.methods.psn.network import BETA, A

    item_params = net.item_parameters()
    ability = fit_ability_posterior(
        net.subject_embeddings(), net.theta_readout, item_params, cells,
        prior_precision=prior_precision, curvature=curvature, tune=tune, temperature=temperature,
    )
    items = fit_item_posterior(
        net.item_embeddings(), net.item_readout(BETA), net.theta(), item_params, cells,
        a_readout=net.item_readout(A) if joint_a else None,
        prior_precision=prior_precision, curvature=curvature, tune=tune, temperature=temperature,
    )
    return ability, items


def p_ahead(mean: np.ndarray, cov: np.ndarray) -> np.ndarray:
    """P(theta_i > theta_k) = Phi((m_i - m_k) / sqrt(v_i + v_k - 2 c_ik)); 0.5 on the diagonal."""
    from scipy.special import ndtr

    mean = np.asarray(mean, dtype=np.float64)
    var = np.diag(cov)
    diff_var = var[:, None] + var[None, :] - 2.0 * cov
    diff = mean[:, None] - mean[None, :]
    out = np.full(diff.shape, 0.5)
    ok = diff_var > 1e-300
    out[ok] = ndtr(diff[ok] / np.sqrt(diff_var[ok]))
    off = ~ok & (diff != 0)
    out[off] = (diff[off] > 0).astype(float)
    np.fill_diagonal(out, 0.5)
    return out


def n_separated_pairs(p_ahead_matrix, level: float = 0.95) -> int:
    """Pairs (i < k) whose order is decided: P(theta_i > theta_k) > ``level`` or < 1 - ``level``."""
    pa = np.asarray(p_ahead_matrix, dtype=np.float64)
    return int(np.sum(np.triu((pa > level) | (pa < 1.0 - level), 1)))
