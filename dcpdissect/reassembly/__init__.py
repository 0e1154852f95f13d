"""TCP reassembly, MCBP framing and TLS decryption: capture frames to PDU events."""

from ..kernel import load

load(__name__, "tcp", "framing")        # compiled when built (dcpdissect.kernel)
