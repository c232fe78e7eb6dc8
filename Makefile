# make install -- create .venv (once), install the package with every extra at the tested versions (constraints.txt)
# make test    -- same environment, then the test suite on every core (TEST_WORKERS=1: one process;
#                 pytest -m "not slow" skips the fairseq subprocess tests)
# make lint    -- ruff (lint + format check) over the repository, mypy (check_untyped_defs) on the plugin and the tools
# make demo    -- same environment, then train Post-LN / Pre-LN / ResiDual on the embedded corpus (report: work/demo/)
# make demo-results -- the same, written into the committed results/demo/ and the README's table (after a plugin change)
# make lm-cpu-results -- every scheme as a small language model on the Python manual's text -> results/lm-cpu/
# make bible-study-results -- the schemes trained to their plateau on the Spanish-English Bible -> results/bible-study/
#                 (hours; resumable; needs the Debian packages diatheke sword-text-sparv sword-text-web, or installs them)
# make bench   -- same environment, then the side-by-side speed / memory benchmark, the counted work and HC's memory
# make bench-compiled -- training throughput eager and under --torch-compile beside stock fairseq, with profiles
#                 (-> results/bench/compiled/; ~35 min), and the graphs compiled per epoch (recompiles.json)
# make bench-loss -- a training step with label_smoothed_cross_entropy and with fused_label_smoothed_cross_entropy
#                 side by side (Pre-LN, ResiDual, hc; the CPU study's size, IWSLT and WMT E6D6; fp32, bf16), with
#                 profiles (-> results/bench/fused-loss/)
# make gpu-bible -- the Bible data-bin and its test text packed for the GPU check's opt-in part bible -> gpu-bible/
#                 (needs the study's data: make bible-study-results prepares it in work/bible-study/data)
# make gpu-bundle -- wheels for an offline GPU node (CPython 3.12, torch 2.11) -> gpu-bundle/ (docs/install.md);
#                 needs a Python 3.12 and PyPI, builds in work/gpu-bundle/ (~4.7 GB, once), not part of make test
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/pip install --disable-pip-version-check
# the install is redone only when pyproject.toml, setup.py, constraints.txt or quiet.py (the .pth line) changes
STAMP  := $(VENV)/.installed-stamp

.PHONY: install test lint demo demo-results lm-cpu-results bible-study-results bench bench-compiled bench-loss gpu-bible gpu-bundle constraints clean-venv

install: $(STAMP)

$(STAMP): pyproject.toml setup.py constraints.txt fairseq_residual/quiet.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# torch first, at the tested version: the CPU build where one is offered, so that no other build is resolved
	$(PIP) -c constraints.txt torch
	# fairseq-fixed's extensions build against that torch and numpy (no isolated build environment installing a
	# second torch), without debug symbols (a wheel of half the size), one at a time: torch's BuildExtension
	# writes every extension's build.ninja into one folder, so two built at once break each other's link
	# (tests/tools/test_install_build.py)
	$(PIP) -c constraints.txt setuptools Cython numpy
	# the build keeps one core busy: every other package of constraints.txt installs on the other meanwhile (none is
	# one the build reads: torch, numpy, Cython and setuptools are in place at their pinned versions); no build
	# where the pinned fairseq-fixed is installed already
	rm -rf $(VENV)/wheelhouse; build=; \
	if [ "$$($(BIN)/python -c "from importlib.metadata import version; print(version('fairseq-fixed'))" \
		2>/dev/null)" != "$$(sed -n 's/^fairseq-fixed==//p' constraints.txt)" ]; then \
	CFLAGS=-g0 $(BIN)/pip wheel --disable-pip-version-check --no-deps --no-build-isolation -c constraints.txt \
		-w $(VENV)/wheelhouse fairseq-fixed & build=$$!; fi; \
	grep -v '^fairseq-fixed==' constraints.txt | $(PIP) -r /dev/stdin; installed=$$?; \
	if [ -n "$$build" ]; then wait $$build && $(PIP) --no-deps $(VENV)/wheelhouse/fairseq_fixed-*.whl || exit 1; fi; \
	test $$installed = 0
	$(PIP) -c constraints.txt -e '.[data,analysis,tensorboard,test]'
	touch $(STAMP)

