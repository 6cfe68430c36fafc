"""The packages import downwards only: what a node is does not depend on the runtimes.

``skfedclust.node`` (the step contract, the policy, the gate, the ledger and the
DP budget) imports nothing of the package outside itself, and the in-process
runtime (``skfedclust.federation``) nothing but the node and the partition
specs; function-level imports count, since that is where a cycle hides.
"""

import ast
from pathlib import Path

import skfedclust

ROOT = Path(skfedclust.__file__).parent

#: The layers, lowest first: a package imports only packages of lower layers. The
#: node and the building blocks at the bottom, the runtime above the node, the
#: privacy primitives (runtime operations) above it, then what federates data, the
#: methods, and the tools over all of them.
LAYERS = [
    {"node", "clusterers", "partition", "datasets"},
    {"federation"},
    {"secure"},
    {"preprocessing", "metrics"},
    {"methods"},
    {"utils", "flower"},
    {"model_selection", "_cli"},
    {"__main__"},
]
RANK = {name: rank for rank, layer in enumerate(LAYERS) for name in layer}
#: The package root holds only its version and lazy names.
ROOT_NAMES = {"(top)", "__version__"}


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


def _modules():
    for path in sorted(ROOT.rglob("*.py")):
        relative = path.relative_to(ROOT)
        if relative.parts == ("__init__.py",):
            continue
        yield (relative.parts[0] if len(relative.parts) > 1 else relative.stem), path


def test_every_package_has_a_layer():
    assert {package for package, _ in _modules()} <= set(RANK)


def test_a_package_imports_only_what_lies_below_it():
    upward = {}
    for package, path in _modules():
        for target in _imported(path) - {package}:
            # The tools over every method read the package's names from its root.
            if target in ROOT_NAMES and RANK[package] >= RANK["utils"]:
                continue
            if target in ROOT_NAMES or RANK.get(target, len(LAYERS)) >= RANK[package]:
                upward.setdefault(str(path.relative_to(ROOT)), []).append(target)
    assert not upward, upward


def test_the_node_imports_nothing_of_the_package_outside_itself():
    outside = {
        str(path.relative_to(ROOT)): sorted(_imported(path) - {"node"})
        for package, path in _modules()
        if package == "node" and _imported(path) - {"node"}
    }
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
