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
from catengine.adapters.lm_eval import DocIds, ingest_samples, next_samples, sample_files
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
