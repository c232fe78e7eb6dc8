"""The counter counts what it claims (operations, bytes of their tensors, FLOPs; views free), and a step's counts
are the same on every run."""

import pytest
import torch

from fairseq_residual_tools.bench import counts
from fairseq_residual_tools.bench.steps import SyntheticTask, TrainingStep, synthetic_batch
from fairseq_residual_tools.bench.variants import TINY, Variant, build_variant

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_two_runs_count_exactly_the_same_work():
    first, second = counts.step_counts(TINY, "residual"), counts.step_counts(TINY, "residual")
    assert first == second
    assert first["train"]["ops"] > 1000 and first["generate"]["ops"] > 500


def test_the_counts_do_not_depend_on_the_values_computed():
    task = SyntheticTask(TINY.vocab)
    sample = synthetic_batch(task, TINY.batch, TINY.src_len, TINY.tgt_len)

    def counted(seed):
        model = build_variant(Variant("residual", "", "residual"), TINY, task)
        torch.manual_seed(seed)  # other weights and other dropout masks
        with torch.no_grad():
            for p in model.parameters():
                p.normal_()
        step = TrainingStep(model, sample)
        step()
        return counts.count(step)

    assert counted(1) == counted(2)


def test_an_add_counts_its_operands_and_a_view_is_free():
    x, y = torch.ones(3, 4), torch.ones(4, 3)
    found = counts.count(lambda: x + y.t())
    assert found["ops"] == 1 and found["by_kind"]["add"] == {"ops": 1, "flops": 0, "bytes": 3 * 12 * 4}
    assert found["free"] == {"t": 1}


def test_a_broadcast_operand_counts_its_own_elements_and_a_scalar_none():
    x, row = torch.ones(5, 8), torch.ones(8)
    assert counts.count(lambda: x * row)["bytes"] == (40 + 8 + 40) * 4
    assert counts.count(lambda: x * torch.tensor(2.0))["bytes"] == (40 + 40) * 4  # 0-dim: a kernel argument
    assert counts.count(lambda: x.expand(3, 5, 8).sum())["bytes"] == 40 * 4  # stride-0 dimension read once


def test_an_in_place_operation_reads_and_writes_its_tensor():
    x, y = torch.ones(6), torch.ones(6)
    found = counts.count(lambda: x.add_(y))
    assert found["by_kind"] == {"add_": {"ops": 1, "flops": 0, "bytes": 3 * 6 * 4}} and found["free"] == {}


def test_allocations_are_free_and_a_fill_is_not():
    found = counts.count(lambda: (torch.empty(10), torch.zeros(10)))
    assert found["free"] == {"empty": 1} and found["by_kind"]["zeros"]["bytes"] == 40


def test_matrix_products_count_flop_counters_flops():
    a, b, bias = torch.ones(3, 5), torch.ones(5, 7), torch.ones(7)
    assert counts.count(lambda: a @ b)["flops"] == 2 * 3 * 5 * 7
    found = counts.count(lambda: torch.nn.functional.linear(a, b.t(), bias))
    assert found["by_kind"]["addmm"]["flops"] == 2 * 3 * 5 * 7 and found["ops"] == 1


def test_a_training_step_counts_backward_and_every_parameters_update():
    found = counts.step_counts(TINY, "pre")
    model = build_variant(Variant("pre", "", "pre"), TINY, SyntheticTask(TINY.vocab))
    train = found["train"]["by_kind"]
    parameters = len(list(model.parameters()))
    # Adam's single-tensor loop: one lerp_ (first moment) and one addcdiv_ (the update) per parameter
    assert train["lerp_"]["ops"] == train["addcdiv_"]["ops"] == parameters
    assert train["native_layer_norm_backward"]["ops"] == train["native_layer_norm"]["ops"] > 0
    assert "native_layer_norm_backward" not in found["generate"]["by_kind"]
    assert found["train"]["saved_tensors"] > 0 and found["train"]["saved_bytes"] > 0


def test_an_unknown_variant_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="unknown variant 'prenorm'; choose from stock-post, stock-pre, post"):
        counts.step_counts(TINY, "prenorm")
