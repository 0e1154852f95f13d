"""dcpdissect: dissect and analyse Couchbase DCP traffic from packet captures."""

__version__ = "0.1.0"
