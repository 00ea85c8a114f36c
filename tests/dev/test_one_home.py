"""The one-home checks of tests/unit/test_one_home.py on what only the
checkout has: Molecule's clean-up removes the keeper's config where the
module writes it, the demo repeats neither it nor the render timeout, and
the alerts' runbook_url is a page (or a heading of one) under galaxy.yml's repository's docs/."""
import glob
import os
import re

import yaml

from ansible_collections.homelab.edge.plugins.filter import runbook
from ansible_collections.homelab.edge.plugins.module_utils.k3d_serverlb import fix as k3d_fix

from .conftest import ROOT


def test_the_demo_and_molecule_take_the_keeper_config_and_render_timeout_from_their_home():
    with open(os.path.join(ROOT, "molecule", "default", "destroy.yml")) as f:
        assert k3d_fix.KEEPER_CONFIG in f.read()
    literal = re.compile(r"render_timeout=\d|/etc/homelab-edge/k3d-serverlb\.json")
    with open(os.path.join(ROOT, "demo", "demo.py")) as f:
        found = [m.group(0) for m in literal.finditer(f.read())]
    assert found == [], "demo/demo.py repeats %s" % found


def github_anchor(heading):
    """The anchor GitHub gives a Markdown heading: lower case, punctuation dropped, spaces as dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_alerts_runbook_url_is_a_published_docs_page_or_heading():
    with open(os.path.join(ROOT, "galaxy.yml")) as f:
        assert runbook.DOCS_URL == yaml.safe_load(f)["repository"] + "/blob/main/docs/"
    used = set()
    for template in glob.glob(os.path.join(ROOT, "roles", "*", "templates", "prometheus-rules.yml.j2")):
        with open(template) as f:
            text = f.read()
        # every alert has one
        assert text.count("- alert: ") == text.count("| homelab.edge.runbook_url }}"), template
        used |= set(re.findall(r"'([^']+)' \| homelab\.edge\.runbook_url", text))
    assert used
    for section in used:
        page, dummy, anchor = section.partition("#")
        with open(os.path.join(ROOT, "docs", page)) as f:  # the page ships in the repository
            headings = {github_anchor(m.group(1)) for m in re.finditer(r"^#+ (.+)$", f.read(), re.M)}
        assert not anchor or anchor in headings, section
