"""The model fingerprint that stands for "the code that made a run" in the studies' run keys."""

import logging

import pytest
from helpers import train_args

from fairseq_residual.schemes import SCHEMES
from fairseq_residual.schemes.residual import DualStreamLayer, DualStreamOutput
from fairseq_residual_tools.analysis.fingerprint import model_fingerprint


@pytest.fixture(scope="module")
def args_of(demo_databin, tmp_path_factory):
    save = tmp_path_factory.mktemp("fingerprint")

    def args(scheme="residual", *more):
        return [*train_args(demo_databin.databin, save, 0, scheme)[1:], *more]

    return args


def test_the_same_run_gives_the_same_fingerprint_and_another_scheme_or_seed_another(args_of):
    fingerprint = model_fingerprint(args_of("residual"))
    assert fingerprint == model_fingerprint(args_of("residual"))
    assert len(fingerprint.split()) == 3
    assert fingerprint != model_fingerprint(args_of("pre"))
    assert fingerprint != model_fingerprint(args_of("residual", "--seed", "2"))
    assert fingerprint != model_fingerprint(args_of("residual", "--residual-output-scale", "0.5"))


def test_the_fingerprint_leaves_fairseqs_logging_as_it_found_it(args_of, monkeypatch):
    # a training forked later from the same process (the tests' run_cli, a study's runs) logs its progress lines,
    # its per-epoch stats and "Saving checkpoint to" through fairseq's loggers
    fairseq_logger = logging.getLogger("fairseq")
    monkeypatch.setattr(fairseq_logger, "level", logging.INFO)
    model_fingerprint(args_of("pre"))
    assert fairseq_logger.level == logging.INFO


def test_code_that_changes_what_a_scheme_computes_changes_its_fingerprint(args_of, monkeypatch):
    before = model_fingerprint(args_of("residual"))
    sum_before = DualStreamLayer.residual_sum

    def dual_stream_without_the_attention(self, sublayer, x, residual, block_input, x_dual):
        out, new_dual = sum_before(self, sublayer, x, residual, block_input, x_dual)
        return out, x_dual if sublayer == "self_attn" else new_dual

    monkeypatch.setattr(DualStreamLayer, "residual_sum", dual_stream_without_the_attention)
    assert model_fingerprint(args_of("residual")) != before
    monkeypatch.undo()
    output_before = DualStreamOutput.forward
    monkeypatch.setattr(DualStreamOutput, "forward", lambda self, x_ln, x_dual: 1.5 * output_before(self, x_ln, x_dual))
    assert model_fingerprint(args_of("residual")) != before


def test_code_elsewhere_leaves_it_alone_a_new_scheme_beside_it_included(args_of, monkeypatch):
    before = model_fingerprint(args_of("residual"))
    monkeypatch.setitem(SCHEMES, "another", SCHEMES["pre"])
    assert model_fingerprint(args_of("residual")) == before


def test_it_does_not_depend_on_the_torch_thread_count(args_of, monkeypatch):
    import torch

    before = model_fingerprint(args_of("residual"))
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert model_fingerprint(args_of("residual")) == before
    finally:
        torch.set_num_threads(threads)
