"""Downloads and the Moses-script equivalents, checked on small inputs (no fairseq start-up)."""

import http.server
import json
import random
import threading
from functools import partial
from pathlib import Path

import pytest
from fixtures_dataprep import make_tgz, sha256, write_checksums

from fairseq_residual_tools.dataprep.download import Checksums, fetch
from fairseq_residual_tools.dataprep.formats import iwslt_train_lines, seg_lines
from fairseq_residual_tools.dataprep.moses import TextSteps, clean_corpus, process_file, remove_non_printing
from fairseq_residual_tools.dataprep.pipeline import learn_joint_bpe
from fairseq_residual_tools.errors import DataError


@pytest.fixture
def mirror(tmp_path):
    """An archive in a mirror folder and a checksums file recording it."""
    rng = random.Random(0)
    archive = make_tgz(tmp_path / "mirror" / "corpus.tgz", {f"c/{i}.txt": rng.randbytes(20000).hex() for i in range(5)})
    checksums = write_checksums(tmp_path / "checksums.json", [archive])
    return archive, Checksums(checksums)


def test_fetch_from_file_url_verifies_and_renames_only_when_complete(tmp_path, mirror):
    archive, checksums = mirror
    got = fetch(checksums.archive("corpus.tgz"), tmp_path / "dl", checksums, f"file://{archive.parent}", quiet=True)
    assert got == tmp_path / "dl" / "corpus.tgz"
    assert sha256(got) == sha256(archive)
    assert not (tmp_path / "dl" / "corpus.tgz.part").exists()


