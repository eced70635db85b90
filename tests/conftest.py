import sys
from pathlib import Path

# Tests import the shared harness as `tests.harness`.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


# The versions the run used, so that a test log says what it tested: `pytest_report_header` for a
# run that shows pytest's header; this project's addopts (-q) hide it, so then the same line is
# written when the session starts instead (by the controller only, under pytest-xdist).
_REPORTED_DISTRIBUTIONS = ("numpy", "onnx", "onnxruntime", "ai-edge-litert", "flatbuffers", "click",
                           "tflite-micro", "torch")


def _versions_line() -> str:
    import platform
    from importlib.metadata import PackageNotFoundError, version

    versions = [f"python {platform.python_version()}"]
    for name in _REPORTED_DISTRIBUTIONS:
        try:
            versions.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            if name != "torch":  # torch only comes with the qat and bench extras
                versions.append(f"{name} (not installed)")
    return "versions: " + ", ".join(versions)


def pytest_report_header(config):
    return _versions_line()


def pytest_sessionstart(session):
    config = session.config
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and config.get_verbosity() < 0 and not hasattr(config, "workerinput") \
            and not config.getoption("no_header", False):
        reporter.write_line(_versions_line())
