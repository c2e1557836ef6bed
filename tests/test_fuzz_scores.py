"""Fuzz: the full-benchmark score over extreme but plausible banks and answer patterns. Property:
after every answer, ``predicted_score()`` (and the model-based score) is finite with
low <= accuracy <= high inside the attainable range, per category too, and no interval end is a
negative zero; a session's estimate stays finite.

The banks stay inside the schema's plausible ranges (``catengine.itembank.schema.PLAUSIBLE_RANGES``:
|a| <= 50, |b| <= 100) and reach their corners: slopes of 50 with intercepts of +-30 to +-100 make
every prediction near-certain, where variances are differences of nearly equal sums.
"""

import math
import os

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from catengine import ItemBank
from catengine.itembank.schema import PLAUSIBLE_RANGES
from catengine.selection import SELECTORS
from catengine.session import CATSession
from catengine.stopping import MaxItems

# bounded and deterministic in CI; CATENGINE_FUZZ_EXAMPLES=N runs a longer, randomised search
_N = int(os.environ.get("CATENGINE_FUZZ_EXAMPLES", "0"))
FUZZ = settings(max_examples=_N or 40, deadline=None, derandomize=not _N, database=None,
                suppress_health_check=list(HealthCheck))

A_MAX = PLAUSIBLE_RANGES["a"][1]
B_MAX = PLAUSIBLE_RANGES["b"][1]
slopes = st.one_of(st.sampled_from([A_MAX, -A_MAX, 0.05, 1.0, 25.0]), st.floats(-A_MAX, A_MAX))
intercepts = st.one_of(st.sampled_from([30.0, -30.0, B_MAX, -B_MAX, 0.0]), st.floats(-B_MAX, B_MAX))


@st.composite
def banks(draw):
    """A 2PL, 4PL or LaRT bank of 4-20 items at the corners of the plausible ranges, with a
    category column on half of them."""
    model = draw(st.sampled_from(["2pl", "4pl", "lart"]))
    n = draw(st.integers(4, 20))
    a = np.array(draw(st.lists(slopes, min_size=n, max_size=n)))
    if model == "lart":  # LaRT slopes are positive (the speed-accuracy model's convention)
        a = np.clip(np.abs(a), 0.05, A_MAX)
    b = np.array(draw(st.lists(intercepts, min_size=n, max_size=n)))
    layout = draw(st.sampled_from(["drawn", "alternating", "spread"]))
    if layout != "drawn":  # one steep slope; intercepts of +-B alternating in sign, or spread evenly over [-B, B]
        a = np.full(n, draw(st.sampled_from([A_MAX, 25.0])))
        big = draw(st.sampled_from([30.0, B_MAX]))
        b = np.where(np.arange(n) % 2 == 0, big, -big) if layout == "alternating" else np.linspace(-big, big, n)
        if model == "lart":
            a = np.abs(a)
    kw, extra = {"a": a, "b": b}, {}
    if model == "4pl":
        kw["c"] = np.array(draw(st.lists(st.sampled_from([0.0, 0.1, 0.25]), min_size=n, max_size=n)))
        kw["d"] = np.array(draw(st.lists(st.sampled_from([1.0, 0.9, 0.75]), min_size=n, max_size=n)))
    elif model == "lart":
        rng = np.random.default_rng(draw(st.integers(0, 2**16)))
        kw.update(omega=rng.normal(6.0, 0.5, n), phi=rng.uniform(0.5, 2.0, n), lam=rng.uniform(0.5, 1.5, n))
        extra = {"rho": draw(st.sampled_from([-0.6, 0.0, 0.9])), "cot_offset": 1.0}
    meta = {"benchmark": np.array(["alpha", "beta"] * n)[:n]} if draw(st.booleans()) else None
    return ItemBank.from_params(model, [f"q{k:03d}" for k in range(n)], bank_id="fuzz", item_metadata=meta,
                                **extra, **kw)


def _negative_zero(x) -> bool:
    return isinstance(x, float) and x == 0.0 and math.copysign(1.0, x) < 0


