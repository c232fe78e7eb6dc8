"""Markdown tables: GitHub layout, cells exactly as the caller formatted them."""

from fairseq_residual_tools.markdown import table


def test_table_is_github_markdown_with_cells_as_given():
    text = table(["scheme", "BLEU"], [["post", "30.10"], ["residual", "0.970"], ["pre", None]])
    lines = text.splitlines()
    assert [line.strip("|").split("|")[0].strip() for line in lines] == [
        "scheme",
        "----------",
        "post",
        "residual",
        "pre",
    ]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    # numbers keep their digits (no numeric re-formatting), a missing value is an empty cell
    assert cells[2:] == [["post", "30.10"], ["residual", "0.970"], ["pre", ""]]
    assert set(lines[1]) <= set("|-")
