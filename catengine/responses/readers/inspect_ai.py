"""Reader for Inspect AI eval logs.

A JSON log (``inspect eval --log-format json``) is one object with ``version``, ``status``,
``eval`` (``task``, ``model``, ...) and ``samples``: each sample has ``id``, ``epoch``,
``scores`` (scorer name -> ``{"value": ..., "answer": ..., "explanation": ...}``), ``output``
(``choices[0].message.content``, a string or a list of parts such as ``{"type": "text",
"text": ...}`` / ``{"type": "reasoning", "reasoning": ...}``; ``usage``) and ``model_usage``
(model name -> ``{input_tokens, output_tokens, total_tokens, reasoning_tokens, ...}``). The
``.eval`` format is a zip archive of the same content (``header.json`` with ``eval``,
``samples/<id>_epoch_<n>.json``); it is read too, zstd-compressed members (what inspect_ai writes)
through the ``zstandard`` package (a dependency of the ``[inspect]`` extra), whether or not
inspect_ai was imported. A truncated or corrupt archive is an error naming the file.

Subject = ``eval.model``; item = ``"{task}/{id}"``; item metadata ``benchmark`` = ``eval.task``.

Score values: ``"C"``/``"CORRECT"``/``True``/``1`` -> 1; ``"I"``/``"INCORRECT"``/``False``/``0``
-> 0; ``"N"``/``"NOANSWER"`` -> 0 (as Inspect's own ``value_to_float`` does). Partial credit
(``"P"``/``"PARTIAL"`` = 0.5, or a number strictly between 0 and 1) raises unless
``threshold`` is given (then correct = value >= threshold). Other values (a 1-10 grade,
dict-valued scores) raise. Samples that errored without a score are left missing and counted.

CoT length, in order: (1) the recorded usage of the evaluated model (``model_usage[eval.model]``,
or the only ``model_usage`` entry, or ``output.usage``): ``reasoning_tokens`` when
``use_reasoning_tokens`` and it is > 0, else ``output_tokens``; (2) ``tokenizer`` on the output
text (text and reasoning parts of the first choice); (3) a whitespace word count (an
approximation, warned and reported).
"""

from __future__ import annotations

import io
import json
import math
import struct
import zipfile
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from catengine.responses.data import ResponseData
from catengine.responses.readers._common import (
    FileReport,
    ReadReport,
    _Assembler,
    _cell_text,
    _finish,
    _join_sources,
    _list_files,
    _recorded_count,
    _text_length,
)

__all__ = ["read_inspect_logs"]

_CORRECT = {"C": 1.0, "CORRECT": 1.0, "I": 0.0, "INCORRECT": 0.0, "N": 0.0, "NOANSWER": 0.0,
            "P": 0.5, "PARTIAL": 0.5, "TRUE": 1.0, "FALSE": 0.0}
_ITEM_FIELDS = ("task", "id", "model")
_EPOCH_POLICIES = ("error", "first")


def _load_json(text: str, where: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"{where}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); "
            "the log may be truncated or corrupt"
        ) from None
    except (ValueError, RecursionError) as exc:  # integers beyond 4300 digits, nesting beyond the stack
        raise ValueError(f"{where}: JSON value too large or too deeply nested ({type(exc).__name__})") from None


_ZIP_ZSTANDARD = 93  # the zip compression method Inspect writes .eval members with (zstd)
_ZIP_MAGIC = b"PK\x03\x04"


