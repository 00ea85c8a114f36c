# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What systemd-sysctl applies at boot, as sysctl.d(5) and systemd-sysctl
(src/sysctl/sysctl.c, src/basic/conf-files.c) document it, and where the
drain drop-in must be named to be the value boot applies.

- Files ending in ".conf" are read from /etc/sysctl.d, /run/sysctl.d,
  /usr/local/lib/sysctl.d, /usr/lib/sysctl.d (and /lib/sysctl.d), in that
  order of precedence: of files with the same name only the one in the
  directory listed first is read (a symlink to /dev/null, or an empty file,
  masks the others). Symlinks are followed (Debian and Ubuntu ship
  /etc/sysctl.d/99-sysctl.conf -> ../sysctl.conf), but the link's own name
  is the one sorted.
- All files are sorted together by file name and read in that order; for
  one key the assignment read last wins.
- A key may use "/" or "." as separators; a leading "-" lets the assignment
  fail silently; "-key" without "=" excludes the key from globs and unsets
  an earlier assignment of it; a glob key ("*?[") sets every matching key
  that no explicit assignment names.
- nf_conntrack's keys exist only once the module is loaded:
  systemd-sysctl.service runs After=systemd-modules-load.service, so a
  modules-load.d entry makes them exist in time.

Pure logic: files in (as read by the module), plans and boot values out."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fnmatch
import os
import re

SYSCTL_DIRS = ("/etc/sysctl.d", "/run/sysctl.d", "/usr/local/lib/sysctl.d", "/usr/lib/sysctl.d", "/lib/sysctl.d")
MODULES_LOAD_DIRS = ("/etc/modules-load.d", "/run/modules-load.d", "/usr/local/lib/modules-load.d",
                     "/usr/lib/modules-load.d", "/lib/modules-load.d")
# What marks a file as the module's own (it removes only such files).
MARK = "homelab.edge.tcp_drain"
# The names tried, in order, when the drop-in must sort after a file of the user's (boot_order=win): the
# configured name's stem ("homelab-edge-drain.conf") behind each prefix.
WIN_PREFIXES = ("99-zzz-", "zz-", "zzzz-")
BOOT_ORDER = ("refuse", "win")
CONNTRACK_MODULE = "nf_conntrack"
GLOB_CHARS = "*?["


def to_path(key):
    """A sysctl key as systemd compares it (sysctl_normalize): the path under
    /proc/sys. When the first separator is a dot, dots and slashes swap."""
    key = key.strip().strip("/")
    first = re.search(r"[./]", key)
    if first and first.group(0) == ".":
        key = key.translate({ord("."): "/", ord("/"): "."})
    return key


def is_glob(key):
    return any(c in key for c in GLOB_CHARS)


def glob_matches(pattern, path):
    """glob(7) over /proc/sys: each path component on its own ("*" never
    crosses a "/")."""
    parts, names = pattern.split("/"), path.split("/")
    return len(parts) == len(names) and all(fnmatch.fnmatchcase(n, p) for p, n in zip(parts, names))


def parse(text):
    """The assignments of one sysctl.d file: [(line number, key as written,
    key path, value or None for an exclusion)]. Comments (# ;), blank lines
    and lines that are not assignments (systemd ignores them) are left out."""
    out = []
    for number, line in enumerate((text or "").splitlines(), 1):
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if "=" in line:
            key, value = line.split("=", 1)
            value = value.strip()
        elif line.startswith("-"):
            key, value = line, None
        else:
            continue
        key = key.strip()
        written = key
        if key.startswith("-"):
            key = key[1:]
        if key:
            out.append((number, written, to_path(key), value))
    return out


def applied_files(files, dirs=None):
    """The files systemd reads, in the order it reads them. `files`: [{"path",
    "text" (the content after symlinks; "" for /dev/null; None when it cannot
    be read), "link" (a symlink's target, or None)}]. Of one name the file in
    the first of `dirs` is read; a masked one ("" text) is left out."""
    rank = dict((d, i) for i, d in enumerate(dirs or SYSCTL_DIRS))
    chosen = {}
    for f in files:
        d, name = os.path.dirname(f["path"]), os.path.basename(f["path"])
        if d not in rank or not name.endswith(".conf") or name.startswith("."):
            continue
        if name not in chosen or rank[d] < rank[os.path.dirname(chosen[name]["path"])]:
            chosen[name] = f
    return [chosen[name] for name in sorted(chosen) if chosen[name].get("text")]


