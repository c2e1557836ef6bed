"""``catengine.replay``: one call replays an answer pattern adaptively, as a hand-written session
loop does; missing answers are skipped, unknown items named, and ``catengine evaluate --json``
prints the same summary."""

from __future__ import annotations

import json

import numpy as np
import pytest

import catengine
import naive_engine as naive
from catengine import CATSession, MaxItems, UnknownItemsError, open_item_bank, write_item_bank
from catengine.cli import main


@pytest.fixture(scope="module")
def banks(tmp_path_factory):
    root = tmp_path_factory.mktemp("replay_banks")
    out = {}
    for model in ("lart", "2pl"):
        path = write_item_bank(naive.make_bank(model, 50, seed=5, bank_id=f"replay_{model}"), root / model)
        out[model] = open_item_bank(path)
    return out


def _pattern(bank, seed=3):
    oracle, _ = naive.make_oracle(bank.params, seed=seed)
    return {bank.item_ids[j]: (int(c), t) for j, (c, t) in oracle.items()}


def _by_hand(bank, answers, seed, stopping):
    """The loop a user would write: exclude the items without an answer, then propose and answer
    from the pattern until finished."""
    session = CATSession(bank, rng=seed, stopping=stopping)
    lart = bank.response_model == "lart"
    for item in bank.item_ids:
        if item not in answers:
            session.exclude(item)
    while not session.finished:
        item = session.next_item()
        correct, cot = answers[item]
        session.record(item, correct, cot if lart else None)
    return session


@pytest.mark.parametrize("model", ["lart", "2pl"])
def test_replay_is_the_session_loop_written_by_hand(banks, model):
    bank = banks[model]
    answers = _pattern(bank)
    del answers[bank.item_ids[7]], answers[bank.item_ids[20]]  # two items without an answer
    result = catengine.replay(bank, answers, seed=11, stopping=MaxItems(30))
    session = _by_hand(bank, answers, 11, MaxItems(30))
    assert [s.item for s in result.steps] == session.administered
    assert result.estimate.theta == pytest.approx(session.estimate.theta, abs=1e-12)
    assert result.estimate.theta_sd == pytest.approx(session.estimate.theta_sd, abs=1e-12)
    score = session.predicted_score()
    assert (result.score.accuracy, result.score.low, result.score.high) == pytest.approx(
        (score.accuracy, score.low, score.high), abs=1e-12)
    assert result.score.method == "doubly-robust" and result.score.n_items == bank.n_items - 2  # over the answered items
    assert result.n_available == bank.n_items - 2
    assert result.full_accuracy == pytest.approx(np.mean([c for c, _ in answers.values()]))
    # the reference: the same estimator on every available answer
    full = CATSession(bank)
    for item, (c, t) in answers.items():
        full.record(item, c, t if model == "lart" else None)
    assert result.full.theta == pytest.approx(full.estimate.theta, abs=1e-12)
    # the trajectory's estimates are the session's own after each answer
    assert [s.estimate.theta for s in result.steps][-1] == pytest.approx(session.estimate.theta, abs=1e-12)


def test_a_pattern_that_runs_out_says_so(banks):
    bank = banks["2pl"]
    answers = {item: value for item, value in list(_pattern(bank).items())[:6]}
    result = catengine.replay(bank, answers, seed=1, stopping=MaxItems(bank.n_items))
    assert len(result.steps) == 6 and len(result.skipped) == bank.n_items - 6
    assert result.stop_reason.startswith("every available answer is used (6 of the bank's 50 items")


def test_unknown_items_are_named_or_ignored_on_request(banks):
    bank = banks["2pl"]
    answers = {**_pattern(bank), "other/1": (1, None)}
    with pytest.raises(UnknownItemsError, match="other/1"):
        catengine.replay(bank, answers, seed=1)
    with pytest.raises(UnknownItemsError, match="none of the 1 answered items"):
        catengine.replay(bank, {"other/1": 1}, seed=1, ignore_unknown_items=True)
    result = catengine.replay(bank, answers, seed=1, stopping=MaxItems(5), ignore_unknown_items=True)
    assert result.ignored == ["other/1"] and len(result.steps) == 5


def test_answers_may_be_bare_verdicts_and_are_checked(banks):
    bank = banks["2pl"]
    bare = {item: c for item, (c, _) in _pattern(bank).items()}
    a = catengine.replay(bank, bare, seed=4, stopping=MaxItems(8))
    b = catengine.replay(bank, _pattern(bank), seed=4, stopping=MaxItems(8))
    assert [s.item for s in a.steps] == [s.item for s in b.steps]
    with pytest.raises(ValueError, match="correct"):
        catengine.replay(bank, {item: 2 for item in bare}, seed=4)
    with pytest.raises(ValueError, match="CoT length"):
        catengine.replay(bank, {item: (1, 2, 3) for item in bare}, seed=4)


def test_on_step_sees_every_answer_and_the_summary_is_what_evaluate_prints(banks, tmp_path, capsys):
    bank = banks["lart"]
    answers = _pattern(bank)
    seen = []
    result = catengine.replay(bank, answers, seed=9, subject="llm", on_step=seen.append)
    assert [s.item for s in seen] == [s.item for s in result.steps] and seen
    path = tmp_path / "answers.json"
    path.write_text(json.dumps({item: {"correct": c, "cot_tokens": t} for item, (c, t) in answers.items()}))
    assert main(["evaluate", "--bank", bank.source, "--responses", str(path), "--seed", "9", "--json"]) == 0
    lines = capsys.readouterr().out.splitlines()
    printed = json.loads(lines[-1])["summary"]
    expected = json.loads(json.dumps(result.summary(None)))
    assert printed == expected
    assert [json.loads(line)["item"] for line in lines[:-1]] == [s.item for s in result.steps]


def test_a_design_based_score_comes_with_the_models_prediction_beside_it():
    """On a shipped bank whose default selector draws by design, ``score`` is the doubly robust
    estimate, ``design_score`` is it, and ``model_score`` is the model's own prediction."""
    from pathlib import Path

    bank = open_item_bank(Path(__file__).resolve().parents[1] / "item_banks" / "demo_math500_lart")
    answers = {item: (int(k % 3 != 0), 400.0 + k) for k, item in enumerate(bank.item_ids)}
    result = catengine.replay(bank, answers, seed=2, stopping=MaxItems(12))
    assert result.score.method == "doubly-robust" and result.design_score is result.score
    session = _by_hand(bank, answers, 2, MaxItems(12))
    model_score = session.predicted_score(method="model")
    assert result.model_score.method == "model"
    assert result.model_score.accuracy == pytest.approx(model_score.accuracy, abs=1e-12)
    assert result.model_score.accuracy != pytest.approx(result.score.accuracy, abs=1e-6)
