"""The README's "Included content" list is the collection's content: every module,
role, playbook and filter, one line each, with the short_description of its own
docs (a module's DOCUMENTATION, a role's meta/argument_specs.yml, a filter's .yml);
and every page under docs/ is one link away from the README."""
import ast
import glob
import os
import re

import pytest
import yaml

from .conftest import ROOT

ENTRY = re.compile(r"^- `homelab\.edge\.([a-z0-9_]+)`: (.+)$")


def readme():
    with open(os.path.join(ROOT, "README.md")) as f:
        return f.read()


def included():
    """{kind: {name: description}} as the README lists them ("Modules:", then its lines)."""
    section = readme().split("\n## Included content\n", 1)[1].split("\n## ", 1)[0]
    listed, kind = {}, None
    for line in section.splitlines():
        if re.match(r"^[A-Z][a-z]+:$", line):
            kind = line[:-1].lower()
            listed[kind] = {}
        elif line.startswith("- "):
            m = ENTRY.match(line)
            assert m and kind, "not an entry of the list: %s" % line
            assert m.group(1) not in listed[kind], "listed twice: %s" % line
            listed[kind][m.group(1)] = m.group(2)
    return listed


def module_doc(path):
    for node in ast.parse(open(path).read()).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "DOCUMENTATION":
            return yaml.safe_load(node.value.value)
    raise AssertionError("%s has no DOCUMENTATION" % path)


def content():
    """{kind: {name: short_description or None}} from the collection's own files."""
    modules = {}
    for path in glob.glob(os.path.join(ROOT, "plugins", "modules", "*.py")):
        if not os.path.basename(path).startswith("_"):
            doc = module_doc(path)
            modules[doc["module"]] = doc["short_description"]
    roles = {}
    for path in glob.glob(os.path.join(ROOT, "roles", "*", "meta", "argument_specs.yml")):
        with open(path) as f:
            roles[path.split(os.sep)[-3]] = yaml.safe_load(f)["argument_specs"]["main"]["short_description"]
    filters = {}
    for path in glob.glob(os.path.join(ROOT, "plugins", "filter", "*.yml")):
        with open(path) as f:
            doc = yaml.safe_load(f)["DOCUMENTATION"]
        filters[doc["name"]] = doc["short_description"]
    playbooks = dict((os.path.basename(p)[:-len(".yml")], None)
                     for p in glob.glob(os.path.join(ROOT, "playbooks", "*.yml")))
    return {"modules": modules, "roles": roles, "playbooks": playbooks, "filters": filters}


def test_the_collection_has_content_of_each_kind():
    assert all(content().values()), content()


@pytest.mark.parametrize("kind", ["modules", "roles", "playbooks", "filters"])
def test_included_content_lists_each_one_with_its_short_description(kind):
    listed, have = included().get(kind, {}), content()[kind]
    assert sorted(set(have) - set(listed)) == [], "the README's Included content lacks these %s" % kind
    assert sorted(set(listed) - set(have)) == [], "the README's Included content names %s that do not exist" % kind
    for name, description in have.items():
        if description is not None:
            assert " ".join(description.split()) == listed[name], \
                "%s: the README says %r, its docs %r" % (name, listed[name], description)


def test_every_docs_page_is_one_link_from_the_readme_and_every_local_link_resolves():
    text = readme()
    targets = set()
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if "://" not in target:
            assert os.path.exists(os.path.join(ROOT, target)), "README links to %s, which is not there" % target
            targets.add(os.path.normpath(target))
    pages = [os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md"))]
    assert pages and sorted(set(pages) - targets) == [], "docs pages the README does not link to"
