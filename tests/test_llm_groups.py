"""Runs of one LLM (ResponseData.subject_groups) stay in one fold of every cross-fitted check:
the fold split itself, the groups' life through subsets, files and merges, and the checks that use
them (the interval and score check, the choice of the number of score factors, the replay audit,
``calibration fit --same-llm-pattern``)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.special import expit

from calibration import ResponseData
from calibration.heldout import llm_folds, n_llm_groups


def _runs(n_llms=20, n_items=60, seed=5):
    """Two runs (zero- and one-shot) per simulated 2PL LLM; the one-shot run answers 10% of the
    items differently."""
    rng = np.random.default_rng(seed)
    theta = rng.standard_normal(n_llms)
    a, b = rng.uniform(0.8, 1.6, n_items), rng.normal(0, 1, n_items)
    zero = (rng.random((n_llms, n_items)) < expit(a * theta[:, None] + b)).astype(np.int8)
    one = np.where(rng.random(zero.shape) < 0.1, 1 - zero, zero).astype(np.int8)
    y = np.empty((2 * n_llms, n_items), dtype=np.int8)
    y[0::2], y[1::2] = zero, one
    ids = [f"Org_Model{k}_{style}_shot" for k in range(n_llms) for style in ("zero", "one")]
    return ResponseData.from_arrays(y, subject_ids=ids, item_ids=[f"q{j}" for j in range(n_items)])


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_singleton_groups_give_the_plain_permutation_split(seed):
    perm = np.random.default_rng(seed).permutation(37)
    plain = [np.sort(perm[k::5]) for k in range(5)]
    for mine, theirs in zip(llm_folds(np.arange(37), 5, seed), plain):
        np.testing.assert_array_equal(mine, theirs)


def test_groups_are_never_split_and_folds_are_balanced():
    rng = np.random.default_rng(3)
    groups = np.repeat(np.arange(30), rng.integers(1, 4, 30))  # 30 LLMs with 1-3 runs each
    folds = llm_folds(groups, 4, 11)
    rows = np.concatenate(folds)
    assert sorted(rows.tolist()) == list(range(groups.size))  # every row exactly once
    fold_of = np.empty(groups.size, int)
    for k, f in enumerate(folds):
        fold_of[f] = k
    for g in range(30):
        assert np.unique(fold_of[groups == g]).size == 1
    sizes = [f.size for f in folds]
    assert max(sizes) - min(sizes) <= 3  # less than the largest group apart
    with pytest.raises(ValueError, match="cannot split 30 LLM group"):
        llm_folds(groups, 31, 0)
    with pytest.raises(ValueError, match="one index per row"):
        llm_folds(groups.reshape(-1, 1), 2, 0)


def test_grouped_by_strips_the_pattern_and_folds_case():
    data = ResponseData.from_arrays(np.eye(4, dtype=np.int8), subject_ids=[
        "org_Phi_4_mini_one_shot", "org_phi_4_mini_zero_shot", "Qwen3_8B_zero_shot", "gpt2"])
    grouped = data.grouped_by(r"_(zero|one)_shot$")
    assert grouped.subject_groups == ("org_phi_4_mini", "org_phi_4_mini", "qwen3_8b", "gpt2")
    assert grouped.llm_groups.tolist() == [0, 0, 1, 2] and n_llm_groups(grouped) == 3
    assert data.grouped_by(r"_(zero|one)_shot$", ignore_case=False).llm_groups.tolist() == [0, 1, 2, 3]
    assert data.subject_groups is None and data.llm_groups.tolist() == [0, 1, 2, 3]
    assert "3 LLM groups" in repr(grouped)
    with pytest.raises(ValueError, match="matches none of the 4 subject ids"):
        data.grouped_by("_few_shot$")
    with pytest.raises(ValueError, match="invalid subject-group pattern"):
        data.grouped_by("(")
    with pytest.raises(ValueError, match="removes all of subject id 'gpt2'"):
        data.grouped_by(r"^gpt2$|_shot$")
    with pytest.raises(ValueError, match="subject_groups has 3 entries, expected 4"):
        ResponseData.from_arrays(data.correct, subject_groups=["a", "a", "b"])
    with pytest.raises(ValueError, match=r"subject 'subject_1' \(row 1\) has an empty subject group"):
        ResponseData.from_arrays(data.correct, subject_groups=["a", " ", "b", "c"])


def test_groups_survive_subsets_files_and_merges(tmp_path):
    from calibration.recalibration import merge_responses

    data = _runs(n_llms=4, n_items=8).grouped_by(r"_(zero|one)_shot$")
    part = data.subset(subjects=[5, 0, 1])
    assert part.subject_groups == ("org_model2", "org_model0", "org_model0")
    path = data.to_netcdf(tmp_path / "runs.nc")
    back = ResponseData.from_netcdf(path)
    assert back.subject_groups == data.subject_groups and back.sha256() == data.sha256()
    plain = ResponseData.from_arrays(data.correct, subject_ids=data.subject_ids, item_ids=data.item_ids)
    assert plain.sha256() != data.sha256()  # the groups are part of the content
    assert ResponseData.from_dataset(plain.to_dataset()).subject_groups is None
    newcomer = ResponseData.from_arrays(np.ones((1, 8), dtype=np.int8), subject_ids=["NewLLM"], item_ids=data.item_ids)
    merged = merge_responses(data, newcomer)
    assert merged.subject_groups == data.subject_groups + ("NewLLM",)
    assert merge_responses(plain, newcomer).subject_groups is None


def test_the_interval_check_never_trains_on_a_held_out_runs_sibling():
    from calibration.heldout import cross_fit_intervals
    from catengine import ItemBank

    data = _runs().grouped_by(r"_(zero|one)_shot$")
    group_of = dict(zip(data.subject_ids, data.subject_groups))
    fits = {}  # bank id -> groups trained on (the refits run on worker threads, in no fixed order)

    runs_per_group = []

    def spy(train, rng, bank_id):
        fits[bank_id] = {group_of[s] for s in train.subject_ids}
        runs_per_group.append([group_of[s] for s in train.subject_ids])
        n = train.n_subjects
        p = np.clip((train.correct == 1).sum(axis=0) / n, 0.05, 0.95)
        return ItemBank.from_params("2pl", list(train.item_ids), bank_id=bank_id, a=np.ones(train.n_items),
                                    b=np.log(p / (1 - p))), True

    record = cross_fit_intervals(data, spy, folds=4, test_lengths=(5, 10), rng=0)
    n_edges = sum(side in (record["beyond"] or {}) for side in ("above", "below"))
    trained_on = [fits[f"interval_check_fold{k}"] for k in range(4)]
    assert record["n_llm_groups"] == 20 and record["folds"] == 4 and len(fits) == 4 + n_edges
    # every fit, folds and strength-ordered ones alike, trains on both runs of an LLM or on neither
    for runs in runs_per_group:
        assert all(runs.count(g) == 2 for g in set(runs))
    all_groups = set(data.subject_groups)
    held = [all_groups - seen for seen in trained_on]
    assert all(len(h) == 5 for h in held)  # 20 LLMs, 4 folds: each fold holds out 5 whole LLMs (10 runs)
    assert set().union(*held) == all_groups
    # without groups the same split separates some siblings: that is what the groups prevent
    fits.clear()
    cross_fit_intervals(ResponseData.from_arrays(data.correct, subject_ids=data.subject_ids, item_ids=data.item_ids),
                        spy, folds=4, test_lengths=(5, 10), rng=0)
    held_runs = [set(data.subject_ids) - {s for s in data.subject_ids if group_of[s] in seen} for seen in fits.values()]
    assert any(len(h) < 10 for h in held_runs)


def test_factor_count_cross_validation_holds_siblings_out_together(monkeypatch):
    import calibration.heldout.score_factors as sf

    data = _runs(n_llms=30, n_items=40).grouped_by(r"_(zero|one)_shot$")
    groups = data.llm_groups
    seen = []
    original = sf.fit_score_factors

    def spy(correct, dims, **kw):
        seen.append(correct.shape[0])
        return original(correct, dims, **kw)

    monkeypatch.setattr(sf, "fit_score_factors", spy)
    folds = llm_folds(groups, sf.CV_FOLDS, 0)
    sf.choose_factor_count(data.correct, max_dims=2, rng=0, groups=groups)
    # every fit leaves out whole LLMs: both runs of each held-out LLM (an even number of rows)
    assert seen[: sf.CV_FOLDS] == [60 - f.size for f in folds]
    for f in folds:
        rest = np.setdiff1d(np.arange(groups.size), f)
        assert not np.isin(groups[f], groups[rest]).any() and f.size % 2 == 0


def test_replay_audit_folds_count_llms_not_runs():
    from calibration.audit import replay_audit

    data = _runs(n_llms=3, n_items=20).grouped_by(r"_(zero|one)_shot$")
    with pytest.raises(ValueError, match=r"folds must lie in 2\.\.3 for 3 LLMs"):
        replay_audit(data, method="cbmm", folds=4, test_lengths=[5])


def test_cli_fit_groups_runs_by_pattern(tmp_path, capsys):
    from calibration.cli import main
    from catengine import open_item_bank

    data = _runs(n_llms=16, n_items=30)
    src = tmp_path / "runs.nc"
    data.to_netcdf(src)
    out = tmp_path / "banks"
    assert main(["fit", "--method", "cbmm", "--responses", str(src), "--bank-id", "g", "--out", str(out),
                 "--same-llm-pattern", "_(zero|one)_shot$", "--no-progress"]) == 0
    bank = open_item_bank(out / "g")
    stored = ResponseData.from_dataset(bank.responses)
    assert n_llm_groups(stored) == 16 and stored.subject_groups[0] == "org_model0"
    record = json.loads(bank.attrs["interval_calibration"])
    assert record["n_llm_groups"] == 16 and record["n_subjects"] == 32
    capsys.readouterr()
    assert main(["fit", "--method", "cbmm", "--responses", str(src), "--bank-id", "bad", "--out", str(out),
                 "--same-llm-pattern", "_few_shot$", "--no-progress"]) == 2
    assert "matches none of the 32 subject ids" in capsys.readouterr().err
    assert not (out / "bad").exists()


@pytest.mark.parametrize("ids, grouped", [
    (["Qwen3_8B_zero_shot", "Qwen3_8B_one_shot", "gpt2_zero_shot"], ["qwen3_8b", "qwen3_8b", "gpt2"]),
    (["llama-3-8b-seed1", "llama-3-8b-seed2", "phi-4"], ["llama-3-8b", "llama-3-8b", "phi-4"]),
    (["m.5shot", "m.0-shot", "x"], ["m", "m", "x"]),
    (["a_cot", "a_nocot", "b_greedy", "c"], ["a", "a", "b", "c"]),
])
def test_run_suffixes_of_subject_ids_are_detected(ids, grouped):
    from calibration.heldout import detect_run_pattern, with_llm_groups

    data = ResponseData.from_arrays(np.eye(len(ids), dtype=np.int8), subject_ids=ids)
    assert detect_run_pattern(ids) is not None
    out, how = with_llm_groups(data)
    assert how.startswith("detected: ") and list(out.subject_groups) == grouped


def test_distinct_llms_are_not_grouped_and_given_groups_win():
    from calibration.heldout import detect_run_pattern, with_llm_groups

    names = ["Mistral-Large-2", "Llama-3.1-70B-Instruct", "Claude-3.5 (Sonnet)", "gpt-4o-seed1", "o1_zero_shot"]
    assert detect_run_pattern(names) is None  # suffixes that pair no two ids do not group anything
    data = ResponseData.from_arrays(np.eye(5, dtype=np.int8), subject_ids=names)
    assert with_llm_groups(data) == (data, "none")
    given = ResponseData.from_arrays(np.eye(4, dtype=np.int8), subject_ids=["a_zero_shot", "a_one_shot", "b", "c"],
                                     subject_groups=["a", "b", "b", "c"])
    assert with_llm_groups(given) == (given, "given")


def test_the_default_check_groups_seed_runs_it_detects():
    """Ungrouped data whose ids name seeds of the same LLMs: the check a default calibration runs
    holds both seeds of an LLM out together and says how it found the groups."""
    from calibration import CBMMCalibrator
    from calibration.heldout import describe

    runs = _runs(n_llms=16, n_items=30)
    ids = [s.replace("_zero_shot", "-seed1").replace("_one_shot", "-seed2") for s in runs.subject_ids]
    data = ResponseData.from_arrays(runs.correct, subject_ids=ids)
    bank = CBMMCalibrator(rng=0, progress=False).fit(data).to_item_bank("seeds")
    record = json.loads(bank.attrs["interval_calibration"])
    assert record["n_llm_groups"] == 16 and record["llm_groups"].startswith("detected: ")
    assert "32 runs of 16 LLMs" in describe(record)
