"""The precision plan and what it measures on the float model: which ops run int8 (planner.py),
the cost of each quantization in the gated fake-quant graph (sensitivity.py), and the weighted
ops' input moments that weight rounding, bias correction and equalization use (layer_inputs.py).
"""
