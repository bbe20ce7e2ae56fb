"""The command line every module shares: `python3 -m hmdptools.MODULE
COMMAND ARGS...` runs COMMAND's function with ARGS (strings, as the shell
gave them); its return value is the exit status (None: 0)."""
import sys


def main(commands, argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in commands:
        module = sys.argv[0].rsplit("/", 1)[-1]
        print(f"usage: python3 -m hmdptools.{module[:-3] if module.endswith('.py') else module} "
              f"{{{','.join(commands)}}} ARGS...", file=sys.stderr)
        return 2
    return commands[argv[0]](*argv[1:]) or 0


def emit(lines):
    """Prints each of LINES as one `print` did in the scripts' heredocs."""
    for line in lines:
        print(line)
