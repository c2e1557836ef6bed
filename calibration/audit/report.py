"""One-page audit report: a grid of matplotlib figures plus a summary table, as PNG and HTML.

:func:`render_report` takes the Dataset of any audit (its ``audit`` attribute says which) and
writes ``<out>/<name>.png`` (figures and table on one page) and ``<out>/<name>.html`` (the same
figure embedded, the table as HTML, and the configuration). Error bars are +-2 Monte-Carlo SEs
over replications. Uses matplotlib's object API (no pyplot, no global backend change).
"""

from __future__ import annotations

import base64
import html
import io
import itertools
import json
import math
from pathlib import Path

import numpy as np

from calibration.audit._common import summarize
from catengine.atomic import atomic_output

__all__ = ["render_report", "summary_table"]

_PANELS = {
    "recovery": [
        ("kendall_tau", "ranking recovery: Kendall tau(theta, theta^)", None),
        ("pearson_a", "discrimination recovery: Pearson(a, a^)", None),
        ("pearson_difficulty", "difficulty recovery: Pearson(-b/a, -b^/a^)", None),
        (("aggregate_score_error", "item_mean_error"), "score errors (solid: aggregate, dashed: item mean)", None),
        ("skew_scatter", "Kendall tau vs |skewness| of the true abilities", None),
        ("runtime_s", "fit runtime [s] per replication", "log"),
    ],
    "cat": [
        ("bias", "bias of theta^", None),
        ("rmse", "RMSE of theta^", None),
        ("coverage", "coverage of the 95% interval (dotted: nominal)", None),
        ("kendall_tau", "Kendall tau(theta, theta^)", None),
        ("theta_sd_mean", "mean posterior SD of theta", None),
        ("sd_ratio", "RMSE / RMS posterior SD (1 = honest SDs)", None),
    ],
    "replay": [
        (("coverage", "nominal_coverage"), "theta_full inside the adaptive 95% interval (dashed: promised)", None),
        ("sd_ratio", "RMS diff / RMS promised SD (1 = honest)", None),
        ("kendall_tau", "Kendall tau(theta_full, theta_L)", None),
        ("mean_abs_diff", "mean |theta_L - theta_full|", None),
        ("theta_sd_mean", "mean posterior SD of theta_L", None),
    ],
    "short-form": [
        ("tau_irt", "short-form ranking recovery: IRT selection", None),
        ("tau_random", "random subsets (mean of the baseline draws)", None),
        ("gain", "gain = IRT - random", None),
    ],
}
_X = {"recovery": "n_subjects", "cat": "test_length", "replay": "test_length", "short-form": "form"}
_TABLE_VARS = {
    "recovery": ["kendall_tau", "pearson_a", "pearson_b", "pearson_difficulty", "rmse_theta", "rmse_a", "rmse_b",
                 "aggregate_score_error", "item_mean_error", "marginal_reliability", "insufficient_coverage",
                 "abs_skewness", "failed", "converged", "runtime_s"],
    "cat": ["bias", "rmse", "coverage", "kendall_tau", "theta_sd_mean", "sd_ratio", "failed"],
    "short-form": ["tau_irt", "tau_random", "gain", "form_items", "failed"],
    "replay": ["coverage", "nominal_coverage", "sd_ratio", "kendall_tau", "mean_abs_diff", "theta_sd_mean", "failed"],
}
_PNG_TABLE_VARS = {
    "recovery": ["kendall_tau", "pearson_a", "pearson_difficulty", "rmse_theta", "aggregate_score_error",
                 "item_mean_error", "marginal_reliability", "insufficient_coverage", "abs_skewness", "failed",
                 "converged", "runtime_s"],
}
_SHORT = {"kendall_tau": "tau", "pearson_a": "r(a)", "pearson_b": "r(b)", "pearson_difficulty": "r(diff)",
          "rmse_theta": "rmse th", "rmse_a": "rmse a", "rmse_b": "rmse b", "aggregate_score_error": "score err",
          "item_mean_error": "item err", "marginal_reliability": "rel", "insufficient_coverage": "insuff cov",
          "abs_skewness": "|skew|", "failed": "fail rate", "converged": "conv", "runtime_s": "runtime s", "theta_sd_mean": "mean SD",
          "sd_ratio": "rmse/SD", "tau_irt": "tau IRT", "tau_random": "tau random", "form_items": "items",
          "nominal_coverage": "promised", "mean_abs_diff": "|diff|"}


