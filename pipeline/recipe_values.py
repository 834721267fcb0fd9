"""A raw recipe mapping's values, before they become dataclasses: `--set key=value` overrides written
into the mapping, and each value checked against its field's type hint (with errors that name the
dotted key, the value and what it should be). pipeline.recipe builds the dataclasses with these.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from typing import Literal, Union

from pipeline.errors import PrepError, closest

__all__ = ["apply_overrides", "check_value"]


# a number in exponent form that YAML 1.1 (PyYAML) reads as a string: it takes a float only with a dot
# and a signed exponent (1.0e+8), so `shard_tokens: 1e8` (and 1.5e9, 5e-4) was "expected an integer, got str"
_EXPONENT = re.compile(r"[-+]?(\d[\d_]*(\.[\d_]*)?|\.\d[\d_]*)[eE][-+]?\d+")


def check_value(value, tp, dotted: str):
    """Check `value` against a type hint; return it (lists become tuples of configs where needed)."""
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        errors = []
        for arm in typing.get_args(tp):
            try:
                return check_value(value, arm, dotted)
            except PrepError as e:
                errors.append(e)
        raise PrepError(f"{dotted}: {value!r} is not {_describe(tp)}{_quoted_number(value, tp)}")
    if origin is Literal:
        if value not in typing.get_args(tp):
            choices = [str(c) for c in typing.get_args(tp)]
            folded = [c for c in choices if c.lower() == str(value).lower()]  # `EOS` found no close match
            hint = f' (did you mean "{folded[0]}"? the choices are lower case)' if folded else closest(str(value), choices)
            raise PrepError(f"{dotted}: {value!r} is not one of {', '.join(choices)}{hint}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise PrepError(f"{dotted}: expected a list, got {value!r}")
        (arm, *_) = typing.get_args(tp)
        return type(value)(check_value(v, arm, f"{dotted}[{i}]") for i, v in enumerate(value))
    if tp is type(None):
        if value is not None:
            raise PrepError(f"{dotted}: expected nothing (null), got {value!r}")
        return None
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        raise PrepError(f"{dotted}: expected a mapping, got {value!r}")
    if tp in (int, float) and isinstance(value, str) and _EXPONENT.fullmatch(value):
        try:
            value = float(value)  # then an integer below where it is whole: 1e8, 1.5e9
        except ValueError:  # misplaced underscores (1__0e3): the error below, about the text
            pass
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp is int and isinstance(value, float) and value.is_integer():
        return int(value)  # 1.0e+8 in YAML is a float, 1e8 a string (converted above)
    if not isinstance(value, tp) or (tp is int and isinstance(value, bool)):
        if tp is str and dotted.endswith(".text_field") and _field_names(value):
            raise PrepError(_several_text_fields(value, dotted))
        raise PrepError(f"{dotted}: expected {_describe(tp)}, got {type(value).__name__} {value!r}"
                        f"{_quoted_number(value, tp)}")
    return value


def _quoted_number(value, tp) -> str:
    """The fix for a number written in quotes ('4', "0.01"): YAML reads it as a string."""
    wants_number = tp in (int, float) or any(a in (int, float) for a in typing.get_args(tp))
    if not (wants_number and isinstance(value, str)):
        return ""
    try:
        float(value.replace("_", ""))
    except ValueError:
        return ""
    return f"; a number in quotes is a string in YAML: write {value.strip()} without quotes"


def _field_names(value) -> bool:
    return isinstance(value, (list, tuple)) and bool(value) and all(isinstance(v, str) and v for v in value)


def _several_text_fields(names, dotted: str) -> str:
    """text_field: [title, text], typed as Megatron's --json-keys takes several keys (a dataset per
    key there): here one field; the message gives the template that joins them, a blank line between."""
    template = "\\n\\n".join("{" + name + "}" for name in names)  # as typed in YAML's double quotes
    where = dotted.rsplit(".", 1)[0]
    return (f"{dotted}: one field, got a list {list(names)!r}; to join fields into one document use "
            f'{where}.text_template instead, e.g. text_template: "{template}" (a format string over the '
            "record's fields), and leave text_field out")


def _describe(tp) -> str:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(a) for a in typing.get_args(tp))
    if origin is Literal:
        return "one of " + ", ".join(map(str, typing.get_args(tp)))
    if origin in (list, tuple):
        return f"a list of {_describe(typing.get_args(tp)[0])}"
    return {str: "a string", int: "an integer", float: "a number", bool: "true/false",
            type(None): "null", dict: "a mapping"}.get(tp, getattr(tp, "__name__", str(tp)))


# sections that may be written as one value: the key it stands for (pipeline.recipe._build)
_SHORTHANDS = {"source": "path", "tokenizer": "path", "output": "dir"}


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Apply `--set key.sub=value` (value parsed as YAML) to the raw recipe mapping."""
    import yaml
    data = yaml.safe_load(yaml.safe_dump(data))  # deep copy
    for item in overrides or ():
        if "=" not in item:
            raise PrepError(f"--set {item!r}: expected key=value, for example --set output.dir=out/x")
        key, raw = item.split("=", 1)
        parts = key.strip().split(".")
        if "" in parts:  # `--set =x` (or a.b.): was ": unknown key", naming no key at all
            raise PrepError(f"--set {item!r}: " + (f"{key.strip()!r} has an empty part" if key.strip() else
                                                   "no key before the =") + "; for example --set output.dir=out/x")
        if not raw.strip():  # YAML reads "" as null: "output.dir: expected a string, got NoneType None"
            raise PrepError(f"--set {item!r}: the value after = is empty (an unset shell variable?); give "
                            f"{key.strip()}'s value (null for none, where the key allows it), or leave this --set out")
        value = _set_value(key.strip(), raw)
        if parts[0] == "source" and "sources" in data:
            parts[0:1] = ["sources", "0"]
        elif parts[0] == "sources" and len(parts) > 2 and "sources" not in data and isinstance(data.get("source"), dict):
            # the reverse: `source:` is the recipe's one source, sources[0] (error messages name it so too);
            # `--set sources.0.path=x` made a mapping {"0": ...} beside it: "`sources:` must be a list"
            _list_index([data["source"]], parts[1], key, ["sources"])
            parts[0:2] = ["source"]
        node = data
        for i, part in enumerate(parts[:-1]):
            if isinstance(node, list):
                index = _list_index(node, part, key, parts[:i])
                if isinstance(node[index], str) and parts[:i] == ["sources"]:
                    node[index] = {"path": node[index]}  # a source written as its path alone, as below
                node = node[index]
                continue
            if i == 0 and part in _SHORTHANDS and isinstance(node.get(part), str):
                # `source: data.jsonl`, `tokenizer: gpt2`, `output: out/x` are the section's one key alone: a
                # --set of another of its keys was "source is not a section"
                node[part] = {_SHORTHANDS[part]: node[part]}
            if part == "source" and "source" not in node and i == 0:
                node = node.setdefault("source", {})
                continue
            nxt = node.setdefault(part, {})
            if not isinstance(nxt, (dict, list)):
                raise PrepError(f"--set {key}: {'.'.join(parts[:i + 1])} is not a section")
            node = nxt
        if isinstance(node, list):
            node[_list_index(node, parts[-1], key, parts[:-1])] = value
        else:
            node[parts[-1]] = value
    return data


