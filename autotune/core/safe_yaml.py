"""YAML for specs: ``yaml.safe_load`` with limits, so a hostile or mistaken file is refused in one sentence.

Refused before any Python object is built: a key given twice in one mapping (YAML would keep the last one
silently), aliases that expand to more than MAX_YAML_NODES values (a 2.6 KB "billion laughs" document would
otherwise build a billion), an alias loop, and nesting deeper than MAX_YAML_DEPTH.

>>> load_yaml("a: 1\nb: [2, 3]")
{'a': 1, 'b': [2, 3]}
"""

from __future__ import annotations

from typing import Any

import yaml

MAX_YAML_DEPTH = 50  # nested collections in a spec file; a real spec nests four deep
MAX_YAML_NODES = 200_000  # values in a spec file once its aliases are expanded; a real spec holds a few hundred


class YamlRefused(yaml.YAMLError):
    """A YAML document that is well formed but not taken: a duplicate key, aliases that expand too far, or
    nesting too deep. ``key`` names where (``params.BM``, or a line), ``problem`` says what, with its line."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}" if key else problem)
        self.key, self.problem = key, problem


class _SpecLoader(yaml.SafeLoader):
    """``yaml.safe_load``'s loader (the same safe tags), which also refuses nesting deeper than MAX_YAML_DEPTH while
    composing, then duplicate keys and aliases expanding past MAX_YAML_NODES values, before any object is built."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                line = self.peek_event().start_mark.line + 1
                raise YamlRefused(f"line {line}", f"nests collections more than {MAX_YAML_DEPTH} deep")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def get_single_data(self) -> Any:
        node = self.get_single_node()
        if node is None:
            return None
        _check_nodes(node, self)
        return self.construct_document(node)

    def construct_yaml_int(self, node: Any) -> Any:
        try:
            return super().construct_yaml_int(node)
        except ValueError:  # more digits than Python converts (4300)
            line = node.start_mark.line + 1
            raise YamlRefused(f"line {line}", f"holds an integer of {len(node.value)} digits") from None


_SpecLoader.add_constructor("tag:yaml.org,2002:int", _SpecLoader.construct_yaml_int)


def load_yaml(text: str) -> Any:
    """``yaml.safe_load(text)``, refusing (with :class:`YamlRefused`) duplicate keys anywhere, aliases that
    expand to more than MAX_YAML_NODES values (a few KB of "billion laughs" would otherwise build billions),
    and nesting deeper than MAX_YAML_DEPTH. Nothing large is built before the refusal."""
    return yaml.load(text, Loader=_SpecLoader)  # noqa: S506 - a SafeLoader subclass


def _node_children(node: Any, path: str) -> list[tuple[Any, str]]:
    """(child node, its key path) of a composed YAML node: keys and values of a mapping, items of a sequence."""
    if isinstance(node, yaml.MappingNode):
        out = []
        for k, v in node.value:
            name = str(k.value)[:40] if isinstance(k, yaml.ScalarNode) else "?"
            out += [(k, path), (v, f"{path}.{name}" if path else name)]
        return out
    if isinstance(node, yaml.SequenceNode):
        return [(v, f"{path}[{i}]") for i, v in enumerate(node.value)]
    return []


def _check_nodes(root: Any, loader: _SpecLoader) -> None:
    """Refuse a composed document whose aliases expand past MAX_YAML_NODES values or loop, or a mapping that
    repeats a key. Each distinct node is visited once, without recursion, so this costs the file's size."""
    expanded: dict[int, int] = {}  # node id -> values below it, aliases expanded
    open_nodes: set[int] = set()  # being visited: meeting one again below itself is a loop
    stack: list[tuple[Any, str, bool]] = [(root, "", False)]
    while stack:
        node, path, finished = stack.pop()
        where = path or f"line {node.start_mark.line + 1}"
        children = _node_children(node, path)
        if finished:
            open_nodes.discard(id(node))
            expanded[id(node)] = 1 + sum(expanded[id(c)] for c, _ in children)
            if expanded[id(node)] > MAX_YAML_NODES:
                raise YamlRefused(where, f"expands through YAML aliases to more than {MAX_YAML_NODES:,} values "
                                         f"(line {node.start_mark.line + 1}); a spec needs a few hundred")  # fmt: skip
            continue
        if id(node) in expanded:
            continue
        if id(node) in open_nodes:
            raise YamlRefused(where, f"contains itself through a YAML alias (line {node.start_mark.line + 1})")
        open_nodes.add(id(node))
        if isinstance(node, yaml.MappingNode):
            _check_duplicate_keys(node, path, loader)
        stack.append((node, path, True))
        stack.extend((c, p, False) for c, p in reversed(children))  # popped in document order


def _check_duplicate_keys(node: Any, path: str, loader: _SpecLoader) -> None:
    seen: dict[Any, Any] = {}
    for key_node, _ in node.value:
        if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
            continue  # a merge (<<) may be overridden by the mapping's own keys
        key = loader.construct_object(key_node, deep=True)
        try:
            first = seen.setdefault(key, key_node)
        except TypeError:  # unhashable: construction reports it
            continue
        if first is not key_node:
            name = str(key)[:40]
            lines = f"lines {first.start_mark.line + 1} and {key_node.start_mark.line + 1}"
            raise YamlRefused(f"{path}.{name}" if path else name, f"is given twice in one mapping, on {lines}; "
                                                                  "YAML would silently keep only the last")  # fmt: skip
