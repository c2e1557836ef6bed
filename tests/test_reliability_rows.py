"""Reliability: a session that rounding cannot wedge, a held-out check that never fails a fit, limits
restored however a pool is left, a pending proposal that stays pending, bounded ids, tidy ends.

1. near-certain predictions make the model's variance of a design term a difference of equal sums:
   it never comes out negative, ``predicted_score()`` never raises on valid answers, and a
   ``serve`` ``record`` either fails and changes nothing or succeeds (naming a part that failed),
   so a subject can always go on, also after a restart;
3. a calibration whose LLMs are too few to split into folds is written without the check (its
   reason in the bank), and ``calibration fit --no-interval-check`` skips it on request;
4. LLMs of equal accuracy (every trait 0) and any other failure of the check leave a bank without
   it, never a failed fit or LAPACK errors on stderr;
5. the BLAS limit of ``calibration.heldout.threads.Workers`` is lifted however the pool is left, a
   KeyboardInterrupt in its close included;
6. answering another item keeps the pending proposal pending (docs/serve_protocol.md), and logs in
   which it was dropped still resume;
7. ``serve`` and the harness readers refuse ids longer than 1,000 characters, and error replies quote
   only a short prefix of a long value;
8. Ctrl-C in ``calibration fit`` prints one line and exits 130; a future-schema refusal never
   advises an upgrade to a release that is not newer; the correctness message lists what is
   accepted; an all-wrong session's interval has no negative zero.
"""

import io
import json
import math

import numpy as np
import pytest

import naive_engine as naive
from catengine import ItemBank
from catengine.selection import SELECTORS
from catengine.session import CATSession, Engine
from catengine.session.serve import serve
from catengine.stopping import MaxItems


def _serve_text(engine, requests) -> str:
    stdin = io.StringIO("".join(json.dumps(r) + "\n" for r in requests))
    stdout = io.StringIO()
    assert serve(engine, stdin, stdout) == 0
    return stdout.getvalue()


def _serve(engine, requests) -> list[dict]:
    return [json.loads(line) for line in _serve_text(engine, requests).splitlines()]


# ----------------------------------------------------------------------------- 1. rounding
def _drill_bank(seed: int) -> tuple[ItemBank, np.random.Generator]:
    """The drill's bank: 20 2PL items of slope 50 with intercepts spread over [-30, 30] (inside the
    plausible range), three categories drawn at random."""
    rng = np.random.default_rng(seed)
    n = 20
    meta = {"benchmark": rng.choice(["alpha", "beta", "gamma"], n)}
    bank = ItemBank.from_params("2pl", [f"q{k}" for k in range(n)], bank_id="drill", item_metadata=meta,
                                a=np.full(n, 50.0), b=np.linspace(-30.0, 30.0, n))
    return bank, rng


def _model_answer(bank, item, theta, u) -> int:
    j = bank.index_of(item)
    return int(u < 1.0 / (1.0 + math.exp(-(bank.params.a[j] * theta + bank.params.b[j]))))


@pytest.mark.parametrize("seed", [3, 5, 6, 7])
def test_near_certain_predictions_never_wedge_the_score(seed):
    """Answers that follow the model on the drill's bank: the default (doubly robust) session's
    score after every answer is finite and ordered (the model variance of a design term, a
    difference of nearly equal sums there, rounds to about -2.66e-17 unclipped)."""
    bank, rng = _drill_bank(seed)
    s = CATSession(bank, rng=seed)
    theta = rng.normal()
    for _ in range(bank.n_items):
        item = s.next_item()
        s.record(item, _model_answer(bank, item, theta, rng.random()))
        score = s.predicted_score()
        assert all(math.isfinite(v) for v in (score.accuracy, score.low, score.high, score.sd))
        assert score.low <= score.accuracy <= score.high
        assert s.finished in (True, False)
    assert s.history[-1].step == bank.n_items


