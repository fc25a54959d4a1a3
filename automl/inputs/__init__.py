"""What a user hands in: datasets (:mod:`~automl.inputs.data`, checked by ``_checks``, with
generated examples in :mod:`~automl.inputs.synthetic`), trained PyTorch models
(:mod:`~automl.inputs.trained_model`) and ONNX models (:mod:`~automl.inputs.onnx_model`)."""
