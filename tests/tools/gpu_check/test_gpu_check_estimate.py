"""The GPU check's time estimates: exact counts on the meta device, and the time model over them."""

import pytest

from fairseq_residual_tools.gpu_check import estimate
from fairseq_residual_tools.gpu_check.estimate import Estimator, Workload, count_step

TINY = dict(arch="residual_transformer_iwslt_de_en", vocab=50, length=5)


def test_counts_are_the_same_on_every_run_and_scale_as_the_work_does():
    small = Workload(layers=1, scheme="residual", sentences=3, **TINY)
    first, again = count_step(small), count_step(small)
    assert first == again
    doubled = count_step(Workload(layers=1, scheme="residual", sentences=6, **TINY))
    # the batch doubles every matrix product (attention included: the length is fixed); the operations stay
    assert doubled["flops"] == 2 * first["flops"] and doubled["ops"] == first["ops"]
    deeper = count_step(Workload(layers=2, scheme="residual", sentences=3, **TINY))
    assert deeper["ops"] > first["ops"] and deeper["flops"] > first["flops"]


@pytest.mark.parametrize("scheme", ["post", "pre", "residual", "hc"])
def test_counts_extended_from_depths_one_and_two_equal_a_direct_count(scheme):
    w = Workload(layers=4, scheme=scheme, sentences=3, **TINY)
    assert count_step(w) == estimate.count_at_depth(w)


def test_residual_launches_more_operations_than_pre_ln_for_the_same_arithmetic_in_its_layers():
    pre = count_step(Workload(layers=2, scheme="pre", sentences=3, **TINY))
    residual = count_step(Workload(layers=2, scheme="residual", sentences=3, **TINY))
    assert residual["ops"] > pre["ops"]  # the adds into x^d, forward and backward
    assert residual["flops"] == pre["flops"]  # the flop counter counts matrix products: the same ones


def record(per_op=10e-6, startup=8.0):
    return {"host_seconds_per_op": per_op, "startup_s": startup, "import_s": 4.0}


def test_an_update_takes_the_longer_of_the_hosts_launches_and_the_gpus_arithmetic(monkeypatch):
    counts = {"ops": 10_000, "flops": 2.0e12}
    monkeypatch.setattr(estimate, "count_step", lambda workload: counts)
    w = Workload(layers=6, scheme="pre", sentences=290, **TINY)
    e = Estimator(record())
    host = 10_000 * (10e-6 + estimate.LAUNCH_S)
    assert e.update(w) == pytest.approx(host)  # 2 TFLOP at 14 TFLOP/s is 0.14 s, below the launches' 0.15 s
    assert e.update(w, "fp16") == pytest.approx(host * estimate.REDUCED_PRECISION_OPS)
    # twelve such runs on one GPU: 24 TFLOP a round at fp32's rate, stretched by the sharing
    shared = e.update(w, "fp32", gpu_flops=12 * 2.0e12)
    assert shared == pytest.approx(24e12 / (estimate.GPU_TFLOPS["fp32"] * 1e12) * estimate.CONTENTION)
    assert e.startup() == 8.0 + estimate.CUDA_START_S and e.process_start() == 4.0 + estimate.CUDA_START_S


def test_the_host_time_per_operation_is_measured_and_positive():
    seconds = estimate.host_seconds_per_op(Workload(layers=1, scheme="residual", sentences=3, **TINY), steps=2)
    assert 0 < seconds < 1e-3


def test_missing_estimate_inputs_say_how_to_make_them(tmp_path):
    from fairseq_residual_tools.errors import UserError

    with pytest.raises(UserError, match="gpu_check.sh --calibrate"):
        Estimator.load(tmp_path / "estimates.json")


def test_the_host_time_per_operation_is_measured_again_on_the_machine_that_runs_the_check():
    e = Estimator(record(per_op=1.0))  # one second an operation: no machine is that slow
    measured = e.measure_host()
    assert 0 < measured < 1e-3 and e.record["host_seconds_per_op"] == measured
    assert e.record["host_seconds_per_op_calibrated"] == 1.0
