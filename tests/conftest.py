"""Shared fixtures: one torch thread for tiny models, one prepared data-bin per session.

Helpers (tiny models, CLI runs) are in helpers.py."""

import pytest
import torch


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