def _kind(ds) -> str:
    kind = ds.attrs.get("audit")
    if kind not in _PANELS:
        raise ValueError(f"not an audit Dataset (attrs['audit'] = {kind!r}; expected one of {sorted(_PANELS)})")
    return kind


def _series_dims(ds, xdim):
    return [d for d in ds.dims if d not in ("replication", "statistic", xdim)]


def _series(summary, xdim):
    dims = _series_dims(summary, xdim)
    combos = list(itertools.product(*(list(summary[d].values) for d in dims)))
    return dims, combos


def _label(dims, combo, varying):
    parts = [f"{v}" if d in ("method", "selector") else f"{d}={v}" for d, v in zip(dims, combo) if d in varying]
    return ", ".join(parts) or "all"


def _fmt(mean, mcse) -> str:
    if not math.isfinite(mean):
        return "-"
    digits = 3 if abs(mean) < 10 else 1
    if math.isfinite(mcse):
        return f"{mean:.{digits}f} ± {mcse:.{digits}f}"
    return f"{mean:.{digits}f}"


def summary_table(ds, variables=None, *, summary=None):
    """A pandas DataFrame of "mean ± MCSE" strings: one row per cell, one column per metric.

    ``summary``: ``summarize(ds)`` if the caller has it already.
    """
    import pandas as pd

    kind = _kind(ds)
    variables = [v for v in (variables or _TABLE_VARS[kind]) if v in ds.data_vars]
    s = summarize(ds) if summary is None else summary
    # cell dims in the audit's order (replication, method, n_subjects, ...), then record dims
    order = [d for v in variables for d in ds[v].dims] + list(ds.dims)
    dims = list(dict.fromkeys(d for d in order if d in s.dims and d != "statistic"))
    rows = []
    for combo in itertools.product(*(list(s[d].values) for d in dims)):
        sel = dict(zip(dims, combo))
        row = {d: v for d, v in sel.items()}
        for v in variables:
            if not set(s[v].dims) - {"statistic"} <= set(dims):
                continue
            cell = s[v].sel({d: sel[d] for d in s[v].dims if d in sel})
            row[_SHORT.get(v, v)] = _fmt(float(cell.sel(statistic="mean")), float(cell.sel(statistic="mcse")))
        if "done" in ds:
            row["reps"] = int(ds["done"].sel({d: sel[d] for d in ds["done"].dims if d in sel}).sum())
        rows.append(row)
    return pd.DataFrame(rows)


def _line_panel(ax, summary, var, xdim, logy=False, linestyle="-"):
    dims, combos = _series(summary, xdim)
    varying = [d for d in dims if summary.sizes[d] > 1] or dims[:1]
    xs = list(summary[xdim].values)
    numeric_x = all(isinstance(x, (int, float, np.integer, np.floating)) for x in xs)
    xpos = np.asarray(xs, dtype=float) if numeric_x else np.arange(len(xs), dtype=float)
    colors = _colors(len(combos))
    for k, combo in enumerate(combos):
        sel = dict(zip(dims, combo))
        da = summary[var].sel({d: v for d, v in sel.items() if d in summary[var].dims})
        mean = np.asarray(da.sel(statistic="mean").values, dtype=float).reshape(-1)
        mcse = np.asarray(da.sel(statistic="mcse").values, dtype=float).reshape(-1)
        if mean.size != xpos.size or not np.any(np.isfinite(mean)):
            continue
        label = _label(dims, combo, varying) if linestyle == "-" else None
        err = np.where(np.isfinite(mcse), 2 * mcse, 0.0)
        ax.errorbar(xpos, mean, yerr=err, color=colors[k], linestyle=linestyle, marker="o", markersize=3,
                    capsize=2, label=label)
    if numeric_x and xdim == "n_subjects" and len(xs) > 1 and min(xs) > 0:
        from matplotlib.ticker import NullFormatter, NullLocator

        ax.set_xscale("log")
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xticks(xpos)
    ax.set_xticklabels([str(x) for x in xs])
    ax.set_xlabel(xdim.replace("_", " "))
    if logy:
        ax.set_yscale("log")


