"""Regression tests of issue 18 (session logs): a log cannot be doubled, forked or half-written.

1. a duplicated / forged / reordered line is refused on resume, naming the line;
2. a failed write leaves nothing behind (the next line does not carry a stale copy);
3. one writer per log: a second writer or resume gets SessionLogLockedError naming the holder.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import naive_engine as naive
from catengine.session import CATSession, Engine, SessionLogError, SessionLogLockedError
from catengine.stopping import MaxItems

TESTS = Path(__file__).resolve().parent
REGRESSIONS = TESTS / "fixtures" / "regressions"


def _logged_session(tmp_path, n=3, name="s.jsonl"):
    bank = naive.make_bank("lart", 40, seed=31)
    oracle, _ = naive.make_oracle(bank.params, seed=32)
    log = tmp_path / name
    s = CATSession(bank, stopping=MaxItems(30), rng=0, log=log)
    for _ in range(n):
        item = s.next_item()
        s.record(item, *oracle[bank.index_of(item)])
    s.close()
    return bank, oracle, log


def _lines(log):
    return log.read_bytes().split(b"\n")[:-1]


def _record_lines(lines):
    return [k for k, ln in enumerate(lines) if b'"event":"record"' in ln]


# ----------------------------------------------------------------------------- 1. duplicated lines
def test_a_duplicated_record_line_is_refused_naming_the_line(tmp_path):
    bank, _, log = _logged_session(tmp_path)
    lines = _lines(log)
    k = _record_lines(lines)[-1]
    log.write_bytes(b"\n".join(lines + [lines[k]]) + b"\n")  # the last answer twice: 3 answers would become 4
    with pytest.raises(SessionLogError, match=rf"{log.name}:{len(lines) + 1}: .*duplicated"):
        CATSession.resume(log, bank)


def test_a_forged_record_in_the_middle_is_refused(tmp_path):
    """The forged line itself is refused: the estimate it carries is not what its answers give
    (a log written by this library version replays to its recorded estimates exactly)."""
    bank, _, log = _logged_session(tmp_path, n=4)
    lines = _lines(log)
    first = _record_lines(lines)[0]
    forged = json.loads(lines[first])
    forged.update(item="q0039", step=2, proposed=False, correct=1 - forged["correct"])
    lines.insert(first + 1, json.dumps(forged).encode())
    log.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(SessionLogError, match=rf"{log.name}:{first + 2}: .*the log was edited or damaged"):
        CATSession.resume(log, bank)


def test_a_changed_last_answer_is_refused_and_an_older_versions_log_only_warned(tmp_path):
    """Flipping the last recorded answer (nothing after it to contradict it) changes the replayed
    estimate: refused for a log of this library version; a log written by another version may differ
    numerically, so there it is a ResumeMismatchWarning and the recomputed value is used."""
    from catengine.session.errors import ResumeMismatchWarning

    bank, _, log = _logged_session(tmp_path, n=4)
    lines = _lines(log)
    last = _record_lines(lines)[-1]
    flipped = json.loads(lines[last])
    flipped["correct"] = 1 - flipped["correct"]
    lines[last] = json.dumps(flipped).encode()
    log.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(SessionLogError, match=rf"{log.name}:{last + 1}: .*the log was edited or damaged"):
        CATSession.resume(log, bank)
    header = json.loads(lines[0])
    header["library_version"] = "0.0.1"
    lines[0] = json.dumps(header).encode()
    log.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.warns(ResumeMismatchWarning, match="differs from the logged one"):
        session = CATSession.resume(log, bank)
    assert session.history[-1].correct == flipped["correct"]


def test_a_record_line_without_its_estimate_is_refused(tmp_path):
    bank, _, log = _logged_session(tmp_path, n=3)
    lines = _lines(log)
    k = _record_lines(lines)[1]
    event = json.loads(lines[k])
    del event["estimate"]
    lines[k] = json.dumps(event).encode()
    log.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(SessionLogError, match=rf"{log.name}:{k + 1}.*estimate"):
        CATSession.resume(log, bank)


def test_the_regression_log_with_a_doubled_record_is_refused(tmp_path):
    """The corpus file: a log whose record 3 appears twice (kept under fixtures/regressions)."""
    bank = naive.make_bank("lart", 40, seed=31)
    log = tmp_path / "doubled.jsonl"
    log.write_bytes((REGRESSIONS / "session_log_doubled_record.jsonl").read_bytes())
    with pytest.raises(SessionLogError, match=":9: .*duplicated"):
        CATSession.resume(log, bank)


# ----------------------------------------------------------------------------- 2. failed writes
def test_a_failed_log_write_leaves_nothing_buffered(tmp_path):
    """A record whose log line hits the file-size limit (EFBIG) fails and rolls back; after the
    limit is lifted the same answer is recorded again and the log resumes to the same session."""
    log = tmp_path / "efbig.jsonl"
    script = textwrap.dedent(f"""
        import json, resource, signal, sys
        sys.path.insert(0, {str(TESTS)!r})
        import naive_engine as naive
        from catengine.session import CATSession
        from catengine.stopping import MaxItems
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # EFBIG instead of a signal
        bank = naive.make_bank("lart", 40, seed=31)
        oracle, _ = naive.make_oracle(bank.params, seed=32)
        s = CATSession(bank, stopping=MaxItems(30), rng=0, log={str(log)!r})
        for _ in range(5):
            item = s.next_item(); s.record(item, *oracle[bank.index_of(item)])
        item = s.next_item()
        size = {str(log)!r}
        import os
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (os.path.getsize(size) + 40, hard))
        try:
            s.record(item, *oracle[bank.index_of(item)])
        except OSError as exc:
            failed = exc.errno
        else:
            failed = None
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        assert s.n_items == 5, s.n_items
        s.record(item, *oracle[bank.index_of(item)])
        for _ in range(2):
            item = s.next_item(); s.record(item, *oracle[bank.index_of(item)])
        s.close()
        print(json.dumps({{"failed": failed, "administered": s.administered, "theta": s.estimate.theta}}))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["failed"] is not None  # the write really failed
    bank = naive.make_bank("lart", 40, seed=31)
    resumed = CATSession.resume(log, bank)
    assert resumed.administered == out["administered"] and len(out["administered"]) == 8
    assert resumed.estimate.theta == out["theta"]
    resumed.close()
    assert all(json.loads(line) for line in _lines(log))  # every line complete


