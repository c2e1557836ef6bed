"""``PSNCalibrator``: PSN-IRT 4PL calibration with a scoped last-layer Laplace posterior.

scikit-learn contract (``calibration.base``): settings in ``__init__``, ``fit(responses)``
trains the network on the observed cells and fits the Laplace posteriors, fitted attributes end
in ``_``; ``to_item_bank(bank_id=...)`` exports a ``4pl`` bank with the posterior.

Native form (the network's): P = c + (d - c) sigmoid(a (theta - beta)). Banks store the
slope-intercept form z = a theta + b (docs/math.md §0). The export

1. makes the asymptotes ordered: the reference head does not force d > c, and an item with
   c > d is the same response function as (a, c, d) -> (-a, d, c) (sigmoid(-z) = 1 - sigmoid(z)),
   so such items are flipped (training often lands entirely in the mirrored mode a < 0, c > d);
2. standardises theta over the calibration subjects' MAP abilities (``standardize=True``):
   theta* = (theta - mu) / sigma, a* = a sigma, b* = -a (beta - mu), recorded in the ``scale``
   attribute (``standardize=False`` keeps the native scale: b = -a beta);
3. converts the Gaussian posterior of beta_j (SD s_j) to one of b_j with SD |a_j| s_j, and stores
   what correlated draws need: b = b_offset + b_features @ w, w ~ Normal(b_readout_mean,
   b_readout_cov), in the ``/posterior`` group.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from calibration.base import BankParts, BaseCalibrator, Setting, choice, integer, non_negative, positive, seed, switch
from calibration.common import Z95
from catengine.itembank.schema import PLAUSIBLE_RANGES
from catengine.validation import in_unit_interval, positive_finite
from calibration.data import ResponseData
from calibration.diagnostics import item_diagnostics
from calibration.methods.psn.laplace import CURVATURES, fit_item_posterior, laplace_from_network, n_separated_pairs, p_ahead
from calibration.methods.psn.network import A, BETA, PSNNetwork, fit_network
from calibration.methods.psn.replication import split_half_check

MEAN_LOSS = "mean-loss"  # temperature = number of observed cells
SPLIT_HALF = "split-half"  # temperature = max(1, mean z^2) of a split-half refit (calibration.methods.psn.replication)
TEMPERATURE_WORDS = (MEAN_LOSS, SPLIT_HALF)
ITEM_PRIORS = ("normal", "none")
# The priors join after two plain epochs, and only once the abilities have spread (native SD >=
# 0.5): the initial network (no ability spread, slopes near 0) is a saddle that a prior on a and
# theta can make attracting, holding every slope and ability at 0 (seen on a ChemBench subset).
PRIOR_START_EPOCH = 3
PRIOR_MIN_SPREAD = 0.5
# theta_i ~ Normal(0, 3^2): the ability prior is there to pin the scale; under Normal(0, 1) the
# abilities of a 12-item test fit were shrunk so far that the likelihood preferred 3 theta
ABILITY_PRIOR_SD = 3.0


def check_temperature(value, name: str = "temperature"):
    """A positive finite number, ``"mean-loss"`` or ``"split-half"``."""
    if isinstance(value, str):
        if value not in TEMPERATURE_WORDS:
            raise ValueError(f"{name} must be a positive number, {MEAN_LOSS!r} or {SPLIT_HALF!r}, got {value!r}")
        return value
    return positive_finite(value, name)


def parse_temperature(text: str):
    """The command line's ``--temperature``: a word of TEMPERATURE_WORDS or a positive number."""
    if text in TEMPERATURE_WORDS:
        return text
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, 'split-half' or 'mean-loss', got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive finite number, 'split-half' or 'mean-loss', got {text!r}")
    return value


def _per_cell(counts) -> np.ndarray:
    """1 / (observed cells) per row (0 where none): a unit prior precision spread over the cells."""
    counts = np.asarray(counts, dtype=np.float64)
    return np.where(counts > 0, 1.0 / np.maximum(counts, 1.0), 0.0)


