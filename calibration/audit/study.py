"""Simulation studies: a factorial recovery grid described by a TOML file, run as one audit.

A study crosses banks x missingness x methods x sample sizes x ability distributions x
replications. Every (bank, missingness) pair is a :class:`~calibration.audit.recovery.RecoveryPlan`;
all their tasks go through one runner call (the local process pool or Dask, one progress bar)
into one store, so the cluster never idles between sub-designs and an interrupted study resumes
like any audit. The result is one Dataset with dims ``(replication, bank, missingness, method,
n_subjects, ability)`` and the recovery variables (``calibration.audit.recovery``).

Random streams are those of :func:`~calibration.audit.recovery_audit`: the cell (bank B,
missingness M) of a study with seed s equals ``recovery_audit(B, missing=M, rng=s)`` (runtimes
aside) -- common random numbers across banks and missingness levels.

A method that cannot refit a bank (``saem`` needs CoT lengths, i.e. a LaRT bank) is skipped on
that bank: its cells hold NaN and ``applicable`` (bank, method) is 0.

The file (paths relative to the file)::

    name = "seed003_design"
    replications = 50
    seed = 3
    banks = ["../item_banks/demo_math500_lart"]       # bank files or bank directories (latest version)
    methods = ["cbmm", "saem", "saem-irt", "psn"]
    n_subjects = [30, 100, 180, 400, 1000]
    abilities = ["normal", "skew-normal:skew=8"]
    missingness = ["none", "mcar:0.2"]                  # none | mcar:RATE | mar:RATE | mnar:RATE
    out = "seed003_design"                              # optional output directory

    [method_options.saem]                               # optional, per method
    max_iter = 300
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from calibration.audit._common import check_replications, open_store, parse_abilities
from calibration.audit.methods import METHODS
from calibration.audit.recovery import applicable, describe, plan_recovery, recovery_task
from calibration.audit.runner import run_tasks
from calibration.simulate import MISSINGNESS

__all__ = ["Study", "load_study", "parse_missingness", "run_study", "study_design", "study_tasks"]

NO_MISSINGNESS = "none"
_KEYS = {"name", "replications", "seed", "banks", "methods", "n_subjects", "abilities", "missingness", "out",
         "method_options", "description"}


def parse_missingness(label: str, where: str = "missingness") -> tuple[str | None, float]:
    """("mcar", 0.2) from "mcar:0.2"; (None, 0.0) from "none"."""
    if not isinstance(label, str):
        raise ValueError(f"{where}: {label!r} is not a string such as 'none' or 'mcar:0.2'")
    text = label.strip().lower()
    if text == NO_MISSINGNESS:
        return None, 0.0
    kind, sep, rate = text.partition(":")
    if kind not in MISSINGNESS or not sep:
        raise ValueError(f"{where}: {label!r} is not 'none' or one of {', '.join(f'{m}:RATE' for m in MISSINGNESS)}")
    try:
        value = float(rate)
    except ValueError:
        raise ValueError(f"{where}: the rate in {label!r} is not a number") from None
    if not 0.0 < value < 1.0:
        raise ValueError(f"{where}: the rate in {label!r} must lie in (0, 1)")
    return kind, value


@dataclass
class Study:
    """A study design (see the module docstring); ``banks`` are resolved paths."""

    name: str
    banks: list[Path]
    methods: list[str]
    n_subjects: list[int]
    abilities: list[str]
    missingness: list[str] = field(default_factory=lambda: [NO_MISSINGNESS])
    replications: int = 10
    seed: int | None = None
    method_options: dict = field(default_factory=dict)
    out: Path | None = None
    source: Path | None = None

    def plans(self):
        """[(bank_id, missingness label, RecoveryPlan)] in grid order (validates every pair)."""
        plans = []
        for path in self.banks:
            for label in self.missingness:
                kind, rate = parse_missingness(label)
                try:
                    plan = plan_recovery(path, self.n_subjects, ability=self.abilities, method=self.methods,
                                         missing=kind, missing_rate=rate, method_options=self.method_options,
                                         skip_inapplicable=True)
                except (ValueError, TypeError, OSError) as exc:
                    raise ValueError(f"{self._where()}: bank {path}: {exc}") from exc
                plans.append((plan.bank.bank_id, label, plan))
        ids = list(dict.fromkeys(b for b, _, _ in plans))
        if len(ids) != len(self.banks):
            raise ValueError(f"{self._where()}: two banks share a bank_id ({[str(p) for p in self.banks]}); "
                             "each bank of a study needs its own id")
        return plans

    def _where(self) -> str:
        return str(self.source) if self.source else f"study {self.name!r}"

    def n_records(self, plans=None) -> int:
        """Records of the whole grid (inapplicable bank x method cells excluded), counted, never listed."""
        plans = self.plans() if plans is None else plans
        return self.replications * sum(len(plan.methods) * len(plan.n_subjects) * len(plan.abilities)
                                       for _, _, plan in plans)

    def validate(self) -> list:
        """Check everything a record would need before the first one runs; returns ``plans()``.

        Every bank x missingness pair is planned (banks open, methods apply), every ability
        distribution draws, every method's options build a calibrator whose settings check, and
        one record fits in memory (:data:`BYTES_PER_CELL` per simulated answer, against this
        machine's physical memory; :meth:`check_runnable` checks the whole grid's list of records
        before a run). Errors name the study file and the key."""
        where = self._where()
        plans = self.plans()
        for _, _, plan in plans:
            for spec in plan.abilities:
                try:
                    spec.draw(4, np.random.default_rng(0), plan.ability_sample)
                except (ValueError, TypeError) as exc:
                    raise ValueError(f"{where}: 'abilities': {spec.label!r} cannot be drawn ({exc})") from None
        for name in self.methods:
            check_method_options(name, self.method_options.get(name, {}), f"{where}: [method_options.{name}]")
        memory = physical_memory()
        if memory:
            n_items = max(plan.bank.n_items for _, _, plan in plans)
            largest = max(self.n_subjects)
            need = largest * n_items * BYTES_PER_CELL
            if need > memory:
                raise ValueError(
                    f"{where}: 'n_subjects' = {largest} cannot fit in memory: one record simulates and fits "
                    f"{largest} x {n_items} answers, about {_bytes(need)} ({BYTES_PER_CELL} bytes per answer), "
                    f"and this machine has {_bytes(memory)}")
        return plans

    def check_runnable(self, plans) -> None:
        """Raise ValueError naming the file unless the list of the grid's records fits in memory
        (a dry run of any size only counts them)."""
        memory = physical_memory()
        n_records = self.n_records(plans)
        need = n_records * BYTES_PER_TASK
        if memory and need > memory:
            raise ValueError(
                f"{self._where()}: 'replications' = {self.replications} gives {n_records} records; listing them needs "
                f"about {_bytes(need)} ({BYTES_PER_TASK} bytes per record) and this machine has {_bytes(memory)}: "
                "run fewer replications per study (a rerun with more replications resumes)")


#: memory one simulated answer costs a record, at least (the int8 answer, a float64 CoT length,
#: and the fits' float64 working copies of the response matrix)
BYTES_PER_CELL = 64
#: memory one record of the grid costs while the study lists its tasks (key and payload)
BYTES_PER_TASK = 2048


def physical_memory() -> int | None:
    """Bytes of physical memory of this machine (None where the OS does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def _bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if n < 1000 or unit == "PB":
            return f"{n:.3g} {unit}"
        n /= 1000
    return f"{n:.3g} PB"  # pragma: no cover


def check_method_options(name: str, options: dict, where: str) -> None:
    """Raise ValueError naming ``where`` unless ``options`` build the calibrator of audit method
    ``name`` with settings that pass its own checks (unknown names, wrong types, bad values)."""
    from calibration.audit.methods import calibrator_class

    cls = calibrator_class(name)
    if cls is None:  # a fit function of the caller's: its options are its own business
        return
    try:
        calibrator = cls(**{"progress": False, **options})
        calibrator.validated_settings()  # each setting's own check, then the cross-setting ones
    except TypeError as exc:
        allowed = ", ".join(s for s in cls._param_names() if s not in ("rng", "progress"))
        raise ValueError(f"{where}: {exc}; allowed: {allowed}") from None
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def _list(raw: dict, key: str, where: str, kind=str) -> list:
    value = raw.get(key)
    if value is None:
        raise ValueError(f"{where}: missing key {key!r}")
    if not isinstance(value, list) or not value:
        raise ValueError(f"{where}: {key!r} must be a non-empty list, got {value!r}")
    for v in value:
        if kind is int and (isinstance(v, bool) or not isinstance(v, int)):
            raise ValueError(f"{where}: {key!r} must hold integers, got {v!r}")
        if kind is str and not isinstance(v, str):
            raise ValueError(f"{where}: {key!r} must hold strings, got {v!r}")
    if len(set(value)) != len(value):
        raise ValueError(f"{where}: {key!r} has duplicates: {value}")
    return list(value)


def load_study(path) -> Study:
    """Read and validate a study file (TOML); errors name the file and the key."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"study file {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: not valid TOML: {exc}") from None
    where = str(path)
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; allowed: {sorted(_KEYS)}")
    base = path.resolve().parent
    banks = [(base / b).resolve() for b in _list(raw, "banks", where)]
    for b in banks:
        if not b.exists():
            raise ValueError(f"{where}: bank {b} does not exist")
    methods = _list(raw, "methods", where)
    for m in methods:
        if m not in METHODS:
            raise ValueError(f"{where}: unknown method {m!r} in 'methods'; allowed: {', '.join(METHODS)}")
    missingness = _list(raw, "missingness", where) if "missingness" in raw else [NO_MISSINGNESS]
    for label in missingness:
        parse_missingness(label, f"{where}: 'missingness'")
    options = raw.get("method_options", {})
    if not isinstance(options, dict) or not all(isinstance(v, dict) for v in options.values()):
        raise ValueError(f"{where}: [method_options.<method>] tables expected, got {options!r}")
    stray = sorted(set(options) - set(methods))
    if stray:
        raise ValueError(f"{where}: [method_options] for methods not in 'methods': {stray}")
    seed = raw.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise ValueError(f"{where}: 'seed' must be a non-negative integer, got {seed!r}")
    try:
        reps = check_replications(raw.get("replications", 10))
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    name = raw.get("name", path.stem)
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"{where}: 'name' must be a non-empty string")
    out = raw.get("out")
    if out is not None and (not isinstance(out, str) or not out.strip()):
        raise ValueError(f"{where}: 'out' must be the path of an output directory (a string), got {out!r}")
    out_dir = None if out is None else (base / out).resolve()
    if out_dir is not None and out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"{where}: 'out' = {out!r} is a file, not an output directory")
    description = raw.get("description")
    if description is not None and not isinstance(description, str):
        raise ValueError(f"{where}: 'description' must be a string, got {description!r}")
    n_subjects = _list(raw, "n_subjects", where, int)
    bad = [n for n in n_subjects if n < 2]
    if bad:
        raise ValueError(f"{where}: 'n_subjects' must hold integers >= 2 (a fit needs two subjects), got {bad[0]!r}")
    abilities = _list(raw, "abilities", where)
    try:
        parse_abilities(abilities)
    except ValueError as exc:
        raise ValueError(f"{where}: 'abilities': {exc}") from None
    study = Study(name=name, banks=banks, methods=methods, n_subjects=n_subjects,
                  abilities=abilities, missingness=missingness, replications=reps, seed=seed,
                  method_options={k: dict(v) for k, v in options.items()}, out=out_dir, source=path)
    study.validate()  # the whole configuration, before anything runs (a dry run included)
    return study


def study_tasks(study: Study, seed):
    """(config, layout, tasks, plans) of a study for the root seed entropy ``seed``.

    ``config`` (what the manifest pins, the seed aside) and ``layout`` do not depend on the seed.
    Tasks are ordered replication first, so early results cover the whole grid.
    """
    config, layout, plans = study_design(study)
    return config, layout, _tasks(study, plans, seed), plans


def _tasks(study: Study, plans, seed) -> list:
    tasks = []
    for b, m, plan in plans:
        tasks += plan.tasks(study.replications, seed, {"bank": b, "missingness": m})
    tasks.sort(key=lambda t: t[0]["replication"])  # stable: grid order within a replication
    return tasks


def study_design(study: Study, plans=None):
    """(config, layout, plans) of a study, without listing its tasks."""
    plans = study.plans() if plans is None else plans
    bank_ids = list(dict.fromkeys(b for b, _, _ in plans))
    config = {"study": study.name, "cells": {f"{b}|{m}": plan.config for b, m, plan in plans}}
    layout = {"cell_dims": {"bank": bank_ids, "missingness": list(study.missingness), "method": list(study.methods),
                            "n_subjects": list(study.n_subjects), "ability": list(study.abilities)},
              "record_dims": {}, "replications": study.replications}
    return config, layout, plans


def _output_directory(out, study) -> Path:
    if not isinstance(out, (str, os.PathLike)) or not str(out).strip():
        raise ValueError(f"{study._where()}: the output directory must be a path, got {out!r}")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"{study._where()}: the output directory {out} is a file")
    return out


def run_study(study, out=None, *, n_workers: int = 2, scheduler=None, progress: bool | None = None):
    """Run a study (a :class:`Study` or the path of its TOML file) into ``out`` (default: the
    file's ``out``); returns the Dataset (see the module docstring). Rerun to resume."""
    if not isinstance(study, Study):
        study = load_study(study)
    out = out if out is not None else study.out
    if out is None:
        raise ValueError(f"{study._where()}: give an output directory (out = ... in the file, or --out)")
    out = _output_directory(out, study)
    plans = study.validate()  # everything, before a file is written
    study.check_runnable(plans)
    config, layout, _ = study_design(study, plans)
    store, seed = open_store("recovery", out, config, layout, study.seed)
    tasks = _tasks(study, plans, seed)
    run_tasks(tasks, recovery_task, store, n_workers=n_workers, progress=progress, scheduler=scheduler,
              desc=f"study {study.name}")
    ds = store.load()
    bank_ids = layout["cell_dims"]["bank"]
    models = {b: plan.bank.params.model for b, _, plan in plans}
    mask = np.array([[applicable(m, models[b]) for m in study.methods] for b in bank_ids], dtype=np.int8)
    ds["applicable"] = (("bank", "method"), mask,
                        {"description": "1 if the method can refit the bank (saem needs a lart bank)"})
    ds.attrs.update({"study": study.name, "bank_id": ", ".join(bank_ids)})
    describe(ds)
    return ds
