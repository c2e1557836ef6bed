"""lm-evaluation-harness file loop (catengine.adapters.lm_eval, ``catengine lm-eval``) on files in the
harness's formats: the --samples mapping it reads, the samples_<task>_<timestamp>.jsonl it writes."""

import copy
import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest

from catengine import ItemBank, write_item_bank
from catengine.adapters.lm_eval import (BatchAnswerError, DocIds, ingest_paired_samples, ingest_samples, next_samples,
                                        sample_files)
from catengine.cli import main
from catengine.session import CATSession
from catengine.stopping import MaxItems

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "harness" / "lm_eval"


def _bank(ids, model="2pl", seed=0, bank_id="harnessbank"):
    rng = np.random.default_rng(seed)
    n = len(ids)
    kw = dict(a=rng.uniform(0.8, 2.0, n), b=rng.normal(0, 1, n))
    extra = {}
    if model == "lart":
        kw.update(omega=rng.normal(4.0, 0.3, n), phi=rng.uniform(0.5, 1.0, n), lam=rng.uniform(0.5, 1.0, n))
        extra = dict(rho=-0.5, cot_offset=1.0)
    return ItemBank.from_params(model, list(ids), bank_id=bank_id, **extra, **kw)


def _fixture_line(task: str) -> dict:
    """The first logged line of the fixture of ``task`` (generative tasks without one: gsm8k's)."""
    files = sorted((FIXTURES / "model-b").glob(f"samples_{task}_*.jsonl"))
    files = files or sorted((FIXTURES / "model-b").glob("samples_gsm8k_*.jsonl"))
    return json.loads(files[0].read_text().splitlines()[0])


def fake_harness(samples, out_dir: Path, answers, *, stamp: str, filters=("strict-match",), n_docs=None):
    """What ``lm_eval --samples samples.json --log_samples --output_path out_dir`` writes, following
    lm_eval/evaluator.py: the selected documents are visited in dataset order and logged under
    doc_id = indices[k]; one line per document and filter; metric as a top-level field."""
    model_dir = out_dir / "my-model"
    model_dir.mkdir(parents=True, exist_ok=True)
    for task, indices in samples.items():
        if n_docs is not None:
            assert all(e < n_docs for e in indices)  # the harness's own check
        selected = [i for i in range(max(indices) + 1) if i in indices]  # enumerate(eval_docs) if i in samples
        lines = []
        for f in filters:
            for k, true_index in enumerate(selected):
                logged = indices[k]
                correct, tokens = answers[(task, true_index)]
                rec = copy.deepcopy(_fixture_line(task))
                rec.update({"doc_id": logged, "filter": f, "doc": {"row": true_index}})
                metric = rec["metrics"][0]
                rec[metric] = float(correct)
                if tokens is not None:
                    rec["output_tokens"] = tokens
                lines.append(json.dumps(rec))
        (model_dir / f"samples_{task}_{stamp}.jsonl").write_text("\n".join(lines) + "\n")
    return model_dir


def test_doc_ids_map_item_ids_to_documents_and_back():
    d = DocIds()
    assert d.doc("gsm8k/17") == ("gsm8k", 17) and d.item("gsm8k", 17) == "gsm8k/17"
    assert DocIds("math500/{doc_id}", task="hendrycks_math500").doc("math500/3") == ("hendrycks_math500", 3)
    assert DocIds("{task}:{doc_id}", task="a.b").doc("a.b:4") == ("a.b", 4)
    with pytest.raises(ValueError, match="does not match"):
        DocIds("{task}:{doc_id}", task="a.b").doc("aXb:4")  # the task is literal, not a pattern
    with pytest.raises(ValueError, match="'q0001'"):
        d.doc("q0001")
    with pytest.raises(ValueError, match="name the harness task"):
        DocIds("math500/{doc_id}")
    with pytest.raises(ValueError, match="nothing else"):
        DocIds("{task}/{row}")


