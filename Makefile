# make test  -- create .venv (once), install the package and its pinned deps, run the tests
# make demo  -- same environment, then train Post-LN / Pre-LN / ResiDual on the embedded corpus
# make bench -- same environment, then the side-by-side speed / memory benchmark
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# the install is redone only when setup.py changes
STAMP  := $(VENV)/.installed-stamp

.PHONY: install test demo bench clean-venv

install: $(STAMP)

$(STAMP): setup.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# torch first, from the pinned CPU build, so that no other build is resolved
	$(BIN)/pip install --disable-pip-version-check torch==2.13.0
	$(BIN)/pip install --disable-pip-version-check -e '.[test]'
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest tests

demo: $(STAMP)
	$(BIN)/python -m fairseq_residual_tools.demo.run

# throughput / memory of every scheme vs fairseq's stock transformer -> results/bench/ (< 15 min)
bench: $(STAMP)
	$(BIN)/python scripts/bench.py

clean-venv:
	rm -rf $(VENV)
