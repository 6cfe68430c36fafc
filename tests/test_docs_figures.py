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
        if secure_aggregation:
            stated_rounds = re.search(r"``rounds = S \+ (\d+)``", text)
            intro = re.search(r"It needs ``n_rounds \+ (\d+)`` rounds with secure sums", text)
            assert int(stated_rounds[1]) == int(intro[1]) == comm["rounds"] - est.n_rounds


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
    for page in [*sorted(DOC.glob("*.rst")), DOC.parent / "faq.rst", DOC.parent / "install.rst"]:
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
#: ``result-table``): a decimal typed into their prose is a figure nobody reruns. Paths
#: are relative to doc/user_guide.
PAGES_WITHOUT_TYPED_FIGURES = [
    "choosing_a_method.rst",
    "fedkmeans.rst",
    "fedsc.rst",
    "gold.rst",
    "kfed.rst",
    "ffcm.rst",
    "feca.rst",
    "dc.rst",
    "mavg.rst",
    "kumar.rst",
    "choosing_k.rst",
    "writing_a_method.rst",
    "../faq.rst",
    "../install.rst",
    "omnifc.rst",
    "privacy.rst",
    "security.rst",
    "flower.rst",
    "federated.rst",
    "index.rst",
]

#: Typed figures such a page keeps, each with the reason it is not a rerun's figure: a
#: paper's own number, or a figure of the code that a test of this module recomputes.
TYPED_FIGURES_KEPT = {
    "fedkmeans.rst": {
        "0.25": "KMeans' inertia on the four-point case: "
        "test_fedkmeans_pages_four_point_inertias_are_the_codes",
        "5 ms": "the goal of a round's fixed cost, a constant of "
        "benchmarks/round_cost_fedkmeans.py (GOAL_MS)",
    },
    "fedsc.rst": {"4 GB": "the memory goal of the n = 200,000 benchmark, not a measurement"},
    "gold.rst": dict.fromkeys(
        ["0.020", "0.051"],
        "the reproduction's Summary sentence: test_gold_pages_counts_are_the_reproductions",
    ),
    "../install.rst": {"3.10": "the oldest Python version supported, a requirement"},
    "omnifc.rst": {
        **dict.fromkeys(["39 GB", "800 MB"], "8 n² bytes of a dense D, arithmetic"),
        "1.75": "the floor of a faithful simulation, counted in products, not measured",
    },
    "flower.rst": {
        "1.42": "Flower's version number",
        "3.10": "the oldest Python version supported, a requirement",
    },
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
        # Doctest sessions are checked by the doctests; inline literals hold parameters,
        # constants and formulas (``energy = 0.99``), not measurements.
        prose = re.sub(r"(?m)^( *)>>> .*\n(?:\1\S.*\n)*", "", prose)
        prose = re.sub(r"``.+?``", "", prose, flags=re.S)
        prose = re.sub(r"arXiv:\S+", "", prose)
        # Inline markup does not nest: a role inside bold text would print its source.
        # (a role's own text may hold ``**``, as in ``prime=2**30 - 35``: roles are
        # replaced by a mark before the bold text is looked for)
        marked = re.sub(r":result:`[^`]+`", ":result:", text)
        bold = re.findall(r"\*\*(.+?)\*\*", marked, flags=re.S)
        assert not [b for b in bold if ":result:" in b], name
        typed = re.findall(r"\b\d+\.\d\d+\b|\b\d[\d,.]* ?(?:KB|MB|GB|ms)\b", prose)
        kept = TYPED_FIGURES_KEPT.get(name, {})
        assert not [t for t in typed if t not in kept], (name, typed)
        # A kept figure the page no longer states is an entry to remove.
        assert not [k for k in kept if k not in typed], (name, kept)


def test_every_page_with_kept_figures_is_guarded():
    assert set(TYPED_FIGURES_KEPT) <= set(PAGES_WITHOUT_TYPED_FIGURES)


def test_fedkmeans_pages_four_point_inertias_are_the_codes():
    import numpy as np
    from sklearn.cluster import KMeans

    from skfedclust import FederatedKMeans

    text = " ".join((DOC / "fedkmeans.rst").read_text().split())
    stated = re.search(r"\(inertia ([\d.]+) where KMeans reaches ([\d.]+)\)", text)
    # scikit-learn's four-point case: two rows each side of a start, the other start far.
    X = np.array([[0, 0], [0.5, 0], [0.5, 1], [1, 1]], dtype=float)
    init = np.array([[0.5, 0.5], [3, 3]])
    fed = FederatedKMeans(2, init=init, random_state=0).fit([X[:2], X[2:3], X[3:]])
    km = KMeans(2, init=init, n_init=1).fit(X)
    assert (float(stated[1]), float(stated[2])) == (fed.inertia_, km.inertia_)


def test_gold_pages_counts_are_the_reproductions():
    # The counts of the reproduction are sentences of its Summary, not table cells.
    words = {"five": 5, "eight": 8, "all nine": 9}
    page = " ".join((DOC / "gold.rst").read_text().split())
    results = (DOC.parents[1] / "benchmarks" / "results" / "gold.md").read_text()
    start, end = results.index("## Summary"), results.index("## The splits")
    summary = " ".join(results[start:end].split())

    def stated(pattern, text):
        match = re.search(pattern, text)
        assert match, pattern
        return [int(g) if g.isdigit() else words.get(g, g) for g in match.groups()]

    # (pattern of the user guide, pattern of the results page): the same figures.
    pairs = [
        (
            r"spreads on (\d+) of the (\d+) \(data set, metric\) pairs; the other (\w+) are",
            r"(\d+) of (\d+) \(data set, metric\) pairs of GOLD's Purity, ARI and NMI "
            r"\(client protocol\) match the paper within the two spreads \((\d+) lower\)",
        ),
        (
            r"at least as high on (all nine) data sets for Purity and ARI and on (\w+) for NMI",
            r"at least as high on \d+ of \d+ data sets for Purity, (\d+) of \d+ for ARI, "
            r"(\d+) of \d+ for NMI",
        ),
        (
            r"\(mean standard deviation (\d+\.\d+) against (\d+\.\d+)\)",
            r"Run-to-run spread of ARI \(mean std\): (\d+\.\d+) against (\d+\.\d+)",
        ),
        (
            r"(\d+) of the (\d+) pairs match, (\d+) are higher and (\d+) \(EP's NMI\) is lower",
            r"Against the paper's Table IV: (\d+) of (\d+) pairs match \((\d+) higher, "
            r"(\d+) lower\)",
        ),
        (
            r"at least k-FED's on (\d+) of the 9 data sets and at least centralized k-means' "
            r"on (\d+); with the defaults, on (\d+) and (\d+)",
            r"GOLD's mean ARI is at least k-FED's on (\d+) of 9 data sets and at least "
            r"centralized k-means' on (\d+) of 9.*?Their mean ARI is at least k-FED's on (\d+) "
            r"of 9 data sets and at least centralized k-means' on (\d+) of 9",
        ),
    ]
    for ours, theirs in pairs:
        assert stated(ours, page) == stated(theirs, summary), ours


def test_kfed_pages_count_of_matching_settings_is_the_reproductions():
    results = _doc_results()
    verdicts = [
        row[-1].split()[0]
        for heading, header, rows in results.tables("kfed")
        if header[-1] == "published config vs authors (ratio)"
        for row in rows
    ]
    text = " ".join((DOC / "kfed.rst").read_text().split())
    stated = re.search(r"agree within 2σ in (\d+) of (\d+) settings", text)
    assert (int(stated[1]), int(stated[2])) == (verdicts.count("match"), len(verdicts))


def test_feca_pages_table_1_counts_are_the_reproductions():
    results = _doc_results()
    feca, baselines = [], []
    for heading, _header, rows in results.tables("feca"):
        if heading.startswith("Table 1"):
            for row in rows:
                verdicts = [re.search(r"\[(\w+)", cell) for cell in row[1:]]
                verdicts = [v[1] for v in verdicts if v and v[1] != "n"]
                if row[0] == "FeCA":
                    feca += verdicts
                elif not row[0].startswith("Centralized"):
                    baselines += verdicts
    text = " ".join((DOC / "feca.rst").read_text().split())
    stated = re.search(r"FeCA matches (\d+) of its (\d+) readable Table 1 cells", text)
    assert (int(stated[1]), int(stated[2])) == (feca.count("match"), len(feca))
    stated = re.search(r"\((\d+) of (\d+) readable baseline cells lower\)", text)
    assert (int(stated[1]), int(stated[2])) == (baselines.count("lower"), len(baselines))


def test_every_page_of_the_guide_is_guarded():
    pages = {p.name for p in DOC.glob("*.rst") if not p.name.startswith("_")}
    assert pages <= set(PAGES_WITHOUT_TYPED_FIGURES)
