"""SIGKILLs of one training across three epoch ends, most inside a checkpoint save, and after its final save: no
corrupt file, every start resumes, a finished command run again trains nothing and writes nothing, and the end is
bit-identical to an uninterrupted run's, at --max-update and again at --max-epoch.

The longer version (50 kills, the 45 MB-checkpoint model) is
``python -m fairseq_residual_tools.kill_stress --work DIR --epoch-ends 3``; its run is in results/kill-stress/.
"""

import pytest

from fairseq_residual_tools.kill_stress import run_stress


@pytest.mark.slow
def test_kills_next_to_three_epoch_ends_and_after_the_last_saves_leave_no_corrupt_checkpoint_and_a_bit_identical_run(
    demo_databin, tmp_path
):
    # --max-tokens 1024: 26 updates per epoch on the demo data-bin, so 90 updates cross three epoch ends; --max-epoch 4
    # then goes on to the end of the 4th (104)
    report = run_stress(
        demo_databin.databin, tmp_path, 20, "small", 90, seed=1, epoch_ends=3, max_tokens=1024, max_epoch=4
    )
    assert len(report.epoch_ends) == 3 and report.epoch_ends[-1] < 90
    # inside the save of each epoch's last update, of the update before and of the next epoch's first update
    assert report.kills_next_to_epoch_ends == sorted(e + d for e in report.epoch_ends for d in (-1, 0, 1))
    assert report.kills == 20 + 9
    # 0 to the median save time after "Saving checkpoint to": most of the 24 land inside (23 and 26 observed)
    assert report.kills_inside_a_save >= 14, report
    assert report.corrupt_files == []
    assert report.resumes_checked >= 20 and report.failed_resumes == []
    assert report.starts_that_removed_temporary_files >= 1 and report.temporary_files_not_removed == []
    # each end: killed right after its last save, then run twice more: no update, every file's bytes and time kept
    assert report.kills_after_the_final_save == 2 and report.reruns_of_a_finished_training == 4
    assert report.reruns_that_trained_or_wrote == []
    assert [(end["budget"], end["final_updates"], end["reference_updates"]) for end in report.ends] == [
        ("--max-update 90", 90, 90),
        ("--max-epoch 4", 104, 104),
    ]
    for end in report.ends:
        assert end["parameters_identical"] and end["max_abs_parameter_difference"] == 0.0, end
        assert end["optimizer_state_identical"], end
    assert report.passed, report
