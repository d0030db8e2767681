"""Workspaces: JupyterLab on a spot instance, as a respot job (docs/notebooks.md).

A workspace is a command job (docs/commands.md) whose command is respot's own supervisor
(`python -m respot.workspace.serve`): the workspace directory is the job's checkpoint
directory, so the checkpoint store syncs it while it runs and restores it on every instance.

- `names`: the workspace name rule, the tag that marks a workspace's jobs, the constants both
  sides share (standard library only);
- `idle`: the idle rule over what Jupyter's REST API says (pure, standard library only);
- `serve`: the supervisor on the instance (standard library and `respot.commands` only: it
  runs on the job's own Python): JupyterLab on 127.0.0.1, periodic sync, the notice, idle stop;
- `spec`: the job a workspace is (the spec `respot notebook start` submits);
- `tokens`: the laptop's 0600 copies of each workspace's Jupyter token;
- `catalog`: which jobs are whose workspaces (from the job table), the owner check;
- `tunnel`: the laptop's TCP forwarder on 127.0.0.1 that resolves, on each new connection,
  where the workspace runs now; `local` resolves that on the local runtime.
"""
