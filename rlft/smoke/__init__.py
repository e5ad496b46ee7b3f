"""`rlft train ... --smoke` and `rlft pipeline run ... --smoke`: the user's own resolved config, end to end, on a
CPU CI runner, with only what such a runner cannot do replaced, and a record of what was.

- `changes`: what is replaced (the model by a tiny one of its family, the hardware by one CPU process in fp32,
  the size by a few steps on a few rows) as a config layer, each change with the value it had and why;
- `interrupt`: the first checkpoint of each run stops it as Ctrl-C would, so `--resume` is tested;
- `checks`: what the finished run folder must show (every stage finished, rewards scored, env stepped);
- `run`: the two commands: compose and validate as given, run, resume, report, load the final model and
  generate, then the `smoke` block in summary.json and a one-screen summary.
"""
