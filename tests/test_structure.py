"""The package's import graph has no cycle: every `import` and `from ... import` in mpi_join,
at module level or inside a function, is an arrow, and no module reaches itself. (The registry
names strategy code as "module:attribute" strings, loaded when needed, so strategies.py imports
no strategy.)"""
import ast
import os

import mpi_join

PKG = os.path.dirname(mpi_join.__file__)


def _modules():
    out = {}
    for d, _, files in os.walk(PKG):
        for f in files:
            if f.endswith(".py"):
                rel = os.path.relpath(os.path.join(d, f), os.path.dirname(PKG))[:-3].replace(os.sep, ".")
                out[rel[:-9] if rel.endswith(".__init__") else rel] = os.path.join(d, f)
    return out


def _targets(mods, name, node):
    if isinstance(node, ast.Import):
        found = [a.name for a in node.names]
    else:
        base = name.split(".")
        if node.level:
            keep = len(base) - node.level + (1 if mods[name].endswith("__init__.py") else 0)
            base = base[:keep] + ([node.module] if node.module else [])
        else:
            base = [node.module or ""]
        mod = ".".join(base)
        found = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in mods else mod for a in node.names]
    return {t for t in found if t in mods and t != name}


def import_graph():
    mods = _modules()
    graph = {}
    for name, path in mods.items():
        with open(path) as f:
            tree = ast.parse(f.read(), path)
        graph[name] = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                graph[name] |= _targets(mods, name, node)
    return graph


def find_cycle(graph):
    """One cycle as a list of modules (first repeated last), or None."""
    state, stack = {}, []

    def visit(v):
        state[v] = 1
        stack.append(v)
        for w in sorted(graph[v]):
            if state.get(w) == 1:
                return stack[stack.index(w):] + [w]
            if w not in state:
                c = visit(w)
                if c:
                    return c
        state[v] = 2
        stack.pop()
        return None

    for v in sorted(graph):
        if v not in state:
            c = visit(v)
            if c:
                return c
    return None


def test_the_check_finds_a_cycle_when_there_is_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"b"}}) is None


def test_mpi_join_has_no_import_cycle():
    graph = import_graph()
    assert "mpi_join.config" in graph["mpi_join.cli"], "the graph was not read"
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle)


# -- roles select code: no join module or router picks behaviour by its own rank ------------------
def _rank_branches(tree):
    """Comparisons of a rank (`rank`, `self.rank`, `self.k`) with a constant or a worker count:
    the way a module would pick behaviour by its position instead of by its role."""
    def is_rank(n):
        return (isinstance(n, ast.Name) and n.id == "rank") or \
            (isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"
             and n.attr in ("rank", "k"))

    def is_position(n):
        return isinstance(n, ast.Constant) or (isinstance(n, ast.Attribute) and n.attr == "n") or \
            (isinstance(n, ast.Call) and getattr(n.func, "id", "") == "len")

    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left] + node.comparators
            if any(is_rank(a) for a in sides) and any(is_position(a) for a in sides):
                yield node.lineno


def test_the_rank_check_finds_a_branch_on_position():
    assert list(_rank_branches(ast.parse("if self.rank == 1:\n    pass\nx = rank < self.n\ny = p['slow'] == rank")))\
        == [1, 3]


def test_join_modules_and_routers_do_not_branch_on_their_rank():
    found = []
    for name, path in _modules().items():
        strategy_code = name.split(".")[1:2] in (["ring"], ["slaves"]) or name == "mpi_join.master.hash_router"
        if strategy_code and name != "mpi_join.slaves.worker":     # the worker runtime checks rank files
            with open(path) as f:
                found += [f"{path}:{line}" for line in _rank_branches(ast.parse(f.read()))]
    assert not found, "a module picks behaviour by its rank; give the position a role instead: " + ", ".join(found)


def test_every_role_of_every_strategy_has_code():
    from mpi_join.strategies import REGISTRY
    for info in REGISTRY.values():
        for n in range(info.min_ranks, 7):
            graph = info.build_graph(n, {k: p.default for k, p in info.params.items()})
            for rank in range(n):
                role = graph.role(rank)
                cls = info.load_role(role)
                assert isinstance(cls, type), (info.name, n, rank, role)


