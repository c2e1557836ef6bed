"""Readers of lm-evaluation-harness and Inspect AI logs: fixture round trips and bad input.

The fixtures under tests/fixtures/harness/ are small, hand-written imitations of the real formats;
the expected values below are read off those files by hand (word counts included).
"""

import json
import math
import shutil
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest

from calibration.readers import (
    CotLengthApproximationWarning,
    ReadReport,
    read_inspect_logs,
    read_lm_eval_samples,
)
from calibration.readers.lm_eval_harness import task_from_filename

FIXTURES = Path(__file__).parent / "fixtures" / "harness"
LM = FIXTURES / "lm_eval"
INSPECT = FIXTURES / "inspect"
GSM_A = LM / "model-a" / "samples_gsm8k_2024-05-01T10-00-00.123456.jsonl"
ARC_A = LM / "model-a" / "samples_arc_easy_2024-05-01T10-00-00.123456.jsonl"
GSM_B = LM / "model-b" / "samples_gsm8k_2024-05-02T09-30-00.000001.jsonl"
ARC_B = LM / "model-b" / "samples_arc_easy_2024-05-02T09-30-00.000001.jsonl"
INSPECT_MINI = INSPECT / "2024-05-03T14-00-00+00-00_gsm8k_Ab3dE5fG.json"
INSPECT_HAIKU = INSPECT / "2024-05-03T15-00-00+00-00_gsm8k_Hj8kL9mN.json"

METRICS = {"gsm8k": "exact_match", "arc_easy": "acc"}
NAN = math.nan


def nan_equal(actual, expected):
    np.testing.assert_array_equal(np.asarray(actual, dtype=float), np.asarray(expected, dtype=float))


def read_quiet(func, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CotLengthApproximationWarning)
        return func(*args, **kwargs)


# --------------------------------------------------------------------- lm-evaluation-harness
def test_harness_round_trip():
    with pytest.warns(CotLengthApproximationWarning, match="whitespace word counts"):
        data, report = read_lm_eval_samples(
            {"model-a": LM / "model-a", "model-b": [GSM_B, ARC_B]},
            metric=METRICS,
            filter_name="strict-match",
            return_report=True,
        )
    assert data.subject_ids == ("model-a", "model-b")
    # model-a's directory is listed in sorted order: arc_easy before gsm8k
    assert data.item_ids == ("arc_easy/0", "arc_easy/1", "arc_easy/2", "gsm8k/0", "gsm8k/1", "gsm8k/2")
    assert list(data.item_metadata["benchmark"]) == ["arc_easy"] * 3 + ["gsm8k"] * 3
    # arc: acc; gsm8k: exact_match of the strict-match lines; model-b has no line for gsm8k doc 1
    np.testing.assert_array_equal(data.correct, [[1, 0, 1, 1, 0, 0], [0, 1, 1, 1, -1, 1]])
    # arc is a log-likelihood task: no generated text, no length. model-a gsm8k: whitespace words
    # of resps (17, 14, 7); model-b gsm8k: recorded output_tokens (9, 21)
    nan_equal(data.cot_length, [[NAN, NAN, NAN, 17, 14, 7], [NAN, NAN, NAN, 9, NAN, 21]])

    assert isinstance(report, ReadReport) and report.cot_approximate
    by_file = {Path(f.path).name: f for f in report.files}
    gsm_a = by_file[GSM_A.name]
    assert (gsm_a.subject, gsm_a.task, gsm_a.rows_read, gsm_a.rows_used) == ("model-a", "gsm8k", 6, 3)
    assert (gsm_a.metric, gsm_a.filter, gsm_a.cot_source) == ("exact_match", "strict-match", "whitespace-approximation")
    assert by_file[ARC_A.name].cot_source == "none" and by_file[ARC_A.name].filter == "none"
    assert by_file[GSM_B.name].cot_source == "recorded:output_tokens"
    assert set(report.cot_sources) == {"none", "whitespace-approximation", "recorded:output_tokens"}
    assert "word counts, not tokens" in report.summary()


