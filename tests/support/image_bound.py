#!/usr/bin/env python
"""Which Molecule and lab tests need an upstream image (lab/upstream_images.py),
read from what each test uses - no list of tests is kept by hand - and whether
each says so.

A test needs the part `tag` of upstream_images.NEEDED_BY (autoheal) when a
string naming that part is in the test function, its decorators' arguments
(parametrize), the fixtures it asks for, or anything those reach: functions,
fixtures, classes and constants of its own file, of a sibling test file it
imports (test_nas) and of the modules of tests/support and lab/ it imports,
followed call by call. What names a part, all read from the checkout:
- its tag, which is also its role's name (homelab.edge.autoheal, --tags
  autoheal, the options autoheal_*, its rows and findings);
- its lab images, by name and tag (homelab-edge/socket-proxy:lab);
- what the role names on a host: the values of its container, directory and
  image options in its defaults and in the lab's inventories
  (inventories/lab, molecule/*/molecule.yml), its compose project's name and
  the alerts its templates define.
Docstrings and comments do not count. Names are matched without regard to
case, "-", "_" and " " being the same.

A test that needs a part is either
- marked `@upstream_images.needs(tag)`: skipped where the lab lacks the
  image, the skip reason naming it; or
- adapts to it: the function on the way that uses the part (the test itself or
  a helper) asks upstream_images what the lab lacks (`reason`, `missing`,
  `skipped_tags`) and takes each branch itself.
tests/dev/test_image_bound_marks.py fails on any other, on a mark that holds
nothing back (the test uses no part of that tag) and on a mark given twice.

  python tests/support/image_bound.py           each image-bound test: marked or adapting, and what it uses
  python tests/support/image_bound.py plain            the plain path's collection and skip decisions, every
                                                       scenario and tests/lab (tests/run.sh plain)
  python tests/support/image_bound.py scenario NAME    Molecule NAME's converge and its marked and adapting tests,
                                                       the images hidden (tests/run.sh plain: nas)
"""
import ast
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "lab"))
import upstream_images  # noqa: E402

ORACLE = "upstream_images"            # the module that decides; its own strings name every part, so it is not read
ASKS = ("reason", "missing", "skipped_tags")   # what a test asks it to adapt to what the lab has
MARK = "needs"


def lab_test_files(root=ROOT):
    """The tests that run on the lab: every Molecule scenario's verifier and tests/lab."""
    return sorted(glob.glob(os.path.join(root, "molecule", "*", "tests", "test_*.py")) +
                  glob.glob(os.path.join(root, "tests", "lab", "test_*.py")))


# ---------------------------------------------------------------- what names a part

def _words(text):
    return [w for w in re.split(r"[-_ ]+", text.lower()) if w]


def _pattern(name):
    return re.compile("[-_ ]".join(re.escape(w) for w in _words(name)), re.I)


def _name(names, name, what):
    if what not in names.setdefault(name, []):
        names[name].append(what)


def _walk_options(data, keys, found, where):
    if isinstance(data, dict):
        for k, v in data.items():
            if isinstance(k, str) and keys.match(k) and isinstance(v, str) and v and "{{" not in v:
                _name(found, v, "%s in %s" % (k, where))
            _walk_options(v, keys, found, where)
    elif isinstance(data, list):
        for v in data:
            _walk_options(v, keys, found, where)


def _yaml(path):
    with open(path) as f:
        return yaml.safe_load(f.read().replace("${", "$")) or {}   # molecule.yml's ${VAR} stay plain text


