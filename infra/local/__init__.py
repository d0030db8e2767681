"""The embedded local runtime: respot's handlers and agent on one machine, against moto.

The runtime synthesizes the stack (its IAM policies, its wiring) with AWS CDK, whose Node
process prints a banner about the Node version (end-of-life, untested) on stderr, which the
jsii runtime hands to Python as bytes (`b'!!  Node 20 is end-of-life ...'`). The version of
Node does not matter to a local run, so the banner is silenced here, before anything imports
`aws_cdk`; a deploy (`cdk deploy`) still shows it, where it matters.
"""

import os

# jsii reads these when its Node process starts; END_OF_LIFE takes the majors to silence.
_NODE_BANNER_SILENCERS = {
    "JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION": "1",
    "JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION": "1",
    "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": ",".join(str(m) for m in range(10, 41)),
}
for _name, _value in _NODE_BANNER_SILENCERS.items():
    os.environ.setdefault(_name, _value)
