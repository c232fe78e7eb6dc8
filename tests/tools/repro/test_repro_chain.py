"""The whole chain on the demo corpus, prepared by data prep's custom recipe (lowercased, as IWSLT-14's): train two
schemes, average, generate, score, tables.

Two IWSLT-14 cells (Post-LN and ResiDual, E6D6) are shrunk with hydra overrides to
a few CPU seconds; the tables must mark them as not the paper's setting. A third
cell gets a diverged training log: it must read "fails", as in the paper. Cells
whose training did not finish (failed, interrupted) never show a score, unless
evaluated with --allow-unfinished, which the tables mark.
"""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
from helpers import ROOT, SCRIPTS, TINY
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from fairseq_residual_tools.dataprep import custom
from fairseq_residual_tools.errors import DataError
from fairseq_residual_tools.repro import cli, scoring
from fairseq_residual_tools.training_log import parse_log

pytestmark = pytest.mark.slow  # every test runs the harness's scripts, which start fairseq

CELLS = ("iwslt14/post/e6d6", "iwslt14/residual/e6d6")
SHRINK = [
    *TINY,
    "model.encoder_layers=2",
    "model.decoder_layers=2",
    "optimization.max_epoch=3",
    "optimization.lr=[0.002]",
    "lr_scheduler.warmup_updates=8",
]

LAUNCH = "### 2026-01-01 00:00:00 launch: python -m fairseq_residual_tools.repro.distributed_train ...\n"
NAN_LOG = LAUNCH + "".join(
    f"[2026-01-01][train_inner][INFO] - epoch 001:  {u} / 90 loss={x}, nll_loss=1, num_updates={u}, lr=0.001\n"
    for u, x in ((10, 11.2), (20, 9.8), (30, "nan"), (40, "nan"))
)
EXPLODING_LOG = LAUNCH + "".join(
    f"[2026-01-01][train_inner][INFO] - epoch 001:  {u} / 90 loss={x}, nll_loss=1, num_updates={u}, lr=0.001\n"
    for u, x in ((10, 11.0), (20, 9.0), (30, 8.0), (40, 7.5), (50, 21.0))
)


