"""The house can be read top-down: no import cycle among core's and app's modules.

The layer contracts themselves (core: commands → outputs → analysis → engine, core never
imports the GUI, app's own layers) are import-linter contracts in pyproject.toml, checked by
``lint-imports`` in the test command; this builds the same graph with grimp and looks for
cycles, which a layers contract does not catch inside one layer.
"""

from __future__ import annotations

import grimp


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Every strongly connected set of more than one module (Tarjan), each sorted."""
    modules = sorted(graph.modules)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(graph.find_modules_directly_imported_by(module)):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in modules:
        if module not in index:
            visit(module)
    return found


def test_the_cycle_finder_finds_a_cycle():
    """The check can fail: a graph with a known two-module cycle and a three-module one."""
    graph = grimp.ImportGraph()
    for a, b in (("p.a", "p.b"), ("p.b", "p.a"), ("p.c", "p.d"), ("p.d", "p.e"), ("p.e", "p.c"), ("p.e", "p.f")):
        graph.add_import(importer=a, imported=b)
    assert sorted(_cycles(graph)) == [["p.a", "p.b"], ["p.c", "p.d", "p.e"]]


def test_no_import_cycle_among_core_and_app_modules():
    graph = grimp.build_graph("core", "app", cache_dir=None)
    assert len(graph.modules) > 50  # both packages were read
    assert _cycles(graph) == []


def test_core_layers_are_packages_that_say_what_they_hold():
    import importlib

    for layer in ("engine", "analysis", "outputs", "commands"):
        module = importlib.import_module(f"core.{layer}")
        assert module.__doc__ and "import" in module.__doc__, layer