def test_next_batch_is_the_harness_samples_mapping_sorted_per_task(tmp_path):
    ids = [f"gsm8k/{i}" for i in range(30)] + [f"arc_easy/{i}" for i in range(30)]
    s = CATSession(_bank(ids, seed=1), rng=0)
    samples = next_samples(s, 12, DocIds())
    batch = s.pending_items
    assert sorted(f"{t}/{i}" for t, docs in samples.items() for i in docs) == sorted(batch)
    assert all(docs == sorted(set(docs)) for docs in samples.values())
    assert json.loads(json.dumps(samples)) == samples  # the harness parses it with json.loads
    # a fake harness run with these indices logs every document under its own index (sorted lists);
    # an unsorted list would mislabel them (the harness pairs the k-th visited document with indices[k])
    task, docs = max(samples.items(), key=lambda kv: len(kv[1]))
    assert len(docs) > 1
    answers = {(task, i): (i % 2, None) for i in docs}
    for order, label in ((docs, "sorted"), (docs[::-1], "reversed")):
        lines = (fake_harness({task: order}, tmp_path / label, answers, stamp="x")
                 / f"samples_{task}_x.jsonl").read_text().splitlines()
        logged = [(json.loads(line)["doc_id"], json.loads(line)["doc"]["row"]) for line in lines]
        assert all(a == b for a, b in logged) == (label == "sorted")


