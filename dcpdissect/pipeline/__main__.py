"""``python -m dcpdissect.pipeline INPUT... --out DIR``: the pipeline subcommand on its own
(also usable as the application file of ``spark-submit``)."""

import argparse
import sys

from dcpdissect.pipeline import add_arguments, cmd_pipeline


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m dcpdissect.pipeline",
                                description="Analyse many or large captures on Spark.")
    add_arguments(p)
    try:
        args = p.parse_args(argv)
    except SystemExit as exc:
        return 2 if exc.code else 0
    return cmd_pipeline(args)


if __name__ == "__main__":
    sys.exit(main())
