"""The PSN-IRT network in numpy/numba: embedding tables, hand-derived backpropagation, Adam.

Architecture (docs/math.md §3; the reference ``train.py`` of Zhou et al.):

    subject i:  h = relu(S[i] + s_b1)            S: (N, H) table = Linear(N, H) on a one-hot
                u = h @ s_W2 + s_b2               (E,) ability embedding
                theta = u @ t_w + t_b             ability readout ("student_ability_out")
    item j:     g = relu(I[j] + i_b1)            I: (J, H) table = Linear(J, H) on a one-hot
                v = g @ i_W2 + i_b2               (E,) item embedding
                (beta, a, p2, p3) = v @ i_W + i_b item readout ("item_param_out")
    P = c + (d - c) sigmoid(a (theta - beta)), c = sigmoid(p2),
    d = sigmoid(p3) (reference) or c + (1 - c) sigmoid(p3) (``ordered_asymptotes``).

A one-hot input times a Linear layer is a row lookup, so the first layers are embedding tables.
Initialisation follows ``torch.nn.Linear`` (weights and biases U(-1/sqrt(fan_in), 1/sqrt(fan_in)),
fan_in = N or J for the tables). The loss is the mean binary cross-entropy over a mini-batch of
observed (subject, item, label) cells, minimised by Adam with coupled weight decay (torch's
``weight_decay``) applied to every parameter, tables included (see ``_kernels`` for the exact lazy
table update).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from calibration.methods.psn import _kernels as K
from catengine.validation import is_integer

#: dense parameters in storage order: name -> shape factory (H hidden, E embedding)
_DENSE = (
    ("s_b1", lambda H, E: (H,)),
    ("s_W2", lambda H, E: (H, E)),
    ("s_b2", lambda H, E: (E,)),
    ("t_w", lambda H, E: (E,)),
    ("t_b", lambda H, E: (1,)),
    ("i_b1", lambda H, E: (H,)),
    ("i_W2", lambda H, E: (H, E)),
    ("i_b2", lambda H, E: (E,)),
    ("i_W", lambda H, E: (E, 4)),
    ("i_b", lambda H, E: (4,)),
)
DENSE_NAMES = tuple(name for name, _ in _DENSE)
TABLE_NAMES = ("S", "I")
PARAM_NAMES = TABLE_NAMES + DENSE_NAMES

#: columns of the item readout output
BETA, A, P2, P3 = 0, 1, 2, 3


class PSNNetwork:
    """Parameters and forward/backward passes of one PSN-IRT network.

    ``dtype`` float64 (default; exact gradient checks) or float32 (what torch trains in; halves
    the cost of the lazy table updates). Readouts (``theta``, ``item_parameters``, embeddings)
    are always returned as float64.

    Attributes: ``S`` (N, H), ``I`` (J, H) embedding tables; the dense parameters listed in
    ``DENSE_NAMES`` are views into one flat vector ``dense`` (so one Adam call updates them all).
    """

    def __init__(
        self,
        n_subjects: int,
        n_items: int,
        *,
        hidden_dim: int = 64,
        embedding_dim: int = 128,
        ordered_asymptotes: bool = False,
        rng=None,
        dtype="float64",
    ):
        for name, value in (("n_subjects", n_subjects), ("n_items", n_items), ("hidden_dim", hidden_dim), ("embedding_dim", embedding_dim)):
            if not is_integer(value) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        self.n_subjects = int(n_subjects)
        self.n_items = int(n_items)
        self.hidden_dim = H = int(hidden_dim)
        self.embedding_dim = E = int(embedding_dim)
        self.ordered_asymptotes = bool(ordered_asymptotes)
        self.dtype = np.dtype(dtype)
        if self.dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
            raise ValueError(f"dtype must be float32 or float64, got {dtype!r}")
        sizes = [int(np.prod(shape(H, E))) for _, shape in _DENSE]
        self.dense = np.zeros(sum(sizes), dtype=self.dtype)
        self._bind_views()
        gen = np.random.default_rng(rng)
        # torch.nn.Linear init: U(-k, k), k = 1/sqrt(fan_in), for weight and bias alike
        k_s, k_i, k_h, k_e = (1.0 / math.sqrt(x) for x in (self.n_subjects, self.n_items, H, E))
        self.S = gen.uniform(-k_s, k_s, (self.n_subjects, H)).astype(self.dtype)
        self.s_b1[:] = gen.uniform(-k_s, k_s, H)
        self.s_W2[:] = gen.uniform(-k_h, k_h, (H, E))
        self.s_b2[:] = gen.uniform(-k_h, k_h, E)
        self.t_w[:] = gen.uniform(-k_e, k_e, E)
        self.t_b[:] = gen.uniform(-k_e, k_e, 1)
        self.I = gen.uniform(-k_i, k_i, (self.n_items, H)).astype(self.dtype)
        self.i_b1[:] = gen.uniform(-k_i, k_i, H)
        self.i_W2[:] = gen.uniform(-k_h, k_h, (H, E))
        self.i_b2[:] = gen.uniform(-k_h, k_h, E)
        self.i_W[:] = gen.uniform(-k_e, k_e, (E, 4))
        self.i_b[:] = gen.uniform(-k_e, k_e, 4)
        self.clear_prior()

    # ------------------------------------------------------------------ prior
    def set_prior(self, slope_penalty, subject_penalty) -> None:
        """Zero-mean quadratic penalties on the slopes a_j and the abilities theta_i, added to the
        training loss (``_kernels.prior_loss_grad``; ``PSNCalibrator(item_prior="normal")`` sets them).

        ``slope_penalty`` (J,) and ``subject_penalty`` (N,): per-cell weights (a prior precision
        divided by the item's / subject's number of observed cells). Zeros (``clear_prior``) give
        the plain PSN-IRT loss.
        """
        sp = np.ascontiguousarray(slope_penalty, dtype=np.float64)
        tp = np.ascontiguousarray(subject_penalty, dtype=np.float64)
        for name, arr, n in (("slope_penalty", sp, self.n_items), ("subject_penalty", tp, self.n_subjects)):
            if arr.shape != (n,) or not np.all(np.isfinite(arr)) or np.any(arr < 0):
                raise ValueError(f"{name} must hold {n} finite non-negative weights, got shape {arr.shape}")
        self.prior = (sp, tp)

    def clear_prior(self) -> None:
        self.prior = (np.zeros(self.n_items), np.zeros(self.n_subjects))

    def _bind_views(self) -> None:
        H, E = self.hidden_dim, self.embedding_dim
        offset = 0
        for name, shape in _DENSE:
            shp = shape(H, E)
            size = int(np.prod(shp))
            setattr(self, name, self.dense[offset : offset + size].reshape(shp))
            offset += size

    # ------------------------------------------------------------------ state
    def get_state(self) -> dict[str, np.ndarray]:
        """Copies of every parameter array (tables and dense parameters), by name."""
        return {name: np.array(getattr(self, name), copy=True) for name in PARAM_NAMES}

    def set_state(self, state: dict) -> None:
        """Overwrite the parameters from a ``get_state`` dict (shapes must match)."""
        for name in PARAM_NAMES:
            target = getattr(self, name)
            value = np.asarray(state[name], dtype=self.dtype)
            if value.shape != target.shape:
                raise ValueError(f"parameter {name!r} has shape {value.shape}, expected {target.shape}")
            target[...] = value

    def copy(self) -> "PSNNetwork":
        new = object.__new__(PSNNetwork)
        new.__dict__.update({k: v for k, v in self.__dict__.items() if not isinstance(v, np.ndarray)})
        new.dense = self.dense.copy()
        new._bind_views()
        new.S = self.S.copy()
        new.I = self.I.copy()
        new.prior = (self.prior[0].copy(), self.prior[1].copy())
        return new

    def reflect(self) -> None:
        """Mirror the latent scale in place: theta -> -theta, beta -> -beta, a -> -a.

        z = a (theta - beta) is unchanged, so every prediction is identical; PSN-IRT's likelihood
        cannot tell the two orientations apart (the calibrator picks one, see ``PSNCalibrator``).
        """
        self.t_w *= -1
        self.t_b *= -1
        self.i_W[:, [BETA, A]] *= -1
        self.i_b[[BETA, A]] *= -1

    # ------------------------------------------------------------------ forward
    def _f64(self, name):
        return np.asarray(getattr(self, name), dtype=np.float64)

    def subject_embeddings(self, idx=None) -> np.ndarray:
        """Ability embeddings u (n, E) of the listed subjects (all when ``idx`` is None), float64."""
        rows = self._f64("S") if idx is None else self._f64("S")[idx]
        return np.maximum(rows + self._f64("s_b1"), 0.0) @ self._f64("s_W2") + self._f64("s_b2")

    def item_embeddings(self, idx=None) -> np.ndarray:
        """Item embeddings v (n, E) of the listed items (all when ``idx`` is None), float64."""
        rows = np.asarray(self.I if idx is None else self.I[idx], dtype=np.float64)
        return np.maximum(rows + self._f64("i_b1"), 0.0) @ self._f64("i_W2") + self._f64("i_b2")

    @property
    def theta_readout(self) -> np.ndarray:
        """Ability readout weights [t_w; t_b] (E + 1,), float64: theta = [u; 1] . w."""
        return np.concatenate([self._f64("t_w"), self._f64("t_b")])

    def item_readout(self, column: int) -> np.ndarray:
        """Item readout weights [i_W[:, k]; i_b[k]] (E + 1,) of output ``column`` (0 beta, 1 a, ...)."""
        return np.concatenate([self._f64("i_W")[:, column], self._f64("i_b")[column : column + 1]])

    def theta(self, idx=None) -> np.ndarray:
        """Abilities theta (n,) (native network scale), float64."""
        return self.subject_embeddings(idx) @ self._f64("t_w") + float(self.t_b[0])

    def item_outputs(self, idx=None) -> np.ndarray:
        """Raw item readout (n, 4): beta, a, p2, p3 (float64)."""
        return self.item_embeddings(idx) @ self._f64("i_W") + self._f64("i_b")

    def asymptotes(self, p2, p3) -> tuple[np.ndarray, np.ndarray]:
        """(c, d) from the raw outputs p2, p3."""
        c = _sigmoid(np.asarray(p2, dtype=np.float64))
        r = _sigmoid(np.asarray(p3, dtype=np.float64))
        if self.ordered_asymptotes:
            return c, c + (1.0 - c) * r
        return c, r

    def item_parameters(self, idx=None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Native 4PL parameters (beta, a, c, d), each (n,): P = c + (d - c) sigmoid(a (theta - beta))."""
        out = self.item_outputs(idx)
        c, d = self.asymptotes(out[:, P2], out[:, P3])
        return out[:, BETA].copy(), out[:, A].copy(), c, d

    def predict_proba(self, subj, item) -> np.ndarray:
        """P(correct) of the listed cells."""
        subj, item = _as_index(subj, self.n_subjects, "subject"), _as_index(item, self.n_items, "item")
        beta, a, c, d = self.item_parameters()
        return K.cell_probabilities(self.theta(), beta, a, c, d, subj, item)

    def loss(self, subj, item, y, *, include_prior: bool = False) -> float:
        """Mean binary cross-entropy over the listed cells (evaluated in chunks); with
        ``include_prior=True`` plus the prior's per-cell share (``set_prior``), the objective whose
        gradient ``forward_backward`` returns."""
        subj, item = _as_index(subj, self.n_subjects, "subject"), _as_index(item, self.n_items, "item")
        y = np.ascontiguousarray(y, dtype=np.float64)
        n = subj.shape[0]
        if n == 0:
            raise ValueError("loss needs at least one cell")
        theta = self.theta()
        out = self.item_outputs()
        total = 0.0
        chunk = 65536
        g_t = np.empty(min(chunk, n))
        g_o = np.empty((min(chunk, n), 4))
        for start in range(0, n, chunk):
            sl = slice(start, min(start + chunk, n))
            m = sl.stop - sl.start
            total += K.cell_loss_grad(
                np.ascontiguousarray(theta[subj[sl]]),
                np.ascontiguousarray(out[item[sl]]),
                y[sl],
                self.ordered_asymptotes,
                1.0,
                g_t[:m],
                g_o[:m],
            )
            if include_prior:
                total += K.prior_loss_grad(np.ascontiguousarray(theta[subj[sl]]), np.ascontiguousarray(out[item[sl]]),
                                           subj[sl], item[sl], self.prior, 1.0, g_t[:m], g_o[:m])
        return total / n

    # ------------------------------------------------------------------ backward
    def forward_backward(self, subj, item, y):
        """Mean BCE of one mini-batch (plus the prior's share, ``set_prior``) and its gradient.

        Returns ``(loss, g_dense, g_S_rows, g_I_rows)``: ``g_dense`` is the gradient of the flat
        dense vector; the table gradients are per cell (row ``subj[n]`` of S receives
        ``g_S_rows[n]``; repeated rows add up).

        The readouts have 1 and 4 outputs, so the second linear layer and the readout fold into
        one (H, 1) / (H, 4) map: theta = h @ (s_W2 t_w) + (s_b2 . t_w + t_b), and every gradient
        is a rank-1 or rank-4 product. A batch costs O(B H) instead of O(B H E).
        """
        B = subj.shape[0]
        dt = self.dtype
        H = self.hidden_dim
        m_s = np.asarray(self.s_W2 @ self.t_w, dtype=np.float64)
        c_s = np.asarray([self.s_b2 @ self.t_w + self.t_b[0]], dtype=np.float64)
        M_i = np.ascontiguousarray(self.i_W2 @ self.i_W, dtype=np.float64)
        c_i = np.asarray(self.i_b2 @ self.i_W + self.i_b, dtype=np.float64)
        g_hs = np.empty((B, H), dtype=dt)
        g_hi = np.empty((B, H), dtype=dt)
        a_s = np.empty(H)
        A = np.empty((H, 4))
        sums = np.empty(5)
        loss = K.batch_forward_backward(
            self.S, self.I, subj, item, y, self.s_b1, m_s[:, None], c_s, self.i_b1, M_i, c_i,
            self.ordered_asymptotes, self.prior, g_hs, g_hi, a_s, A, sums,
        )
        sg, so = sums[0], sums[1:].astype(dt)
        a_s, A = a_s.astype(dt), A.astype(dt)
        g = np.empty_like(self.dense)
        gv = _views(g, self.hidden_dim, self.embedding_dim)
        gv["t_w"][:] = self.s_W2.T @ a_s + self.s_b2 * sg
        gv["t_b"][0] = sg
        gv["s_W2"][:] = np.multiply.outer(a_s, self.t_w)
        gv["s_b2"][:] = self.t_w * sg
        gv["s_b1"][:] = g_hs.sum(axis=0)
        gv["i_W"][:] = self.i_W2.T @ A + np.multiply.outer(self.i_b2, so)
        gv["i_b"][:] = so
        gv["i_W2"][:] = A @ self.i_W.T
        gv["i_b2"][:] = self.i_W @ so
        gv["i_b1"][:] = g_hi.sum(axis=0)
        return loss, g, g_hs, g_hi

    def loss_and_grad(self, subj, item, y) -> tuple[float, dict[str, np.ndarray]]:
        """Mean BCE over the listed cells and the full gradient of every parameter, by name.

        A convenience (dense table gradients) for checks; training uses ``forward_backward``.
        """
        subj, item = _as_index(subj, self.n_subjects, "subject"), _as_index(item, self.n_items, "item")
        y = np.ascontiguousarray(y, dtype=self.dtype)
        loss, g, g_s, g_i = self.forward_backward(subj, item, y)
        grads = {name: np.array(arr, copy=True) for name, arr in _views(g, self.hidden_dim, self.embedding_dim).items()}
        gS = np.zeros_like(self.S)
        np.add.at(gS, subj, g_s)
        gI = np.zeros_like(self.I)
        np.add.at(gI, item, g_i)
        grads["S"] = gS
        grads["I"] = gI
        return loss, grads