def test_harness_other_filter_and_inferred_metric():
    data = read_quiet(read_lm_eval_samples, {"model-a": GSM_A}, filter_name="flexible-extract")
    np.testing.assert_array_equal(data.correct, [[1, 1, 0]])
    assert data.item_ids == ("gsm8k/0", "gsm8k/1", "gsm8k/2")


def test_harness_tokenizer_and_templates():
    def by_char(text):
        return len(text)

    with warnings.catch_warnings():
        warnings.simplefilter("error", CotLengthApproximationWarning)
        data, report = read_lm_eval_samples(
            {"m": GSM_A}, filter_name="strict-match", tokenizer=by_char, item_id="{task}:{doc_id}", return_report=True
        )
    assert data.item_ids == ("gsm8k:0", "gsm8k:1", "gsm8k:2")
    assert data.cot_length[0, 2] == len("10 - 7 = 4. #### 4") == 18
    assert report.files[0].cot_source == "tokenizer:test_harness_tokenizer_and_templates.<locals>.by_char"
    assert not report.cot_approximate
    # a tokenizer returning a token list is measured by its length
    data = read_lm_eval_samples({"m": GSM_A}, filter_name="strict-match", tokenizer=str.split)
    assert data.cot_length[0, 0] == 17
    # a recorded count wins over the tokenizer
    data = read_lm_eval_samples({"m": GSM_B}, tokenizer=by_char)
    nan_equal(data.cot_length, [[9, 21]])
    with pytest.raises(ValueError, match=r"item_id template '\{task\}/\{doc\}' is invalid .* task, doc_id, filter"):
        read_lm_eval_samples({"m": GSM_B}, item_id="{task}/{doc}")


def test_harness_task_from_filename():
    assert task_from_filename("samples_gsm8k_cot_zeroshot_2024-05-01T10-00-00.123456.jsonl") == "gsm8k_cot_zeroshot"
    assert task_from_filename("samples_mmlu_abstract_algebra.jsonl") == "mmlu_abstract_algebra"
    with pytest.raises(ValueError, match=r"results\.jsonl: cannot tell the task"):
        task_from_filename("results.jsonl")


def test_harness_several_filters_need_a_choice():
    with pytest.raises(ValueError, match=r"samples_gsm8k_.*several filters in one file: 'strict-match' \(3 rows\), 'flexible-extract' \(3 rows\)"):
        read_lm_eval_samples({"m": GSM_A})
    with pytest.raises(ValueError, match="filter 'exact' is not in the file"):
        read_lm_eval_samples({"m": GSM_A}, filter_name="exact")


def test_harness_ambiguous_metric():
    with pytest.raises(ValueError, match=r"samples_arc_easy_.*cannot infer the correctness metric: metrics 'acc', 'acc_norm'"):
        read_lm_eval_samples({"m": ARC_A})
    with pytest.raises(ValueError, match=r"line 1 \(doc_id 0\): metric 'f1' is not recorded; this sample has: 'acc', 'acc_norm'"):
        read_lm_eval_samples({"m": ARC_A}, metric="f1")


