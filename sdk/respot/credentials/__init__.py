"""Per-job credentials: an instance holds credentials for its own job's objects alone.

The instance role has no access to `jobs/`. The agent proves which instance it runs on (an
identity proof signed with the instance role's credentials, `respot.identity.proofs`) to the
`credentials` function, which checks that the instance belongs to a live attempt of the job
it names and answers with `sts:AssumeRole` credentials for the job role, narrowed by a
session policy to `jobs/<job>/` (`policy`). The agent's S3 client for the job's objects
refreshes them before they expire (`vending`); the control plane's side is `broker`.
See docs/security.md ("Jobs and researchers, isolated") and docs/decisions.md.
"""
