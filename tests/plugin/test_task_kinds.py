"""A language model's data or checkpoint given to a translation command, and the reverse: one line naming the mix-up.

The commands are those of docs/language-models.md and docs/usage.md as written (tiny sizes and one update appended,
so that a check that does not fire cannot start a long training), and the hub's loaders; each is given the other
task's data-bin, data-prep folder or checkpoint, and must end in one ``error:`` line that says what it was given
and what reads it.
"""

import shutil
from argparse import Namespace

import pytest
from fixtures_dataprep import write_monolingual
from helpers import PLUGIN_DIR, ROOT, TINY_MODEL, doc_commands, run_cli, train_args

from fairseq_residual.errors import ArchitectureMismatchError, DataError
from fairseq_residual.hub import load_language_model, load_translator

pytestmark = pytest.mark.slow  # fairseq-train, -generate, -eval-lm and -hydra-train run as processes

TINY_LM = ["--decoder-layers", "1", "--decoder-embed-dim", "16", "--decoder-ffn-embed-dim", "16"]
TINY_LM += ["--decoder-attention-heads", "2", "--tokens-per-sample", "32", "--max-tokens", "256"]
ONE_UPDATE = ["--max-update", "1", "--cpu", "--num-workers", "0", "--no-epoch-checkpoints", "--seed", "1"]

LM_DATA = "is a language-model (monolingual) data-bin"
MT_DATA = "is a translation data-bin"
LM_CHECKPOINT = "is a language model's checkpoint"
MT_CHECKPOINT = "is a translation model's checkpoint"


def lm_train(data, save_dir):
    """docs/language-models.md's fairseq-train command on ``data``, tiny and one update."""
    args = doc_commands("language-models.md")["fairseq-train"]
    args = [PLUGIN_DIR if a == "fairseq_residual" else a for a in args]
    args[0], args[args.index("--save-dir") + 1] = str(data), str(save_dir)
    return ["fairseq_cli.train", *args, *TINY_LM, *ONE_UPDATE]


def mt_train(data, save_dir):
    """docs/usage.md's fairseq-train command on ``data``, tiny and one update."""
    args = [PLUGIN_DIR if a == "fairseq_residual" else a for a in doc_commands("usage.md")["fairseq-train"]]
    args[0] = str(data)
    return ["fairseq_cli.train", *args, "--save-dir", str(save_dir), *TINY_MODEL, *ONE_UPDATE]


def eval_lm(data, checkpoint):
    """docs/language-models.md's fairseq-eval-lm command on ``data`` with ``checkpoint``."""
    args = doc_commands("language-models.md")["fairseq-eval-lm"]
    args = [PLUGIN_DIR if a == "fairseq_residual" else a for a in args]
    args[0], args[args.index("--path") + 1] = str(data), str(checkpoint)
    return ["fairseq_cli.eval_lm", *args, "--cpu", "--num-workers", "0"]


def generate(data, checkpoint):
    """docs/usage.md's fairseq-generate command on ``data`` with ``checkpoint``."""
    args = [PLUGIN_DIR if a == "fairseq_residual" else a for a in doc_commands("usage.md")["fairseq-generate"]]
    args[0], args[args.index("--path") + 1] = str(data), str(checkpoint)
    return ["fairseq_cli.generate", *args, "--cpu", "--num-workers", "0"]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A language model's and a translation's data-prep folders (OUT, OUT/bin) and checkpoints, each the smallest
    the docs' commands make: 60 lines of text, one update of a tiny model."""
    from fairseq_residual_tools.dataprep import custom, monolingual
    from fairseq_residual_tools.demo.corpus import write_corpus

    root = tmp_path_factory.mktemp("kinds")
    text = write_monolingual(root / "lm-raw", sizes=(("train", 60), ("valid", 8), ("test", 8)))
    lm_out = root / "lm"
    prepare = ["--train", text["train"], "--valid", text["valid"], "--test", text["test"], "--out", lm_out]
    assert monolingual.main([*map(str, prepare), "--bpe-merges", "50", "--workers", "1", "--quiet"]) == 0
    pairs = write_corpus(root / "mt-raw", seed=1, src="de", tgt="en", train=60, valid=8, test=8)
    mt_out = root / "mt"
    prefixes = ["--train-prefix", pairs["train"], "--valid-prefix", pairs["valid"], "--test-prefix", pairs["test"]]
    custom.main([*prefixes, "--src", "de", "--tgt", "en", "--bpe-merges", "50", "--out", str(mt_out), "--quiet"])
    run_cli(lm_train(lm_out / "bin", root / "lm-checkpoints"), cwd=root)
    run_cli(train_args(mt_out / "bin", root / "mt-checkpoints", max_update=1), cwd=root)
    return Namespace(
        root=root,
        lm=lm_out,
        mt=mt_out,
        lm_checkpoint=root / "lm-checkpoints" / "checkpoint_best.pt",
        mt_checkpoint=root / "mt-checkpoints" / "checkpoint_best.pt",
    )