def write_lines(path: Path, records) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def records(path: Path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_harness_mixed_metrics(tmp_path):
    mmlu = write_lines(
        tmp_path / "samples_mmlu_2024-05-01T10-00-00.jsonl",
        [{"doc_id": k, "resps": [[[-1.0, False]]], "filter": "none", "metrics": ["acc"], "acc": float(k % 2)} for k in range(3)],
    )
    with pytest.raises(ValueError, match=r"mixed metrics across files: samples_gsm8k_.*'exact_match'; samples_mmlu_.*'acc'"):
        read_lm_eval_samples({"m": [GSM_B, mmlu]})
    with pytest.raises(ValueError, match=r"samples_mmlu_.*\(task 'mmlu'\): the metric mapping has no entry for this task \(it has: 'gsm8k'\)"):
        read_lm_eval_samples({"m": [GSM_B, mmlu]}, metric={"gsm8k": "exact_match"})
    # confirming per task is accepted
    data = read_quiet(read_lm_eval_samples, {"m": [GSM_B, mmlu]}, metric={"gsm8k": "exact_match", "mmlu": "acc"})
    assert data.n_items == 5


def test_harness_non_binary_value(tmp_path):
    rows = records(GSM_B)
    rows[1]["exact_match"] = 0.5
    path = write_lines(tmp_path / GSM_B.name, rows)
    with pytest.raises(ValueError, match=rf"{GSM_B.name} line 2 \(doc_id 2\): metric 'exact_match' = 0.5 is not binary"):
        read_lm_eval_samples({"m": path})


def test_harness_truncated_json(tmp_path):
    text = GSM_A.read_text(encoding="utf-8")
    path = tmp_path / GSM_A.name
    path.write_text(text[: len(text) - 200], encoding="utf-8")  # cut inside the last line
    with pytest.raises(ValueError, match=rf"{GSM_A.name} line 6: not valid JSON .* at column \d+\); the file may be truncated"):
        read_lm_eval_samples({"m": path}, filter_name="strict-match")


def test_harness_duplicated_samples(tmp_path):
    rows = records(GSM_B)
    conflicting = dict(rows[0], exact_match=0.0)
    path = write_lines(tmp_path / GSM_B.name, [*rows, conflicting])
    with pytest.raises(
        ValueError,
        match=r"duplicated sample: item 'gsm8k/0' of subject 'm' appears at .* line 1 \(correct=1, cot_tokens=9\) "
        r"and at .* line 3 \(correct=0, cot_tokens=9\)",
    ):
        read_lm_eval_samples({"m": path})
    # an exact repeat is harmless
    path = write_lines(tmp_path / GSM_B.name, [*rows, rows[0]])
    assert read_lm_eval_samples({"m": path}).n_items == 2
    # the same task from two runs of one subject with different outcomes
    other = write_lines(tmp_path / "samples_gsm8k_2024-06-01T00-00-00.jsonl", [conflicting])
    with pytest.raises(ValueError, match=r"duplicated sample: .* samples_gsm8k_2024-05-02.* line 1 .* samples_gsm8k_2024-06-01.* line 1"):
        read_lm_eval_samples({"m": [GSM_B, other]})


def test_harness_expected_items():
    bank = ("gsm8k/2", "gsm8k/1", "gsm8k/0", "gsm8k/7")
    data, report = read_lm_eval_samples({"m": GSM_B}, expected_items=bank, return_report=True)
    assert data.item_ids == ("gsm8k/2", "gsm8k/0")  # bank order, observed items only
    assert report.expected_not_observed == ("gsm8k/1", "gsm8k/7")
    with pytest.raises(ValueError, match=rf"3 item\(s\) in the logs are not in the bank: {ARC_B.name} \(task 'arc_easy'\): none of its 3 items are in the bank"):
        read_lm_eval_samples({"m": [GSM_B, ARC_B]}, metric=METRICS, expected_items=bank)
    with pytest.raises(ValueError, match=r"1 item\(s\) in the logs are not in the bank: .*1 of 2 items not in the bank: 'gsm8k/0'; 2 of the 3 bank items have no sample in these logs \(e.g. 'gsm8k/5', 'gsm8k/6'\)"):
        read_lm_eval_samples({"m": GSM_B}, expected_items=["gsm8k/2", "gsm8k/5", "gsm8k/6"])


def test_harness_bad_paths(tmp_path):
    with pytest.raises(ValueError, match="no such file or directory"):
        read_lm_eval_samples({"m": tmp_path / "absent.jsonl"})
    with pytest.raises(ValueError, match="contains no lm-eval samples files"):
        read_lm_eval_samples({"m": tmp_path})
    with pytest.raises(ValueError, match="non-empty mapping"):
        read_lm_eval_samples({})
    empty = tmp_path / "samples_x_2024-01-01T00-00-00.jsonl"
    empty.write_text("\n")
    with pytest.raises(ValueError, match="has no samples"):
        read_lm_eval_samples({"m": empty})


def test_harness_reads_nothing_but_writes_nothing(tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(LM / "model-a", copy)
    before = sorted(p.name for p in copy.iterdir())
    read_quiet(read_lm_eval_samples, {"m": copy}, metric=METRICS, filter_name="strict-match")
    assert sorted(p.name for p in copy.iterdir()) == before


# ------------------------------------------------------------------------------ Inspect AI
def test_inspect_round_trip():
    with pytest.warns(CotLengthApproximationWarning):
        data, report = read_inspect_logs(INSPECT, return_report=True)
    assert data.subject_ids == ("openai/gpt-4o-mini", "anthropic/claude-3-haiku-20240307")
    assert data.item_ids == ("gsm8k/1", "gsm8k/2", "gsm8k/3")
    assert list(data.item_metadata["benchmark"]) == ["gsm8k"] * 3
    # gpt-4o-mini: C, I, C; haiku: 1.0, errored (missing), INCORRECT
    np.testing.assert_array_equal(data.correct, [[1, 0, 1], [1, -1, 0]])
    # gpt-4o-mini: recorded output_tokens 18, 40 and reasoning_tokens 45 for sample 3;
    # haiku records no usage: whitespace words of the answers (7, 8)
    nan_equal(data.cot_length, [[18, 40, 45], [7, NAN, 8]])
    by_file = {Path(f.path).name: f for f in report.files}
    mini, haiku = by_file[INSPECT_MINI.name], by_file[INSPECT_HAIKU.name]
    assert (mini.metric, mini.rows_read, mini.rows_used, mini.status) == ("match", 3, 3, "success")
    assert mini.cot_source == "recorded:output_tokens+recorded:reasoning_tokens"
    assert (haiku.rows_used, haiku.n_missing, haiku.cot_source) == (2, 1, "whitespace-approximation")
    assert report.cot_approximate


def test_inspect_output_tokens_when_reasoning_not_wanted():
    data = read_inspect_logs(INSPECT_MINI, use_reasoning_tokens=False)
    nan_equal(data.cot_length, [[18, 40, 53]])


def test_inspect_tokenizer_on_output_text():
    def words_plus_one(text):
        return len(text.split()) + 1

    data, report = read_inspect_logs(INSPECT_HAIKU, tokenizer=words_plus_one, return_report=True)
    # the errored sample 2 is skipped, so this log alone has two items
    assert data.item_ids == ("gsm8k/1", "gsm8k/3")
    nan_equal(data.cot_length, [[8, 9]])
    assert report.files[0].cot_source.startswith("tokenizer:") and not report.cot_approximate


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def dump(path: Path, log: dict) -> Path:
    path.write_text(json.dumps(log, indent=2), encoding="utf-8")
    return path


def test_inspect_epochs(tmp_path):
    log = load(INSPECT_MINI)
    second = json.loads(json.dumps(log["samples"][1]))
    second["epoch"] = 2
    second["scores"]["match"]["value"] = "C"
    log["samples"].append(second)
    path = dump(tmp_path / "epochs.json", log)
    with pytest.raises(ValueError, match=r"sample 'gsm8k/2' of model 'openai/gpt-4o-mini' was run for 2 epochs \(1, 2; first at epochs.json sample id=2 epoch=1\); pass epoch='first'"):
        read_inspect_logs(path)
    np.testing.assert_array_equal(read_inspect_logs(path, epoch="first").correct, [[1, 0, 1]])
    only2 = read_inspect_logs(path, epoch=2)
    assert only2.item_ids == ("gsm8k/2",)
    np.testing.assert_array_equal(only2.correct, [[1]])
    with pytest.raises(ValueError, match="epoch must be one of"):
        read_inspect_logs(path, epoch="mean")


def test_inspect_partial_credit(tmp_path):
    log = load(INSPECT_MINI)
    log["samples"][0]["scores"]["match"]["value"] = "P"
    log["samples"][2]["scores"]["match"]["value"] = 0.4
    path = dump(tmp_path / "partial.json", log)
    with pytest.raises(ValueError, match=r"partial.json sample id=1 epoch=1: scorer 'match' gave partial credit 'P'; pass threshold="):
        read_inspect_logs(path)
    np.testing.assert_array_equal(read_inspect_logs(path, threshold=0.5).correct, [[1, 0, 0]])
    np.testing.assert_array_equal(read_inspect_logs(path, threshold=0.4).correct, [[1, 0, 1]])
    log["samples"][1]["scores"]["match"]["value"] = 7
    dump(path, log)
    with pytest.raises(ValueError, match=r"sample id=2 epoch=1: scorer 'match' value 7 is outside \[0, 1\]"):
        read_inspect_logs(path, threshold=0.5)
    log["samples"][1]["scores"]["match"]["value"] = {"accuracy": 1}
    dump(path, log)
    with pytest.raises(ValueError, match=r"sample id=2 epoch=1: scorer 'match' gave a dict value"):
        read_inspect_logs(path, threshold=0.5)


def test_inspect_truncated_json(tmp_path):
    text = INSPECT_MINI.read_text(encoding="utf-8")
    path = tmp_path / "cut.json"
    path.write_text(text[: len(text) // 2], encoding="utf-8")
    with pytest.raises(ValueError, match=r"cut.json: not valid JSON \(.* at line \d+ column \d+\); the log may be truncated"):
        read_inspect_logs(path)


def test_inspect_duplicated_samples_across_files(tmp_path):
    log = load(INSPECT_MINI)
    log["samples"] = [dict(log["samples"][0], scores={"match": {"value": "I"}})]
    rerun = dump(tmp_path / "rerun.json", log)
    with pytest.raises(ValueError, match=r"duplicated sample: item 'gsm8k/1' \(epoch 1\) of model 'openai/gpt-4o-mini' appears at .*gsm8k_Ab3dE5fG.json sample id=1 epoch=1 \(correct=1, cot_tokens=18\) and at rerun.json sample id=1 epoch=1 \(correct=0"):
        read_inspect_logs([INSPECT_MINI, rerun])
    # the same sample given twice with the same result is accepted
    same = load(INSPECT_MINI)
    same["samples"] = same["samples"][:1]
    assert read_inspect_logs([INSPECT_MINI, dump(tmp_path / "same.json", same)]).n_items == 3


def test_inspect_scorers(tmp_path):
    log = load(INSPECT_MINI)
    for s in log["samples"]:
        s["scores"]["includes"] = {"value": "C"}
    path = dump(tmp_path / "two.json", log)
    with pytest.raises(ValueError, match=r"two.json \(task 'gsm8k'\): several scorers \('match', 'includes'\); pass scorer="):
        read_inspect_logs(path)
    np.testing.assert_array_equal(read_inspect_logs(path, scorer="includes").correct, [[1, 1, 1]])
    other = load(INSPECT_HAIKU)
    other["eval"]["task"] = "gsm8k_exact"
    for s in other["samples"]:
        if s["scores"]:
            s["scores"] = {"exact": s["scores"]["match"]}
    other_path = dump(tmp_path / "other.json", other)
    with pytest.raises(ValueError, match=r"mixed scorers across files: .*'match'; other.json \(task 'gsm8k_exact'\): 'exact'"):
        read_quiet(read_inspect_logs, [INSPECT_MINI, other_path])
    data = read_quiet(read_inspect_logs, [INSPECT_MINI, other_path], scorer={"gsm8k": "match", "gsm8k_exact": "exact"})
    assert data.n_subjects == 2 and data.item_ids == ("gsm8k/1", "gsm8k/2", "gsm8k/3", "gsm8k_exact/1", "gsm8k_exact/3")
    with pytest.raises(ValueError, match=r"the scorer mapping has no entry for this task \(it has: 'math'\)"):
        read_inspect_logs(INSPECT_MINI, scorer={"math": "match"})
    with pytest.raises(ValueError, match=r"no score from scorer 'exact' \(this sample has: 'match'\)"):
        read_inspect_logs(INSPECT_MINI, scorer="exact")


def test_inspect_expected_items():
    with pytest.raises(ValueError, match=r"1 item\(s\) in the logs are not in the bank: .*gsm8k_Ab3dE5fG.json \(task 'gsm8k'\): 1 of 3 items not in the bank: 'gsm8k/3'"):
        read_inspect_logs(INSPECT_MINI, expected_items=["gsm8k/1", "gsm8k/2"])

    class Bank:  # anything with .item_ids works as a bank
        item_ids = ("gsm8k/3", "gsm8k/2", "gsm8k/1")

    assert read_inspect_logs(INSPECT_MINI, expected_items=Bank()).item_ids == ("gsm8k/3", "gsm8k/2", "gsm8k/1")


def test_inspect_not_a_log(tmp_path):
    path = dump(tmp_path / "x.json", {"samples": []})
    with pytest.raises(ValueError, match="x.json: not an Inspect eval log"):
        read_inspect_logs(path)
    log = load(INSPECT_MINI)
    log["samples"] = []
    log["status"] = "started"
    with pytest.raises(ValueError, match=r"y.json: the log has no samples \(status 'started'\)"):
        read_inspect_logs(dump(tmp_path / "y.json", log))


def test_inspect_eval_zip_archive(tmp_path):
    log = load(INSPECT_MINI)
    path = tmp_path / "2024-05-03T14-00-00+00-00_gsm8k_Ab3dE5fG.eval"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("header.json", json.dumps({"version": 2, "status": log["status"], "eval": log["eval"]}))
        for s in log["samples"]:
            zf.writestr(f"samples/{s['id']}_epoch_{s['epoch']}.json", json.dumps(s))
    data = read_inspect_logs(path)
    expected = read_inspect_logs(INSPECT_MINI)
    assert data.sha256() == expected.sha256()
    with zipfile.ZipFile(path, "a") as zf:
        zf.writestr("samples/9_epoch_1.json", '{"id": 9, "epoch": 1, "scores": {"match": {"val')
    with pytest.raises(ValueError, match=r"\.eval:samples/9_epoch_1.json: not valid JSON"):
        read_inspect_logs(path)


def test_harness_missing_metric_names_the_values_the_line_has(tmp_path):
    """issue 34 row 8: a line whose 'metrics' list names 'acc' but which has no 'acc' value said
    "metric 'acc' is not recorded; this sample has: 'acc'" (the list of metric *names* was shown as
    the line's values). It now lists the metric values the line has and says what the list claims."""
    rows = records(ARC_B)
    del rows[1]["acc"]
    path = write_lines(tmp_path / ARC_B.name, rows)
    with pytest.raises(ValueError) as info:
        read_lm_eval_samples({"m": path}, metric="acc")
    message = str(info.value)
    assert message == (f"{ARC_B.name} line 2 (doc_id 1): metric 'acc' is not recorded; this sample has: 'acc_norm' "
                       "(its 'metrics' list names 'acc', but the line has no 'acc' field)")
    del rows[1]["acc_norm"]
    with pytest.raises(ValueError, match=r"this sample has: no metric values \(its 'metrics' list names 'acc'"):
        read_lm_eval_samples({"m": write_lines(path, rows)}, metric="acc")


def test_inspect_truncated_or_undecodable_logs_name_the_file(tmp_path):
    """issue 34 row 5: a truncated .eval gave a bare UnicodeDecodeError naming no file."""
    log = load(INSPECT_MINI)
    path = tmp_path / "run.eval"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("header.json", json.dumps({"version": 2, "status": log["status"], "eval": log["eval"]}))
        for s in log["samples"]:
            zf.writestr(f"samples/{s['id']}_epoch_{s['epoch']}.json", json.dumps(s))
    data = path.read_bytes()
    for cut in (len(data) - 10, len(data) // 2, 30):
        path.write_bytes(data[:cut])
        with pytest.raises(ValueError, match=r"run\.eval: truncated or corrupt \.eval archive"):
            read_inspect_logs(path)
    latin = tmp_path / "latin.json"
    latin.write_bytes(b'{"eval": {"task": "caf\xe9"}}')
    with pytest.raises(ValueError, match=r"latin\.json: not UTF-8 text"):
        read_inspect_logs(latin)
