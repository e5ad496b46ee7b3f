"""Starting the processes of a run: processes.py (`--hw auto`, the preflight, re-exec under `accelerate launch`
with the run folder made first, signals forwarded, every process joined) and dry_run.py (`train --dry-run`: the
same launch commands printed, one per machine, and the `slurm:` section's batch script; no torch)."""