def _views(flat: np.ndarray, H: int, E: int) -> dict[str, np.ndarray]:
    out, offset = {}, 0
    for name, shape in _DENSE:
        shp = shape(H, E)
        size = int(np.prod(shp))
        out[name] = flat[offset : offset + size].reshape(shp)
        offset += size
    return out


def _sigmoid(x: np.ndarray) -> np.ndarray:
    out = np.empty_like(x)
    pos = x >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-x[pos]))
    e = np.exp(x[~pos])
    out[~pos] = e / (1.0 + e)
    return out


def _as_index(idx, n: int, kind: str) -> np.ndarray:
    arr = np.asarray(idx)
    if arr.ndim != 1:
        raise ValueError(f"{kind} indices must be one-dimensional, got shape {arr.shape}")
    if arr.size and (arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer)):
        raise TypeError(f"{kind} indices must be integers, got dtype {arr.dtype}")
    arr = np.ascontiguousarray(arr, dtype=np.int64)
    if arr.size and (arr.min() < 0 or arr.max() >= n):
        bad = arr[(arr < 0) | (arr >= n)][0]
        raise ValueError(f"{kind} index {int(bad)} is out of range (0..{n - 1})")
    return arr


# ---------------------------------------------------------------------------------------- Adam


class Adam:
    """``torch.optim.Adam`` (betas 0.9/0.999, eps 1e-8) with coupled weight decay, for a PSNNetwork.

    Dense parameters are updated every step; table rows lazily but exactly (``_kernels``).
    Call :meth:`flush` before reading the tables (``fit_network`` does so after every epoch).
    """

    def __init__(self, net: PSNNetwork, *, lr=3e-3, weight_decay=1e-4, betas=(0.9, 0.999), eps=1e-8):
        self.net = net
        self.lr = float(lr)
        self.weight_decay = float(weight_decay)
        self.b1, self.b2 = (float(b) for b in betas)
        self.eps = float(eps)
        self.t = 0
        self.m_dense = np.zeros_like(net.dense)
        self.v_dense = np.zeros_like(net.dense)
        self._tables = {}
        for name in TABLE_NAMES:
            tab = getattr(net, name)
            self._tables[name] = (
                np.zeros_like(tab),
                np.zeros_like(tab),
                np.zeros(tab.shape[0], dtype=np.int64),
                np.full(tab.shape[0], -1, dtype=np.int64),
            )

        self._c = np.array([self.lr, self.b1, self.b2, self.eps, self.weight_decay])
        self._fac = K.step_factors(1024, self._c, net.dtype)

    def _factors(self):
        """Per-step bias-correction table covering step t (grown by doubling)."""
        if self._fac.shape[0] <= self.t:
            self._fac = K.step_factors(2 * self.t, self._c, self.net.dtype)
        return self._fac

    def step(self, g_dense, subj, g_s_rows, item, g_i_rows) -> None:
        self.t += 1
        net = self.net
        K.adam_dense(net.dense, g_dense, self.m_dense, self.v_dense, self.t, self._c)
        fac = self._factors()
        for name, idx, rows in (("S", subj, g_s_rows), ("I", item, g_i_rows)):
            m, v, last, slot = self._tables[name]
            acc = np.empty_like(rows)
            K.adam_rows(getattr(net, name), m, v, last, idx, rows, self.t, self._c, slot, acc, fac)

    def flush(self) -> None:
        """Apply every pending weight-decay-only step to the table rows (now exact up to step t)."""
        for name in TABLE_NAMES:
            m, v, last, _ = self._tables[name]
            K.adam_flush_rows(getattr(self.net, name), m, v, last, self.t, self._c, self._factors())


