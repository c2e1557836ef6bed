"""Shared pieces of the audits: ability specs, the generating bank, output stores, summaries."""

from __future__ import annotations

import functools
import hashlib
import inspect
import re
import traceback
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from calibration.audit.runner import as_seed_sequence, run_tasks
from calibration.audit.store import MemoryStore, ResultStore
from calibration.simulate import ABILITY_FAMILIES, draw_abilities
from catengine.models.params import ItemParams, params_fingerprint
from catengine.validation import is_integer

__all__ = [
    "AbilitySpec",
    "alter_bank",
    "as_bank",
    "params_key",
    "task_record",
    "error_text",
    "open_store",
    "parse_abilities",
    "positive_ints",
    "RunOptions",
    "summarize",
    "takes_run_options",
]

BANK_FAMILY = "bank"


# ----------------------------------------------------------------------------- banks
def as_bank(bank):
    """An ItemBank from an ItemBank, a bank file or a bank directory (latest version)."""
    from catengine.itembank import ItemBank, open_item_bank

    if isinstance(bank, ItemBank):
        return bank
    if isinstance(bank, (str, Path)):
        return open_item_bank(bank)
    raise TypeError(f"bank must be an ItemBank or a path to one, got {type(bank).__name__}")


def array_fingerprint(values) -> str:
    return hashlib.sha256(np.ascontiguousarray(values, dtype=np.float64).tobytes()).hexdigest()[:16]


def params_key(params: ItemParams) -> str:
    """The audits' key of a bank's parameters: the first 16 characters of ``params_fingerprint``."""
    return params_fingerprint(params, length=16)


def alter_bank(bank, *, a_scale: float = 1.0, b_shift: float = 0.0, rho: float | None = None,
               sparsity: float = 0.0, rng=None, bank_id: str | None = None):
    """A modified copy of a bank (for "wrong bank" audits and design sweeps).

    ``a_scale`` multiplies every slope, ``b_shift`` is added to every intercept, ``rho`` replaces
    the LaRT trait correlation, ``sparsity`` sets ``round(sparsity * J)`` slopes (chosen with
    ``rng``) to exactly 0 -- Qu et al. 2026's redundant items. Item ids and metadata are kept.
    """
    from catengine.itembank import ItemBank

    bank = as_bank(bank)
    p = bank.params
    arrays = {name: np.array(getattr(p, name), dtype=float) for name in p.parameter_names}
    arrays["a"] = arrays["a"] * float(a_scale)
    arrays["b"] = arrays["b"] + float(b_shift)
    if not 0.0 <= float(sparsity) <= 1.0:
        raise ValueError(f"sparsity must lie in [0, 1], got {sparsity!r}")
    n_zero = int(round(float(sparsity) * p.n_items))
    if n_zero:
        gen = np.random.default_rng(rng)
        arrays["a"][gen.choice(p.n_items, size=n_zero, replace=False)] = 0.0
    new_rho = p.rho if rho is None else float(rho)
    if rho is not None and not p.model.has_cot:
        raise ValueError(f"rho is only defined for lart banks, not {p.response_model!r}")
    items = bank.items
    meta = {k: items[k].values for k in items.data_vars
            if k not in p.parameter_names and k not in ("rho", "b_sd") and items[k].dtype.kind in "OUS"}
    kwargs = {}
    if p.model.has_cot:
        kwargs["cot_offset"] = bank.effective_cot_offset
    return ItemBank.from_params(
        p.response_model,
        bank.item_ids,
        bank_id=bank_id or f"{bank.bank_id}_altered",
        calibration_method="simulation",
        calibration_settings={"altered_from": bank.bank_id, "a_scale": float(a_scale), "b_shift": float(b_shift),
                              "rho": new_rho, "sparsity": float(sparsity)},
        rho=new_rho,
        item_metadata=meta or None,
        **kwargs,
        **arrays,
    )


