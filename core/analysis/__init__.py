"""Analysis: posteriors and inputs turned into numbers.

The predictive of one input and its uncertainty split (``predictive``, ``uncertainty``),
data-set metrics (``metrics``), the evaluation loop (``evaluation``), what the Dataset tab
shows (``dataset``) and the side-by-side comparison (``comparison``). Numbers only: nothing
here writes a file or draws a figure.

It imports the engine (``core.engine``) and itself, never outputs, commands or the app.
"""