def part_names(root=ROOT):
    """{tag: {name: what it is}} for each part of lab/upstream_images.NEEDED_BY."""
    out = {}
    for tag, images in sorted(upstream_images.NEEDED_BY.items()):
        names = {}
        _name(names, tag, "the part's tag and role (homelab.edge.%s, --tags %s, its options %s_*)" % (tag, tag, tag))
        for n in images:
            _name(names, n, "the lab image %s" % upstream_images.image(n))
            _name(names, upstream_images.image(n), "the lab image %s" % upstream_images.image(n))
        role = os.path.join(root, "roles", tag)
        keys = re.compile(r"^%s_(container|dir|(\w+_)?image)$" % re.escape(tag))
        sources = [os.path.join(role, "defaults", "main.yml"), os.path.join(root, "inventories", "lab", "hosts.yml")]
        sources += sorted(glob.glob(os.path.join(root, "molecule", "*", "molecule.yml")))
        for path in sources:
            if os.path.exists(path):
                _walk_options(_yaml(path), keys, names, os.path.relpath(path, root))
        for path in sorted(glob.glob(os.path.join(role, "templates", "*"))):
            with open(path) as f:
                text = f.read()
            rel = os.path.relpath(path, root)
            for m in re.finditer(r"^name: *([\w.-]+) *$", text, re.M):
                _name(names, m.group(1), "its compose project (%s)" % rel)
            for m in re.finditer(r"^\s*-? *alert: *(\w+)", text, re.M):
                _name(names, m.group(1), "an alert it defines (%s)" % rel)
        out[tag] = dict((name, "; ".join(whats)) for name, whats in names.items())
    return out


class Needles(object):
    def __init__(self, root=ROOT):
        self.parts = part_names(root)
        self.patterns = [(tag, name, what, _pattern(name)) for tag, names in sorted(self.parts.items())
                         for name, what in sorted(names.items())]

    def match(self, text):
        """[(tag, name, what)] of the parts `text` names."""
        return [(tag, name, what) for tag, name, what, p in self.patterns if p.search(text)]


# ---------------------------------------------------------------- what a test uses

class Use(object):
    """A string naming a part, where it is, and the way from the test to it."""

    def __init__(self, tag, name, what, text, path, line, via):
        self.tag, self.name, self.what, self.text, self.path, self.line, self.via = \
            tag, name, what, text, path, line, via

    def __str__(self):
        text = self.text if len(self.text) <= 70 else self.text[:67] + "..."
        return "%r (%s: %s) at %s:%d%s" % (text, self.name, self.what, self.path, self.line,
                                           (" via " + " -> ".join(self.via)) if self.via else "")


def _docstrings(tree):
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                ids.add(id(first.value))
    return ids


def _dotted(node):
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _is_fixture(fdef):
    for d in fdef.decorator_list:
        name = _dotted(d.func if isinstance(d, ast.Call) else d) or ""
        if name.split(".")[-1] == "fixture":
            autouse = isinstance(d, ast.Call) and any(
                k.arg == "autouse" and isinstance(k.value, ast.Constant) and k.value.value for k in d.keywords)
            return "autouse" if autouse else "fixture"
    return None


