"""Does the PSN ability posterior match how much abilities move when the network is refitted?

The last-layer Laplace posterior is conditional: the network's features and the items are held at
their MAP, and the theta scale of a neural 4PL is identified only up to a (near-)monotone warp.
Its SDs therefore say how precisely *this* fit pins theta down, not how far a refit would move
it. These helpers measure the latter directly:

* :func:`compare_ability_fits` puts two fits of the same subjects on a common scale (each
  standardised over the shared subjects, as banks are) and reports z_i = (m_i - m'_i) /
  sqrt(s_i^2 + s'_i^2). If each posterior described its fit's error, z would be roughly standard
  normal: RMS z ~ 1. Since SDs grow like sqrt(T) with the likelihood temperature T (while the data
  dominate the prior), mean(z^2) is the temperature at which the two fits' SDs would match their
  disagreement. It also compares the share of subject pairs the two fits order alike with the
  share their ``p_ahead`` matrices expect to agree.
* :func:`split_half_check` refits a calibrator's settings on two random, disjoint halves of the
  items and compares the halves.

Measured on the seed-002 data (``benchmarks/psn_laplace.py``, section 7): with the plain posterior
(T = 1) RMS z was 11 for a refit with another training seed and 18 for the two item halves, while
the two halves ordered 97.0% of the 66 pairs alike, as their posteriors expected; with
temperature="mean-loss" RMS z was about 0.1 (SDs ~10x too wide).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from calibration.data import ResponseData
from calibration.methods.psn.laplace import p_ahead


@dataclass(frozen=True)
class RefitComparison:
    """Two fits' abilities for the same subjects, each standardised over those subjects."""

    subject_ids: tuple
    mean: tuple  # (first fit, second fit), each (n,)
    sd: tuple
    z: np.ndarray  # (m - m') / sqrt(s^2 + s'^2)
    order_agreement: float  # share of subject pairs both fits order alike
    expected_order_agreement: float  # the same share as the two posteriors expect it
    item_halves: tuple | None = None  # split_half_check: item indices of each half
    fits: tuple | None = None  # split_half_check: the two fitted calibrators

    @property
    def rms_z(self) -> float:
        return float(np.sqrt(np.mean(self.z**2)))

    @property
    def max_abs_z(self) -> float:
        return float(np.max(np.abs(self.z)))

    @property
    def implied_temperature(self) -> float:
        """mean(z^2): the likelihood temperature at which the fits' SDs match their disagreement."""
        return float(np.mean(self.z**2))

    def summary(self) -> str:
        return (
            f"{len(self.subject_ids)} subjects: RMS z {self.rms_z:.2f} (max |z| {self.max_abs_z:.2f}; ~1 if the SDs are "
            f"honest, implied temperature {self.implied_temperature:.3g}); pair orders agree {self.order_agreement:.3f} "
            f"(posteriors expect {self.expected_order_agreement:.3f})"
        )


def _standardised(mean, cov):
    mean = np.asarray(mean, dtype=np.float64)
    cov = np.asarray(cov, dtype=np.float64)
    mu, sigma = mean.mean(), mean.std()
    if not np.isfinite(sigma) or sigma <= 0:
        raise ValueError("a fit's abilities do not vary over the shared subjects; cannot put them on a common scale")
    return (mean - mu) / sigma, cov / sigma**2


def compare_posteriors(subject_ids, first, second) -> RefitComparison:
    """Compare two ability posteriors ``(mean, cov)`` of the same subjects (in the same order)."""
    (m1, c1), (m2, c2) = (_standardised(*first), _standardised(*second))
    n = m1.size
    if n < 3 or m2.size != n or c1.shape != (n, n) or c2.shape != (n, n):
        raise ValueError(f"need two posteriors over the same >= 3 subjects, got means of sizes {m1.size} and {m2.size}")
    s1, s2 = np.sqrt(np.clip(np.diag(c1), 0, None)), np.sqrt(np.clip(np.diag(c2), 0, None))
    z = (m1 - m2) / np.sqrt(s1**2 + s2**2)
    iu = np.triu_indices(n, 1)
    agree = np.sign(m1[:, None] - m1[None, :])[iu] == np.sign(m2[:, None] - m2[None, :])[iu]
    p1, p2 = p_ahead(m1, c1)[iu], p_ahead(m2, c2)[iu]
    expected = p1 * p2 + (1 - p1) * (1 - p2)  # the two fits independent given their posteriors
    return RefitComparison(tuple(subject_ids), (m1, m2), (s1, s2), z, float(agree.mean()), float(expected.mean()))


def compare_ability_fits(first, second, *, temperatures=(None, None)) -> RefitComparison:
    """Compare the ability posteriors of two fitted :class:`PSNCalibrator` s on their shared subjects.

    ``temperatures``: optional Laplace temperatures to apply to each fit's ability posterior first
    (e.g. the number of cells, for the mean-loss scaling); None keeps the fit's own.
    """
    ids1, ids2 = list(first.subject_ids_), list(second.subject_ids_)
    in_second = set(ids2)
    shared = [s for s in ids1 if s in in_second]
    if len(shared) < 3:
        raise ValueError(f"the two fits share {len(shared)} subjects; need at least 3")
    posts = []
    for fit, ids, temp in ((first, ids1, temperatures[0]), (second, ids2, temperatures[1])):
        post = fit.ability_posterior_ if temp is None else fit.ability_posterior_.with_temperature(float(temp))
        position = {s: k for k, s in enumerate(ids)}
        idx = np.array([position[s] for s in shared])
        posts.append((post.predictive_mean(idx), post.covariance(idx)))
    return compare_posteriors(shared, *posts)


def split_half_check(calibrator, responses: ResponseData, *, rng=None) -> RefitComparison:
    """Refit ``calibrator``'s settings on two random disjoint halves of the items and compare.

    The calibrator itself is not modified; each half is fitted by a fresh instance with the same
    settings (and the same ``rng`` setting, so both halves train from the same initial draw).
    Only subjects with observed answers in both halves are compared.
    """
    if not isinstance(responses, ResponseData):
        raise TypeError(f"split_half_check expects a calibration.ResponseData, got {type(responses).__name__}")
    if responses.n_items < 4:
        raise ValueError(f"need at least 4 items to split into halves, got {responses.n_items}")
    perm = np.random.default_rng(rng).permutation(responses.n_items)
    halves = (np.sort(perm[: responses.n_items // 2]), np.sort(perm[responses.n_items // 2:]))
    observed = responses.correct >= 0
    both = observed[:, halves[0]].any(axis=1) & observed[:, halves[1]].any(axis=1)
    if both.sum() < 3:
        raise ValueError(f"only {int(both.sum())} subjects answered items in both halves; need at least 3")
    subjects = np.flatnonzero(both)
    fits = [type(calibrator)(**calibrator.get_params()).fit(responses.subset(subjects=subjects, items=h)) for h in halves]
    out = compare_ability_fits(*fits)
    return RefitComparison(out.subject_ids, out.mean, out.sd, out.z, out.order_agreement, out.expected_order_agreement, halves, tuple(fits))
