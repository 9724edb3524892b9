"""The `torch-matrix` command group. Each command lives in a module of its own and is thin:
parse its options, build what the core needs, run it, print; suite.cli.edge turns every typed
error into its message and exit code, and suite.cli.options holds the option groups commands
share."""

from __future__ import annotations

import click

from suite import __version__
from suite.cli.ab import ab, calibrate
from suite.cli.ci import pins_command, plan_command
from suite.cli.comment import comment
from suite.cli.compare import aggregate, compare
from suite.cli.edge import report
from suite.cli.image import image
from suite.cli.options import EXIT_CODES
from suite.cli.repro import repro
from suite.cli.run import env, run, validate
from suite.core.errors import SuiteError
from suite.core.index_access import hold_index_env


@click.group(
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog=EXIT_CODES,
)
@click.version_option(__version__, prog_name="torch-matrix")
def main() -> None:
    """Run the same PyTorch workloads on a baseline and a candidate torch pin, across backends,
    and decide whether to adopt the upgrade."""
    # An index env file given as a descriptor is read and closed before anything starts.
    try:
        hold_index_env()
    except SuiteError as exc:
        report(exc)


for command in (run, ab, compare, aggregate, calibrate, validate, env, plan_command, pins_command,
                repro, comment, image):  # fmt: skip
    main.add_command(command)
