"""Frameworks in command jobs: callbacks that report, save on the notice, and stop.

- `respot.integrations.huggingface`: `RespotCallback` for `transformers.Trainer`, and
  `last_checkpoint()` for `trainer.train(resume_from_checkpoint=...)`;
- `respot.integrations.lightning`: `RespotCallback` for `lightning.Trainer`, and
  `last_checkpoint()` for `trainer.fit(..., ckpt_path=...)`.

Each imports its framework, which the job's environment brings (`requirements:` or the
image); this package itself imports nothing of it, nor anything of respot but
`respot.commands` (the job's Python has the standard library and the framework, not
respot's dependencies). docs/integrations.md says how to use each.
"""