def test_the_model_variance_of_a_design_term_is_never_negative():
    """lam = 0 and no outcome variance: sum f^2 / pi - (sum f)^2 is exactly 0 for pi proportional
    to f (Cauchy-Schwarz with equality), so rounding alone decides its sign; both forms give 0."""
    from catengine.scoring import draw_sums, model_variance_terms, model_variances_from_sums

    rng = np.random.default_rng(0)
    worst_terms, worst_sums = math.inf, math.inf
    for _ in range(200):
        f = rng.uniform(0.0, 1.0, 7) ** 8  # near-certain wrong answers: tiny predictions
        pi = f / f.sum()
        remaining = np.ones(7, dtype=bool)
        terms = model_variance_terms(f[None, :], pi[None, :], remaining[None, :], variances=np.zeros((1, 7)),
                                     weight=0.0)
        worst_terms = min(worst_terms, float(terms.min()))
        sums = draw_sums(f, pi, remaining, 0, variances=np.zeros(7))
        from_sums = model_variances_from_sums(sums.variance[None, :], sums.square[None, :], sums.predicted[None, :],
                                              np.array([7.0]), weight=0.0)
        worst_sums = min(worst_sums, float(from_sums.min()))
    assert worst_terms >= 0.0 and worst_sums >= 0.0


def _failing_score(monkeypatch, after: int):
    """Make the score fail from the ``after``-th answer on (a stand-in for any numerical failure)."""
    from catengine.session import scoring

    real = scoring.predicted_score

    def predicted_score(session, *args, **kwargs):
        if session.n_items >= after:
            raise ValueError("model_variances must hold 11 finite values >= 0, one per draw")
        return real(session, *args, **kwargs)

    monkeypatch.setattr(scoring, "predicted_score", predicted_score)


def test_a_failed_score_never_leaves_a_subject_unable_to_continue(tmp_path, monkeypatch):
    """A record whose score cannot be computed: the answer is recorded and the reply says so
    (``failed``), the same answer is not taken twice, and ``next`` / ``estimate`` go on, also after a
    restart."""
    from catengine.stopping import AnyOf, ScoreIntervalBelow

    bank = naive.make_bank("2pl", 20, seed=2)
    log = tmp_path / "serve.jsonl"
    engine = Engine(bank, rng=0, log=log, stopping=AnyOf(ScoreIntervalBelow(0.05), MaxItems(20)))  # reads the score
    first = engine.next_item("m1")
    engine.record("m1", first, 1)
    _failing_score(monkeypatch, after=2)
    second = engine.next_item("m1")
    replies = _serve(engine, [
        {"op": "record", "subject": "m1", "item": second, "correct": 0},
        {"op": "record", "subject": "m1", "item": second, "correct": 0},
        {"op": "next", "subject": "m1"},
        {"op": "estimate", "subject": "m1"},
    ])
    rec, again, nxt, est = replies
    assert rec["ok"] and rec["estimate"]["n_items"] == 2 and "score" not in rec
    assert "ValueError" in rec["failed"]["score"]
    assert any("the stopping rule takes it as unknown" in w for w in rec["warnings"])
    assert not again["ok"] and again["error"] == "ItemAlreadyAnsweredError"
    assert nxt["ok"] and nxt["item"] not in (first, second) and nxt["finished"] is False
    assert est["ok"] and est["administered"] == [first, second] and "ValueError" in est["failed"]["score"]
    records = [json.loads(line) for line in log.read_text().splitlines() if '"event":"record"' in line]
    assert [r["item"] for r in records] == [first, second]
    with pytest.warns(RuntimeWarning, match="could not be computed"):
        resumed = Engine.resume(log, bank)
        item = resumed.next_item("m1")
        resumed.record("m1", item, 1)
        assert resumed.session("m1").n_items == 3 and not resumed.session("m1").finished
    resumed.close()


