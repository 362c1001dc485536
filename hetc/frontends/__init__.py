"""Model frontends. Only ONNX today: ``hetc.frontends.onnx``."""
