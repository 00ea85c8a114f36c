"""Time series as an SVG picture, with no plotting library: stacked panels, each with its lines (0..1 or
0..max) and the intervals an alert fired shaded. Used to draw the lab's Prometheus data during its faults
(molecule/default/tests/test_monitoring.py); pure: data in, SVG text out."""
from xml.sax.saxutils import escape

WIDTH, PANEL_H, LEFT, RIGHT, TOP, GAP = 900, 150, 60, 20, 30, 70
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")
SHADES = ("#f4b183", "#9dc3e6", "#c5e0b4", "#ffd966", "#d9b3ff")


def _scale(v, lo, hi, a, b):
    return a if hi == lo else a + (v - lo) * (b - a) / float(hi - lo)


def intervals(points, step):
    """[(start, end)] where a series of (t, value) samples is above 0 (a firing alert's ALERTS series)."""
    out = []
    for t, v in points:
        if v <= 0:
            continue
        if out and t - out[-1][1] <= 1.5 * step:
            out[-1][1] = t
        else:
            out.append([t, t])
    return [(a, b + step) for a, b in out]


def panel_svg(panel, y0, t0, t1):
    """One panel: dict(title, lines=[(label, [(t, v)])], shaded=[(label, [(start, end)])], ymax=None)."""
    x0, x1, h = LEFT, WIDTH - RIGHT, PANEL_H
    values = [v for dummy, pts in panel["lines"] for dummy2, v in pts]
    ymax = panel.get("ymax") or max(values + [1.0])
    out = ['<text x="%d" y="%d" font-size="13" font-weight="bold">%s</text>' % (x0, y0 - 8, escape(panel["title"]))]
    fired = [(label, spans) for label, spans in panel.get("shaded", []) if spans]
    for k, (label, spans) in enumerate(fired):
        # each alert a band of its own height, so that overlapping ones stay apart
        band = h / float(len(fired))
        for a, b in spans:
            xa, xb = _scale(max(a, t0), t0, t1, x0, x1), _scale(min(b, t1), t0, t1, x0, x1)
            out.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" opacity="0.6"><title>%s</title></rect>'
                       % (xa, y0 + k * band, max(xb - xa, 1), band, SHADES[k % len(SHADES)], escape(label)))
    out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#888"/>' % (x0, y0, x1 - x0, h))
    for frac in (0, 0.5, 1):
        y = y0 + h - frac * h
        out.append('<text x="%d" y="%.1f" font-size="10" text-anchor="end">%g</text>' % (x0 - 4, y + 3, frac * ymax))
    x = x0 + 8
    for i, (label, pts) in enumerate(panel["lines"]):
        if not pts:
            continue
        path = " ".join("%s%.1f,%.1f" % ("M" if j == 0 else "L", _scale(t, t0, t1, x0, x1),
                                         y0 + h - _scale(v, 0, ymax, 0, h)) for j, (t, v) in enumerate(pts))
        out.append('<path d="%s" fill="none" stroke="%s" stroke-width="1.5"/>' % (path, COLOURS[i % len(COLOURS)]))
        out.append('<text x="%d" y="%d" font-size="11" fill="%s">%s</text>'
                   % (x, y0 + h + 28, COLOURS[i % len(COLOURS)], escape(label)))
        x += _text_width(label) + 24
    x = x0 + 8
    for k, (label, dummy) in enumerate(fired):
        out.append('<rect x="%d" y="%d" width="10" height="10" fill="%s" opacity="0.6"/>'
                   % (x, y0 + h + 34, SHADES[k % len(SHADES)]))
        out.append('<text x="%d" y="%d" font-size="11">%s firing</text>' % (x + 14, y0 + h + 43, escape(label)))
        x += 14 + _text_width(label + " firing") + 24
    return out


def _text_width(text):
    return int(6.2 * len(text))  # about, at font-size 11 sans-serif


def svg(title, panels, t0, t1, note=""):
    """The whole picture: panels stacked, one time axis each (seconds from t0)."""
    height = TOP + len(panels) * (PANEL_H + GAP + 10) + 20
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif">' % (WIDTH, height),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="18" font-size="15" font-weight="bold">%s</text>' % (LEFT, escape(title))]
    for i, panel in enumerate(panels):
        y0 = TOP + 20 + i * (PANEL_H + GAP + 10)
        pt0, pt1 = panel.get("t0", t0), panel.get("t1", t1)
        out += panel_svg(panel, y0, pt0, pt1)
        for frac in (0, 0.25, 0.5, 0.75, 1):
            x = LEFT + frac * (WIDTH - RIGHT - LEFT)
            out.append('<text x="%.1f" y="%d" font-size="10" text-anchor="middle">%d s</text>'
                       % (x, y0 + PANEL_H + 13, round(frac * (pt1 - pt0))))
    if note:
        out.append('<text x="%d" y="%d" font-size="10" fill="#555">%s</text>' % (LEFT, height - 6, escape(note)))
    out.append("</svg>")
    return "\n".join(out) + "\n"
