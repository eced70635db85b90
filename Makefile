# Two commands set up everything on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
BASE_STAMP := $(VENV)/.installed-base
STAMP := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.installed-bench

.PHONY: demo test test-all bench zoo schema install clean browser

# The demo needs the base install only (no torch); the tests add the test and qat extras.
$(BASE_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .
	@# An editable install leaves the package uncompiled: where PYTHONDONTWRITEBYTECODE is set,
	@# every run would compile it again (0.6 s of CPU, most of it the schema bindings).
	$(PY) -m compileall -q qconvert
	touch $(BASE_STAMP)

$(STAMP): $(BASE_STAMP)
	$(PY) -m pip install --quiet -e '.[test,qat]'
	touch $(STAMP)

install: $(STAMP)

demo: $(BASE_STAMP)
	$(PY) examples/demo.py

# `make test`: every test but those marked slow (a minute or more of CPU each: the big light
# models, tests.harness.BIG_LIGHT_MODELS), 10 minutes on 2 cores both kept busy by other work;
# `make test-all`: everything. The CI (.ci/run) runs test-all. No test bounds wall-clock time
# (tests/processes.py: child processes have CPU budgets), so both pass on a busy machine too.
test: $(STAMP) browser
	$(PY) -m pytest -n 2 -m "not slow"

test-all: $(STAMP) browser
	$(PY) -m pytest -n 2

# The HTML report's test renders the page in headless Chromium (Debian's package); where it cannot
# be installed that one test skips, saying so.
browser:
	@command -v chromium >/dev/null 2>&1 || (apt-get install -y -qq chromium >/dev/null 2>&1 || \
		(apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq chromium >/dev/null 2>&1)) || \
		echo "make: chromium could not be installed; the HTML report's browser test will skip"

# The bench extra (torch, Pillow) only for the benchmark: its trained-model table trains with them.
$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e '.[test,qat,bench]'
	touch $(BENCH_STAMP)

# The tables on stdout; the converted files and the measured target profile in $(BENCH_OUT).
BENCH_OUT ?= build/bench
bench: $(BENCH_STAMP)
	$(PY) bench/bench.py --out $(BENCH_OUT) --target-profile $(BENCH_OUT)/target-profile.json

# The architecture zoo (bench/zoo.py): 300+ models generated in venvs of its own under
# ~/.cache/qconvert (torch 2.14.1 + torchvision, timm, transformers; TensorFlow + tf2onnx), each
# converted and checked; the zoo table and the failures by message. First run: about an hour.
zoo: $(STAMP)
	$(PY) bench/zoo.py

# Regenerate the committed Python bindings from the project's schema.
schema: $(STAMP)
	$(VENV)/bin/flatc --python --gen-object-api --gen-onefile -o qconvert/tflite schemas/tflite/schema.fbs

clean:
	rm -rf $(VENV) build *.egg-info