class Module(object):
    """One Python file: its top-level functions, classes, constants and imports."""

    def __init__(self, path, rel, text=None):
        self.path, self.rel = path, rel
        if text is None:
            with open(path) as f:
                text = f.read()
        self.tree = ast.parse(text, path)
        self.docstrings = _docstrings(self.tree)
        self.defs, self.assigns, self.imports, self.from_imports = {}, {}, {}, {}
        self.fixtures, self.autouse = set(), []
        for node in self.tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.defs[node.name] = node
                kind = _is_fixture(node) if not isinstance(node, ast.ClassDef) else None
                if kind:
                    self.fixtures.add(node.name)
                    if kind == "autouse":
                        self.autouse.append(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    for n in ast.walk(t):
                        if isinstance(n, ast.Name):
                            self.assigns[n.id] = node
            elif isinstance(node, ast.Import):
                for a in node.names:
                    self.imports[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    self.from_imports[a.asname or a.name] = (node.module, a.name)

    def oracle_names(self):
        """The names this module gives lab/upstream_images.py and the functions of it that it imports."""
        mods = set(k for k, v in self.imports.items() if v == ORACLE)
        funcs = dict((k, v[1]) for k, v in self.from_imports.items() if v[0] == ORACLE)
        return mods, funcs


def _locals(fdef):
    """Names bound inside a function (its arguments, assignments, loops, withs, nested defs, imports)."""
    names = set()
    for node in ast.walk(fdef):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node is not fdef:
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update(a.asname or a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
    return names


def _args(fdef):
    a = fdef.args
    return [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]


class Found(object):
    """What a symbol uses: the uses nobody adapted to, those a function asking upstream_images took in, and
    whether the symbol itself asks."""

    def __init__(self):
        self.uses, self.adapted, self.asks = [], [], False


class Analysis(object):
    """The tests of one checkout (`root`); `sources` {path: text} reads a file as given instead (a crafted one)."""

    def __init__(self, root=ROOT, needles=None, sources=None):
        self.root = os.path.abspath(root)
        self.needles = needles or Needles(root)
        self.sources = dict((os.path.abspath(k), v) for k, v in (sources or {}).items())
        self.modules, self.cache, self.busy, self.cycles = {}, {}, set(), 0

    # -- files and names
    def module(self, path):
        path = os.path.abspath(path)
        if path not in self.modules:
            self.modules[path] = Module(path, os.path.relpath(path, self.root), self.sources.get(path))
        return self.modules[path]

    def find(self, name, near):
        """The file of module `name` imported from `near`: a sibling, tests/support or lab/ (the paths the
        tests put first); None for anything else (the standard library, docker, testinfra, pytest...)."""
        if name == ORACLE or "." in name:
            return None
        for d in (os.path.dirname(near.path), os.path.join(self.root, "tests", "support"), os.path.join(self.root, "lab")):
            path = os.path.abspath(os.path.join(d, name + ".py"))
            if path in self.sources or os.path.exists(path):
                return self.module(path)
        return None

    def conftests(self, module):
        d, out = os.path.dirname(module.path), []
        while d.startswith(self.root) and d != os.path.dirname(self.root):
            path = os.path.join(d, "conftest.py")
            if os.path.exists(path) and os.path.abspath(path) != module.path:
                out.append(self.module(path))
            if d == self.root:
                break
            d = os.path.dirname(d)
        return out

    def resolve(self, module, name):
        """(module, node) where `name` of `module` is defined in this checkout, or None."""
        if name in module.defs:
            return module, module.defs[name]
        if name in module.assigns:
            return module, module.assigns[name]
        if name in module.from_imports:
            mod, attr = module.from_imports[name]
            other = self.find(mod, module)
            return self.resolve(other, attr) if other else None
        return None

    def fixture(self, module, name):
        """The fixture `name` as pytest finds it for a test of `module`: its own file, what it imports, conftest.py."""
        got = self.resolve(module, name)
        if got and isinstance(got[1], (ast.FunctionDef, ast.AsyncFunctionDef)) and _is_fixture(got[1]):
            return got
        for c in self.conftests(module):
            if name in c.fixtures:
                return c, c.defs[name]
        return None

    # -- what a symbol uses
    def symbol(self, module, node, label):
        key = (module.path, id(node))
        if key in self.cache:
            return self.cache[key]
        if key in self.busy:   # a cycle: what it uses is counted where it started
            self.cycles += 1
            return Found()
        self.busy.add(key)
        cycles = self.cycles
        try:
            found = self.scan(module, node, label)
        finally:
            self.busy.discard(key)
        if self.cycles == cycles:   # complete (no cycle cut short): kept for every other way to it
            self.cache[key] = found
        return found

    def _strings(self, module, node, skip):
        for n in ast.walk(node):
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in module.docstrings \
                    and id(n) not in skip:
                yield n

    def _mark_nodes(self, module, fdef):
        """The decorators that are upstream_images marks (their strings are the mark, not a use)."""
        mods, funcs = module.oracle_names()
        out = []
        for d in getattr(fdef, "decorator_list", []):
            f = d.func if isinstance(d, ast.Call) else d
            if (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in mods and f.attr == MARK) \
                    or (isinstance(f, ast.Name) and funcs.get(f.id) == MARK):
                out.append(d)
        return out

    def scan(self, module, node, label):
        found = Found()
        mods, funcs = module.oracle_names()
        skip = set()
        for d in self._mark_nodes(module, node):
            skip.update(id(n) for n in ast.walk(d))
        local = _locals(node) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else set()
        for s in self._strings(module, node, skip):
            for tag, name, what in self.needles.match(s.value):
                found.uses.append(Use(tag, name, what, s.value, module.rel, s.lineno, []))
        refs = []
        for n in ast.walk(node):
            if id(n) in skip:
                continue
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in mods and n.attr in ASKS:
                found.asks = True
            elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and funcs.get(n.id) in ASKS:
                found.asks = True
            elif isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id not in local \
                    and n.value.id in module.imports:
                other = self.find(module.imports[n.value.id], module)
                if other:
                    refs.append((other, n.attr, "%s.%s" % (n.value.id, n.attr)))
            elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id not in local and n.id != label:
                refs.append((module, n.id, n.id))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for arg in _args(node):
                got = self.fixture(module, arg)
                if got:
                    refs.append((got[0], arg, arg))
        for d in getattr(node, "decorator_list", []):   # @pytest.mark.usefixtures("name")
            if isinstance(d, ast.Call) and (_dotted(d.func) or "").endswith("usefixtures"):
                for a in d.args:
                    if isinstance(a, ast.Constant) and isinstance(a.value, str):
                        got = self.fixture(module, a.value)
                        if got:
                            refs.append((got[0], a.value, a.value))
        seen = set()
        for mod, name, shown in refs:
            got = self.resolve(mod, name)
            if not got or (got[0].path, id(got[1])) in seen:
                continue
            seen.add((got[0].path, id(got[1])))
            sub = self.symbol(got[0], got[1], name)
            for u in sub.uses:
                found.uses.append(Use(u.tag, u.name, u.what, u.text, u.path, u.line, [shown] + u.via))
            for u in sub.adapted:
                found.adapted.append(Use(u.tag, u.name, u.what, u.text, u.path, u.line, [shown] + u.via))
        if found.asks:   # it asks what the lab has and takes each branch itself: what it and its callees use is its own
            found.adapted.extend(found.uses)
            found.uses = []
        return found


# ---------------------------------------------------------------- the tests and their marks

class LabTest(object):
    def __init__(self, nodeid, path, line):
        self.nodeid, self.path, self.line = nodeid, path, line
        self.marks = []          # tags of @upstream_images.needs, in order (module pytestmark, class, function)
        self.uses, self.adapted = [], []

    def needs(self):
        """{tag: [Use]} of what it uses that no function on the way adapted to."""
        out = {}
        for u in self.uses:
            out.setdefault(u.tag, []).append(u)
        return out

    def problems(self):
        out = []
        for tag, uses in sorted(self.needs().items()):
            if tag not in self.marks:
                out.append("%s uses %s without @upstream_images.needs(%r) - mark it, or ask upstream_images.reason(%r) "
                           "and take both branches; first use: %s" % (self.nodeid, tag, tag, tag, uses[0]))
        used = set(u.tag for u in self.uses + self.adapted)
        for tag in sorted(set(self.marks)):
            if tag not in used:
                out.append("%s is marked @upstream_images.needs(%r) but uses nothing of it: the mark would hide it "
                           "from a plain clone" % (self.nodeid, tag))
            if self.marks.count(tag) > 1:
                out.append("%s is marked @upstream_images.needs(%r) %d times (a mark meant for another test?)"
                           % (self.nodeid, tag, self.marks.count(tag)))
        return out


def _mark_tags(analysis, module, decorators_of):
    tags = []
    for d in analysis._mark_nodes(module, decorators_of):
        arg = d.args[0] if isinstance(d, ast.Call) and d.args else None
        if isinstance(arg, ast.Name):
            got = analysis.resolve(module, arg.id)
            arg = got[1].value if got and isinstance(got[1], ast.Assign) else arg
        if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
            raise ValueError("%s:%d: the mark's tag must be a string (a tag of upstream_images.NEEDED_BY)"
                             % (module.rel, d.lineno))
        tags.append(arg.value)
    return tags


def _module_marks(analysis, module, body):
    """pytestmark = upstream_images.needs(...) or a list of marks, at module or class level."""
    for node in body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            values = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
            holder = ast.FunctionDef(name="pytestmark", args=None, body=[], decorator_list=values)
            return _mark_tags(analysis, module, holder)
    return []


def tests_of(path, analysis):
    """Every test function of one file (and of its Test* classes), with its marks and what it uses."""
    module = analysis.module(path)
    rel = module.rel
    module_marks = _module_marks(analysis, module, module.tree.body)
    autouse = [analysis.fixture(module, n) for n in module.autouse]
    for c in analysis.conftests(module):
        autouse.extend((c, c.defs[n]) for n in c.autouse)
    items = []
    for node in module.tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            items.append((node, node.name, [], None))
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            cls_marks = _mark_tags(analysis, module, node) + _module_marks(analysis, module, node.body)
            for sub in node.body:
                if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)) and sub.name.startswith("test"):
                    items.append((sub, "%s::%s" % (node.name, sub.name), cls_marks, node))
    out = []
    for fdef, name, cls_marks, cls in items:
        t = LabTest("%s::%s" % (rel, name), rel, fdef.lineno)
        t.marks = module_marks + cls_marks + _mark_tags(analysis, module, fdef)
        found = analysis.symbol(module, fdef, fdef.name)
        t.uses, t.adapted = list(found.uses), list(found.adapted)
        for got in autouse:
            if got:
                sub = analysis.symbol(got[0], got[1], got[1].name)
                t.uses += sub.uses
                t.adapted += sub.adapted
        out.append(t)
    return out


def analyse(root=ROOT, files=None, needles=None, sources=None):
    analysis = Analysis(root, needles, sources)
    out = []
    for path in files or lab_test_files(root):
        out.extend(tests_of(path, analysis))
    return out


def problems(tests):
    return [p for t in tests for p in t.problems()]


# ---------------------------------------------------------------- the plain path: collection and skip decisions

def hidden_env(tmp):
    """The environment of a plain clone's tests: the upstream images hidden (upstream_images.HIDE), and what
    Molecule's verifier would set, pointing nowhere (collection and skip decisions read no inventory)."""
    os.makedirs(os.path.join(tmp, "inventory"), exist_ok=True)
    return dict(os.environ, **{upstream_images.HIDE: "1", "MOLECULE_INVENTORY_FILE": os.path.join(tmp, "inventory", "hosts"),
                               "PY_COLORS": "0"})


# a pytest plugin (-p image_bound_plugin) that writes what pytest did with each test: its setup (skipped, with the
# reason, or not) and its call (passed or failed)
PLUGIN = """import json, os
def pytest_collection_modifyitems(config, items):
    only = os.environ.get("IMAGE_BOUND_ONLY")
    if only:
        keep = set(json.loads(only))
        chosen = [i for i in items if "%s::%s" % (os.path.basename(str(i.fspath)), i.originalname) in keep]
        config.hook.pytest_deselected(items=[i for i in items if i not in chosen])
        items[:] = chosen
def pytest_runtest_logreport(report):
    reason = report.longrepr[2] if report.skipped and isinstance(report.longrepr, tuple) else None
    with open(os.environ["IMAGE_BOUND_DECISIONS"], "a") as f:
        f.write(json.dumps([report.nodeid, report.when, report.outcome, reason]) + "\\n")
"""


def plugin_env(env, tmp, record):
    with open(os.path.join(tmp, "image_bound_plugin.py"), "w") as f:
        f.write(PLUGIN)
    return dict(env, IMAGE_BOUND_DECISIONS=record, PYTHONPATH=os.pathsep.join(filter(None, [tmp, env.get("PYTHONPATH")])))


def reports(record):
    with open(record) as f:
        return [json.loads(line) for line in f]


def decisions(root, directory, env, tmp):
    """{file::function: skip reason or None} as pytest decides, without running a test (--setup-plan: the skip
    marks are evaluated, no fixture and no test body runs); the parametrized cases of one function together.
    Also pytest's last line."""
    record = os.path.join(tmp, "decisions.jsonl")
    if os.path.exists(record):
        os.unlink(record)
    env = plugin_env(env, tmp, record)
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "image_bound_plugin",
                          "--rootdir", root, "--setup-plan", "-rs", directory], cwd=root, env=env, capture_output=True,
                         text=True, timeout=600, check=False)
    if out.returncode != 0 or not os.path.exists(record):
        raise AssertionError("pytest --setup-plan %s: exit %d\n%s%s" % (directory, out.returncode, out.stdout[-3000:],
                                                                        out.stderr[-3000:]))
    got = {}
    for nodeid, when, outcome, reason in reports(record):
        if outcome == "failed":
            raise AssertionError("%s: its %s failed under --setup-plan\n%s" % (nodeid, when, out.stdout[-3000:]))
        if when != "setup":
            continue
        node = nodeid.split("[")[0]
        if node in got and got[node] != reason:
            raise AssertionError("%s: its cases were decided differently (%r, %r)" % (node, got[node], reason))
        got[node] = reason
    return got, out.stdout.strip().splitlines()[-1:]


