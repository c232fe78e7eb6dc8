"""Dead FFN units are counted as defined (a unit whose fc1 pre-activation is positive on no real token), in the
right layer of the right stack, for every scheme and a language model; bad input is a one-line error."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from helpers import TinyTask, baseline_model, build_lm, build_model, lm_batch, random_batch, stock_transformer

from fairseq_residual.schemes import SCHEMES
from fairseq_residual.schemes.base import stack_layers
from fairseq_residual_tools.analysis import dead_units
from fairseq_residual_tools.errors import ConfigError, DataError

pytestmark = pytest.mark.usefixtures("one_torch_thread")
FFN = 32


def fix_pre_activations(model, dead: dict):
    """fc1 of layer k of each stack made input-independent: weight 0, bias -1 on its first ``dead[side][k]`` units
    but the last of them, which gets 0 (relu(0) = 0: dead too), +1 on the rest."""
    with torch.no_grad():
        for side, counts in dead.items():
            for layer, n in zip(stack_layers(getattr(model, side)), counts, strict=True):
                layer.fc1.weight.zero_()
                layer.fc1.bias.fill_(1.0)
                layer.fc1.bias[:n] = -1.0
                if n:
                    layer.fc1.bias[n - 1] = 0.0


def translation_sample(task, seed=0, **kwargs):
    src, src_lengths, prev = random_batch(task, seed=seed, **kwargs)
    return {"net_input": {"src_tokens": src, "src_lengths": src_lengths, "prev_output_tokens": prev}}


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_each_layer_of_each_stack_gets_its_own_share_for_every_scheme(scheme):
    task = TinyTask()
    model = baseline_model(scheme, task, enc_layers=3, dec_layers=2, ffn=FFN)
    dead = {"encoder": [0, 5, 32], "decoder": [17, 1]}
    fix_pre_activations(model, dead)
    shares = dead_units.dead_units(model, [translation_sample(task)])
    assert shares == {side: [n / FFN for n in counts] for side, counts in dead.items()}


def test_a_language_model_has_its_decoder_counted():
    task = TinyTask()
    model = build_lm(task, scheme="residual", layers=3, ffn=FFN)
    fix_pre_activations(model, {"decoder": [3, 0, 8]})
    shares = dead_units.dead_units(model, [{"net_input": {"src_tokens": lm_batch(task)}}])
    assert shares == {"decoder": [3 / FFN, 0.0, 8 / FFN]}


def test_a_unit_positive_only_on_padding_is_dead():
    # T x B x F = 3 x 2 x 3, time first as fc1 sees it; keep is B x T
    pre = torch.full((3, 2, 3), -1.0)
    keep = torch.tensor([[True, True, False], [True, True, True]])
    pre[2, 0, 0] = 5.0  # unit 0: positive only at (sentence 0, position 2), a padding position
    pre[2, 1, 1] = 0.5  # unit 1: positive at a real token of sentence 1
    pre[:, :, 2] = 0.0  # unit 2: never positive
    maxima = dead_units.token_maxima(pre, keep)
    assert maxima.tolist() == [-1.0, 0.5, 0.0]
    assert dead_units.dead_share(maxima) == pytest.approx(2 / 3)


def test_a_unit_alive_in_one_sample_of_the_split_is_not_dead():
    """Against the definition applied to every real token of both samples at once, collected by a hook of its own."""
    task = TinyTask()
    model = baseline_model("residual", task, ffn=FFN)
    with torch.no_grad():
        for layer in stack_layers(model.encoder):
            layer.fc1.bias.sub_(0.5)  # most units rarely on: which are on depends on the sample
    samples = [translation_sample(task, seed=s, batch=2) for s in (1, 2)]
    seen = []
    hook = model.encoder.layers[1].fc1.register_forward_hook(lambda _m, _a, out: seen.append(out))
    with torch.no_grad():
        for sample in samples:
            model(**sample["net_input"])
    hook.remove()
    tokens = torch.cat(
        [out.transpose(0, 1)[s["net_input"]["src_tokens"].ne(1)] for out, s in zip(seen, samples, strict=True)]
    )
    expected = (tokens > 0).sum(dim=0).eq(0).float().mean().item()
    each = [dead_units.dead_units(model, [s])["encoder"][1] for s in samples]
    both = dead_units.dead_units(model, samples)["encoder"][1]
    assert both == pytest.approx(expected) and both <= min(each) and min(each) < 1
    assert both < max(each)  # the split is more than either sample: a unit off in one sample was on in the other


def test_another_activation_is_a_one_line_error():
    task = TinyTask()
    model = build_model(task, scheme="pre", activation_fn="gelu")
    with pytest.raises(ConfigError, match="activation is gelu: dead units are counted for relu only"):
        dead_units.dead_units(model, [translation_sample(task)])


def test_a_missing_checkpoint_is_a_one_line_error(tmp_path):
    with pytest.raises(DataError, match="no-such.pt: no such file"):
        dead_units.main(["--checkpoint", str(tmp_path / "no-such.pt"), "--out", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


def test_a_checkpoint_of_another_architecture_is_a_one_line_error(tmp_path, monkeypatch):
    from fairseq import checkpoint_utils

    task = TinyTask()
    stock = stock_transformer(task, normalize_before=True, layers=2)  # fairseq's own transformer: no scheme
    monkeypatch.setattr(checkpoint_utils, "load_model_ensemble_and_task", lambda paths, **_: ([stock], None, task))
    path = tmp_path / "checkpoint_best.pt"
    path.write_bytes(b"")  # present; what it holds is what the patched loader returns
    with pytest.raises(ConfigError, match="a TransformerModel, not a residual_transformer"):
        dead_units.main(["--checkpoint", str(path), "--out", str(tmp_path / "out")])


def test_a_chunk_below_one_is_a_one_line_error(tmp_path):
    with pytest.raises(ConfigError, match="--chunk 0: a forward pass reads at least 1 sentence pair"):
        dead_units.main(["--checkpoint", str(tmp_path / "c.pt"), "--chunk", "0", "--out", str(tmp_path)])


def on_disk(tmp_path, monkeypatch):
    """A checkpoint and a data-bin as files; "loading" them gives a tiny model, whose loads are counted."""
    task = TinyTask()
    model = baseline_model("residual", task, ffn=FFN)
    data = tmp_path / "bin"
    data.mkdir()
    for name in ("dict.es.txt", "dict.en.txt", "valid.es-en.es.bin", "valid.es-en.en.idx", "test.es-en.es.bin"):
        (data / name).write_text(name)
    checkpoint = tmp_path / "run" / "checkpoint_last.pt"
    checkpoint.parent.mkdir()
    checkpoint.write_text("weights")
    loads = []

    def load(path, _data):
        loads.append(path)
        return model, SimpleNamespace(cfg=SimpleNamespace(data=str(data)))

    monkeypatch.setattr(dead_units, "load_checkpoint", load)
    monkeypatch.setattr(dead_units, "split_size", lambda _task, _split: 3)
    monkeypatch.setattr(dead_units, "split_samples", lambda *_: [translation_sample(task)])
    return checkpoint, data, loads


def test_a_count_run_again_on_the_same_inputs_does_nothing_and_says_so(tmp_path, monkeypatch, capsys):
    checkpoint, data, loads = on_disk(tmp_path, monkeypatch)
    argv = ["--checkpoint", str(checkpoint), "--out", str(tmp_path / "out")]
    runs = dead_units.main(argv)
    record = json.loads((tmp_path / "out" / "dead_units.json").read_text())
    assert sorted(Path(f).name for f in record["made_from"]["inputs"]) == [
        "checkpoint_last.pt",
        "dict.en.txt",
        "dict.es.txt",
        "valid.es-en.en.idx",
        "valid.es-en.es.bin",
    ]  # the split counted, not another one
    written = {f: f.stat().st_mtime_ns for f in (tmp_path / "out").iterdir()}
    assert dead_units.main(argv) == runs and len(loads) == 1
    assert "counted before from these checkpoints, data and code; nothing to do" in capsys.readouterr().out
    assert {f: f.stat().st_mtime_ns for f in (tmp_path / "out").iterdir()} == written


@pytest.mark.parametrize("change", ["checkpoint", "data", "split", "code", "readme", "record", "old-record"])
def test_a_count_is_made_again_when_what_it_was_made_from_changed(change, tmp_path, monkeypatch):
    checkpoint, data, loads = on_disk(tmp_path, monkeypatch)
    argv = ["--checkpoint", str(checkpoint), "--out", str(tmp_path / "out")]
    dead_units.main(argv)
    if change == "checkpoint":
        checkpoint.write_text("trained on")
    elif change == "data":
        (data / "valid.es-en.es.bin").write_text("prepared again")
    elif change == "split":
        argv += ["--split", "test"]
    elif change == "code":
        monkeypatch.setattr(dead_units, "code_sha256", lambda _paths: "another tree")
    elif change == "readme":
        (tmp_path / "out" / "README.md").unlink()  # a folder holding one of its two files
    elif change == "record":
        (tmp_path / "out" / "dead_units.json").write_text("{")  # not JSON (edited by hand)
    else:
        (tmp_path / "out" / "dead_units.json").write_text('{"runs": []}')  # written before made_from
    dead_units.main(argv)
    assert len(loads) == 2 and (tmp_path / "out" / "README.md").is_file()


def table_runs(readme: str) -> list:
    """The run column of the README's table, below its header and rule."""
    return [line.split("|")[1].strip() for line in readme.splitlines() if line.startswith("| ")][1:]


