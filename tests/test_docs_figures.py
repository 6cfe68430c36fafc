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
