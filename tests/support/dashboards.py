"""The roles' Grafana dashboards (roles/*/files/grafana-dashboard.json): their
panels' PromQL, for the checks of their shape (tests/dev) and of their data
(the lab's Prometheus, molecule/default)."""
import glob
import json
import os

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def files():
    return sorted(glob.glob(os.path.join(ROOT, "roles", "*", "files", "grafana-dashboard.json")))


def load(path):
    with open(path) as f:
        return json.load(f)


def queries(dashboard):
    """[(panel title, refId, expr)] of every panel's every target."""
    return [(p["title"], t["refId"], t["expr"]) for p in dashboard["panels"] for t in p.get("targets", [])]
