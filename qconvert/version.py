"""qconvert's version: the package's (pyproject.toml reads it from here), --version's, and the
producer the .tflite's description names."""

__version__ = "0.1.0"
