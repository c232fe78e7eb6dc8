"""The fused criteria against fairseq's own: ``fused_label_smoothed_cross_entropy`` against
``label_smoothed_cross_entropy`` and ``fused_cross_entropy`` against ``cross_entropy``, on fairseq's own batches
(the demo data-bin through fairseq's translation task and batch iterator), for every scheme over several Adam
updates, with each option of the stock criterion, in validation, under autocast, wrapped in FSDP; and the refusal
where a model has no plain output projection.

Tolerance. Both criteria compute the same float32 terms; the fused one sums them a chunk at a time (and leaves
padding out instead of adding its zeros): the loss agrees within a few units of float32 rounding (6e-8) relative,
the output projection's gradient (the criterion's own) within 1e-5 of its largest entry. The rest of backward
carries the difference in ∂loss/∂features through the stack linearly: each parameter's gradient agrees within 1e-5
of the step's largest gradient, not of its own, which can be a near-cancellation (the key projections' biases, 0 in
exact arithmetic; the first HC layer's stream mixes, whose streams are equal copies) holding rounding noise in both.
Over three updates the two models drift apart by what Adam makes of those differences: the losses of the third
update still agree within 1e-5 relative."""

import pytest
import torch
from fairseq.criterions.cross_entropy import CrossEntropyCriterion
from fairseq.criterions.label_smoothed_cross_entropy import LabelSmoothedCrossEntropyCriterion
from helpers import TinyTask, build_lm, build_model, cpu_stream_patches, gloo_world_of_one_in, lm_batch

from fairseq_residual.criterions import FusedCrossEntropyCriterion, FusedLabelSmoothedCrossEntropyCriterion
from fairseq_residual.errors import ConfigError
from fairseq_residual.schemes import SCHEMES

pytestmark = pytest.mark.usefixtures("one_torch_thread")

UPDATES = 3


@pytest.fixture(scope="module")
def translation(demo_databin):
    """fairseq's translation task on the demo data-bin, and the first batches of its training iterator."""
    from fairseq.tasks.translation import TranslationConfig, TranslationTask

    task = TranslationTask.setup_task(
        TranslationConfig(
            data=str(demo_databin.databin),
            source_lang="src",
            target_lang="tgt",
            dataset_impl="mmap",
            train_subset="train",
            required_seq_len_multiple=1,
        )
    )
    task.load_dataset("train")
    epoch = task.get_batch_iterator(task.dataset("train"), max_tokens=400, seed=1).next_epoch_itr(shuffle=True)
    return task, [next(epoch) for _ in range(UPDATES)]


def criteria(task, label_smoothing=0.1, sentence_avg=False, ignore_prefix_size=0, report_accuracy=False, **fused):
    options = (sentence_avg, label_smoothing, ignore_prefix_size, report_accuracy)
    stock = LabelSmoothedCrossEntropyCriterion(task, *options)
    return stock, FusedLabelSmoothedCrossEntropyCriterion(task, *options, **fused)


def step(criterion, model, sample, seed):
    """One forward and backward (dropout seeded): the loss, the logging output and every parameter's gradient."""
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    loss, sample_size, log = criterion(model, sample)
    loss.backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return loss.detach(), sample_size, log, grads


def assert_same_step(got, expected, grad_atol=1e-5):
    loss, sample_size, log, grads = got
    torch.testing.assert_close(loss, expected[0], rtol=5e-7, atol=0)
    assert sample_size == expected[1]
    assert log.keys() == expected[2].keys()
    for key, value in expected[2].items():
        if torch.is_tensor(value):
            torch.testing.assert_close(log[key], value, rtol=5e-7, atol=0, msg=key)
        else:
            assert log[key] == value, key
    assert grads.keys() == expected[3].keys()
    largest = max(e.abs().max().item() for e in expected[3].values())
    for name, e in expected[3].items():
        scale = e.abs().max().item() if name.endswith("output_projection.weight") else largest
        named = lambda m, name=name: f"{name}: {m}"  # noqa: E731
        torch.testing.assert_close(grads[name], e, rtol=0, atol=grad_atol * scale, msg=named)