# ----------------------------------------------------------------------------- abilities
class AbilitySpec:
    """An ability distribution given as ``"family"`` or ``"family:key=value,key=value"``.

    Families: those of :func:`calibration.simulate.draw_abilities` (normal, skew-normal, bimodal,
    student-t, empirical) and ``"bank"`` (resample the bank's calibration subjects' theta, i.e.
    ``empirical`` with ``sample=bank.subjects.theta``). Keyword values are numbers, e.g.
    ``"skew-normal:skew=8"``, ``"bimodal:separation=4,weight=0.3"``, ``"bank:jitter=0.1"``.
    """

    def __init__(self, label: str):
        if not isinstance(label, str) or not label.strip():
            raise ValueError(f"an ability spec is a non-empty string such as 'normal' or 'skew-normal:skew=8', got {label!r}")
        label = label.strip()
        family, _, rest = label.partition(":")
        family = family.strip().lower()
        if family not in (*ABILITY_FAMILIES, BANK_FAMILY, "gaussian", "skewnormal", "mixture", "t"):
            raise ValueError(f"unknown ability family {family!r}; allowed: {', '.join((*ABILITY_FAMILIES, BANK_FAMILY))}")
        kwargs = {}
        for part in filter(None, (s.strip() for s in rest.split(","))):
            k, eq, v = part.partition("=")
            if not eq:
                raise ValueError(f"ability option {part!r} in {label!r} is not key=value")
            try:
                kwargs[k.strip()] = float(v)
            except ValueError:
                raise ValueError(f"ability option {part!r} in {label!r}: the value must be a number") from None
        self.label = label
        self.family = family
        self.kwargs = kwargs

    def draw(self, n: int, gen, sample=None) -> np.ndarray:
        if self.family == BANK_FAMILY:
            return draw_abilities(n, "empirical", rng=gen, sample=sample, **self.kwargs)
        if self.family == "empirical" and sample is None:
            raise ValueError("ability 'empirical' needs ability_sample=... (or use 'bank' for the bank's subjects)")
        return draw_abilities(n, self.family, rng=gen, **({"sample": sample} if self.family == "empirical" else {}),
                              **self.kwargs)

    def __repr__(self) -> str:
        return f"AbilitySpec({self.label!r})"


def parse_abilities(ability) -> list[AbilitySpec]:
    if isinstance(ability, (str, AbilitySpec)):
        ability = [ability]
    specs = [a if isinstance(a, AbilitySpec) else AbilitySpec(a) for a in ability]
    if not specs:
        raise ValueError("give at least one ability distribution")
    labels = [s.label for s in specs]
    if len(set(labels)) != len(labels):
        raise ValueError(f"duplicate ability distributions: {labels}")
    return specs


def resolve_ability_sample(specs, bank, sample):
    """The resampling pool for 'bank' / 'empirical' specs (validated up front)."""
    families = {s.family for s in specs}
    if BANK_FAMILY in families:
        subjects = bank.subjects
        if subjects is None or "theta" not in subjects:
            raise ValueError(
                f"ability 'bank' resamples the bank's calibration subjects, but bank {bank.bank_id!r} has no "
                "/subjects group with theta; use a family such as 'normal' or pass ability_sample="
            )
        if sample is not None and "empirical" not in families:
            raise ValueError("ability_sample= is used by 'empirical' only; 'bank' uses the bank's subjects")
        bank_theta = np.asarray(subjects["theta"].values, dtype=float)
        return bank_theta if sample is None else np.asarray(sample, dtype=float)
    if "empirical" in families and sample is None:
        raise ValueError("ability 'empirical' needs ability_sample= (an array of abilities to resample)")
    return None if sample is None else np.asarray(sample, dtype=float)


# ----------------------------------------------------------------------------- validation
def positive_ints(values, name: str) -> list[int]:
    if is_integer(values):
        values = [values]
    out = []
    for v in values:
        if not is_integer(v) or v < 1:
            raise ValueError(f"{name} must be positive integers, got {v!r}")
        out.append(int(v))
    if not out:
        raise ValueError(f"{name} is empty")
    if len(set(out)) != len(out):
        raise ValueError(f"{name} has duplicates: {out}")
    return out


def check_replications(replications) -> int:
    if not is_integer(replications) or replications < 1:
        raise ValueError(f"replications must be a positive integer, got {replications!r}")
    return int(replications)


def error_text(exc: BaseException) -> str:
    """``Type: message`` plus the innermost frame (where it failed), kept short for the record."""
    tb = traceback.extract_tb(exc.__traceback__)
    where = f" [{Path(tb[-1].filename).name}:{tb[-1].lineno} in {tb[-1].name}]" if tb else ""
    return f"{type(exc).__name__}: {exc}{where}"[:2000]


