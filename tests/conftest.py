import sys
from pathlib import Path

# Tests import the shared harness as `tests.harness`.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