def plain(root=ROOT, needles=None):
    """With the upstream images hidden: each test directory's collection and skip decisions against the analysis.
    Every test marked for a part is skipped with a reason that names each image of it; every other test is
    collected and not skipped. Returns the lines to print and the problems."""
    tests = dict((t.nodeid, t) for t in analyse(root, needles=needles))
    lines, bad, decided = [], [], {}
    with tempfile.TemporaryDirectory() as tmp:
        env = hidden_env(tmp)
        for d in sorted(set(os.path.dirname(os.path.join(root, t.path)) for t in tests.values())):
            got, summary = decisions(root, d, env, tmp)
            decided.update(got)
            lines.append("%s: %s" % (os.path.relpath(d, root), " ".join(summary)))
    for nodeid, t in sorted(tests.items()):
        if nodeid not in decided:
            bad.append("%s: not collected" % nodeid)
            continue
        reason = decided[nodeid]
        if t.marks:
            images = [upstream_images.image(n) for tag in t.marks for n in upstream_images.NEEDED_BY[tag]]
            if reason is None:
                bad.append("%s: marked for %s but not skipped with the images hidden" % (nodeid, ", ".join(t.marks)))
            elif not all(i in reason for i in images):
                bad.append("%s: skipped, but its reason does not name %s: %s" % (nodeid, ", ".join(images), reason))
        elif reason is not None and (upstream_images.SKIP_PREFIX in reason or
                                     any(upstream_images.image(n) in reason for ns in upstream_images.NEEDED_BY.values()
                                         for n in ns)):
            bad.append("%s: not marked, yet skipped for an upstream image: %s" % (nodeid, reason))
        elif reason is not None:
            lines.append("%s: skipped for another reason (not this check's): %s" % (nodeid, reason))
    for nodeid in sorted(set(decided) - set(tests)):
        bad.append("%s: collected by pytest but not read by the analysis" % nodeid)
    marked = sum(1 for t in tests.values() if t.marks)
    lines.append("%d tests: %d skipped for a hidden image, each reason naming it; %d collected, none of them skipped "
                 "for an image" % (len(tests), marked, len(tests) - marked))
    return lines, bad


