"""Install the k3d keeper as the homelab.edge.k3d_serverlb role does: the script, and beside it the files of
plugins/module_utils that roles/k3d_serverlb/vars/main.yml names (k3d_serverlb_keeper_library), under
module_utils/ - the one list of what the keeper needs on a host. The lab and Molecule tests run the keeper from
such a copy (and a unit test, test_k3d_serverlb.py, from its own), so a file missing from the list fails there."""
import os
import shutil

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
KEEPER = os.path.join(ROOT, "roles", "k3d_serverlb", "files", "k3d-serverlb-keeper.py")


def library():
    with open(os.path.join(ROOT, "roles", "k3d_serverlb", "vars", "main.yml")) as f:
        return yaml.safe_load(f)["k3d_serverlb_keeper_library"]


def install(dest):
    """Copy the keeper and its library into `dest`; returns the keeper's path there."""
    for name in library():
        target = os.path.join(dest, "module_utils", name)
        if not os.path.isdir(os.path.dirname(target)):
            os.makedirs(os.path.dirname(target))
        shutil.copy(os.path.join(ROOT, "plugins", "module_utils", name), target)
    shutil.copy(KEEPER, dest)
    return os.path.join(dest, os.path.basename(KEEPER))
