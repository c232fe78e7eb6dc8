"""The checks that need a CUDA GPU, as one prepared run of at most nine minutes: ``bash scripts/gpu_check.sh``.

plan.py says what runs and in which order, estimate.py how long each run takes, execute.py runs them, report.py
writes what they measured; cli.py is the command line. Nothing is imported here, so that the offline bundle's
installer (``gpu_bundle``) runs before fairseq can be imported.
"""
