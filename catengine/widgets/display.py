"""Display helpers shared by the widgets: figures into ``ipywidgets.Output``, HTML tables.

Figures are plain ``matplotlib.figure.Figure`` objects (no pyplot state, so nothing accumulates
and no backend is needed) rendered to PNG and placed in an Output widget's ``outputs`` trait.
That works the same in a kernel, in a browser and in a test process without a kernel, and it keeps
the displayed state on the widget model where tests can read it.
"""

from __future__ import annotations

import base64
import html
import io
import math

from matplotlib.figure import Figure


def new_figure(n_axes: int = 1, *, width: float = 5.0, height: float = 3.4) -> tuple[Figure, list]:
    """A figure with ``n_axes`` side-by-side axes (constrained layout)."""
    fig = Figure(figsize=(width * n_axes, height), layout="constrained")
    axes = [fig.add_subplot(1, n_axes, k + 1) for k in range(n_axes)]
    return fig, axes


def figure_png(fig: Figure, dpi: int = 80) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def show_figure(output, fig: Figure, *, dpi: int = 80) -> None:
    """Replace what ``output`` (an ``ipywidgets.Output``) shows by ``fig`` rendered as PNG."""
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    output.outputs = (
        {
            "output_type": "display_data",
            "data": {
                "image/png": base64.b64encode(figure_png(fig, dpi)).decode("ascii"),
                "text/plain": f"<figure: {'; '.join(titles) or 'untitled'}>",
            },
            "metadata": {},
        },
    )


def show_text(output, text: str) -> None:
    """Replace what ``output`` shows by plain text (e.g. why a plot is not available)."""
    output.outputs = ({"output_type": "stream", "name": "stdout", "text": text if text.endswith("\n") else text + "\n"},)


def fmt(value, digits: int = 3) -> str:
    """A number for a table cell ("" for None, "n/a" for NaN)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, (bool,)):
        return str(int(value))
    if isinstance(value, int):
        return str(value)
    value = float(value)
    if math.isnan(value):
        return "n/a"
    if value != 0 and (abs(value) >= 1e5 or abs(value) < 10 ** (-digits)):
        return f"{value:.{digits}g}"
    return f"{value:.{digits}f}"


def html_table(header, rows, *, css_class: str = "catengine-table", max_height: str | None = "22em") -> str:
    """An HTML table (escaped cells) inside a scrollable box."""
    head = "".join(f"<th style='text-align:right;padding:0 6px'>{html.escape(str(h))}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td style='text-align:right;padding:0 6px'>{html.escape(fmt(v))}</td>" for v in row) + "</tr>"
        for row in rows
    )
    style = f" style='max-height:{max_height};overflow-y:auto'" if max_height else ""
    return (
        f"<div{style}><table class='{css_class}' style='border-collapse:collapse;font-family:monospace;font-size:90%'>"
        f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"
    )


def escape(text) -> str:
    return html.escape(str(text))