def _colors(n):
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    return [cmap(k % 10) for k in range(max(n, 1))]


def _skew_scatter(ax, ds, summary, xdim):
    """Per-replication Kendall tau vs |skewness|, coloured like the line series (sizes pooled)."""
    if "abs_skewness" not in ds or "kendall_tau" not in ds:
        ax.set_visible(False)
        return
    dims, combos = _series(summary, xdim)
    colors = _colors(len(combos))
    for k, combo in enumerate(combos):
        sub = ds.sel(dict(zip(dims, combo)))
        x = np.asarray(sub["abs_skewness"].values, dtype=float).ravel()
        y = np.asarray(sub["kendall_tau"].values, dtype=float).ravel()
        ok = np.isfinite(x) & np.isfinite(y)
        if ok.any():
            ax.scatter(x[ok], y[ok], s=8, alpha=0.6, color=colors[k])
    ax.set_xlabel("|skewness| (G1) of true abilities")
    ax.set_ylabel("Kendall tau")


def _figure(ds, kind, title, summary):
    from matplotlib.figure import Figure

    panels = _PANELS[kind]
    xdim = _X[kind]
    ncol = 3
    nrow = math.ceil(len(panels) / ncol)
    fig = Figure(figsize=(13, 3.6 * nrow + 0.6), layout="constrained")
    axes = fig.subplots(nrow, ncol, squeeze=False).ravel()
    for ax, (var, panel_title, scale) in zip(axes, panels):
        ax.set_title(panel_title, fontsize=9)
        ax.grid(alpha=0.3)
        if var == "skew_scatter":
            _skew_scatter(ax, ds, summary, xdim)
            continue
        names = var if isinstance(var, tuple) else (var,)
        present = [v for v in names if v in summary]
        if not present:
            ax.set_visible(False)
            continue
        for v, style in zip(present, ("-", "--")):
            _line_panel(ax, summary, v, xdim, logy=scale == "log", linestyle=style)
        if var == "coverage":
            ax.axhline(0.95, color="k", linestyle=":", linewidth=1)
        if var in ("bias", "gain"):
            ax.axhline(0.0, color="k", linestyle=":", linewidth=1)
        if var == "sd_ratio":
            ax.axhline(1.0, color="k", linestyle=":", linewidth=1)
        ax.tick_params(labelsize=8)
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    handles, labels = [], []
    for ax in axes:
        if not ax.get_visible():
            continue
        h, lab = ax.get_legend_handles_labels()
        for hh, ll in zip(h, lab):
            if ll not in labels:
                handles.append(hh)
                labels.append(ll)
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncol=min(len(labels), 3), fontsize=8)
    fig.suptitle(title, fontsize=12)
    return fig


def _table_figure(table, title):
    from matplotlib.figure import Figure

    n_rows = len(table) + 1
    fig = Figure(figsize=(13, 0.25 * n_rows + 0.6))
    ax = fig.add_axes((0.0, 0.0, 1.0, 0.92))
    ax.axis("off")
    cells = table.astype(str).values.tolist()
    t = ax.table(cellText=cells, colLabels=[str(c) for c in table.columns], cellLoc="center", bbox=(0.0, 0.0, 1.0, 1.0))
    t.auto_set_font_size(False)
    t.set_fontsize(6.5 if len(table.columns) <= 14 else 5.5)
    fig.suptitle(title, fontsize=9)
    return fig


