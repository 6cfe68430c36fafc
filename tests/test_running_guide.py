"""examples/flower_app/RUNNING.md, run as written: its commands, in order, in their terminals.

The guide's convention: every ``bash`` block is preceded by a comment
``<!-- run: id=NAME terminal=N [keeps-running] [long] -->`` and starts with the
line ``# Terminal N``. :func:`guide_blocks` reads them; :func:`run_guide` runs
them in order. A terminal is a shell session: a block runs in the folder and
with the environment (an activated venv, say) the terminal's previous block
left, and a terminal no earlier block used opens in the home folder with a
fresh environment. A ``keeps-running`` block is started in the background
(a SuperLink, a SuperNode) and stopped at the end, with what it started.
After each block the test checks what it wrote or printed.

What the test changes, and why (nothing else):

* ``HOME`` is a folder of the test's own, so ``~/.flwr``,
  ``~/skfedclust-flower-data`` and ``~/skfedclust-flower-output`` are the
  test's; ``FLWR_HOME``, ``VIRTUAL_ENV``, ``SKFEDCLUST_STATE_DIR`` and
  ``XDG_STATE_HOME`` are unset, and the ``PATH`` holds no virtual
  environment, as on a bare machine. ``~/skfedclust`` is this repository
  (links to its files, without its ``.venv``).
* The install block: ``python3 -m venv .venv`` and
  ``source .venv/bin/activate`` run as written, and the test checks that the
  new environment is one; ``pip install -e ".[flower]"`` would take minutes
  and the network, so the test checks that the ``flower`` extra exists and
  then links ``.venv`` to the environment running the tests (which has the
  package and Flower installed) instead.
* The guide's fixed ports (9093, 9101 to 9105) become free ports (the machine
  may be shared), and the simulation SuperLink's ports are set through
  Flower's variables ``FLWR_LOCAL_SUPERLINK_HTTP_API_PORT`` and
  ``FLWR_LOCAL_CONTROL_API_PORT``.
* ``TMPDIR`` is a short folder of the test's own: the nodes' step workers
  listen there, and are stopped at the end.
* The blocks marked ``long`` (the all-methods run, minutes) are left out;
  ``benchmarks/running_times.py`` runs the whole guide with them and records
  every block's time. ``tests/test_flower.py`` runs a deployment fitting every
  method with the all-methods run's parameters, read from the guide.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr")

from test_flower import (  # noqa: E402
    DEPLOYMENT,
    EXAMPLE_APP,
    FLWR_TOOLS,
    _demo_reference,
    _Deployment,
    _free_ports,
    _stop_local_superlink,
    _wait_for_port,
)

ROOT = Path(__file__).resolve().parents[1]
GUIDE = EXAMPLE_APP / "RUNNING.md"
INSTALL_LINE = 'pip install -e ".[flower]"'
#: The guide's steps, in order: a step the guide drops or adds fails the test.
STEPS = [
    "install",
    "simulation",
    "connection",
    "superlink",
    "prepare",
    "node-0",
    "node-1",
    "node-2",
    "run-kfed",
    "ledger",
    "prepare-5",
    "holder-3",
    "holder-4",
    "run-all",
]
_MARKED = re.compile(r"<!-- run: ([^>]*?) -->\n```bash\n(.*?)^```$", re.S | re.M)
_FLAGS = {"keeps-running", "long"}


@dataclass
class Block:
    """A command block of the guide."""

    id: str
    terminal: str
    text: str
    flags: set = field(default_factory=set)

    @property
    def keeps_running(self):
        return "keeps-running" in self.flags

    @property
    def long(self):
        return "long" in self.flags


def guide_blocks(text):
    """The command blocks of RUNNING.md's text, in order; every ``bash`` block is marked."""
    blocks = []
    for match in _MARKED.finditer(text):
        words = match.group(1).split()
        fields = dict(w.split("=", 1) for w in words if "=" in w)
        flags = {w for w in words if "=" not in w}
        if set(fields) != {"id", "terminal"} or not flags <= _FLAGS:
            raise ValueError(f"malformed marker <!-- run: {match.group(1)} -->")
        block = Block(fields["id"], fields["terminal"], match.group(2), flags)
        first = block.text.splitlines()[0]
        if not re.fullmatch(rf"# Terminal {block.terminal}\b.*", first):
            raise ValueError(
                f"block {block.id} starts with {first!r}, not '# Terminal {block.terminal}'"
            )
        if block.keeps_running != ("(keeps running)" in first):
            raise ValueError(
                f"block {block.id}: its first line and its marker disagree on keeps-running"
            )
        blocks.append(block)
    n_fences = len(re.findall(r"^```bash$", text, re.M))
    if n_fences != len(blocks):
        raise ValueError(
            f"{n_fences - len(blocks)} bash block(s) without a <!-- run: ... --> marker"
        )
    if len({b.id for b in blocks}) != len(blocks):
        raise ValueError("two blocks with one id")
    return blocks


