"""``python -m dcpdissect.docgen protocol|rules``: one reference document on stdout
(``python -m dcpdissect.regen`` writes both into docs/)."""

import argparse
import sys

from . import DOCUMENTS

parser = argparse.ArgumentParser(prog="python -m dcpdissect.docgen",
                                 description="Render a reference document to stdout.")
parser.add_argument("document", choices=sorted(DOCUMENTS))
sys.stdout.write(DOCUMENTS[parser.parse_args().document]())
