"""A plan as a text table (terms, phases, verdict, levers) or as one JSON object."""

from __future__ import annotations

import json

from rlft.plan.advise import Lever, dominant
from rlft.plan.estimate import Plan
from rlft.plan.terms import ALWAYS, GIB


def gib(x: float) -> str:
    return f"{x / GIB:.3f}" if x >= 0.0005 * GIB or x == 0 else "<0.001"


def as_json(plan: Plan) -> str:
    return json.dumps({
        "peak_gb": round(plan.peak / GIB, 4),
        "terms": {t.name: round(t.gib, 4) for t in plan.terms},
        "device_gb": None if plan.device_bytes is None else round(plan.device_bytes / GIB, 2),
        "fits": plan.fits,
        "peak_phase": plan.peak_phase,
        "phases": {"always": round(plan.persistent / GIB, 4), **{p: round(b / GIB, 4) for p, b in plan.phases.items()}},
    })


def verdict(plan: Plan) -> str:
    if plan.device_bytes is None:
        return f"device memory unknown ({plan.device_source}): cannot say whether {gib(plan.peak)} GiB fits"
    share = plan.peak / plan.device_bytes
    if plan.fits:
        return (f"fits: {gib(plan.peak)} of {plan.device_bytes / GIB:.1f} GiB ({share:.0%}; "
                f"{plan.device_source})")
    return (f"does NOT fit: {gib(plan.peak)} GiB planned, {plan.device_bytes / GIB:.1f} GiB per device "
            f"({share:.0%}; {plan.device_source})")


def as_text(plan: Plan, levers: list[Lever]) -> str:
    s = plan.shape
    lines = [f"rlft plan: {plan.stage} on {plan.hw} ({plan.device}, {plan.precision}, {plan.world} process"
             f"{'es' if plan.world > 1 else ''}); model {s.model_type or '?'}: {s.num_params() / 1e6:,.1f}M params, "
             f"{s.num_layers} layers, hidden {s.hidden_size}, vocab {s.vocab_size:,} ({s.source})"]
    lines += [f"  {n}" for n in plan.notes]
    width = max(len(t.name) for t in plan.terms)
    lines.append(f"{'term':<{width}}  {'GiB':>8}  {'phase':<9} formula (inputs)")
    order = {ALWAYS: 0, "sampling": 1, "scoring": 2, "training": 3}
    for t in sorted(plan.terms, key=lambda t: order.get(t.phase, 9)):
        lines.append(f"{t.name:<{width}}  {gib(t.bytes):>8}  {t.phase:<9} {t.formula}")
    phases = ", ".join(f"{p} {gib(b)}" for p, b in plan.phases.items())
    lines.append(f"planned peak: {gib(plan.peak)} GiB per device = always {gib(plan.persistent)} + {plan.peak_phase} "
                 f"(phases: {phases})")
    lines.append(verdict(plan))
    lines.append("dominant: " + ", ".join(f"{name} {share:.0%}" for name, share in dominant(plan)))
    if levers:
        lines.append("what to change first (planned peak after the change):")
        for lv in levers:
            delta = plan.peak - lv.peak
            lines.append(f"  {gib(lv.peak):>8} GiB  (-{gib(delta)})  {lv.what}: {lv.command()}")
    return "\n".join(lines)


def report(cfg, plan: Plan, json_out: bool) -> str:
    """`rlft plan`'s output: the JSON object, or the table with the levers planned again."""
    from rlft.plan.advise import levers

    return as_json(plan) if json_out else as_text(plan, levers(cfg, plan))
