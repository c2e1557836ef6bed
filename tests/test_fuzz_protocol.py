"""Fuzz: `catengine serve` protocol lines. Property: one reply per line, each ok or a named protocol
error (never InternalError) whose message is at most 1,000 characters and quotes no long value whole,
the server keeps going, no id longer than 1,000 characters reaches a session, and its log resumes to
the same sessions."""

import io
import json

from hypothesis import given
from hypothesis import strategies as st

from fuzz_support import ScratchFolder, fuzz_settings

import naive_engine as naive
from catengine.session import Engine
from catengine.session.serve import serve

FUZZ = fuzz_settings(100)  # bounded and deterministic in CI
BANK = naive.make_bank("lart", 25, seed=4)
SCRATCH = ScratchFolder("fuzz_protocol_")
_scratch_folder = SCRATCH.fixture()
NAMED = {"MalformedJSON", "InvalidRequestError", "UnknownSubjectError", "UnknownItemError", "ItemAlreadyAnsweredError",
         "InvalidResponseError", "CoTOutOfRangeError", "BankExhaustedError", "SessionLogError"}

anything = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
                        lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=4), inner, max_size=2),
                        max_leaves=4)
subjects = st.sampled_from(["m1", "m2", "", "\ud800", "m1 ", "x" * 300, "x" * 1000, "z" * 1001, "z" * 5000]) | anything
items = st.sampled_from(list(BANK.item_ids[:6]) + ["nope", "", "y" * 999, "y" * 5000]) | anything
numbers = st.sampled_from([0, 1, 2, -1, 0.5, True, None, 10**400, 1e300, -5, 300, 5e-324, "1", [1]]) | anything
requests = st.fixed_dictionaries(
    {"op": st.sampled_from(["next", "record", "estimate", "start", "exclude", "subjects", "fly"]) | anything},
    optional={"subject": subjects, "item": items, "correct": numbers, "cot_length": numbers, "force": anything, "id": anything},
)


def _line(req) -> bytes:
    if isinstance(req, bytes):
        return req
    return json.dumps(req).encode("utf-8", "surrogatepass")


well_formed = st.builds(
    lambda op, subject, item, correct, cot: {"op": op, "subject": subject, "item": item, "correct": correct, "cot_length": cot},
    st.sampled_from(["next", "record", "record", "record", "exclude", "estimate"]), st.sampled_from(["m1", "m2"]),
    st.sampled_from(BANK.item_ids[:8]), st.sampled_from([0, 1]), st.none() | st.integers(0, 5000),
)
long_ids = st.builds(  # ids at and beyond the 1,000-character bound, in otherwise valid requests
    lambda op, subject, item: {"op": op, "subject": subject, "item": item, "correct": 1},
    st.sampled_from(["next", "record", "estimate", "exclude"]), st.sampled_from(["m1", "x" * 1000, "z" * 5000]),
    st.sampled_from([BANK.item_ids[0], "y" * 999, "y" * 5000]),
)
raw_lines = st.sampled_from([b"not json", b"[" * 50_000, b"\xff\xfe", b"{}", b"null", b'{"op": "quit"', b"9" * 5000])


@FUZZ
@given(reqs=st.lists(well_formed | well_formed | requests | raw_lines | long_ids, min_size=1, max_size=16))
def test_fuzzed_protocol_lines(reqs):
    log = SCRATCH.new("_log.jsonl")
    lines = [_line(r).replace(b"\n", b" ") for r in reqs if not (isinstance(r, dict) and r.get("op") == "quit")]
    payload = b"".join(line + b"\n" for line in lines if line.strip())
    engine = Engine(BANK, rng=0, log=log)
    stdout = io.StringIO()
    assert serve(engine, io.TextIOWrapper(io.BytesIO(payload), encoding="utf-8"), stdout) == 0
    replies = [json.loads(r) for r in stdout.getvalue().splitlines()]
    assert len(replies) == payload.count(b"\n")
    for reply in replies:
        assert reply["ok"] or reply["error"] in NAMED, reply
        if not reply["ok"]:
            assert len(reply["message"]) <= 1100 and "z" * 100 not in reply["message"], reply["message"][:200]
            assert "y" * 100 not in reply["message"], reply["message"][:200]
        if reply["ok"] and "estimate" in reply:
            assert all(v is not None for k, v in reply["estimate"].items() if k != "theta_95")
    assert all(len(subject) <= 1000 for subject in engine.sessions)
    # the log holds exactly what the sessions did: resuming rebuilds them
    resumed = Engine.resume(log, BANK)
    assert sorted(resumed.sessions) == sorted(engine.sessions)
    for subject, session in engine.sessions.items():
        a, b = session.state_summary(), resumed.sessions[subject].state_summary()
        assert a["history"] == b["history"] and a["pending"] == b["pending"] and a["rng"] == b["rng"]
    resumed.close()
