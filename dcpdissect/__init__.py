"""dcpdissect: dissect and analyse Couchbase DCP traffic from packet captures."""

__version__ = "0.1.0"

from . import compiled as _compiled

_compiled.install()     # compiled hot modules, when built from this very source
