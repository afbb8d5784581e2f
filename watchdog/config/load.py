"""Read, resolve and validate the YAML config; every error names its key path.

Resolution order: YAML parse (syntax errors carry file:line:column) -> `${ENV}` substitution in
string values (a missing variable is an error at its key path; `${VAR:-default}` allowed) ->
schema validation (unknown keys, wrong types, bad durations/sizes, out-of-range numbers).
"""

from __future__ import annotations

import os
import re
import types
from typing import Any, List, Optional, Sequence, Tuple, Type, TypeVar, Union

import yaml  # noqa: F401  (error classes)
from pydantic import BaseModel, SecretStr, ValidationError

import watchdog.config.yamlsafe as yamlsafe
import watchdog.config.schema as schema
from watchdog.compat import Annotated, get_args, get_origin
from watchdog.config.schema import Config
from watchdog.config.types import read_bounded
from watchdog.privacy.redact import is_secret_variable, token_like
from watchdog.service.defaults import DEFAULT_CONFIG_PATH

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
# Secrets may be written inline as ${ENV}; such values are remembered so dumps can hide them.


class ConfigError(Exception):
    """A config that cannot be used. `errors` holds one line per problem, each `path: message`."""

    def __init__(self, source: str, errors: Sequence[str]):
        self.source = source
        self.errors = list(errors)
        super().__init__(f"{source}: " + "; ".join(self.errors))

    def render(self) -> str:
        head = f"invalid config {self.source}:"
        return "\n".join([head] + [f"  {e}" for e in self.errors])


