"""The shared "fails" rule reads fairseq logs and flags NaN, explosion and no progress."""

from fairseq_residual_tools.training_log import divergence, parse_log


def json_lines(losses, start=10):
    return "\n".join(
        f'2026-01-01 | INFO | train_inner | {{"epoch": 1, "update": 0.5, "loss": "{x}", '
        f'"num_updates": "{start * (i + 1)}"}}'
        for i, x in enumerate(losses)
    )


def test_a_decreasing_loss_trains():
    log = parse_log(json_lines([9.0, 7.5, 6.0, 5.2, 4.8]))
    assert [u for u, _ in log.train] == [10, 20, 30, 40, 50]
    assert divergence(log) is None


def test_nan_loss_fails():
    assert "NaN" in divergence(parse_log(json_lines([9.0, 7.0, "nan"])))


def test_fairseq_loss_scale_error_fails():
    text = json_lines([9.0, 8.0]) + "\nFloatingPointError: Minimum loss scale reached (0.0001)."
    assert divergence(parse_log(text)).startswith("loss became NaN")


def test_exploding_loss_fails():
    assert "exploded" in divergence(parse_log(json_lines([9.0, 7.0, 6.0, 5.0, 12.0, 11.0])))


def test_flat_loss_is_no_progress():
    assert "no progress" in divergence(parse_log(json_lines([9.0, 9.1, 8.9, 9.0])))


def test_epoch_averages_are_used_only_without_interval_losses():
    summary = '2026 | INFO | train | {"epoch": 1, "train_loss": "8.9", "train_num_updates": "40"}'
    assert parse_log(json_lines([9.0, 7.0, 5.0]) + "\n" + summary).train == [(10, 9.0), (20, 7.0), (30, 5.0)]
    assert parse_log(summary).train == [(40, 8.9)]


def test_a_run_that_just_started_is_not_called_failed():
    assert divergence(parse_log(json_lines([9.0, 9.1]))) is None


def test_simple_format_and_validation_lines():
    text = (
        "2026 | INFO | train_inner | epoch 001:     10 / 50 loss=9.1, ppl=1, num_updates=10\n"
        "2026 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 8.2 | nll_loss 8 | num_updates 50\n"
        "2026 | INFO | train | epoch 001 | loss 8.7 | nll_loss 8.5 | num_updates 50 | lr 0.001\n"
    )
    log = parse_log(text)
    assert log.valid == [(50, 8.2)] and log.train == [(10, 9.1)]
