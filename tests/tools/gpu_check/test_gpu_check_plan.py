"""The GPU check's plan: every run of the issue's section 2, their estimates within the budget, and the CPU path."""

import shlex

import pytest

from fairseq_residual_tools.gpu_check import estimate, plan
from fairseq_residual_tools.gpu_check.cli import parse_args
from fairseq_residual_tools.gpu_check.estimate import Estimator

#: counts of a dispatch-bound model: each workload's operations grow with its depth, FLOPs with depth and batch
RECORD = {"host_seconds_per_op": 10e-6, "startup_s": 8.0, "import_s": 4.0}


@pytest.fixture
def estimator(monkeypatch):
    def counts(w):
        return {"ops": 1100 * w.layers + 3000, "flops": 5e9 * w.layers * w.sentences * w.length / 100}

    monkeypatch.setattr(estimate, "count_step", counts)
    return Estimator(RECORD)


def parts_of(argv, estimator, spent=None):
    return {p.name: p for p in plan.build(parse_args(argv), estimator, 1, spent=spent)}


def options(run):
    return shlex.join(run.command)


def test_the_default_run_holds_every_part_of_the_issue_within_nine_minutes(estimator, tmp_path):
    parts = parts_of(["--out", str(tmp_path)], estimator)
    assert [p.name for p in parts.values() if p.default] == ["precision", "claims", "bench"]
    assert not parts["compiled"].default  # opt-in
    assert plan.default_seconds(list(parts.values())) <= plan.BUDGET_S
    precision = [r for r in parts["precision"].runs if r.label != "torchrun"]
    assert len(precision) == 12 and {r.label.split()[1] for r in precision} == {"post", "pre", "residual"}
    for name, flags in plan.PRECISIONS.items():
        runs = [r for r in precision if r.label.startswith(name + " ")]
        assert len(runs) == 3 and all(options(r).endswith(shlex.join(flags)) for r in runs)
    assert all(
        "--encoder-layers 18 --decoder-layers 18" in options(r) and "--max-update 200" in options(r) for r in precision
    )
    (torchrun,) = [r for r in parts["precision"].runs if r.label == "torchrun"]
    assert "scripts/train.sh --cell iwslt14/residual/e6d6" in options(torchrun)
    assert "--launcher torchrun" in options(torchrun) and "--gpus 1" in options(torchrun)
    (bench,) = parts["bench"].runs
    assert "--device cuda --layouts=1" in options(bench)
    assert "--sizes iwslt-e6d6,wmt-e18d18 --schemes residual --out" in options(bench)


def test_the_claims_train_three_schemes_scaled_residual_and_hc_at_two_depths_with_and_without_warmup_then_score_each(
    estimator, tmp_path
):
    claims = parts_of(["--with-hc", "--out", str(tmp_path)], estimator)["claims"]
    assert len(claims.runs) == 20 and len(claims.then) == 20
    labels = {r.label for r in claims.runs}
    schemes = ("post", "pre", "residual", "residual-c0.5", "hc")
    assert labels == {f"{s} e{d}d{d} {w}" for s in schemes for d in (6, 12) for w in ("warmup", "no-warmup")}
    for run in claims.runs:  # only the scaled variant sets the output scale, on ResiDual
        scaled = run.label.startswith("residual-c0.5 ")
        assert ("--residual-scheme residual --encoder-layers" in options(run)) == run.label.startswith("residual")
        assert ("--residual-output-scale 0.5" in options(run)) == scaled
        assert ("--residual-scheme hc --encoder-layers" in options(run)) == run.label.startswith("hc ")
    for run in claims.runs:
        text = options(run)
        assert "--arch residual_transformer_iwslt_de_en" in text and "--lr 5e-4" in text and "--fp16" not in text
        start_lr = "5e-4" if "no-warmup" in run.label else "1e-7"
        assert f"--warmup-init-lr {start_lr}" in text
        assert f"--warmup-updates {max(10, run.planned_updates // 10)}" in text
        assert f"--max-update {4 * run.planned_updates}" in text and "--stop-time-hours" in text
    assert all("fairseq_cli.generate" in options(r) and "--beam 5" in options(r) for r in claims.then)
    assert {r.save_dir for r in claims.runs} == {r.save_dir for r in claims.then}