def options(files, dirs=None):
    """systemd-sysctl's table after reading every file: {key path: entry}, in
    the order it applies them (a key assigned again with another value moves
    to the end; with the same value it stays). Entry: {"path", "line", "key",
    "value", "link"}."""
    table = {}
    order = []
    for f in applied_files(files, dirs):
        for number, written, path, value in parse(f["text"]):
            entry = {"path": f["path"], "line": number, "key": written, "value": value, "link": f.get("link")}
            if path in table:
                if table[path]["value"] == value:
                    continue
                order.remove(path)
            table[path] = entry
            order.append(path)
    return [(p, table[p]) for p in order]


def boot_entry(table, key):
    """The entry that sets `key` at boot: its explicit assignment (value None:
    excluded, so not set), else the glob applied last that matches it, else
    None (not set: the kernel's own value)."""
    path = to_path(key)
    explicit = dict(table)
    if path in explicit:
        return explicit[path]
    found = None
    for pattern, entry in table:
        if is_glob(pattern) and entry["value"] is not None and glob_matches(pattern, path):
            found = entry
    return found


def as_int(value):
    try:
        return int(str(value).strip().split()[0])
    except (ValueError, IndexError):
        return None


def boot_values(files, keys, dirs=None):
    """{key: {"value": int or None, "text", "path", "line"}}: what the next
    boot sets each key to (value None: it does not set it)."""
    table = options(files, dirs)
    out = {}
    for key in keys:
        e = boot_entry(table, key)
        if e is None or e["value"] is None:
            out[key] = {"value": None, "text": None, "path": e and e["path"], "line": e and e["line"]}
        else:
            out[key] = {"value": as_int(e["value"]), "text": e["value"], "path": e["path"], "line": e["line"]}
    return out


def drop_in_text(values, reason=None):
    """The drop-in's content: `values` {key: int}."""
    head = ["# %s: shorter drain after a connection flood (managed by Ansible; state=absent removes it)." % MARK,
            "# Per network namespace: containers on a bridge network need their own (compose sysctls:)."]
    if reason:
        head.append("# %s" % reason)
    return "\n".join(head + ["%s = %d" % (k, values[k]) for k in sorted(values)]) + "\n"


def modules_load_text():
    return "# %s: nf_conntrack loaded before systemd-sysctl, so its keys exist when boot applies them.\n%s\n" % (
        MARK, CONNTRACK_MODULE)


def is_ours(f):
    return f.get("text") is not None and MARK in f["text"] and not f.get("link")


def candidates(dropin):
    """The drop-in's names: the configured one first, then the names that
    sort later (WIN_PREFIXES on its stem)."""
    d, name = os.path.dirname(dropin), os.path.basename(dropin)
    stem = re.sub(r"^[0-9]+-", "", name)
    return [dropin] + [os.path.join(d, p + stem) for p in WIN_PREFIXES if p + stem != name]


def shown(entry):
    """A file as people read it: its path, and where a symlink leads."""
    return "%s (-> %s)" % (entry["path"], entry["link"]) if entry.get("link") else entry["path"]


def later_conflicts(files, want, dropin, dirs=None):
    """Every assignment read after the drop-in (named `dropin`) that sets one
    of `want`'s keys to another value or unsets it: [{"path", "link", "line",
    "key", "value", "want"}], in the order boot reads them."""
    paths = dict((to_path(k), k) for k in want)
    name = os.path.basename(dropin)
    out = []
    for f in applied_files(files, dirs):
        if os.path.basename(f["path"]) <= name or is_ours(f):
            continue
        for number, written, path, value in parse(f["text"]):
            key = paths.get(path)
            if key is not None and (value is None or as_int(value) != want[key]):
                out.append({"path": f["path"], "link": f.get("link"), "line": number, "key": key,
                            "value": value, "want": want[key]})
    return out