def assert_one_line(proc, *fragments):
    """The command failed with one ``error:`` line (its last) holding ``fragments``, and no traceback."""
    last = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert last.startswith("error: ") and all(f in last for f in fragments), last


def test_the_pages_have_the_commands_these_tests_run():
    assert {"fairseq-train", "fairseq-eval-lm"} <= set(doc_commands("language-models.md"))
    assert {"fairseq-train", "fairseq-generate", "fairseq-hydra-train"} <= set(doc_commands("usage.md"))


def resumed(checkpoint, save_dir):
    """A --save-dir whose checkpoint_last.pt is a copy of ``checkpoint``: a training resumes from it."""
    save_dir.mkdir()
    return shutil.copy(checkpoint, save_dir / "checkpoint_last.pt")


#: case -> what is given, what the command is given it with (the fixture's folders, a fresh folder), and what
#: the one line says of it
CASES = {
    "lm train, translation data": (
        lambda m, tmp: m.mt / "bin",
        lambda m, tmp, given: lm_train(given, tmp),
        [MT_DATA, "--task translation"],
    ),
    "lm train, translation checkpoint": (
        lambda m, tmp: resumed(m.mt_checkpoint, tmp),
        lambda m, tmp, given: lm_train(m.lm / "bin", tmp),
        [MT_CHECKPOINT, "--task language_modeling"],
    ),
    "eval-lm, translation data": (
        lambda m, tmp: m.mt / "bin",
        lambda m, tmp, given: eval_lm(given, m.lm_checkpoint),
        [MT_DATA],
    ),
    "eval-lm, translation checkpoint": (
        lambda m, tmp: m.mt_checkpoint,
        lambda m, tmp, given: eval_lm(m.lm / "bin", given),
        [MT_CHECKPOINT],
    ),
    "translation train, lm data": (
        lambda m, tmp: m.lm / "bin",
        lambda m, tmp, given: mt_train(given, tmp),
        [LM_DATA, "--task language_modeling reads it"],
    ),
    "translation train, lm checkpoint": (
        lambda m, tmp: resumed(m.lm_checkpoint, tmp),
        lambda m, tmp, given: mt_train(m.mt / "bin", tmp),
        [LM_CHECKPOINT, "--task translation"],
    ),
    "generate, lm data": (
        lambda m, tmp: m.lm / "bin",
        lambda m, tmp, given: generate(given, m.mt_checkpoint),
        [LM_DATA],
    ),
    "generate, lm checkpoint": (
        lambda m, tmp: m.lm_checkpoint,
        lambda m, tmp, given: generate(m.mt / "bin", given),
        [LM_CHECKPOINT],
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_command_given_the_other_tasks_data_or_checkpoint_ends_in_one_line(made, case, tmp_path):
    given_of, command, says = CASES[case]
    given = given_of(made, tmp_path / "save")
    proc = run_cli(command(made, tmp_path / "save", given), cwd=made.root, check=False)
    assert_one_line(proc, f"{given} ", *says)


def test_hydra_train_of_a_paper_config_on_a_language_model_data_bin_ends_in_one_line(made, tmp_path):
    args = doc_commands("usage.md")["fairseq-hydra-train"]
    given = {"--config-dir": str(ROOT / "configs")}
    args = [given.get(previous, a) for previous, a in zip([None, *args], args)]
    args = [f"task.data={made.lm / 'bin'}" if a.startswith("task.data=") else a for a in args]
    args = [f"common.user_dir={PLUGIN_DIR}" if a.startswith("common.user_dir=") else a for a in args]
    proc = run_cli(["fairseq_cli.hydra_train", *args], cwd=tmp_path, check=False, fresh=True)
    assert_one_line(proc, str(made.lm / "bin"), LM_DATA, "--task language_modeling reads it")


def test_load_language_model_names_a_translation_folder_and_a_translation_checkpoint(made):
    with pytest.raises(DataError, match=f"{made.mt} is a translation data-prep folder.*load_translator reads it"):
        load_language_model(made.lm_checkpoint, made.mt)
    with pytest.raises(ArchitectureMismatchError, match=f"{made.mt_checkpoint} {MT_CHECKPOINT}.*load_translator"):
        load_language_model(made.mt_checkpoint, made.lm)


def test_load_translator_names_a_language_model_folder_and_a_language_model_checkpoint(made):
    with pytest.raises(DataError, match=f"{made.lm} is a language-model data-prep folder.*load_language_model reads"):
        load_translator(made.mt_checkpoint, made.lm)
    with pytest.raises(ArchitectureMismatchError, match=f"{made.lm_checkpoint} {LM_CHECKPOINT}.*load_language_model"):
        load_translator(made.lm_checkpoint, made.mt)


def test_each_kind_still_loads_with_its_own_folder(made):
    """The checks leave the right pairing alone: the hub loads both, the model of the right class."""
    assert type(load_language_model(made.lm_checkpoint, made.lm).hub.models[0]).__name__.endswith("LanguageModel")
    assert type(load_translator(made.mt_checkpoint, made.mt).hub.models[0]).__name__ == "ResidualTransformerModel"