# ----------------------------------------------------------------------------- 3-4. the held-out check
def _responses(path, thetas, subjects, n_items=60, seed=0, equal=False):
    rng = np.random.default_rng(seed)
    a, b = rng.uniform(0.8, 2.0, n_items), rng.normal(0.0, 1.0, n_items)
    lines = ["subject,item,correct"]
    for s, t in zip(subjects, thetas):
        if equal:  # half the items right, different ones per LLM: every LLM has accuracy 0.5
            y = np.zeros(n_items, dtype=int)
            y[rng.permutation(n_items)[: n_items // 2]] = 1
        else:
            y = (rng.random(n_items) < 1.0 / (1.0 + np.exp(-(a * t + b)))).astype(int)
        lines += [f"{s},q{j:03d},{y[j]}" for j in range(n_items)]
    path.write_text("\n".join(lines) + "\n")
    return path


def _fit(tmp_path, responses, *extra):
    from calibration.cli import main

    return main(["fit", "cbmm", "--responses", str(responses), "--bank-id", "b", "--out", str(tmp_path / "banks"),
                 "--no-progress", *extra])


@pytest.fixture(scope="module")
def three_llms(tmp_path_factory):
    """30 runs of 3 LLMs (ids A-seed0..9, B-..., C-...: grouped by their run suffix)."""
    subjects = [f"{llm}-seed{k}" for llm in "ABC" for k in range(10)]
    thetas = [{"A": -1.0, "B": 0.0, "C": 1.0}[s[0]] for s in subjects]
    return _responses(tmp_path_factory.mktemp("three") / "three.csv", thetas, subjects)


def test_too_few_llms_for_the_folds_give_a_bank_without_the_check(tmp_path, three_llms, capsys):
    from catengine import open_item_bank

    assert _fit(tmp_path, three_llms) == 0
    err = capsys.readouterr().err
    bank = open_item_bank(tmp_path / "banks" / "b")
    assert "interval_calibration" not in bank.attrs
    reason = bank.attrs["interval_calibration_skipped"]
    assert "3 LLMs (30 runs)" in reason and "too few" in reason
    assert f"interval check: skipped ({reason})" in err


def test_cross_fit_intervals_names_too_few_groups_as_a_fold_problem(three_llms):
    from calibration.heldout import FoldFitError, cross_fit_intervals, with_llm_groups
    from calibration.io import load_responses

    data, _ = with_llm_groups(load_responses(three_llms))

    def never(*args):  # the split fails before any refit
        raise AssertionError("no refit expected")

    with pytest.raises(FoldFitError, match="3 LLMs"):
        cross_fit_intervals(data, never)


def test_a_bank_whose_check_was_skipped_scores_as_one_without_a_check(three_llms):
    from calibration.io import load_responses
    from calibration.methods.cbmm.calibrator import CBMMCalibrator

    cal = CBMMCalibrator(rng=0, progress=False).fit(load_responses(three_llms))
    skipped = cal.to_item_bank("b")  # "auto": too few LLMs
    plain = cal.to_item_bank("b", interval_check=False)
    assert "interval_calibration_skipped" in skipped.attrs and "interval_calibration" not in skipped.attrs
    scores = []
    for bank in (skipped, plain):
        s = CATSession(bank, rng=1)
        for k in range(8):
            s.record(s.next_item(), k % 2)
        scores.append((s.estimate.theta, s.estimate.theta_sd, s.predicted_score().to_dict()))
    assert scores[0] == scores[1]


def test_fit_skips_the_check_on_request(tmp_path, capsys):
    from catengine import open_item_bank

    subjects = [f"llm{k}" for k in range(10)]
    responses = _responses(tmp_path / "ten.csv", np.linspace(-1.5, 1.5, 10), subjects, seed=3)
    assert _fit(tmp_path, responses, "--no-interval-check") == 0
    bank = open_item_bank(tmp_path / "banks" / "b")
    assert "interval_calibration" not in bank.attrs
    assert bank.attrs["interval_calibration_skipped"].startswith("skipped on request (calibration fit --no-interval-check)")
    assert "interval check: skipped (skipped on request" in capsys.readouterr().err


def test_llms_of_equal_accuracy_give_a_bank_without_the_check(tmp_path, capfd):
    """Every trait 0: the fold refits cannot tell the LLMs apart; no LAPACK errors on stderr (np.polyfit
    on traits that are all 0 hands LAPACK a NaN), a bank without the check."""
    from catengine import open_item_bank

    responses = _responses(tmp_path / "equal.csv", [0.0] * 10, [f"llm{k}" for k in range(10)], seed=5, equal=True)
    assert _fit(tmp_path, responses) == 0
    out, err = capfd.readouterr()
    assert "DLASCL" not in out + err and "SVD did not converge" not in out + err
    bank = open_item_bank(tmp_path / "banks" / "b")
    assert "interval_calibration" not in bank.attrs
    assert "same trait" in bank.attrs["interval_calibration_skipped"]


def test_item_sd_factors_leave_out_folds_without_trait_spread():
    import xarray as xr

    from calibration.heldout.item_sd import item_sd_factors

    def bank(theta, b_sd=True):
        ids = [f"s{k}" for k in range(len(theta))]
        subj = xr.Dataset({"theta": ("subject", np.asarray(theta, dtype=float)),
                           "theta_sd": ("subject", np.full(len(theta), 0.3))}, coords={"subject": ids})
        return naive.make_bank("2pl", 6, seed=1, b_sd=b_sd, subjects=subj)

    full = bank([-1.0, -0.5, 0.0, 0.5, 1.0])
    flat = [bank([0.0] * 4), bank([0.0] * 4)]
    assert item_sd_factors(full, flat, 2) == {"a": None, "a_rms": None, "b": None, "b_rms": None}
    spread = [bank([-1.0, -0.5, 0.0, 0.5]), bank([0.0] * 4)]
    assert item_sd_factors(full, spread, 2)["b"] is not None  # the fold with spread still counts


def test_any_failure_of_the_check_leaves_the_bank_without_it(tmp_path, monkeypatch):
    import calibration.heldout.check as ic
    from calibration.io import load_responses
    from calibration.methods.cbmm.calibrator import CBMMCalibrator

    subjects = [f"llm{k}" for k in range(10)]
    data = load_responses(_responses(tmp_path / "ten.csv", np.linspace(-1.5, 1.5, 10), subjects, seed=3))
    cal = CBMMCalibrator(rng=0, progress=False).fit(data)

    def broken(*args, **kwargs):
        raise np.linalg.LinAlgError("SVD did not converge in Linear Least Squares")

    monkeypatch.setattr(ic, "cross_fit_intervals", broken)
    with pytest.warns(RuntimeWarning, match="interval check skipped"):
        bank = cal.to_item_bank("b")
    assert "LinAlgError" in bank.attrs["interval_calibration_skipped"]
    with pytest.raises(np.linalg.LinAlgError):  # a check that was required still fails loudly
        cal.to_item_bank("b", interval_check=True)


# ----------------------------------------------------------------------------- 5. threads
def _blas_threads() -> list[int]:
    from threadpoolctl import threadpool_info

    return [info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"]


def test_an_interrupt_while_closing_the_pool_still_lifts_the_blas_limit(monkeypatch):
    from concurrent.futures import ThreadPoolExecutor

    from threadpoolctl import threadpool_limits

    import calibration.heldout.threads as threads

    if threads.available_cores() < 2 or not _blas_threads():
        pytest.skip("needs two cores and a BLAS that threadpoolctl controls")
    real_shutdown = ThreadPoolExecutor.shutdown

    def interrupted(self, *args, **kwargs):  # the second Ctrl-C lands while close() waits for the workers
        real_shutdown(self, *args, **kwargs)
        raise KeyboardInterrupt

    with threadpool_limits(limits=2, user_api="blas"):
        before = _blas_threads()
        monkeypatch.setattr(ThreadPoolExecutor, "shutdown", interrupted)
        with pytest.raises(KeyboardInterrupt):
            with threads.Workers(max_threads=2) as workers:
                assert _blas_threads() == [1] * len(before)
                workers.submit(sum, [1, 2]).result()
        monkeypatch.setattr(ThreadPoolExecutor, "shutdown", real_shutdown)
        assert threads._blas_users == 0 and threads._blas_limit is None
        assert _blas_threads() == before
        with threads.Workers(max_threads=2):  # and a later pool limits and restores as before
            assert _blas_threads() == [1] * len(before)
        assert _blas_threads() == before


def test_an_interrupt_inside_a_task_of_a_one_thread_pool_reaches_the_caller():
    import calibration.heldout.threads as threads

    def task():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        with threads.Workers(max_threads=1) as workers:
            workers.submit(task).result()
    assert threads._blas_users == 0


# ----------------------------------------------------------------------------- 6. the pending proposal
def test_answering_another_item_keeps_the_proposal_pending(tmp_path):
    bank = naive.make_bank("2pl", 15, seed=4)
    log = tmp_path / "s.jsonl"
    s = CATSession(bank, stopping=MaxItems(15), rng=0, log=log)
    proposed = s.next_item()
    other = next(i for i in bank.item_ids if i != proposed)
    s.record(other, 1)
    assert s.pending_item == proposed and s.next_item() == proposed  # the same id comes back
    s.record(proposed, 0)
    assert [r.proposed for r in s.history] == [False, True]
    assert math.isfinite(s.history[1].criterion)
    s.close()
    events = [json.loads(line).get("event") for line in log.read_text().splitlines()[1:]]
    assert events.count("propose") == 1  # one proposal, never a second one for the same step
    resumed = CATSession.resume(log, bank)
    assert resumed.state_summary()["history"] == s.state_summary()["history"]
    resumed.close()


def test_serve_repeats_the_pending_item_until_it_is_answered():
    bank = naive.make_bank("lart", 25, seed=4)
    engine = Engine(bank, rng=0)
    proposed = engine.next_item("m1")
    other = next(i for i in bank.item_ids if i != proposed)
    replies = _serve(engine, [
        {"op": "record", "subject": "m1", "item": other, "correct": 1},
        {"op": "next", "subject": "m1"},
        {"op": "estimate", "subject": "m1"},
        {"op": "record", "subject": "m1", "item": proposed, "correct": 0},
    ])
    assert replies[0]["proposed"] is False
    assert replies[1]["item"] == proposed and replies[1]["step"] == 2
    assert replies[2]["pending"] == [proposed]
    assert replies[3]["proposed"] is True and replies[3]["n_unproposed"] == 1


def _legacy_log(tmp_path, answer_pending_unproposed: bool):
    """A log in which the pending proposal was dropped after an answer to another item (the next
    ``next_item`` proposed anew, or the dropped item was answered as not proposed), as earlier
    library versions wrote them."""
    bank = naive.make_bank("2pl", 15, seed=4)
    log = tmp_path / "legacy.jsonl"
    s = CATSession(bank, stopping=MaxItems(15), rng=0, log=log)
    first = s.next_item()
    s.record(next(i for i in bank.item_ids if i != first), 1)
    s._pending, s._pending_draw, s._pending_outlived = None, None, False  # dropped, as those versions did
    if answer_pending_unproposed:
        s.record(first, 0)
    else:
        s.record(s.next_item(), 0)
    s.record(s.next_item(), 1)
    s.close()
    return bank, log, s


@pytest.mark.parametrize("answer_pending_unproposed", [False, True])
def test_logs_in_which_the_pending_proposal_was_dropped_still_resume(tmp_path, answer_pending_unproposed):
    bank, log, original = _legacy_log(tmp_path, answer_pending_unproposed)
    resumed = CATSession.resume(log, bank)
    assert resumed.state_summary()["history"] == original.state_summary()["history"]
    resumed.record(resumed.next_item(), 1)
    resumed.close()


def test_a_batch_opened_by_the_pending_proposal_resumes(tmp_path):
    bank = naive.make_bank("2pl", 10, seed=0)
    log = tmp_path / "batch.jsonl"
    engine = Engine(bank, rng=0, log=log)
    single = engine.next_item("m1")
    batch = engine.next_items("m1", 2)
    assert batch[0] == single
    engine.close()
    resumed = Engine.resume(log, bank)
    assert resumed.session("m1").pending_items == batch
    resumed.close()


# ----------------------------------------------------------------------------- 7. id lengths
def test_serve_refuses_long_ids_and_never_echoes_them(tmp_path):
    bank = naive.make_bank("2pl", 10, seed=0)
    log = tmp_path / "serve.jsonl"
    engine = Engine(bank, rng=0, log=log)
    long_item, long_subject = "i" * 200_000, "s" * 200_000
    engine.next_item("m1")
    replies = _serve(engine, [
        {"op": "record", "subject": "m1", "item": long_item, "correct": 1},
        {"op": "next", "subject": long_subject},
        {"op": "estimate", "subject": long_subject},
        {"op": "record", "subject": "m1", "item": "x" * 999, "correct": 1},  # within the bound: unknown item
        {"op": "record", "subject": "m1", "item": bank.item_ids[0], "correct": "1" * 100_000},
        {"op": "next", "subject": "s" * 1000},  # the longest subject id accepted
    ])
    for reply in replies[:5]:
        assert not reply["ok"] and len(reply["message"]) <= 1100, reply["error"]
        assert "i" * 100 not in reply["message"] and "s" * 100 not in reply["message"]
        assert "x" * 100 not in reply["message"] and "1" * 100 not in reply["message"]
    assert "at most 1,000 characters" in replies[0]["message"] and "200,000 characters" in replies[0]["message"]
    assert "at most 1,000 characters" in replies[1]["message"]
    assert replies[3]["error"] == "UnknownItemError"
    assert replies[5]["ok"] and replies[5]["item"]
    assert long_subject not in engine.sessions and sorted(engine.sessions) == ["m1", "s" * 1000]
    assert log.stat().st_size < 50_000  # nothing long was written


def test_the_readers_refuse_long_ids(tmp_path):
    from catengine.responses.readers import MAX_ID_LENGTH, read_lm_eval_samples

    path = tmp_path / "samples_gsm8k_2026-01-01T00-00-00.jsonl"
    path.write_text("\n".join(json.dumps({"doc_id": k, "exact_match": float(k % 2), "metrics": ["exact_match"]})
                              for k in range(3)) + "\n")
    assert read_lm_eval_samples({"m" * MAX_ID_LENGTH: path}).n_subjects == 1
    with pytest.raises(ValueError, match=r"subject id of 5,000 characters is too long \(ids are at most 1,000"):
        read_lm_eval_samples({"m" * 5000: path})
    with pytest.raises(ValueError, match=r"line 1: item id of 1,2\d\d characters is too long") as info:
        read_lm_eval_samples({"m": path}, item_id="{task}/{doc_id}/" + "x" * 1200)
    assert "x" * 100 not in str(info.value)


# ----------------------------------------------------------------------------- 8. tidy ends
def test_ctrl_c_in_calibration_fit_prints_one_line_and_exits_130(tmp_path, three_llms, monkeypatch, capsys):
    from calibration.methods.cbmm.calibrator import CBMMCalibrator

    def interrupted(self, data):
        raise KeyboardInterrupt

    monkeypatch.setattr(CBMMCalibrator, "fit", interrupted)
    try:
        status = _fit(tmp_path, three_llms)
    except KeyboardInterrupt:
        pytest.fail("the KeyboardInterrupt escaped `calibration fit` (a traceback)")
    assert status == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["calibration fit: interrupted"]


def test_a_future_schema_refusal_advises_an_upgrade_only_to_a_newer_release():
    from importlib.metadata import version

    from catengine.itembank.schema import schema_version_problem

    mine = version("irt-llm-eval")
    same = schema_version_problem(99, mine)
    assert "upgrade to irt-llm-eval >=" not in same and "not newer than this library" in same
    older = schema_version_problem(99, "0.0.1")
    assert "upgrade to irt-llm-eval >=" not in older
    newer = schema_version_problem(99, "999.0")
    assert "upgrade to irt-llm-eval >= 999.0" in newer


def test_the_correctness_message_lists_what_is_accepted():
    from catengine.session import InvalidResponseError

    bank = naive.make_bank("2pl", 5, seed=0)
    s = CATSession(bank, rng=0)
    s.record(s.next_item(), 1.0)  # accepted ...
    with pytest.raises(InvalidResponseError) as info:
        s.record(s.next_item(), 0.5)
    assert "1.0" in str(info.value)  # ... and said to be


def test_an_all_wrong_session_reports_no_negative_zero():
    """Every answer wrong with maximum information on a 5-item bank: the interval is pinned at 0, as
    0.0 (a clip at 0 keeps a -0.0, which the replies would send as "-0.0")."""
    bank = naive.make_bank("2pl", 5, seed=0)
    engine = Engine(bank, selector=SELECTORS["mfi"](), rng=0)  # no log: serve may close it and go on
    text = ""
    for _ in range(5):
        item = engine.next_item("m1")
        text += _serve_text(engine, [{"op": "record", "subject": "m1", "item": item, "correct": 0},
                                     {"op": "estimate", "subject": "m1"}])
    assert '"ok": false' not in text
    assert "-0.0" not in text
    score = engine.session("m1").predicted_score()
    assert (score.low, score.accuracy, score.high) == (0.0, 0.0, 0.0)
    assert math.copysign(1.0, score.low) > 0 and math.copysign(1.0, score.high) > 0
