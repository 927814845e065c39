"""YAML as Signoff's own files read it (the approval policy, the HTTP APIs): safe, and refusing a key
given twice, which PyYAML would keep silently (a second `decision:` could turn a deny into an allow)."""

from __future__ import annotations

from typing import Any

import yaml


class _StrictLoader(yaml.SafeLoader):
    """Safe YAML that refuses a key given twice."""


def _mapping_without_duplicates(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            given_twice = key in seen
        except TypeError:  # an unhashable key: construct_mapping refuses it with its own message
            continue
        if given_twice:
            raise yaml.constructor.ConstructorError(None, None, f"the key {key!r} is given twice",
                                                    key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)


def load_yaml(text: str) -> Any:
    """`text` as YAML; raises `yaml.YAMLError` (a duplicate key is a `ConstructorError`)."""
    return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
