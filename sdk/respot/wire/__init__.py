"""What crosses a process boundary: the messages between laptop, control plane and agent.

`messages` (commands, agent reports, their size limits), `gpu` (GPU samples as they travel
and as each view shows them) and `limits` (size and depth limits on untrusted text before it
is parsed). Pydantic models only: nothing here talks to AWS.
"""
