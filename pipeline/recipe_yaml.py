"""A recipe file's YAML: read with the line of every key, so that an error about a key says where it is
(`r.yaml:7: output.shard_tokens: expected an integer, got str '1M'`), as a compiler names a source line.

Also the YAML mistakes that gave a wrong or vague error: a syntax error named no line ("not valid YAML:
while parsing a block mapping"), a key written twice kept only its last value (a second `tokenizer:`
section dropped the first's path: "tokenizer.path: required key is missing"), and an empty file was
"a recipe is a mapping of keys".
"""

from __future__ import annotations

import re

from pipeline.errors import PrepError

__all__ = ["load_recipe_yaml", "located", "overridden_keys"]

_REQUIRED = "name, source, tokenizer and output (recipes/demo.yaml is a small one)"
# a message's leading dotted key, as pipeline.recipe names fields: output.dir, sources[1].path, unit_bytes
_KEY = re.compile(r"^(?:--set )?([A-Za-z_]\w*(?:\[\d+\])?(?:\.[A-Za-z_]\w*(?:\[\d+\])?)*):")


def load_recipe_yaml(text: str, path: str) -> tuple[dict, dict[str, int]]:
    """The recipe mapping and {dotted key: line number (1-based)}; PrepError for invalid YAML (with its
    line and column), a duplicate key, an empty file or a top level that is not a mapping."""
    import yaml
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as e:
        raise PrepError(_syntax_error(e, path, text)) from None
    except yaml.YAMLError as e:  # no position known
        raise PrepError(f"{path}: not valid YAML: {str(e).splitlines()[0]}") from None
    if root is None:
        raise PrepError(f"{path}: the recipe is empty; it needs {_REQUIRED}")
    if not isinstance(root, yaml.MappingNode):
        raise PrepError(f"{path}:{root.start_mark.line + 1}: the recipe is a "
                        f"{'list' if isinstance(root, yaml.SequenceNode) else 'single value'}, not a mapping of "
                        f"keys; it needs {_REQUIRED}")
    lines: dict[str, int] = {}
    _walk(root, "", lines, path)
    try:
        return yaml.safe_load(text), lines
    except (yaml.YAMLError, ValueError) as e:  # a value YAML's types refuse: `name: 2020-13-45`, `seed: !!int x`
        raise PrepError(_value_error(root, path, e)) from None


def _value_error(root, path: str, error: Exception) -> str:
    """The value YAML could parse but not construct (a ValueError or ConstructorError traceback: an
    impossible date YAML reads as a timestamp, a tag), at its line, with its key and the fix."""
    import yaml
    loader = yaml.SafeLoader("")
    stack = [(root, "")]
    while stack:
        node, where = stack.pop()
        if isinstance(node, yaml.MappingNode):
            stack.extend((v, f"{where}.{k.value}" if where else str(k.value)) for k, v in reversed(node.value))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((v, f"{where}[{i}]") for i, v in reversed(list(enumerate(node.value))))
        else:
            try:
                loader.construct_object(node, deep=True)
            except (yaml.YAMLError, ValueError) as e:
                problem = getattr(e, "problem", None) or str(e)
                mark = node.start_mark
                tagged = (mark.buffer or "")[mark.pointer:mark.pointer + 1] == "!"  # the node starts at its tag
                fix = "remove the tag" if tagged else f"quote it to mean the text: '{node.value}'"
                return f"{path}:{mark.line + 1}:{mark.column + 1}: {where}: YAML cannot read {node.value!r} ({problem}); {fix}"
    return f"{path}: not valid YAML: {getattr(error, 'problem', None) or error}"


def _syntax_error(e, path: str, text: str) -> str:
    mark = e.problem_mark or e.context_mark
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else path
    what = " ".join(filter(None, [e.problem, f"({e.context} at line {e.context_mark.line + 1})"
                                  if e.context and e.context_mark is not None and mark is not e.context_mark else ""]))
    fix = "; check this line's indentation" if "expected <block end>" in str(e.problem) else ""
    if mark is not None and "\t" in (text.splitlines()[mark.line:mark.line + 1] or [""])[0][:mark.column + 1]:
        fix = "; YAML indents with spaces, not tabs"
    return f"{where}: not valid YAML: {what or e}{fix}"


def _walk(node, where: str, lines: dict[str, int], path: str) -> None:
    import yaml
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key, value in node.value:
            name = str(key.value)
            line = key.start_mark.line + 1
            dotted = f"{where}.{name}" if where else name
            if name in seen:  # YAML keeps the last one silently: the first's keys were lost
                raise PrepError(f"{path}:{line}: {dotted}: given twice (first at line {seen[name]}); YAML keeps only "
                                "the last, so merge the two into one")
            seen[name] = line
            lines[dotted] = line
            _walk(value, dotted, lines, path)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            lines[f"{where}[{i}]"] = item.start_mark.line + 1
            _walk(item, f"{where}[{i}]", lines, path)


def located(message: str, path: str, lines: dict[str, int], overridden: list[str]) -> str:
    """`message` prefixed with `path:LINE: ` when it begins with a key the recipe file has (or its
    nearest written parent: a missing key is reported at its section), unless the value came from the
    command line (`overridden`: --set keys, output.dir for --output) or it names its place already."""
    match = _KEY.match(message)
    if not match or message.startswith(path):
        return message
    key = match.group(1)
    candidates = [key]
    if key.startswith("source.") or key == "source":  # one source written as a `sources:` list of one
        candidates.append("sources[0]" + key[len("source"):])
    for candidate in candidates:
        # a --set below the key counts only where the file does not write the key (`--set filters.x=1`:
        # "filters: unknown key" came from it); `output: [o]` in the file with --output is the file's line
        given = [o for o in overridden if _within(candidate, o) or (_within(o, candidate) and candidate not in lines)]
        if given:  # the value came from the command line: say so (--output's output.dir needs no word)
            return message if given[0] == "output.dir" or message.startswith("--set") else f"--set {message}"
    for candidate in candidates:
        parts = re.findall(r"\.?([^.\[]+|\[\d+\])", candidate)
        for n in range(len(parts), 0, -1):
            prefix = "".join(p if p.startswith("[") or i == 0 else "." + p for i, p in enumerate(parts[:n]))
            if prefix in lines:
                return f"{path}:{lines[prefix]}: {message}"
    return message


def _within(key: str, parent: str) -> bool:
    return key == parent or key.startswith(parent + ".") or key.startswith(parent + "[")


def overridden_keys(sets: list[str], output_dir: str | None) -> list[str]:
    """The dotted keys --set and --output give values to, in the messages' spelling (sources[0].path);
    output.dir for --output comes first: it wins over a --set of output.dir."""
    keys = ["output.dir"] if output_dir is not None else []
    for item in sets or ():
        key = item.split("=", 1)[0].strip()
        keys.append(re.sub(r"\.(\d+)(?=\.|$)", r"[\1]", key))
    return keys
