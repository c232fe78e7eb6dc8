"""SIGKILLs of one training across three epoch ends, most inside a checkpoint save: no corrupt file, every start
resumes, and the final run is bit-identical to an uninterrupted one.

The longer version (50 kills, the 45 MB-checkpoint model) is
``python -m fairseq_residual_tools.kill_stress --work DIR --epoch-ends 3``; its run is in results/kill-stress/.
"""

import pytest

from fairseq_residual_tools.kill_stress import run_stress


@pytest.mark.slow
def test_kills_at_and_next_to_three_epoch_ends_leave_no_corrupt_checkpoint_and_a_bit_identical_run(
    demo_databin, tmp_path
):
    # --max-tokens 1024: 26 updates per epoch on the demo data-bin, so 90 updates cross three epoch ends
    report = run_stress(
        demo_databin.databin, tmp_path, kills=20, size="small", max_update=90, seed=1, epoch_ends=3, max_tokens=1024
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
    assert report.final_updates == report.reference_updates == 90
    assert report.parameters_identical and report.max_abs_parameter_difference == 0.0
    assert report.optimizer_state_identical
    assert report.passed, report
