"""The shared "fails" rule reads fairseq logs and flags NaN, explosion and no progress."""

from fairseq_residual_tools.training_log import divergence, parse_log, seconds_per_update, training_seconds


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


def test_json_records_and_a_text_log_of_the_same_run_read_alike():
    """The harness logs JSON since cells log to TensorBoard; logs written before in the simple format still parse."""
    json_log = (
        '2026 | INFO | train_inner | {"epoch": 1, "update": 0.2, "loss": "9.1", "num_updates": "10"}\n'
        '2026 | INFO | valid | {"epoch": 1, "valid_loss": "8.2", "valid_nll_loss": "8", "valid_num_updates": "50"}\n'
        '2026 | INFO | train | {"epoch": 1, "train_loss": "8.7", "train_num_updates": "50"}\n'
    )
    text_log = (
        "2026 | INFO | train_inner | epoch 001:     10 / 50 loss=9.1, ppl=1, num_updates=10\n"
        "2026 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 8.2 | nll_loss 8 | num_updates 50\n"
        "2026 | INFO | train | epoch 001 | loss 8.7 | nll_loss 8.5 | num_updates 50 | lr 0.001\n"
    )
    assert parse_log(json_log) == parse_log(text_log)
    assert parse_log(json_log).valid == [(50, 8.2)] and parse_log(json_log).train == [(10, 9.1)]


# Training curves recorded by the CPU study (results/cpu-study/results.json, runs[].train_curve):
# E12D12, width 64, lr 0.002 with 40 warmup updates, loss logged every 10 updates.
# Post-LN reaches the unigram plateau (~9.0) by update 50 and stays there; ResiDual keeps learning.
RECORDED_STUCK_POST_E12D12 = [
    11.54,
    10.76,
    10.25,
    9.48,
    9.16,
    9.04,
    9.07,
    9.02,
    9.07,
    9.01,
    8.97,
    9.05,
    8.91,
    8.98,
    9.03,
]
RECORDED_HEALTHY_RESIDUAL_E12D12 = [
    12.61, 10.96, 10.35, 9.49, 9.19, 9.03, 9.01, 8.83, 8.77, 8.63, 8.49, 8.54, 8.3, 8.29, 8.32,
]  # fmt: skip


def test_a_recorded_run_stuck_on_the_plateau_fails():
    reason = divergence(parse_log(json_lines(RECORDED_STUCK_POST_E12D12)))
    assert reason is not None and "plateau" in reason


def test_a_recorded_healthy_run_of_the_same_length_trains():
    assert divergence(parse_log(json_lines(RECORDED_HEALTHY_RESIDUAL_E12D12))) is None


def test_a_converged_run_is_not_a_plateau():
    # fast learning, then flat far below the starting loss: converged, not stuck
    losses = [11.0, 6.0, 3.0] + [2.0 + 0.01 * (i % 3) for i in range(12)]
    assert divergence(parse_log(json_lines(losses))) is None


def test_a_resumed_run_counts_each_update_once():
    # a run resumed from checkpoint_last.pt logs the updates after that checkpoint again
    valid = '2026 | INFO | valid | {"epoch": 1, "valid_loss": "8.5", "valid_num_updates": "30"}'
    log = parse_log("\n".join([json_lines([9.0, 8.0, 7.0]), valid, json_lines([7.1], start=30), valid]))
    assert log.train == [(10, 9.0), (20, 8.0), (30, 7.1)]
    assert log.valid == [(30, 8.5)]


def attempt(start: str, seconds: int, valid_at: int = None) -> str:
    """One fairseq-train attempt of a run's log: its command, a line at ``start`` (hh:mm:ss) and one ``seconds``
    later, validating at ``valid_at`` if given."""
    h, m, s = map(int, start.split(":"))
    end = h * 3600 + m * 60 + s + seconds
    last = f"2026-01-01 {end // 3600:02d}:{end // 60 % 60:02d}:{end % 60:02d} | INFO | "
    last += f'valid | {{"valid_loss": "5.0", "valid_num_updates": "{valid_at}"}}' if valid_at else "train_inner | x"
    return f"$ fairseq-train ...\n2026-01-01 {start} | INFO | start\n{last}\n"


def test_a_runs_pace_is_its_median_attempt_so_a_pause_or_a_killed_attempt_does_not_move_it(tmp_path):
    out = tmp_path / "train.out"
    out.write_text(
        attempt("10:00:00", 300, 250)  # 1.2 s per update
        + attempt("10:05:00", 1000, 500)  # stopped (SIGSTOP) for 700 s of its 250 updates
        + attempt("10:30:00", 200)  # killed before it validated: trained again by the next attempt
        + attempt("11:00:00", 310, 750)
        + attempt("11:10:00", 600, 1250)  # two intervals in one attempt
    )
    assert training_seconds(out) == 300 + 1000 + 200 + 310 + 600
    assert seconds_per_update(out) == 1.22  # the median of 1.2, 1.2, 1.24 and 4.0 s per update
    out.write_text(attempt("10:00:00", 200))
    assert seconds_per_update(out) is None
