"""The benchmark runs end to end on a tiny size, and its measuring tools measure what they claim.

No timing is asserted: the figures live in results/bench/, written by `make bench`.
"""

import dataclasses
import json
import subprocess
import sys
from collections import Counter

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from fairseq_residual.schemes import SCHEMES
from fairseq_residual_tools import console
from fairseq_residual_tools.bench import cli, isolation, measure, memory, report
from fairseq_residual_tools.bench.measure import interleaved, pool_layouts, ratio_summary, speed_table
from fairseq_residual_tools.bench.steps import SyntheticTask, TrainingStep, synthetic_batch
from fairseq_residual_tools.bench.variants import ATTN_RES_BLOCK, TINY, Variant, build_variant, variants

#: what does not depend on the scheme (the device, a fresh process) is checked on these variants only
SUBSET = dataclasses.replace(TINY, schemes=("residual", "hc"))


def cells(line):
    """The cells of a Markdown table row, without the padding."""
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


@pytest.fixture(scope="module")
def tiny_record(tmp_path_factory, one_torch_thread):  # measure.run sets 1 thread: restored after the module
    record = measure.run(
        [TINY],
        warmup=0,
        reps=2,
        threads=1,
        command="pytest",
        fresh_process_memory=False,
        fresh_process_per_size=False,
        log=lambda m: None,
        gen_reps=3,
        layouts=2,
    )
    out = tmp_path_factory.mktemp("bench")
    report.write(record, out)
    return record, out


def test_tiny_benchmark_covers_stock_transformers_and_every_registered_scheme(tiny_record):
    record, out = tiny_record
    saved = json.loads((out / "bench.json").read_text())
    assert saved["command"] == "pytest" and saved["versions"]["torch"] == torch.__version__
    (size,) = saved["sizes"]
    # attn-res followed by its Block variant
    schemes = [v for name in SCHEMES for v in ((name, ATTN_RES_BLOCK) if name == "attn-res" else (name,))]
    expected = ["stock-post", "stock-pre", *schemes]
    assert list(size["variants"]) == expected
    for table in ("train", "generate", "memory"):
        assert list(size[table]) == expected
    for name in expected:
        # two layouts of 2 training and 3 generation rounds each, pooled
        assert len(size["train"][name]["wall_s"]) == 4 and min(size["train"][name]["tokens_per_s"]) > 0
        assert min(size["train"][name]["user_s"]) > 0 and min(size["train"][name]["minor_faults"]) >= 0
        assert len(size["generate"][name]["wall_s"]) == 6 and min(size["generate"][name]["sentences_per_s"]) > 0
    # the reference's ratio to itself is exactly one in every round
    assert size["train"]["stock-pre"]["ratio_to_reference"] == {"min": 1.0, "median": 1.0, "max": 1.0}
    assert size["memory"]["stock-pre"]["peak_mb_ratio"] == 1.0


def test_an_explicit_cpu_device_measures_what_the_default_measures(tiny_record):
    default, _ = tiny_record
    explicit = measure.run(
        [SUBSET],
        warmup=0,
        reps=1,
        threads=1,
        command="pytest",
        fresh_process_memory=False,
        fresh_process_per_size=False,
        log=lambda m: None,
        device="cpu",
    )
    assert explicit["device"] == default["device"] == "cpu" and explicit["gpu"] is default["gpu"] is None
    assert explicit.keys() == default.keys()
    (size,), (default_size,) = explicit["sizes"], default["sizes"]
    assert size.keys() == default_size.keys()
    assert list(size["variants"]) == ["stock-post", "stock-pre", *SUBSET.schemes]
    assert size["parameters"] == {n: default_size["parameters"][n] for n in size["variants"]}
    for table in ("train", "generate", "memory"):
        assert {n: r.keys() for n, r in size[table].items()} == {n: default_size[table][n].keys() for n in size[table]}
    # the same weights, batch and (deterministic) saved activations: the same bytes
    assert {n: m["saved_mb"] for n, m in size["memory"].items()} == {
        n: default_size["memory"][n]["saved_mb"] for n in size["memory"]
    }
    assert size["memory"]["stock-pre"]["rss_rise_mb"] is not None  # the CPU probes ran


def test_models_and_batches_are_built_on_the_requested_device():
    # the meta device allocates nothing, so this needs no GPU
    task = SyntheticTask(TINY.vocab)
    model = build_variant(Variant("residual", "residual", "residual"), TINY, task, device="meta")
    sample = synthetic_batch(task, 4, 7, 6, device="meta")
    assert {p.device.type for p in model.parameters()} == {"meta"}
    assert sample["net_input"]["src_tokens"].device.type == "meta" and sample["target"].shape == (4, 6)


