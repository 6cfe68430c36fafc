"""Why each never-run line of the package does not run under the README's test command.

Reviewed by hand; ``coverage_report.py`` applies it to a coverage run and fails when a
never-run line has no reason or a reason matches no never-run line.

Each entry names a ``module`` (a path, or an ``fnmatch`` pattern of paths), a ``scope``
(the qualified name of the innermost function or class holding the lines, ``<module>`` for
module-level code, or an ``fnmatch`` pattern such as ``*`` or ``*.__repr__``), optionally a
``block`` (text of the first line of a run of never-run lines, such as ``"raise "``), a
``category`` of :data:`CATEGORIES` and an optional ``note``. The most specific matching
entry wins: the scope that names the most (``*`` names nothing), then the longest
``block``, then an exact module before a pattern, then the first listed.

The category ``untested`` is the work left: lines that can run and have no test yet.
"""

CATEGORIES = {
    "numba": (
        "numba-compiled kernel: the tests call it compiled, where line coverage does not "
        "see; its NumPy twin runs the same operations and is tested bit-identical to it"
    ),
    "deployment": (
        "deployment path of a Flower node or server (a node that drops out, refuses, reads "
        "or writes files, or errs): the in-process Flower tests do not reach it; the "
        "`deployment` test step (`pytest -m deployment`) runs real SuperNodes"
    ),
    "hostile": (
        "check against a malformed or hostile message of another party: honest parties "
        "never send one, and no test forges this one"
    ),
    "argument": (
        "check of a caller's argument, data or configuration: no test passes this bad value"
    ),
    "defensive": "defensive error for a state the package's own code cannot produce",
    "fallback": (
        "fallback for a failure of a library call (a singular matrix, ARPACK not "
        "converging, an object that cannot be digested) that no test's data triggers"
    ),
    "platform": (
        "platform-specific: runs where the C library, `/proc` or the cgroup files differ "
        "from the test machine's (not glibc, Windows, cgroup v1, no limit set)"
    ),
    "optional": (
        "optional dependency missing: runs only without the `flower` extra (flwr), which "
        "the test suite installs"
    ),
    "abstract": "abstract method of a base class: every runtime overrides it",
    "entry": ("command-line entry point (`python -m ...`): the tests call its `main` in-process"),
    "untested": "reachable, but no test runs it yet (work left)",
}

_FLOWER = "skfedclust/flower/*.py"

