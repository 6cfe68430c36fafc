"""Figures the user guide states in prose or code comments equal the code's output."""

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "doc" / "user_guide"


def _first_code_block_after(text, marker):
    start = text.index(marker)
    block = re.search(r"::\n\n((?:   .*\n|\n)+)", text[start:])
    return "\n".join(line[3:] for line in block.group(1).splitlines())


def test_flower_pages_kfed_bytes_are_the_ledgers():
    text = (DOC / "flower.rst").read_text()
    code = _first_code_block_after(text, "**In-process.**")
    namespace = {}
    exec(code, namespace)
    comm = namespace["km"].communication_
    stated_up = int(re.search(r'communication_\["bytes_up"\]\s+# .*?(\d+) bytes', code)[1])
    assert stated_up == comm["bytes_up"]
    prose = re.search(r"for the k-FED fit above, one round, (\d+) bytes up.*?and (\d+) bytes down",
                      text, flags=re.S)  # fmt: skip
    assert (int(prose[1]), int(prose[2])) == (comm["bytes_up"], comm["bytes_down"])
    assert comm["rounds"] == 1


def test_decision_pages_fedsc_rounds_are_the_codes():
    import warnings

    from sklearn.datasets import load_iris

    from skfedclust import FedSpectralClustering

    text = (DOC / "choosing_a_method.rst").read_text()
    stated = re.search(r"``n_rounds`` \((\d+)\) and nine more \((\d+) with the defaults\), "
                       r"and one set-up round", text)  # fmt: skip
    X = load_iris().data
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = FedSpectralClustering(3, random_state=0).fit([X[:50], X[50:100], X[100:]])
    comm = est.communication_
    assert int(stated[1]) == est.n_rounds
    assert int(stated[2]) == comm["rounds"] == est.n_rounds + 9
    assert comm["setup_rounds"] == 1


def test_citation_and_changelog_name_the_package_version():
    import skfedclust

    root = DOC.parents[1]
    citation = (root / "CITATION.cff").read_text()
    assert re.search(r'^version: "(.+)"$', citation, flags=re.M)[1] == skfedclust.__version__
    assert f"## {skfedclust.__version__}" in (root / "CHANGELOG.md").read_text()


def test_fedsc_pages_iris_bytes_are_the_ledgers():
    import warnings

    from sklearn.datasets import load_iris

    from skfedclust import FedSpectralClustering

    text = " ".join((DOC / "fedsc.rst").read_text().split())
    secure = re.search(
        r"that is ([\d,]+) bytes up, ([\d,]+) down and ([\d,]+) between clients", text
    )
    clear = re.search(r"no peer bytes: ([\d,]+) up and ([\d,]+) down on Iris", text)
    X = load_iris().data
    stated = {
        True: [int(v.replace(",", "")) for v in secure.groups()],
        False: [int(v.replace(",", "")) for v in clear.groups()] + [0],
    }
    for secure_aggregation, figures in stated.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est = FedSpectralClustering(
                3, secure_aggregation=secure_aggregation, random_state=0
            ).fit(X)
        comm = est.communication_
        assert figures == [comm["bytes_up"], comm["bytes_down"], comm["bytes_peer"]]
