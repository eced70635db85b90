"""Graph transformations over the IR, one per file; pipeline.py lists them in order."""