def audited_methods(method, bank, method_options, *, resolve=None):
    """``(methods, names, options)`` of the methods an audit refits with: ``method`` is a name, a fit
    function or a sequence of them (resolved by ``resolve``, default
    :func:`calibration.audit.methods.resolve_method`); names must be distinct, methods that need
    CoT lengths need a lart bank, and ``method_options`` may only name audited methods."""
    from calibration.audit.methods import NEEDS_COT, resolve_method

    resolve = resolve or resolve_method
    raw = (method,) if isinstance(method, str) or callable(method) else tuple(method)
    methods = [resolve(m) for m in raw]
    names = [n for n, _ in methods]
    if not methods or len(set(names)) != len(names):
        raise ValueError(f"give one or more distinct methods, got {names}")
    model = bank.params.model
    for name in names:
        if name in NEEDS_COT and not model.has_cot:
            raise ValueError(f"method {name!r} needs CoT lengths, which only a lart bank simulates "
                             f"(bank {bank.bank_id!r} is {model.name!r})")
    options = {name: dict((method_options or {}).get(name, {})) for name in names}
    unknown = set(method_options or {}) - set(names)
    if unknown:
        raise ValueError(f"method_options given for methods not audited: {sorted(unknown)}")
    return methods, names, options


def task_record(dim: str, values: dict, scalars: dict, failed: bool, error: str):
    """The Dataset one audit task returns: metric arrays over ``dim``, then ``scalars``, then the
    ``failed`` flag and the ``error`` text (a failed task is recorded, never raised)."""
    import xarray as xr

    data = {name: (dim, v) for name, v in values.items()}
    data.update({name: ((), v) for name, v in scalars.items()})
    data["failed"] = ((), np.int8(failed))
    data["error"] = ((), error)
    return xr.Dataset(data)


# ----------------------------------------------------------------------------- stores
def open_store(kind: str, out, config: dict, layout: dict, rng):
    """(store, entropy): a ResultStore in ``out`` (or a MemoryStore) and the root seed entropy.

    With ``rng=None`` and an existing output directory the stored seed is reused (resume);
    otherwise the seed joins the configuration that the manifest pins.
    """
    seed = None
    if out is not None and rng is None:
        try:
            seed = ResultStore.read_manifest(out)["config"].get("seed")
        except FileNotFoundError:
            seed = None
    if seed is None:
        root = as_seed_sequence(rng)
        seed = root.entropy if isinstance(root.entropy, int) else [int(v) for v in root.entropy]
        if root.spawn_key:
            raise ValueError("pass a root SeedSequence (without a spawn key), an int or a Generator as rng")
    config = {"kind": kind, **config, "seed": seed}
    # JSON manifests sort keys: keep the dimension order explicitly
    layout = {"kind": kind, **layout, "cell_order": list(layout["cell_dims"]),
              "record_order": list(layout["record_dims"])}
    store = MemoryStore(layout, config) if out is None else ResultStore(out, layout, config)
    return store, seed


# ----------------------------------------------------------------------------- run options
RUN_OPTIONS_DOC = """\
rng : int, SeedSequence, Generator or None -- root seed (see :mod:`calibration.audit.runner`).
out : directory or None -- write one netCDF record per (replication, cell) there and resume
    from what exists; None keeps the records in memory.
n_workers : worker processes (2 = both cores; 0 or 1 = this process), of the local process
    pool or of ``scheduler="local"``.
progress : show a tqdm progress bar (default None: only on a terminal or in a notebook).
scheduler : None (the local process pool) or a Dask scheduler: ``"local"`` (a LocalCluster of
    ``n_workers`` processes), ``"tcp://host:port"``, a scheduler file's path or a
    ``distributed.Client`` (see :mod:`calibration.audit.dask_backend`). Same results either way.
"""


@dataclass(frozen=True)
class RunOptions:
    """How an audit runs and where its records go: the keyword parameters every audit takes
    (see :func:`takes_run_options`; described by ``RUN_OPTIONS_DOC``)."""

    rng: object = None
    out: object = None
    n_workers: int = 2
    progress: bool | None = None
    scheduler: object = None

    def open_store(self, kind: str, config: dict, layout: dict):
        """(store, entropy) of an audit of ``kind``: :func:`open_store` with this ``out`` and ``rng``."""
        return open_store(kind, self.out, config, layout, self.rng)

    def run_tasks(self, tasks, fn, store, desc: str) -> dict:
        """:func:`calibration.audit.runner.run_tasks` with these workers, progress bar and scheduler."""
        return run_tasks(tasks, fn, store, n_workers=self.n_workers, progress=self.progress,
                         scheduler=self.scheduler, desc=desc)


_RUN_OPTIONS_ENTRY = re.compile(r"^( *)\*\*run_options : .*\n", re.MULTILINE)


