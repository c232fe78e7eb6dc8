"""20 SIGKILLs of one training, most inside a checkpoint save: no corrupt file, every start resumes, exact result.

The longer version (50 kills, the 45 MB-checkpoint model) is
``python -m fairseq_residual_tools.kill_stress --work DIR``; its run is in results/kill-stress/.
"""

import pytest

from fairseq_residual_tools.kill_stress import run_stress


@pytest.mark.slow
def test_twenty_kills_leave_no_corrupt_checkpoint_and_the_final_run_is_bit_identical(demo_databin, tmp_path):
    report = run_stress(demo_databin.databin, tmp_path, kills=20, size="small", seed=1)
    assert report.kills == 20
    assert report.kills_inside_a_save >= 5, report  # the 0-80 ms after "Saving checkpoint to" land inside it
    assert report.corrupt_files == []
    assert report.resumes_checked >= 15 and report.failed_resumes == []
    assert report.starts_that_removed_temporary_files >= 1 and report.temporary_files_not_removed == []
    assert report.final_updates == report.reference_updates == 50
    assert report.parameters_identical and report.max_abs_parameter_difference == 0.0
    assert report.optimizer_state_identical
    assert report.passed
