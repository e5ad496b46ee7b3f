"""The run folder every stage writes: resolved config, metrics, completions, checkpoints, final model.

    <train.output_dir>/
      config.yaml         resolved config, each key with the layer that set it
      metrics.jsonl       one JSON object per logged step
      completions.jsonl   sampled completions with each reward's score (sampling stages)
      health.jsonl        every health-rule firing (written, possibly empty, by every stage)
      checkpoints/        rolling, resumable checkpoints (checkpoint-<step>)
      final/              PEFT adapter (or full model) + tokenizer
      .rlft.lock          pid and host of the run using the folder (exclusive, for the life of the run)
      .rlft-made.json     marker written at creation: kind "run", the run's id, and the id of the run it
                          replaces (--overwrite); rlft moves or deletes only folders that carry it

The marker is not proof that the folder's files are rlft's (it copies along with a folder): RUN_OWNED names
every file and folder rlft writes here. --overwrite deletes a run (later, from `<name>.old`) only when it holds
nothing else; a run folder holding anything else, a link included, is moved aside whole to
`<name>.replaced-<time>` and never deleted. --resume needs a config.yaml that rlft wrote and refuses links.
"""

from __future__ import annotations

import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from rlft import run_files
from rlft.rundir.lock import LOCK_NAME, RunLock
from rlft.rundir.markers import Owned, read_marker, write_marker

RUN_KIND = "run"
LEGACY_HEADER = "# rlft resolved config"  # the first line of config.yaml in run folders of rlft before the marker

# every name rlft (and the libraries it runs, pointed here) writes at the top of a run folder; a rule in code,
# so nothing copied into a folder can widen what rlft deletes. `.tmp`: the files written by rename.
_RUN_FILES = (*(re.escape(name) for name in (
    run_files.CONFIG, run_files.METRICS, run_files.COMPLETIONS, run_files.EVAL_COMPLETIONS, run_files.HEALTH,
    run_files.REWARD_LOGS, run_files.SAMPLES, run_files.SUMMARY, run_files.DISTRIBUTED, run_files.ROUNDS,
    run_files.OVERRIDES, run_files.LAUNCH_SBATCH, run_files.EVAL, run_files.JUDGE_CACHE, LOCK_NAME)),
    r"config\.step-\d+\.yaml", r"\.rlft-eval-config\.yaml")
RUN_OWNED = Owned(files=(*_RUN_FILES, *(f + r"\.tmp" for f in _RUN_FILES), r"\.rlft-eval-config\.yaml\..+\.tmp"),
                  dirs=(run_files.CHECKPOINTS, run_files.FINAL, r"final\.tmp", run_files.REPORT, "tensorboard",
                        "wandb"))


@dataclass
class RunDir:
    root: Path
    lock: RunLock | None = field(default=None, repr=False, compare=False)

    @property
    def config(self) -> Path:
        return self.root / run_files.CONFIG

    @property
    def metrics(self) -> Path:
        return self.root / run_files.METRICS

    @property
    def completions(self) -> Path:
        return self.root / run_files.COMPLETIONS

    @property
    def eval_completions(self) -> Path:
        """Each evaluation's samples of the fixed evaluation prompts (`eval-<i>` rows; the report shows them with
        the training completions)."""
        return self.root / run_files.EVAL_COMPLETIONS

    @property
    def health(self) -> Path:
        return self.root / run_files.HEALTH

    @property
    def reward_logs(self) -> Path:
        return self.root / run_files.REWARD_LOGS

    @property
    def checkpoints(self) -> Path:
        return self.root / run_files.CHECKPOINTS

    @property
    def final(self) -> Path:
        return self.root / run_files.FINAL

    @property
    def marker(self) -> dict | None:
        return read_marker(self.root)

    @property
    def replaced(self) -> Path | None:
        """The run this one replaces (--overwrite), kept as `<name>.old` until this run's first checkpoint.

        The path is computed, never read from a file, and the folder there must carry the marker of the
        very run this one replaced: a copied or edited run folder cannot point rlft at anything else."""
        mine = self.marker
        wanted = mine.get("replaces") if mine else None
        if not wanted:
            return None
        old = aside_path(self.root)
        theirs = read_marker(old)
        return old if theirs is not None and theirs["kind"] == RUN_KIND and theirs["id"] == wanted else None

    def drop_replaced(self) -> None:
        """This run has shown it works (a checkpoint or its final model is on disk): delete the old run."""
        mine = self.marker
        if not mine or not mine.get("replaces"):
            return
        old = self.replaced
        foreign = RUN_OWNED.first_foreign(old) if old is not None else None
        if foreign is not None:
            print(f"rlft: kept the replaced run {old}: it holds {foreign}, which rlft did not write; delete it "
                  f"yourself once you have what you need from it", file=sys.stderr)
        elif old is not None:
            shutil.rmtree(old)
            print(f"rlft: deleted the replaced run {old} (this run has written a checkpoint)", file=sys.stderr)
        mine.pop("replaces")
        write_marker(self.root, mine)

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    @property
    def samples(self) -> Path:
        return self.root / run_files.SAMPLES

    def complete_checkpoints(self) -> list[Path]:
        """Checkpoints whose save finished (rlft writes its marker last), oldest first."""
        if not self.checkpoints.is_dir():
            return []
        found = [p for p in self.checkpoints.glob(run_files.CHECKPOINT_GLOB) if (p / COMPLETE_MARKER).is_file()]
        return sorted(found, key=checkpoint_step)


COMPLETE_MARKER = "rlft_complete"


def checkpoint_step(path: Path) -> int:
    """The step of `checkpoint-<step>`, -1 for any other name."""
    try:
        return int(path.name.rsplit("-", 1)[1])
    except (IndexError, ValueError):
        return -1


def aside_path(root: Path) -> Path:
    return root.with_name(root.name + ".old")


def is_run_folder(root: Path) -> bool:
    """A folder rlft made for a run: its marker, or (older rlft) a config.yaml with rlft's header."""
    marker = read_marker(root)
    if marker is not None:
        return marker["kind"] == RUN_KIND
    try:
        with open(Path(root) / run_files.CONFIG, encoding="utf-8", errors="replace") as fh:
            return fh.readline().startswith(LEGACY_HEADER)
    except OSError:
        return False


def first_link(root: Path) -> str | None:
    """A symbolic link where a resumed run writes (the run folder, checkpoints/ and the folders in it), or None."""
    root = Path(root)
    places = [root, root / run_files.CHECKPOINTS]
    if (root / run_files.CHECKPOINTS).is_dir() and not (root / run_files.CHECKPOINTS).is_symlink():
        places += [p for p in (root / run_files.CHECKPOINTS).iterdir() if p.is_dir() and not p.is_symlink()]
    for place in places:
        if not place.is_dir() or place.is_symlink():
            continue
        for p in sorted(place.iterdir()):
            if p.is_symlink():
                return str(p.relative_to(root))
    return None
