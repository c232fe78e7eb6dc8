"""A missing data folder, a wrong language pair or a missing split is one line naming it, also under hydra."""

from argparse import Namespace

import pytest
from fairseq.data import Dictionary
from fairseq.tasks import translation
from helpers import PLUGIN_DIR, ROOT, run_cli

from fairseq_residual.data_folder import check_data_folder
from fairseq_residual.errors import DataError


def task_cfg(data, src=None, tgt=None):
    return Namespace(_name="translation", data=str(data), source_lang=src, target_lang=tgt)


def test_a_missing_data_folder_is_named(tmp_path):
    with pytest.raises(DataError, match=f"data folder {tmp_path / 'nope'} does not exist: .*data-prep/"):
        check_data_folder(task_cfg(tmp_path / "nope"))


def test_a_folder_without_binarised_data_points_at_the_data_bin(demo_databin):
    # data-prep's OUT instead of OUT/bin: fairseq says only "Could not infer language pair"
    with pytest.raises(DataError, match=f"{demo_databin.root} holds no binarised training data.*OUT/bin"):
        check_data_folder(task_cfg(demo_databin.root))


def test_a_folder_without_dict_txt_is_named_for_a_language_model(demo_databin):
    # data-prep's OUT instead of OUT/bin: fairseq's language_modeling task ends in FileNotFoundError dict.txt
    lm = Namespace(_name="language_modeling", data=str(demo_databin.root))
    with pytest.raises(DataError, match=f"{demo_databin.root} holds no dict.txt, so no language-model data-bin"):
        check_data_folder(lm)


def test_a_language_pair_the_folder_does_not_hold_is_named(demo_databin):
    with pytest.raises(DataError, match="--source-lang de: data folder .* has the pair src-tgt \\(no dict.de.txt\\)"):
        check_data_folder(task_cfg(demo_databin.databin, "de", "en"))
    check_data_folder(task_cfg(demo_databin.databin, "tgt", "src"))  # both directions of a joined data-bin


def test_a_missing_split_is_named(demo_databin):
    d = Dictionary.load(str(demo_databin.databin / "dict.src.txt"))
    with pytest.raises(DataError, match="has no 'test2' split for src-tgt .*fairseq-preprocess"):
        translation.load_langpair_dataset(
            str(demo_databin.databin), "test2", "src", d, "tgt", d, combine=False, dataset_impl=None,
            upsample_primary=1, left_pad_source=True, left_pad_target=False,
            max_source_positions=1024, max_target_positions=1024,
        )  # fmt: skip


def hydra_train(tmp_path, *overrides):
    return run_cli(
        [
            "fairseq_cli.hydra_train",
            "--config-dir",
            str(ROOT / "configs"),
            "--config-name",
            "small",
            f"common.user_dir={PLUGIN_DIR}",
            f"checkpoint.save_dir={tmp_path / 'ckpt'}",
            "optimization.max_update=1",
            f"hydra.run.dir={tmp_path / 'hydra'}",
            *overrides,
        ],
        cwd=tmp_path,
        check=False,
        fresh=True,
    )


def last_line_is_one_error(proc):
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "HYDRA_FULL_ERROR" not in proc.stderr
    (line,) = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.stderr.strip().splitlines()[-1] == line
    return line


@pytest.mark.slow
def test_hydra_train_on_a_missing_data_folder_ends_with_one_line(tmp_path):
    line = last_line_is_one_error(hydra_train(tmp_path, f"task.data={tmp_path / 'nope'}"))
    assert f"data folder {tmp_path / 'nope'} does not exist" in line


@pytest.mark.slow
def test_hydra_train_with_a_language_pair_not_in_the_data_folder_ends_with_one_line(demo_databin, tmp_path):
    proc = hydra_train(tmp_path, f"task.data={demo_databin.databin}", "+task.source_lang=de", "+task.target_lang=en")
    assert "no dict.de.txt" in last_line_is_one_error(proc)