def _path_str(loc: Tuple[Union[str, int], ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def _lookup(data: Any, loc: Tuple[Union[str, int], ...]) -> Tuple[bool, Any]:
    cur = data
    for part in loc:
        try:
            cur = cur[part]
        except (KeyError, IndexError, TypeError):
            return False, None
    return True, cur


def _clean_loc(loc: Tuple[Union[str, int], ...]) -> Tuple[Union[str, int], ...]:
    # pydantic puts validator/type names into the location for unions and function validators.
    return tuple(p for p in loc if not (isinstance(p, str) and ("[" in p or p.startswith("function-"))))


def _show(value: Any) -> str:
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, (dict, list)):
        text = repr(value)
        return text if len(text) <= 60 else text[:57] + "..."
    return repr(value)


#: `Optional[X]`/`Union` and, from 3.10, `X | None` (types.UnionType; absent before 3.10).
_UNIONS = (Union, getattr(types, "UnionType", Union))


def _unwrap(tp: Any) -> List[Any]:
    """The types a field annotation can hold: Optional/Union split, Annotated stripped."""
    while get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    if get_origin(tp) in _UNIONS:
        return [t for arg in get_args(tp) for t in _unwrap(arg)]
    return [tp]


def _holds_secret(tp: Any) -> bool:
    """A Secret, or a list/dict of them (a model holding one further down is not: its other
    fields can be echoed)."""
    for t in _unwrap(tp):
        if isinstance(t, type) and issubclass(t, SecretStr):
            return True
        if get_origin(t) in (list, tuple, set, frozenset, dict) and get_args(t):
            if _holds_secret(get_args(t)[-1] if get_origin(t) is dict else get_args(t)[0]):
                return True
    return False


def is_secret_loc(model: Any, loc: Sequence[Union[str, int]]) -> bool:
    """Whether the value at `loc` in a config of class `model` is (or holds) a Secret, judged by
    the schema's types and not by the value's own: a numeric API key written without quotes is
    an int in YAML, and still a secret in every error message."""
    types = _unwrap(model)
    for part in loc:
        if any(_holds_secret(t) for t in types):
            return True
        step: List[Any] = []
        for t in types:
            origin = get_origin(t)
            if isinstance(t, type) and issubclass(t, BaseModel) and isinstance(part, str):
                field = t.model_fields.get(part)
                if field is not None:
                    step.extend(_unwrap(field.annotation))
            elif origin is dict and get_args(t):
                step.extend(_unwrap(get_args(t)[1]))
            elif origin in (list, tuple, set, frozenset) and get_args(t):
                step.extend(_unwrap(get_args(t)[0]))
        types = step
    return any(_holds_secret(t) for t in types)


def format_validation_error(exc: ValidationError, raw: Any, secret_paths: Sequence[str] = (),
                            model: Any = None, env_secrets: Sequence[str] = ()) -> List[str]:
    """Turn pydantic's errors into `key.path: message, got 'value'` lines; a value at a Secret's
    place in `model`'s schema is never shown, nor one holding a URL (a channel's webhook written
    where the list of channels is expected) or a credential-named `${NAME}`'s value."""
    lines = []
    for err in exc.errors(include_url=False):
        loc = _clean_loc(err["loc"])
        path = _path_str(loc)
        msg = err["msg"]
        kind = err["type"]
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, "):]
        if msg.startswith("Assertion failed, "):
            msg = msg[len("Assertion failed, "):]
        if kind == "extra_forbidden":
            lines.append(f"{path}: unknown key")
            continue
        if kind == "missing":
            lines.append(f"{path}: required key is missing")
            continue
        found, value = _lookup(raw, loc)
        redact = any(path == s or path.startswith(s + ".") for s in secret_paths) or "secret" in path \
            or "token" in path or path.endswith("url") or (model is not None and is_secret_loc(model, loc))
        if redact and found and kind == "string_type":
            msg += " (YAML reads an unquoted number or true/false as such: quote the secret)"
        if found and not redact and _may_hold_secret(value, env_secrets):
            redact = True
        if found and not isinstance(value, dict) and not redact:
            lines.append(f"{path}: {msg}, got {_show(value)}")
        else:
            lines.append(f"{path}: {msg}")
    return lines


def _may_hold_secret(value: Any, env_secrets: Sequence[str]) -> bool:
    text = value if isinstance(value, str) else repr(value)[:4096]
    return "://" in text or any(s in text for s in env_secrets)


def _substitute_env(node: Any, path: str, errors: List[str], env_paths: List[str],
                    env_secrets: Optional[List[str]] = None) -> Any:
    """`${NAME}` and `${NAME:-default}` replaced from the environment; the values of variables
    whose name says they hold a credential are collected in `env_secrets`."""
    if isinstance(node, dict):
        return {k: _substitute_env(v, f"{path}.{k}" if path else str(k), errors, env_paths, env_secrets)
                for k, v in node.items()}
    if isinstance(node, list):
        return [_substitute_env(v, f"{path}[{i}]", errors, env_paths, env_secrets) for i, v in enumerate(node)]
    if isinstance(node, str) and "${" in node:
        def repl(m: "re.Match[str]") -> str:
            name, default = m.group(1), m.group(2)
            if name in os.environ:
                if env_secrets is not None and is_secret_variable(name) and token_like(os.environ[name]):
                    env_secrets.append(os.environ[name])
                return os.environ[name]
            if default is not None:
                return default
            errors.append(f"{path}: environment variable {name} is not set")
            return ""
        env_paths.append(path)
        return _ENV_REF.sub(repl, node)
    return node


def parse_yaml(text: str, source: str) -> Any:
    """Parse YAML within the loader's limits (yamlsafe); a syntax error or a broken limit becomes a
    ConfigError with file:line:column."""
    try:
        data = yamlsafe.load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        problem = exc.problem or exc.context or "syntax error"
        raise ConfigError(source, [f"{where}: YAML syntax error: {problem}"]) from None
    except yaml.YAMLError as exc:
        raise ConfigError(source, [f"{source}: YAML error: {exc}"]) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(source, [f"(top level): expected a mapping of sections, got {type(data).__name__}"])
    return data


def load_config_text(text: str, source: str = "<string>") -> Config:
    """Validate config text; raises ConfigError listing every problem found, and nothing else
    (besides NotAssembled: an entry point that forgot the composition root, a programming error)."""
    schema.ASSEMBLED.get()
    try:
        return validate_text(Config, text, source)
    except ConfigError:
        raise
    except (RecursionError, MemoryError, OverflowError, ValueError, TypeError) as exc:
        # A safety net: every known bad input has its own message above; this one must never be
        # a traceback (the fuzz tests look for it to find the next gap).
        raise ConfigError(source, [f"{source}: cannot load this config ({type(exc).__name__}: {str(exc)[:200]})"]) from None


M = TypeVar("M", bound=BaseModel)


def validate_text(model: Type[M], text: str, source: str) -> M:
    """YAML text -> `model`, with `${ENV}` substituted; every problem (YAML, environment, schema)
    is one ConfigError naming the key. Shared by the daemon's config and the relay's."""
    raw = parse_yaml(text, source)
    errors: List[str] = []
    env_paths: List[str] = []
    env_secrets: List[str] = []
    data = _substitute_env(raw, "", errors, env_paths, env_secrets)
    try:
        config = model.model_validate(data)
    except ValidationError as exc:
        errors.extend(format_validation_error(exc, data, env_paths, model, env_secrets))
        raise ConfigError(source, errors) from None
    if errors:
        raise ConfigError(source, errors)
    if env_secrets and "_env_secrets" in (getattr(model, "__private_attributes__", None) or {}):
        config._env_secrets = tuple(sorted(set(env_secrets), key=len, reverse=True))  # type: ignore[attr-defined]
    return config


def read_config_file(path: str) -> str:
    """The text of a config file, within the loader's size limit (regular files only)."""
    try:
        return read_bounded(path, yamlsafe.MAX_FILE_BYTES).decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(path, [f"{path}: no such file (use -c to name the config)"]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(path, [f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}"]) from None


def load_config(path: Optional[str]) -> Config:
    """Load and validate a config file; a missing or unreadable file is a ConfigError too."""
    path = path or DEFAULT_CONFIG_PATH
    return load_config_text(read_config_file(path), path)


def with_state_dir(config: Config, state_dir: str) -> Config:
    """A copy of `config` with its state moved (`--state-dir`, `probe`'s scratch folder); the
    snapshots follow only when the config did not name their folder itself. A config is frozen:
    every change is a new object."""
    explicit = config.paths.snapshot_dir != os.path.join(config.paths.state_dir, "snapshots")
    data = config.paths.model_dump()
    data["state_dir"] = state_dir
    if not explicit:
        data.pop("snapshot_dir", None)
    return config.model_copy(update={"paths": type(config.paths).model_validate(data)})


def redacted_dump(config: Config) -> dict:
    """The effective config as plain data with every secret replaced by `<redacted>`: `Secret`
    fields, and a credential given as `${NAME}` wherever it was written (`config._env_secrets`)."""
    from_env = getattr(config, "_env_secrets", ())

    def walk(node: Any) -> Any:
        if isinstance(node, SecretStr):
            return "<redacted>"
        if isinstance(node, str):
            for value in from_env:
                node = node.replace(value, "<redacted>")
            return node
        if isinstance(node, BaseModel):
            return {name: walk(getattr(node, name)) for name in type(node).model_fields}
        if isinstance(node, dict):
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, (list, tuple)):
            return [walk(v) for v in node]
        return node

    return walk(config)
