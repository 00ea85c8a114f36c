"""perf's samples as stacks and flame graphs (issue 65), written here from the formats' own definitions: `perf
script`'s text (a header line per sample, then its call chain one frame a line, leaf first, a blank line after) is
folded into one line per distinct stack (frames root first, ";" between, and how many samples had it), and a folded
profile is drawn as an SVG flame graph: each frame a box as wide as its samples, its callees stacked on it, the
name inside where it fits and in its tooltip always. Pure functions over text; unit cases in
tests/dev/test_flame.py."""
import html
import os
import re

_FRAME = re.compile(r"^\s+([0-9a-f]+)\s+(.*?)\s+\(([^()]*)\)\s*$")


def frame_name(sym, dso):
    """A frame's name: its symbol without the offset perf may add (+0x1f), or, where perf found none, the
    [unknown] of the object it is in (the basename), so that unknown code in nginx and in the kernel stay apart."""
    sym = re.sub(r"\+0x[0-9a-f]+$", "", sym.strip())
    if not sym or sym == "[unknown]":
        return "[unknown %s]" % os.path.basename(dso.strip()) if dso.strip() else "[unknown]"
    return sym


def fold(text):
    """`perf script -F comm,ip,sym,dso` with call chains -> {"comm;root;...;leaf": samples}."""
    out = {}
    comm, frames = None, []

    def flush():
        if comm is not None:
            key = ";".join([comm] + list(reversed(frames)))
            out[key] = out.get(key, 0) + 1

    for line in text.splitlines():
        if not line.strip():
            flush()
            comm, frames = None, []
            continue
        m = _FRAME.match(line)
        if m and comm is not None:
            frames.append(frame_name(m.group(2), m.group(3)).replace(";", ":"))
        elif not line[:1].isspace():
            flush()
            comm, frames = line.split()[0].replace(";", ":"), []
    flush()
    return out


# the idle loop's leaf frames: a CPU sampled with nothing to run (perf record -a samples it too)
IDLE = ("pv_native_safe_halt", "native_safe_halt", "default_idle", "cpu_idle_poll", "intel_idle", "mwait_idle",
        "acpi_idle_do_entry", "poll_idle")


def busy(folded):
    """(the stacks that did work, the idle samples): a stack whose leaf is the idle loop's waited for work."""
    out, idle = {}, 0
    for stack, n in folded.items():
        if stack.rsplit(";", 1)[-1] in IDLE:
            idle += n
        else:
            out[stack] = n
    return out, idle


def shares(folded, kind="self", top=20):
    """The functions with the largest share of the samples, in %: "self" counts a sample for its leaf frame only,
    "total" for every distinct frame on its stack (the time in a function and what it calls). [(name, share)],
    largest first, ties by name."""
    total = float(sum(folded.values())) or 1.0
    acc = {}
    for stack, n in folded.items():
        frames = stack.split(";")[1:] or stack.split(";")
        for f in ([frames[-1]] if kind == "self" else set(frames)):
            acc[f] = acc.get(f, 0) + n
    ranked = sorted(acc.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    return [(f, round(100 * n / total, 2)) for f, n in ranked]


def tree(folded):
    """The folded stacks as a tree: {"name", "value", "children": {name: node}}."""
    root = {"name": "all", "value": 0, "children": {}}
    for stack, n in folded.items():
        root["value"] += n
        node = root
        for f in stack.split(";"):
            node = node["children"].setdefault(f, {"name": f, "value": 0, "children": {}})
            node["value"] += n
    return root


def _colour(name):
    """Warm colours, a hash of the name: the same function has the same colour in every graph; the kernel's
    (lower-case, no ngx_ prefix) redder, nginx's yellower."""
    h = sum(ord(c) * (i + 1) for i, c in enumerate(name)) % 100
    if name.startswith("ngx_"):
        return "rgb(%d,%d,%d)" % (230, 180 + h % 60, 50 + h % 40)
    return "rgb(%d,%d,%d)" % (220 + h % 35, 90 + h % 90, 50 + h % 30)


def svg(folded, title, width=1200, row=16, min_px=0.3):
    """A flame graph of `folded` as an SVG document: the root at the bottom, each frame as wide as its share."""
    root = tree(folded)
    total = float(root["value"]) or 1.0
    boxes = []

    def walk(node, x, depth):
        w = width * node["value"] / total
        if w < min_px:
            return
        boxes.append((x, depth, w, node["name"], node["value"]))
        cx = x
        for child in sorted(node["children"].values(), key=lambda c: c["name"]):
            walk(child, cx, depth + 1)
            cx += width * child["value"] / total

    walk(root, 0.0, 0)
    depth = max([d for x, d, w, n, v in boxes] or [0]) + 1
    height = (depth + 3) * row
    out = ['<?xml version="1.0" standalone="no"?>',
           '<svg version="1.1" xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="monospace" '
           'font-size="11">' % (width, height),
           '<rect x="0" y="0" width="%d" height="%d" fill="#f8f8f8"/>' % (width, height),
           '<text x="%d" y="%d" text-anchor="middle" font-size="14">%s</text>' % (width / 2, row, html.escape(title))]
    for x, d, w, name, value in boxes:
        y = height - (d + 1) * row
        label = "%s (%d samples, %.2f %%)" % (name, value, 100 * value / total)
        out.append('<g><title>%s</title><rect x="%.2f" y="%d" width="%.2f" height="%d" fill="%s" stroke="#fff" '
                   'stroke-width="0.3"/>' % (html.escape(label), x, y, w, row - 1, _colour(name)))
        chars = int(w / 7)
        if chars >= 4:
            text = name if len(name) <= chars else name[:chars - 2] + ".."
            out.append('<text x="%.2f" y="%d">%s</text>' % (x + 2, y + row - 4, html.escape(text)))
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out) + "\n"
