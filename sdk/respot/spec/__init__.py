"""What a job is and how it is checked: the spec a researcher writes, before anything is spent.

`training` (`TrainingEnvVar`, `DataSourceEnvVar`), `jobfile` (the YAML form), `jobid` (the one
job-id rule), `requirements` (a job's pip requirements), `preflight` (checks that need the
laptop's clock and files) and `reach` (what a deployment's instances may read of what a job
names). Every path a job arrives by (SDK, CLI, raw message) validates through here.
"""