@pytest.mark.parametrize("argv", [["--skip-output-scale"], ["--schemes", "post,pre"]])
def test_the_scaled_residual_is_left_out_on_request_or_without_residual(argv, estimator, tmp_path):
    claims = parts_of([*argv, "--out", str(tmp_path)], estimator)["claims"]
    assert not any("--residual-output-scale" in options(r) for r in claims.runs)
    assert len(claims.runs) == 4 * (len({r.label.split()[0] for r in claims.runs}))


def test_hc_is_opt_in_and_takes_its_time_from_the_claims(estimator, tmp_path):
    default = parts_of(["--with-hc", "--out", str(tmp_path)], estimator)  # with hc
    skipped = parts_of(["--out", str(tmp_path)], estimator)  # the default: without
    assert len(skipped["claims"].runs) == 16 and not any(r.label.startswith("hc ") for r in skipped["claims"].runs)
    assert options(skipped["bench"].runs[0]).endswith(f"--schemes residual --out {tmp_path / 'bench'}")
    # hc's variant in the bench: one more memory probe process and its rounds per size; the claims get the rest
    assert skipped["bench"].estimate_s < default["bench"].estimate_s
    assert skipped["claims"].estimate_s - default["claims"].estimate_s == pytest.approx(
        default["bench"].estimate_s - skipped["bench"].estimate_s
    )
    assert all(a.planned_updates > b.planned_updates for a, b in zip(skipped["claims"].runs, default["claims"].runs))
    for parts in (default, skipped):
        assert plan.default_seconds(list(parts.values())) == pytest.approx(plan.BUDGET_S)


def test_the_claims_get_the_time_the_run_has_left(estimator, tmp_path):
    argv = ["--out", str(tmp_path)]
    early = parts_of(argv, estimator, spent=100.0)["claims"]
    late = parts_of(argv, estimator, spent=250.0)["claims"]
    assert early.estimate_s - late.estimate_s == pytest.approx(150.0)
    assert all(a.planned_updates > b.planned_updates for a, b in zip(early.runs, late.runs))


