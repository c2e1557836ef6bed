"""Response models as objects: one per model (LaRT, 2PL, 4PL), found by name in ``RESPONSE_MODELS``.

A bank names its response model with a string (the root attribute ``response_model``, and
``ItemParams.response_model``); ``response_model(name)`` / ``ItemParams.model`` give the object,
and callers ask the object instead of testing the name:

* what a bank of the model stores: ``name``, ``parameters`` (its item parameters, in order),
  ``response_function`` (the formula text a bank file carries); ``label`` for people;
* capabilities: ``has_cot`` (a CoT-length part: omega, phi, lam, the speed trait tau and its
  correlation rho with theta), ``link`` ("logistic" or "probit"), ``has_asymptotes`` (c, d);
  ``kernel_code`` (the accuracy part's code in the compiled kernels: 0 = 2PL, 1 = 4PL, 2 = probit),
  ``information_peak`` (the largest information of an item per unit a^2: 1/4 logistic, 2/pi probit);
* the accuracy part in closed form on numpy arrays (scipy's ``ndtr`` / ``expit``):
  :meth:`~ResponseModel.curve` (P and dP/dz at linear predictors z = a theta + b),
  :meth:`~ResponseModel.probability` and :meth:`~ResponseModel.response_and_slope` (thetas x items),
  :meth:`~ResponseModel.averaged_probability` (P averaged over a Gaussian z: item-parameter
  uncertainty), :meth:`~ResponseModel.expected_probability_closed_form` (over a Gaussian theta);
* the accuracy part through the compiled kernels of ``catengine.models._kernels`` (validated
  inputs, any theta shape S, output S + (n,)): :meth:`~ResponseModel.compiled_probability`,
  :meth:`~ResponseModel.information` (Fisher information about theta);
* the CoT part (``has_cot``): :meth:`~ResponseModel.cot_information`,
  :meth:`~ResponseModel.expected_cot_length`;
* generation: :meth:`~ResponseModel.draw_tau` and :meth:`~ResponseModel.simulate`, the one draw of
  answers and CoT lengths (``calibration.simulate`` and ``catengine.session.simulate`` both call it);
* :meth:`~ResponseModel.validate`: the model's own constraints on an ``ItemParams``.

Adding a response model: subclass :class:`ResponseModel` here and list the instance in
``RESPONSE_MODELS`` (docs/architecture.md, "Adding a response model").
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import ClassVar, NamedTuple

import numpy as np
from scipy.special import expit, ndtr

from . import _kernels as K
from ._inputs import _as_items, _as_theta, _per_item, _vec
from .quadrature import DEFAULT_NODES, gauss_hermite_normal

__all__ = [
    "FOUR_PL", "LART", "RESPONSE_MODELS", "TWO_PL", "FourPL", "LaRT", "ResponseModel", "SimulatedAnswers", "TwoPL",
    "response_model",
]

def _index(items):
    """An index into per-item arrays: every item (None), a slice, or integer indices."""
    if items is None:
        return slice(None)
    return items if isinstance(items, slice) else np.asarray(items)


class SimulatedAnswers(NamedTuple):
    """One simulated draw for subjects x items: ``correct`` (N, n) int8 0/1 and ``log_cot`` (N, n)
    log(T + cot_offset) of the CoT lengths (``None`` for a model without a CoT part; convert with
    ``catengine.models.lart.cot_tokens``)."""

    correct: np.ndarray
    log_cot: np.ndarray | None


class ResponseModel(ABC):
    """One response model: what its banks store, what it can do, and its formulas (module docstring).

    Instances are singletons held by ``RESPONSE_MODELS``; methods take the bank's ``ItemParams``.
    """

    name: ClassVar[str]
    label: ClassVar[str]
    parameters: ClassVar[tuple[str, ...]]
    response_function: ClassVar[str]
    link: ClassVar[str]
    has_cot: ClassVar[bool] = False
    has_asymptotes: ClassVar[bool] = False
    kernel_code: ClassVar[int]
    information_peak: ClassVar[float]

    def __repr__(self) -> str:
        return f"<response model {self.name!r}: {self.label}>"

    def __reduce__(self):  # unpickles to the registered instance
        return response_model, (self.name,)

    # ------------------------------------------------------------------ bank parameters
    def validate(self, params) -> None:
        """Raise ValueError where ``params`` break the model's own constraints (beyond finiteness)."""

    # ------------------------------------------------------------------ accuracy part, numpy closed form
    @abstractmethod
    def curve(self, params, z: np.ndarray, items=None) -> tuple[np.ndarray, np.ndarray]:
        """(P, dP/dz) at linear predictors ``z`` (any shape, the selected items on the last axis)."""

    @abstractmethod
    def probability_at(self, params, z: np.ndarray, items=None) -> np.ndarray:
        """P at linear predictors ``z`` (any shape, the selected items on the last axis)."""

    @staticmethod
    def linear_predictor(params, theta, items=None) -> np.ndarray:
        """z = a theta + b for thetas ``theta`` (K,) and the selected items: shape (K, n)."""
        idx = _index(items)
        return np.asarray(theta, dtype=np.float64)[:, None] * params.a[idx][None, :] + params.b[idx][None, :]

    def probability(self, params, theta, items=None) -> np.ndarray:
        """P(correct) for thetas ``theta`` (K,) and the selected items (default: every item): (K, n)."""
        return self.probability_at(params, self.linear_predictor(params, theta, items), items)

    def response_and_slope(self, params, theta, items=None) -> tuple[np.ndarray, np.ndarray]:
        """P_j(theta) and dP_j/dz for thetas ``theta`` (K,) and the selected items: shapes (K, n)."""
        return self.curve(params, self.linear_predictor(params, theta, items), items)

    @abstractmethod
    def averaged_probability(self, params, mu: np.ndarray, v: np.ndarray, items=None,
                             n_nodes: int = DEFAULT_NODES) -> np.ndarray:
        """E P(z) over z ~ Normal(mu, v) (elementwise; the selected items on the last axis): the
        response curve averaged over Gaussian item-parameter uncertainty at a fixed theta."""

    def expected_probability_closed_form(self, params, theta: float, theta_sd: float) -> np.ndarray | None:
        """E_q P_j(theta) of every item under q = Normal(theta, theta_sd^2) in closed form, shape (J,),
        or None where the model has none (the caller integrates numerically)."""
        return None

    # ------------------------------------------------------------------ accuracy part, compiled kernels
    @abstractmethod
    def compiled_probability(self, params, theta, items=None) -> np.ndarray:
        """P(correct) of each selected item by the compiled kernels: shape S + (n,) for theta of shape S."""

    @abstractmethod
    def information(self, params, theta, items=None) -> np.ndarray:
        """Fisher information about theta of each selected item (the accuracy part): shape S + (n,)."""

    @staticmethod
    def _compiled(kernel, params, theta, items, names=("a", "b")) -> np.ndarray:
        """``kernel(thetas, *item parameters)`` on validated inputs (the parameters ``names`` of the
        selected items): shape S + (n,) for theta of shape S."""
        th, shape = _as_theta(theta)
        idx = _as_items(params, items)
        return _per_item(kernel(th, *(_vec(getattr(params, name), idx) for name in names)), shape)

    # ------------------------------------------------------------------ CoT part
    def cot_information(self, params, items=None) -> np.ndarray | None:
        """Information of each selected item's CoT length about tau (free of the traits), or None."""
        return None

    def expected_cot_length(self, params, tau: float, tau_sd: float, cot_offset: float, items=None) -> np.ndarray:
        """E_q E[T_j | tau] under q = Normal(tau, tau_sd^2) for the selected items (CoT part only)."""
        raise ValueError(f"response model {self.name!r} has no CoT lengths")

    # ------------------------------------------------------------------ generation
    def draw_tau(self, params, theta, rng):
        """The speed trait tau | theta from the population (None, drawing nothing, without a CoT part)."""
        return None

    def _draw_log_cot(self, params, tau, gen, idx, shape):
        return None

    def simulate(self, params, theta, tau=None, rng=None, items=None) -> SimulatedAnswers:
        """Simulated answers of subjects with abilities ``theta`` (N,) (and speeds ``tau`` (N,) for a
        model with a CoT part) on the selected items: R ~ Bernoulli(P(theta)), then
        log(T + offset) ~ Normal(omega - phi tau, lam^2). Draw order: one uniform per cell (N x n,
        row-major), then one standard normal per cell (CoT part only). ``rng``: a Generator (advanced
        in place), a seed or None."""
        gen = np.random.default_rng(rng)
        theta = np.asarray(theta, dtype=np.float64).reshape(-1)
        p = self.probability(params, theta, items)
        correct = (gen.random(p.shape) < p).astype(np.int8)
        return SimulatedAnswers(correct, self._draw_log_cot(params, tau, gen, _index(items), p.shape))


