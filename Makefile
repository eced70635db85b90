# Two commands set up everything on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test bench schema install clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PY) examples/demo.py

test: $(STAMP)
	$(PY) -m pytest -n 2

bench: $(STAMP)
	$(PY) bench/bench.py

# Regenerate the committed Python bindings from the project's schema.
schema: $(STAMP)
	$(VENV)/bin/flatc --python --gen-object-api --gen-onefile -o qconvert/tflite schemas/tflite/schema.fbs

clean:
	rm -rf $(VENV) build *.egg-info