REASONS = [
    # -- compiled kernels --------------------------------------------------------------
    {
        "module": "skfedclust/secure/_kernels.py",
        "scope": "_*_compiled",
        "category": "numba",
        "note": "tests/test_kernels.py.",
    },
    {
        "module": "skfedclust/secure/_kernels.py",
        "scope": "_reduced",
        "category": "numba",
        "note": "a helper of the compiled kernels; tests/test_kernels.py.",
    },
    {
        "module": "skfedclust/secure/_kernels.py",
        "scope": "_canonical",
        "category": "numba",
        "note": "a helper of the compiled kernels; tests/test_kernels.py.",
    },
    {
        "module": "skfedclust/clusterers/_cpl.py",
        "scope": "_competition_pass_loops",
        "category": "numba",
        "note": "`_competition_pass_numpy`, tests/test_clusterers_cpl.py (engine fixture).",
    },
    {
        "module": "skfedclust/clusterers/_cpl.py",
        "scope": "_log_sigmoid_scalar",
        "category": "numba",
        "note": "compiled into `_competition_pass_loops`; tests/test_clusterers_cpl.py.",
    },
    {
        "module": "skfedclust/methods/_lloyd_pass.py",
        "scope": "_lloyd_pass_loops",
        "category": "numba",
        "note": "`_lloyd_pass_numpy`, tests/test_fedkmeans.py (pass_engine fixture).",
    },
    # -- Flower ------------------------------------------------------------------------
    {"module": _FLOWER, "scope": "<module>", "block": "except ImportError", "category": "optional"},
    {"module": "skfedclust/flower/_wire.py", "scope": "require_flwr", "category": "optional"},
    {"module": _FLOWER, "scope": "*", "block": "raise ", "category": "hostile"},
    {"module": _FLOWER, "scope": "*", "block": "except ", "category": "hostile"},
    {
        "module": "skfedclust/flower/_runtime.py",
        "scope": "FlowerRuntime._check_reply",
        "block": "fail(",
        "category": "hostile",
    },
    {
        "module": "skfedclust/flower/_client.py",
        "scope": "_Service.step",
        "block": "raise RuntimeError",
        "category": "defensive",
        "note": "the server sends a node only steps of its own party, after the handshake.",
    },
    {
        "module": _FLOWER,
        "scope": "*",
        "block": "raise ValueError",
        "category": "argument",
        "note": "a node's configuration or a caller's argument.",
    },
    {"module": "skfedclust/flower/_runtime.py", "scope": "*", "category": "deployment"},
    {"module": "skfedclust/flower/_fit.py", "scope": "*", "category": "deployment"},
    {"module": "skfedclust/flower/_client.py", "scope": "*", "category": "deployment"},
    {
        "module": "skfedclust/flower/_step_worker.py",
        "scope": "_worker_connection",
        "block": "return connection",
        "category": "deployment",
        "note": "a worker another ClientApp process of the node started while this one "
        "waited for the lock (two messages of one node at once).",
    },
    {"module": _FLOWER, "scope": "*.__repr__", "category": "untested"},
    {"module": "skfedclust/flower/__main__.py", "scope": "<module>", "category": "entry"},
    # -- secure sums (hostile clients and servers) -------------------------------------
    {
        "module": "skfedclust/secure/_sum_guard.py",
        "scope": "*",
        "block": "raise SumRefusal",
        "category": "hostile",
    },
    {
        "module": "skfedclust/secure/_secure_sum.py",
        "scope": "_received_shares",
        "category": "hostile",
    },
    {
        "module": "skfedclust/secure/_secure_sum.py",
        "scope": "secure_sum_unmask_step",
        "category": "hostile",
    },
    {
        "module": "skfedclust/secure/_secure_sum.py",
        "scope": "secure_sum_upload_step",
        "category": "hostile",
    },
    {"module": "skfedclust/secure/_secure_sum.py", "scope": "unmask_sum", "category": "hostile"},
    {
        "module": "skfedclust/secure/_sampling.py",
        "scope": "*",
        "block": "raise PermissionError",
        "category": "hostile",
    },
    # -- platform ----------------------------------------------------------------------
    {"module": "skfedclust/clusterers/_memory.py", "scope": "*", "category": "platform"},
    {
        "module": "skfedclust/clusterers/_memory.py",
        "scope": "*",
        "block": "except ",
        "category": "platform",
    },
    {
        "module": "skfedclust/utils/_step_audit.py",
        "scope": "_flower_importable",
        "category": "optional",
    },
    # -- base classes and defensive errors -----------------------------------------------
    {"module": "skfedclust/federation/_runtime.py", "scope": "Runtime.run", "category": "abstract"},
    {
        "module": "skfedclust/federation/_runtime.py",
        "scope": "Runtime.send",
        "category": "abstract",
    },
    {
        "module": "skfedclust/federation/_runtime.py",
        "scope": "Runtime.hand_back",
        "category": "abstract",
    },
    {
        "module": "skfedclust/*.py",
        "scope": "*",
        "block": "raise RuntimeError",
        "category": "defensive",
    },
    # -- the rest, module by module ------------------------------------------------------
    {"module": "skfedclust/*.py", "scope": "*", "block": "raise ", "category": "argument"},
    {"module": "skfedclust/*.py", "scope": "*", "block": "except ", "category": "fallback"},
    {"module": "skfedclust/*.py", "scope": "*.__repr__", "category": "untested"},
]

#: Modules whose other never-run lines (edge cases of the data, options no test picks)
#: are work left: a module missing here fails the report when a line of it stops running.
_UNTESTED = [
    "_cli.py",
    "clusterers/_centroids.py",
    "clusterers/_cpl.py",
    "clusterers/_njw.py",
    "clusterers/_precomputed.py",
    "clusterers/_remc.py",
    "federation/_federation.py",
    "federation/_inputs.py",
    "federation/_ledger.py",
    "federation/_node_ledger.py",
    "federation/_policy.py",
    "federation/_runtime.py",
    "metrics.py",
    "methods/_base.py",
    "methods/_centroid_steps.py",
    "methods/_dc.py",
    "methods/_dc_analyst.py",
    "methods/_fedkmeans.py",
    "methods/_fedkmeans_dp.py",
    "methods/_fedsc_core.py",
    "methods/_fedsc_hyperparameters.py",
    "methods/_fedsc_steps.py",
    "methods/_kfed.py",
    "methods/_omnifc_cluster.py",
    "partition.py",
    "preprocessing.py",
    "node/_accounting.py",
    "secure/_field.py",
    "secure/_lcc.py",
    "secure/_lcc_sinks.py",
    "secure/_node_dp.py",
    "secure/_secure_sum.py",
    "secure/_sum_bounds.py",
    "secure/_sum_guard.py",
    "utils/_step_audit.py",
]
REASONS += [
    {"module": f"skfedclust/{name}", "scope": "*", "category": "untested"} for name in _UNTESTED
]