def chosen(root, scenario):
    """The tests of a scenario the plain path runs: {file::function: "marked" or "adapts"}; the marked ones must
    be skipped naming the images, the ones that adapt must pass on their branch for a lab without them."""
    files = sorted(glob.glob(os.path.join(root, "molecule", scenario, "tests", "test_*.py")))
    return dict(("%s::%s" % (os.path.basename(t.path), t.nodeid.rsplit("::", 1)[1]), "marked" if t.marks else "adapts")
                for t in analyse(root, files) if t.marks or t.adapted)


def verified(record, choice):
    """Problems of a verifier's run on `choice` (chosen()), from the plugin's record."""
    bad, seen = [], {}
    for nodeid, when, outcome, reason in reports(record):
        key = "%s::%s" % (os.path.basename(nodeid.split("::")[0]), nodeid.split("::")[-1].split("[")[0])
        seen.setdefault(key, []).append((nodeid, when, outcome, reason))
    for key, kind in sorted(choice.items()):
        got = seen.pop(key, [])
        if not got:
            bad.append("%s (%s): did not run" % (key, kind))
        for nodeid, when, outcome, reason in got:
            if kind == "marked" and when == "setup" and outcome != "skipped":
                bad.append("%s: marked, but not skipped with the images hidden (%s)" % (nodeid, outcome))
            elif kind == "marked" and outcome == "skipped" and not all(
                    upstream_images.image(n) in (reason or "") for ns in upstream_images.NEEDED_BY.values() for n in ns):
                bad.append("%s: skipped, but its reason does not name the images: %s" % (nodeid, reason))
            elif kind == "adapts" and outcome != "passed":
                bad.append("%s: adapts to the lab, but its %s %s without the images%s" % (
                    nodeid, when, outcome, (": " + reason) if reason else ""))
    for key in sorted(seen):
        bad.append("%s: ran, but was not chosen" % key)
    return bad