# YAML errors inside a `[...]`, `{...}` or quoted value the user opened: YAML was meant and is cut or
# wrong (`--set filters.x=[a` became the string "[a"). Any other error is text YAML cannot read as a
# value (`*.jsonl` an alias, `@x`, `{url}\n\n{text}` a mapping and more): the text as given.
_OPENED = ("while parsing a flow", "while scanning a quoted scalar", "while scanning a double-quoted scalar")


def _set_value(key: str, raw: str):
    """`--set key=raw`'s value: `raw` read as YAML; the text itself where YAML cannot read it as a value
    and nothing says YAML was meant; a PrepError where a bracket or quote it opened is cut or wrong."""
    import yaml
    try:
        return yaml.safe_load(raw)
    except yaml.MarkedYAMLError as e:
        if not str(e.context or "").startswith(_OPENED):
            return raw
        import json
        import shlex
        mark = e.problem_mark
        where = f" at character {mark.column + 1}" if mark is not None else ""
        quoted = shlex.quote(f"{key}={json.dumps(raw, ensure_ascii=False)}")  # a JSON string is YAML too
        fix = ("write a backslash as \\\\ inside double quotes, or use single quotes" if "escape" in str(e.problem)
               else "close the quote" if "quoted" in e.context else "close the brackets")
        raise PrepError(f"--set {key + '=' + raw!r}: not valid YAML: {e.problem}{where} ({e.context}); {fix}, or "
                        f"quote the value in YAML to mean this text: --set {quoted}") from None
    except (yaml.YAMLError, ValueError):  # `!foo x`; `2020-13-45` a timestamp whose date is not one
        return raw


def _list_index(node: list, part: str, key: str, path: list[str]) -> int:
    """`part` as an index of the list `node` (at dotted `path`) for `--set key=...`, or a PrepError
    naming the indices there are (int(part) and node[...] raised a ValueError or IndexError: a
    traceback). An index counts from 0 as the list is written; a negative one is refused too."""
    if part.isascii() and part.isdigit() and int(part) < len(node):  # ascii: int() refuses "²"
        return int(part)
    where = ".".join(path)
    has = (f"holds {len(node)} item{'s' if len(node) != 1 else ''}: give an index from 0 to {len(node) - 1}"
           if node else "is an empty list")
    raise PrepError(f"--set {key}: {part!r} is not an index of {where}, which {has}")
