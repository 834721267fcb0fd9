"""The CLI's usage errors as one line, like prep's other errors, and `prep --version`.

typer printed a bad or missing option as a usage line, a "Try ... --help" line and a boxed rich panel
(a wrong `-j 0` was 6 lines); every other user error of prep is one line on stderr. Usage errors keep
click's exit code 2, so a script can still tell them from a failed run (1).
"""

from __future__ import annotations

import contextlib
import sys

import typer
from rich.markup import escape
from typer.core import TyperCommand, TyperGroup

__all__ = ["PrepGroup", "PrepCommand", "usage_line", "version_text", "HELP_OPTIONS"]

HELP_OPTIONS = {"help_option_names": ["-h", "--help"]}  # context settings: subcommands inherit them

# typer >= 0.2x vendors click (typer._click), older typer uses click itself: the class typer's own
# BadParameter derives from is the UsageError typer raises, whichever it is
_UsageError = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")


class PrepGroup(TyperGroup):
    """The `prep` command group: a usage error in its options or any subcommand's is one line."""

    def make_context(self, info_name, args, parent=None, **extra):  # parses `prep`'s own options
        with _one_line_signals(lambda: []), _one_line_usage_errors(lambda: info_name or "prep"):
            return super().make_context(info_name, args, parent=parent, **extra)

    def invoke(self, ctx):  # resolves the subcommand and parses its options
        # the subcommand's path for the error's pointer: click's "Option '-r' requires an argument"
        # comes without the subcommand's context
        subcommand = lambda: ctx.meta.get(_SUBCOMMAND, [])  # noqa: E731
        with _one_line_signals(subcommand), _one_line_usage_errors(lambda: " ".join([ctx.command_path, *subcommand()])):
            return super().invoke(ctx)

    def resolve_command(self, ctx, args):
        name, command, rest = super().resolve_command(ctx, args)
        ctx.meta[_SUBCOMMAND] = [name] if name else []
        return name, command, rest


class PrepCommand(TyperCommand):
    """A subcommand whose help names its arguments as click does: `verify [OPTIONS] DIR` and `DIR  Dataset
    directory...`. typer 0.29 wrote `{DIR}` in the usage line (its mark for a required argument) and
    `DIR <str>` in the list (the Python type), which no user types."""

    def collect_usage_pieces(self, ctx):
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if getattr(param, "param_type_name", "") == "argument":
                name = _argument_name(param)
                pieces.append(name if param.required else f"[{name}]")
        return pieces

    def format_options(self, ctx, formatter):
        arguments, options = [], []
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if getattr(param, "param_type_name", "") == "argument":
                # the usage line says it is required: "[required]" after every argument's help repeats it
                arguments.append((_argument_name(param), record[1].removesuffix("[required]").rstrip()))
            else:
                options.append(record)
        for title, rows in (("Arguments", arguments), ("Options", options)):
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


def _argument_name(param) -> str:
    return param.metavar or param.name.upper()


_SUBCOMMAND = "prep.subcommand"  # in click's ctx.meta, which a command's contexts share


@contextlib.contextmanager
def _one_line_usage_errors(command_path):
    try:
        yield
    except _UsageError as e:
        if type(e).__name__ == "NoArgsIsHelpError":
            # a bare `prep`: its help on stdout, exit 0, as pip, cargo and docker do (`prep | less` paged
            # nothing; click printed it to stderr with exit 2, the code of a mistyped option)
            sys.stdout.write(e.ctx.get_help() + "\n")
            raise typer.Exit(0) from None
        from pipeline.tokenize_command import err
        line = usage_line(e, command_path())
        err.print(f"[bold red]error:[/] {escape(line)}", markup=True, highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None


@contextlib.contextmanager
def _one_line_signals(subcommand):
    """A Ctrl-C or SIGTERM while click parses the command line or resolves the command (outside the
    command's own handling, pipeline.tokenize_command.exit_code): one line and its code, as there.
    typer 0.29 turned it into a silent exit 130, a SIGTERM's too (143 is its code)."""
    try:
        yield
    except KeyboardInterrupt as e:
        from pipeline.interrupts import RESUME_HINT, describe
        what, code = describe(e)
        # `prep tokenize`'s line names what a re-run does, as the console script's (pipeline.launch)
        sys.stderr.write(f"{what}: {RESUME_HINT}\n" if subcommand() == ["tokenize"] else f"{what}\n")
        raise typer.Exit(code) from None


def usage_line(e, command_path: str = "prep") -> str:
    """`e` (a click UsageError) in one line: the option, the value given and what it should be, then
    where the options are listed. click's message may span lines ("No such option: --recpie\nDid you
    mean --recipe?" in some versions); typer 0.29 reports a range or type error in pydantic's words
    ("Input should be greater than or equal to 1") without the value."""
    ctx = getattr(e, "ctx", None)
    param = getattr(e, "param", None)
    if param is not None and type(e).__name__ == "BadParameter":
        detail = _pydantic_detail(e)
        reason = f"{detail[0]!r} {detail[1]}" if detail else " ".join(e.message.split())
        message = f"{_option_name(param)}: {reason}"
    else:
        message = " ".join(e.format_message().split())
    path = ctx.command_path if ctx is not None else command_path
    return f"{message.rstrip('.')} (see `{path} -h`)"


def _pydantic_detail(e) -> tuple[object, str] | None:
    """(the value given, what it should be) from the pydantic ValidationError typer 0.29 raises from."""
    errors = getattr(e.__cause__, "errors", None)
    if not callable(errors):
        return None
    try:
        first = errors()[0]
    except Exception:  # not pydantic's errors() after all
        return None
    reason = str(first.get("msg", "")).removeprefix("Input ")
    return first.get("input"), reason or "not a valid value"


def _option_name(param) -> str:
    """`--num-workers/-j` for an option, its metavar (DIR) for an argument."""
    opts = list(getattr(param, "opts", ()) or ())
    if getattr(param, "param_type_name", "") == "argument":
        return param.metavar or (opts[0].upper() if opts else "argument")
    return "/".join(sorted(opts, key=lambda o: -len(o))) or str(param.name)


def version_text() -> str:
    """`prep --version`: prep's version and where it runs from (an editable install's path tells
    checkouts apart: they all say 0.1.0), then the engines that decide the token ids, for bug reports."""
    import platform
    from importlib import metadata
    from pathlib import Path

    def version(dist: str) -> str | None:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None

    import pipeline
    here = Path(pipeline.__file__).resolve().parent
    first = (f"prep {version('prep') or '(version unknown: not installed)'} ({here}, "
             f"Python {platform.python_version()})")
    libs = [f"{name} {version(name) or 'not installed'}" for name in ("tokenizers", "tiktoken", "gigatoken")]
    torch = version("torch")  # optional: only the loaders need it
    return first + "\n" + ", ".join(libs + ([f"torch {torch}"] if torch else []))


def print_version(value: bool) -> None:
    """--version's callback (eager: it answers before a subcommand is required)."""
    if value:
        sys.stdout.write(version_text() + "\n")
        raise typer.Exit(0)