def train_side_by_side(task, batches, scheme, **model_options):
    """The same model trained with each criterion for UPDATES Adam updates on the same batches (dropout 0.1)."""
    stock, fused = criteria(task)
    models = []
    for _ in range(2):
        torch.manual_seed(0)
        model = build_model(task, scheme=scheme, layers=2, dropout=0.1, **model_options).train()
        models.append((model, torch.optim.Adam(model.parameters(), lr=1e-3)))
    losses = []
    for update, sample in enumerate(batches):
        steps = []
        for criterion, (model, optimizer) in zip((stock, fused), models):
            steps.append(step(criterion, model, sample, seed=update))
            optimizer.step()
        assert_same_step(steps[1], steps[0])
        losses.append((steps[0][0], steps[1][0]))
    return losses, models


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_every_scheme_trains_with_stocks_losses_and_gradients_over_several_updates(translation, scheme):
    task, batches = translation
    losses, _ = train_side_by_side(task, batches, scheme)
    assert losses[0][0] != losses[-1][0]  # the models moved
    torch.testing.assert_close(losses[-1][1], losses[-1][0], rtol=1e-5, atol=0)


@pytest.mark.parametrize(
    "embeddings, shared",
    [
        (dict(share_all_embeddings=True), True),
        (dict(share_all_embeddings=False, share_decoder_input_output_embed=True), True),
        (dict(share_all_embeddings=False, share_decoder_input_output_embed=False), False),
    ],
    ids=["all-shared", "decoder-shared", "separate"],
)
def test_shared_and_separate_embeddings_get_stocks_gradients(translation, embeddings, shared):
    task, batches = translation
    _, models = train_side_by_side(task, batches[:1], "residual", **embeddings)
    decoder = models[1][0].decoder
    assert (decoder.output_projection.weight is decoder.embed_tokens.weight) == shared
    assert decoder.output_projection.weight.grad.abs().sum() > 0  # the fused gradient reached it (and was stock's)


@pytest.mark.parametrize(
    "options",
    [dict(sentence_avg=True), dict(report_accuracy=True), dict(ignore_prefix_size=2), dict(label_smoothing=0.0)],
    ids=["sentence-avg", "report-accuracy", "ignore-prefix-size", "no-smoothing"],
)
def test_each_option_of_the_stock_criterion_gives_its_loss_logs_and_gradients(translation, options):
    task, batches = translation
    torch.manual_seed(0)
    model = build_model(task, scheme="residual", layers=2).train()
    stock, fused = criteria(task, **options)
    expected, got = step(stock, model, batches[0], 0), step(fused, model, batches[0], 0)
    assert_same_step(got, expected)
    if options.get("report_accuracy"):
        assert got[2]["total"] == batches[0]["target"].ne(task.target_dictionary.pad()).sum().item()


def test_any_chunk_size_gives_the_same_step(translation):
    task, batches = translation
    torch.manual_seed(0)
    model = build_model(task, scheme="pre", layers=2).train()
    stock, _ = criteria(task)
    expected = step(stock, model, batches[0], 0)
    for rows in (1, 7, 64, 10_000):
        assert_same_step(step(criteria(task, fused_loss_chunk_rows=rows)[1], model, batches[0], 0), expected)


def test_validation_gives_stocks_sums_without_gradients(translation):
    task, batches = translation
    model = build_model(task, scheme="residual", layers=2)  # eval mode
    stock, fused = criteria(task, report_accuracy=True)
    with torch.no_grad():
        expected, got = stock(model, batches[1]), fused(model, batches[1])
    assert not got[0].requires_grad
    torch.testing.assert_close(got[0], expected[0], rtol=5e-7, atol=0)
    assert {k: v for k, v in got[2].items() if not torch.is_tensor(v)} == {
        k: v for k, v in expected[2].items() if not torch.is_tensor(v)
    }


def test_bfloat16_autocast_gives_stocks_loss_and_gradients(translation):
    # under autocast both compute the projection in bfloat16 (autocast casts the Linear's inputs; the fused
    # criterion casts them alike) and the loss in float32; gradients within a few bfloat16 roundings (2^-8) of
    # the largest entry, the loss within float32 reordering of the same bfloat16 logits
    task, batches = translation
    torch.manual_seed(0)
    model = build_model(task, scheme="residual", layers=2).train()
    stock, fused = criteria(task)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = step(stock, model, batches[0], 0)
        got = step(fused, model, batches[0], 0)
    torch.testing.assert_close(got[0], expected[0], rtol=1e-6, atol=0)
    for name, e in expected[3].items():
        torch.testing.assert_close(got[3][name], e, rtol=0, atol=4 * 2**-8 * e.abs().max().item(), msg=name)


