"""Outputs: numbers turned into figures, tables, reports and exported folders.

Figures (``figures``, ``input_figures``), the one writer of figures and tables (``export``),
the evaluation report and its HTML page (``report``), the comparison folder (``comparison``)
and the Dataset tab's evaluation kept in the user cache (``evaluation_cache``). The GUI's
exports and the command line write through the same functions.

It imports analysis and the engine, never commands or the app.
"""
