"""Folds of calibration LLMs for every cross-fitted check (interval and score checks, the trait
audit, the choice of the number of score factors): rows of one LLM group stay in one fold.

A benchmark's rows are often several runs of one LLM (its zero-shot and one-shot prompts, seeds,
quantisations). Their answers agree item by item far more than two different LLMs' do, so a check
whose held-out run has a sibling in the training folds measures how well the bank knows that LLM,
not a new one. ``ResponseData.subject_groups`` says which rows belong together; without it every
row is its own LLM.
"""

from __future__ import annotations

import numpy as np

__all__ = ["llm_folds", "n_llm_groups"]


def n_llm_groups(data) -> int:
    """How many distinct LLMs ``data`` (a ``ResponseData``) holds (its rows when ungrouped)."""
    return int(data.llm_groups.max()) + 1 if data.n_subjects else 0


def llm_folds(groups, folds: int, rng) -> list[np.ndarray]:
    """Split rows into ``folds`` folds (sorted row arrays) that never split a group.

    ``groups``: (N,) group index per row (``ResponseData.llm_groups``); ``rng``: a seed or
    ``numpy.random.Generator``. The groups are visited in a random order and each joins the fold
    with the fewest rows so far (the lowest-numbered on ties), so fold sizes differ by less than
    the largest group. With one row per group this is the plain split ``permutation(N)[k::folds]``
    (the same rows for the same seed as before groups existed).
    """
    groups = np.asarray(groups, dtype=np.int64)
    if groups.ndim != 1:
        raise ValueError(f"groups must be one index per row, got shape {groups.shape}")
    labels, inverse = np.unique(groups, return_inverse=True)
    G = labels.size
    if not (isinstance(folds, (int, np.integer)) and 2 <= folds <= G):
        raise ValueError(f"cannot split {G} LLM group(s) into {folds!r} folds (needs 2 <= folds <= groups)")
    order = np.random.default_rng(rng).permutation(G)
    members = [np.flatnonzero(inverse == g) for g in range(G)]
    sizes = np.zeros(int(folds), dtype=np.int64)
    fold_of_group = np.empty(G, dtype=np.int64)
    for g in order:
        k = int(np.argmin(sizes))
        fold_of_group[g] = k
        sizes[k] += members[g].size
    fold_of_row = fold_of_group[inverse]
    return [np.flatnonzero(fold_of_row == k) for k in range(int(folds))]
