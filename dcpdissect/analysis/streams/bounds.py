"""The bounds that keep the state of a hostile capture small. The modules read them from
here at run time (``bounds.MAX_KEYS``), so that a test can lower one."""

MAX_KEYS = 1024          # key hashes remembered per snapshot (until it completes)
MAX_PER_RULE = 10        # findings per stream and rule
MAX_PENDING = 4096       # unanswered stream requests remembered per connection
MAX_RESUME = 65536       # (consumer, vbucket) resume points remembered
MAX_ERRORS = 100         # consumer error findings held per connection until it closes
MAX_STREAMS = 65536      # streams (and unknown stream keys) tracked per connection
MAX_ADD_STREAMS = 256    # Add Stream requests remembered until correlated or answered
