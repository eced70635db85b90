"""Full-integer (int8) quantization: choosing scales and zero points, quantizing weights and biases.

`params` holds the numerics (pure numpy, no IR access); the transforms that attach QuantParams to
the model's arrays build on it.
"""
