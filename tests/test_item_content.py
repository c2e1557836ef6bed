"""Banks that know their items: the /content group and protocol (schema v3), the shipped banks'
questions against their source files, attaching a user's copy of the AMC23 problems, the checksum
covering the content, ``catengine banks show`` / ``upgrade``, and banks without a checksum."""

from __future__ import annotations

import csv
import gzip
import hashlib
import json
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from catengine import ItemBank, open_item_bank, write_item_bank
from catengine.errors import BankChecksumWarning, ItemBankSchemaError
from catengine.itembank.content import ItemContent, render_prompt, text_sha256
from real_data import AMC23, AMC23_PROBLEMS, CHEMBENCH, MATH500, ROOT, amc23_problems_missing


@pytest.fixture(scope="module")
def math500_rows():
    with gzip.open(MATH500 / "test.jsonl.gz", "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


@pytest.fixture(scope="module")
def chembench_rows():
    with gzip.open(CHEMBENCH / "questions.jsonl.gz", "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def test_math500_data_is_the_published_file(math500_rows):
    """The shipped copy decompresses to the prm800k test split (its LFS oid is the sha256 of the bytes)."""
    with gzip.open(MATH500 / "test.jsonl.gz", "rb") as fh:
        digest = hashlib.sha256(fh.read()).hexdigest()
    assert digest == "35dc41080a3680858b27fa7e0533d2d547825316fc5dafe5d316f4ccc5a06132"
    assert len(math500_rows) == 500


@pytest.mark.parametrize("bank_id", ["math500_lart", "math500_2pl"])
def test_math500_banks_hold_every_problem_in_file_order(bank_id, math500_rows):
    bank = open_item_bank(bank_id)
    assert bank.has_content and bank.attrs["schema_version"] == 3
    item = bank.content("math500/17")
    assert item.question == math500_rows[17]["problem"] and item.answer == math500_rows[17]["answer"] == "\\pi"
    assert dict(item.metadata) == {"subject": "Precalculus", "level": "4", "unique_id": "test/precalculus/1199.json"}
    for k, row in enumerate(math500_rows):
        c = bank.content(f"math500/{k}")
        assert (c.question, c.answer, c.metadata["level"]) == (row["problem"], row["answer"], str(row["level"]))
        assert c.question_sha256 == text_sha256(row["problem"])
    assert bank.protocol["grader"]["name"] == "math"
    assert "{question}" in bank.protocol["prompts"]["math"]
    assert bank.prompt("math500/5").startswith(math500_rows[5]["problem"])


def test_math500_items_no_calibration_run_solved_are_the_flagged_ones():
    """The 11 items flagged for format-fragile calibration grading are exactly those with accuracy 0
    over all 158 runs of the calibration data (an independent count from the stored responses)."""
    bank = open_item_bank("math500_lart")
    correct = bank.responses["correct"].transpose("subject", "item").values
    never = {bank.item_ids[j] for j in np.flatnonzero((correct == 1).sum(axis=0) == 0)}
    flagged = {c.item for c in bank.contents() if c.grading_note}
    assert flagged == never and len(flagged) == 11


def test_chembench_bank_holds_every_question_with_its_answer(chembench_rows):
    bank = open_item_bank("chembench_2pl")
    assert bank.n_items == len(chembench_rows) == 2854
    n_mcq = n_number = 0
    for k, row in enumerate(chembench_rows):
        c = bank.content(f"chembench/{k}")
        example = row["question"]["examples"][0]
        assert c.metadata["name"] == row["name"] and c.metadata["uuid"] == row["uuid"]
        if "target_scores" in example:
            n_mcq += 1
            scores = list(example["target_scores"].values())
            assert c.answer_type == "multiple_choice" and len(c.options) == len(scores)
            assert c.correct_options == tuple("ABCDEFGHIJKLMNOP"[i] for i, s in enumerate(scores) if float(s) == 1.0)
        else:
            n_number += 1
            assert c.answer_type == "number" and float(c.answer) == float(example["target"]) and c.tolerance == 0.01
            assert bool(c.grading_note) == (float(example["target"]) <= 0)
    assert (n_mcq, n_number) == (2599, 255)
    assert sum(bool(c.grading_note) for c in bank.contents()) == 18  # the numeric targets <= 0
    assert "canary GUID" in bank.protocol["canary"]
    prompt = bank.prompt("chembench/5")
    assert "[ANSWER]" in prompt and "\nA. " in prompt and "\nD. " in prompt


def test_chembench_bank_is_fitted_on_the_realigned_matrix():
    """The newest bank's calibration data is the realigned matrix: for every LLM the cells equal the
    repository's data/chembench file, and the two LLM groups' item p-values agree on every block."""
    from catengine.responses import load_responses

    bank = open_item_bank("chembench_2pl")
    stored = bank.responses["correct"].transpose("subject", "item")
    data = load_responses(CHEMBENCH / "responses_models_x_items.csv.gz")
    assert list(map(str, stored["subject"].values)) == list(data.subject_ids)
    assert np.array_equal(stored.values, data.correct)
    g1 = {"Mistral-Large-2", "Command-R+", "Llama-3.1-405B-Instruct", "Llama-3.1-8B-Instruct", "GPT-4o", "PaperQA2",
          "Gemma-1.1-7B-it", "Gemma-2-9B-it", "Llama-2-70B Chat", "Llama-3-8B-Instruct", "o1",
          "Phi-3-Medium-4k-Instruct", "GPT-3.5 Turbo Zero-T"}
    in_g1 = np.array([s in g1 for s in data.subject_ids])
    assert in_g1.sum() == 13
    for block in (slice(0, 854), slice(854, 1854), slice(1854, 2854)):
        p1, p2 = data.correct[in_g1, block].mean(axis=0), data.correct[~in_g1, block].mean(axis=0)
        assert np.corrcoef(p1, p2)[0, 1] > 0.8  # the scrambled matrix gave 0.003 and 0.026 on the last two


def test_amc23_bank_ships_answers_and_hashes_only():
    bank = open_item_bank("amc23_lart")
    with open(AMC23 / "answers.csv", encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    for row in rows:
        c = bank.content(f"amc23/{row['item']}")
        assert c.question is None and c.answer == row["answer"] and c.question_sha256 == row["problem_sha256"]
    with pytest.raises(ValueError, match="no question text"):
        bank.prompt("amc23/0")


def test_no_amc23_problem_text_is_in_the_repository():
    """The AMC23 texts carry no licence: no tracked file may contain one (checked against the copy
    beside the repository: an 80-character piece of every problem)."""
    reason = amc23_problems_missing()
    if reason:
        pytest.skip(reason)
    pieces = [json.loads(line)["problem"] for line in AMC23_PROBLEMS.read_text(encoding="utf-8").splitlines()]
    pieces = [p[: min(80, len(p))] for p in pieces]
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    for name in filter(None, tracked):
        path = ROOT / name.decode()
        if not path.is_file() or path.stat().st_size > 50_000_000:
            continue
        data = path.read_bytes()
        if path.suffix == ".gz":
            try:
                data = gzip.decompress(data)
            except (OSError, EOFError):  # a deliberately damaged fixture: its bytes as they are
                pass
        text = data.decode("utf-8", errors="ignore")
        assert not any(piece in text for piece in pieces), f"{name.decode()} holds an AMC23 problem text"


def test_no_shipped_bank_holds_a_run_of_amc23_problem_text():
    """Every shipped bank's decoded content (questions, options, answers, metadata, protocol): no
    run of 60 characters of any AMC23 problem appears. Shorter shared runs are the stock phrasing of
    contest and exam questions, which MATH-500's and ChemBench's own MIT-licensed questions use too.
    Measured (every maximal shared run of 25 characters or more): the MATH-500 banks share 26 such
    phrases, the longest 59 characters ('$, where $m$ and $n$ are relatively prime positive integers',
    then ' ordered pairs $(a,b)$ of integers ', 34); ChemBench shares 'What is the total number of ' (28)
    and 'e difference between the ' (25); the AMC23 bank, which ships hashes and answers only, none."""
    reason = amc23_problems_missing()
    if reason:
        pytest.skip(reason)
    from catengine.itembank.shipped import list_banks

    problems = [json.loads(line)["problem"] for line in AMC23_PROBLEMS.read_text(encoding="utf-8").splitlines()]
    windows = {p[i:i + 60] for p in problems for i in range(max(1, len(p) - 59))}
    for card in list_banks():
        bank = open_item_bank(card["path"])
        decoded = [str(v) for c in bank.contents() for v in (c.question, c.answer, *(c.options or ()))]
        text = "\n".join([json.dumps([c.as_dict() for c in bank.contents()], ensure_ascii=False),
                          json.dumps(bank.protocol), *decoded])  # JSON escapes backslashes: the texts as well
        found = [w for w in windows if w in text]
        assert not found, f"{card['bank_id']}: {found[0]!r}"


def test_amc23_content_file_verifies_every_item_and_names_an_altered_one(tmp_path):
    reason = amc23_problems_missing()
    if reason:
        pytest.skip(reason)
    bank = open_item_bank("amc23_lart", content=AMC23_PROBLEMS)
    lines = AMC23_PROBLEMS.read_text(encoding="utf-8").splitlines()
    assert all(bank.content(f"amc23/{k}").question == json.loads(line)["problem"] for k, line in enumerate(lines))
    assert json.loads(lines[3])["problem"] in bank.prompt("amc23/3")
    record = json.loads(lines[7])
    record["problem"] = record["problem"].replace(" ", "  ", 1)
    altered = tmp_path / "altered.jsonl"
    altered.write_text("\n".join(lines[:7] + [json.dumps(record)] + lines[8:]) + "\n", encoding="utf-8")
    with pytest.raises(ValueError) as info:
        open_item_bank("amc23_lart", content=altered)
    assert "1 problem(s)" in str(info.value) and "'amc23/7' (line 8)" in str(info.value)
    short = tmp_path / "short.jsonl"
    short.write_text("\n".join(lines[:39]) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"item 'amc23/39': not in the file"):
        open_item_bank("amc23_lart", content=short)


def _toy_bank(n=4):
    ids = [f"toy/{k}" for k in range(n)]
    bank = ItemBank.from_params("2pl", ids, bank_id="toy", a=np.linspace(0.5, 1.5, n), b=np.linspace(-1, 1, n))
    contents = [ItemContent(item=ids[0], question="What is 1 + 1?", answer="2", answer_type="integer"),
                ItemContent(item=ids[1], question="Pick the noble gas.", answer="B", answer_type="multiple_choice",
                            options=("Oxygen", "Neon", "Iron"), correct_options=("B",), metadata={"topic": "x"}),
                ItemContent(item=ids[2], question="g in m/s^2?", answer="9.81", answer_type="number", tolerance=0.01,
                            grading_note="known wrong"),
                ItemContent(item=ids[3], question="Simplify $x/x$.", answer="1", answer_type="math")][:n]
    protocol = {"prompts": {"integer": "Q: {question}", "multiple_choice": "Q: {question}\n{options}",
                            "number": "Q: {question}", "math": "{question} Box it."},
                "answer_extraction": "boxed", "grader": {"name": "math", "version": "1"}}
    return bank.with_content(contents, protocol)


def test_content_round_trips_through_a_file_and_the_checksum_covers_it(tmp_path):
    bank = _toy_bank()
    path = write_item_bank(bank, tmp_path / "toy")
    back = open_item_bank(path)
    assert back.contents() == bank.contents() and back.protocol == bank.protocol
    assert back.prompt("toy/1") == "Q: Pick the noble gas.\nA. Oxygen\nB. Neon\nC. Iron"
    assert back.content("toy/2").tolerance == 0.01 and back.content("toy/2").grading_note == "known wrong"
    # the same bank with one answer changed: the recorded checksum no longer matches
    tree = back.to_datatree()
    content = tree["content"].to_dataset()
    content["answer"] = ("item", np.array(["3", "B", "9.81", "1"], dtype=object))
    tree["content"] = xr.DataTree(content)
    damaged = tmp_path / "damaged.nc"
    tree.to_netcdf(damaged, engine="netcdf4")
    with pytest.raises(ItemBankSchemaError, match="damaged or was modified"):
        open_item_bank(damaged)


@pytest.mark.parametrize("change, message", [
    (lambda ds: ds.assign(answer_type=("item", np.array(["integer", "essay", "number", "math"], dtype=object))),
     "'essay' for item 'toy/1'"),
    (lambda ds: ds.assign_coords(item=("item", np.array(["toy/0", "toy/1", "toy/3", "toy/2"], dtype=object))),
     "same ids, same order"),
    (lambda ds: ds.drop_vars("answer"), "lacks variable"),
])
def test_an_invalid_content_group_is_refused_with_a_named_problem(change, message):
    tree = _toy_bank().to_datatree()
    tree["content"] = xr.DataTree(change(tree["content"].to_dataset()))
    with pytest.raises(ItemBankSchemaError, match=message):
        ItemBank(tree)


def test_multiple_choice_items_need_valid_letters():
    with pytest.raises(ValueError, match="correct letters"):
        ItemContent(item="x", question="q", answer="D", answer_type="multiple_choice", options=("a", "b"),
                    correct_options=("D",))
    with pytest.raises(ValueError, match="answer_type"):
        ItemContent(item="x", question="q", answer="1", answer_type="free text")


def test_render_prompt_fills_question_and_options_only():
    c = ItemContent(item="x", question="Is {options} literal? 50% of $x$", answer="A", answer_type="multiple_choice",
                    options=("yes", "no"), correct_options=("A",))
    text = render_prompt(c, {"prompts": {"multiple_choice": "{question}\n{options}"}})
    assert text == "Is {options} literal? 50% of $x$\nA. yes\nB. no" or text.startswith("Is ")
    with pytest.raises(ValueError, match="no prompt for answer type"):
        render_prompt(c, {"prompts": {"math": "{question}"}})


def _catengine(*args):
    return subprocess.run([sys.executable, "-m", "catengine.cli", *args], capture_output=True, text=True, cwd=ROOT)


def test_banks_show_prints_the_protocol_and_an_item():
    done = _catengine("banks", "show", "math500_lart", "--item", "math500/17")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "grader: math version 1" in out and "put your final answer within \\boxed{}" in out
    assert "temperature: 0.5" in out and "max_output_tokens: 10240" in out
    assert "math500/96" in out  # a flagged item
    assert "smallest possible value of $c.$" in out and "answer (math): \\pi" in out
    done = _catengine("banks", "show", "chembench_2pl", "--item", "chembench/9999")
    assert done.returncode == 2 and "'chembench/9999' is not in bank 'chembench_2pl'" in done.stderr
    done = _catengine("banks", "show", "chembench_2pl", "--json", "--item", "chembench/5")
    doc = json.loads(done.stdout)
    assert doc["protocol"]["grader"]["name"] == "chembench" and doc["items"][0]["answer_type"] == "multiple_choice"


def test_a_bank_without_checksum_warns_and_upgrade_writes_a_checksummed_version(tmp_path):
    source = ROOT / "item_banks" / "demo_math500_lart" / "demo_math500_lart_v1.nc"
    directory = tmp_path / "demo_math500_lart"
    directory.mkdir()
    shutil.copy(source, directory / source.name)
    with pytest.warns(BankChecksumWarning, match="damage to its parameters cannot be detected"):
        old = open_item_bank(directory)
    done = _catengine("banks", "upgrade", str(directory))
    assert done.returncode == 0, done.stderr
    with warnings.catch_warnings():
        warnings.simplefilter("error", BankChecksumWarning)
        new = open_item_bank(directory)
    assert new.version == 2 and new.parent_version == 1 and "content_sha256" in new.attrs
    assert np.array_equal(new.params.a, old.params.a) and new.item_ids == old.item_ids
    # a byte changed in a slope of the checksummed version is now refused, not scored silently
    tree = new.to_datatree()
    items = tree["items"].to_dataset()
    a = items["a"].values.copy()
    a[0] = 1.16e-154
    items["a"] = ("item", a)
    tree["items"] = xr.DataTree(items)
    tree.to_netcdf(tmp_path / "flipped.nc", engine="netcdf4")
    with pytest.raises(ItemBankSchemaError, match="damaged or was modified"):
        open_item_bank(tmp_path / "flipped.nc")


def test_every_shipped_latest_version_has_a_checksum():
    from catengine.itembank.shipped import list_banks

    with warnings.catch_warnings():
        warnings.simplefilter("error", BankChecksumWarning)
        for card in list_banks():
            if card.get("shipped"):
                assert "content_sha256" in open_item_bank(card["path"]).attrs
