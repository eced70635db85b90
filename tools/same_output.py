"""Checks that a change alters no converted file: runs the test suite at a base commit and in the
working tree, records the SHA-256 of every .tflite and every fake-quant .onnx each test writes
(in-process and through the CLI), and lists the tests whose files differ.

    .venv/bin/python tools/same_output.py BASE_REV [pytest arguments, e.g. tests/quantize]

For changes meant to alter cost, not results (issue 8). The base commit is checked out in a
temporary git worktree and imported instead of the working tree (PYTHONPATH); a sitecustomize
module wraps qconvert.tflite.writer.serialize in every Python process the tests start. Tests that
exist on one side only are listed too. Exit code 0 when nothing differs, 1 otherwise.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Logs "<test id>\t<sha256>" for every serialized model: serialize returned a memoryview before
# issue 8 and a Flatbuffer (written out through write_to) since.
HOOK = '''
import hashlib, os
path = os.environ.get("SAME_OUTPUT_LOG")
if path:
    import qconvert.tflite.writer as writer
    original = writer.serialize

    class _Digest:
        def __init__(self):
            self.sha = hashlib.sha256()

        def write(self, data):
            self.sha.update(data)

    def serialize(*args, **kwargs):
        result = original(*args, **kwargs)
        if hasattr(result, "write_to"):
            digest, keep = _Digest(), result._release_data
            result._release_data = False  # the caller still writes it out
            result.write_to(digest)
            result._release_data = keep
            digest = digest.sha.hexdigest()
        else:
            digest = hashlib.sha256(result).hexdigest()
        with open(path, "a") as f:
            f.write(f"{os.environ.get('PYTEST_CURRENT_TEST', '?')}\\t{digest}\\n")
        return result

    writer.serialize = serialize

    # The fake-quant .onnx of `qconvert fakequant`: the driver's fake_quant returns its bytes
    # (qconvert.converter before issue 20, qconvert.driver.conversion since).
    import importlib

    for name in ("qconvert.driver.conversion", "qconvert.converter"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        def fake_quant(*args, _original=module.fake_quant, **kwargs):
            written, report = _original(*args, **kwargs)
            with open(path, "a") as f:
                f.write(f"{os.environ.get('PYTEST_CURRENT_TEST', '?')}\\t"
                        f"onnx:{hashlib.sha256(written).hexdigest()}\\n")
            return written, report
        module.fake_quant = fake_quant
        break
'''


def run_suite(tree: Path, hook_dir: Path, log: Path, pytest_args: list[str]) -> None:
    env = dict(os.environ, PYTHONPATH=f"{hook_dir}{os.pathsep}{tree}", SAME_OUTPUT_LOG=str(log))
    command = [sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "no:cacheprovider",
               *pytest_args]
    print(f"same_output: {' '.join(command)} in {tree}", file=sys.stderr, flush=True)
    subprocess.run(command, cwd=tree, env=env, stdout=subprocess.DEVNULL)


def read_log(log: Path) -> dict[str, list[str]]:
    files = collections.defaultdict(list)
    if log.exists():
        for line in log.read_text().splitlines():
            test, digest = line.rsplit("\t", 1)
            files[test].append(digest)
    return {test: sorted(digests) for test, digests in files.items()}


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    base, pytest_args = argv[0], argv[1:]
    with tempfile.TemporaryDirectory(prefix="same-output-") as tmp:
        tmp = Path(tmp)
        (tmp / "hook").mkdir()
        (tmp / "hook" / "sitecustomize.py").write_text(HOOK)
        worktree = tmp / "base"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(worktree), base],
                       check=True, capture_output=True)
        try:
            run_suite(worktree, tmp / "hook", tmp / "base.log", pytest_args)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(worktree)],
                           capture_output=True)
        run_suite(ROOT, tmp / "hook", tmp / "head.log", pytest_args)
        before, after = read_log(tmp / "base.log"), read_log(tmp / "head.log")
    differ = sorted(t for t in before.keys() & after.keys() if before[t] != after[t])
    sides = (("files differ", differ), ("only at the base", sorted(before.keys() - after.keys())),
             ("only in the working tree", sorted(after.keys() - before.keys())))
    for title, tests in sides:
        print(f"{title}: {len(tests)}")
        for test in tests:
            print(f"  {test}")
    same = sum(len(after[t]) for t in before.keys() & after.keys() if before[t] == after[t])
    print(f"identical: {same} files written by {len(before.keys() & after.keys()) - len(differ)} tests")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
