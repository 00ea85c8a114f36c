"""Make the collection importable as ansible_collections.homelab.edge."""
import os
import sys
import types

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")

for name, path in (("ansible_collections", None), ("ansible_collections.homelab", None),
                   ("ansible_collections.homelab.edge", ROOT)):
    if name not in sys.modules:
        mod = types.ModuleType(name)
        mod.__path__ = [path] if path else []
        sys.modules[name] = mod


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as f:
        return f.read()
