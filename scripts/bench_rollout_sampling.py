"""Sampling throughput of `rlft.rollout.sample` against a plain `model.generate` call, on the same
tiny model, prompts and settings (n completions per prompt, temperature, top_p, max_new_tokens).

Both sides get the same seed, so they draw the same tokens (the script checks this); rlft's extra
work is recording the sampler log-probs, the masks and the decoded texts. The plain side is what a
user of `generate` writes to get texts: tokenize with left padding, `generate`, `batch_decode`.
Rounds alternate who goes first; the median time of each side gives completions/s and the ratio.

    python scripts/bench_rollout_sampling.py [--prompts 16] [--n 8] [--max-new-tokens 32] [--rounds 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
warnings.filterwarnings("ignore")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--n", type=int, default=8, help="completions per prompt")
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu")
    a = p.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlft.data.demo import demo_prompts
    from rlft.rollout import SamplingParams, sample
    from rlft.tiny import ensure_tiny_model

    torch.set_num_threads(a.threads)
    path = ensure_tiny_model()
    model = AutoModelForCausalLM.from_pretrained(path).to(a.device).eval()
    tok = AutoTokenizer.from_pretrained(path)
    prompts = [r["prompt"] for r in demo_prompts(a.prompts)]
    params = SamplingParams(temperature=a.temperature, top_p=a.top_p, max_new_tokens=a.max_new_tokens, seed=0)

    def plain():
        torch.manual_seed(0)
        enc = tok(prompts, return_tensors="pt", padding=True, padding_side="left").to(a.device)
        with torch.no_grad():
            out = model.generate(**enc, do_sample=True, temperature=a.temperature, top_p=a.top_p, top_k=0,
                                 max_new_tokens=a.max_new_tokens, num_return_sequences=a.n, use_cache=True,
                                 pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
        completion = out[:, enc["input_ids"].size(1):]
        return completion, tok.batch_decode(completion, skip_special_tokens=True)

    def rlft():
        r = sample(model, tok, prompts, a.n, params)
        return r.completion_ids_BT, r.completions

    ids_plain, _ = plain()
    ids_rlft, _ = rlft()
    width = min(ids_plain.size(1), ids_rlft.size(1))
    same = torch.equal(ids_plain[:, :width].cpu(), ids_rlft[:, :width].cpu())
    times = {"plain": [], "rlft": []}
    for r in range(a.rounds):
        for name, fn in ((("plain", plain), ("rlft", rlft)) if r % 2 == 0 else (("rlft", rlft), ("plain", plain))):
            if a.device == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            if a.device == "cuda":
                torch.cuda.synchronize()
            times[name].append(time.perf_counter() - t0)
    completions = a.prompts * a.n
    rate = {k: completions / statistics.median(v) for k, v in times.items()}
    ratio = rate["rlft"] / rate["plain"]
    print(f"{a.prompts} prompts x {a.n} completions, max_new_tokens {a.max_new_tokens}, temperature {a.temperature}, "
          f"top_p {a.top_p}, {a.threads} thread(s), {a.device}; {a.rounds} rounds; same tokens drawn: {same}")
    print(f"plain model.generate  {rate['plain']:8.1f} completions/s  (median {statistics.median(times['plain']):.3f} "
          "s)")
    print(f"rlft.rollout.sample   {rate['rlft']:8.1f} completions/s  (median {statistics.median(times['rlft']):.3f} s)")
    print(f"ratio rlft/plain      {ratio:.3f}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
