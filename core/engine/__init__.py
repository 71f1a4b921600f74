"""The engine: inference methods, models, data sets, face descriptors, and posterior files.

It holds everything that makes or holds a posterior: ``inference/`` (one module per method),
``models/`` (the architectures and their stacked forward pass), ``data/`` (data sets, image
preprocessing), ``faces/`` (face detection and descriptors), ``store`` (saving and loading
posterior files), ``files`` (the one atomic writer), and the small helpers they share
(memory estimates, the training runner, bundled resources, method names).

It imports torch, numpy, Pillow and itself, never the layers above it (analysis, outputs,
commands) nor the app.
"""
