"""Who sent a command: a signed `sts:GetCallerIdentity` request, verified by executing it.

`proofs` is the format both sides agree on and the laptop's signing (`prove`); `verify` is
the control plane's side (`Verifier`, the replay ledger, `principal_matches`).
"""