# as many test processes as cores (pytest-xdist; a file's tests stay in one process, with its fixtures; a third
# process on two cores gained nothing measurable: docs/results.md), one torch thread each: tiny models gain nothing
# from a second thread, and OpenMP threads spinning on a busy core do lose; files handed out in the order
# tests/conftest.py gives them (longest first), not xdist's (most tests first)
TEST_WORKERS ?= auto
test: $(STAMP)
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile \
		--no-loadscope-reorder tests

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

demo: $(STAMP)
	$(BIN)/python -m fairseq_residual_tools.demo.run

demo-results: $(STAMP)
	$(BIN)/python -m fairseq_residual_tools.demo.run --update-results

# every registered scheme at 6 and 12 layers, 2 seeds, 150 updates (~25 min on 2 cores; resumable, exact reuse)
lm-cpu-results: $(STAMP)
	nice -n 5 $(BIN)/python -m fairseq_residual_tools.analysis.lm_study

# the translation study (results/bible-study/README.md): a finished run's record in results/bible-study/runs/ is reused;
# cut.args holds the runs it cut and why (argparse reads @FILE one argument a line)
bible-study-results: $(STAMP)
	OMP_NUM_THREADS=1 nice -n 5 $(BIN)/python -m fairseq_residual_tools.analysis.bible_study @results/bible-study/cut.args

# throughput / memory of every scheme vs fairseq's stock transformer -> results/bench/ (< 15 min);
# glibc malloc keeps freed memory in the measuring processes, as PyTorch's allocator does on a GPU;
# then the counted work of every scheme (operations, FLOPs, bytes -> counts.json / counts.md; resumable),
# then Hyper-Connections' memory at 1, 2 and 4 streams (hc-memory.json / hc-memory.md)
bench: $(STAMP)
	$(BIN)/python scripts/bench.py --malloc keep
	$(BIN)/python scripts/bench.py --counts-only
	$(BIN)/python scripts/bench.py --hc-memory --malloc keep

# stock Pre-LN eager, Pre-LN / ResiDual / hc eager and compiled at tiny, the CPU study's and IWSLT E6D6 sizes, one
# thread each in a fresh process, inductor's caches new each time (the compile a first run pays)
bench-compiled: $(STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python -m fairseq_residual_tools.bench.compiled --device cpu --profile --out results/bench/compiled
	$(BIN)/python -m fairseq_residual_tools.bench.recompiles --out results/bench/compiled/recompiles.json

# one thread per measuring process, each (size, precision, scheme) in a fresh one, glibc keeping freed memory (as bench:
# stock's logits are not mapped in anew every step)
bench-loss: $(STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python -m fairseq_residual_tools.bench.fused_loss --profile --out results/bench/fused-loss

# the GPU check's part bible carries this beside gpu-bundle/ (results/gpu-check/README.md)
gpu-bible: $(STAMP)
	$(BIN)/python -m fairseq_residual_tools.gpu_check.bible pack --data work/bible-study/data --out gpu-bible

# the bundle's own code uses the standard library only: no .venv needed
gpu-bundle:
	$(PYTHON) -m fairseq_residual_tools.gpu_bundle build --out gpu-bundle

# after a tested upgrade of .venv: write its exact versions to constraints.txt (torch without its +cpu label; name==version
# also for fairseq-fixed, which pip freeze names by the wheel file make install built)
constraints: $(STAMP)
	{ sed -n '/^#/p' constraints.txt; $(BIN)/pip list --format=freeze --exclude-editable --exclude pip --exclude setuptools \
		| sed 's/^torch==\([0-9.]*\)+cpu$$/torch==\1/'; } > constraints.txt.new
	mv constraints.txt.new constraints.txt

clean-venv:
	rm -rf $(VENV)