def _check_score(score, answered_correct: int, n_answered: int):
    n = score.n_items
    assert all(math.isfinite(v) for v in (score.accuracy, score.low, score.high, score.sd)), score
    assert score.sd >= 0, score
    lowest, highest = answered_correct / n, (answered_correct + n - n_answered) / n  # the attainable range
    tol = 1e-9
    assert lowest - tol <= score.low <= score.accuracy + tol, score
    assert score.accuracy <= score.high + tol and score.high <= highest + tol, score
    assert not any(_negative_zero(v) for v in (score.accuracy, score.low, score.high, score.sd)), score
    if score.cot_total is not None:
        assert score.cot_total_low <= score.cot_total <= score.cot_total_high, score


def _check_all(session, answers):
    correct = sum(answers)
    for method in ("auto", "model"):
        score = session.predicted_score(method=method)
        _check_score(score, correct, len(answers))
        for label, part in score.by_category.items():
            assert part.n_items > 0 and 0 <= part.n_observed <= part.n_items, (label, part)
            assert all(math.isfinite(v) for v in (part.accuracy, part.low, part.high, part.sd)), (label, part)
            assert part.low - 1e-9 <= part.accuracy <= part.high + 1e-9, (label, part)
            assert not any(_negative_zero(v) for v in (part.low, part.high)), (label, part)


def _model_answer(bank, item, theta, u) -> int:
    """The answer of an LLM of trait ``theta`` that follows the bank's model (uniform draw ``u``)."""
    from scipy.special import expit, ndtr

    p, j = bank.params, bank.index_of(item)
    z = p.a[j] * theta + p.b[j]
    if p.response_model == "lart":
        return int(u < ndtr(z))
    if p.response_model == "4pl":
        return int(u < p.c[j] + (p.d[j] - p.c[j]) * expit(z))
    return int(u < expit(z))


# answers: a drawn pattern, or those of an LLM that follows the bank's model (trait, seed)
patterns = st.one_of(st.lists(st.booleans(), min_size=1, max_size=20),
                     st.tuples(st.floats(-3.0, 3.0), st.integers(0, 2**16)))


@FUZZ
@given(bank=banks(), answers=patterns, selector=st.sampled_from([None, None, "mfi", "randomised", "random"]),
       seed=st.integers(0, 3))
def test_scores_are_finite_and_ordered_on_extreme_banks(bank, answers, selector, seed):
    from_model = isinstance(answers, tuple)
    n = bank.n_items if from_model else min(len(answers), bank.n_items)
    uniforms = np.random.default_rng(answers[1] if from_model else 0).random(n)
    lart = bank.params.response_model == "lart"
    s = CATSession(bank, selector=None if selector is None else SELECTORS[selector](), stopping=MaxItems(n), rng=seed)
    given_answers = []
    for k in range(n):
        item = s.next_item()
        y = _model_answer(bank, item, answers[0], uniforms[k]) if from_model else int(answers[k])
        s.record(item, y, cot_length=(50.0 * (k + 1)) if lart and k % 3 else None)
        given_answers.append(y)
        est = s.estimate
        assert math.isfinite(est.theta) and math.isfinite(est.theta_sd) and est.theta_sd > 0, est
        _check_all(s, given_answers)
    s.finished  # noqa: B018 - the stopping rule evaluates the score too: it must not raise


@FUZZ
@given(bank=banks(), seed=st.integers(0, 3), wrong=st.booleans())
def test_all_right_or_all_wrong_sessions_stay_inside_their_range(bank, seed, wrong):
    """The extreme answer patterns: every answer wrong (the interval is pinned at 0 once the rest
    is certain) or every answer right, with the maximum-information selector."""
    n = bank.n_items
    s = CATSession(bank, selector=SELECTORS["mfi"](), stopping=MaxItems(n), rng=seed)
    answers = []
    for _ in range(n):
        s.record(s.next_item(), 0 if wrong else 1)
        answers.append(0 if wrong else 1)
        _check_all(s, answers)