def test_the_cpu_path_runs_every_part_at_tiny_sizes_and_says_why_plain_fp16_is_left_out(estimator, tmp_path):
    parts = parts_of(["--cpu-tiny", "--with-compiled", "--out", str(tmp_path)], estimator)
    skipped = {r.label: r.skip for r in parts["precision"].runs if r.skip}
    assert set(skipped) == {"fp16 post", "fp16 pre", "fp16 residual"} and "needs CUDA" in skipped["fp16 pre"]
    running = [r for p in parts.values() for r in p.runs + p.then if not r.skip]
    assert all("--cpu" in r.command or "cpu" in r.command for r in running), [r.label for r in running]
    assert all("--encoder-embed-dim 16" in options(r) for r in parts["claims"].runs)
    assert {r.label.split()[1] for r in parts["claims"].runs} == {"e1d1", "e2d2"}
    assert "--backend aot_eager" in options(parts["compiled"].runs[0])
    # the CPU's times are not the budget's: its trainings stop at their fixed updates only
    assert all("--stop-time-hours" not in options(r) for r in parts["precision"].runs + parts["claims"].runs)
    assert all(f"--max-update {plan.CPU_TINY.claims_updates}" in options(r) for r in parts["claims"].runs)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--schemes", "post,foo"], "unknown scheme or precision foo"),
        (["--precisions", "fp8"], "unknown scheme or precision fp8"),
        (["--schemes", "post,residual"], "must include pre"),
        (["--depths", "6,x"], "comma-separated layer counts"),
        (["--only", "compiled,speed"], "--only compiled,speed: choose parts from precision,claims,bench,compiled"),
    ],
)
def test_bad_arguments_are_refused(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_siamese_and_attention_residuals_are_opt_in_as_hc_is_and_join_the_claims_and_the_bench(estimator, tmp_path):
    default = parts_of(["--out", str(tmp_path)], estimator)
    both = parts_of(["--with", "siamese,attn-res", "--out", str(tmp_path)], estimator)
    labels = {r.label for r in both["claims"].runs}
    assert len(both["claims"].runs) == 16 + 8 and len(both["claims"].then) == 24
    assert {
        f"{s} e{d}d{d} {w}" for s in ("siamese", "attn-res") for d in (6, 12) for w in ("warmup", "no-warmup")
    } <= labels
    assert not any(r.label.split()[0] in plan.OPT_IN for r in default["claims"].runs)
    assert options(both["bench"].runs[0]).endswith(f"--schemes residual,siamese,attn-res --out {tmp_path / 'bench'}")
    assert plan.default_seconds(list(both.values())) == pytest.approx(plan.BUDGET_S)
    assert parse_args(["--with-hc", "--with", "hc,siamese"]).with_schemes == ["hc", "siamese"]
    with pytest.raises(SystemExit):
        parse_args(["--with", "keel"])


def test_only_runs_the_parts_named_and_the_claims_then_get_the_whole_budget(estimator, tmp_path):
    """The H200's first run left no device time for the opt-in compiled part: --only compiled runs it alone."""
    compiled = parts_of(["--only", "compiled", "--out", str(tmp_path)], estimator)
    assert [p.name for p in compiled.values() if p.default] == ["compiled"]
    assert plan.default_seconds(list(compiled.values())) <= plan.BUDGET_S  # it fits alone, as it did not beside them
    default = parts_of(["--out", str(tmp_path)], estimator)
    claims = parts_of(["--only", "claims", "--out", str(tmp_path)], estimator)
    assert [p.name for p in claims.values() if p.default] == ["claims"]
    # with neither the precision part before them nor the bench after, the claims train for all the time left
    gained = default["precision"].estimate_s + default["bench"].estimate_s
    assert claims["claims"].estimate_s - default["claims"].estimate_s == pytest.approx(gained)
    assert plan.default_seconds(list(claims.values())) == pytest.approx(plan.BUDGET_S)


def test_the_fused_loss_part_is_opt_in_and_measures_both_criteria_at_iwslt_and_wmt_in_fp16_bf16(estimator, tmp_path):
    default = parts_of(["--out", str(tmp_path)], estimator)
    assert not default["fused-loss"].default
    alone = parts_of(["--only", "fused-loss", "--out", str(tmp_path)], estimator)
    assert [p.name for p in alone.values() if p.default] == ["fused-loss"]
    (run,) = alone["fused-loss"].runs
    assert " -m fairseq_residual_tools.bench.fused_loss --device cuda --kernel auto " in options(run)
    assert "--sizes iwslt-e6d6 wmt-e6d6 --precisions fp16 bf16 --schemes pre residual" in options(run)
    assert options(run).endswith(f"--out {tmp_path / 'fused-loss'}")
    # eight fresh processes, each at least the minimum seconds: within the window alone
    assert 8 * plan.FUSED_LOSS_MIN_S < alone["fused-loss"].estimate_s
    assert plan.default_seconds(list(alone.values())) <= plan.BUDGET_S
    both = parts_of(["--with-fused-loss", "--out", str(tmp_path)], estimator)
    # beside the default parts it takes its time from the claims' trainings (down to their floor)
    assert both["fused-loss"].default and both["claims"].estimate_s < default["claims"].estimate_s
    tiny = parts_of(["--cpu-tiny", "--with-fused-loss", "--out", str(tmp_path)], estimator)["fused-loss"].runs[0]
    assert "--device cpu --sizes tiny --precisions fp32" in options(tiny)