def run_all(commands, cwd):
    """Run the commands side by side (each is mostly single-threaded start-up)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    procs = [
        subprocess.Popen(c, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for c in commands
    ]
    outputs = [p.communicate()[0] for p in procs]
    for c, p, out in zip(commands, procs, outputs):
        assert p.returncode == 0, f"{' '.join(c)} failed:\n{out[-4000:]}"
    return outputs


def prepared_demo(raw_prefixes, out):
    """The demo corpus through data prep (``prepare-custom.sh --lowercase``): a data-bin with the untouched test text
    recorded beside it."""
    corpus = [f"--{split}-prefix={raw_prefixes[split]}" for split in ("train", "valid", "test")]
    options = ["--src", "src", "--tgt", "tgt", "--lowercase", "--max-len", "0", "--bpe-merges", "400"]
    assert custom.main([*corpus, *options, "--out", str(out), "--workers", "1", "--quiet"]) == 0
    return out / "bin"


@pytest.fixture(scope="module")
def chain(demo_databin, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("chain")
    work, results = tmp / "work", tmp / "results"
    data = prepared_demo(demo_databin.raw_prefixes, tmp / "data")
    common = ["--work", str(work), "--results", str(results), "--data", str(data), "--cpu"]
    train_out = run_all([["bash", str(SCRIPTS / "train.sh"), "--cell", c, *common, "--", *SHRINK] for c in CELLS], tmp)
    eval_out = run_all(
        [["bash", str(SCRIPTS / "evaluate.sh"), "--cell", c, *common, "--average", "2"] for c in CELLS], tmp
    )

    diverged = work / "iwslt14" / "post" / "e12d12"
    diverged.mkdir(parents=True)
    (diverged / "train.log").write_text(NAN_LOG)
    ended_with = json.loads((work / CELLS[0] / "launch.json").read_text())[-1]
    (diverged / "launch.json").write_text(json.dumps([{**ended_with, "returncode": 1}]))  # fairseq stops on NaN
    assert cli.main(["evaluate", "--cell", "iwslt14/post/e12d12", "--work", str(work), "--results", str(results)]) == 0
    exploding = work / "iwslt14" / "pre" / "e12d12" / "nowarmup"  # its launch ended, never evaluated
    exploding.mkdir(parents=True)
    (exploding / "train.log").write_text(EXPLODING_LOG)
    (exploding / "launch.json").write_text(json.dumps([{"returncode": 1}]))
    running = work / "iwslt14" / "residual" / "e12d12" / "nowarmup"  # first launch still running
    running.mkdir(parents=True)
    (running / "train.log").write_text(EXPLODING_LOG)
    no_data = work / "iwslt14" / "deepnet" / "e6d6"  # the issue: its only launch exited 1, no data
    no_data.mkdir(parents=True)
    (no_data / "train.log").write_text(
        LAUNCH + "FileNotFoundError: [Errno 2] No such file or directory: 'dict.de.txt'\n"
    )
    (no_data / "launch.json").write_text(json.dumps([{"returncode": 1}]))

    # the issue: a copy of a trained cell whose launch was killed (137, no train.done) was scored as measured
    killed = work / "iwslt14" / "pre" / "e6d6"
    shutil.copytree(work / CELLS[1], killed)
    (killed / "train.done").unlink()
    records = json.loads((killed / "launch.json").read_text())
    records[-1]["returncode"] = 137
    (killed / "launch.json").write_text(json.dumps(records))
    refused = subprocess.run(
        ["bash", str(SCRIPTS / "evaluate.sh"), "--cell", "iwslt14/pre/e6d6", *common, "--average", "2"],
        capture_output=True,
        text=True,
        cwd=tmp,
    )
    dry_run = subprocess.run(
        ["bash", str(SCRIPTS / "evaluate.sh"), "--cell", CELLS[0], *common, "--average", "2", "--dry-run"],
        capture_output=True,
        text=True,
        cwd=tmp,
    )
    allowed = ["--cell", "iwslt14/pre/e6d6", "--work", str(work), "--results", str(results), "--average", "2"]
    assert cli.main(["evaluate", *allowed, "--cpu", "--allow-unfinished"]) == 0
    # a score written before the state was checked, for a cell whose training was killed: not shown
    stale = results / "iwslt14" / "admin" / "e6d6.json"
    stale.parent.mkdir(parents=True)
    stale.write_text(json.dumps({"status": "measured", "scores": {"bleu": 33.0}, "training": {"deviations": []}}))
    (work / "iwslt14" / "admin" / "e6d6").mkdir(parents=True)
    (work / "iwslt14" / "admin" / "e6d6" / "train.log").write_text(EXPLODING_LOG.replace("loss=21.0", "loss=6.0"))
    (work / "iwslt14" / "admin" / "e6d6" / "launch.json").write_text(json.dumps([{"returncode": -9}]))

    tables = tmp / "tables.md"
    subprocess.run(
        [
            sys.executable,
            str(SCRIPTS / "make_tables.py"),
            "--results",
            str(results),
            "--work",
            str(work),
            "--out",
            str(tables),
        ],
        check=True,
        capture_output=True,
    )
    unrecorded = ["--cell", CELLS[1], "--work", str(work), "--results", str(tmp / "unrecorded"), "--average", "2"]
    with pytest.raises(DataError) as unrecorded_error:  # the demo's own data-bin: no data prep record beside it
        cli.main(["evaluate", *unrecorded, "--data", str(demo_databin.databin), "--cpu"])
    return dict(
        data=data,
        unrecorded_error=str(unrecorded_error.value),
        demo_data=demo_databin.databin,
        work=work,
        results=results,
        tables=tables.read_text(),
        train_out=train_out,
        eval_out=eval_out,
        refused=refused,
        dry_run=dry_run,
    )


def test_training_runs_the_cells_config_and_logs_to_the_cells_folder(chain):
    for cell, out in zip(CELLS, chain["train_out"]):
        cell_dir = chain["work"] / cell
        assert "effective batch: 1 CPU process x 4096 max tokens x update_freq 1 = 4,096 tokens per update" in out
        assert "training from the start" in out
        assert (cell_dir / "train.done").is_file()
        epochs = sorted(p.name for p in cell_dir.glob("checkpoint[0-9]*.pt"))
        assert epochs == ["checkpoint1.pt", "checkpoint2.pt", "checkpoint3.pt"]
        log = (cell_dir / "train.log").read_text()
        assert f"model.residual_scheme={cell.split('/')[1]}" in log.splitlines()[0]  # the launch line
        assert "done training" in log
        # JSON records (fairseq's --log-format json), the same losses in TensorBoard's event files
        curves = parse_log(log)
        assert curves.valid and '"valid_loss"' in log and "valid on 'valid' subset" not in log
        assert f"curves: tensorboard --logdir {cell_dir / 'tensorboard'}" in out
        events = EventAccumulator(str(cell_dir / "tensorboard" / "valid"))
        events.Reload()
        assert [(e.step, round(e.value, 3)) for e in events.Scalars("loss")] == curves.valid
        (launch,) = json.loads((cell_dir / "launch.json").read_text())
        assert launch["returncode"] == 0 and launch["launcher"] == "single"


def test_evaluation_averages_generates_and_scores_as_the_paper(chain):
    for cell, out in zip(CELLS, chain["eval_out"]):
        record = json.loads((chain["results"] / f"{cell}.json").read_text())
        assert record["status"] == "measured" and record["cell"] == cell
        assert [p.rsplit("/", 1)[1] for p in record["checkpoints"]] == ["checkpoint2.pt", "checkpoint3.pt"]
        assert record["averaged_checkpoint"].endswith("checkpoint.average2.pt")
        scores = record["scores"]
        assert scores["sentences"] == 40  # every test pair decoded
        # the figure is fairseq-generate's tokenised BLEU after BPE removal; recomputing it agrees
        gen = scoring.parse_generate((chain["work"] / cell / "evaluation" / "generate-test.txt").read_text())
        assert scores["bleu"] == gen.fairseq_bleu == scoring.tokenized_bleu(gen.hypotheses, gen.references)[0]
        assert "@@" not in " ".join(gen.hypotheses + gen.references)
        # sacreBLEU: the sacrebleu command on the untouched test text, -lc as the recipe lowercased
        untouched = chain["data"].parent / "test-text" / "test.tgt"
        hypotheses = chain["work"] / cell / "evaluation" / "hypotheses.detok"
        hypotheses.write_text("".join(x + "\n" for x in scoring.detokenize(gen.hypotheses, "tgt")), encoding="utf-8")
        command = [sys.executable, "-m", "sacrebleu", str(untouched), "-i", str(hypotheses), "-lc", "-b", "-w", "2"]
        assert scores["sacrebleu"] == float(subprocess.run(command, capture_output=True, text=True).stdout)
        assert scores["sacrebleu_signature"].startswith("nrefs:1|case:lc|eff:no|tok:13a")
        assert "--beam 5" in record["evaluation"]["commands"][0]
        assert "fairseq-generate" in record["scoring"] and "scored as:" in out
        training = record["training"]
        assert training["gpus"] == 1 and training["cpu"] and training["wall_seconds"] > 0
        assert "model.encoder_layers=2" in training["command"]
        assert training["deviations"][0].startswith("overrides: task.source_lang=src ")
        assert "model.encoder_layers=2" in training["deviations"][0] and training["deviations"][1] == "trained on CPU"
        assert set(record["versions"]) >= {"fairseq", "torch", "sacrebleu"}
        assert re.fullmatch(r"[0-9a-f]{40}", record["git"]["commit"]) and isinstance(record["git"]["dirty"], bool)


def test_a_diverged_training_is_reported_as_fails_with_its_data(chain):
    record = json.loads((chain["results"] / "iwslt14/post/e12d12.json").read_text())
    assert record["status"] == "fails" and "NaN" in record["divergence"]
    table = chain["tables"]
    # the IWSLT-14 table: Post-LN E12D12 fails, on the demo's data: listed under the table, not beside the paper's
    assert record["data"]["data_bin"] == str(chain["data"]) and not record["data"]["papers_data"]
    assert re.search(r"^\| +Post-LN +\| other data +\| 35\.37 +\|  +\| other data +\| fails +\|  +\|$", table, re.M)
    assert re.search(
        r"^- `iwslt14/post/e12d12`: fails; data-bin data/bin, data prep's custom recipe, src-tgt, 800 train / 40 valid "
        r"/ 40 test pairs, sha256 [0-9a-f]{12}; ",
        table,
        re.M,
    )
    # the ablation: Pre-LN without warmup, E12D12, detected from the log alone (its launch names no data)
    assert re.search(r"^\| +Pre-LN +\| no +\| not run +\| 32\.28 +\|  +\| other data +\| 31\.82 +\|  +\|$", table, re.M)
    assert "- `iwslt14/pre/e12d12/nowarmup`: fails; data not named (scripts/evaluate.sh records it)" in table
    # ... but not while the first launch is still running
    assert re.search(
        r"^\| +ResiDual +\| no +\| not run +\| 35\.76 +\|  +\| running or interrupted +\| 35\.57 +\|  +\|$", table, re.M
    )


def test_a_failed_or_unfinished_training_never_shows_a_score(chain):
    table = chain["tables"]
    # the issue: a launch that exited 1 was "trained, not evaluated"; a stale score of a killed run was shown
    assert re.search(r"^\| +DeepNet +\| failed \(exit 1\) +\| 35\.34 +\|  +\|", table, re.M)
    assert re.search(r"^\| +Admin +\| running or interrupted +\| 35\.50 +\|  +\|", table, re.M)
    assert "33.00" not in table
    assert "- `iwslt14/deepnet/e6d6`: failed (exit 1): FileNotFoundError: [Errno 2] No such file" in table


def test_evaluating_an_unfinished_training_stops_unless_allowed_and_marked(chain):
    refused = chain["refused"]
    assert refused.returncode == 1 and refused.stdout == "" and "Traceback" not in refused.stderr
    # (fairseq's import logs a tensorboardX notice on stderr before it: not this harness's output)
    line = refused.stderr.strip().splitlines()[-1]
    assert [x for x in refused.stderr.splitlines() if x.startswith("error:")] == [line]
    assert line.startswith(
        "error: iwslt14/pre/e6d6 is not trained: running or interrupted (the last launch was stopped"
    )
    assert "--allow-unfinished" in line
    record = json.loads((chain["results"] / "iwslt14/pre/e6d6.json").read_text())
    assert record["status"] == "measured" and record["training"]["state"] == "running or interrupted"
    assert record["unfinished"].startswith("evaluated unfinished training: running or interrupted")
    # the score is shown under the table (the demo's data is not the paper's), with the reason
    assert re.search(r"^\| +Pre-LN +\| other data +\| 35\.12 +\|  +\|", chain["tables"], re.M)
    assert re.search(
        rf"^- `iwslt14/pre/e6d6`: bleu {record['scores']['bleu']:.2f}; .*; evaluated unfinished training: running or "
        "interrupted",
        chain["tables"],
        re.M,
    )


def test_evaluate_dry_run_names_the_checkpoints_and_writes_nothing(chain):
    out = chain["dry_run"]
    assert out.returncode == 0, out.stderr[-2000:]
    assert f"{CELLS[0]}: trained (max_epoch reached); would average checkpoint2.pt, checkpoint3.pt" in out.stdout
    assert "BLEU of fairseq-generate" in out.stdout and "would" in out.stdout
    assert "then decode the test sets (fairseq-generate: beam 5, lenpen 1.0, max_len_a 1.2, max_len_b 10)" in out.stdout


def test_the_tables_compare_no_cell_trained_on_other_data_and_name_its_data(chain):
    """The issue: a cell trained with --data on another corpus was shown in the IWSLT-14 row, 35.63 below the paper."""
    table = chain["tables"]
    record = json.loads((chain["results"] / "iwslt14/residual/e6d6.json").read_text())
    data = record["data"]
    assert data["data_bin"] == str(chain["data"]) and data["recipe"] == "custom" and data["papers_data"] is False
    assert re.fullmatch(r"[0-9a-f]{64}", data["data_bin_sha256"])
    assert re.search(r"^\| +ResiDual +\| other data +\| 35\.63 +\|  +\| not run +\| 36\.09 +\|  +\|$", table, re.M)
    assert re.search(r"^\| +DeepNet \(100 layers\) +\| (not run|scheme not implemented) +\| 29\.0 +\|", table, re.M)
    line = re.search(r"^- `iwslt14/residual/e6d6`: (.*)$", table, re.M)[1]
    assert line.startswith(f"bleu {record['scores']['bleu']:.2f}; data-bin data/bin, data prep's custom recipe, ")
    assert f"sha256 {data['data_bin_sha256'][:12]}; not the paper's data: made by data prep's custom recipe" in line
    assert re.search(r"; overrides: .*model.encoder_layers=2.*; trained on CPU$", line)
    assert str(ROOT) not in table and str(chain["data"]) not in table  # no machine paths in the published tables


def test_a_data_bin_without_its_untouched_test_text_is_not_scored(chain):
    """The demo's own data-bin has no data prep record: no sacreBLEU against its T- lines, one line naming the fix."""
    assert chain["unrecorded_error"] == (
        f"{chain['demo_data']} has no data prep summary.json beside it: sacreBLEU scores against the untouched test "
        "text that data-prep/prepare-*.sh records there; prepare the data with one of them (prepare-custom.sh for a "
        "corpus of your own)"
    )
