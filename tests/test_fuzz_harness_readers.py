"""Fuzz: harness logs (lm-evaluation-harness samples files, Inspect AI .json / .eval logs) and the
lm-eval ingest. Property: a reader returns ResponseData or raises the library's own ValueError
naming the file; never a foreign exception (KeyError, TypeError, UnicodeDecodeError, zipfile's
errors, ...). The ingest records either every valid answer (and names the rest) or nothing."""

import io
import json
import warnings
import zipfile
from pathlib import Path

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from fuzz_support import ScratchFolder, fuzz_settings

from catengine import ItemBank
from catengine.adapters.lm_eval import BatchAnswerError, DocIds, ingest_samples
from catengine.responses import ResponseData
from catengine.responses.readers import read_inspect_logs, read_lm_eval_samples
from catengine.session import CATSession

FUZZ = fuzz_settings(60)  # bounded and deterministic in CI
SCRATCH = ScratchFolder("fuzz_harness_")
_scratch_folder = SCRATCH.fixture()

scalars = (st.none() | st.booleans() | st.integers(-10, 10) | st.sampled_from([2e9, -5, 1e400 * 0, 0.5, 1.0, 0.0, 10**30])
           | st.floats(allow_nan=True) | st.text(max_size=6))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
                      max_leaves=6)


def _fresh(name: str) -> Path:
    d = SCRATCH.new()
    d.mkdir()
    return d / name


