"""A plan as a text table (terms, phases, verdict, levers) or as one JSON object."""

from __future__ import annotations

import json

from rlft.plan.advise import Lever, dominant
from rlft.plan.estimate import Plan
from rlft.plan.terms import ALWAYS, GIB


def gib(x: float) -> str:
    return f"{x / GIB:.3f}" if x >= 0.0005 * GIB or x == 0 else "<0.001"


def basis_json(plan: Plan) -> dict:
    """How the plan got its sequence lengths: `data` (the rows read, counted with the tokenizer or estimated)
    or `limits` (and why)."""
    if plan.data is None:
        return {"basis": "limits", **({"limits_why": plan.limits_why} if plan.limits_why else {})}
    d = plan.data
    return {"basis": "data", "data": {
        "source": d.source, "statistic": "max", "rows": d.rows, "rows_total": d.total, "sampled": d.sampled,
        "prompt_tokens": max(d.lengths.prompts), "answer_tokens": max(d.lengths.answers, default=None),
        "counted_with": "tokenizer" if d.tokenizer else "estimate", "counted": d.counted,
        "chat_template": d.template}}


def as_json(plan: Plan, worst: Plan | None = None) -> str:
    worst = worst or plan
    return json.dumps({
        "peak_gb": round(plan.peak / GIB, 4),
        "terms": {t.name: round(t.gib, 4) for t in plan.terms},
        "device_gb": None if plan.device_bytes is None else round(plan.device_bytes / GIB, 2),
        "fits": plan.fits,
        "peak_phase": plan.peak_phase,
        "phases": {"always": round(plan.persistent / GIB, 4), **{p: round(b / GIB, 4) for p, b in plan.phases.items()}},
        **basis_json(plan),
        "tokens": plan.tokens,
        "worst_case": {"basis": "limits", "peak_gb": round(worst.peak / GIB, 4), "fits": worst.fits,
                       "peak_phase": worst.peak_phase, "tokens": worst.tokens},
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


def tokens_text(tokens: dict[str, int]) -> str:
    if "prompt" in tokens:
        return f"prompts of {tokens['prompt']} + {tokens['completion']} sampled tokens"
    return f"rows of {tokens['train_sequence']} tokens"


def worst_line(plan: Plan, worst: Plan) -> str:
    """The line under the peak: the peak at the config's limits, which longer data could reach."""
    if worst is plan:
        why = f" ({plan.limits_why})" if plan.limits_why else ""
        return f"worst case at the config's limits: the same, the plan is at the limits{why}"
    fits = "" if worst.fits is None else "; fits" if worst.fits else "; does NOT fit"
    return (f"worst case at the config's limits ({tokens_text(worst.tokens)}): {gib(worst.peak)} GiB per device"
            f"{fits}")


def as_text(plan: Plan, levers: list[Lever], worst: Plan | None = None) -> str:
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
    basis = "the data" if plan.data is not None else "the config's limits"
    lines.append(f"planned peak: {gib(plan.peak)} GiB per device = always {gib(plan.persistent)} + {plan.peak_phase} "
                 f"(phases: {phases}); basis: {basis}, {tokens_text(plan.tokens)}")
    lines.append(worst_line(plan, worst or plan))
    lines.append(verdict(plan))
    lines.append("dominant: " + ", ".join(f"{name} {share:.0%}" for name, share in dominant(plan)))
    if levers:
        lines.append("what to change first (planned peak after the change):")
        for lv in levers:
            delta = plan.peak - lv.peak
            lines.append(f"  {gib(lv.peak):>8} GiB  (-{gib(delta)})  {lv.what}: {lv.command()}")
    return "\n".join(lines)


def report(cfg, plan: Plan, json_out: bool) -> str:
    """`rlft plan`'s output: the JSON object, or the table with the levers planned again; both with the worst
    case at the config's limits."""
    from rlft.plan import worst_case
    from rlft.plan.advise import levers

    worst = worst_case(plan, cfg)
    return as_json(plan, worst) if json_out else as_text(plan, levers(cfg, plan), worst)
