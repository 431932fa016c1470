"""HTML of the visual QA report: static pages, local assets only (no script, no CDN, no network), images as
lazy-loaded thumbnails linking to their full-resolution PNG."""
from __future__ import annotations

import html

CSS = """body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;background:#fafafa}
h1,h2,h3{margin:.8em 0 .3em}table{border-collapse:collapse;margin:.4em 0}td,th{border:1px solid #ccc;padding:2px 6px;
text-align:left;vertical-align:top}th{background:#eee}.fail{color:#b00;font-weight:bold}.warn{color:#a60}
.pass{color:#070}figure{display:inline-block;margin:6px;vertical-align:top;background:#fff;border:1px solid #ddd;
padding:4px}figure img{display:block;image-rendering:pixelated}figcaption{font-size:12px;max-width:360px}
.bar{display:flex;justify-content:space-between;font-size:11px;width:256px}.swatch{display:inline-block;width:12px;
height:12px;border:1px solid #888;vertical-align:middle;margin-right:4px}.hist rect{fill:#4a7}.hist text{font-size:9px}
nav a{margin-right:1em}"""


def esc(x) -> str:
    return html.escape(str(x), quote=True)


def page(title: str, body: str, css_href: str) -> str:
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{esc(title)}</title>"
            f"<link rel=\"stylesheet\" href=\"{esc(css_href)}\"></head><body>\n{body}\n</body></html>\n")


def figure(img: dict, caption: str, legend: str = "") -> str:
    """img = {full, thumb, width, height} (paths relative to the page; thumbnail size in px)."""
    return (f"<figure><a href=\"{esc(img['full'])}\"><img src=\"{esc(img['thumb'])}\" loading=\"lazy\" "
            f"width=\"{img['width']}\" height=\"{img['height']}\" alt=\"{esc(caption)}\"></a>"
            f"<figcaption>{esc(caption)}{legend}</figcaption></figure>")


def colour_bar(bar: dict, legend: dict, unit: str) -> str:
    """The colour bar image with its tick values (units; 'log' when logarithmic)."""
    from rowbeam.report.colour import ticks

    labels = "".join(f"<span>{v:.3g}</span>" for _, v in ticks(legend["lo"], legend["hi"], legend["log"]))
    scale = " (log scale)" if legend["log"] else ""
    return (f"<div><img class=\"colourbar\" src=\"{esc(bar['full'])}\" width=\"256\" height=\"12\" "
            f"alt=\"colour bar\"><div class=\"bar\">{labels}</div><div>{esc(unit)}{scale}</div></div>")


def status(s: str) -> str:
    return f"<span class=\"{esc(s)}\">{esc(s.upper())}</span>"


def table(headers, rows) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def swatch(rgb) -> str:
    r, g, b = rgb
    return f"<span class=\"swatch\" style=\"background:rgb({r},{g},{b})\"></span>"


def histogram_svg(h: dict, unit: str, width: int = 300, height: int = 70) -> str:
    """Inline SVG bars of a stats.histogram (log10 edges)."""
    counts = h.get("counts") or []
    if not counts:
        return f"<em>no positive values ({h.get('zeros', 0)} zeros)</em>"
    top = max(counts) or 1
    bw = width / len(counts)
    bars = "".join(f"<rect x=\"{i * bw:.1f}\" y=\"{height - 12 - c / top * (height - 14):.1f}\" width=\"{bw - 1:.1f}\" "
                   f"height=\"{c / top * (height - 14):.1f}\"><title>{c}</title></rect>" for i, c in enumerate(counts))
    e = h["edges"]
    return (f"<svg class=\"hist\" width=\"{width}\" height=\"{height}\" role=\"img\">{bars}"
            f"<text x=\"0\" y=\"{height - 1}\">{e[0]:.2g}</text><text x=\"{width}\" y=\"{height - 1}\" "
            f"text-anchor=\"end\">{e[-1]:.2g} {esc(unit)}</text></svg>")     # (ends at the right edge, unclipped)


def fmt(x) -> str:
    if x is None:
        return "–"
    if isinstance(x, float):
        return f"{x:.4g}"
    return esc(x)