class PSNCalibrator(BaseCalibrator):
    """PSN-IRT (Zhou et al. 2026) in numpy/numba with the last-layer Laplace posterior of the Laplace-PSN-IRT paper (2026).

    Parameters
    ----------
    hidden_dim, embedding_dim : widths of the embedding tables and of the embeddings (64, 128).
    learning_rate, weight_decay, batch_size, max_epochs : Adam (torch semantics, coupled weight
        decay) on shuffled mini-batches of observed cells; defaults as the reference train.py.
    ordered_asymptotes : default True: d = c + (1 - c) sigmoid(p3), so d > c always. False gives the
        reference head d = sigmoid(p3), under which d starts equal to c (a flat 4PL) and training
        can stall with every ability equal on weak-signal data (seen on simulated 4PL data and
        on ChemBench subsets); use False to reproduce the paper's network exactly.
    validation_fraction : share of observed cells held out for early stopping (0 = none; then
        every epoch runs, as the reference). ``patience`` epochs without a validation-loss
        improvement larger than ``min_delta`` stop training; the best epoch's weights are kept.
    item_prior : "normal" (default): a_j ~ Normal(0, slope_prior_sd^2) on every item's slope and
        theta_i ~ Normal(0, 3^2) on every ability, on the network's native scale, added to the
        training loss (docs/math.md §3.4). The ability prior pins the scale that the PSN-IRT
        likelihood leaves free, so the slope prior cannot be dodged by stretching theta; together
        they keep items that a small calibration sample separates perfectly from running away
        (a 12-LLM ChemBench subset reached standardised slopes of 41 without them). "none":
        the plain PSN-IRT loss of the reference (the Laplace-PSN-IRT paper, 2026).
    slope_prior_sd : the prior SD of the native slopes (default 1).
    prior_precision : delta of the Laplace prior Normal(0, I / delta) on the readout weights.
    tune_prior_precision : maximise the Laplace evidence over delta (per branch) instead.
    curvature : "fisher" (default), "logistic" or "exact" (see ``calibration.methods.psn.laplace``).
    temperature : likelihood tempering of the Laplace posterior, H = GGN / T + delta I.

        * 1 (default): the plain posterior of the readout given every observed cell (docs/math.md
          §3.3). Its pairwise orders held up against refits and against the truth in our
          checks, but its SDs are far narrower than the spread of refitted abilities.
        * ``"split-half"``: refit on two disjoint item halves (two extra fits, each on half the
          data) and set T = max(1, mean z^2) from :func:`calibration.methods.psn.split_half_check`, so
          the SDs match how far abilities move between refits; the check is kept in
          ``split_half_``. A lower bound: a warp of the theta scale shared by both halves is not
          seen.
        * ``"mean-loss"``: T = number of observed cells, the Laplace approximation of the *mean*
          training loss -- the setting under which the Laplace-PSN-IRT paper's calibration table reproduces (its
          posterior does not narrow as cells are added, as the paper reports). The prior then
          dominates and SDs are several times wider than the refit spread.
        * any positive number.

        See ``benchmarks/psn_laplace.py`` (sections 6-7) and the README ("How wide is the PSN
        posterior?") for the measurements.
    dtype : "float32" (default: torch's precision, faster) or "float64" training arithmetic.
    rng : seed / Generator for initialisation, shuffling and the validation split.
    progress : show a tqdm progress bar.

    Fitted attributes: ``network_`` (:class:`PSNNetwork`), ``history_``, ``theta_`` (the
    abilities on the bank's scale: standardised over the calibration subjects, equal to the
    thetas ``to_item_bank()`` stores), ``native_theta_`` (the network's own abilities), ``beta_``,
    ``a_``, ``c_``, ``d_`` (native item parameters, as trained, on the scale of ``native_theta_``),
    ``ability_posterior_``, ``item_posterior_`` (:class:`ReadoutPosterior`), ``n_iter_`` (epochs
    run), ``converged_``, ``validation_index_`` (positions in ``cells_`` of the validation cells),
    ``orientation_`` (-1 if the trained network was mirrored so that larger
    theta means more able), ``loss_trace_`` (mean training loss per epoch), ``validation_loss_curve_``,
    ``subject_ids_``, ``item_ids_``, ``responses_sha256_``, ``elapsed_`` (seconds), ``theta_sd_``
    (posterior SDs of ``theta_``), ``item_params_`` (bank-form 4PL on the scale of ``theta_``,
    i.e. ``item_params(standardize=True)``, the bank's items), ``temperature_`` (the Laplace
    temperature used, a number), ``split_half_`` (the :class:`RefitComparison` behind
    ``temperature="split-half"``, else None), ``diagnostics_``
    (:class:`calibration.diagnostics.ItemDiagnostics` on the standardised slopes: perfect items
    and runaway slopes, above 10; a runaway slope sets ``converged_`` to False. With
    ``item_prior="none"`` many slopes run away on a 12-LLM ChemBench subset; bank slopes / intercepts beyond the
    bank's plausible range (|a| <= 50, |b| <= 100) are held at its edge).
    """

    method_name = "psn"
    #: its b_sd is a posterior width that the held-out check measures against the refits' spread and
    #: widens to match (``calibration.heldout.item_sd``)
    held_out_widens_b_sd = True
    SETTINGS = {
        "hidden_dim": integer(1, "embedding-table width (default 64)", "--hidden-dim"),
        "embedding_dim": integer(1, "embedding width (default 128)", "--embedding-dim"),
        "learning_rate": positive("Adam learning rate (default 3e-3)", "--learning-rate"),
        "weight_decay": non_negative("Adam coupled weight decay (default 1e-4)", "--weight-decay"),
        "batch_size": integer(1, "mini-batch size in cells (default 512)", "--batch-size"),
        "max_epochs": integer(1, "training epochs (default 30)", "--epochs"),
        "ordered_asymptotes": switch("d = sigmoid(p3) as the reference (d > c not enforced)", "--reference-head",
                                     switch_value=False),
        "validation_fraction": Setting(in_unit_interval, "share of cells for early stopping (default 0: none)",
                                       "--validation-fraction", type=float),
        "patience": integer(1, "early-stopping patience in epochs (default 4)", "--patience"),
        "min_delta": non_negative(),
        "item_prior": choice(ITEM_PRIORS, "priors a ~ Normal(0, s^2), theta ~ Normal(0, 9) in training: normal "
                             "(default) or none (the reference loss)", "--item-prior"),
        "slope_prior_sd": positive("prior SD s of the native slopes (default 1)", "--slope-prior-sd"),
        "prior_precision": positive("Laplace prior precision delta (default 1.0)", "--prior-precision"),
        "tune_prior_precision": switch("maximise the Laplace evidence over delta", "--tune-prior-precision"),
        "curvature": choice(CURVATURES, "Laplace curvature (default fisher)", "--curvature"),
        "temperature": Setting(
            check_temperature,
            "Laplace likelihood temperature: H = GGN / T + delta I (default 1); 'split-half' fits two item "
            "halves and sets T so that the ability SDs match how far the halves disagree; 'mean-loss' sets "
            "T = number of observed cells (the Laplace of the mean training loss, the Laplace-PSN-IRT paper's setting)",
            "--temperature", type=parse_temperature, metavar="T",
        ),
        "dtype": choice(("float32", "float64"), "train in float64 (default float32, as torch)", "--float64",
                        switch_value="float64"),
        "rng": seed(),
        "progress": switch(),
    }
    #: ``to_item_bank`` options; the bank records them, so recalibration exports the same way
    EXPORT_SETTINGS = {
        "standardize": switch("keep the network's theta scale (default: standardise)", "--native-scale",
                              switch_value=False),
        "include_features": switch("omit the b feature matrix (J x (embedding dim + 1)) from /posterior", "--no-features",
                                   switch_value=False),
    }

    def __init__(
        self,
        *,
        hidden_dim: int = 64,
        embedding_dim: int = 128,
        learning_rate: float = 3e-3,
        weight_decay: float = 1e-4,
        batch_size: int = 512,
        max_epochs: int = 30,
        ordered_asymptotes: bool = True,
        validation_fraction: float = 0.0,
        patience: int = 4,
        min_delta: float = 0.0,
        item_prior: str = "normal",
        slope_prior_sd: float = 1.0,
        prior_precision: float = 1.0,
        tune_prior_precision: bool = False,
        curvature: str = "fisher",
        temperature: float | str = 1.0,
        dtype: str = "float32",
        rng=None,
        progress: bool = False,
    ):
        self._store_settings(locals())

    # ------------------------------------------------------------------ fit
    def _fit(self, responses: ResponseData) -> None:
        """Train on the observed cells of ``responses`` and fit the Laplace posteriors."""
        gen = np.random.default_rng(self.rng)
        subj, item, y, tr, val = self._split_cells(responses, gen)
        validation = None if val.size == 0 else (subj[val], item[val], y[val])
        net = PSNNetwork(
            responses.n_subjects,
            responses.n_items,
            hidden_dim=int(self.hidden_dim),
            embedding_dim=int(self.embedding_dim),
            ordered_asymptotes=bool(self.ordered_asymptotes),
            rng=gen,
            dtype=str(self.dtype),
        )
        hist = self._train(net, subj[tr], item[tr], y[tr], validation, gen)
        if not self._record_training(net, hist, validation):
            self._warn_not_converged(int(self.max_epochs), "the validation loss was still improving at the last epoch")
        self._orient(net)
        self.validation_index_ = val
        # the Laplace posterior conditions on every observed cell (validation cells included)
        self._cells = (subj, item, y)
        self._refresh_point_estimates()
        self._check_spread()
        self._fit_posteriors(net, responses, gen)
        self._standardised_outputs(responses)

    def _split_cells(self, responses: ResponseData, gen):
        """(subj, item, y, train positions, validation positions) of the observed cells; the
        validation cells are a random ``validation_fraction`` of them (none by default)."""
        subj, item = np.nonzero(responses.correct >= 0)
        subj = subj.astype(np.int64)
        item = item.astype(np.int64)
        y = responses.correct[subj, item].astype(np.float64)
        tr = np.arange(subj.size)
        val = np.zeros(0, dtype=np.int64)
        if float(self.validation_fraction) > 0:
            n_val = int(round(float(self.validation_fraction) * subj.size))
            if n_val < 1 or n_val >= subj.size:
                raise ValueError(
                    f"validation_fraction={self.validation_fraction} leaves {n_val} validation cells out of {subj.size}"
                )
            perm = gen.permutation(subj.size)
            val, tr = np.sort(perm[:n_val]), np.sort(perm[n_val:])
        return subj, item, y, tr, val

    def _train(self, net, subj, item, y, validation, gen):
        """Train ``net`` on the training cells (with the item and ability priors unless
        ``item_prior="none"``); returns the training history."""
        prior = None
        if self.item_prior == "normal":
            # each prior term spread over the item's / subject's training cells (docs/math.md §3.4)
            per_item = np.bincount(item, minlength=net.n_items)
            per_subject = np.bincount(subj, minlength=net.n_subjects)
            prior = (_per_cell(per_item) / float(self.slope_prior_sd) ** 2, _per_cell(per_subject) / ABILITY_PRIOR_SD**2)
        return fit_network(
            net,
            subj,
            item,
            y,
            learning_rate=float(self.learning_rate),
            weight_decay=float(self.weight_decay),
            batch_size=int(self.batch_size),
            max_epochs=int(self.max_epochs),
            validation=validation,
            patience=int(self.patience),
            min_delta=float(self.min_delta),
            rng=gen,
            progress=bool(self.progress),
            prior=prior,
            prior_start=PRIOR_START_EPOCH,
            prior_min_spread=PRIOR_MIN_SPREAD,
        )

    def _record_training(self, net, hist, validation) -> bool:
        """The network, its training curves and ``converged_`` (a fit with validation cells
        converged when it stopped early or its best epoch was not the last). Returns ``converged_``."""
        self.network_ = net
        self.history_ = hist
        self.loss_trace_ = np.asarray(hist.train_loss)
        self.validation_loss_curve_ = np.asarray(hist.val_loss)
        self.n_iter_ = len(hist.train_loss)
        self.epoch_seconds_ = np.asarray(hist.epoch_seconds)
        if validation is None:
            # the reference trains a fixed number of epochs: nothing to converge
            self.converged_ = True
        else:
            self.converged_ = bool(hist.stopped_early or hist.best_epoch < self.n_iter_)
        return self.converged_

    def _orient(self, net) -> None:
        """Orientation: the likelihood is invariant under (theta, beta, a) -> -(theta, beta, a);
        choose the one in which most items have a positive effective slope (after ordering their
        asymptotes), i.e. larger theta = more correct answers (``orientation_``)."""
        beta, a, c, d = net.item_parameters()
        eff = np.sign(np.where(c > d, -a, a))
        self.orientation_ = 1 if eff.sum() >= 0 else -1
        if self.orientation_ < 0:
            net.reflect()

    def _check_spread(self) -> None:
        """Warn when training collapsed (the abilities barely vary on the network's scale)."""
        spread = float(np.std(self.native_theta_))
        if spread < 1e-3:
            self._warn_convergence(
                f"PSN training collapsed: the abilities barely vary (SD {spread:.2g} on the network's scale), so a "
                "standardised scale and its posterior would be meaningless; with the reference head d starts equal "
                "to c and the 4PL is flat at initialisation - retry with ordered_asymptotes=True or more epochs", stacklevel=3)

    def _fit_posteriors(self, net, responses: ResponseData, gen) -> None:
        """The Laplace temperature (a number, the cell count, or a split-half refit's) and the
        last-layer Laplace posteriors of the abilities and the difficulties."""
        self.split_half_ = None
        if self.temperature == MEAN_LOSS:
            self.temperature_ = float(self._cells[0].size)
        elif self.temperature == SPLIT_HALF:
            halves = type(self)(**{**self.get_params(), "temperature": 1.0, "progress": False})
            self.split_half_ = split_half_check(halves, responses, rng=gen)
            self.temperature_ = max(1.0, self.split_half_.implied_temperature)
        else:
            self.temperature_ = float(self.temperature)
        self.ability_posterior_, self.item_posterior_ = laplace_from_network(
            net,
            self._cells,
            prior_precision=float(self.prior_precision),
            curvature=self.curvature,
            tune=bool(self.tune_prior_precision),
            temperature=self.temperature_,
        )
        self._joint_ab = None

    def _standardised_outputs(self, responses: ResponseData) -> None:
        """The contract's attributes on the bank's scale (to_item_bank's default, standardised):
        theta_ equals the bank's stored thetas and item_params_ its items; item diagnostics (a
        runaway slope makes ``converged_`` False, with a warning)."""
        self._fitted = True  # item_params needs it; fit sets it again after recording the provenance
        mu, sigma = self._scale(True)
        self.theta_ = (self.native_theta_ - mu) / sigma
        self.theta_sd_ = self.ability_posterior_.marginal_sd() / sigma
        self.item_params_ = self.item_params(standardize=True)
        n_right = np.sum(responses.correct == 1, axis=0)
        n_seen = np.sum(responses.correct >= 0, axis=0)
        a_std = self._bank_arrays(True, clip=False)[0]
        self.diagnostics_ = item_diagnostics(responses.item_ids, a_std, perfect=(n_right == 0) | (n_right == n_seen))
        if self.converged_ and not self.diagnostics_.fit_identified:
            self._warn_convergence(f"{type(self).__name__}: {self.diagnostics_.message()}; converged_ is False", stacklevel=4)
            self.converged_ = False

    def fit_summary(self, data) -> str:
        text = (
            f"PSN-IRT: {data.n_subjects} subjects x {data.n_items} items, {self.n_iter_} epochs in {self.elapsed_:.1f} s "
            f"(final loss {self.loss_trace_[-1]:.4f}); Laplace temperature {self.temperature_:.4g}"
        )
        if self.split_half_ is not None:
            text += f"\nsplit-half check at T = 1: {self.split_half_.summary()}"
        return text

    def _refresh_point_estimates(self) -> None:
        net = self.network_
        self.native_theta_ = net.theta()
        self.beta_, self.a_, self.c_, self.d_ = net.item_parameters()

    # ------------------------------------------------------------------ posterior access
    @property
    def cells_(self):
        """(subject index, item index, y) of the observed cells used for fitting."""
        self._check_fitted()
        return self._cells

    def joint_item_posterior(self):
        """Laplace posterior over the b and a rows jointly (the paper's miscalibrated option)."""
        self._check_fitted()
        if self._joint_ab is None:
            net = self.network_
            self._joint_ab = fit_item_posterior(
                net.item_embeddings(),
                net.item_readout(BETA),
                self.native_theta_,
                (self.beta_, self.a_, self.c_, self.d_),
                self._cells,
                a_readout=net.item_readout(A),
                prior_precision=self.item_posterior_.prior_precision,
                curvature=self.curvature,
                temperature=self.item_posterior_.temperature,
            )
        return self._joint_ab

    def predict_proba(self, subjects, items) -> np.ndarray:
        """P(correct) at the MAP for cells given by subject and item indices."""
        self._check_fitted()
        return self.network_.predict_proba(subjects, items)

    def _scale(self, standardize: bool) -> tuple[float, float]:
        if not standardize or self.native_theta_.size < 2:
            return 0.0, 1.0
        mu = float(self.native_theta_.mean())
        sigma = float(self.native_theta_.std())
        if not np.isfinite(sigma) or sigma <= 0:
            return mu, 1.0
        return mu, sigma

    def theta_posterior(self, *, standardize: bool = True) -> dict:
        """Posterior of the calibration subjects' abilities: mean, sd, cov (scale per ``standardize``)."""
        self._check_fitted()
        mu, sigma = self._scale(standardize)
        post = self.ability_posterior_
        cov = post.covariance() / sigma**2
        mean = (post.predictive_mean() - mu) / sigma
        return {"mean": mean, "sd": np.sqrt(np.clip(np.diag(cov), 0, None)), "cov": cov, "location": mu, "scale": sigma}

    def item_params(self, *, standardize: bool = True):
        """Bank-form ``ItemParams("4pl")`` (ordered asymptotes, theta scale per ``standardize``)."""
        from catengine.models.params import ItemParams

        a, b, c, d, _ = self._bank_arrays(standardize)
        return ItemParams("4pl", a=a, b=b, c=c, d=d)

    def _bank_arrays(self, standardize: bool, clip: bool = True):
        """(a, b, c, d, sign): slope-intercept arrays and the per-item flip sign (+1 or -1); with
        ``clip`` slopes and intercepts are held inside the bank's plausible range."""
        self._check_fitted()
        mu, sigma = self._scale(standardize)
        flip = self.c_ > self.d_
        sign = np.where(flip, -1.0, 1.0)
        a_n = sign * self.a_
        c = np.where(flip, self.d_, self.c_)
        d = np.where(flip, self.c_, self.d_)
        same = c >= d  # c == d exactly: a degenerate flat item; keep it legal
        if same.any():
            d = np.where(same, np.minimum(1.0, c + 1e-12), d)
            c = np.where(same & (d <= c), c - 1e-12, c)
        a = a_n * sigma
        b = -a_n * (self.beta_ - mu)
        if clip:
            # separated items of small samples: slopes beyond any bank's plausible range are held at
            # its edge (they are flagged in diagnostics_ as runaway slopes and make converged_ False)
            a = np.clip(a, *PLAUSIBLE_RANGES["a"])
            b = np.clip(b, *PLAUSIBLE_RANGES["b"])
        return a, b, c, d, sign

    # ------------------------------------------------------------------ export
    def _bank_parts(self, *, standardize: bool = True, include_features: bool = True) -> BankParts:
        """The ``4pl`` bank's parts (:meth:`BaseCalibrator.to_item_bank`) with the posterior.

        ``/items``: a, b, c, d and b_sd (posterior SD of the intercept b). ``/subjects``: the
        calibration subjects' theta posterior mean, SD, 95% interval, covariance and
        p_ahead[i, k] = P(theta_i > theta_k). ``/posterior``: the b readout's Gaussian
        (b = b_offset + b_features @ w, w ~ Normal(b_readout_mean, b_readout_cov); the features
        are omitted with ``include_features=False``) and the theta readout's. ``/calibration``:
        training curves. ``standardize=False`` keeps the network's theta scale. The held-out
        check's refits' spread widens b_sd (``held_out_widens_b_sd``).
        """
        mu, sigma = self._scale(standardize)
        a, b, c, d, sign = self._bank_arrays(standardize)
        a_n = sign * self.a_
        beta_sd = self.item_posterior_.marginal_sd()
        b_sd = np.abs(a_n) * beta_sd
        groups = {
            "subjects": self._subjects_group(standardize),
            "calibration": self._calibration_group(sign),
            "posterior": self._posterior_group(a_n, beta_sd, mu, include_features),
        }
        return BankParts("4pl", self.bank_settings(standardize=standardize, include_features=include_features),
                         self._bank_scale(standardize, mu, sigma), {"a": a, "b": b, "c": c, "d": d, "b_sd": b_sd},
                         groups=groups)

    @staticmethod
    def _bank_scale(standardize: bool, mu: float, sigma: float) -> dict:
        """The bank's ``scale`` record: the theta scale and the native-to-bank map."""
        return {
            "theta": "standardised over the calibration subjects' MAP abilities" if standardize else "native PSN-IRT network scale",
            "location": mu,
            "scale": sigma,
            "native_to_bank": "theta = (theta_native - location) / scale; a = a_native * scale; b = -a_native * (beta - location)",
            "ordered_asymptotes": "items with c > d were flipped: (a, c, d) -> (-a, d, c), an identical response function",
        }

    def _subjects_group(self, standardize: bool):
        """``/subjects``: the calibration subjects' theta posterior (mean, SD, 95% interval,
        covariance) and p_ahead[i, k] = P(theta_i > theta_k)."""
        import xarray as xr

        th = self.theta_posterior(standardize=standardize)
        sub_ids = np.asarray(self.subject_ids_, dtype=object)
        pa = p_ahead(th["mean"], th["cov"])
        return xr.Dataset(
            {
                "theta": ("subject", th["mean"], {"long_name": "ability (posterior mean = MAP)"}),
                "theta_sd": ("subject", th["sd"], {"long_name": "posterior SD of theta (last-layer Laplace, items at MAP)"}),
                "theta_lower": ("subject", th["mean"] - Z95 * th["sd"], {"long_name": "95% credible interval, lower end"}),
                "theta_upper": ("subject", th["mean"] + Z95 * th["sd"], {"long_name": "95% credible interval, upper end"}),
                "theta_cov": (("subject", "rival"), th["cov"], {"long_name": "posterior covariance of theta_subject and theta_rival"}),
                "p_ahead": (("subject", "rival"), pa, {"long_name": "P(theta_subject > theta_rival)", "description": "Phi((m_i - m_k) / sqrt(v_i + v_k - 2 c_ik)); 0.5 on the diagonal"}),
            },
            coords={"subject": ("subject", sub_ids), "rival": ("rival", sub_ids.copy())},
            attrs={"n_separated_pairs": n_separated_pairs(pa), "n_pairs": int(len(sub_ids) * (len(sub_ids) - 1) // 2)},
        )

    def _posterior_group(self, a_n, beta_sd, mu: float, include_features: bool):
        """``/posterior``: the Gaussians of the difficulty readout (b = b_offset + b_features @ w)
        and of the ability readout, with the Laplace settings and evidences (and the split-half
        check's figures when the temperature came from it). ``a_n``: native slopes after the
        asymptote flip; ``beta_sd``: posterior SDs of the native difficulties; ``mu``: the theta
        location of the bank's scale."""
        import xarray as xr

        ipost = self.item_posterior_
        apost = self.ability_posterior_
        P = ipost.features.shape[1]
        post_vars = {
            "b_readout_mean": ("weight", np.asarray(ipost.mean), {"long_name": "posterior mean of the difficulty readout weights w"}),
            "b_readout_cov": (("weight", "weight_b"), np.asarray(ipost.covariance_weights), {"long_name": "posterior covariance of w"}),
            "b_offset": ("item", a_n * mu, {"long_name": "b = b_offset + b_features @ w"}),
            "beta_sd": ("item", beta_sd, {"long_name": "posterior SD of the native difficulty beta (b_sd = |a_native| beta_sd)"}),
            "theta_readout_mean": ("weight", np.asarray(apost.mean), {"long_name": "posterior mean of the ability readout weights"}),
            "theta_readout_cov": (("weight", "weight_b"), np.asarray(apost.covariance_weights), {"long_name": "posterior covariance of the ability readout weights"}),
        }
        if include_features:
            post_vars["b_features"] = (("item", "weight"), -a_n[:, None] * ipost.features, {"long_name": "b = b_offset + b_features @ w"})
        posterior = xr.Dataset(
            post_vars,
            coords={"item": ("item", np.asarray(self.item_ids_, dtype=object)), "weight": np.arange(P), "weight_b": np.arange(P)},
            attrs={
                "kind": "gaussian (last-layer Laplace, scoped: b random; a, c, d at MAP)",
                "draws": "w ~ Normal(b_readout_mean, b_readout_cov); b = b_offset + b_features @ w (correlated across items)",
                "prior_precision_b": float(ipost.prior_precision),
                "prior_precision_theta": float(apost.prior_precision),
                "prior_tuned": int(bool(ipost.tuned)),
                "curvature": self.curvature,
                "temperature": float(ipost.temperature),
                "temperature_setting": str(self.temperature),
                "log_evidence_b": float(ipost.log_marginal_likelihood()),
                "log_evidence_theta": float(apost.log_marginal_likelihood()),
                "n_cells": int(ipost.n_cells),
                "features_included": int(bool(include_features)),
            },
        )
        if self.split_half_ is not None:
            sh = self.split_half_
            posterior.attrs.update({
                "split_half_rms_z": sh.rms_z,  # at T = 1; the temperature used is max(1, rms_z^2)
                "split_half_order_agreement": sh.order_agreement,
                "split_half_expected_order_agreement": sh.expected_order_agreement,
            })
        return posterior

    def _calibration_group(self, sign):
        """``/calibration``: the training curves and the fit's settings and diagnostics (``sign``:
        the per-item asymptote flip, -1 for flipped items)."""
        import xarray as xr

        hist = self.history_
        cal_vars = {
            "train_loss": ("epoch", self.loss_trace_, {"long_name": "mean mini-batch BCE over the epoch"}),
            "epoch_seconds": ("epoch", self.epoch_seconds_),
        }
        if self.validation_loss_curve_.size:
            cal_vars["validation_loss"] = ("epoch", self.validation_loss_curve_)
        return xr.Dataset(
            cal_vars,
            coords={"epoch": np.arange(1, self.n_iter_ + 1)},
            attrs={
                "n_iter": int(self.n_iter_),
                "converged": int(bool(self.converged_)),
                "best_epoch": int(hist.best_epoch),
                "stopped_early": int(bool(hist.stopped_early)),
                "n_flipped_items": int(np.sum(sign < 0)),
                "item_prior": str(self.item_prior),
                "slope_prior_sd": float(self.slope_prior_sd),
                "prior_epoch": int(hist.prior_epoch),
                "diagnostics": json.dumps(self.diagnostics_.summary()),
                "fit_seconds": float(self.elapsed_),
            },
        )
