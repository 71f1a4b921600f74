"""The command line, ``bayescope-cli``: one module per command.

A command parses its arguments, calls the layers below (outputs, analysis, engine) and
turns every failure a person can cause into one line and an exit code (``console``). This is
the only layer that parses arguments. ``main`` builds the parser from every command's
``add_arguments``; ``reproduce/`` holds the papers' experiments, one module each.

It may import every layer of core (outputs, analysis, engine), never the app.
"""
