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


def _doc_results():
    import importlib.util

    spec = importlib.util.spec_from_file_location("_doc_results", DOC.parent / "_results.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _result_tables(text):
    """``(page|section, rows, columns)`` of every ``result-table`` directive of a page."""
    found = []
    for match in re.finditer(r"\.\. result-table:: (.+)\n((?:   :.*\n)+)", text):
        options = dict(re.findall(r"   :(\w+): (.*)\n", match.group(2)))
        rows = [r.strip() for r in options["rows"].split(";")]
        columns = [c.strip() for c in options["columns"].split(";")]
        found.append((match.group(1).strip(), rows, columns[1:]))
    return found


def test_every_result_the_guide_quotes_names_one_cell_of_a_results_page():
    results = _doc_results()
    n_quoted = 0
    for page in sorted(DOC.glob("*.rst")):
        text = page.read_text()
        for reference in results.references(text):
            assert results.lookup(reference), (page.name, reference)
            n_quoted += 1
        for page_section, rows, columns in _result_tables(text):
            for row in rows:
                for column in columns:
                    assert results.lookup(f"{page_section}|{row}|{column}")
                    n_quoted += 1
    assert n_quoted > 50


def test_a_result_reference_that_names_no_cell_or_two_is_an_error():
    import pytest

    results = _doc_results()
    with pytest.raises(results.ResultError, match="0 cells"):
        results.lookup("grid|Summary|no such method|iid")
    with pytest.raises(results.ResultError, match="0 cells"):
        results.lookup("grid|Summary|FeCA|no such column")
    # "iris" alone names the iris row of every partition.
    with pytest.raises(results.ResultError, match="cells"):
        results.lookup("grid|ARI side by side|iris|ref")
    assert results.lookup("grid|Communication|iris/iid/KFed|rounds|d") == "1"
    assert results.lookup("dp_fedkmeans|iris|1|ARI, sphere-packing|mean").count(".") == 1


#: Pages whose measured figures all come from benchmarks/results (through ``:result:`` and
#: ``result-table``): a decimal typed into their prose is a figure nobody reruns.
PAGES_WITHOUT_TYPED_FIGURES = ["choosing_a_method.rst", "privacy.rst"]
#: Numbers of those pages that are not measurements, each with its reason.
NOT_MEASURED = {
    "privacy.rst": {
        "1.25": "the constant of the classical Gaussian mechanism, sqrt(2 ln(1.25 / delta))",
        "3.22": "the number of a theorem (Dwork and Roth 2014)",
    },
}


def test_pages_that_quote_results_type_no_measured_figure():
    for name in PAGES_WITHOUT_TYPED_FIGURES:
        text = (DOC / name).read_text()
        prose = re.sub(r":result:`[^`]+`", "", text)
        prose = re.sub(r"\.\. result-table::.*\n(?:   .*\n)+", "", prose)
        # Inline markup does not nest: a role inside bold text would print its source.
        bold = re.findall(r"\*\*(.+?)\*\*", text, flags=re.S)
        assert not [b for b in bold if ":result:" in b], name
        typed = re.findall(r"\b\d+\.\d\d+\b|\b\d[\d,.]* ?(?:KB|MB|GB|ms)\b", prose)
        typed = [t for t in typed if t not in NOT_MEASURED.get(name, {})]
        assert not typed, (name, typed)