# the roles of the shipped graphs that join nothing: they route, merge or write
ROUTING_ROLES = {"driver", "dispatcher", "merger", "combiner", "sink"}


def test_ranks_that_join_nothing_start_without_numba():
    """numba's import costs about 0.4 CPU-s per process: the code of every role that joins nothing
    (rank 0 and each extra source run the driver's), every strategy's job check and graph
    builder import no join code, which a fresh interpreter that imports them all shows (each
    loaded after the last was checked, so the first to pull numba in is named)."""
    import subprocess
    import sys
    from mpi_join.strategies import REGISTRY
    specs = []
    for info in REGISTRY.values():
        if info.testing:
            continue
        graph = info.build_graph(max(info.min_ranks, 5), {k: p.default for k, p in info.params.items()})
        roles = {graph.role(r) for r in range(len(graph.vertices))} & ROUTING_ROLES
        specs += [info.role_code(role) for role in sorted(roles)] + [c for c in (info.check, info.graph) if c]
    code = ("import importlib, sys\nimport mpi_join.ranks\nassert 'numba' not in sys.modules, 'mpi_join.ranks'\n"
            f"for spec in {sorted(set(specs))!r}:\n"
            "    mod, _, attr = spec.partition(':')\n"
            "    getattr(importlib.import_module(mod), attr)\n"
            "    assert 'numba' not in sys.modules, spec\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0, "imports numba: " + p.stderr.strip().splitlines()[-1]
    assert len(set(specs)) >= 15


def test_end_of_stream_reaches_every_link_once_after_all_that_feeds_it():
    """Followed as the workers send it (Topology.ends), end-of-stream crosses each link of
    eos_links exactly once, and a rank sends it on a link only after every upstream link that
    feeds that link has ended: no copy bounces back along a tree's result edges."""
    from collections import Counter
    from mpi_join.strategies import REGISTRY
    for info in REGISTRY.values():
        for n in range(info.min_ranks, 9):
            graph = info.build_graph(n, {k: p.default for k, p in info.params.items()})
            ended = {r: set() for r in range(n)}
            sent, todo = Counter(), [(0, e) for e in graph.entries()]
            while todo:
                src, dst = todo.pop()
                sent[src, dst] += 1
                assert sent[src, dst] == 1, (info.name, n, src, dst)
                ended[dst].add(src)
                for d in graph.ends(dst, src, ended[dst]):
                    assert all(u in ended[dst] for u in graph.upstream(dst) if d in graph.continues(dst, u))
                    todo.append((dst, d))
            assert set(sent) == graph.eos_links(), (info.name, n)


# -- the layers (README "Architecture"): arrows run down --------------------------------------------
_STRATEGIES = ("ring", "splitjoin", "biclique")
_NEVER = {"join": ("runtime", "storage", "master", "slaves", "partitioning", "tools") + _STRATEGIES,
          "storage": ("runtime", "master", "slaves", "partitioning", "tools") + _STRATEGIES,
          "runtime": ("master", "slaves", "tools") + _STRATEGIES,
          "master": ("tools",) + _STRATEGIES,
          "slaves": ("tools",) + _STRATEGIES,
          "partitioning": ("tools",) + _STRATEGIES}


def layer_breaches(graph):
    """Imports that run up the layers: from a folder of _NEVER into one it must not import, and
    into tools/ from anything but the commands (cli.py) and the strategies' bench_*.py."""
    out = []
    for a, targets in graph.items():
        pa = a.split(".")
        for b in targets:
            pb = b.split(".")
            up = len(pa) > 2 and len(pb) > 1 and pb[1] in _NEVER.get(pa[1], ())
            tool = pb[1:2] == ["tools"] and pa[1] not in ("tools", "cli") and not pa[-1].startswith("bench")
            if up or tool:
                out.append(f"{a} -> {b}")
    return out


def test_the_layer_check_finds_an_import_up_the_layers():
    assert layer_breaches({"mpi_join.join.window": {"mpi_join.runtime.graph"},
                           "mpi_join.storage.staged": {"mpi_join.tools.plan"},
                           "mpi_join.ring.bench_psp": {"mpi_join.tools.bench"}}) == \
        ["mpi_join.join.window -> mpi_join.runtime.graph", "mpi_join.storage.staged -> mpi_join.tools.plan"]


def test_imports_run_down_the_layers():
    assert not layer_breaches(import_graph())


def _from_module(mods, name, node):
    """The module a `from ... import` in module `name` reads."""
    base = name.split(".")
    if node.level:
        keep = len(base) - node.level + (1 if mods[name].endswith("__init__.py") else 0)
        return ".".join(base[:keep] + ([node.module] if node.module else []))
    return node.module or ""


def class_lengths(mods):
    """{(module, class): lines of the class and of its bases in the package, each counted once}."""
    own, bases = {}, {}
    for name, path in mods.items():
        with open(path) as f:
            tree = ast.parse(f.read())
        imported = {a.asname or a.name: (_from_module(mods, name, n), a.name) for n in ast.walk(tree)
                    if isinstance(n, ast.ImportFrom) for a in n.names}
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                own[(name, node.name)] = node.end_lineno - node.lineno + 1
                bases[(name, node.name)] = [imported.get(b.id, (name, b.id)) for b in node.bases
                                            if isinstance(b, ast.Name)]

    def lineage(c, seen):
        for b in bases.get(c, ()):
            if b in own and b not in seen:
                seen.add(b)
                lineage(b, seen)
        return seen
    return {c: n + sum(own[b] for b in lineage(c, set())) for c, n in own.items()}


def long_classes(mods, limit=300):
    """(lines with its bases, module, class) of every class longer than `limit` that way."""
    return sorted(((n, m, c) for (m, c), n in class_lengths(mods).items() if n > limit), reverse=True)


def test_the_length_check_counts_a_class_with_its_bases(tmp_path):
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("class A:\n" + "    x = 1\n" * 199 + "class C:\n    y = 2\n")
    b.write_text("from a import A\nclass B(A):\n" + "    z = 1\n" * 101)
    assert long_classes({"a": str(a), "b": str(b)}) == [(302, "b", "B")]


def test_no_class_with_its_bases_is_over_300_lines():
    """A class that long, its bases' lines counted with its own (they are what it is), does
    several things: split it by the state it holds, each part tested."""
    assert long_classes(_modules()) == []


def foreign_writes(mods):
    """"module:line: target" of every assignment in a function to a field of an object that is
    not the function's own: not `self` or `cls`, not an object the function made (a name it
    bound to a call's result), not a module (a hook such as sys.excepthook) nor the module's own
    object (a name bound at its top level: a thread-local of its figures)."""
    out = []
    for name, path in mods.items():
        with open(path) as f:
            tree = ast.parse(f.read())
        modules = {a.asname or a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
                   for a in n.names}
        modules |= {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                    for a in n.names if _from_module(mods, name, n) not in mods and a.name.islower()}
        modules |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            made = {t.id for n in ast.walk(fn) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)
                    for t in n.targets if isinstance(t, ast.Name)}
            for n in ast.walk(fn):
                targets = n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(
                    n, (ast.AugAssign, ast.AnnAssign)) else []
                for t in [e for t in targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]:
                    if not isinstance(t, ast.Attribute):
                        continue
                    base = t.value
                    if isinstance(base, ast.Name) and base.id in {"self", "cls"} | made | modules:
                        continue
                    out.append(f"{name}:{n.lineno}: {ast.unparse(t)}")
    return out


def test_the_field_check_finds_a_write_to_another_objects_field(tmp_path):
    p = tmp_path / "m.py"
    p.write_text("import sys\nclass A:\n    def f(self, other):\n        self.x = 1\n        out = list()\n"
                 "        out.y = 2\n        sys.hook = 3\n        other.z = 4\n        self.part.w += 5\n")
    assert foreign_writes({"m": str(p)}) == ["m:8: other.z", "m:9: self.part.w"]


def test_no_function_writes_another_objects_fields():
    """An object's fields change in its own methods only, so what changes it can be read in one
    class: a part hands its collaborators values (or asks them through methods), never sets them."""
    assert foreign_writes(_modules()) == []