class _Logistic(ResponseModel):
    link = "logistic"
    information_peak = 0.25

    def averaged_probability(self, params, mu, v, items=None, n_nodes: int = DEFAULT_NODES):
        x, w = gauss_hermite_normal(n_nodes)
        s = expit(mu[..., None] + np.sqrt(v)[..., None] * x) @ w
        return self._from_sigmoid(params, s, _index(items))

    def _from_sigmoid(self, params, s, idx):
        return s


class TwoPL(_Logistic):
    """2PL (and 1PL = equal slopes): P = sigmoid(a theta + b)."""

    name = "2pl"
    label = "2PL (logistic)"
    parameters = ("a", "b")
    response_function = "P(correct) = 1 / (1 + exp(-(a*theta + b)))"
    kernel_code = 0

    def probability_at(self, params, z, items=None):
        return expit(z)

    def curve(self, params, z, items=None):
        s = expit(z)
        return s, s * (1.0 - s)

    def compiled_probability(self, params, theta, items=None):
        return self._compiled(K.prob_2pl, params, theta, items)

    def information(self, params, theta, items=None):
        return self._compiled(K.info_2pl, params, theta, items)


class FourPL(_Logistic):
    """4PL (3PL = d of 1): P = c + (d - c) sigmoid(a theta + b), 0 <= c < d <= 1."""

    name = "4pl"
    label = "4PL (logistic with lower and upper asymptotes)"
    parameters = ("a", "b", "c", "d")
    response_function = "P(correct) = c + (d - c) / (1 + exp(-(a*theta + b)))"
    has_asymptotes = True
    kernel_code = 1

    def validate(self, params) -> None:
        c, d = params.c, params.d
        bad = np.flatnonzero((c < 0) | (d > 1) | (c >= d))
        if bad.size:
            j = int(bad[0])
            raise ValueError(f"4PL asymptotes need 0 <= c < d <= 1; item index {j} has c={c[j]}, d={d[j]}")

    def _from_sigmoid(self, params, s, idx):
        c, d = params.c[idx], params.d[idx]
        return c + (d - c) * s

    def probability_at(self, params, z, items=None):
        return self._from_sigmoid(params, expit(z), _index(items))

    def curve(self, params, z, items=None):
        idx = _index(items)
        s = expit(z)
        c, d = params.c[idx], params.d[idx]
        return c + (d - c) * s, (d - c) * s * (1.0 - s)

    def compiled_probability(self, params, theta, items=None):
        return self._compiled(K.prob_4pl, params, theta, items, self.parameters)

    def information(self, params, theta, items=None):
        """a^2 (P-c)^2 (d-P)^2 / ((d-c)^2 P(1-P)), as a^2 s (1-s) [(P-c)/P] [(d-P)/(1-P)] (no 0/0)."""
        return self._compiled(K.info_4pl, params, theta, items, self.parameters)


