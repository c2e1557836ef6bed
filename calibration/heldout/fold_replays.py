"""The replays of one held-out check and their curves, as tasks on the check's workers: every fold's
held-out LLMs replayed against its fold bank, pooled in fold order, and the trait and score curves
fitted from the pool."""

from __future__ import annotations

import numpy as np

from calibration.heldout.interval_curves import fit_factors
from calibration.heldout.limits import MIN_HELD_OUT
from calibration.heldout.replay import random_replays, replay_llms
from calibration.heldout.score_curves import fit_score_curve, score_residuals

__all__ = ["FoldReplays"]


class FoldReplays:
    """The replays of one check and their curves, as tasks on the check's workers.

    ``folds`` submits one task per fold (its held-out LLMs with at least L answers, replayed against
    its fold bank with the given selectors); ``merged`` pools their results in fold order: (diff, sd,
    full_sd) per selector for the trait curves and the replayed sessions with their rows for the
    score curves; ``curves`` fits the trait curves at once and queues the score sums
    (:func:`~calibration.heldout.score_curves.score_residuals`, one task per fold and selector),
    returning the function that waits for them and fits the score curves."""

    def __init__(self, data, n_obs, L, lengths, scoring, default_name, estimator, seed, shortcuts, workers):
        self.data, self.n_obs, self.L, self.lengths = data, n_obs, L, lengths
        self.scoring, self.default_name = scoring, default_name
        self.estimator, self.seed, self.shortcuts = estimator, seed, shortcuts
        self.workers = workers

    def one_fold(self, bank, rows, selectors, replication):
        test = [i for i in rows if self.n_obs[i] >= self.L]
        if not test:
            return None
        # random selection does not look at the answers: its tests are scored at the tabulated lengths
        # only (random_replays), the adaptive selectors step by step (replay_llms)
        stepped = [(name, sel) for name, sel in selectors if name != "random" or not self.shortcuts]
        raw = replay_llms(bank, self.data, test, stepped, [self.scoring], self.estimator, self.L, self.seed, replication,
                          keep_sessions=True, compiled=self.shortcuts)
        random = None
        if len(stepped) < len(selectors):
            random = random_replays(bank, self.data, test, self.lengths, self.scoring, self.estimator, self.seed,
                                    replication)
        return test, raw, random

    def folds(self, fold_banks, fold_rows, selectors, replication_offset=0) -> list:
        return [self.workers.submit(self.one_fold, bank, rows, selectors, k + replication_offset)
                for k, (bank, rows) in enumerate(zip(fold_banks, fold_rows))]

    def merged(self, replayed_folds, selectors):
        """(pooled, replayed) per selector name from the results of :meth:`one_fold`, in fold order."""
        idx = np.asarray(self.lengths) - 1
        stepped = [name for name, _ in selectors if name != "random" or not self.shortcuts]
        pooled: dict[str, list] = {}
        replayed: dict[str, list] = {}  # selector -> [(sessions, held-out rows)] per fold, for the score curves
        for done in replayed_folds:
            if done is None:
                continue
            test, raw, random = done
            for r, name in enumerate(stepped):
                key = self.default_name if name == "default" else name
                pooled.setdefault(key, []).append((raw["est"][r, 0][:, idx] - raw["full"][0][:, None],
                                                   raw["sd"][r, 0][:, idx], raw["full_sd"][r, 0]))
                replayed.setdefault(key, []).append((raw["sessions"][r][0], test))
            if random is not None:
                est, sd, sessions = random
                # fold banks carry no held-out check, so SD_F is the same for every selector
                pooled.setdefault("random", []).append((est - raw["full"][0][:, None], sd, raw["full_sd"][0, 0]))
                replayed.setdefault("random", []).append((sessions, test))
        return pooled, replayed

    def side(self, bank_done, train, test, replication):
        """A strength-ordered side: (its training rows, (pooled, replayed)) of its held-out LLMs
        ``test`` replayed with the default selector, or None when its training LLMs cannot be
        calibrated (``bank_done``, the future of its completed bank, raised ValueError)."""
        try:
            bank, _ = bank_done.result()
        except ValueError:
            return None
        one = [("default", None)]
        return train, self.merged([self.one_fold(bank, test, one, replication)], one)

    def curves(self, pooled, replayed):
        """The trait curves of every selector with at least MIN_HELD_OUT held-out LLMs (fitted now)
        and a function returning (curves, score curves) once the queued score sums are in."""
        curves, pending = {}, {}
        for key, parts in pooled.items():
            diff = np.concatenate([p[0] for p in parts])
            sd = np.concatenate([p[1] for p in parts])
            full_sd = np.concatenate([p[2] for p in parts])
            if diff.shape[0] < MIN_HELD_OUT:
                continue
            curves[key] = {"test_length": self.lengths, **fit_factors(diff, sd, full_sd)}
            pending[key] = [self.workers.submit(score_residuals, sessions, self.data, rows, self.lengths,
                                                curves[key]["c"]) for sessions, rows in replayed[key]]

        def finish():
            score_curves = {}
            for key, parts in pending.items():
                parts = [p.result() for p in parts]
                pooled_scores = {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}
                score = fit_score_curve(pooled_scores, self.lengths, self.data.n_items)
                if score is not None:
                    score_curves[key] = score
            return curves, score_curves

        return finish