# ----------------------------------------------------------------------------- 3. one writer per log
def test_a_second_writer_or_resume_of_a_live_log_is_refused_naming_the_holder(tmp_path):
    bank, oracle, log = _logged_session(tmp_path)
    first = CATSession.resume(log, bank)
    with pytest.raises(SessionLogLockedError, match=f"process {os.getpid()}"):
        CATSession.resume(log, bank)
    with pytest.raises(SessionLogLockedError):
        Engine.resume(log, bank)
    item = first.next_item()
    first.record(item, *oracle[bank.index_of(item)])
    first.close()  # the lock goes with the writer
    again = CATSession.resume(log, bank)
    assert again.n_items == 4
    again.close()


def test_two_serve_processes_on_one_log(tmp_path):
    """The second `catengine serve --log same.jsonl` exits with an error naming the first's pid."""
    bank = naive.make_bank("2pl", 30, seed=5)
    from catengine import write_item_bank

    path = write_item_bank(bank, tmp_path / "banks" / "testbank")
    log = tmp_path / "served.jsonl"
    env = dict(os.environ, PYTHONPATH=str(TESTS.parent))
    cmd = [sys.executable, "-m", "catengine.cli", "serve", "--bank", str(path), "--log", str(log)]
    first = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        first.stdin.write(json.dumps({"op": "next", "subject": "m"}) + "\n")
        first.stdin.flush()
        assert json.loads(first.stdout.readline())["ok"]
        second = subprocess.run(cmd, input=json.dumps({"op": "next", "subject": "m"}) + "\n", capture_output=True,
                                text=True, env=env, timeout=120)
        assert second.returncode == 2 and f"process {first.pid}" in second.stderr, second.stderr
    finally:
        first.stdin.close()
        first.wait(timeout=60)
