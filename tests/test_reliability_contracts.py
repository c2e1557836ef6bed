"""Regression tests of issue 34 (contracts and the newer surfaces), one per row of its table.

1. control characters in ids are refused where data enters; a bank version that fails its own
   read-back is never published;
2. a bank directory is single-writer for a recalibration: a second run is refused naming the
   holder, and once rerun the latest version holds both batches in one line of descent;
6-8. studies validate their whole configuration first, count a dry run arithmetically, refuse
   sizes that cannot fit in memory, retry failed records, and name a bad scheduler quickly;
11. PSN's theta_ is on the bank's scale;
12. progress bars show by default only on a terminal or in a notebook;
13. the bank-open probe process dies with its parent.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from calibration import ResponseData
from calibration.cli import main as calibration_main
from calibration.methods.cbmm.calibrator import CBMMCalibrator
from calibration.recalibration import RecalibrationConfig, recalibrate
from calibration.simulate import draw_item_params, simulate_responses
from catengine import open_item_bank, write_item_bank
from catengine.errors import ItemBankSchemaError
from catengine.itembank import list_versions

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
REGRESSIONS = TESTS / "fixtures" / "regressions"
PYTHON = sys.executable
CALIBRATION = [PYTHON, "-c", "import sys; from calibration.cli import main; sys.exit(main(sys.argv[1:]))"]


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(TESTS), env.get("PYTHONPATH", "")])
    return env


# ----------------------------------------------------------------------------- a small bank

N_ITEMS = 30


@pytest.fixture(scope="module")
def truth():
    return draw_item_params("2pl", N_ITEMS, rng=11)


def _sample(params, n, prefix, seed):
    theta = np.random.default_rng(seed).standard_normal(n)
    return simulate_responses(params, theta, rng=seed + 1, subject_ids=[f"{prefix}{k}" for k in range(n)],
                              item_ids=[f"item{j}" for j in range(params.n_items)])


def _version_one(directory: Path, truth, n=150):
    data = _sample(truth, n, "old", 1)
    bank = CBMMCalibrator(progress=False).fit(data).to_item_bank("sim", interval_check=False)
    write_item_bank(bank.with_group("responses", data.to_dataset()), directory)
    return data


# ----------------------------------------------------------------------------- row 1


@pytest.mark.parametrize("bad", ["m\x002", "m\t2", "m\x1b[31m2", "m\x7f2", "m\x852"])
def test_control_characters_in_ids_are_refused_where_data_enters(tmp_path, bad):
    correct = np.array([[1, 0], [0, 1]])
    with pytest.raises(ValueError, match=r"position 1 \(0-based\): subject id .* contains the control character"):
        ResponseData.from_arrays(correct, subject_ids=["m1", bad], item_ids=["i1", "i2"])
    with pytest.raises(ValueError, match=r"position 0 \(0-based\): item id .* contains the control character"):
        ResponseData.from_arrays(correct, subject_ids=["m1", "m2"], item_ids=[bad, "i2"])
    wide = tmp_path / "wide.csv"
    wide.write_text(f",i1,i2\nm1,1,0\n{bad},0,1\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"wide\.csv: line 3, column 1: subject id .* control character"):
        ResponseData.from_wide_csv(wide)
    long = tmp_path / "long.jsonl"
    long.write_text(json.dumps({"subject": "m1", "item": "i1", "correct": 1}) + "\n"
                    + json.dumps({"subject": "m2", "item": bad, "correct": 0}) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"long\.jsonl line 2: item id .* control character"):
        ResponseData.from_long(long)


def test_fit_refuses_a_nul_in_a_subject_id_before_fitting(tmp_path, capsys):
    rows = [",i1,i2,i3"] + [f"m{k},{k % 2},{(k // 2) % 2},{(k + 1) % 2}" for k in range(6)] + ["m\x00x,1,0,1"]
    (tmp_path / "acc.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    code = calibration_main(["fit", "cbmm", "--responses", str(tmp_path / "acc.csv"), "--wide", "--bank-id", "x",
                             "--out", str(tmp_path / "banks"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2
    assert "acc.csv" in err and "line 8" in err and r"'m\x00x'" in err and "control character" in err
    assert not (tmp_path / "banks" / "x").exists() or not list_versions(tmp_path / "banks" / "x")


def test_recalibrate_refuses_a_nul_subject_and_the_bank_stays_usable(tmp_path, truth):
    _version_one(tmp_path / "sim", truth)
    (tmp_path / "new.csv").write_text("subject,item,correct\nnew1,item0,1\nnew\x002,item1,0\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"new\.csv line 3: subject id 'new\\x002' contains the control character"):
        recalibrate(RecalibrationConfig(bank=tmp_path / "sim", responses=[tmp_path / "new.csv"], interval_check=False))
    assert sorted(list_versions(tmp_path / "sim")) == [1] and open_item_bank(tmp_path / "sim").version == 1


def test_a_version_that_fails_its_read_back_is_never_published(tmp_path, truth, monkeypatch):
    """Write, verify, then publish: a version whose file does not read back as written (here its
    recorded checksum is wrong) is refused before it gets its name, so the latest version stays
    the last good one and later opens and recalibrations work."""
    from catengine.itembank import io as bank_io

    _version_one(tmp_path / "sim", truth)
    new = _sample(truth, 40, "extra", 5).to_netcdf(tmp_path / "new.nc")
    monkeypatch.setattr(bank_io, "content_sha256", lambda tree: "0" * 64)
    with pytest.raises(ItemBankSchemaError, match="failed its own read-back") as info:
        recalibrate(RecalibrationConfig(bank=tmp_path / "sim", responses=[new], interval_check=False))
    assert "sim_v2.nc" in str(info.value) and "content_sha256" in str(info.value)
    monkeypatch.undo()
    assert sorted(p.name for p in (tmp_path / "sim").iterdir()) == ["sim_v1.nc"]
    assert open_item_bank(tmp_path / "sim").version == 1
    result = recalibrate(RecalibrationConfig(bank=tmp_path / "sim", responses=[new], interval_check=False))
    assert result.version == 2 and open_item_bank(tmp_path / "sim").version == 2


# ----------------------------------------------------------------------------- row 2


def _recalibrate_process(bank: Path, batch: Path) -> subprocess.Popen:
    return subprocess.Popen([*CALIBRATION, "recalibrate", "--bank", str(bank), "--responses",
                             str(batch), "--no-interval-check", "--no-progress"], env=_env(), cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_recalibration_running_elsewhere_is_named_and_nothing_is_written(tmp_path, truth):
    """The lock is held by another process (this one); a real `calibration recalibrate` process
    is refused at once, naming the holder's pid, and writes nothing."""
    from calibration.recalibration import recalibration_lock
    from catengine.atomic import exclusive_lock

    _version_one(tmp_path / "sim", truth)
    batch = _sample(truth, 20, "b", 3).to_netcdf(tmp_path / "b.nc")
    with exclusive_lock(recalibration_lock(tmp_path / "sim", "sim"), what="test"):
        proc = _recalibrate_process(tmp_path / "sim", batch)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, (out, err)
    assert f"is in use by process {os.getpid()}" in err and "nothing was written" in err and "again" in err
    assert sorted(list_versions(tmp_path / "sim")) == [1]


