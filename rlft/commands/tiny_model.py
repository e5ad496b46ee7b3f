"""`rlft tiny-model`: rlft's tiny causal LM, built offline into a folder."""

from __future__ import annotations

from pathlib import Path

import typer

from rlft.commands.common import err, exits


def tiny_model(out_dir: Path = typer.Argument(..., help="Folder to write the model and tokenizer to (new, empty, or "
                                                        "a tiny model rlft wrote before)."),
               init_std: float = typer.Option(None, help="Weight init std, > 0 (default: rlft's learnable default)."),
               heads: int = typer.Option(None, "--heads",
                                         help="Attention heads (hidden size 64), one of 1, 2, 4 (default 4, "
                                              "head size 16; 2 gives head size 32, the smallest vLLM's CPU "
                                              "attention accepts)."),
               force: bool = typer.Option(False, "--force", help="Write into a folder that holds other "
                                                                 "files.")) -> None:
    """Build rlft's tiny causal LM (offline) into OUT_DIR."""
    if init_std is not None and not init_std > 0:  # NaN too
        err(f"error: --init-std must be > 0 (got {init_std})")
        raise typer.Exit(2)
    if heads is not None and heads not in (1, 2, 4):
        err(f"error: --heads must be one of 1, 2, 4 (got {heads})")
        raise typer.Exit(2)
    import re

    from rlft.rundir.markers import Owned, claim_output
    from rlft.tiny import MARKER_FILE, WRITTEN_NAMES, build_tiny_model

    with exits():  # a tiny model rlft wrote before is rebuilt only when it holds nothing but the build's files
        claim_output(out_dir, "tiny-model", force=force, what="folder",
                     made_before=lambda folder: (folder / MARKER_FILE).is_file(),
                     owned=Owned(files=tuple(map(re.escape, WRITTEN_NAMES))))
    kwargs = {} if init_std is None else {"init_std": init_std}
    if heads is not None:
        kwargs["num_heads"] = heads
    path = build_tiny_model(out_dir, **kwargs)
    typer.echo(f"tiny model written to {path}")
