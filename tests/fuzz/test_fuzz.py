"""The seeded fuzz harness (issue 11): over a thousand hostile inputs against the qconvert command
line, each its own test (`pytest tests/fuzz -k case_0123`; cases.py lists the kinds and writes
a case's files for debugging: `python -m tests.fuzz.cases case_0123 DIR`).

Every case must end with a documented exit code (never 3), no traceback, its inputs unchanged,
nothing at OUT after a failure, and any model written with exit 0 running in LiteRT with and
without XNNPACK (runner.py has the full list of checks). Run it on 2 cores with
`python -m pytest -n 2 tests/fuzz`.
"""

from __future__ import annotations

import json
import os

import pytest

from tests.fuzz.cases import all_cases
from tests.fuzz.runner import LiteRTChecker, check, preload, run_in_process, run_subprocess, snapshot

CASES = all_cases()


@pytest.fixture(scope="module")
def litert():
    preload()
    checker = LiteRTChecker()
    yield checker
    checker.close()


def test_case_count():
    assert len(CASES) >= 1000
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[f"{c.id}-{c.kind}" for c in CASES])
def test_case(case, tmp_path, litert):
    run = case.build(tmp_path)
    before = snapshot(tmp_path)
    outcome = (run_subprocess if run.subprocess else run_in_process)(run, tmp_path)
    problems = check(run, outcome, before, tmp_path, litert)
    if os.environ.get("QCONVERT_FUZZ_LOG"):  # one JSON line per case, to sort the failures by class
        last = outcome.stderr.strip().splitlines()[-1:] or [""]
        with open(os.environ["QCONVERT_FUZZ_LOG"], "a") as log:
            log.write(json.dumps({"id": case.id, "kind": case.kind, "args": run.args, "env": run.env,
                                  "exit": outcome.exit_code, "stderr": last[0][:300],
                                  "problems": problems}) + "\n")
    assert not problems, (f"{case.id} ({case.kind}): qconvert {' '.join(run.args)}"
                          f"{' with ' + str(run.env) if run.env else ''}\n  " + "\n  ".join(problems)
                          + f"\n  reproduce: python -m tests.fuzz.cases {case.id} DIR")