def test_ingest_reads_the_harness_fixture_logs():
    ids = [f"gsm8k/{i}" for i in range(3)] + [f"arc_easy/{i}" for i in range(3)] + [f"gsm8k/{i}" for i in range(3, 10)]
    bank = _bank(ids, model="lart", seed=2)
    s = CATSession(bank, rng=0)
    # model-b: gsm8k docs 0 and 2 with recorded token counts, exact_match
    rep = ingest_samples(s, FIXTURES / "model-b", DocIds(task="gsm8k"))
    assert rep.recorded == ["gsm8k/0", "gsm8k/2"] and rep.unproposed == rep.recorded
    h = {r.item: r for r in s.history}
    assert (h["gsm8k/0"].correct, h["gsm8k/0"].cot_length) == (1, 9.0) and h["gsm8k/2"].cot_length == 21.0
    # arc_easy (log-likelihood task: acc and acc_norm; no generated text, so no CoT length)
    with pytest.raises(ValueError, match="cannot infer the correctness metric"):
        ingest_samples(s, FIXTURES / "model-b", DocIds(task="arc_easy"))
    rep = ingest_samples(s, FIXTURES / "model-b", DocIds(task="arc_easy"), metric="acc")
    assert rep.recorded == ["arc_easy/0", "arc_easy/1", "arc_easy/2"]
    assert [h.correct for h in s.history[2:]] == [0, 1, 1] and all(r.cot_length is None for r in s.history[2:])
    # re-ingesting the whole directory (both tasks) changes nothing
    again = ingest_samples(s, FIXTURES / "model-b", DocIds(), metric={"gsm8k": "exact_match", "arc_easy": "acc"})
    assert again.recorded == [] and again.already_recorded == 5 and len(again.files) == 2
    # model-a: two filters per gsm8k doc, so the filter must be named; its answers conflict with model-b's
    t = CATSession(bank, rng=0)
    with pytest.raises(ValueError, match="several filters"):
        ingest_samples(t, FIXTURES / "model-a", DocIds(task="gsm8k"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no recorded token counts: whitespace word counts (warned)
        rep = ingest_samples(t, FIXTURES / "model-a", DocIds(task="gsm8k"), filter_name="flexible-extract")
    assert rep.recorded == ["gsm8k/0", "gsm8k/1", "gsm8k/2"] and [r.correct for r in t.history] == [1, 1, 0]
    assert all(r.cot_length > 0 for r in t.history)
    with pytest.raises(ValueError, match="'gsm8k/1' has correct=0 .* already recorded correct=1"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ingest_samples(t, FIXTURES / "model-a", DocIds(task="gsm8k"), filter_name="strict-match")


def test_ingest_rejects_documents_outside_the_bank_and_missing_output(tmp_path):
    bank = _bank([f"gsm8k/{i}" for i in (0, 1)], seed=3)
    s = CATSession(bank, rng=0)
    with pytest.raises(ValueError, match="gsm8k/2"):
        ingest_samples(s, FIXTURES / "model-b", DocIds(task="gsm8k"))
    with pytest.raises(FileNotFoundError, match="no lm-evaluation-harness samples files"):
        sample_files(tmp_path)
    with pytest.raises(FileNotFoundError, match="samples_mmlu_"):
        sample_files(FIXTURES / "model-b", "mmlu")
    assert s.n_items == 0


def test_cli_loop_with_a_simulated_harness_equals_the_batch_engine(tmp_path, capsys):
    ids = [f"math500/{i}" for i in range(40)]
    bank_dir = write_item_bank(_bank(ids, model="lart", seed=4, bank_id="m500"), tmp_path / "banks" / "m500")
    rng = np.random.default_rng(5)
    truth = {("hendrycks_math500", i): (int(rng.random() < 0.6), float(rng.integers(50, 900))) for i in range(40)}
    log, out = tmp_path / "run.jsonl", tmp_path / "out"
    common = ["--log", str(log), "--task", "hendrycks_math500", "--item-id", "math500/{doc_id}"]
    rounds = 0
    while True:
        status = main(["lm-eval", "next", "--bank", str(bank_dir), *common, "--k", "5", "--max-items", "17",
                       "--target-sd", "0", "--seed", "1"])
        captured = capsys.readouterr()
        if status == 1:
            assert "finished" in captured.err
            break
        assert status == 0, captured.err
        samples_file = tmp_path / f"samples_{rounds}.json"
        samples_file.write_text(captured.out)
        samples = json.loads(samples_file.read_text())
        assert list(samples) == ["hendrycks_math500"]
        fake_harness(samples, out, truth, stamp=f"2026-12-01T10-00-{rounds:02d}.000001", n_docs=40)
        assert main(["lm-eval", "ingest", *common, str(out)]) == 0
        summary = json.loads(capsys.readouterr().out)
        assert summary["pending"] == [] and summary["unproposed"] == []
        assert len(summary["recorded"]) == len(samples["hendrycks_math500"])
        rounds += 1
    assert rounds == 4  # 5 + 5 + 5 + 2 items
    from catengine.session import Engine

    done = Engine.resume(log).session("model")
    assert done.n_items == 17
    # the same test driven directly: same items, same answers (recorded in harness order), same estimate
    ref = Engine(done.bank, rng=1, **{k: getattr(done, k) for k in ("selector", "estimator", "stopping")}).start("model")
    while not ref.finished:
        for item in sorted(ref.next_items(min(5, 17 - ref.n_items)), key=lambda i: int(i.split("/")[1])):
            ref.record(item, *truth[("hendrycks_math500", int(item.split("/")[1]))])
    assert [r.item for r in ref.history] == [r.item for r in done.history]
    assert ref.estimate.theta == pytest.approx(done.estimate.theta, abs=1e-12)
    assert [r.cot_length for r in done.history] == [truth[("hendrycks_math500", int(r.item.split("/")[1]))][1]
                                                     for r in done.history]
    done.close()


def test_cli_half_ingested_batch_is_proposed_again_and_errors_are_clear(tmp_path, capsys):
    bank_dir = write_item_bank(_bank([f"gsm8k/{i}" for i in range(20)], seed=6), tmp_path / "banks" / "b")
    log = tmp_path / "run.jsonl"
    assert main(["lm-eval", "ingest", "--log", str(log), str(tmp_path)]) == 2
    assert "no session log yet" in capsys.readouterr().err
    assert main(["lm-eval", "next", "--bank", str(bank_dir), "--log", str(log), "--k", "6"]) == 0
    first = json.loads(capsys.readouterr().out)["gsm8k"]
    # the harness ran only part of the batch (e.g. it crashed): those answers are ingested
    fake_harness({"gsm8k": first[:2]}, tmp_path / "out", {("gsm8k", i): (1, None) for i in first},
                 stamp="2026-12-01T09-00-00.000001")
    assert main(["lm-eval", "ingest", "--log", str(log), str(tmp_path / "out")]) == 0
    assert sorted(json.loads(capsys.readouterr().out)["pending"]) == sorted(f"gsm8k/{i}" for i in first[2:])
    assert main(["lm-eval", "next", "--log", str(log), "--k", "6"]) == 0
    assert json.loads(capsys.readouterr().out) == {"gsm8k": first[2:]}
    assert main(["lm-eval", "next", "--log", str(log), "--k", "6", "--item-id", "{task}#{doc_id}"]) == 2
    assert "does not match the item id template" in capsys.readouterr().err
    assert main(["lm-eval", "next", "--log", str(log), "--k", "0"]) == 2
    assert "--k (the batch size) must be an integer >= 1, got 0" in capsys.readouterr().err


def _write_samples(path: Path, rows) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _gsm_rows(docs, tokens, correct=None):
    base = _fixture_line("gsm8k")
    rows = []
    for k, (doc, t) in enumerate(zip(docs, tokens)):
        rec = copy.deepcopy(base)
        rec.update({"doc_id": doc, "filter": "strict-match", "exact_match": float(1 if correct is None else correct[k]),
                    "output_tokens": t})
        rows.append(rec)
    return rows


def test_cli_ingest_checks_the_whole_batch_records_every_valid_answer_and_names_the_bad_one(tmp_path, capsys):
    """issue 34 row 3: the third sample of a file has output_tokens 2e9 (beyond the session's plausible
    range). Nothing is recorded before the whole file is checked; then every valid answer is recorded
    (the two before it and the two after), and the error names the file, line, document and value
    and says what was recorded. Ingesting the fixed file records the last one."""
    bank_dir = write_item_bank(_bank([f"gsm8k/{i}" for i in range(20)], model="lart", seed=6), tmp_path / "banks" / "b")
    log = tmp_path / "run.jsonl"
    assert main(["lm-eval", "next", "--bank", str(bank_dir), "--log", str(log), "--k", "5", "--target-sd", "0"]) == 0
    docs = json.loads(capsys.readouterr().out)["gsm8k"]
    name = "samples_gsm8k_2026-12-01T09-00-00.000001.jsonl"
    out = tmp_path / "out"
    tokens = [120, 80, 2e9, 95, 60]
    _write_samples(out / "my-model" / name, _gsm_rows(docs, tokens))
    assert main(["lm-eval", "ingest", "--log", str(log), str(out)]) == 2
    captured = capsys.readouterr()
    assert f"{name} line 3 (doc_id {docs[2]}): item 'gsm8k/{docs[2]}': output_tokens = 2e+09" in captured.err
    assert "4 valid answer(s) recorded" in captured.err and f"still pending: 'gsm8k/{docs[2]}'" in captured.err
    stdout = json.loads(captured.out)  # the report of what was recorded, on stdout as on success
    assert sorted(stdout["recorded"]) == sorted(f"gsm8k/{d}" for k, d in enumerate(docs) if k != 2)
    assert stdout["pending"] == [f"gsm8k/{docs[2]}"] and len(stdout["problems"]) == 1
    from catengine.session import Engine

    engine = Engine.resume(log)
    session = engine.session("model")
    assert {r.item: r.cot_length for r in session.history} == {
        f"gsm8k/{d}": float(t) for d, t in zip(docs, tokens) if t != 2e9}
    engine.close()
    # the fixed file: the four recorded answers are checked and skipped, the fifth is recorded
    tokens[2] = 300
    _write_samples(out / "my-model" / name, _gsm_rows(docs, tokens))
    assert main(["lm-eval", "ingest", "--log", str(log), str(out)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["recorded"] == [f"gsm8k/{docs[2]}"] and summary["already_recorded"] == 4 and summary["pending"] == []


def test_ingest_bad_values_anywhere_in_a_batch_leave_the_valid_ones_recorded(tmp_path):
    """Bad lines the reader itself rejects (a negative token count, a non-binary metric) are collected
    too: the valid lines of the batch are recorded, each bad one is named."""
    s = CATSession(_bank([f"gsm8k/{i}" for i in range(10)], model="lart", seed=7), rng=0)
    rows = _gsm_rows([0, 1, 2, 3], [10, -5, 30, 40])
    rows[2]["exact_match"] = 0.5
    name = "samples_gsm8k_2026-12-01T09-00-00.jsonl"
    _write_samples(tmp_path / name, rows)
    with pytest.raises(ValueError) as info:
        ingest_samples(s, tmp_path, DocIds())
    message = str(info.value)
    assert f"{name} line 2 (doc_id 1): recorded token count 'output_tokens' = -5" in message
    assert f"{name} line 3 (doc_id 2): metric 'exact_match' = 0.5 is not binary" in message
    assert sorted(r.item for r in s.history) == ["gsm8k/0", "gsm8k/3"] == sorted(info.value.recorded)
    assert "2 valid answer(s) recorded" in message
    from catengine.adapters.lm_eval import BatchAnswerError

    assert isinstance(info.value, BatchAnswerError) and info.value.pending == s.pending_items


def test_reingesting_an_item_with_a_different_cot_length_is_refused_naming_both_values(tmp_path):
    """issue 34 row 8: a re-ingested answer whose CoT length differs from the recorded one was
    silently skipped; it is refused, naming the item and both values (nothing recorded is changed)."""
    s = CATSession(_bank([f"gsm8k/{i}" for i in range(10)], model="lart", seed=8), rng=0)
    name = "samples_gsm8k_2026-12-01T09-00-00.jsonl"
    _write_samples(tmp_path / "a" / name, _gsm_rows([0, 1], [100, 200]))
    assert ingest_samples(s, tmp_path / "a", DocIds()).recorded == ["gsm8k/0", "gsm8k/1"]
    _write_samples(tmp_path / "b" / name, _gsm_rows([0, 1, 2], [100, 250, 300]))
    with pytest.raises(ValueError, match=r"line 2 \(doc_id 1\): item 'gsm8k/1' has output_tokens = 250 in the harness "
                                         r"output, but the session of 'subject' already recorded CoT length 200"):
        ingest_samples(s, tmp_path / "b", DocIds())
    assert {r.item: r.cot_length for r in s.history} == {"gsm8k/0": 100.0, "gsm8k/1": 200.0, "gsm8k/2": 300.0}
    # checking correctness only (use_cot=False) accepts it as the same answer
    again = ingest_samples(s, tmp_path / "b", DocIds(), use_cot=False)
    assert again.recorded == [] and again.already_recorded == 3


def test_cli_next_and_ingest_print_the_predicted_full_benchmark_score(tmp_path, capsys):
    """issue 32: the loop reports the predicted full-benchmark accuracy with its interval, not theta only."""
    bank_dir = write_item_bank(_bank([f"gsm8k/{i}" for i in range(20)], model="lart", seed=9), tmp_path / "banks" / "b")
    log = tmp_path / "run.jsonl"
    assert main(["lm-eval", "next", "--bank", str(bank_dir), "--log", str(log), "--k", "4", "--target-sd", "0",
                 "--max-items", "4"]) == 0
    captured = capsys.readouterr()
    docs = json.loads(captured.out)["gsm8k"]
    assert "predicted full-benchmark accuracy" in captured.err and "95% interval" in captured.err
    _write_samples(tmp_path / "out" / "samples_gsm8k_2026-12-01T09-00-00.jsonl", _gsm_rows(docs, [50] * 4))
    assert main(["lm-eval", "ingest", "--log", str(log), str(tmp_path / "out")]) == 0
    captured = capsys.readouterr()
    estimate = json.loads(captured.out)["estimate"]
    assert estimate["predicted_score"].startswith("accuracy ") and "95% interval" in estimate["predicted_score"]
    assert estimate["accuracy_95"][0] <= estimate["accuracy"] <= estimate["accuracy_95"][1]
    assert estimate["score"]["n_observed"] == 4 and estimate["score"]["n_items"] == 20
    assert "predicted full-benchmark accuracy" in captured.err
    assert main(["lm-eval", "next", "--log", str(log), "--k", "4"]) == 1
    captured = capsys.readouterr()
    assert "finished" in captured.err and "predicted full-benchmark accuracy" in captured.err
    assert "from 4 of 20 items" in captured.err and "stopped: reached 4 items" in captured.err


def _run_loop(tmp_path, capsys, bank_dir, answers, k, options=()):
    """The next / harness / ingest loop until `next` exits 1; returns the batch sizes and the last stderr."""
    log, out = tmp_path / "run.jsonl", tmp_path / "out"
    batches = []
    while True:
        status = main(["lm-eval", "next", "--bank", str(bank_dir), "--log", str(log), "--k", str(k), "--seed", "3",
                       *options])
        captured = capsys.readouterr()
        if status == 1:
            return batches, captured.err, log
        assert status == 0, captured.err
        samples = json.loads(captured.out)
        batches.append(sum(len(v) for v in samples.values()))
        fake_harness(samples, out, answers, stamp=f"2026-12-01T10-00-{len(batches):02d}.000001")
        assert main(["lm-eval", "ingest", "--log", str(log), str(out)]) == 0
        capsys.readouterr()


def test_cli_loop_by_default_stops_by_the_default_rule_and_prints_the_score(tmp_path, capsys):
    """issue 32: without stopping options the loop runs catengine.stopping.default_stopping(n); once
    finished, `next` prints the predicted accuracy with its interval and items used, and the stop."""
    from catengine.console import describe_stopping
    from catengine.session import Engine
    from catengine.stopping import default_stopping
    from catengine.stopping.rules import item_limit

    ids = [f"gsm8k/{i}" for i in range(40)]
    bank_dir = write_item_bank(_bank(ids, seed=11), tmp_path / "banks" / "b")
    rng = np.random.default_rng(2)
    answers = {("gsm8k", i): (int(rng.random() < 0.5), None) for i in range(40)}
    rule = default_stopping(40)
    log = tmp_path / "run.jsonl"
    assert main(["lm-eval", "next", "--bank", str(bank_dir), "--log", str(log), "--k", "8", "--seed", "3"]) == 0
    assert describe_stopping(rule) in capsys.readouterr().err  # the new log states its rule
    log.unlink()
    batches, err, log = _run_loop(tmp_path, capsys, bank_dir, answers, 8)
    session = Engine.resume(log).session("model")
    assert session.stopping == rule and sum(batches) == session.n_items <= item_limit(rule)
    assert all(b <= 8 for b in batches)
    assert "catengine lm-eval next: finished" in err and f"stopped: {session.stop_reason}" in err
    score = session.predicted_score()
    assert (f"predicted full-benchmark accuracy {100 * score.accuracy:.1f}% (95% interval "
            f"{100 * score.low:.1f}-{100 * score.high:.1f}%, +-{50 * (score.high - score.low):.1f} points), "
            f"from {session.n_items} of 40 items") in err
    session.close()


def test_cli_batches_never_run_past_the_default_item_cap(tmp_path, capsys):
    """An unreachable precision (--score-within 0.001) keeps the default rule's floor and cap: the
    batches stop exactly at the cap, the last one cut to what is left, and the stop says so."""
    from catengine.stopping import default_stopping_parts
    from catengine.session import Engine
    from catengine.stopping import MaxItems, StopState

    n = 150
    bank_dir = write_item_bank(_bank([f"gsm8k/{i}" for i in range(n)], seed=12), tmp_path / "banks" / "b")
    rng = np.random.default_rng(4)
    answers = {("gsm8k", i): (int(rng.random() < 0.5), None) for i in range(n)}
    _, _, cap = default_stopping_parts(n)
    k = 30 if cap % 30 else 35  # a batch size that does not divide the cap
    batches, err, log = _run_loop(tmp_path, capsys, bank_dir, answers, k, options=("--score-within", "0.001"))
    assert sum(batches) == cap and batches == [k] * (cap // k) + [cap % k]
    session = Engine.resume(log).session("model")
    assert session.n_items == cap
    assert f"stopped: {MaxItems(cap).reason(StopState(cap, session.estimate, 0))}" in err
    session.close()


def test_cli_paired_loop_with_two_simulated_harness_runs_equals_the_paired_session(tmp_path, capsys):
    """``next --paired`` / the harness run for each model / ``ingest --paired``, one document per round,
    until ``next`` exits 1: the same draws, answers and comparison as the paired session driven directly."""
    from catengine import PairedSession
    from catengine.paired import PairedStopping

    ids = [f"math500/{i}" for i in range(40)]
    bank_dir = write_item_bank(_bank(ids, model="lart", seed=4, bank_id="m500"), tmp_path / "banks" / "m500")
    rng = np.random.default_rng(5)
    truth = [{("hendrycks_math500", i): (int(rng.random() < p), float(rng.integers(50, 900))) for i in range(40)}
             for p in (0.9, 0.2)]
    log, outs = tmp_path / "pair.jsonl", (tmp_path / "out-a", tmp_path / "out-b")
    common = ["--log", str(log), "--task", "hendrycks_math500", "--item-id", "math500/{doc_id}", "--paired"]
    assert main(["lm-eval", "next", "--bank", str(bank_dir), *common, "--k", "5"]) == 2
    assert "--k does not apply with --paired" in capsys.readouterr().err
    assert main(["lm-eval", "next", "--bank", str(bank_dir), *common, "--target-sd", "0.3"]) == 2
    assert "only --max-items and --seed apply with --paired" in capsys.readouterr().err
    rounds = 0
    while True:
        options = ["--bank", str(bank_dir), "--max-items", "9", "--seed", "2", "--subject", "ft", "--subject-b",
                   "base"] if rounds == 0 else []
        status = main(["lm-eval", "next", *common, *options])
        captured = capsys.readouterr()
        if status == 1:
            assert "finished after 9 paired answers" in captured.err and "ft - base:" in captured.err
            break
        assert status == 0, captured.err
        samples = json.loads(captured.out)
        assert list(samples) == ["hendrycks_math500"] and len(samples["hendrycks_math500"]) == 1
        for out, answers in zip(outs, truth):
            fake_harness(samples, out, answers, stamp=f"2026-12-01T10-00-{rounds:02d}.000001", n_docs=40)
        assert main(["lm-eval", "ingest", *common, str(outs[0]), "--output-b", str(outs[1])]) == 0
        report = json.loads(capsys.readouterr().out)
        assert len(report["recorded"]) == 1 and report["already_recorded"] == 2 * rounds
        rounds += 1
    assert rounds == 9
    # a single-model command on the paired log is refused, and --paired on a single-model log
    assert main(["lm-eval", "next", "--log", str(log)]) == 2
    assert "add --paired" in capsys.readouterr().err
    done = PairedSession.resume(log)
    ref = PairedSession(done.bank, rng=2, stopping=PairedStopping(max_items=9), subjects=("ft", "base"))
    while not ref.finished:
        item = ref.next_item()
        (ya, ta), (yb, tb) = (t[("hendrycks_math500", int(item.split("/")[1]))] for t in truth)
        ref.record(item, ya, yb, ta, tb)
    assert [s.item for s in done.history] == [s.item for s in ref.history]
    assert [(s.cot_length_a, s.cot_length_b) for s in done.history] == [(s.cot_length_a, s.cot_length_b)
                                                                        for s in ref.history]
    assert done.comparison() == ref.comparison()
    done.close()


def test_ingest_paired_replays_whole_task_outputs_as_far_as_they_go(tmp_path):
    from catengine import PairedSession

    bank = _bank([f"gsm8k/{i}" for i in range(30)], seed=6)
    doc_ids = DocIds()
    answers = [{("gsm8k", i): (int(i % 3 != 0), None) for i in range(30)},
               {("gsm8k", i): (int(i % 5 == 0), None) for i in range(30)}]
    outs = [fake_harness({"gsm8k": list(range(30))}, tmp_path / "a", answers[0], stamp="2026-12-01T09-00-00.000001"),
            fake_harness({"gsm8k": list(range(20))}, tmp_path / "b", answers[1], stamp="2026-12-01T09-00-00.000001")]
    pair = PairedSession(bank, rng=3, stopping=30)
    report = ingest_paired_samples(pair, outs[0], outs[1], doc_ids)
    # every draw both outputs answer is recorded; the first one b's output lacks is left pending
    assert report.recorded and report.recorded == [s.item for s in pair.history]
    assert not pair.finished and report.pending == pair.pending_item and int(report.pending.split("/")[1]) >= 20
    assert report.missing == ["b (b)"]
    for s in pair.history:
        i = int(s.item.split("/")[1])
        assert (s.correct_a, s.correct_b) == (answers[0][("gsm8k", i)][0], answers[1][("gsm8k", i)][0])
    # ingesting again is harmless; an answer that changed is refused, naming it
    again = ingest_paired_samples(pair, outs[0], outs[1], doc_ids)
    assert again.recorded == [] and again.already_recorded == 2 * pair.n_items
    first = int(pair.history[0].item.split("/")[1])
    flipped = dict(answers[1])
    flipped[("gsm8k", first)] = (1 - answers[1][("gsm8k", first)][0], None)
    fake_harness({"gsm8k": list(range(20))}, tmp_path / "b2", flipped, stamp="2026-12-01T09-00-00.000001")
    with pytest.raises(BatchAnswerError, match=r"model b \(b\).*already recorded correct="):
        ingest_paired_samples(pair, outs[0], tmp_path / "b2" / "my-model", doc_ids)
