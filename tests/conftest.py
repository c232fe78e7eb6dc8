"""Shared fixtures: one torch thread for tiny models, one prepared data-bin per session.

Helpers (tiny models, CLI runs) are in helpers.py."""

from pathlib import Path

import pytest
import torch

#: the longest test files, in seconds of one worker (`pytest -n 2 --durations=0`, summed per file, on the 2-core
#: machine at 80c2070, 2026-12-07). ``make test`` hands whole files to its workers (--dist loadfile) in collection
#: order; a long file handed out near the end keeps one worker busy while the other has nothing left, so these go
#: first, longest first (a stale figure costs only balance, never a test)
LONGEST_FILES = {
    "tests/plugin/test_compile.py": 211,
    "tests/plugin/test_compiled_training.py": 115,
    "tests/tools/bench/test_bench.py": 84,
    "tests/tools/test_kill_stress.py": 79,
    "tests/tools/demo/test_demo.py": 64,
    "tests/plugin/test_quiet.py": 61,
    "tests/tools/gpu_check/test_gpu_check_cli.py": 60,
    "tests/plugin/test_hub.py": 58,
    "tests/tools/repro/test_repro_chain.py": 55,
    "tests/tools/repro/test_repro_launch.py": 51,
    "tests/tools/analysis/test_lm_study.py": 43,
    "tests/plugin/test_checkpoint_reading.py": 40,
    "tests/plugin/test_device_residency.py": 39,
    "tests/tools/gpu_check/test_gpu_check_bible.py": 35,
    "tests/plugin/test_fsdp.py": 34,
    "tests/plugin/test_finished_training.py": 33,
    "tests/tools/dataprep/test_dataprep_recipes.py": 30,
    "tests/plugin/test_hydra_configs.py": 29,
    "tests/plugin/test_cli.py": 25,
    "tests/plugin/schemes/test_schemes_cli.py": 23,
    "tests/plugin/test_stateless_layers.py": 22,
    "tests/tools/analysis/test_bible_study.py": 21,
    "tests/tools/test_packaging.py": 21,
}


@pytest.fixture(autouse=True)
def no_checkpoints_folder_in_the_working_directory():
    """fairseq-train makes ./checkpoints wherever it runs without --save-dir (even with --no-save): a test's training
    writes into its own folders, never into the checkout the tests run from."""
    stray = Path.cwd() / "checkpoints"
    there = stray.exists()
    yield
    if not there and stray.exists():
        pytest.fail(f"the test made {stray}: give its training a --save-dir of its own")


def pytest_collection_modifyitems(config, items):
    """The longest files first (LONGEST_FILES); the rest, and the tests within a file, in collection order."""
    items.sort(key=lambda item: -LONGEST_FILES.get(item.nodeid.split("::")[0], 0))


@pytest.fixture(autouse=True, scope="module")
def torch_threads_unchanged():
    """Every test module leaves torch's thread count as it found it (later modules time and size on it)."""
    threads = torch.get_num_threads()
    yield
    assert torch.get_num_threads() == threads, (
        f"torch's thread count changed from {threads} to {torch.get_num_threads()}"
    )


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models run fastest on one thread, and then a busy machine cannot oversubscribe them."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def demo_databin(tmp_path_factory):
    """A small data-bin from the embedded synthetic corpus, built by the real pipeline."""
    from fairseq_residual_tools.demo.prepare import prepare_demo_data

    work = tmp_path_factory.mktemp("demo-data")
    return prepare_demo_data(work, train=800, valid=40, test=40, bpe_merges=400)