def _check_read(read, path: Path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # whitespace-approximation warnings are expected
        try:
            out = read(path)
        except ValueError as exc:
            assert path.name in str(exc) or "no samples" in str(exc) or "no usable sample" in str(exc), str(exc)
            return None
    assert isinstance(out, ResponseData)
    assert set(np.unique(out.correct)) <= {-1, 0, 1}
    if out.cot_length is not None:
        cot = out.cot_length[~np.isnan(out.cot_length)]
        assert np.all(cot >= 0)
    return out


# ------------------------------------------------------------------------ lm-evaluation-harness
lm_line = st.fixed_dictionaries(
    {"doc_id": st.integers(0, 4) | values},
    optional={"filter": st.sampled_from(["none", "strict-match", "flexible-extract"]) | values,
              "metrics": st.sampled_from([["exact_match"], ["acc", "acc_norm"], []]) | values,
              "exact_match": st.sampled_from([0.0, 1.0, True, 0.5, "1"]) | values,
              "acc": st.sampled_from([0.0, 1.0]) | values,
              "output_tokens": st.sampled_from([0, 12, 2e9, -5, 1.5]) | values,
              "cot_tokens": values,
              "resps": st.lists(st.lists(st.text(max_size=12), max_size=2), max_size=2) | values},
)
lm_text = st.lists(lm_line.map(json.dumps) | st.sampled_from(["", "{", "[1]", "null", '{"doc_id": 1', "\ufeff{}"]),
                   max_size=6).map("\n".join)


@FUZZ
@given(text=lm_text, metric=st.sampled_from([None, "exact_match", "acc"]), cut=st.none() | st.integers(0, 300))
def test_fuzzed_lm_eval_samples_files(text, metric, cut):
    path = _fresh("samples_gsm8k_2026-01-01T00-00-00.jsonl")
    data = text.encode("utf-8", "surrogatepass")
    path.write_bytes(data if cut is None else data[:cut])
    _check_read(lambda p: read_lm_eval_samples({"m": p}, metric=metric), path)


@FUZZ
@given(data=st.binary(max_size=200))
def test_fuzzed_lm_eval_raw_bytes(data):
    path = _fresh("samples_gsm8k.jsonl")
    path.write_bytes(data)
    _check_read(lambda p: read_lm_eval_samples({"m": p}), path)


_BANK = ItemBank.from_params("lart", [f"gsm8k/{i}" for i in range(5)], bank_id="fuzz", a=np.ones(5), b=np.zeros(5),
                             omega=np.full(5, 4.0), phi=np.full(5, 0.7), lam=np.full(5, 0.7), rho=-0.5, cot_offset=1.0)


@FUZZ
@given(text=lm_text)
def test_fuzzed_lm_eval_ingest_records_all_valid_answers_or_nothing(text):
    path = _fresh("samples_gsm8k_2026-01-01T00-00-00.jsonl")
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    session = CATSession(_BANK, rng=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            report = ingest_samples(session, path, DocIds(), metric="exact_match", filter_name="none")
        except BatchAnswerError as exc:  # the valid answers are recorded, the bad ones named by line
            assert [r.item for r in session.history] == exc.recorded
            assert exc.problems and all(path.name in p for p in exc.problems), exc.problems
            return
        except ValueError as exc:  # a problem of the whole file: nothing is recorded
            assert session.n_items == 0, str(exc)
            assert path.name in str(exc) or "no samples" in str(exc) or "not in the bank" in str(exc), str(exc)
            return
    assert [r.item for r in session.history] == report.recorded
    assert all(0 <= (r.cot_length or 0) <= session.max_cot_length for r in session.history)


# ------------------------------------------------------------------------------------ Inspect AI
score = st.fixed_dictionaries({}, optional={"value": st.sampled_from(["C", "I", "P", "N", 1, 0, 0.5, 7, True]) | values,
                                            "answer": values})
usage = st.fixed_dictionaries({}, optional={"output_tokens": st.sampled_from([10, -5, 2e9, 0]) | values,
                                            "reasoning_tokens": values, "input_tokens": values})
sample = st.fixed_dictionaries(
    {"id": st.integers(1, 4) | st.text(max_size=4) | values},
    optional={"epoch": st.sampled_from([1, 2]) | values,
              "scores": st.dictionaries(st.sampled_from(["match", "includes"]), score | values, max_size=2) | values,
              "output": st.fixed_dictionaries({}, optional={
                  "choices": st.lists(st.fixed_dictionaries({}, optional={"message": st.fixed_dictionaries(
                      {}, optional={"content": st.text(max_size=10) | values})}), max_size=2) | values,
                  "usage": usage | values, "completion": values}) | values,
              "model_usage": st.dictionaries(st.sampled_from(["m", "other"]), usage | values, max_size=2) | values,
              "error": st.none() | st.text(max_size=4)},
)
log = st.fixed_dictionaries(
    {"eval": st.fixed_dictionaries({"task": st.sampled_from(["gsm8k"]) | values,
                                    "model": st.sampled_from(["m"]) | values}) | values,
     "samples": st.lists(sample | values, max_size=4) | values},
    optional={"status": values, "version": values},
)


@FUZZ
@given(doc=log | values, garbage=st.sampled_from(["", "{", "]", "\x00"]), cut=st.none() | st.integers(0, 400))
def test_fuzzed_inspect_json_logs(doc, garbage, cut):
    path = _fresh("log.json")
    data = (json.dumps(doc) + garbage).encode("utf-8", "surrogatepass")
    path.write_bytes(data if cut is None else data[:cut])
    _check_read(read_inspect_logs, path)
    _check_read(lambda p: read_inspect_logs(p, threshold=0.5, epoch="first"), path)


def _eval_bytes(doc, method: int) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=method) as zf:
        header = {k: v for k, v in doc.items() if k != "samples"} if isinstance(doc, dict) else doc
        zf.writestr("header.json", json.dumps(header))
        samples = doc.get("samples") if isinstance(doc, dict) else None
        for k, s in enumerate(samples if isinstance(samples, list) else []):
            zf.writestr(f"samples/{k}_epoch_1.json", json.dumps(s))
    return buf.getvalue()


@FUZZ
@given(doc=log | values, method=st.sampled_from([zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED]),
       cut=st.none() | st.integers(0, 2000), flip=st.none() | st.integers(0, 2000))
def test_fuzzed_inspect_eval_archives(doc, method, cut, flip):
    path = _fresh("run.eval")
    data = bytearray(_eval_bytes(doc, method))
    if flip is not None and flip < len(data):
        data[flip] ^= 0xFF
    path.write_bytes(bytes(data if cut is None else data[:cut]))
    _check_read(read_inspect_logs, path)


@FUZZ
@given(data=st.binary(max_size=300), name=st.sampled_from(["x.eval", "x.json"]))
def test_fuzzed_inspect_raw_bytes(data, name):
    path = _fresh(name)
    path.write_bytes(data)
    _check_read(read_inspect_logs, path)


_FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "harness" / "inspect"
                       / "2024-05-03T14-00-00+00-00_gsm8k_Ab3dE5fG.json").read_text(encoding="utf-8"))


def _paths(node, prefix=()):
    """Every (path, value) inside a JSON document, for mutating one field of a real log."""
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for k, v in enumerate(node):
            yield from _paths(v, prefix + (k,))


_FIELDS = [p for p in _paths(_FIXTURE) if p]


@FUZZ
@given(edits=st.lists(st.tuples(st.sampled_from(_FIELDS), values), min_size=1, max_size=3),
       as_eval=st.booleans())
def test_fuzzed_inspect_logs_one_field_changed(edits, as_eval):
    """A real log with a few fields replaced by arbitrary JSON values (near-valid input reaches the
    checks deep inside the reader that random documents rarely do)."""
    doc = json.loads(json.dumps(_FIXTURE))
    for path, value in edits:
        node = doc
        try:
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue  # an earlier edit removed this field's parent
    if as_eval:
        path = _fresh("run.eval")
        path.write_bytes(_eval_bytes(doc, zipfile.ZIP_DEFLATED))
    else:
        path = _fresh("log.json")
        path.write_text(json.dumps(doc), encoding="utf-8", errors="surrogatepass")
    _check_read(read_inspect_logs, path)
    _check_read(lambda p: read_inspect_logs(p, epoch="first", threshold=0.5, use_reasoning_tokens=False), path)
