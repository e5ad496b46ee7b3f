"""`rlft pipeline validate|show|run`: several stages in order, each starting from the one before it."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from rlft.commands.common import QUIET_OPT, SMOKE_HELP, err, exits, no_flags_with_smoke, print_problems


PIPELINE_ARG = typer.Argument(..., help="Pipeline file: `stages:` list and shared `defaults:`.")
PIPE_OVERRIDES = typer.Argument(None, help="KEY=VALUE for every stage, stages.<number or name>.KEY=VALUE for one.")
PIPE_HW = typer.Option("cpu", "--hw", help="Hardware profile of stages that name none.")


def _load_pipeline(path: Path, overrides: Optional[List[str]], hw: str, smoke: bool = False):
    from rlft.pipeline.spec import check_pipeline, load_pipeline

    with exits("pipeline invalid: {errors}"):
        pipe = load_pipeline(path)
        if smoke:  # errors only this machine causes, on keys the smoke run replaces, are warnings
            from rlft.smoke.validate import check_pipeline_as_given as check_pipeline
        checked = check_pipeline(pipe, overrides or [], hw)
    for _, _, _, warnings in checked:
        print_problems(warnings)
    return pipe, checked


def pipeline_validate(path: Path = PIPELINE_ARG, overrides: Optional[List[str]] = PIPE_OVERRIDES,
                      hw: str = PIPE_HW) -> None:
    """Check every stage of a pipeline without importing torch: each error names its stage, key, file and line."""
    pipe, checked = _load_pipeline(path, overrides, hw)
    stages = " -> ".join(f"{e.stage}" for e, *_ in checked)
    typer.echo(f"pipeline OK: {pipe.name}: {stages}; runs in {pipe.output_dir}/")


def pipeline_show(path: Path = PIPELINE_ARG, overrides: Optional[List[str]] = PIPE_OVERRIDES,
                  hw: str = PIPE_HW) -> None:
    """Print each stage's resolved config with the layer of every key and what its reference is."""
    from rlft.config.render import describe_reference, render_yaml
    from rlft.config.stages import SPECS

    pipe, checked = _load_pipeline(path, overrides, hw)
    for i, (entry, cfg, composed, _) in enumerate(checked):
        typer.echo(f"# ---- {entry.label}: {entry.stage}, hw {entry.hw or hw}, run folder {pipe.stage_dir(entry)}")
        if not SPECS[entry.stage].uses_reference:
            typer.echo(f"# reference: none ({entry.stage} uses no reference model)"
                       + (f"; starts from {checked[i - 1][0].label}" if i and not entry.sets_init_from else ""))
        elif i and not cfg.model.init_from and not entry.sets_init_from:
            prev = checked[i - 1][0]
            typer.echo(f"# starts from {prev.label} ({pipe.stage_dir(prev)}), set when that stage has finished; "
                       f"reference: {describe_reference('init', pipe.stage_dir(prev), cfg.model.init_mode)}"
                       if not composed.set_by_user("model.ref") else
                       f"# starts from {prev.label} ({pipe.stage_dir(prev)}); reference: model.ref={cfg.model.ref}")
        else:
            typer.echo(f"# reference: {describe_reference(cfg.model.ref, cfg.model.init_from, cfg.model.init_mode)}")
        typer.echo(render_yaml(cfg, composed), nl=False)


def pipeline_run(path: Path = PIPELINE_ARG, overrides: Optional[List[str]] = PIPE_OVERRIDES, hw: str = PIPE_HW,
                 resume: bool = typer.Option(False, "--resume", help="Skip finished stages, resume the interrupted "
                                                                     "one, go on."),
                 verbose: bool = typer.Option(False, "--verbose", "-v", help="Show library logs and warnings."),
                 smoke: bool = typer.Option(False, "--smoke", help=SMOKE_HELP), quiet: bool = QUIET_OPT) -> None:
    """Run the stages in order; runs go to <output_dir>/<NN>-<stage>/, each starting from the one before."""
    from rlft.monitor.streams import protect_std_streams

    protect_std_streams()  # `rlft pipeline run ... | head`: a closed pipe must not stop training
    if smoke:
        no_flags_with_smoke(resume=resume)
    pipe, checked = _load_pipeline(path, overrides, hw, smoke)
    for entry, cfg, _, _ in checked:
        if cfg.hw.num_processes > 1:
            err(f"{entry.label}: pipelines run each stage in one process in this version; use a single-process "
                 f"hardware profile or run the stage with `rlft train` (model.init_from= the stage before)")
            raise typer.Exit(2)
    if smoke:
        from rlft.smoke.run import smoke_pipeline

        raise typer.Exit(smoke_pipeline(pipe, checked, list(overrides or []), hw, verbose))
    from rlft.pipeline.runner import run_pipeline
    from rlft.rundir.prepare import check_writable

    with exits(read_only=True):
        check_writable(pipe.output_dir, "pipeline folder", "output_dir")  # before minutes of loading, not after
        code = run_pipeline(pipe, overrides or [], hw, resume, verbose)
    raise typer.Exit(code)