def plan(files, want, dropin, order="refuse", dirs=None):
    """Where to write the drop-in so that boot applies `want` {key: int}.

    Returns {"path": the name to write (None when refused), "remove": the
    module's own drop-ins under other names, "conflicts": later_conflicts()
    of the configured name, "refusal": why not (None when it may write)}."""
    names = candidates(dropin)
    mine = [f for f in files if f["path"] in names and is_ours(f)]
    others = [f for f in files if f not in mine]
    conflicts = later_conflicts(others, want, dropin, dirs)
    chosen = None
    for name in names if order == "win" else names[:1]:
        if any(f["path"] == name for f in others):
            continue  # a file of someone else's under that name: not ours to replace
        trial = others + [{"path": name, "text": drop_in_text(want), "link": None}]
        got = boot_values(trial, want, dirs)
        if all(got[k]["value"] == want[k] for k in want):
            chosen = name
            break
    refusal = None
    if chosen is None and not conflicts and any(f["path"] == dropin for f in others):
        refusal = ("%s exists and is not the module's (it has no '%s' line): move it away or name another file "
                   "(tcp_drain_file). Nothing was changed." % (dropin, MARK))
    elif chosen is None:
        refusal = refusal_text(conflicts, dropin, order, names)
    remove = [f["path"] for f in mine if f["path"] != chosen] if chosen else []
    return {"path": chosen, "remove": remove, "conflicts": conflicts, "refusal": refusal}


def conflict_text(c):
    said = "%s = %s" % (c["key"], c["value"]) if c["value"] is not None else "-%s (unset)" % c["key"]
    return "%s line %d sets %s" % (shown(c), c["line"], said)


def refusal_text(conflicts, dropin, order, names):
    found = "; ".join(conflict_text(c) for c in conflicts)
    if order == "win":
        return ("at boot systemd-sysctl reads these after every name the drop-in may take (%s): %s. Change or "
                "remove those lines (or rename the file) so the drop-in's values are the ones boot applies. "
                "Nothing was changed." % (", ".join(os.path.basename(n) for n in names), found))
    keys = sorted(set(c["key"] for c in conflicts))
    return ("at boot systemd-sysctl reads %s after %s (files sorted by name across /etc, /run, /usr/local/lib and "
            "/usr/lib sysctl.d; the last one wins), so the next boot would undo %s: %s. Change or remove those "
            "lines, or set boot_order=win (role: tcp_drain_boot_order: win) to write the drop-in under a name "
            "that sorts after them. Nothing was changed."
            % (" and ".join(sorted(set(shown(c) for c in conflicts))) or "another file", dropin,
               ", ".join(keys) or "the drop-in", found))


def modules_loaded(files):
    """Module names that systemd-modules-load loads (modules-load.d files,
    read as sysctl.d's are: '-' and '_' are the same in a module's name)."""
    out = set()
    for f in applied_files(files, MODULES_LOAD_DIRS):
        for line in f["text"].splitlines():
            line = line.strip()
            if line and line[0] not in "#;":
                out.add(line.replace("-", "_"))
    return out


def report(boot, live, want, conntrack_at_boot):
    """Per key, the value the next boot applies beside the live one:
    {key: {"boot", "live", "from", "status"}}. status: "same" (boot applies
    the value asked), "differs" (a file sets another), "not-set" (no file
    sets it), "module-late" (a conntrack key whose module nothing loads
    before systemd-sysctl: the kernel lacks the key when it runs)."""
    out = {}
    for key in sorted(want):
        b = boot.get(key) or {}
        where = ("%s:%d" % (b["path"], b["line"])) if b.get("path") else None
        if key.startswith("net.netfilter.") and b.get("value") is not None and not conntrack_at_boot:
            status = "module-late"
        elif b.get("value") is None:
            status = "not-set"
        else:
            status = "same" if b["value"] == want[key] else "differs"
        out[key] = {"boot": b.get("value"), "live": live.get(key), "from": where, "status": status}
    return out


def summary(rep):
    """report() in words: each key's live value and the one boot applies."""
    words = []
    for key, r in sorted(rep.items()):
        short = key.rsplit(".", 1)[-1]
        if r["status"] == "same":
            words.append("%s=%s (boot %s)" % (short, r["live"], r["boot"]))
        elif r["status"] == "differs":
            words.append("%s=%s (boot %s from %s)" % (short, r["live"], r["boot"], r["from"]))
        elif r["status"] == "module-late":
            words.append("%s=%s (boot: not applied, %s loads after systemd-sysctl)"
                         % (short, r["live"], CONNTRACK_MODULE))
        else:
            words.append("%s=%s (boot: no file sets it)" % (short, r["live"]))
    return " ".join(words)
