"""The control plane behind the Lambdas: apply an event to a job, then act on the decision.

`service` (decide, compare-and-set, act), `activity` (pollers off at rest), `sweeps` (trial
results to the sweep function) and `config` (what the stack hands every function through
its environment).
"""
