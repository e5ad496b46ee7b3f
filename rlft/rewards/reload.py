"""Rewards changed mid-run (the GRPO service guide: "updates to reward functions will be applied to
the next training step"): before each step, a user reward whose source file changed is re-imported and
scored on a probe completion; a version that fails to import or to score keeps the old function and
says why (never a crash). Weights change the same way through `<run>/overrides.yaml`:

    weights: {correctness: 1.0, format: 0.25}

Every accepted change bumps `version`, which the trainer writes into each metrics and completion row."""

from __future__ import annotations

import hashlib
import inspect
import re
from pathlib import Path
from typing import Any

from rlft.numeric import is_finite
from rlft.rewards.registry import import_file
from rlft.rewards.safe import RewardSuite, SafeReward

__all__ = ["RewardReloader"]


def _digest(path: Path | None) -> str | None:
    try:
        return hashlib.sha1(Path(path).read_bytes()).hexdigest() if path is not None else None
    except OSError:
        return None


def user_source(r: SafeReward) -> Path | None:
    """The file of a reward the user wrote (a file or module spec, not a built-in)."""
    if not getattr(r, "spec", None) or ":" not in r.spec:
        return None
    try:
        src = inspect.getsourcefile(r.fn)
    except TypeError:
        return None
    return Path(src).resolve() if src else None


def _fresh_function(path: Path, attr_path: str):
    """Import `path` as a new module (the old one stays intact for the running version) and return
    `attr_path` from it. The standard importlib.reload would mutate the module in use even when the
    edit turns out broken."""
    digest = hashlib.sha1(path.read_bytes()).hexdigest()[:10]
    stem = re.sub(r"\W", "_", path.stem)
    module = import_file(path, f"_rlft_reloaded_{stem}_{digest}")
    obj: Any = module
    for part in attr_path.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"{attr_path} is not callable")
    return obj


class RewardReloader:
    def __init__(self, suite: RewardSuite, overrides: Path | None = None):
        self.suite = suite
        self.version = 1
        self.overrides = Path(overrides) if overrides else None
        self._overrides_digest = _digest(self.overrides)
        self.sources = {r.name: user_source(r) for r in suite.rewards}
        self._digests = {name: _digest(p) for name, p in self.sources.items() if p is not None}
        self._probe: tuple[list, list, dict] = (["probe prompt"], ["probe completion"], {})

    def remember(self, prompts: list, completions: list, columns: dict[str, list]) -> None:
        """Keep one real (prompt, completion, columns) row to probe a reloaded function with."""
        if completions:
            self._probe = ([prompts[0]], [completions[0]], {k: [v[0]] for k, v in columns.items() if v})

    def check(self) -> list[str]:
        """Apply changed reward files and overrides.yaml; return one message per change or failed change."""
        messages, changed = [], False
        for r in self.suite.rewards:
            path = self.sources.get(r.name)
            if path is None:
                continue
            digest = _digest(path)
            if digest is None or digest == self._digests.get(r.name):
                continue
            self._digests[r.name] = digest  # a broken edit is reported once, not at every step
            problem, fn = self._load(r)
            if problem:
                messages.append(f"reward {r.name!r}: {path.name} changed but {problem}; keeping the previous version")
                continue
            r.fn, changed = fn, True
            messages.append(f"reward {r.name!r}: reloaded {path.name}")
        digest = _digest(self.overrides)
        if digest is not None and digest != self._overrides_digest:
            self._overrides_digest = digest
            problem, weights = self._read_overrides()
            if problem:
                messages.append(f"{self.overrides.name}: {problem}; weights unchanged")
            else:
                for r in self.suite.rewards:
                    if r.name in weights and r.weight != weights[r.name]:
                        messages.append(f"reward {r.name!r}: weight {r.weight:g} -> {weights[r.name]:g}")
                        r.weight, changed = weights[r.name], True
        if changed:
            self.version += 1
            messages.append(f"rewards now at reward_version {self.version} (applies from this step)")
        return messages

    def _load(self, r: SafeReward) -> tuple[str | None, Any]:
        try:
            fn = _fresh_function(self.sources[r.name], r.spec.rpartition(":")[2].strip())
        except BaseException as exc:  # noqa: BLE001 - a broken edit (even sys.exit at import) keeps the old one
            return f"it does not import ({type(exc).__name__}: {exc})", None
        probe = SafeReward(r.name, fn, kwargs=r.kwargs, timeout_s=r.timeout_s)
        prompts, completions, columns = self._probe
        scores = probe(prompts, completions, **columns)
        if probe.errors or any(s is None for s in scores):
            return f"it fails on a probe completion ({probe.last_error})", None
        return None, fn

    def _read_overrides(self) -> tuple[str | None, dict[str, float]]:
        import yaml

        try:
            data = yaml.safe_load(self.overrides.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            return f"not readable YAML ({str(exc).splitlines()[0]})", {}
        weights = data.get("weights") if isinstance(data, dict) else None
        if not isinstance(weights, dict):
            return "expected `weights: {reward_name: number, ...}`", {}
        names = {r.name for r in self.suite.rewards}
        unknown = sorted(set(map(str, weights)) - names)
        if unknown:
            return f"unknown reward name(s) {', '.join(unknown)} (rewards: {', '.join(sorted(names))})", {}
        bad = [k for k, v in weights.items()
               if not is_finite(v)]
        if bad:
            return f"weights must be finite numbers (bad: {', '.join(map(str, bad))})", {}
        return None, {str(k): float(v) for k, v in weights.items()}
