"""Folds of calibration LLMs for every cross-fitted check (the held-out check, the replay audit, the
choice of the number of score factors): rows of one LLM group stay in one fold.

A benchmark's rows are often several runs of one LLM (its zero-shot and one-shot prompts, seeds,
quantisations). Their answers agree item by item far more than two different LLMs' do, so a check
whose held-out run has a sibling in the training folds measures how well the bank knows that LLM,
not a new one. ``ResponseData.subject_groups`` says which rows belong together. Data without it is
grouped by a run-style suffix of its subject ids when one is found (:func:`with_llm_groups`:
``_zero_shot`` / ``_one_shot``, ``-seed3``, ...); otherwise every row is its own LLM.
"""

from __future__ import annotations

import numpy as np

__all__ = ["RUN_SUFFIX_PATTERNS", "detect_run_pattern", "llm_folds", "n_llm_groups", "with_llm_groups"]


def n_llm_groups(data) -> int:
    """How many distinct LLMs ``data`` (a ``ResponseData``) holds (its rows when ungrouped)."""
    return int(data.llm_groups.max()) + 1 if data.n_subjects else 0


def llm_folds(groups, folds: int, rng) -> list[np.ndarray]:
    """Split rows into ``folds`` folds (sorted row arrays) that never split a group.

    ``groups``: (N,) group index per row (``ResponseData.llm_groups``); ``rng``: a seed or
    ``numpy.random.Generator``. The groups are visited in a random order and each joins the fold
    with the fewest rows so far (the lowest-numbered on ties), so fold sizes differ by less than
    the largest group. With one row per group this is the plain split ``permutation(N)[k::folds]``
    (the same rows for the same seed as a split that ignores groups).
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


#: run-style suffixes of subject ids that name one LLM's several runs (prompt styles, seeds, repeats);
#: each is removed from the end of the id (case folded) to name the LLM
RUN_SUFFIX_PATTERNS = (
    r"[-_. ](zero|one|two|three|four|five|few|[0-9]+)[-_]?shots?$",
    r"[-_. ](seed|run|rep|repeat|sample|trial)[-_]?[0-9]+$",
    r"[-_. ](cot|no[-_]?cot|greedy|sampled?)$",
)


def detect_run_pattern(subject_ids) -> str | None:
    """The first of :data:`RUN_SUFFIX_PATTERNS` under which some subject ids name the same LLM (at
    least one group of two or more ids once the suffix is removed, case folded), or None.

    Used when a calibration's data carries no ``subject_groups``: a benchmark whose rows are
    ``Qwen3_8B_zero_shot`` and ``Qwen3_8B_one_shot`` holds two runs of one LLM, and a check that
    split them would flatter itself. A wrong match only puts distinct LLMs in the same fold.
    """
    import re

    ids = [str(s) for s in subject_ids]
    for pattern in RUN_SUFFIX_PATTERNS:
        regex = re.compile(pattern, flags=re.IGNORECASE)
        stripped = [regex.sub("", s).casefold() for s in ids]
        if sum(a != b.casefold() for a, b in zip(stripped, ids)) < 2 or any(not g.strip() for g in stripped):
            continue
        if len(set(stripped)) < len(stripped):
            return pattern
    return None


def with_llm_groups(data):
    """``(data, how)``: ``data`` unchanged when it has ``subject_groups`` (how = "given"), else
    grouped by :func:`detect_run_pattern` when one matches (how = "detected: <pattern>"), else
    unchanged (how = "none": every row its own LLM)."""
    if data.subject_groups is not None:
        return data, "given"
    pattern = detect_run_pattern(data.subject_ids)
    if pattern is None:
        return data, "none"
    return data.grouped_by(pattern, ignore_case=True), f"detected: {pattern}"
