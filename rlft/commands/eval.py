"""`rlft eval`, `generate` and `export`: a trained run, checkpoint, adapter or model put to use
(rlft/posttrain/ does the work)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import List, Optional

import typer

from rlft.config.stages import DEFAULT_STAGE
from rlft.commands.common import FILES_OPT, OVERRIDES_ARG, QUIET_OPT, err, exits, load, quiet
from rlft import run_files


TARGET_ARG = typer.Argument(..., help="A run folder (its final/ model), a checkpoint folder, a PEFT adapter folder "
                                      "or a transformers model folder.")
CHECKPOINT_OPT = typer.Option(None, "--checkpoint", help="With a run folder: use checkpoints/checkpoint-N instead of "
                                                         "final/.")


def _target(path: Path, checkpoint: Optional[int]):
    from rlft.posttrain.target import resolve_target

    with exits():
        return resolve_target(path, checkpoint)


def eval_cmd(target: Path = TARGET_ARG, config: Optional[List[Path]] = FILES_OPT,
             overrides: Optional[List[str]] = OVERRIDES_ARG,
             stage: Optional[str] = typer.Option(None, "--stage", "-s", help="Stage profile (default: the run's)."),
             data: Optional[str] = typer.Option(None, "--data", help="Evaluation prompts (default: data.eval); `demo` "
                                                                     "= the built-in task."),
             n: Optional[int] = typer.Option(None, "-n", min=1, help="Completions sampled per prompt (default: "
                                                                      "eval.samples_per_prompt, else 4)."),
             max_prompts: Optional[int] = typer.Option(None, "--max-prompts", min=1, help="Evaluate the first N "
                                                                                          "prompts only."),
             out: Optional[Path] = typer.Option(None, "--out", "-o", help="Rows per completion (default: eval.jsonl in "
                                                                          "the run folder, else here)."),
             checkpoint: Optional[int] = CHECKPOINT_OPT,
             seed: Optional[int] = typer.Option(None, "--seed", help="Sampling seed (default: train.seed); drawn "
                                                                       "from it plus eval's seed offset, as the "
                                                                       "run's own evaluations are."),
             force: bool = typer.Option(False, "--force", help="Replace an existing -o file."),
             quiet_: bool = QUIET_OPT) -> None:
    """Sample a trained policy on evaluation prompts, score with rewards and eval.rewards, print the means."""
    # sampling follows the config's `eval:` section (a run's own, by default) unless a flag says otherwise
    from rlft.posttrain.config_layer import eval_config_file
    from rlft.posttrain.target import run_config

    # the paths named here, as meant now: a reward's code (imported below) may chdir, which must not move them
    shown, here = out, Path.cwd()
    out = None if out is None else Path(os.path.abspath(out))
    if data is not None and data != "demo" and (here / data).exists():
        data = os.path.abspath(data)
    tgt = _target(target, checkpoint)
    tgt.weights = Path(os.path.abspath(tgt.weights))
    tgt.run_root = None if tgt.run_root is None else Path(os.path.abspath(tgt.run_root))
    stage = stage or run_config(tgt.run_root).get("stage") or DEFAULT_STAGE
    files, own = list(config or []), None
    if not files and tgt.run_root is not None:  # the run's own config: same rewards, same sampling settings
        with exits():  # e.g. a link planted where it goes: one line
            files = [own := eval_config_file(tgt.run_root, stage)]
    try:
        cfg, composed = load(stage, "cpu", files, overrides, trains=False)  # samples and scores only
    finally:
        if own is not None:
            own.unlink(missing_ok=True)
    from rlft.config.eval_sampling import greedy_samples_problem

    greedy = greedy_samples_problem(n, cfg.eval.greedy, f"pass -n 1 (or leave it out), or set eval.greedy "
                                                        f"({composed.layer_of('eval.greedy')}) to false")
    if greedy:  # -n goes around validate-config's eval.samples_per_prompt rule: the same refusal
        err(f"error: -n (command line): {greedy}")
        raise typer.Exit(2)
    source = data or cfg.data.eval
    if not source:
        err("error: no evaluation prompts: set data.eval in the config or pass --data FILE (or --data demo)")
        raise typer.Exit(2)
    dest = out or ((tgt.run_root / run_files.EVAL) if tgt.run_root is not None else here / run_files.EVAL)
    shown = shown or dest
    from rlft.rundir.markers import check_output_file

    with exits():  # before minutes of sampling, not after; a run's own eval.jsonl is rlft's to replace
        check_output_file(dest, force=force or (out is None and tgt.run_root is not None), what="-o file")
    quiet()
    from rlft.posttrain.evaluate import evaluate

    with exits():
        res = evaluate(tgt, cfg, source, n, dest, max_prompts, seed, composed)
    _print_results(res)
    own = _own_final_eval(tgt, res) if seed in (None, cfg.train.seed) else None
    if own is not None:
        fmt = lambda x: "-" if x is None else f"{x:.4f}"  # noqa: E731
        typer.echo(f"the run's own final eval (same prompts, rewards and sampling): eval_reward "
                   f"{fmt(own.get('reward_mean'))}, pass@{own.get('k')} {fmt(own.get('pass_at_k'))}")
    typer.echo(f"rows written to {shown}")


def _print_results(res: dict) -> None:
    """Each reward's mean, the weighted total, pass@k, the eval-only rewards and the names training logs them by."""
    fmt = lambda x: "-" if x is None else f"{x:.4f}"  # noqa: E731
    from rlft.config.eval_sampling import describe
    from rlft.monitor.metrics import eval_row

    typer.echo(f"eval of {res['model']} on {res['data']}: {res['prompts']} prompts x {res['k']} = "
               f"{res['completions']} completions ({describe(res['sampling'])})")

    def line(name, value):
        failed = res["reward_failures"].get(name)
        typer.echo(f"  {name:<24}{fmt(value)}" + (f"   ({failed} completions it failed to score)" if failed else ""))

    for name, value in res["rewards"].items():
        line(name, value)
    typer.echo(f"  {'total (weighted)':<24}{fmt(res['reward_mean'])}" +
               (f"   ({res['unscored']} completions unscored)" if res["unscored"] else ""))
    passed = f"pass@{res['k']}"
    typer.echo(f"  {passed:<24}{fmt(res['pass_at_k'])}   (prompts with a sample whose total reaches "
               f"{res['sampling']['pass_threshold']:g}; spread over prompts {fmt(res['prompt_std'])})")
    if res["eval_rewards"]:
        typer.echo("eval-only rewards (eval.rewards: scored on these samples, not in the total):")
        for name, value in res["eval_rewards"].items():
            line(name, value)
    # the names of metrics.jsonl's eval rows, so this compares with the run's curve key for key
    typer.echo("as training logs it: " + ", ".join(f"{k} {'-' if v is None else v}" for k, v in eval_row(res).items()))