def hosts_holding(root, scenario, images):
    """The lab hosts of `scenario` (lab/hosts.py's label, named in its create.yml) whose own engine holds any of
    `images`: {host: [image]}. A plain clone's hosts get none of them."""
    import hosts
    with open(os.path.join(root, "molecule", scenario, "create.yml")) as f:
        create = f.read()
    names = subprocess.run(["docker", "ps", "--filter", "label=%s" % hosts.LABEL, "--format", "{{.Names}}"],
                           capture_output=True, text=True, check=False).stdout.split()
    out = {}
    for name in (n for n in names if re.search(r"\b%s\b" % re.escape(n), create)):
        held = [i for i in images if subprocess.run(["docker", "exec", name, "docker", "image", "inspect", i],
                                                    capture_output=True, check=False).returncode == 0]
        if held:
            out[name] = held
    return out


def scenario_plain(scenario, root=ROOT):
    """Molecule `scenario` as a plain clone runs it, on a machine that has the upstream images: hidden, the
    site's parts that need them skipped by tag; create, prepare and converge, the verifier on the tests that
    are marked (each skipped, naming the images) or adapt (each passes), then destroy. Returns the problems."""
    import fcntl
    choice = chosen(root, scenario)
    if not choice:
        return ["molecule/%s has no test that is marked or adapts: nothing to run plain" % scenario]
    os.makedirs(os.path.join(root, "tests", "output"), exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, open(os.path.join(root, "tests", "output", ".molecule-%s.lock" % scenario),
                                                    "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)   # tests/run.sh's scenario() runs it under the same lock: one at a time
        record = os.path.join(tmp, "verify.jsonl")
        env = plugin_env(dict(os.environ, **{upstream_images.HIDE: "1"}), tmp, record)
        env.setdefault("HOMELAB_EDGE_CACHE", upstream_images.CACHE)   # the scenarios' inventories name the lab's key there
        env["ANSIBLE_SKIP_TAGS"] = ",".join(filter(None, [env.get("ANSIBLE_SKIP_TAGS")] + sorted(upstream_images.NEEDED_BY)))
        env["PYTEST_ADDOPTS"] = "-p image_bound_plugin"
        env["IMAGE_BOUND_ONLY"] = json.dumps(sorted(choice))
        print("plain %s: %d tests chosen (%s)" % (scenario, len(choice), ", ".join(
            "%d %s" % (list(choice.values()).count(k), k) for k in ("marked", "adapts"))), flush=True)
        bad, t0 = [], time.time()
        try:
            for action in ("converge", "verify"):
                t = time.time()
                rc = subprocess.run(["molecule", action, "-s", scenario], cwd=root, env=env, check=False).returncode
                print("plain %s: molecule %s exit %d (%d s)" % (scenario, action, rc, time.time() - t), flush=True)
                if rc != 0:
                    bad.append("molecule %s -s %s with the images hidden: exit %d" % (action, scenario, rc))
                    break
                if action == "converge":
                    hidden = [upstream_images.image(n) for ns in upstream_images.NEEDED_BY.values() for n in ns]
                    for host, held in sorted(hosts_holding(root, scenario, hidden).items()):
                        bad.append("%s holds %s although hidden: not a plain clone's host" % (host, ", ".join(held)))
        finally:
            t = time.time()
            subprocess.run(["molecule", "destroy", "-s", scenario], cwd=root, env=env, check=False,
                           stdout=subprocess.DEVNULL)
            print("plain %s: molecule destroy (%d s); %d s in all" % (scenario, time.time() - t, time.time() - t0),
                  flush=True)
        if not bad or os.path.exists(record):
            bad += verified(record, choice) if os.path.exists(record) else ["the verifier recorded nothing"]
    return bad


def main(argv):
    if argv[1:2] == ["plain"]:
        lines, bad = plain()
        print("\n".join(lines + bad))
        return 1 if bad else 0
    if argv[1:2] == ["scenario"] and len(argv) == 3:
        bad = scenario_plain(argv[2])
        print("\n".join(bad) if bad else "plain %s: every marked test skipped naming its images, every test that "
                                          "adapts passed" % argv[2])
        return 1 if bad else 0
    if argv[1:]:
        sys.stderr.write(__doc__)
        return 2
    tests = analyse()
    for t in tests:
        if t.marks or t.uses or t.adapted:
            state = "marked %s" % ",".join(t.marks) if t.marks else ("adapts" if t.adapted and not t.uses else "UNMARKED")
            first = (t.uses or t.adapted)[0] if (t.uses or t.adapted) else None
            print("%s: %s; %s" % (t.nodeid, state, first or "uses nothing of it"))
    bad = problems(tests)
    print("\n".join(bad) if bad else "every image-bound test is marked or adapts (%d tests read)" % len(tests))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