@pytest.mark.slow
def test_two_concurrent_recalibrations_keep_one_line_of_descent(tmp_path, truth):
    """Two real processes recalibrate one bank at once with different batches. One of them may be
    refused (it says so); rerunning it gives a latest version with both batches, and the log is
    one line v1 -> v2 -> v3."""
    _version_one(tmp_path / "sim", truth)
    batches = {prefix: _sample(truth, 20, prefix, seed).to_netcdf(tmp_path / f"{prefix}.nc")
               for prefix, seed in (("first", 3), ("second", 7))}
    procs = {prefix: _recalibrate_process(tmp_path / "sim", path) for prefix, path in batches.items()}
    results = {prefix: (*proc.communicate(timeout=300), proc.returncode) for prefix, proc in procs.items()}
    for prefix, (out, err, code) in results.items():
        if code != 0:  # refused: says what happened, wrote nothing; a rerun succeeds
            # the holder is named by its pid, or said not to have written it yet (catengine.atomic: the
            # refused process can look between the holder's flock and its pid write)
            holder = re.search(r"is in use by (process \d+ on host \S+|another process \(it has not written its pid yet\))", err)
            assert code == 2 and holder and "nothing was written" in err, err
            rerun = _recalibrate_process(tmp_path / "sim", batches[prefix])
            out, err = rerun.communicate(timeout=300)
            assert rerun.returncode == 0, err
    versions = list_versions(tmp_path / "sim")
    assert sorted(versions) == [1, 2, 3]
    latest = open_item_bank(tmp_path / "sim")
    subjects = set(ResponseData.from_dataset(latest.responses).subject_ids)
    assert {f"first{k}" for k in range(20)} <= subjects and {f"second{k}" for k in range(20)} <= subjects
    assert [open_item_bank(p).parent_version for p in versions.values()] == [0, 1, 2]
    log = subprocess.run([*CALIBRATION, "log", str(tmp_path / "sim")], env=_env(), cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    rows = [line.split() for line in log.stdout.splitlines()[1:]]
    assert [(r[0], r[1]) for r in rows] == [("1", "-"), ("2", "1"), ("3", "2")] and "lineage roots" not in log.stdout


def test_a_recalibration_from_an_older_version_is_refused(tmp_path, truth):
    _version_one(tmp_path / "sim", truth)
    first = _sample(truth, 20, "b", 3).to_netcdf(tmp_path / "b.nc")
    assert recalibrate(RecalibrationConfig(bank=tmp_path / "sim", responses=[first], interval_check=False)).version == 2
    second = _sample(truth, 20, "c", 4).to_netcdf(tmp_path / "c.nc")
    with pytest.raises(ValueError, match=r"sim_v1\.nc is v1 but .* holds v2: a recalibration starts from the latest"):
        recalibrate(RecalibrationConfig(bank=tmp_path / "sim" / "sim_v1.nc", responses=[second], interval_check=False))
    assert sorted(list_versions(tmp_path / "sim")) == [1, 2]


# ----------------------------------------------------------------------------- row 13

_PROBE_PARENT = """
import sys, time
from catengine.itembank import guard
print("ready", flush=True)
getattr(guard, sys.argv[1])(sys.argv[2], 120.0)
"""


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found += [int(t) for t in text]
    return found


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status  # a zombie has finished


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs /proc to find the probe process")
@pytest.mark.parametrize("probe", ["_probe_fork", "_probe_subprocess"])
def test_the_probe_process_dies_with_its_parent(probe):
    parent = subprocess.Popen([PYTHON, "-c", _PROBE_PARENT, probe, str(REGRESSIONS / "bank_hangs_netcdf4_a.nc")],
                              env=_env(), stdout=subprocess.PIPE, text=True)
    orphans = []
    try:
        assert parent.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 30
        while not (orphans := _children(parent.pid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert orphans, "the probe process did not start"
        time.sleep(0.5)  # let it enter the looping read
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 5
        while any(_alive(p) for p in orphans) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(_alive(p) for p in orphans), "the probe process outlived its parent"
    finally:
        for pid in orphans:  # the probe processes this test started (through its parent)
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if parent.poll() is None:
            parent.kill()


# ----------------------------------------------------------------------------- row 11


def test_psn_theta_is_on_the_banks_scale():
    from calibration import simulate_dataset
    from calibration.methods.psn import PSNCalibrator

    data, _ = simulate_dataset("2pl", 40, 12, rng=5)
    cal = PSNCalibrator(max_epochs=30, batch_size=32, hidden_dim=8, embedding_dim=8, rng=3, progress=False).fit(data)
    subjects = cal.to_item_bank("psn", interval_check=False).subjects
    bank_theta = subjects["theta"].values
    assert np.corrcoef(cal.theta_, bank_theta)[0, 1] >= 0.999
    assert abs(np.std(cal.theta_) / np.std(bank_theta) - 1) <= 0.01
    np.testing.assert_allclose(cal.theta_sd_, subjects["theta_sd"].values, rtol=1e-6)  # SDs on that scale too


# ----------------------------------------------------------------------------- row 12


class _Terminal:
    """A stderr that says it is a terminal (and keeps what is written)."""

    def __init__(self):
        import io

        self.buffer = io.StringIO()

    def write(self, text):
        return self.buffer.write(text)

    def flush(self):
        pass

    def isatty(self):
        return True


def _bar_shows_instantly(monkeypatch):
    import tqdm.auto

    real = tqdm.auto.tqdm
    monkeypatch.setattr(tqdm.auto, "tqdm", lambda *a, **kw: real(*a, **{**kw, "delay": 0}))  # even a short fit


def test_default_progress_bars_show_only_on_a_terminal(monkeypatch, capsys):
    from calibration import simulate_dataset

    _bar_shows_instantly(monkeypatch)
    data, _ = simulate_dataset("2pl", 40, 12, rng=5)
    CBMMCalibrator().fit(data)  # stderr is captured: a pipe, not a terminal
    assert "cBMM" not in capsys.readouterr().err
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    cal = CBMMCalibrator().fit(data)
    assert "cBMM" in terminal.buffer.getvalue()
    assert cal.progress is True  # the setting itself is unchanged
    monkeypatch.undo()
    _bar_shows_instantly(monkeypatch)
    CBMMCalibrator(progress=True).fit(data)  # asked for explicitly: shown even into a pipe
    assert "cBMM" in capsys.readouterr().err


def test_audit_progress_bar_shows_by_default_only_on_a_terminal(capsys):
    from calibration.audit import recovery_audit

    recovery_audit(open_item_bank(REPO / "item_banks" / "demo_math500_lart"), n_subjects=[30], method="cbmm",
                   replications=1, rng=0, n_workers=1)
    assert "recovery audit" not in capsys.readouterr().err


# ----------------------------------------------------------------------------- rows 6-8 (studies)


def _study_file(tmp_path, **over):
    from catengine import ItemBank

    p = draw_item_params("2pl", 20, rng=1)
    bank = ItemBank.from_params("2pl", [f"i{k:02d}" for k in range(20)], bank_id="tiny_2pl", a=p.a, b=p.b)
    if not (tmp_path / "banks" / "tiny_2pl").exists():
        write_item_bank(bank, tmp_path / "banks" / "tiny_2pl")
    fields = {"name": '"tiny"', "replications": "2", "seed": "5", "banks": '["banks/tiny_2pl"]', "methods": '["cbmm"]',
              "n_subjects": "[30]", "abilities": '["normal"]', "out": '"out"'}
    fields.update(over)
    text = "\n".join(f"{k} = {v}" for k, v in fields.items() if v is not None) + "\n"
    path = tmp_path / "study.toml"
    path.write_text(text)
    return path


def test_a_huge_dry_run_is_counted_not_listed(tmp_path, capsys):
    path = _study_file(tmp_path, replications="1000000000", n_subjects="[30, 100]", abilities='["normal", "bimodal"]')
    t0 = time.monotonic()
    assert calibration_main(["study", str(path), "--dry-run"]) == 0
    assert f"{1_000_000_000 * 4} records" in capsys.readouterr().out
    assert time.monotonic() - t0 < 20  # a bound: listing 4e9 tasks takes hours and terabytes
    # running it is refused with the estimate, before anything is written
    assert calibration_main(["study", str(path), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "'replications' = 1000000000 gives 4000000000 records" in err and "TB" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("over, message", [
    ({"n_subjects": "[1000000000]"}, r"'n_subjects' = 1000000000 cannot fit in memory: .* about 1\.28 TB"),
    ({"abilities": '["skew-normal:skeww=8"]'}, r"'abilities': 'skew-normal:skeww=8' cannot be drawn"),
    ({"out": "5"}, r"'out' must be the path of an output directory \(a string\), got 5"),
    ({"n_subjects": "[1]"}, r"'n_subjects' must hold integers >= 2"),
    ({"description": "3"}, r"'description' must be a string"),
])
def test_study_configuration_is_validated_before_the_first_record(tmp_path, capsys, over, message):
    path = _study_file(tmp_path, **over)
    assert calibration_main(["study", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert str(path) in err
    import re

    assert re.search(message, err), err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("options, message", [
    ('max_iter = "many"', r"\[method_options\.cbmm\]: .*max_iter"),
    ("no_such_option = 1", r"\[method_options\.cbmm\]: .*no_such_option.*allowed: "),
])
def test_study_method_options_are_checked_before_the_first_record(tmp_path, capsys, options, message):
    import re

    path = _study_file(tmp_path)
    path.write_text(path.read_text() + f"[method_options.cbmm]\n{options}\n")
    assert calibration_main(["study", str(path), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and re.search(message, err), err
    assert not (tmp_path / "out" / "records").exists()


def test_failed_records_are_retried_on_rerun(tmp_path):
    import xarray as xr

    from calibration.audit.runner import run_tasks
    from calibration.audit.store import ResultStore

    layout = {"kind": "test", "cell_dims": {}, "record_dims": {}, "replications": 2}
    tasks = [({"replication": 0}, 0), ({"replication": 1}, 1)]

    def flaky(payload):  # replication 1 fails the first time (e.g. MemoryError), then succeeds
        failed = payload == 1 and not flaky.recovered
        return xr.Dataset({"value": ((), float(payload)), "failed": ((), np.int8(failed)),
                           "error": ((), "MemoryError" if failed else "")})

    flaky.recovered = False
    store = ResultStore(tmp_path / "out", layout, {"kind": "test"})
    assert run_tasks(tasks, flaky, store, n_workers=1, progress=False)["ran"] == 2
    assert int(store.load()["failed"].sum()) == 1
    flaky.recovered = True
    again = ResultStore(tmp_path / "out", layout, {"kind": "test"})
    assert run_tasks(tasks, flaky, again, n_workers=1, progress=False) == {"total": 2, "skipped": 1, "ran": 1}
    ds = again.load()
    assert int(ds["failed"].sum()) == 0 and ds["value"].values.tolist() == [0.0, 1.0]
    assert len(list((tmp_path / "out" / "records").glob("*.nc"))) == 2  # the failure is replaced, not kept twice
    assert run_tasks(tasks, flaky, again, n_workers=1, progress=False)["ran"] == 0  # successes are never redone


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("content, message", [
    ("", r"scheduler file .*sched\.json is empty"),
    ("{not json", r"scheduler file .*sched\.json is not a scheduler file: not JSON"),
    ('{"id": 1}', r"scheduler file .*sched\.json is not a scheduler file: it has no \"address\""),
    ('{"address": "tcp://127.0.0.1:PORT"}', r"cannot connect to the Dask scheduler tcp://127\.0\.0\.1:\d+ \(from the "
                                             r"scheduler file .*sched\.json\): connection refused"),
    (None, r"cannot connect to the Dask scheduler tcp://127\.0\.0\.1:\d+: connection refused"),
])
def test_bad_scheduler_files_and_addresses_are_named_quickly(tmp_path, capsys, content, message):
    import re

    pytest.importorskip("distributed")
    port = _closed_port()
    path = _study_file(tmp_path)
    scheduler = f"tcp://127.0.0.1:{port}"
    if content is not None:
        (tmp_path / "sched.json").write_text(content.replace("PORT", str(port)))
        scheduler = str(tmp_path / "sched.json")
    t0 = time.monotonic()
    assert calibration_main(["study", str(path), "--scheduler", scheduler, "--no-progress", "--no-report"]) == 2
    assert time.monotonic() - t0 < 15  # distributed's own default waits 30 s
    err = capsys.readouterr().err
    assert re.search(message, err) and "Traceback" not in err, err


def test_recalibration_toml_numbers_are_checked_naming_file_and_key(tmp_path, capsys):
    path = tmp_path / "recal.toml"
    for line, key in (('drift_threshold = "high"', "drift_threshold"), ('seed = "x"', "seed"),
                      ("bank = 5", "bank"), ("drift_alpha = [1]", "drift_alpha")):
        body = '[recalibration]\nbank = "sim"\nresponses = ["b.nc"]\n'
        body = body.replace('bank = "sim"\n', "") if key == "bank" else body
        path.write_text(body + line + "\n")
        with pytest.raises(ValueError, match=rf"{path}: \[recalibration\] {key} must be") as info:
            RecalibrationConfig.from_toml(path)
        assert calibration_main(["recalibrate", "--config", str(path)]) == 2
        assert str(info.value) in capsys.readouterr().err
