"""Every file the tools write appears whole or not at all (``fairseq_residual_tools/files.py``)."""

import json

import pytest

from fairseq_residual_tools.files import atomic_outputs, write_json, write_text


def test_write_json_and_text_replace_the_file_and_leave_no_temporary(tmp_path):
    path = tmp_path / "deeper" / "cell.json"
    write_json(path, {"bleu": 1.5})
    write_json(path, {"bleu": 2.5})
    assert json.loads(path.read_text()) == {"bleu": 2.5} and path.read_text().endswith("}\n")
    write_text(tmp_path / "t.md", "a\n")
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["cell.json", "deeper", "t.md"]


def test_a_write_stopped_half_way_leaves_the_previous_file_whole(tmp_path):
    path = tmp_path / "result.json"
    write_json(path, {"status": "measured"})
    with pytest.raises(KeyboardInterrupt), atomic_outputs([path]) as (tmp,):
        tmp.write_text('{"status": "mea')  # half of the next version, then the process is interrupted
        raise KeyboardInterrupt
    assert json.loads(path.read_text()) == {"status": "measured"}
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]
