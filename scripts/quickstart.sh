#!/usr/bin/env bash
# Set up hetc, generate the example CNN, compile it for the CPU and run it against onnxruntime.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -e .
.venv/bin/python examples/models.py examples/out
.venv/bin/hetc compile examples/out/cnn.onnx --target cpu -o examples/out/cnn -v
.venv/bin/hetc run examples/out/cnn --inputs examples/out/cnn_inputs.npz --reference examples/out/cnn.onnx \
    --outputs examples/out/cnn_outputs.npz
