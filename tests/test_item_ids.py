"""Matching an answer file's item ids to a bank's (``catengine.itembank.ids``): the explicit and the
automatic prefix, what is never guessed, the refusal naming the bank the ids belong to, and
``catengine evaluate`` on the shipped MATH500 data keyed by its own ids."""

from __future__ import annotations

import json

import pytest

from catengine.itembank.ids import (ItemIdMap, bank_prefix, foreign_ids_message, map_item_ids, namespace,
                                    shipped_banks_for)
from cli_support import evaluate_recorded

BANK = [f"math500/{k}" for k in range(500)]


def test_namespace_and_the_single_bank_prefix():
    assert namespace("math500/17") == "math500" and namespace("17") is None and namespace("/17") is None
    assert bank_prefix(BANK) == "math500/"
    assert bank_prefix(["demo_000", "demo_001"]) is None
    assert bank_prefix(["a/1", "b/1"]) is None and bank_prefix(["a/1", "2"]) is None


def test_bare_ids_map_automatically_when_every_one_does():
    ids = map_item_ids([str(k) for k in range(500)], BANK)
    assert ids.automatic and ids.prefix == "math500/" and len(ids.mapping) == 500
    assert ids.apply({"3": (1, 20.0), "4": (0, None)}) == {"math500/3": (1, 20.0), "math500/4": (0, None)}
    note = ids.note("acc.csv")
    assert "500 item ids of acc.csv" in note and "'0' .. '499' as 'math500/0' .. 'math500/499'" in note
    assert "--item-prefix math500/" in note
    # a mix of the bank's ids and bare ones maps too: every id is the bank's, with or without the prefix
    assert map_item_ids(["math500/1", "2"], BANK).mapping == {"2": "math500/2"}


@pytest.mark.parametrize("file_ids", [
    ["1", "2", "500"],             # one id is no item of the bank even with its prefix
    ["1", "chembench/2"],          # the file names another benchmark
    ["math500/1", "math500/2"],    # nothing to map
])
def test_nothing_is_guessed_unless_every_id_maps(file_ids):
    ids = map_item_ids(file_ids, BANK)
    assert ids == ItemIdMap() and ids.note("f.csv") is None and ids.apply({"1": 1}) == {"1": 1}


def test_no_automatic_prefix_for_a_bank_without_one():
    assert map_item_ids(["0", "1"], ["demo_000", "demo_001", "0x"]).mapping == {}


def test_explicit_prefix_maps_what_it_can_and_leaves_the_rest_foreign():
    ids = map_item_ids(["1", "2", "500", "math500/3"], BANK, prefix="math500/")
    assert not ids.automatic and ids.prefix == "math500/"
    assert ids.mapping == {"1": "math500/1", "2": "math500/2"}  # '500' stays foreign, for the caller's error
    assert ids.note("f.csv") == "read 2 item ids of f.csv with the bank's prefix 'math500/': '1' .. '2' as 'math500/1' .. 'math500/2'"
    with pytest.raises(ValueError, match="item prefix must be a non-empty string"):
        map_item_ids(["1"], BANK, prefix="")


def test_an_item_given_with_and_without_the_prefix_is_an_error_naming_both():
    with pytest.raises(ValueError, match=r"answers.csv: item '3' and item 'math500/3' are both given"):
        map_item_ids(["3", "math500/3"], BANK, prefix="math500/", source="answers.csv")


def test_refusals_name_the_shipped_bank_the_ids_belong_to():
    assert shipped_banks_for(["math500/1", "math500/499"]) == ["math500_2pl", "math500_lart"]
    assert shipped_banks_for(["math500/1"], exclude="math500_2pl") == ["math500_lart"]
    assert shipped_banks_for(["amc23/40"]) == []
    demo = [f"demo_{k:03d}" for k in range(500)]
    message = foreign_ids_message("demo_math500_lart", demo, ["math500/1", "math500/2"])
    assert "keyed to benchmark 'math500', not this bank: use that benchmark's bank (shipped: 'math500_2pl', 'math500_lart')" in message
    message = foreign_ids_message("chembench_2pl", [f"chembench/{k}" for k in range(10)], ["math500/1"])
    assert "not 'chembench'" in message and "(shipped: 'math500_2pl', 'math500_lart')" in message
    # bare positions on a bank whose ids name no benchmark: the banks they would fit with their prefix
    message = foreign_ids_message("demo_math500_lart", demo, [str(k) for k in range(500)])
    assert "item ids of the shipped 'chembench_2pl', 'math500_2pl', 'math500_lart'" in message
    # bare positions beyond this benchmark's items: which benchmarks have that many
    amc = [f"amc23/{k}" for k in range(40)]
    message = foreign_ids_message("amc23_lart", amc, [str(k) for k in range(500)])
    assert "'0' would be 'amc23/0'" in message and "'40' is not an item of this benchmark" in message
    assert "'math500_lart'" in message


def test_evaluate_reads_the_benchmarks_own_ids_with_the_banks_prefix(capsys):
    code, out, err = evaluate_recorded(capsys, "math500", "--bank", "math500_lart")
    assert code == 0, err
    assert err.count("note:") == 1 and "500 item ids of" in err and "with the bank's prefix 'math500/'" in err
    summary = json.loads(out.splitlines()[-1])["summary"]
    assert summary["full_n_items"] == 500 and summary["ignored_unknown_items"] == 0 and summary["n_items"] == 4
    assert all(json.loads(line)["item"].startswith("math500/") for line in out.splitlines()[:-1])
    code, explicit, err = evaluate_recorded(capsys, "math500", "--bank", "math500_lart", "--item-prefix", "math500/")
    assert code == 0 and "(--item-prefix" not in err and explicit == out


def test_evaluate_refuses_them_for_another_benchmarks_bank(capsys):
    code, out, err = evaluate_recorded(capsys, "math500", "--bank", "demo_math500_lart")
    assert code == 2 and not out
    assert "not in bank 'demo_math500_lart'" in err and "'math500_lart'" in err
    code, _, err = evaluate_recorded(capsys, "math500", "--bank", "amc23_lart", "--item-prefix", "amc23/")
    assert code == 2 and "as given or with --item-prefix 'amc23/'" in err and "460 item ids are not in bank" in err
