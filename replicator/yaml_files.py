"""A YAML file a user wrote (a config, a scenario): one line for each way reading it can fail."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml.safe_load, but a key given twice in one mapping is an error: YAML keeps the last,
    and a second `stream:` (a paste, a typo) would silently replace the first. Checked as each
    mapping is composed, as written: merges (`<<: *base`) are applied later, and their keys may
    be overridden."""

    def compose_mapping_node(self, anchor: Any) -> yaml.MappingNode:
        node: yaml.MappingNode = super().compose_mapping_node(anchor)
        seen: set[tuple[str, str]] = set()
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = (key_node.tag, key_node.value)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"key {key_node.value!r} is given twice in one mapping: keep one",
                    key_node.start_mark,
                )
            seen.add(key)
        return node


def read_yaml(path: Path, what: str) -> Any:
    """The document in `path` (`what`: "config file", "scenario file"), or ValueError with one
    line that names the file, the problem and the fix."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ValueError(f"{path}: cannot read {what}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text (byte {e.start}): save the file as UTF-8") from None
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader: no arbitrary objects
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f": line {mark.line + 1}" if mark else ""
        problem = getattr(e, "problem", None) or getattr(e, "reason", None) or str(e)
        raise ValueError(f"{path}{where}: not valid YAML: {' '.join(str(problem).split())}") from None
    except ValueError as e:  # a value YAML's own types cannot hold (a date with month 13, a bad !!int)
        raise ValueError(
            f"{path}: a value YAML cannot read ({e}): quote it, or write it as documented"
        ) from None
