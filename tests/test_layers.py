"""The packages import downwards only: what a node is does not depend on the runtimes.

``skfedclust.node`` (the step contract, the policy, the gate, the ledger and the
DP budget) imports nothing of the package outside itself, and the in-process
runtime (``skfedclust.federation``) nothing but the node and the partition
specs; function-level imports count, since that is where a cycle hides.
"""

import ast
from pathlib import Path

import pytest

import skfedclust

ROOT = Path(skfedclust.__file__).parent

#: Each package and the package's subpackages and modules it may import.
ALLOWED = {
    "node": {"node"},
    "federation": {"node", "federation", "partition"},
}


def _imported(path, root=ROOT):
    """The first-level names of the package that ``path`` imports (relative or absolute)."""
    parts = path.relative_to(root).parts[:-1]
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = list(parts[: len(parts) - (node.level - 1)])
            target = base + (node.module.split(".") if node.module else [])
            if target:
                names.add(target[0])
            else:
                names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("skfedclust"):
            names.add((node.module.split(".") + [""])[1] or "(top)")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("skfedclust"):
                    names.add((alias.name.split(".") + [""])[1] or "(top)")
    return names


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_a_package_imports_only_what_lies_below_it(package):
    outside = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        extra = _imported(path) - ALLOWED[package]
        if extra:
            outside[str(path.relative_to(ROOT))] = sorted(extra)
    assert not outside, outside


def test_the_check_sees_an_upward_import_inside_a_function(tmp_path):
    (tmp_path / "node").mkdir()
    module = tmp_path / "node" / "_probe.py"
    module.write_text(
        "from ._policy import NodePolicy\n"
        "def f():\n    from ..methods import KFed\n    import skfedclust\n"
        "    from skfedclust.flower import fit_on_flower\n"
    )
    assert _imported(module, root=tmp_path) == {"node", "methods", "(top)", "flower"}
