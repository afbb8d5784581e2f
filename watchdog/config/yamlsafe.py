"""A YAML loader with limits, so no config file can hang, balloon or crash the loader.

PyYAML's safe loader stops code execution, not resource abuse: a "billion laughs" document of
nested aliases is tiny on disk but expands to billions of nodes once something walks it (the env
substitution, pydantic), a recursive anchor (`&a [*a]`) makes every walk endless, 10,000 nested
brackets overflow the stack, and a 5000-digit integer trips Python's int conversion limit. And a
repeated key silently wins over the first one, so half of a duplicated `channels:` block vanished.

The limits below are far beyond any real config (the example is ~300 lines, nesting depth 6).
Each violation is a `yaml.MarkedYAMLError`, so the loader reports it as file:line:column.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

#: Largest config file read (bytes).
MAX_FILE_BYTES = 1 << 20
#: Deepest nesting of mappings and lists, counted after aliases are expanded.
MAX_DEPTH = 32
#: Most aliases (`*name`) in one document.
MAX_ALIASES = 200
#: Most nodes once every alias is expanded (what a walk over the loaded data visits).
MAX_EXPANDED_NODES = 200_000
#: Longest integer literal, in digits.
MAX_INT_DIGITS = 30

_MERGE_TAG = "tag:yaml.org,2002:merge"


class BoundedLoader(yaml.SafeLoader):
    """SafeLoader plus the limits above and duplicate-key rejection."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._depth = 0
        self._aliases = 0

    def compose_node(self, parent: Optional[Node], index: Any) -> Node:
        mark = self.peek_event().start_mark
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise ComposerError(None, None, f"more than {MAX_ALIASES} aliases in one document", mark)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels", mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> Dict[Any, Any]:
        if isinstance(node, MappingNode):
            first: Dict[Tuple[str, str], int] = {}
            for key_node, _value in node.value:
                if key_node.tag == _MERGE_TAG or not isinstance(key_node, ScalarNode):
                    continue
                key = (key_node.tag, key_node.value)
                line = key_node.start_mark.line + 1
                if key in first:
                    raise ConstructorError(
                        None, None, f"duplicate key {key_node.value[:80]!r} at line {line} "
                        f"(first given at line {first[key]}); each key may appear once", key_node.start_mark)
                first[key] = line
        return super().construct_mapping(node, deep=deep)


def _construct_int(loader: BoundedLoader, node: ScalarNode) -> int:
    digits = sum(ch.isdigit() for ch in node.value)
    if digits > MAX_INT_DIGITS:
        raise ConstructorError(None, None, f"integer with {digits} digits (at most {MAX_INT_DIGITS})",
                               node.start_mark)
    return yaml.SafeLoader.construct_yaml_int(loader, node)


BoundedLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)


def _children(node: Node) -> List[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def check_expansion(root: Node) -> None:
    """Refuse recursive aliases and documents too big or too deep once aliases are expanded.

    Iterative (an explicit stack), memoized per node: linear in the composed graph, whatever the
    expanded size, and never recursing itself.
    """
    size: Dict[int, int] = {}
    depth: Dict[int, int] = {}
    on_path: set = set()
    stack: List[Tuple[Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            kids = _children(node)
            size[key] = 1 + sum(size[id(k)] for k in kids)
            depth[key] = 1 + max((depth[id(k)] for k in kids), default=0)
            on_path.discard(key)
            if size[key] > MAX_EXPANDED_NODES:
                raise ComposerError(None, None, f"aliases expand to more than {MAX_EXPANDED_NODES} values",
                                    node.start_mark)
            if depth[key] > MAX_DEPTH:
                raise ComposerError(None, None, f"aliases expand to nesting deeper than {MAX_DEPTH} levels",
                                    node.start_mark)
            continue
        if key in size:
            continue
        if key in on_path:
            raise ComposerError(None, None, "an alias refers to a node that contains it (recursive anchor)",
                                node.start_mark)
        on_path.add(key)
        stack.append((node, True))
        for kid in _children(node):
            if id(kid) in on_path:
                raise ComposerError(None, None, "an alias refers to a node that contains it (recursive anchor)",
                                    kid.start_mark)
            if id(kid) not in size:
                stack.append((kid, False))


def load(text: str) -> Any:
    """Parse one YAML document within the limits; raises yaml.YAMLError subclasses."""
    loader = BoundedLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        check_expansion(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()