def second_checkpoint(tmp_path) -> Path:
    other = tmp_path / "other-run" / "average5-at-9.pt"
    other.parent.mkdir()
    other.write_text("other weights")
    return other


def test_add_keeps_the_rows_of_checkpoints_that_are_gone_and_names_each_count(tmp_path, monkeypatch, capsys):
    checkpoint, _data, loads = on_disk(tmp_path, monkeypatch)
    out = tmp_path / "out"
    first = dead_units.main(["--checkpoint", str(checkpoint), "--out", str(out)])
    checkpoint.unlink()  # the machine that trained it is gone
    other = second_checkpoint(tmp_path)
    argv = ["--add", "--checkpoint", str(other), "--out", str(out)]
    added = dead_units.main(argv)
    record = json.loads((out / "dead_units.json").read_text())
    assert record["runs"] == added and [r["name"] for r in added] == ["other-run"]
    assert [c["runs"] for c in record["earlier"]] == [first] and [r["name"] for r in first] == ["run"]
    readme = (out / "README.md").read_text()
    assert table_runs(readme) == ["run", "other-run"]  # one table, both rows
    assert "- Command (rows: run): `" in readme and "- Command (rows: other-run): `" in readme
    assert f"--add --checkpoint {other}" in readme
    written = {f: f.stat().st_mtime_ns for f in out.iterdir()}
    assert dead_units.main(argv) == added and len(loads) == 2  # the same --add again: nothing to do
    assert "nothing to do" in capsys.readouterr().out
    assert {f: f.stat().st_mtime_ns for f in out.iterdir()} == written