class LaRT(ResponseModel):
    """LaRT (docs/math.md §1): P = Phi(a theta + b); log(T + offset) ~ Normal(omega - phi tau, lam^2)
    with (theta, tau) standard bivariate normal of correlation rho."""

    name = "lart"
    label = "LaRT (probit accuracy, log-normal CoT length)"
    parameters = ("a", "b", "omega", "phi", "lam")
    response_function = ("P(correct) = Phi(a*theta + b); log(T + cot_offset) ~ Normal(omega - phi*tau, lam^2), "
                         "lam an SD; (theta, tau) ~ Normal2(0, [[1, rho], [rho, 1]])")
    link = "probit"
    has_cot = True
    kernel_code = 2
    information_peak = 2.0 / math.pi

    def validate(self, params) -> None:
        bad = np.flatnonzero(params.lam <= 0)
        if bad.size:
            j = int(bad[0])
            raise ValueError(f"lam (CoT residual SD) must be > 0; item index {j} has lam={params.lam[j]}")

    def probability_at(self, params, z, items=None):
        return ndtr(z)

    def curve(self, params, z, items=None):
        return ndtr(z), np.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)

    def averaged_probability(self, params, mu, v, items=None, n_nodes: int = DEFAULT_NODES):
        """Exact: E Phi(z) = Phi(mu / sqrt(1 + v)) (``n_nodes`` unused)."""
        return ndtr(mu / np.sqrt(1.0 + v))

    def expected_probability_closed_form(self, params, theta, theta_sd):
        """E Phi(a X + b), X ~ Normal(theta, theta_sd^2): Phi((a theta + b) / sqrt(1 + a^2 theta_sd^2))."""
        return ndtr((params.a * theta + params.b) / np.sqrt(1.0 + (params.a * theta_sd) ** 2))

    def compiled_probability(self, params, theta, items=None):
        return self._compiled(K.prob_probit, params, theta, items)

    def information(self, params, theta, items=None):
        """u_j = a_j^2 h(a_j theta + b_j), h(z) = phi(z)^2 / (Phi(z) Phi(-z))."""
        return self._compiled(K.info_probit, params, theta, items)

    def cot_information(self, params, items=None):
        """v_j = phi_j^2 / lam_j^2."""
        if items is None:
            return (params.phi / params.lam) ** 2
        idx = _index(items)
        return (params.phi[idx] / params.lam[idx]) ** 2

    def expected_cot_length(self, params, tau, tau_sd, cot_offset, items=None):
        """exp(omega - phi tau + (phi tau_sd)^2 / 2 + lam^2 / 2) - cot_offset (closed form)."""
        if items is None:
            omega, phi, lam = params.omega, params.phi, params.lam
        else:
            idx = _index(items)
            omega, phi, lam = params.omega[idx], params.phi[idx], params.lam[idx]
        return np.exp(omega - phi * tau + 0.5 * (phi * tau_sd) ** 2 + 0.5 * lam ** 2) - cot_offset

    def draw_tau(self, params, theta, rng):
        """tau | theta ~ Normal(rho theta, 1 - rho^2): one standard normal per entry of ``theta``
        (a float gives a float)."""
        gen = np.random.default_rng(rng)
        rho = params.rho
        noise = gen.standard_normal() if np.ndim(theta) == 0 else gen.standard_normal(np.shape(theta))
        return rho * theta + math.sqrt(1.0 - rho * rho) * noise

    def _draw_log_cot(self, params, tau, gen, idx, shape):
        if tau is None:
            raise ValueError("simulated LaRT answers need the speed trait tau of every subject")
        tau = np.asarray(tau, dtype=np.float64).reshape(-1)
        omega, phi, lam = params.omega[idx], params.phi[idx], params.lam[idx]
        return omega[None, :] - phi[None, :] * tau[:, None] + lam[None, :] * gen.standard_normal(shape)


LART, TWO_PL, FOUR_PL = LaRT(), TwoPL(), FourPL()

#: the registry: response-model name (what bank files store) -> the model object
RESPONSE_MODELS: dict[str, ResponseModel] = {m.name: m for m in (LART, TWO_PL, FOUR_PL)}


def response_model(name) -> ResponseModel:
    """The registered response model called ``name`` (a model object is returned as it is);
    ValueError naming the allowed names otherwise."""
    if isinstance(name, ResponseModel):
        return name
    model = RESPONSE_MODELS.get(name) if isinstance(name, str) else None
    if model is None:
        raise ValueError(f"unknown response_model {name!r}; allowed: {', '.join(RESPONSE_MODELS)}")
    return model
