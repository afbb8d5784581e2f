"""The config reference (docs/configuration.md) generated from the schema itself.

Each key's meaning is the `#:` comment above its field (or the docstring of its section), so the
reference cannot drift from the code: `make docs` rewrites it and a test fails when it is stale.
"""

from __future__ import annotations

import inspect
import re
import typing
from typing import Any, Dict, Iterator, List, Optional, Tuple, Type

from pydantic import BaseModel

from watchdog.compat import Annotated, Literal, get_args, get_origin

from watchdog.config.schema import Config

_FIELD = re.compile(r"^\s+(\w+)\s*:")
_DOC = re.compile(r"^\s+#:\s?(.*)$")


def _field_comments(model: Type[BaseModel]) -> Dict[str, str]:
    """`#:` comment lines right above each field of the model's class body."""
    try:
        lines = inspect.getsource(model).splitlines()
    except (OSError, TypeError):
        return {}
    out: Dict[str, str] = {}
    pending: List[str] = []
    for line in lines[1:]:
        doc = _DOC.match(line)
        if doc:
            pending.append(doc.group(1).strip())
            continue
        field = _FIELD.match(line)
        if field and pending:
            out[field.group(1)] = " ".join(pending)
        pending = []
    return out


def _models_in(annotation: Any) -> List[Type[BaseModel]]:
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for a in get_args(annotation) for m in _models_in(a)]


def _validator_names(metadata: List[Any]) -> str:
    return " ".join(getattr(getattr(m, "func", m), "__name__", "") for m in metadata)


def _type_text(annotation: Any, metadata: Optional[List[Any]] = None) -> str:
    names = _validator_names(metadata or [])
    for marker, text in (("parse_duration", "duration"), ("parse_size", "size"), ("secret", "secret")):
        if marker in names.lower():
            return text
    origin = get_origin(annotation)
    args = get_args(annotation)
    if origin is Annotated:
        return _type_text(args[0], list(args[1:]))
    if origin is Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin in (list, List):
        return f"list of {_type_text(args[0])}" if args else "list"
    if origin in (dict, Dict):
        return "mapping"
    if origin is typing.Union:
        rest = [a for a in args if a is not type(None)]
        return " or ".join(_type_text(a) for a in rest) + (" (optional)" if len(rest) < len(args) else "")
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return "section"
    if getattr(annotation, "__name__", "") == "SecretStr":
        return "secret"
    return getattr(annotation, "__name__", str(annotation)).replace("typing.", "")


def _default_text(info: Any) -> str:
    if info.is_required():
        return "(required)"
    factory = info.default_factory
    if factory is not None and not inspect.isclass(factory) and getattr(factory, "__name__", "") != "<lambda>":
        # Computed at load time (host name, systemd's state directory): say how, not this machine's value.
        if inspect.isbuiltin(factory):
            return f"computed: `{factory.__module__}.{factory.__name__}()`"
        return "computed: " + (inspect.getdoc(factory) or factory.__name__).split("\n")[0].rstrip(".")
    if factory is not None:
        try:
            value = info.default_factory()
        except TypeError:
            return "-"
        if isinstance(value, BaseModel):
            return ""
        return "-" if value in ([], {}) else f"`{value}`".replace("|", "\\|")
    if info.default is None:
        return "-"
    return f"`{info.default}`".replace("|", "\\|")


def _inherited_comments(model: Type[BaseModel]) -> Dict[str, str]:
    """`#:` comments of the model and of the sections it extends (a probe section inherits
    `interval` and `timeout` from ProbeSchedule): the class's own comment wins."""
    out: Dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if inspect.isclass(cls) and issubclass(cls, BaseModel) and cls is not BaseModel:
            out.update(_field_comments(cls))
    return out


def _walk(model: Type[BaseModel], prefix: str) -> Iterator[Tuple[str, str, str, str]]:
    comments = _inherited_comments(model)
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        children = _models_in(info.annotation)
        doc = comments.get(name) or info.description or ""
        if len(children) > 1:  # a union on `type`: its members that stand for a type
            children = [m for m in children if _vendor(m) is not None]
        shown = children[0] if len(children) == 1 else _common_base(children) if children else None
        if shown is not None and not doc and shown.__doc__:  # its own docstring, not the base class's
            doc = inspect.cleandoc(shown.__doc__).split("\n\n")[0].replace("\n", " ")
        is_list = get_origin(info.annotation) in (list, List)
        kind = "list of section" if is_list and len(children) > 1 else _type_text(info.annotation, info.metadata)
        yield path, kind, _default_text(info), doc
        below = f"{path}[]." if is_list else f"{path}."
        if len(children) > 1:
            yield from _walk_union(children, below)
        for child in children[:1]:
            yield from _walk(child, below) if len(children) == 1 else ()


def _common_base(models: List[Type[BaseModel]]) -> Optional[Type[BaseModel]]:
    """The nearest model every member of a union extends (the channels' `ChannelConfig`)."""
    for cls in models[0].__mro__:
        if inspect.isclass(cls) and issubclass(cls, BaseModel) and all(issubclass(m, cls) for m in models[1:]):
            return cls
    return None


def _vendor(model: Type[BaseModel]) -> Any:
    """The `type` a member of a union on `type` stands for (a channel vendor), or None."""
    info = model.model_fields.get("type")
    return info.default if info is not None and isinstance(info.default, str) else None


def _walk_union(models: List[Type[BaseModel]], prefix: str) -> Iterator[Tuple[str, str, str, str]]:
    """A list whose entries are one of several models chosen by `type` (the channels: one model
    per vendor): every key once, in the members' order; a key some vendors lack says which
    `type`s take it."""
    members = models
    seen: Dict[str, Tuple[str, str, str, str]] = {}
    takers: Dict[str, List[str]] = {}
    for model in members:
        for row in _walk(model, prefix):
            seen.setdefault(row[0], row)
            takers.setdefault(row[0], []).append(_vendor(model))
    for path, (_, kind, default, doc) in seen.items():
        if path == f"{prefix}type":
            kind = " \\| ".join(f"`{_vendor(m)}`" for m in members)
            default = "(required)"
        elif len(takers[path]) < len(members):
            doc = f"(`type` {', '.join(takers[path])}) {doc}"
        yield path, kind, default, doc


def render_reference(root: Optional[Type[BaseModel]] = None) -> str:
    """The Markdown table of every key under the config root, in schema order."""
    if root is None:
        root = Config
    rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for path, kind, default, doc in _walk(root, ""):
        rows.append(f"| `{path}` | {kind} | {default} | {doc.replace('|', chr(92) + '|')} |")
    return "\n".join(rows)
