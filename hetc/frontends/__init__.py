"""Model frontends: ``hetc.frontends.onnx`` and ``hetc.frontends.torch`` (torch.export, torch.compile)."""