# ----------------------------------------------------------------------------- serve over extreme banks
#: the errors a well-formed request may get: its item already answered, its subject not started yet
#: (record / estimate / exclude before next or start), the bank exhausted
EXPECTED_ERRORS = {"ItemAlreadyAnsweredError", "UnknownSubjectError", "BankExhaustedError"}

actions = st.lists(st.one_of(
    st.tuples(st.just("next"), st.sampled_from(["m1", "m2"]), st.booleans()),
    st.tuples(st.just("answer"), st.sampled_from(["m1", "m2"]), st.sampled_from([0, 1, 1.0, True, False])),
    st.tuples(st.just("record"), st.sampled_from(["m1", "m2"]), st.integers(0, 19), st.sampled_from([0, 1])),
    st.tuples(st.just("next_batch"), st.sampled_from(["m1", "m2"]), st.integers(1, 3)),
    st.tuples(st.just("exclude"), st.sampled_from(["m1", "m2"]), st.integers(0, 19)),
    st.tuples(st.just("estimate"), st.sampled_from(["m1", "m2"])),
), min_size=1, max_size=30)


class _Requests:
    """stdin for ``serve`` whose next line is built from the engine's state when it is read: an
    "answer" answers the subject's pending item (an item of the bank when none is pending)."""

    def __init__(self, engine, bank, actions):
        self.engine, self.bank, self.actions = engine, bank, list(actions)

    def readline(self) -> str:
        import json

        if not self.actions:
            return ""
        act = self.actions.pop(0)
        ids = self.bank.item_ids
        op, subject = act[0], act[1]
        req = {"op": op, "subject": subject, "id": len(self.actions)}
        if op == "next":
            req["force"] = act[2]
        elif op == "answer":
            session = self.engine.sessions.get(subject)
            pending = None if session is None else session.pending_item
            req.update(op="record", item=pending if pending is not None else ids[0], correct=act[2])
        elif op == "record":
            req.update(item=ids[act[2] % len(ids)], correct=act[3])
        elif op == "next_batch":
            req["k"] = act[2]
        elif op == "exclude":
            req["item"] = ids[act[2] % len(ids)]
        if op in ("answer", "record") and self.bank.params.response_model == "lart":
            req["cot_length"] = 40 * len(self.actions) + 1
        return json.dumps(req) + "\n"


@FUZZ
@given(bank=banks(), acts=actions)
def test_serve_on_extreme_banks_answers_every_well_formed_request(bank, acts, tmp_path_factory):
    import io
    import json

    from catengine.session import Engine
    from catengine.session.serve import serve

    log = tmp_path_factory.mktemp("serve") / "log.jsonl"
    engine = Engine(bank, rng=0, log=log)
    stdout = io.StringIO()
    assert serve(engine, _Requests(engine, bank, acts), stdout) == 0
    replies = [json.loads(line) for line in stdout.getvalue().splitlines()]
    assert len(replies) == len(acts)
    for reply in replies:
        assert reply["ok"] or reply["error"] in EXPECTED_ERRORS, reply
        assert "failed" not in reply, reply
        if reply["ok"] and "score" in reply:
            score = reply["score"]
            assert None not in (score["accuracy"], score["low"], score["high"]), reply
            assert score["low"] - 1e-9 <= score["accuracy"] <= score["high"] + 1e-9, reply
    # the log holds what the sessions did: resuming rebuilds them, and each can go on
    resumed = Engine.resume(log, bank)
    assert sorted(resumed.sessions) == sorted(engine.sessions)
    for subject, session in engine.sessions.items():
        a, b = session.state_summary(), resumed.sessions[subject].state_summary()
        assert a["history"] == b["history"] and a["pending"] == b["pending"], subject
        again = resumed.sessions[subject]
        again.finished  # noqa: B018 - the stopping rule (and its score) must not raise
        if again.n_items < bank.n_items and len(again._excluded) + again.n_items < bank.n_items:
            again.next_item()
    resumed.close()