def test_interleaved_timing_waits_for_the_device_after_every_run():
    events = []
    jobs = {name: (lambda name=name: events.append(name)) for name in ("a", "b")}
    times = interleaved(jobs, warmup=1, reps=2, wait=lambda: events.append("wait"))
    assert events == ["a", "wait", "b", "wait"] * 3
    assert len(times["a"]["wall_s"]) == 2


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_device_cuda_without_a_gpu_stops_with_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["fairseq-residual-bench", "--device", "cuda", "--out", str(tmp_path / "out")])
    assert console.bench() == 1
    err = capsys.readouterr().err
    assert err.startswith("error: --device cuda: no CUDA GPU visible") and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--device", "cuda", "--malloc", "keep"], "leave it out with --device cuda"),
        (["--device", "tpu"], "invalid choice: 'tpu'"),
        (["--same-process", "--malloc", "keep"], "with --same-process set MALLOC_* variables instead"),
        (["--counts-only", "--device", "cuda"], "--counts-only counts on the CPU in this process"),
        (["--counts-only", "--malloc", "keep"], "leave out --device, --malloc and --same-process"),
    ],
)
def test_bad_arguments_are_refused(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.parse_args(argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_a_gpu_record_names_the_gpu_and_its_allocator(tiny_record):
    record, _ = tiny_record
    text = report.markdown({**record, "device": "cuda", "gpu": "NVIDIA H200 (CUDA 12.8)"})
    assert "on NVIDIA H200 (CUDA 12.8), tensors in PyTorch's caching allocator" in text
    assert "memory allocator:" not in text and "memory allocator:" in report.markdown(record)


def test_generation_does_the_same_work_for_every_variant(tiny_record):
    record, _ = tiny_record
    (size,) = record["sizes"]
    # min_len = max_len: every hypothesis of every model has gen_len tokens plus EOS
    lengths = {name: g["hypothesis_lengths"] for name, g in size["generate"].items()}
    assert set(map(tuple, lengths.values())) == {(TINY.gen_len + 1,)}


def test_markdown_table_has_one_row_per_variant_and_the_targets(tiny_record):
    record, out = tiny_record
    text = (out / "bench.md").read_text()
    rows = [cells(line) for line in text.splitlines() if line.startswith("| ")]
    for name in ["stock-post", "stock-pre", *SCHEMES]:  # one row in the speed table, one in memory
        assert sum(row[0] == name for row in rows) == 2
    assert "ResiDual peak training memory / stock Pre-LN" in text
    assert "pytest" in text and torch.__version__ in text


@pytest.mark.slow  # a fresh measuring process
def test_memory_probe_in_a_fresh_process_matches_the_in_process_probe():
    variant = next(v for v in variants() if v.name == "residual")
    fresh = isolation.in_fresh_process("memory_probe", threads=1, size=TINY, variant=variant)
    here = memory.memory_probe(TINY, variant)
    # parameters, Adam state and saved activations are deterministic
    assert fresh["persistent_mb"] == here["persistent_mb"]
    assert fresh["saved_mb"] == here["saved_mb"]
    assert fresh["peak_mb"] == pytest.approx(here["peak_mb"], rel=0.02)


@pytest.mark.slow  # a fresh measuring process
def test_a_size_measured_in_a_fresh_process_reports_what_the_in_process_run_reports(tiny_record):
    record, _ = tiny_record
    fresh = isolation.in_fresh_process(
        "measure_size", threads=1, malloc="keep", size=SUBSET, warmup=0, reps=1, fresh_process_memory=False, gen_reps=2
    )
    (here,) = record["sizes"]
    # the child ran with the requested glibc settings, and says so in its result
    assert fresh["malloc_environment"] == isolation.MALLOC_SETTINGS["keep"]
    assert list(fresh["variants"]) == ["stock-post", "stock-pre", *SUBSET.schemes]
    assert fresh["parameters"] == {n: here["parameters"][n] for n in fresh["variants"]}
    for name in fresh["variants"]:
        assert len(fresh["train"][name]["wall_s"]) == 1 and fresh["train"][name]["tokens_per_s"][0] > 0
        assert len(fresh["generate"][name]["wall_s"]) == 2
        assert fresh["generate"][name]["hypothesis_lengths"] == here["generate"][name]["hypothesis_lengths"]
        assert fresh["memory"][name]["saved_mb"] == here["memory"][name]["saved_mb"]


def test_layouts_build_and_run_the_variants_in_rotated_orders(tiny_record):
    record, _ = tiny_record
    (size,) = record["sizes"]
    names = list(size["variants"])
    assert size["layouts"] == [names, names[1:] + names[:1]]


def test_pooled_layouts_put_the_rounds_side_by_side_and_take_ratios_over_all_of_them():
    def result(ref_walls, other_walls, memory=None):
        def timing(walls):
            return {
                "wall_s": walls,
                "user_s": walls,
                "sys_s": [0.0] * len(walls),
                "minor_faults": [0] * len(walls),
            }  # noqa: E731

        times = {"stock-pre": timing(ref_walls), "residual": timing(other_walls)}
        r = {
            "size": {"gen_batch": 4},
            "variants": {"stock-pre": "", "residual": ""},
            "layouts": [["x"]],
            "train_tokens": 100,
            "train": speed_table(times, 100, "tokens_per_s"),
            "generate": speed_table(times, 4, "sentences_per_s"),
        }
        for name in times:
            r["generate"][name]["hypothesis_lengths"] = [6]
        if memory:
            r["memory"] = memory
        return r

    pooled = pool_layouts([result([1.0, 1.0], [2.0, 1.0], memory={"m": 1}), result([3.0], [1.0])])
    assert pooled["train"]["residual"]["wall_s"] == [2.0, 1.0, 1.0]
    assert pooled["train"]["residual"]["tokens_per_s"] == [50.0, 100.0, 100.0]
    # per-round ratios 0.5, 1 and 3
    assert pooled["generate"]["residual"]["ratio_to_reference"] == {"min": 0.5, "median": 1.0, "max": 3.0}
    assert pooled["memory"] == {"m": 1} and len(pooled["layouts"]) == 2


@pytest.mark.slow  # a fresh measuring process
def test_a_failing_size_process_is_reported_as_that_size():
    broken = dataclasses.replace(TINY, arch="no_such_arch")
    with pytest.raises(RuntimeError, match="measure_size of tiny failed"):
        isolation.in_fresh_process("measure_size", threads=1, size=broken, warmup=0, reps=1, fresh_process_memory=False)


def test_malloc_environment_replaces_every_malloc_variable_and_keeps_the_rest():
    base = {"PATH": "/bin", "MALLOC_ARENA_MAX": "2", "MALLOC_TRIM_THRESHOLD_": "1"}
    assert isolation.malloc_environment("default", base) == {"PATH": "/bin"}
    assert isolation.malloc_environment("keep", base) == {"PATH": "/bin", **isolation.MALLOC_SETTINGS["keep"]}
    with pytest.raises(ValueError, match="unknown malloc setting 'jemalloc'; choose from keep, default"):
        isolation.malloc_environment("jemalloc", base)


def test_ratio_summary_is_reference_time_over_variant_time_in_each_round():
    summary = ratio_summary([1.0, 2.0, 3.0], [2.0, 2.0, 1.0])
    assert summary == {"min": 0.5, "median": 1.0, "max": 3.0}


def test_saved_bytes_count_each_storage_once_and_skip_parameters():
    linear = torch.nn.Linear(8, 4)
    x = torch.randn(10, 8)

    def forward():
        r = torch.relu(linear(x))  # saves x (10 x 8 floats, not the weight) and r (10 x 4)
        return (r * r[:, :1]).sum()  # saves r again and a view of r: no new storage

    assert memory.saved_for_backward_bytes(forward, linear.parameters()) == 10 * 8 * 4 + 10 * 4 * 4


def test_allocation_peak_sees_a_transient_tensor():
    def step():
        big = torch.ones(4 * 2**20)  # 16 MiB, freed on return
        return big.sum()

    assert memory.step_allocation_peak_bytes(step) >= 16 * 2**20


class _OpCounter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.counts = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.counts[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def _training_step_profile(scheme):
    task = SyntheticTask(TINY.vocab)
    sample = synthetic_batch(task, 4, 7, 6)
    step = TrainingStep(build_variant(Variant(scheme, scheme, scheme), TINY, task), sample)
    counter = _OpCounter()
    with counter:
        step.loss().backward()
    return counter.counts, memory.saved_for_backward_bytes(step.loss, step.model.parameters())


def test_residual_uses_the_linear_kernels_and_saved_memory_of_pre_ln():
    pre_ops, pre_saved = _training_step_profile("pre")
    residual_ops, residual_saved = _training_step_profile("residual")
    # every projection gets a contiguous input and runs as fused addmm, as in Pre-LN
    # (a strided view of the packed stream falls back to mm + a separate bias add)
    assert residual_ops["addmm"] == pre_ops["addmm"] and residual_ops["mm"] == pre_ops["mm"]
    # x^d + s * x^f is one add: no multiply at s = 1, in forward or backward
    assert residual_ops["mul"] == pre_ops["mul"]
    # backward keeps x^ln and LN inputs as Pre-LN keeps LN inputs and outputs, and
    # nothing of x^d but the input of the final LN (Pre-LN's final LN input): no
    # layer's packed [x^ln ; x^d] stays alive until backward
    assert residual_saved == pre_saved


def test_targets_are_judged_at_the_three_decimals_the_report_shows():
    def checks(peak, generate):
        rounds = {"stock-pre": {"wall_s": [1.0] * 10}}
        size = {
            "size": {"name": "s"},
            "train": {**rounds, "residual": {"wall_s": [1.0] * 10}},
            "generate": {**rounds, "residual": {"wall_s": [1 / generate] * 10}},
            "memory": {"residual": {"peak_mb_ratio": peak}},
        }
        return [c["holds"] for c in report.target_checks({"sizes": [size]})]

    # 256 bytes more in 2.9 GB (the scheme tag buffer) is 1.000 at the report's precision; 0.1 % more is not
    assert checks(1.0000000843, 0.990) == [True, True, True]
    assert checks(1.001, 0.9894) == [True, False, False]


def test_the_interval_of_a_median_is_distribution_free_and_widens_with_fewer_rounds():
    # n = 10: the 2nd and 9th values, coverage 1 - 2 (1 + 10) / 1024
    assert report.median_interval(range(1, 11)) == (2, 9, 1 - 22 / 1024)
    # n = 4 cannot reach 95 %: min and max, 1 - 2 / 16
    assert report.median_interval([3, 1, 4, 2]) == (1, 4, 0.875)
    # n = 20: the 6th and 15th (coverage 95.9 %; the 7th and 14th would be 88.5 %)
    low, high, coverage = report.median_interval(range(1, 21))
    assert (low, high) == (6, 15) and 0.95 < coverage < 0.96


def test_a_speed_target_holds_only_when_the_whole_interval_meets_it():
    def verdict(ratios, target="residual_train"):
        n = len(ratios)
        size = {
            "size": {"name": "s"},
            "train": {"stock-pre": {"wall_s": [1.0] * n}, "residual": {"wall_s": [1 / r for r in ratios]}},
            "generate": {"stock-pre": {"wall_s": [1.0]}, "residual": {"wall_s": [1.0]}},
            "memory": {"residual": {"peak_mb_ratio": 1.0}},
        }
        (check,) = [c for c in report.target_checks({"sizes": [size]}) if c["what"].startswith("ResiDual training")]
        return check["verdict"], round(check["value"], 3)

    assert verdict([0.995] * 10) == ("holds", 0.995)
    # a median above the target with rounds below it: the interval (2nd-9th of 10) reaches under 0.99
    assert verdict([0.95, 0.96, 0.97, 1.0, 1.01, 1.02, 1.03, 1.04, 1.05, 1.06]) == ("not resolved", 1.015)
    assert verdict([0.90, 0.95, 0.96, 0.97, 0.97, 0.97, 0.98, 0.98, 0.985, 1.05]) == ("does not hold", 0.97)


def test_the_peak_probe_keeps_kineto_lines_off_stderr_and_everything_else_on_it(tmp_path):
    """torch's profiler (kineto) writes two lines to fd 2 at each profile whatever its log level; the
    benchmark's memory probes run it once per variant, so `make bench` printed 26 of them."""
    code = (
        "import os, torch\n"
        "from torch.profiler import ProfilerActivity, profile\n"
        "from fairseq_residual_tools.bench.memory import step_allocation_peak_bytes\n"
        "with profile(activities=[ProfilerActivity.CPU], profile_memory=True):\n"
        "    torch.ones(10) + 1\n"
        "os.write(2, b'--- probe\\n')\n"
        "peak = step_allocation_peak_bytes(lambda: (torch.ones(1000) + 1, os.write(2, b'the step\\'s own line\\n')))\n"
        "print(peak)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    plain, probed = proc.stderr.split("--- probe\n")
    assert "] profiler_start" in plain  # what kineto prints: the premise
    assert probed == "the step's own line\n"
    assert int(proc.stdout) >= 2 * 4000


def test_a_measuring_process_keeps_library_debug_lines_quiet_though_fairseqs_import_asks_for_them():
    import subprocess
    import sys

    emit = "logging.getLogger('filelock').debug('Lock acquired'); logging.getLogger('filelock').warning('kept')"
    bare = subprocess.run(
        [sys.executable, "-c", f"import logging, fairseq.models; {emit}"], capture_output=True, text=True, check=True
    )
    assert "DEBUG:filelock:Lock acquired" in bare.stderr  # fairseq's import turned the root logger to DEBUG
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import logging; from fairseq_residual_tools.bench import isolation; isolation.quiet_root_logger(); "
            f"import fairseq.models; {emit}",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "Lock acquired" not in child.stderr and "WARNING:filelock:kept" in child.stderr