def _run_option_parameters() -> list[inspect.Parameter]:
    """The fields of :class:`RunOptions` as keyword-only parameters (a field typed ``object``
    takes any value and is shown without an annotation)."""
    return [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default,
                              annotation=inspect.Parameter.empty if f.type == "object" else f.type)
            for f in fields(RunOptions)]


def takes_run_options(audit):
    """Decorator of an audit that takes its run options as ``**run_options`` (and makes a
    ``RunOptions(**run_options)`` of them).

    The audit's signature (``inspect.signature``, ``help``) shows the run options -- ``rng``,
    ``out``, ``n_workers``, ``progress``, ``scheduler``, with RunOptions' defaults -- in place of
    ``**run_options``, its docstring's ``**run_options :`` line becomes their description
    (``RUN_OPTIONS_DOC``), and a keyword the signature lacks raises the TypeError it would raise
    had the audit spelt the options out (rather than reaching ``RunOptions``).
    """
    signature = inspect.signature(audit)
    parameters = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    public = signature.replace(parameters=[*parameters, *_run_option_parameters()])
    entry = _RUN_OPTIONS_ENTRY.search(audit.__doc__ or "")
    if entry is None:
        raise ValueError(f"{audit.__name__}'s docstring has no '**run_options :' line to describe the run options")
    indent = entry.group(1)
    described = "".join(indent + line + "\n" for line in RUN_OPTIONS_DOC.splitlines())

    @functools.wraps(audit)
    def audit_with_run_options(*args, **kwargs):
        unexpected = next((name for name in kwargs if name not in public.parameters), None)
        if unexpected is not None:
            raise TypeError(f"{audit.__name__}() got an unexpected keyword argument {unexpected!r}")
        return audit(*args, **kwargs)

    audit_with_run_options.__signature__ = public
    audit_with_run_options.__doc__ = audit.__doc__[:entry.start()] + described + audit.__doc__[entry.end():]
    return audit_with_run_options


# ----------------------------------------------------------------------------- summaries
_NOT_SUMMARISED = {"done"}


def summarize(ds, dim: str = "replication"):
    """Monte-Carlo summary over ``dim``: a Dataset with a ``statistic`` dimension
    ("mean", "mcse", "sd", "n") for every numeric variable.

    mean and sd (ddof = 1) over the finite values (failed or missing replications are NaN and do
    not count), n their number, mcse = sd / sqrt(n) the Monte-Carlo standard error of the mean.
    For the 0/1 ``failed`` flag the mean is the failure rate over the computed records.
    """
    import xarray as xr

    if dim not in ds.dims:
        raise ValueError(f"{dim!r} is not a dimension of the dataset (dims: {tuple(ds.dims)})")
    out = {}
    for name, var in ds.data_vars.items():
        if name in _NOT_SUMMARISED or dim not in var.dims or var.dtype.kind not in "fiub":
            continue
        values = np.moveaxis(np.asarray(var.values, dtype=float), var.dims.index(dim), -1)
        ok = np.isfinite(values)
        n = ok.sum(axis=-1)
        filled = np.where(ok, values, 0.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(n > 0, filled.sum(axis=-1) / np.maximum(n, 1), np.nan)
            dev = np.where(ok, values - mean[..., None], 0.0)
            var_ = np.where(n > 1, (dev * dev).sum(axis=-1) / np.maximum(n - 1, 1), np.nan)
            sd = np.sqrt(var_)
            mcse = np.where(n > 1, sd / np.sqrt(np.maximum(n, 1)), np.nan)
        dims = tuple(d for d in var.dims if d != dim) + ("statistic",)
        out[name] = (dims, np.stack([mean, mcse, sd, n.astype(float)], axis=-1), dict(var.attrs))
    coords = {k: v for k, v in ds.coords.items() if dim not in v.dims}
    coords["statistic"] = ["mean", "mcse", "sd", "n"]
    res = xr.Dataset(out, coords=coords, attrs=dict(ds.attrs))
    res.attrs["summarized_over"] = dim
    return res


def method_cell_tasks(replications: int, specs, sizes, methods, options: dict, shared: dict) -> list:
    """One (key, payload) task per replication x ability x sample size x method cell: the grid
    shared by the recovery and short-form audits. ``shared`` holds the payload common to all."""
    tasks = []
    for r in range(replications):
        for spec in specs:
            for n in sizes:
                for name, fn in methods:
                    key = {"replication": r, "method": name, "n_subjects": n, "ability": spec.label}
                    tasks.append((key, {**shared, "replication": r, "n_subjects": n, "ability": spec,
                                        "method": name, "fit": fn, "options": options[name]}))
    return tasks
