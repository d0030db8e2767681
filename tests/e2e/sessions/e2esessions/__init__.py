"""Small training sessions for the end-to-end tests (shipped as the job's source_dir)."""