def test_fetch_resumes_a_partial_download_from_its_length(tmp_path, mirror):
    archive, checksums = mirror
    data = archive.read_bytes()
    part = tmp_path / "dl" / "corpus.tgz.part"
    part.parent.mkdir()
    part.write_bytes(data[: len(data) // 3])
    source = tmp_path / "mirror2"
    source.mkdir()
    # the mirror's first third is garbage: only a resumed download (which skips it) verifies
    (source / "corpus.tgz").write_bytes(b"\0" * (len(data) // 3) + data[len(data) // 3 :])
    got = fetch(checksums.archive("corpus.tgz"), tmp_path / "dl", checksums, str(source), quiet=True)
    assert got.read_bytes() == data


class _RangeHandler(http.server.SimpleHTTPRequestHandler):
    """Serves files with HTTP Range support (bytes=N-), as the corpus hosts do."""

    def log_message(self, *args):
        pass

    def do_GET(self):
        path = Path(self.translate_path(self.path))
        if not path.is_file():
            self.send_error(404)
            return
        data = path.read_bytes()
        start = 0
        if self.headers.get("Range", "").startswith("bytes="):
            start = int(self.headers["Range"][6:].split("-")[0])
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(len(data) - start))
        self.end_headers()
        self.wfile.write(data[start:])
        type(self).served.append(len(data) - start)


def test_fetch_over_http_resumes_with_a_range_request(tmp_path, mirror):
    archive, checksums = mirror
    data = archive.read_bytes()
    _RangeHandler.served = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(_RangeHandler, directory=str(archive.parent)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        part = tmp_path / "dl" / "corpus.tgz.part"
        part.parent.mkdir()
        part.write_bytes(data[:1000])
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        got = fetch(checksums.archive("corpus.tgz"), tmp_path / "dl", checksums, url, quiet=True)
    finally:
        server.shutdown()
    assert got.read_bytes() == data
    assert _RangeHandler.served == [len(data) - 1000]


def test_corrupt_archive_is_rejected_and_set_aside(tmp_path, mirror):
    archive, checksums = mirror
    bad = tmp_path / "bad"
    bad.mkdir()
    data = bytearray(archive.read_bytes())
    data[100] ^= 0xFF
    (bad / "corpus.tgz").write_bytes(bytes(data))
    with pytest.raises(DataError, match="has sha256 .* expected"):
        fetch(checksums.archive("corpus.tgz"), tmp_path / "dl", checksums, str(bad), quiet=True)
    assert not (tmp_path / "dl" / "corpus.tgz").exists()
    assert (tmp_path / "dl" / "corpus.tgz.corrupt").exists()


def test_truncated_archive_is_reported_as_truncated(tmp_path, mirror):
    archive, checksums = mirror
    short = tmp_path / "short"
    short.mkdir()
    (short / "corpus.tgz").write_bytes(archive.read_bytes()[:-10])
    with pytest.raises(DataError, match="truncated"):
        fetch(checksums.archive("corpus.tgz"), tmp_path / "dl", checksums, str(short), quiet=True)
    assert not (tmp_path / "dl" / "corpus.tgz").exists()


def test_unpinned_archive_needs_record_checksum_which_pins_it(tmp_path, mirror):
    archive, _ = mirror
    path = tmp_path / "unpinned.json"
    path.write_text(json.dumps({"archives": {"corpus.tgz": {"url": "https://example.invalid/corpus.tgz"}}}))
    checksums = Checksums(path)
    with pytest.raises(DataError, match="--record-checksum"):
        fetch(checksums.archive("corpus.tgz"), tmp_path / "dl", checksums, str(archive.parent), quiet=True)
    fetch(
        checksums.archive("corpus.tgz"),
        tmp_path / "dl",
        checksums,
        str(archive.parent),
        record_checksum=True,
        quiet=True,
    )
    entry = json.loads(path.read_text())["archives"]["corpus.tgz"]
    assert entry["sha256"] == sha256(archive) and entry["size"] == archive.stat().st_size


def test_missing_mirror_file_names_the_path(tmp_path, mirror):
    _, checksums = mirror
    with pytest.raises(DataError, match=str(tmp_path / "nowhere" / "corpus.tgz")):
        fetch(checksums.archive("corpus.tgz"), tmp_path / "dl", checksums, str(tmp_path / "nowhere"), quiet=True)


def test_package_checksums_cover_every_archive_the_recipes_name():
    checksums = Checksums(None)
    names = set(checksums.data["archives"])
    for name in (
        "de-en.tgz",
        "training-parallel-europarl-v7.tgz",
        "training-parallel-commoncrawl.tgz",
        "training-parallel-nc-v12.tgz",
        "dev.tgz",
        "test-full.tgz",
        "opus-100-corpus-de-en-v1.0.tar.gz",
    ):
        assert name in names
    opus = [n for n in names if n.startswith("opus-100-corpus-")]
    assert len(opus) == 99
    for name, entry in checksums.data["archives"].items():
        assert entry.get("source"), name
        assert entry.get("sha256") is None or len(entry["sha256"]) == 64
    assert sum(checksums.data["archives"][n]["pairs"]["train"] for n in opus) == 54_656_433


def test_clean_corpus_applies_length_ratio_and_empty_rules(tmp_path):
    rows = [
        ("a b c", "x y z"),  # kept
        ("", "x"),  # empty side
        ("a " * 176, "x " * 176),  # 176 > 175 tokens
        ("a b", "x y z w"),  # ratio 2 > 1.5
        ("a  b   c ", " x y z"),  # kept, spaces normalised
        ("a b", "x y z"),  # ratio exactly 1.5: kept
    ]
    for side, lang in ((0, "de"), (1, "en")):
        (tmp_path / f"in.{lang}").write_text("".join(r[side].rstrip() + "\n" for r in rows))
    kept = clean_corpus(str(tmp_path / "in"), "de", "en", str(tmp_path / "out"), 1, 175, 1.5)
    assert kept == 3
    assert (tmp_path / "out.de").read_text().splitlines() == ["a b c", "a b c", "a b"]
    assert (tmp_path / "out.en").read_text().splitlines() == ["x y z", "x y z", "x y z"]


def test_clean_corpus_rejects_sides_of_different_length(tmp_path):
    (tmp_path / "in.de").write_text("a\nb\n")
    (tmp_path / "in.en").write_text("a\n")
    with pytest.raises(DataError, match="line counts differ"):
        clean_corpus(str(tmp_path / "in"), "de", "en", str(tmp_path / "out"), 1, 175, 1.5)
    assert not (tmp_path / "out.de").exists()


def test_remove_non_printing_replaces_control_and_format_characters():
    assert remove_non_printing("a\x07b\u200bc\u00a0d") == "a b c\u00a0d"
    assert remove_non_printing("plain") == "plain"


def test_moses_steps_follow_the_perl_scripts(tmp_path):
    (tmp_path / "in").write_text("\u201eDas ist\u201c ein Test-Fall, oder?\n")
    steps = TextSteps(lang="de", normalize_punctuation=True, remove_non_printing=True, aggressive_dash_splits=True)
    process_file(steps, tmp_path / "in", tmp_path / "out", workers=2, quiet=True)
    assert (tmp_path / "out").read_text() == "&quot; Das ist &quot; ein Test @-@ Fall , oder ?\n"


def test_seg_lines_and_iwslt_train_tags_follow_fairseqs_sed(tmp_path):
    xml = tmp_path / "t.xml"
    xml.write_text(
        '<doc docid="1">\n<title>T</title>\n<seg id="1"> It\u2019s here. </seg>\n<seg id="22">B</seg>\n</doc>\n'
    )
    assert seg_lines(xml) == ["It's here.", "B"]
    tags = tmp_path / "train.tags"
    tags.write_text(
        "<url>u</url>\n<keywords>k</keywords>\n<talkid>1</talkid>\n<title>A: B</title>\n"
        "<description>D.</description>\ntext line\n"
    )
    assert iwslt_train_lines(tags) == ["A: B", "D.", "text line"]
    with pytest.raises(DataError, match="no <seg id"):
        seg_lines(tags)


def test_interrupted_stage_leaves_nothing_that_looks_finished(tmp_path):
    from fairseq_residual_tools.dataprep.pipeline import Stages

    out = tmp_path / "out.txt"

    def interrupted():
        from fairseq_residual_tools.dataprep.pipeline import atomic_outputs

        with atomic_outputs([out]) as (tmp,):
            tmp.write_text("half")
            raise KeyboardInterrupt

    record = tmp_path / "stages.json"
    stages = Stages(record)
    with pytest.raises(KeyboardInterrupt):
        stages.run("write", [out], interrupted)
    assert list(tmp_path.iterdir()) == []
    stages.run("write", [out], lambda: out.write_text("whole"))
    assert stages.ran == ["write"] and out.read_text() == "whole"
    again = Stages(record)
    again.run("write", [out], lambda: pytest.fail("a finished stage must be skipped"))
    assert again.skipped == ["write"]


def run_two_stages(tmp_path, merges, lowercase, raw):
    """A tokenise -> learn stage pair, each recording what it was made from."""
    from fairseq_residual_tools.dataprep.pipeline import Stages

    stages = Stages(tmp_path / "stages.json")
    tok, codes = tmp_path / "tok.txt", tmp_path / "codes.txt"
    stages.run(
        "tokenize",
        [tok],
        lambda: tok.write_text(raw.read_text().lower() if lowercase else raw.read_text()),
        options={"lowercase": lowercase},
        inputs=[raw],
    )
    stages.run("learn", [codes], lambda: codes.write_text(f"{merges}\n"), options={"merges": merges})
    return stages


def test_a_stage_made_from_other_options_or_inputs_is_redone_with_every_later_stage(tmp_path, caplog):
    raw = tmp_path / "raw.txt"
    raw.write_text("Ein Satz.\n")
    assert run_two_stages(tmp_path, 300, False, raw).ran == ["tokenize", "learn"]
    assert run_two_stages(tmp_path, 300, False, raw).skipped == ["tokenize", "learn"]
    # an option of the last stage: only that stage
    again = run_two_stages(tmp_path, 50, False, raw)
    assert (again.skipped, again.ran) == (["tokenize"], ["learn"]) and (tmp_path / "codes.txt").read_text() == "50\n"
    assert "redo  learn and every later stage: option merges was 300, now 50" in caplog.text
    # an option of the first stage: it and everything after it
    again = run_two_stages(tmp_path, 50, True, raw)
    assert again.ran == ["tokenize", "learn"] and (tmp_path / "tok.txt").read_text() == "ein satz.\n"
    # the same input file with other content
    raw.write_text("Ein anderer Satz, länger.\n")
    assert run_two_stages(tmp_path, 50, True, raw).ran == ["tokenize", "learn"]
    assert (tmp_path / "tok.txt").read_text() == "ein anderer satz, länger.\n"
    # output with no record of what made it (a folder from before the records) is redone
    (tmp_path / "stages.json").unlink()
    assert run_two_stages(tmp_path, 50, True, raw).ran == ["tokenize", "learn"]


@pytest.mark.parametrize("workers", [1, 2])
def test_text_that_is_not_utf8_is_reported_with_file_and_line(tmp_path, workers):
    raw = tmp_path / "train.de"
    raw.write_bytes("Erste Zeile.\n".encode() * 2500 + "Gr\u00fc\u00dfe aus K\u00f6ln.\n".encode("latin-1"))
    with pytest.raises(DataError) as e:
        process_file(TextSteps(lang="de"), raw, tmp_path / "out.de", workers=workers)
    assert str(e.value).startswith(f"{raw} line 2501 is not UTF-8 (byte 0xfc at column 3)")
    assert not (tmp_path / "out.de").exists()


def test_bpe_on_a_text_with_fewer_merges_than_asked_says_so_in_one_line_with_the_codes_learned(
    tmp_path, capsys, caplog
):
    """subword-nmt stops when no pair is seen twice ("no pair has frequency >= 2. Stopping"); the learned codes are
    fewer than --bpe-merges asked for, which the stage says in its own words."""
    text, codes = tmp_path / "train.txt", tmp_path / "codes.bpe"
    text.write_text("the cat sat on the mat\nthe cat ate the rat\n" * 3, encoding="utf-8")
    learn_joint_bpe([text], codes, 500)
    learned = len(codes.read_text(encoding="utf-8").splitlines()) - 1  # after the "#version" line
    assert 0 < learned < 500
    assert "no pair has frequency" not in capsys.readouterr().err
    said = [r.getMessage() for r in caplog.records if "merges" in r.getMessage()]
    assert said == [
        f"codes.bpe: {learned} codes learned, fewer than the 500 merges asked for (--bpe-merges): no other pair of "
        "symbols occurs twice in the text"
    ]
