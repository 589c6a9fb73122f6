"""``proxyfleet completion bash|zsh``: a shell completion script, printed.

The script is made from this very command line (the argparse tree: commands,
nested commands, options, their choices, and which values are files or
directories), so it never falls behind a new flag; regenerate it after an
upgrade. zsh runs the same function through its bash-completion layer
(``bashcompinit``), so both shells complete alike.

Written here rather than taken from a library (shtab, argcomplete): the tree is
small and plain argparse, and the package keeps no dependency the pre-commit
hook's and the quick install's environments would have to fetch; argcomplete
would also start Python on every Tab.

    proxyfleet completion bash > /etc/bash_completion.d/proxyfleet
    source <(proxyfleet completion zsh)    # in ~/.zshrc, after compinit
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Iterator
from typing import Any

SHELLS = ("bash", "zsh")
FILE_METAVARS = frozenset({"FILE", "PATH", "SOCKET"})
DIR_METAVARS = frozenset({"DIR"})


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "completion",
        help="print a shell completion script (bash or zsh)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("shell", choices=SHELLS, help="the shell to complete in")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from reconciler.cli import build_parser  # the whole tree, this command included

    print(script(build_parser(), shell=args.shell))
    return 0


def script(parser: argparse.ArgumentParser, *, shell: str) -> str:
    """The completion script for ``shell`` of the command line ``parser`` parses."""
    subs: list[str] = []
    opts: list[str] = []
    values: list[str] = []
    positionals: dict[str, str] = {}
    for path, node in _walk(parser, "proxyfleet"):
        names = _subcommands(node)
        if names:
            subs.append(_entry(path, " ".join(names)))
        opts.append(_entry(path, " ".join(_option_strings(node))))
        for action in node._actions:
            kind = _values(action)
            if kind is None:
                continue
            if action.option_strings:
                values.extend(_entry(f"{path} {o}", kind) for o in action.option_strings)
            elif path not in positionals:  # the first positional only
                positionals[path] = kind
    tables = "\n".join(
        [
            _table("_proxyfleet_subs", subs),
            _table("_proxyfleet_opts", opts),
            _table("_proxyfleet_values", values),
            _table("_proxyfleet_positionals", [_entry(k, v) for k, v in positionals.items()]),
        ]
    )
    head = ZSH_HEAD if shell == "zsh" else BASH_HEAD
    return f"{head}{tables}\n{FUNCTION}"


def _walk(parser: argparse.ArgumentParser, path: str) -> Iterator[tuple[str, Any]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            seen: list[argparse.ArgumentParser] = []
            for name, sub in action.choices.items():
                if any(sub is s for s in seen):
                    continue  # an alias
                seen.append(sub)
                yield from _walk(sub, f"{path} {name}")


def _subcommands(parser: argparse.ArgumentParser) -> list[str]:
    return [
        name
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
        for name in action.choices
    ]


def _option_strings(parser: argparse.ArgumentParser) -> list[str]:
    return [
        option
        for action in parser._actions
        if action.help != argparse.SUPPRESS
        for option in action.option_strings
    ]


def _values(action: argparse.Action) -> str | None:
    """What completes an action's value: its choices, ``@file``, ``@dir``, ``@any`` (a
    free value such as a duration: nothing to offer); None: it takes no value."""
    if action.nargs == 0:
        return None
    if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
        return " ".join(str(c) for c in action.choices)
    metavar = action.metavar if isinstance(action.metavar, str) else ""
    if metavar in DIR_METAVARS:
        return "@dir"
    if metavar in FILE_METAVARS:
        return "@file"
    return "@any"


def _entry(key: str, value: str) -> str:
    """One ``[key]=value`` line of a table; keys are command paths (``proxyfleet hosts
    check``), with an option after them in the values' table."""
    return f"  [{shlex.quote(key)}]={shlex.quote(value)}"


def _table(name: str, entries: list[str]) -> str:
    body = "\n".join(entries)
    return f"{name}=(\n{body}\n)"


BASH_HEAD = """\
# proxyfleet completion for bash: made by `proxyfleet completion bash`.
declare -gA _proxyfleet_subs _proxyfleet_opts _proxyfleet_values _proxyfleet_positionals
"""

ZSH_HEAD = """\
# proxyfleet completion for zsh, through zsh's bash-completion layer: made by
# `proxyfleet completion zsh`.
autoload -U +X bashcompinit && bashcompinit
typeset -gA _proxyfleet_subs _proxyfleet_opts _proxyfleet_values _proxyfleet_positionals
"""

FUNCTION = r"""
_proxyfleet() {
    # zsh: arrays from 0 as in bash; a subscript's quotes would be part of the key there.
    [[ -n ${ZSH_VERSION-} ]] && setopt local_options ksh_arrays
    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
    local cmdpath=proxyfleet word i skip=""
    for ((i = 1; i < COMP_CWORD; i++)); do
        word=${COMP_WORDS[i]}
        if [[ -n $skip ]]; then skip=""; continue; fi
        if [[ $word == -* ]]; then
            [[ $word != *=* && -n ${_proxyfleet_values[$cmdpath $word]-} ]] && skip=1
            continue
        fi
        if [[ " ${_proxyfleet_subs[$cmdpath]-} " == *" $word "* ]]; then
            cmdpath="$cmdpath $word"
        fi
    done
    local values=""
    if [[ $cur == -*=* ]]; then
        values=${_proxyfleet_values[$cmdpath ${cur%%=*}]-}
        cur=${cur#*=}
    elif [[ $prev == -* && -n ${_proxyfleet_values[$cmdpath $prev]-} ]]; then
        values=${_proxyfleet_values[$cmdpath $prev]}
    elif [[ $cur == -* ]]; then
        values=${_proxyfleet_opts[$cmdpath]-}
    elif [[ -n ${_proxyfleet_subs[$cmdpath]-} ]]; then
        values=${_proxyfleet_subs[$cmdpath]}
    else
        values=${_proxyfleet_positionals[$cmdpath]-}
    fi
    case $values in
        @dir) COMPREPLY=($(compgen -d -- "$cur")) ;;
        @file) COMPREPLY=($(compgen -f -- "$cur")) ;;
        @any) COMPREPLY=() ;;
        *) COMPREPLY=($(compgen -W "$values" -- "$cur")) ;;
    esac
    # zsh's compgen offers every word and leaves matching to zsh: match here, alike.
    local matching=()
    for word in "${COMPREPLY[@]}"; do
        [[ $word == "$cur"* ]] && matching+=("$word")
    done
    COMPREPLY=("${matching[@]}")
}
complete -F _proxyfleet proxyfleet
"""