@pytest.mark.parametrize("scheme", ["pre", "residual"])
def test_the_language_models_fused_cross_entropy_gives_stocks_loss_and_gradients(scheme):
    task = TinyTask()
    tokens = lm_batch(task)
    target = torch.roll(tokens, -1, 1)
    target[-1, -4:] = task.target_dictionary.pad()
    sample = dict(net_input=dict(src_tokens=tokens), target=target, ntokens=int(target.ne(1).sum()))
    model = build_lm(task, scheme=scheme).train()
    expected = step(CrossEntropyCriterion(task, False), model, sample, 0)
    got = step(FusedCrossEntropyCriterion(task, False, fused_loss_chunk_rows=5), model, sample, 0)
    assert_same_step(got, expected)


def test_an_adaptive_softmax_is_refused_in_one_line_naming_the_stock_criterion():
    task = TinyTask()
    model = build_lm(task, adaptive_softmax_cutoff="10,20").train()
    sample = dict(net_input=dict(src_tokens=lm_batch(task)), target=lm_batch(task), ntokens=27)
    with pytest.raises(ConfigError, match="has an adaptive softmax: use --criterion cross_entropy$"):
        FusedCrossEntropyCriterion(task, False)(model, sample)


def test_an_unknown_kernel_or_a_negative_chunk_is_a_one_line_error():
    task = TinyTask()
    with pytest.raises(ConfigError, match="--fused-loss-kernel triton: choose one of auto, torch, liger, cce"):
        FusedCrossEntropyCriterion(task, False, fused_loss_kernel="triton")
    with pytest.raises(ConfigError, match="--fused-loss-chunk-rows -1: give a positive number"):
        FusedCrossEntropyCriterion(task, False, fused_loss_chunk_rows=-1)


def test_per_token_losses_are_the_stock_criterions(translation):
    task, batches = translation
    model = build_model(task, scheme="residual", layers=2)
    stock, fused = criteria(task)
    with torch.no_grad():
        expected, got = stock(model, batches[0], reduce=False), fused(model, batches[0], reduce=False)
    torch.testing.assert_close(got[0], expected[0], rtol=0, atol=0)


@pytest.fixture
def fsdp_world(tmp_path, monkeypatch):
    """One worker in a gloo group, fairscale's FSDP on the CPU (helpers.cpu_stream_patches), as in test_fsdp.py."""
    pytest.importorskip("fairscale.nn.data_parallel.fully_sharded_data_parallel")
    for target, name, value in cpu_stream_patches():
        monkeypatch.setattr(target, name, value)
    with gloo_world_of_one_in(tmp_path):
        yield


@pytest.mark.parametrize("each_layer", [False, True], ids=["model", "each-layer"])
def test_under_fsdp_the_fused_criterion_gives_the_unwrapped_models_loss_and_update(translation, fsdp_world, each_layer):
    # the output projection is the root's parameter: FSDP keeps the root's full parameters after its forward, the
    # criterion reads the projection there, and its gradient reaches the flat parameter FSDP reduces. The wrapped
    # model's loss and SGD update equal the unwrapped model's with the same (fused) criterion, within test_fsdp.py's
    # tolerance; the fused criterion's equality to stock's is the tests above

    from fairseq.dataclass.configs import DistributedTrainingConfig
    from fairseq.distributed import fsdp_enable_wrap, fsdp_wrap

    task, batches = translation
    _, fused = criteria(task)
    options = dict(scheme="residual", layers=2, checkpoint_activations=each_layer)
    torch.manual_seed(0)
    plain = build_model(task, **options).train()
    config = DistributedTrainingConfig(
        ddp_backend="fully_sharded", distributed_world_size=1, fp16=False, memory_efficient_fp16=False
    )
    torch.manual_seed(0)
    with fsdp_enable_wrap(config):
        wrapped = fsdp_wrap(build_model(task, **options).train())
    results = []
    for model in (plain, wrapped):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        torch.manual_seed(0)
        loss = fused(model, batches[0])[0]
        loss.backward()
        optimizer.step()
        results.append((loss.detach(), {k: v.clone() for k, v in model.state_dict().items() if v.is_floating_point()}))
    torch.testing.assert_close(results[1][0], results[0][0], rtol=5e-7, atol=0)
    assert results[1][1].keys() == results[0][1].keys()
    for name, expected in results[0][1].items():
        torch.testing.assert_close(results[1][1][name], expected, rtol=1e-5, atol=1e-7, msg=name)