def _node_commands(blocks, home):
    """The SuperNode command of each node block, as prepare_data.py prints it."""
    commands = {}
    for block in blocks:
        if block.keeps_running and block.id != "superlink":
            (line,) = [w for w in block.text.splitlines() if "flower-supernode" in w]
            prefix = "FLWR_SUPEREXEC_TASK_POLL_INTERVAL=0.1 "
            assert line.startswith(prefix), line
            commands[block.id] = line[len(prefix) :].replace("$HOME", str(home))
    return commands


def _fingerprints(output):
    return re.findall(r"^# fingerprint (sha256:[0-9a-f]+)$", output, re.M)


def _parties(output):
    """``[(method's parties)]``: the identity of each party, fit by fit, from a run's log."""
    fits, current = [], []
    for line in output.splitlines():
        match = re.search(r"party (\d+): node \d+, identity (sha256:[0-9a-f]+)", line)
        if match:
            assert int(match.group(1)) == len(current), line
            current.append(match.group(2))
        elif re.search(r"\w+: centers and ledger saved in ", line):
            fits.append(current)
            current = []
    return fits


class GuideRun:
    """RUNNING.md's blocks run in a home folder of their own; see the module's docstring."""

    def __init__(self, workdir, *, full=False):
        self.workdir = Path(workdir)
        self.full = full
        self.deployment = _Deployment(self.workdir)
        self.home = self.workdir / "home"
        self.home.mkdir()
        clone = self.home / "skfedclust"
        clone.mkdir()
        for entry in ROOT.iterdir():
            if entry.name not in (".venv", ".git"):
                (clone / entry.name).symlink_to(entry)
        self.clone = clone
        ports = _free_ports(8)
        self.ports = {"9093": ports[0], **{str(9101 + i): ports[1 + i] for i in range(5)}}
        self.simulation_port = ports[6]
        path = os.environ.get("PATH", "").split(os.pathsep)
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("FLWR_HOME", "VIRTUAL_ENV", "SKFEDCLUST_STATE_DIR", "XDG_STATE_HOME")
        }
        env.update(
            HOME=str(self.home),
            PATH=os.pathsep.join(p for p in path if Path(p) != Path(sys.prefix) / "bin"),
            TMPDIR=self.deployment.tmpdir,
            FLWR_LOCAL_SUPERLINK_HTTP_API_PORT=str(self.simulation_port),
            FLWR_LOCAL_CONTROL_API_PORT=str(ports[7]),
        )
        self.env = env
        self.terminals = {}
        self.fingerprints = []
        self.seconds = []

    # -- running ---------------------------------------------------------------
    def script(self, block):
        text = block.text
        if block.id == "install":
            assert INSTALL_LINE in text.splitlines(), text
            text = text.replace(INSTALL_LINE, ": the test links .venv to its own environment")
        for old, new in self.ports.items():
            text = re.sub(rf"\b{old}\b", str(new), text)
        return text

    def run(self, block, timeout):
        cwd, env = self.terminals.get(block.terminal, (self.home, self.env))
        script = self.script(block)
        if block.keeps_running:
            log = self.workdir / f"{block.id}.log"
            self.deployment.logs.append(log)
            with open(log, "w") as out:
                self.deployment.processes.append(
                    subprocess.Popen(
                        ["bash", "-e", "-c", script],
                        cwd=cwd,
                        env=env,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                    )
                )
            return None
        state = self.workdir / f"terminal-{block.terminal}"
        script += f'\npwd > "{state}.cwd"\nenv -0 > "{state}.env"\n'
        done = subprocess.run(
            ["bash", "-e", "-o", "pipefail", "-c", script],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if done.returncode != 0:
            self.fail(f"block {block.id} exited with {done.returncode}", done)
        saved = Path(f"{state}.env").read_text().split("\0")
        self.terminals[block.terminal] = (
            Path(f"{state}.cwd").read_text().strip(),
            dict(item.split("=", 1) for item in saved if "=" in item),
        )
        return done

    def fail(self, message, done=None):
        output = "" if done is None else f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        tails = "\n".join(
            f"--- {p.name}\n" + p.read_text()[-1500:] for p in self.deployment.logs if p.exists()
        )
        pytest.fail(f"{message}:\n{output}\n{tails}")

    def __call__(self):
        blocks = guide_blocks(GUIDE.read_text())
        assert [b.id for b in blocks] == STEPS
        self.node_commands = _node_commands(blocks, self.home)
        timeouts = {"simulation": 600, "run-kfed": 600, "run-all": 2400}
        try:
            for block in blocks:
                if block.long and not self.full:
                    continue
                started = time.monotonic()
                done = self.run(block, timeouts.get(block.id, 180))
                seconds = time.monotonic() - started
                check = getattr(self, "check_" + block.id.replace("-", "_"), None)
                if check is not None:
                    check(done)
                if block.id == "superlink":
                    # Its check waits for it to listen: part of its start.
                    seconds = time.monotonic() - started
                self.seconds.append((block, seconds))
        finally:
            _stop_local_superlink(self.simulation_port)
            self.deployment.stop()
        return self.seconds

    # -- what each block wrote or printed ---------------------------------------
    def check_install(self, done):
        venv = self.clone / ".venv"
        checked = subprocess.run(
            [
                str(venv / "bin" / "python"),
                "-c",
                "import sys; print(sys.prefix != sys.base_prefix)",
            ],
            capture_output=True,
            text=True,
        )
        assert checked.stdout.strip() == "True", checked
        assert self.terminals["1"][1]["VIRTUAL_ENV"] == str(venv)
        # The extra the guide installs is the package's.
        assert re.search(r"^flower = \[", (ROOT / "pyproject.toml").read_text(), re.M)
        shutil.rmtree(venv)
        venv.symlink_to(sys.prefix)

    def check_simulation(self, done):
        assert "KFed: centers and ledger saved in" in done.stdout + done.stderr, done.stdout[-2000:]
        out = self.home / "skfedclust-flower-output"
        summary = json.loads((out / "summary.json").read_text())
        _, reference = _demo_reference(3)
        np.testing.assert_array_equal(summary["cluster_centers"], reference.cluster_centers_)
        assert [p["allow_unauthenticated"] for p in summary["policies"]] == [True] * 3
        labels = [np.load(out / "simulation" / f"labels_{i}.npy") for i in range(3)]
        np.testing.assert_array_equal(np.concatenate(labels), reference.labels_)

    def check_connection(self, done):
        config = (self.home / ".flwr" / "config.toml").read_text()
        port = self.ports["9093"]
        block = f'[superlink.local-deployment]\naddress = "127.0.0.1:{port}"\ninsecure = true\n'
        # flwr wrote its default configuration, with its own connection 'local', first.
        assert config.endswith("\n" + block) and "[superlink.local]" in config, config

    def check_superlink(self, done):
        try:
            _wait_for_port(self.ports["9093"], self.deployment.processes[-1])
        except RuntimeError as exc:
            self.fail(str(exc))

    def _check_prepared(self, done, nodes):
        printed = [line for line in done.stdout.splitlines() if line.startswith("flower-supernode")]
        # The guide's node commands are those prepare_data.py prints (its ports as in the guide).
        superlink = f"127.0.0.1:{self.ports['9093']}"
        printed = [line.replace(superlink, "127.0.0.1:9093") for line in printed]
        assert printed == [self.node_commands[n] for n in nodes]
        self.fingerprints = _fingerprints(done.stdout)
        assert len(set(self.fingerprints)) == len(nodes), done.stdout
        trusted = (self.home / "skfedclust-flower-data" / "trusted_identities.txt").read_text()
        assert len([line for line in trusted.splitlines() if "ed25519:" in line]) == len(nodes)

    def check_prepare(self, done):
        self._check_prepared(done, ["node-0", "node-1", "node-2"])

    def check_run_kfed(self, done):
        log = done.stdout + done.stderr
        # The identities the run shows are the fingerprints show printed, in order.
        assert _parties(log) == [self.fingerprints], log[-3000:]
        data = self.home / "skfedclust-flower-data"
        summary = json.loads((self.home / "skfedclust-flower-output" / "summary.json").read_text())
        _, reference = _demo_reference(3)
        np.testing.assert_array_equal(summary["cluster_centers"], reference.cluster_centers_)
        assert summary["identities"] == self.fingerprints
        assert not any(p["allow_unauthenticated"] for p in summary["policies"])
        labels = [np.load(data / f"org_{i}_labels.npy") for i in range(3)]
        np.testing.assert_array_equal(np.concatenate(labels), reference.labels_)

    def check_ledger(self, done):
        (line,) = done.stdout.splitlines()
        assert f"node {self.fingerprints[0]}, 1 fits," in line, line

    def check_prepare_5(self, done):
        self._check_prepared(done, ["node-0", "node-1", "node-2", "holder-3", "holder-4"])

    def check_run_all(self, done):
        sys.path.insert(0, str(EXAMPLE_APP))
        try:
            from skfedclust_app.server_app import METHODS
        finally:
            sys.path.remove(str(EXAMPLE_APP))
        fits = _parties(done.stdout + done.stderr)
        assert len(fits) == len(METHODS), (done.stdout + done.stderr)[-3000:]
        for method, parties in zip(METHODS, fits):
            expected = self.fingerprints if method == "omnifc" else self.fingerprints[:3]
            assert parties == expected, method
            out = self.home / "skfedclust-flower-output"
            assert (out / f"{method}-summary.json").exists(), method


def run_guide(workdir, *, full=False):
    """Run RUNNING.md in ``workdir``; ``[(block, seconds)]`` of the blocks run."""
    return GuideRun(workdir, full=full)()


def test_the_guides_blocks_follow_its_convention():
    """Every bash block is marked and names its terminal; a block without a marker is refused."""
    text = GUIDE.read_text()
    blocks = guide_blocks(text)
    assert [b.id for b in blocks] == STEPS
    assert [b.id for b in blocks if b.long] == ["run-all"]
    # A terminal that keeps running serves one block: the next block goes elsewhere.
    running = [b.terminal for b in blocks if b.keeps_running]
    assert len(running) == len(set(running)) and not {
        b.terminal for b in blocks if not b.keeps_running
    } & set(running)
    with pytest.raises(ValueError, match="without a <!-- run"):
        guide_blocks(text + "\n```bash\n# Terminal 1\nls\n```\n")
    with pytest.raises(ValueError, match="not '# Terminal 3'"):
        guide_blocks("<!-- run: id=x terminal=3 -->\n```bash\n# Terminal 1\nls\n```\n")


def test_the_guides_times_are_the_measured_ones():
    """RUNNING.md quotes its runs' times from benchmarks/results/running_times.md."""
    sys.path.insert(0, str(ROOT / "doc"))
    try:
        import _results
    finally:
        sys.path.remove(str(ROOT / "doc"))
    minutes = {b: _results.lookup(f"running_times|Times|{b}|minutes") for b in STEPS}
    text = " ".join(GUIDE.read_text().split())
    assert f"the run took {minutes['run-all']} minutes" in text
    assert (
        f"the k-FED run of section 3 {minutes['run-kfed']} minutes and the simulation "
        f"{minutes['simulation']} (`benchmarks/results/running_times.md`" in text
    )
    page = (ROOT / "benchmarks" / "results" / "running_times.md").read_text()
    loads = re.search(r"before the run: ([\d.]+)/.*; after: ([\d.]+)/", page)
    assert f"load average {loads[1]} before the guide's commands, {loads[2]} after" in text


@DEPLOYMENT
@FLWR_TOOLS
def test_running_md_runs_as_written(tmp_path):
    """RUNNING.md from a bare machine: install, simulation, a SuperLink and three
    SuperNodes, a k-FED run, five nodes (see the module's docstring)."""
    seconds = run_guide(tmp_path)
    assert [b.id for b, _ in seconds] == [s for s in STEPS if s != "run-all"]


def test_the_flower_pages_commands_are_the_guides():
    """The user guide's Flower page gives RUNNING.md's command blocks, all, in order."""
    import textwrap

    page = (ROOT / "doc" / "user_guide" / "flower.rst").read_text()
    found = []
    for match in re.finditer(r"^\.\. code-block:: bash\n\n((?:   .*\n|\n)+)", page, re.M):
        text = textwrap.dedent(match.group(1)).strip("\n") + "\n"
        if text.startswith("# Terminal"):
            found.append(text)
    assert found == [b.text for b in guide_blocks(GUIDE.read_text())]
