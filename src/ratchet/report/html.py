"""HTML building blocks shared by the report pages: escaping, tables, badges, the page shell.

Pages are plain strings assembled from these helpers. Every value that comes from a run (task
text, model output, tool arguments) goes through :func:`esc`, so a trajectory cannot inject
markup into its own page.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence

CSS = """
:root {
  --ink: #1f2328; --muted: #656d76; --line: #d0d7de; --soft: #f6f8fa;
  --base: #8c959f; --final: #0969da; --good: #1a7f37; --bad: #cf222e; --warn: #9a6700;
  --good-bg: #dafbe1; --bad-bg: #ffebe9; --warn-bg: #fff8c5;
}
* { box-sizing: border-box; }
body {
  margin: 0; color: var(--ink); background: #fff;
  font: 15px/1.5 -apple-system, "Segoe UI", "Helvetica Neue", Arial, "DejaVu Sans", sans-serif;
}
main { max-width: 1120px; margin: 0 auto; padding: 28px 32px 64px; }
header.top { border-bottom: 1px solid var(--line); margin-bottom: 8px; padding-bottom: 14px; }
.eyebrow { color: var(--muted); font-size: 13px; }
h1 { font-size: 26px; line-height: 1.3; margin: 6px 0 6px; font-weight: 650; }
h2 {
  font-size: 19px; margin: 34px 0 8px; padding-bottom: 4px; border-bottom: 1px solid var(--line);
}
h3 { font-size: 15px; margin: 18px 0 6px; }
p.lede, p.note { color: var(--muted); margin: 4px 0 12px; }
a { color: var(--final); text-decoration: none; }
a:hover { text-decoration: underline; }
code, pre, .mono {
  font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, "DejaVu Sans Mono", monospace;
  font-size: 13px;
}
pre {
  background: var(--soft); border: 1px solid var(--line); border-radius: 6px; padding: 10px 12px;
  white-space: pre-wrap; word-break: break-word; margin: 6px 0;
}
.cards {
  display: grid; grid-template-columns: repeat(auto-fit, minmax(190px, 1fr)); gap: 12px;
  margin: 16px 0;
}
.card { border: 1px solid var(--line); border-radius: 8px; padding: 12px 14px; background: #fff; }
.card .label {
  color: var(--muted); font-size: 12px; text-transform: uppercase; letter-spacing: .04em;
}
.card .value { font-size: 24px; font-weight: 650; margin-top: 2px; }
.card .sub { color: var(--muted); font-size: 13px; }
.up { color: var(--good); } .down { color: var(--bad); } .flat { color: var(--muted); }
table { border-collapse: collapse; width: 100%; margin: 8px 0 4px; font-size: 14px; }
th, td {
  text-align: left; padding: 6px 10px; border-bottom: 1px solid var(--line); vertical-align: top;
}
th { background: var(--soft); font-weight: 600; font-size: 13px; white-space: nowrap; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.accepted td { background: #f0fbf3; }
.badge {
  display: inline-block; padding: 1px 8px; border-radius: 999px; font-size: 12px;
  font-weight: 600;
}
.badge.pass { background: var(--good-bg); color: var(--good); }
.badge.fail { background: var(--bad-bg); color: var(--bad); }
.badge.muted { background: var(--soft); color: var(--muted); border: 1px solid var(--line); }
.badge.warn { background: var(--warn-bg); color: var(--warn); }
figure { margin: 10px 0 6px; }
figure svg { max-width: 100%; height: auto; display: block; }
figcaption { color: var(--muted); font-size: 13px; margin-top: 2px; }
.grid2 { display: grid; grid-template-columns: 1fr 1fr; gap: 24px; }
@media (max-width: 900px) { .grid2 { grid-template-columns: 1fr; } }
details { margin: 8px 0; }
summary { cursor: pointer; color: var(--final); }
.turn { border: 1px solid var(--line); border-radius: 8px; margin: 12px 0; overflow: hidden; }
.turn > .head { background: var(--soft); padding: 6px 12px; font-size: 13px; color: var(--muted);
                display: flex; justify-content: space-between; gap: 12px; }
.turn > .body { padding: 8px 12px; }
.turn.error { border-color: var(--bad); }
.turn.error > .head { background: var(--bad-bg); color: var(--bad); }
.role {
  font-size: 12px; font-weight: 600; text-transform: uppercase; letter-spacing: .04em;
  color: var(--muted); margin-top: 6px;
}
.obs-error { background: var(--bad-bg); border-color: #ff8182; color: #82071e; }
.verdict {
  border-radius: 8px; padding: 12px 14px; margin: 14px 0; border: 1px solid var(--line);
}
.verdict.pass { background: var(--good-bg); border-color: #4ac26b; }
.verdict.fail { background: var(--bad-bg); border-color: #ff8182; }
dl.facts {
  display: grid; grid-template-columns: max-content 1fr; gap: 4px 16px; margin: 10px 0;
  font-size: 14px;
}
dl.facts dt { color: var(--muted); } dl.facts dd { margin: 0; }
footer {
  color: var(--muted); font-size: 12px; margin-top: 40px; border-top: 1px solid var(--line);
  padding-top: 10px;
}
"""


def esc(value: object) -> str:
    """Return ``value`` as text safe inside HTML element content and quoted attributes."""
    return html.escape(str(value), quote=True)


def page(title: str, body: str) -> str:
    """Return a complete, self-contained HTML document (inline CSS, no scripts, no requests)."""
    # The empty data: icon stops browsers from requesting /favicon.ico, which a file:// page
    # cannot serve and which would be logged as a failed load.
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<link rel="icon" href="data:,">\n'
        f"<title>{esc(title)}</title>\n<style>{CSS}</style>\n</head>\n"
        f"<body>\n<main>\n{body}\n</main>\n</body>\n</html>\n"
    )


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[str]],
    numeric: Sequence[int] = (),
    row_classes: Sequence[str] | None = None,
) -> str:
    """Return an HTML table; cells are already-escaped HTML.

    Args:
        headers: Column titles (plain text, escaped here).
        rows: Cells per row, as HTML.
        numeric: Indices of right-aligned numeric columns.
        row_classes: A CSS class per row (``""`` for none).
    """
    numbers = set(numeric)
    head = "".join(
        f'<th class="num">{esc(h)}</th>' if i in numbers else f"<th>{esc(h)}</th>"
        for i, h in enumerate(headers)
    )
    lines = []
    for index, row in enumerate(rows):
        css = row_classes[index] if row_classes is not None else ""
        cells = "".join(
            f'<td class="num">{c}</td>' if i in numbers else f"<td>{c}</td>"
            for i, c in enumerate(row)
        )
        attribute = f' class="{css}"' if css else ""
        lines.append(f"<tr{attribute}>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(lines)}</tbody></table>"


def badge(passed: bool | None, text: str | None = None) -> str:
    """Return a green PASS / red FAIL badge (grey when unknown, e.g. a crashed episode)."""
    if passed is None:
        return f'<span class="badge muted">{esc(text or "n/a")}</span>'
    css = "pass" if passed else "fail"
    return f'<span class="badge {css}">{esc(text or ("pass" if passed else "fail"))}</span>'


def card(label: str, value: str, sub: str = "") -> str:
    """Return a headline number card; ``value`` and ``sub`` are HTML."""
    extra = f'<div class="sub">{sub}</div>' if sub else ""
    return (
        f'<div class="card"><div class="label">{esc(label)}</div>'
        f'<div class="value">{value}</div>{extra}</div>'
    )


def figure(svg: str, caption: str) -> str:
    """Wrap an inline SVG chart and its caption (plain text)."""
    return f"<figure>{svg}<figcaption>{esc(caption)}</figcaption></figure>"


def link(href: str, text: str) -> str:
    """Return a relative link; both parts are escaped."""
    return f'<a href="{esc(href)}">{esc(text)}</a>'


def signed_points(delta: float) -> str:
    """Format a pass-rate difference as coloured percentage points, e.g. ``+45 points``."""
    points = round(delta * 100)
    css = "up" if points > 0 else "down" if points < 0 else "flat"
    return f'<span class="{css}">{points:+d} points</span>'


def p_value(value: float) -> str:
    """Format a p-value, with a floor instead of a row of zeros."""
    return "p < 0.0001" if value < 0.0001 else f"p = {value:.4f}"


def rate(value: float) -> str:
    """Format a rate in [0, 1] with two decimals."""
    return f"{value:.2f}"


def shorten(text: str, limit: int = 110) -> str:
    """Cut ``text`` to one line of at most ``limit`` characters."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def count(value: float) -> str:
    """Format a large count with thousands separators."""
    return f"{round(value):,}"


def duration(seconds: float) -> str:
    """Format seconds as ``42.0 s``, ``3.5 min`` or ``1.2 h``."""
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