def _own_final_eval(tgt, res: dict) -> dict | None:
    """The run's eval.end (summary.json) when this evaluated its final model on the same eval set (prompts, rewards,
    sampling settings: the eval_set digest), else None."""
    from rlft.monitor.summary import read_summary

    if tgt.run_root is None or tgt.step is not None:
        return None
    end = ((read_summary(tgt.run_root / run_files.SUMMARY) or {}).get("eval") or {}).get("end")
    return end if isinstance(end, dict) and end.get("eval_set") == res["eval_set"] else None


def generate_cmd(target: Path = TARGET_ARG,
                 prompt: Optional[List[str]] = typer.Option(None, "--prompt", "-p", help="A prompt (repeatable)."),
                 file: Optional[Path] = typer.Option(None, "--file", "-f", help="A text file with one prompt per "
                                                                                "line."),
                 n: int = typer.Option(2, "-n", min=1, help="Completions per prompt."),
                 max_tokens: int = typer.Option(128, "--max-tokens", min=1, help="Longest completion (tokens)."),
                 temperature: float = typer.Option(1.0, "--temperature", min=0.0, help="Sampling temperature."),
                 top_p: float = typer.Option(1.0, "--top-p", min=0.0, max=1.0, help="Nucleus sampling threshold."),
                 seed: int = typer.Option(0, "--seed", help="Sampling seed."),
                 raw: bool = typer.Option(False, "--raw", help="Do not wrap prompts in the chat template."),
                 backend: str = typer.Option("hf", "--backend", help="Sampler: hf (transformers generate) or vllm "
                                                                     "(an in-process vLLM engine, as "
                                                                     "sampling.backend)."),
                 checkpoint: Optional[int] = CHECKPOINT_OPT, quiet_: bool = QUIET_OPT) -> None:
    """Sample a few completions from a trained adapter or model (chat template applied when it has one)."""
    from rlft.config.sampling import BACKENDS, VLLM_INSTALL, vllm_installed

    if backend not in BACKENDS:
        err(f"error: --backend {backend}: expected one of {', '.join(BACKENDS)}")
        raise typer.Exit(2)
    if backend == "vllm" and not vllm_installed():
        err(f"error: --backend vllm: vllm is not installed in this environment; install it ({VLLM_INSTALL}) or use "
            "--backend hf")
        raise typer.Exit(2)
    prompts = list(prompt or [])
    if file is not None:
        if not file.is_file():
            err(f"error: --file {file}: no such file")
            raise typer.Exit(2)
        try:
            text = file.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            err(f"error: --file {file} is not UTF-8 text (byte {exc.start}): give a text file with one prompt per "
                 "line")
            raise typer.Exit(2)
        except OSError as exc:
            err(f"error: --file {file}: {exc.strerror or exc}")
            raise typer.Exit(2)
        if "\0" in text:
            err(f"error: --file {file} holds NUL bytes (a binary file?): give a text file with one prompt per line")
            raise typer.Exit(2)
        prompts += [line for line in text.splitlines() if line.strip()]
    if not prompts:
        err("error: give at least one --prompt TEXT or --file FILE")
        raise typer.Exit(2)
    tgt = _target(target, checkpoint)
    quiet()
    from rlft.posttrain.generate import generate

    with exits():
        rows = generate(tgt, prompts, n, max_tokens, temperature, top_p, seed, raw, backend)
    last = None
    for row in rows:
        if row["prompt"] != last:
            typer.echo(f"=== {row['prompt']}")
            last = row["prompt"]
        typer.echo(f"--- {row['completion']}")


def export_cmd(target: Path = TARGET_ARG,
               out: Path = typer.Option(..., "--out", "-o", help="Folder to write (must not exist or be empty)."),
               merge: bool = typer.Option(False, "--merge", help="Merge the LoRA adapter into its base: a plain "
                                                                 "transformers model."),
               checkpoint: Optional[int] = CHECKPOINT_OPT, quiet_: bool = QUIET_OPT) -> None:
    """Export a run's model: the adapter (base named as the run gave it) or, with --merge, a merged model folder."""
    from rlft.posttrain.export import check_export_dir

    tgt = _target(target, checkpoint)
    with exits():
        check_export_dir(out)  # before loading anything
    quiet()
    from rlft.posttrain.export import export

    with exits():
        path = export(tgt, out, merge)
    kind = "merged model" if merge else "adapter"
    typer.echo(f"{kind} written to {path} (load with "
               f"{'AutoModelForCausalLM' if merge else 'PeftModel'}.from_pretrained)")
