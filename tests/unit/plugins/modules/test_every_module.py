"""Every module has its test file here, and that file holds its documentation against its argument spec."""
import glob
import os

import pytest

from ...conftest import ROOT

MODULES = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, "plugins", "modules", "*.py"))
                 if not os.path.basename(p).startswith("_"))


@pytest.mark.parametrize("name", MODULES)
def test_the_module_has_a_test_file_that_checks_its_documentation(name):
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "test_%s.py" % name)
    assert os.path.isfile(path), "no %s" % os.path.relpath(path, ROOT)
    with open(path) as f:
        assert "assert_documented_as_specified(" in f.read()