def test_add_counts_a_checkpoint_counted_before_again_in_place_of_its_row(tmp_path, monkeypatch):
    checkpoint, _data, loads = on_disk(tmp_path, monkeypatch)
    out, other = tmp_path / "out", second_checkpoint(tmp_path)
    dead_units.main(["--checkpoint", str(checkpoint), str(other), "--out", str(out)])
    other.write_text("trained on")
    dead_units.main(["--add", "--checkpoint", str(other), "--out", str(out)])
    record = json.loads((out / "dead_units.json").read_text())
    assert [r["name"] for c in [*record["earlier"], record] for r in c["runs"]] == ["run", "other-run"]
    assert len(loads) == 3 and table_runs((out / "README.md").read_text()) == ["run", "other-run"]


def test_without_add_the_record_holds_this_count_only(tmp_path, monkeypatch):
    checkpoint, _data, loads = on_disk(tmp_path, monkeypatch)
    out, other = tmp_path / "out", second_checkpoint(tmp_path)
    dead_units.main(["--checkpoint", str(checkpoint), "--out", str(out)])
    dead_units.main(["--add", "--checkpoint", str(other), "--out", str(out)])
    dead_units.main(["--checkpoint", str(other), "--out", str(out)])  # its count, but earlier rows beside it
    record = json.loads((out / "dead_units.json").read_text())
    assert len(loads) == 3 and "earlier" not in record and [r["name"] for r in record["runs"]] == ["other-run"]
    assert table_runs((out / "README.md").read_text()) == ["other-run"]


@pytest.mark.parametrize("what", ["split", "not-json"])
def test_add_to_another_kind_of_count_is_a_one_line_error_that_writes_nothing(what, tmp_path, monkeypatch):
    checkpoint, _data, loads = on_disk(tmp_path, monkeypatch)
    out, other = tmp_path / "out", second_checkpoint(tmp_path)
    dead_units.main(["--checkpoint", str(checkpoint), "--out", str(out)])
    argv = ["--add", "--checkpoint", str(other), "--out", str(out)]
    if what == "split":
        error, message = ConfigError, "--add: .*dead_units.json counted with other settings .*same --data, --split"
        argv += ["--split", "test"]
    else:
        (out / "dead_units.json").write_text("{")
        error, message = DataError, "dead_units.json is not a count dead_units wrote: move it away"
    written = {f: f.read_bytes() for f in out.iterdir()}
    with pytest.raises(error, match=message):
        dead_units.main(argv)
    assert len(loads) == 1 and {f: f.read_bytes() for f in out.iterdir()} == written