# ---------------------------------------------------------------------------------------- training


@dataclass
class TrainingHistory:
    """Per-epoch record of :func:`fit_network`."""

    train_loss: list = field(default_factory=list)  # mean mini-batch loss over each epoch
    val_loss: list = field(default_factory=list)  # mean BCE on the validation cells (if any)
    epoch_seconds: list = field(default_factory=list)  # wall clock
    epoch_cpu_seconds: list = field(default_factory=list)  # this process's CPU time (load-robust)
    best_epoch: int = 0  # 1-based epoch whose parameters were kept
    stopped_early: bool = False
    n_steps: int = 0
    prior_epoch: int = 0  # first epoch trained with the prior (0: none)


def fit_network(
    net: PSNNetwork,
    subj: np.ndarray,
    item: np.ndarray,
    y: np.ndarray,
    *,
    learning_rate: float = 3e-3,
    weight_decay: float = 1e-4,
    batch_size: int = 512,
    max_epochs: int = 30,
    validation: tuple | None = None,
    patience: int = 4,
    min_delta: float = 0.0,
    rng=None,
    progress: bool = False,
    callback=None,
    prior=None,
    prior_start: int = 1,
    prior_min_spread: float = 0.0,
) -> TrainingHistory:
    """Train ``net`` in place on observed cells (subj, item, y) with shuffled mini-batches.

    Each epoch visits every training cell once in a fresh random order (``rng``); the last batch
    may be smaller (as torch's DataLoader). With ``validation = (subj, item, y)`` the validation
    loss is computed after every epoch; training stops when it has not improved by ``min_delta``
    for ``patience`` epochs, and the parameters of the best epoch are restored.
    ``callback(epoch, history)`` is called after every epoch. ``prior = (slope_penalty,
    subject_penalty)`` (``PSNNetwork.set_prior``) is added to the loss from the first epoch at or
    after ``prior_start`` that begins with the abilities' SD at least ``prior_min_spread``; earlier
    epochs train the plain loss (``history.prior_epoch`` records when it started; 0: never).
    """
    gen = np.random.default_rng(rng)
    subj = np.ascontiguousarray(subj, dtype=np.int64)
    item = np.ascontiguousarray(item, dtype=np.int64)
    y = np.ascontiguousarray(y, dtype=net.dtype)
    n = subj.shape[0]
    if n == 0:
        raise ValueError("no observed cells to train on")
    opt = Adam(net, lr=learning_rate, weight_decay=weight_decay)
    net.clear_prior()
    hist = TrainingHistory()
    best_state, best_val, since_best = None, np.inf, 0
    n_batches = -(-n // batch_size)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=max_epochs * n_batches, desc="PSN-IRT", unit="batch", leave=False)
    try:
        for epoch in range(1, max_epochs + 1):
            t0 = time.perf_counter()
            c0 = time.process_time()
            if prior is not None and not hist.prior_epoch and epoch >= prior_start \
                    and float(np.std(net.theta())) >= prior_min_spread:
                net.set_prior(*prior)
                hist.prior_epoch = epoch
            order = gen.permutation(n)
            s_ep, i_ep, y_ep = subj[order], item[order], y[order]
            total = 0.0
            for start in range(0, n, batch_size):
                stop = min(start + batch_size, n)
                s_b, i_b, y_b = s_ep[start:stop], i_ep[start:stop], y_ep[start:stop]
                loss, g, g_s, g_i = net.forward_backward(s_b, i_b, y_b)
                opt.step(g, s_b, g_s, i_b, g_i)
                total += loss
                if bar is not None:
                    bar.update(1)
            opt.flush()
            hist.train_loss.append(total / n_batches)
            hist.n_steps = opt.t
            if validation is not None:
                val = net.loss(*validation)
                hist.val_loss.append(val)
                if val < best_val - min_delta:
                    best_val, since_best = val, 0
                    best_state = net.get_state()
                    hist.best_epoch = epoch
                else:
                    since_best += 1
            else:
                hist.best_epoch = epoch
            hist.epoch_seconds.append(time.perf_counter() - t0)
            hist.epoch_cpu_seconds.append(time.process_time() - c0)
            if bar is not None:
                bar.set_postfix(epoch=epoch, loss=f"{hist.train_loss[-1]:.4f}")
            if callback is not None:
                callback(epoch, hist)
            if validation is not None and since_best >= patience:
                hist.stopped_early = True
                break
    finally:
        if bar is not None:
            bar.close()
    if best_state is not None:
        net.set_state(best_state)
    return hist