def _zstd_member(path: Path, info: zipfile.ZipInfo) -> bytes:
    """The content of a zstd-compressed zip member (Python's zipfile reads zstd only from 3.14 on,
    or after a third-party patch of the module; here it is decompressed with ``zstandard`` itself,
    whatever was imported before)."""
    try:
        import zstandard
    except ImportError:
        raise ValueError(
            f"{path.name}: this .eval log is zstd-compressed (as inspect_ai writes them) and reading it needs the "
            "'zstandard' package: pip install zstandard (it comes with the [inspect] extra)"
        ) from None
    with open(path, "rb") as fh:
        fh.seek(info.header_offset)
        header = fh.read(zipfile.sizeFileHeader)
        if len(header) != zipfile.sizeFileHeader or header[:4] != _ZIP_MAGIC:
            raise ValueError(f"{path.name}:{info.filename}: corrupt .eval archive (bad local file header)")
        fields_ = struct.unpack(zipfile.structFileHeader, header)
        fh.seek(fields_[zipfile._FH_FILENAME_LENGTH] + fields_[zipfile._FH_EXTRA_FIELD_LENGTH], 1)
        raw = fh.read(info.compress_size)
    if len(raw) != info.compress_size:
        raise ValueError(f"{path.name}:{info.filename}: truncated .eval archive (member data cut short)")
    try:
        reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(raw), read_across_frames=True)
        data = reader.read()
    except zstandard.ZstdError as exc:
        raise ValueError(f"{path.name}:{info.filename}: corrupt .eval archive (zstd: {exc})") from None
    if len(data) != info.file_size or zlib.crc32(data) != info.CRC:
        raise ValueError(f"{path.name}:{info.filename}: corrupt .eval archive (size or CRC check failed)")
    return data


def _member_text(zf: zipfile.ZipFile, path: Path, name: str) -> str:
    info = zf.getinfo(name)
    where = f"{path.name}:{name}"
    if info.compress_type == _ZIP_ZSTANDARD:
        data = _zstd_member(path, info)
    else:
        try:
            data = zf.read(name)
        except NotImplementedError as exc:  # another compression method zipfile cannot read
            raise ValueError(f"{where}: cannot decompress this .eval member ({exc})") from None
        except (zipfile.BadZipFile, EOFError, OSError, zlib.error) as exc:
            raise ValueError(f"{where}: corrupt .eval archive ({exc})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{where}: not UTF-8 text (byte {exc.start}); the archive may be corrupt") from None