def _stack_png(figs, path: Path) -> None:
    """Render figures to one tall PNG (one page)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    images = []
    for fig in figs:
        canvas = FigureCanvasAgg(fig)
        canvas.draw()
        images.append(np.asarray(canvas.buffer_rgba()))
    width = max(im.shape[1] for im in images)
    padded = []
    for im in images:
        if im.shape[1] < width:
            pad = np.full((im.shape[0], width - im.shape[1], 4), 255, dtype=np.uint8)
            im = np.concatenate([im, pad], axis=1)
        padded.append(im)
    page = np.concatenate(padded, axis=0)
    from matplotlib.image import imsave

    with atomic_output(path) as tmp:
        imsave(tmp, page, format="png")
    return page


def render_report(ds, out, *, name: str | None = None, title: str | None = None, summary=None) -> dict:
    """Write a one-page report of an audit Dataset: ``{"png": path, "html": path}``.

    ``out`` is a directory (created if needed); ``name`` the file stem (default
    ``"<audit>_report"``). The PNG holds the figure grid above the summary table (mean ± MCSE per
    cell); the HTML embeds the same figure and the table and lists the configuration.
    ``summary``: ``summarize(ds)`` if the caller has it already.
    """
    kind = _kind(ds)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    name = name or f"{kind.replace('-', '_')}_report"
    bank = ds.attrs.get("bank_id")
    if bank is None:
        try:
            bank = json.loads(ds.attrs.get("config", "{}")).get("bank_id", "?")
        except (TypeError, ValueError):
            bank = "?"
    n_rep = int(ds.sizes.get("replication", 0))
    done = int(ds["done"].sum()) if "done" in ds else 0
    total = int(ds["done"].size) if "done" in ds else 0
    title = title or f"{kind} audit of bank {bank!r}: {n_rep} replications ({done}/{total} records)"
    summary = summarize(ds) if summary is None else summary
    table = summary_table(ds, summary=summary)
    fig = _figure(ds, kind, title, summary)
    png_table = summary_table(ds, _PNG_TABLE_VARS.get(kind), summary=summary) if kind in _PNG_TABLE_VARS else table
    tfig = _table_figure(png_table, "summary: mean ± Monte-Carlo SE over replications (all metrics: see the HTML)")
    png = out / f"{name}.png"
    _stack_png([fig, tfig], png)
    buf = io.BytesIO()
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    fig.savefig(buf, format="png", dpi=100)
    b64 = base64.b64encode(buf.getvalue()).decode()
    try:
        config = json.dumps(json.loads(ds.attrs.get("config", "{}")), indent=1, sort_keys=True)
    except (TypeError, ValueError):
        config = str(ds.attrs.get("config", ""))
    failures = ""
    if "error" in ds:
        errors = sorted({str(e) for e in np.asarray(ds["error"].values).ravel() if str(e)})
        if errors:
            failures = "<h2>Failures</h2><ul>" + "".join(f"<li><code>{html.escape(e)}</code></li>" for e in errors[:20]) + "</ul>"
    page = f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;max-width:1300px;margin:1em auto}} table{{border-collapse:collapse;font-size:12px}}
td,th{{border:1px solid #ccc;padding:2px 6px;text-align:center}} pre{{background:#f6f6f6;padding:0.5em;font-size:11px}}</style>
</head><body>
<h1>{html.escape(title)}</h1>
<img src="data:image/png;base64,{b64}" style="max-width:100%">
<h2>Summary (mean ± Monte-Carlo SE over replications)</h2>
{table.to_html(index=False, escape=True)}
{failures}
<h2>Configuration</h2><pre>{html.escape(config)}</pre>
</body></html>
"""
    html_path = out / f"{name}.html"
    with atomic_output(html_path) as tmp:
        tmp.write_text(page, encoding="utf-8")
    return {"png": png, "html": html_path}