def _looks_like_zip(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(4) == _ZIP_MAGIC


def _read_log(path: Path) -> tuple[dict, list[tuple[str, dict]], str]:
    """(eval spec, [(location, sample)], status) of a .json or .eval log.

    The location is the file name (JSON) or ``<file>:<archive member>`` (.eval).
    """
    if zipfile.is_zipfile(path):
        try:
            with zipfile.ZipFile(path) as zf:
                names = zf.namelist()
                header = None
                for candidate in ("header.json", "_journal/start.json"):
                    if candidate in names:
                        header = _load_json(_member_text(zf, path, candidate), f"{path.name}:{candidate}")
                        break
                if not isinstance(header, dict) or not isinstance(header.get("eval"), dict):
                    raise ValueError(f"{path.name}: .eval archive without an eval header (header.json)")
                samples = []
                for name in sorted(n for n in names if n.startswith("samples/") and n.endswith(".json")):
                    sample = _load_json(_member_text(zf, path, name), f"{path.name}:{name}")
                    samples.append((f"{path.name}:{name}", sample))
        except zipfile.BadZipFile as exc:
            raise ValueError(f"{path.name}: corrupt .eval archive ({exc})") from None
        return header["eval"], samples, str(header.get("status", ""))
    if path.suffix == ".eval" or _looks_like_zip(path):
        raise ValueError(
            f"{path.name}: truncated or corrupt .eval archive (no zip directory at its end; an eval that was "
            "interrupted while writing its log leaves one like this)"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path.name}: not UTF-8 text (byte {exc.start}); not an Inspect JSON log, or corrupt") from None
    log = _load_json(text, path.name)
    if not isinstance(log, dict) or not isinstance(log.get("eval"), dict):
        raise ValueError(f"{path.name}: not an Inspect eval log (no top-level 'eval' object)")
    samples = log.get("samples")
    status = str(log.get("status", ""))
    if not isinstance(samples, list) or not samples:
        raise ValueError(
            f"{path.name}: the log has no samples (status {status or 'unknown'!r}); run the eval with "
            "sample logging on, or let it finish"
        )
    return log["eval"], [(path.name, s) for s in samples], status


def _score_value(value, where: str, scorer: str, threshold: float | None) -> int:
    x = None
    if isinstance(value, bool):
        x = float(value)
    elif isinstance(value, (int, float)):
        x = float(value)
    elif isinstance(value, str):
        key = value.strip().upper()
        if key in _CORRECT:
            x = _CORRECT[key]
        else:
            try:
                x = float(key)
            except ValueError:
                pass
    elif isinstance(value, (dict, list)):
        raise ValueError(
            f"{where}: scorer {scorer!r} gave a {type(value).__name__} value {value!r}; only single "
            "correct/incorrect scores (C/I, 1/0, true/false) can be read"
        )
    if x is None or not math.isfinite(x):
        raise ValueError(
            f"{where}: scorer {scorer!r} value {value!r} is not a correctness score "
            "(allowed: C/I, CORRECT/INCORRECT, 1/0, true/false; partial credit with threshold=)"
        )
    if x in (0.0, 1.0):
        return int(x)
    if 0.0 < x < 1.0:
        if threshold is None:
            raise ValueError(
                f"{where}: scorer {scorer!r} gave partial credit {value!r}; pass threshold= "
                "(correct = value >= threshold) to binarise it"
            )
        return int(x >= threshold)
    raise ValueError(f"{where}: scorer {scorer!r} value {value!r} is outside [0, 1]; it is not a correctness score")


def _usage(sample: dict, model: str):
    usage = sample.get("model_usage")
    if isinstance(usage, dict) and usage:
        if isinstance(usage.get(model), dict):
            return usage[model]
        if len(usage) == 1 and isinstance(next(iter(usage.values())), dict):
            return next(iter(usage.values()))
    output = sample.get("output")
    if isinstance(output, dict) and isinstance(output.get("usage"), dict):
        return output["usage"]
    return None


def _output_texts(sample: dict) -> list[str]:
    output = sample.get("output")
    if not isinstance(output, dict):
        return []
    choices = output.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        message = choices[0].get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            return [content]
        if isinstance(content, list):
            parts = []
            for part in content:
                if isinstance(part, str):
                    parts.append(part)
                elif isinstance(part, dict):
                    if part.get("type") == "text" and isinstance(part.get("text"), str):
                        parts.append(part["text"])
                    elif part.get("type") == "reasoning" and isinstance(part.get("reasoning"), str):
                        parts.append(part["reasoning"])
            if parts:
                return ["\n".join(parts)]
    completion = output.get("completion")
    if isinstance(completion, str):
        return [completion]
    return []


def _cot(sample: dict, model: str, where: str, tokenizer, use_reasoning_tokens: bool) -> tuple[float, str]:
    usage = _usage(sample, model)
    if usage is not None:
        reasoning = usage.get("reasoning_tokens")
        if use_reasoning_tokens and reasoning is not None:
            n = _recorded_count(reasoning, "reasoning_tokens", where)
            if n > 0:
                return n, "recorded:reasoning_tokens"
        if usage.get("output_tokens") is not None:
            return _recorded_count(usage["output_tokens"], "output_tokens", where), "recorded:output_tokens"
    return _text_length(_output_texts(sample), tokenizer)


def _per_task(option, task: str, where: str):
    """The scorer for ``task``: the option itself, or its entry in a task -> scorer mapping."""
    if not isinstance(option, Mapping):
        return option
    if task not in option:
        raise ValueError(
            f"{where} (task {task!r}): the scorer mapping has no entry for this task "
            f"(it has: {', '.join(map(repr, option)) or 'nothing'})"
        )
    return option[task]


@dataclass(frozen=True)
class _Options:
    """The per-sample settings of :func:`read_inspect_logs` (checked)."""

    scorer: str | Mapping[str, str] | None
    tokenizer: Callable | None
    use_reasoning_tokens: bool
    threshold: float | None
    item_id: str


def _checked_threshold(epoch, threshold, item_id: str) -> float | None:
    """Check ``epoch``, ``threshold`` and the ``item_id`` template; returns the threshold as a float."""
    if isinstance(epoch, bool) or not (epoch in _EPOCH_POLICIES or isinstance(epoch, int)):
        raise ValueError(f"epoch must be one of {', '.join(map(repr, _EPOCH_POLICIES))} or an epoch number, got {epoch!r}")
    if threshold is not None:
        threshold = float(threshold)
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold must lie in (0, 1], got {threshold}")
    try:
        item_id.format(task="t", id=0, model="m")
    except (KeyError, IndexError, ValueError) as exc:
        raise ValueError(f"item_id template {item_id!r} is invalid ({exc}); allowed fields: {', '.join(_ITEM_FIELDS)}") from None
    return threshold


def _only_scorer(samples, task: str, name: str) -> str:
    """The one scorer used by a log's samples (several, or none, raise)."""
    names: list[str] = []
    for _, s in samples:
        for scorer_name in (s.get("scores") or {}) if isinstance(s, dict) else ():
            if scorer_name not in names:
                names.append(scorer_name)
    if len(names) != 1:
        raise ValueError(
            f"{name} (task {task!r}): "
            + (f"several scorers ({', '.join(map(repr, names))}); pass scorer= (a name, or a mapping task -> name)"
               if names else "no sample has a score")
        )
    return names[0]


def _sample_cell(k: int, prefix: str, sample, chosen: str, model: str, opts: _Options):
    """One sample's (id, epoch, where, correct, cot, cot source), or None for a sample that errored
    without a score from ``chosen``; malformed samples raise."""
    if not isinstance(sample, dict) or "id" not in sample:
        raise ValueError(f"{prefix}: sample #{k} is not a sample object with an 'id'")
    sid = sample["id"]
    ep = sample.get("epoch", 1)
    if isinstance(sid, bool) or not isinstance(sid, (str, int)):
        raise ValueError(f"{prefix}: sample #{k} has id {sid!r}; Inspect sample ids are strings or integers")
    if isinstance(ep, bool) or not isinstance(ep, int) or ep < 1:
        raise ValueError(f"{prefix} sample id={sid!r}: epoch {ep!r} is not an epoch number (an integer >= 1)")
    where = f"{prefix} sample id={sid!r} epoch={ep}"
    scores = sample.get("scores") or {}
    if not isinstance(scores, dict):
        raise ValueError(f"{where}: 'scores' must be an object scorer -> score")
    if chosen not in scores:
        if sample.get("error"):
            return None
        raise ValueError(
            f"{where}: no score from scorer {chosen!r} (this sample has: "
            f"{', '.join(map(repr, scores)) or 'no scores'})"
        )
    score = scores[chosen]
    value = score.get("value") if isinstance(score, dict) else score
    correct = _score_value(value, where, chosen, opts.threshold)
    cot, source = _cot(sample, model, where, opts.tokenizer, opts.use_reasoning_tokens)
    return sid, ep, where, correct, cot, source


def _add_pending(pending: dict, model: str, item: str, ep: int, cell: tuple) -> None:
    """Keep ``cell`` = (correct, cot, where, task, file) as (model, item)'s answer of epoch ``ep``;
    a second, different answer of the same epoch raises."""
    epochs = pending.setdefault((model, item), {})
    old = epochs.get(ep)
    if old is None:
        epochs[ep] = cell
        return
    correct, cot, where = cell[0], cell[1], cell[2]
    c0, t0, w0 = old[0], old[1], old[2]
    if not (c0 == correct and (t0 == cot or (math.isnan(t0) and math.isnan(cot)))):
        raise ValueError(
            f"duplicated sample: item {item!r} (epoch {ep}) of model {model!r} appears at {w0} "
            f"({_cell_text(c0, t0)}) and at {where} ({_cell_text(correct, cot)}) with different values"
        )


def _read_one_log(path: Path, opts: _Options, pending: dict, inferred: list) -> FileReport:
    """Read one log into ``pending`` ((model, item) -> epoch -> cell); a scorer inferred from the
    log is appended to ``inferred`` as (file, task, scorer). Returns the file's report."""
    spec, samples, status = _read_log(path)
    task, model = spec.get("task"), spec.get("model")
    if not isinstance(task, str) or not task or not isinstance(model, str) or not model:
        raise ValueError(f"{path.name}: the eval header lacks 'task' or 'model' (got task={task!r}, model={model!r})")
    if not samples:
        raise ValueError(f"{path.name}: the log has no samples")
    chosen = _per_task(opts.scorer, task, path.name)
    if chosen is None:
        chosen = _only_scorer(samples, task, path.name)
        if opts.scorer is None:
            inferred.append((path.name, task, chosen))
    used, missing, sources = 0, 0, []
    for k, (prefix, sample) in enumerate(samples):
        cell = _sample_cell(k, prefix, sample, chosen, model, opts)
        if cell is None:
            missing += 1
            continue
        sid, ep, where, correct, cot, source = cell
        sources.append(source)
        item = opts.item_id.format(task=task, id=sid, model=model)
        _add_pending(pending, model, item, ep, (correct, cot, where, task, path.name))
        used += 1
    return FileReport(
        path=str(path),
        subject=model,
        task=task,
        rows_read=len(samples),
        rows_used=used,
        metric=chosen,
        cot_source=_join_sources(sources),
        n_missing=missing,
        status=status,
    )


def _check_inferred_scorers(inferred: list) -> None:
    """Scorers inferred file by file must agree (else the caller confirms them with a mapping)."""
    distinct = {m for _, _, m in inferred}
    if len(distinct) > 1:
        listing = "; ".join(f"{f} (task {t!r}): {m!r}" for f, t, m in inferred)
        raise ValueError(
            f"mixed scorers across files: {listing}; pass scorer= with one name, or a mapping task -> "
            f"scorer to confirm, e.g. scorer={ {t: m for _, t, m in inferred}!r}"
        )


def _assemble(pending: dict, epoch) -> _Assembler:
    """One answer per (model, item) by the ``epoch`` policy, gathered into an assembler."""
    assembler = _Assembler()
    for (model, item), epochs in pending.items():
        if epoch == "error" and len(epochs) > 1:
            first = epochs[min(epochs)]
            raise ValueError(
                f"sample {item!r} of model {model!r} was run for {len(epochs)} epochs "
                f"({', '.join(map(str, sorted(epochs)))}; first at {first[2]}); pass epoch='first' "
                "(or an epoch number) to keep one"
            )
        if isinstance(epoch, int):
            if epoch not in epochs:
                continue
            chosen_epoch = epoch
        else:
            chosen_epoch = min(epochs)
        correct, cot, where, task, fname = epochs[chosen_epoch]
        assembler.add(model, item, correct, cot, where, benchmark=task, file=fname)
    return assembler


def read_inspect_logs(
    paths,
    *,
    scorer: str | Mapping[str, str] | None = None,
    tokenizer: Callable | None = None,
    use_reasoning_tokens: bool = True,
    epoch: str | int = "error",
    threshold: float | None = None,
    item_id: str = "{task}/{id}",
    expected_items=None,
    return_report: bool = False,
) -> ResponseData | tuple[ResponseData, ReadReport]:
    """Read Inspect AI eval logs into a ResponseData (subject = evaluated model).

    Parameters
    ----------
    paths : a log file (``.json`` or ``.eval``), a directory (searched recursively for both) or
        a list of them. Several tasks and several models are merged.
    scorer : the scorer whose score is correctness, or a mapping task -> scorer. Default: the
        only scorer in each file; files that use different scorers raise unless a mapping confirms.
    tokenizer : callable text -> int or token sequence, used when no usage is recorded.
    use_reasoning_tokens : prefer a recorded ``reasoning_tokens`` (> 0) over ``output_tokens``.
    epoch : ``"error"`` (default): a sample run for several epochs raises, naming it;
        ``"first"``: keep the lowest epoch; an int: keep that epoch only.
    threshold : binarise partial credit (``"P"`` = 0.5, numbers in (0, 1)) as value >= threshold.
    item_id : format template; fields ``task``, ``id``, ``model``.
    expected_items : item ids (or a bank); log items outside it raise; columns follow its order.
    return_report : also return a :class:`~catengine.responses.readers.ReadReport`.
    """
    threshold = _checked_threshold(epoch, threshold, item_id)
    opts = _Options(scorer, tokenizer, use_reasoning_tokens, threshold, item_id)
    # (subject, item) -> epoch -> (correct, cot, where, task, file)
    pending: dict[tuple[str, str], dict[int, tuple]] = {}
    reports: list[FileReport] = []
    inferred: list[tuple[str, str, str]] = []
    for path in _list_files(paths, ("*.json", "*.eval"), "Inspect log"):
        reports.append(_read_one_log(path, opts, pending, inferred))
    _check_inferred_scorers(inferred)
    return _finish(_assemble(pending, epoch), reports, expected_items, return_report)
