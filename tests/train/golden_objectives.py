# SPDX-License-Identifier: Apache-2.0
"""Golden tests of tagflow's RL objectives (issue 21): randomised cases (masks, ties, groups of
one, extreme log-probabilities; the off-policy correction's importance weights and rejections) go through tagflow (objectives_driver, linking tagflow_train) and
through the independent NumPy reference (objectives_reference.py); every output must agree
within 1e-5 (relative for magnitudes above 1) and every gradient must be finite.

usage: golden_objectives.py --driver PATH [--cases N] [--seed S]
Exit 0 when every case agrees; otherwise one line per mismatch (the case, the key, both values)
and exit 1.
"""
import argparse
import subprocess
import sys

import numpy as np

import objectives_reference as ref

TOL = 1e-5
KL_MODES = ["kl", "mse", "low_var_kl", "abs"]
AGG_MODES = ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
ESTIMATORS = ["grpo", "rloo", "reinforce_pp", "reinforce_pp_baseline", "gae"]


def f32(x):
    """Inputs are float32 on tagflow's side: give the reference the same numbers."""
    return np.asarray(x, dtype=np.float32).astype(np.float64)


def fmt(key, values):
    if isinstance(values, str):
        return f"{key} {values}"
    vals = np.atleast_1d(np.asarray(values, dtype=np.float64)).ravel()
    return " ".join([key] + [repr(float(v)) for v in vals])


def log_probs(rng, n, extreme):
    lp = -rng.exponential(1.5, n)
    if extreme:
        pick = rng.random(n) < 0.3
        lp[pick] = -rng.uniform(80, 300, pick.sum())
    return f32(lp)


# ---- case generators: each returns (kind, inputs dict, reference outputs dict) ----

def adv_case(rng, estimator):
    n = int(rng.integers(1, 13))
    n_groups = int(rng.integers(1, max(2, n // 2) + 1))
    kl_in_reward = bool(rng.random() < 0.5)
    extreme = bool(rng.random() < 0.3)
    cfg = dict(norm_std=bool(rng.random() < 0.75), unbiased=bool(rng.random() < 0.75),
               gamma=float(rng.choice([1.0, 0.9, 0.5])), lam=float(rng.choice([1.0, 0.95, 0.7])),
               kl_in_reward=kl_in_reward, kl_coef=float(f32(rng.uniform(0.05, 0.5))),
               kl_mode=str(rng.choice(KL_MODES)), whiten_adv=bool(rng.random() < 0.8))
    samples = []
    for _ in range(n):
        length = int(rng.integers(1, 9))
        mask = rng.random(length) < 0.75
        if rng.random() < 0.7:
            mask[-1] = True  # usually the response ends with a model token
        lp = log_probs(rng, length, extreme)
        r = f32(lp + rng.normal(0, 0.7, length))
        lp = np.where(mask, lp, 0.0)  # tool tokens: the rollout's log-prob placeholder 0
        if extreme:
            r = np.where(mask, r, f32(-rng.uniform(50, 200, length)))
        samples.append(dict(group=int(rng.integers(0, n_groups)), score=float(rng.choice([0.0, 0.5, 1.0])),
                            mask=mask, values=f32(rng.normal(0, 1, length)), lp=f32(lp), ref=r))
    inputs = dict(estimator=estimator, kl_mode=cfg["kl_mode"], norm_std=int(cfg["norm_std"]),
                  unbiased=int(cfg["unbiased"]), gamma=cfg["gamma"], lam=cfg["lam"],
                  kl_in_reward=int(kl_in_reward), kl_coef=cfg["kl_coef"], whiten=int(cfg["whiten_adv"]), n=n)
    for i, s in enumerate(samples):
        inputs[f"g.{i}"] = s["group"]
        inputs[f"score.{i}"] = s["score"]
        inputs[f"len.{i}"] = len(s["mask"])
        inputs[f"mask.{i}"] = s["mask"].astype(np.float64)
        inputs[f"values.{i}"] = s["values"] if estimator == "gae" else []
        inputs[f"lp.{i}"] = s["lp"] if kl_in_reward else []
        inputs[f"ref.{i}"] = s["ref"] if kl_in_reward else []
    adv, ret, seq, kl_mean = ref.advantages(estimator, samples, **cfg)
    want = {"seq_adv": seq, "kl_mean": kl_mean}
    for i in range(n):
        want[f"adv.{i}"] = adv[i]
        if estimator in ("reinforce_pp", "gae"):  # returns are a definition only where a critic or REINFORCE++ uses them
            want[f"ret.{i}"] = ret[i]
    return "adv", inputs, want


def kl_case(rng):
    n = int(rng.integers(1, 17))
    mode = str(rng.choice(KL_MODES))
    lp = log_probs(rng, n, extreme=True)
    r = f32(np.where(rng.random(n) < 0.3, -rng.uniform(0, 300, n), lp + rng.normal(0, 2, n)))
    mask = (rng.random(n) < 0.7).astype(np.float64)
    lp = np.where((mask == 0) & (rng.random(n) < 0.5), 0.0, lp)  # placeholders in masked slots
    tokens = max(mask.sum(), 1.0)
    k = ref.kl(lp, r, mode)
    want = dict(kl_scalar=k, kl_tensor=k, loss=float((k * mask).sum() / tokens),
                grad=mask * ref.kl_grad(lp, r, mode) / tokens)
    return "kl", dict(mode=mode, lp=lp, ref=r, mask=mask), want


def ppo_case(rng):
    rows, cols = int(rng.integers(1, 5)), int(rng.integers(1, 9))
    lp = log_probs(rng, rows * cols, extreme=bool(rng.random() < 0.3))
    spread = float(rng.choice([0.05, 0.3, 1.0, 30.0]))
    old = f32(lp + rng.normal(0, spread, lp.size))
    adv = f32(rng.normal(0, 1, lp.size))
    if rng.random() < 0.3:
        adv[rng.random(lp.size) < 0.3] = 0.0
    mask = (rng.random(lp.size) < 0.75).astype(np.float64)
    clip_low = float(f32(rng.uniform(0.1, 0.3)))
    clip_high = float(f32(rng.uniform(0.1, 0.4)))
    dual = float(rng.choice([0.0, 3.0, float(f32(rng.uniform(1.2, 5.0)))]))
    agg = str(rng.choice(AGG_MODES))
    m2 = mask.reshape(rows, cols)
    tokens = float(mask.sum() + rng.integers(0, 5) + 1)  # global counts include other ranks' tokens
    seqs = float((m2.sum(axis=1) > 0).sum() + rng.integers(0, 3) + 1)
    norm_tokens = float(rng.choice([cols, 16, 100]))
    loss, took, lower, dloss = ref.ppo_token_loss(lp, old, adv, clip_low, clip_high, dual)
    want = dict(loss_tok=loss, clipped=took.astype(np.float64), clipped_lower=lower.astype(np.float64),
                loss=ref.aggregate(loss.reshape(rows, cols), m2, agg, tokens, seqs, norm_tokens),
                grad=(dloss.reshape(rows, cols) * ref.aggregate_weights(m2, agg, tokens, seqs, norm_tokens)).ravel())
    inputs = dict(rows=rows, cols=cols, lp=lp, old=old, adv=adv, mask=mask, clip_low=clip_low,
                  clip_high=clip_high, dual_clip=dual, agg=agg, tokens=tokens, seqs=seqs, norm_tokens=norm_tokens)
    return "ppo", inputs, want


def tis_case(rng):
    """Off-policy correction: proximal (old) and behaviour (beh) log-probs that differ by a little
    (fresh tokens), a lot (stale ones) or absurdly (-300 against -0.1), masks, rejections."""
    rows, cols = int(rng.integers(1, 6)), int(rng.integers(1, 9))
    n = rows * cols
    extreme = bool(rng.random() < 0.3)
    old = log_probs(rng, n, extreme)
    drift = float(rng.choice([1e-3, 0.05, 0.5, 3.0]))
    beh = f32(old + rng.normal(0, drift, n))
    if extreme:
        pick = rng.random(n) < 0.2
        beh[pick] = f32(-rng.uniform(50, 300, pick.sum()))
    mask = (rng.random(n) < 0.75).astype(np.float64)
    beh = np.where((mask == 0) & (rng.random(n) < 0.5), 0.0, beh)  # the rollout's placeholder on tool tokens
    lp = f32(old + rng.normal(0, 0.1, n))
    adv = f32(rng.normal(0, 1, n))
    is_level = str(rng.choice(["off", "token", "sequence"]))
    rs_level = str(rng.choice(["off", "token", "sequence", "geometric"]))
    veto = float(rng.choice([0.0, 0.0, 1e-4, 0.5]))
    cap = float(f32(rng.choice([2.0, 1.2, 5.0, float(rng.uniform(1.0, 10.0))])))
    rs_upper = float(f32(rng.choice([0.0, 1.001, 1.5, 3.0])))
    rs_lower = float(f32(rng.choice([0.0, 0.999, 0.5])))
    up = rs_upper if rs_upper > 0 else cap
    lo = rs_lower if rs_lower > 0 else 1.0 / up
    if rs_level != "off" and not lo < up:
        rs_lower, lo = 0.0, 1.0 / up
    clip_low = float(f32(rng.uniform(0.1, 0.3)))
    clip_high = float(f32(rng.uniform(0.1, 0.4)))
    dual = float(rng.choice([0.0, 3.0]))
    agg = str(rng.choice(AGG_MODES))
    extra_tokens = float(rng.integers(0, 4))  # other ranks' kept tokens and sequences
    extra_seqs = float(rng.integers(1, 3)) if extra_tokens > 0 else 0.0
    norm_tokens = float(rng.choice([cols, 16]))

    m2 = mask.reshape(rows, cols)
    o2, b2 = old.reshape(rows, cols), beh.reshape(rows, cols)
    by_seq = rs_level in ("sequence", "geometric")
    rejected = ref.rejected_rows(o2, b2, m2, rs_level, up, lo) if by_seq else np.zeros(rows, bool)
    rejected = rejected | ref.vetoed_rows(o2, b2, m2, veto)
    kept = np.where(rejected[:, None], 0.0, m2)
    if rs_level == "token":
        kept = np.where(ref.rejected_tokens(o2, b2, m2, up, lo), 0.0, kept)
    tokens = kept.sum() + extra_tokens
    seqs = float((kept.sum(axis=1) > 0).sum()) + extra_seqs
    w = ref.tis_weights(o2, b2, m2, is_level, cap) if is_level != "off" else np.ones((rows, cols))
    batch_norm = float(rng.random() < 0.5)
    extra_norm_count = float(rng.integers(0, 3))  # other ranks' weights
    extra_norm_sum = float(f32(extra_norm_count * rng.uniform(0.2, 2.0)))
    if batch_norm and is_level != "off":
        mean = ref.tis_batch_mean(w, m2, is_level, extra_norm_sum, extra_norm_count)
        if mean > 1e-8:
            w = w / mean
    loss_tok, _, _, dloss = ref.ppo_token_loss(lp, o2.ravel(), adv, clip_low, clip_high, dual)
    loss_tok, dloss = loss_tok.reshape(rows, cols) * w, dloss.reshape(rows, cols) * w
    if tokens > 0:
        loss = ref.aggregate(loss_tok, kept, agg, tokens, seqs, norm_tokens)
        grad = (dloss * ref.aggregate_weights(kept, agg, tokens, seqs, norm_tokens)).ravel()
    else:
        loss, grad = 0.0, np.zeros(n)
    stat_level = "sequence" if is_level == "sequence" else "token"
    wstat = ref.tis_weights(o2, b2, m2, stat_level, cap)
    if stat_level == "token":
        used = wstat[kept > 0]
    else:
        used = wstat[:, 0][(kept.sum(axis=1) > 0)]
    rmax = ref.ratio_max_per_row(o2, b2, m2, stat_level)
    want = dict(rejected=rejected.astype(np.float64), ratio_max=rmax,
                weight_mean=float(used.mean()) if used.size else 1.0,
                stat_ratio_max=float(rmax.max()), stat_rejected=float(rejected.sum()),
                stat_rejected_tokens=float(m2.sum() - kept.sum()), loss=loss, grad=grad)
    if is_level != "off":
        want["weights"] = w.ravel()
    inputs = {"rows": rows, "cols": cols, "old": old, "beh": beh, "mask": mask, "lp": lp, "adv": adv,
              "is": is_level, "cap": cap, "rs": rs_level, "rs_upper": rs_upper, "rs_lower": rs_lower, "veto": veto,
              "clip_low": clip_low, "clip_high": clip_high, "dual_clip": dual, "agg": agg,
              "extra_tokens": extra_tokens, "extra_seqs": extra_seqs, "norm_tokens": norm_tokens,
              "batch_norm": batch_norm, "extra_norm_sum": extra_norm_sum, "extra_norm_count": extra_norm_count}
    return "tis", inputs, want


def agg_case(rng):
    rows, cols = int(rng.integers(1, 6)), int(rng.integers(1, 10))
    x = f32(rng.normal(0, 3, rows * cols))
    mask = (rng.random(rows * cols) < 0.7).astype(np.float64)
    x[(mask == 0) & (rng.random(x.size) < 0.3)] = np.inf  # masked slots must contribute exactly 0
    agg = str(rng.choice(AGG_MODES))
    m2 = mask.reshape(rows, cols)
    tokens = float(mask.sum() + rng.integers(0, 4) + 1)
    seqs = float(rows + rng.integers(0, 3))
    norm_tokens = float(rng.choice([cols, 32]))
    inputs = dict(rows=rows, cols=cols, x=x, mask=mask, agg=agg, tokens=tokens, seqs=seqs, norm_tokens=norm_tokens)
    return "agg", inputs, dict(value=ref.aggregate(x.reshape(rows, cols), m2, agg, tokens, seqs, norm_tokens))


def fixed_cases():
    """Hand-picked corners: the issue's reproduction and exact ties."""
    out = []
    # Issue 21 defect 1: equal rewards, a tool token (placeholder 0, reference -5) in sample 0.
    samples = [dict(group=0, score=1.0, mask=np.array([True, False, True]), values=np.zeros(3),
                    lp=np.array([-1.0, 0.0, -2.0]), ref=np.array([-1.0, -5.0, -2.0])),
               dict(group=0, score=1.0, mask=np.array([True, True]), values=np.zeros(2),
                    lp=np.array([-0.5, -0.5]), ref=np.array([-0.5, -0.5]))]
    for est in ESTIMATORS:
        cfg = dict(kl_in_reward=True, kl_coef=0.1, kl_mode="low_var_kl")
        adv, ret, seq, kl_mean = ref.advantages(est, samples, **cfg)
        inputs = dict(estimator=est, kl_mode="low_var_kl", norm_std=1, unbiased=1, gamma=1.0, lam=1.0,
                      kl_in_reward=1, kl_coef=0.1, whiten=1, n=2)
        for i, s in enumerate(samples):
            inputs.update({f"g.{i}": 0, f"score.{i}": 1.0, f"len.{i}": len(s["mask"]),
                           f"mask.{i}": s["mask"].astype(np.float64), f"values.{i}": s["values"],
                           f"lp.{i}": s["lp"], f"ref.{i}": s["ref"]})
        want = {"seq_adv": seq, "kl_mean": kl_mean, "adv.0": adv[0], "adv.1": adv[1]}
        out.append(("adv", inputs, want))
    return out


# ---- running and comparing ----

def serialise(cases):
    lines = []
    for kind, inputs, _ in cases:
        lines.append(f"begin {kind}")
        lines.extend(fmt(k, v) for k, v in inputs.items())
        lines.append("end")
    return "\n".join(lines) + "\n"


def parse(text):
    results, cur = [], None
    for line in text.splitlines():
        tok = line.split()
        if not tok:
            continue
        if tok[0] == "begin":
            cur = {}
        elif tok[0] == "end":
            results.append(cur)
        else:
            cur[tok[0]] = np.array([float(t) for t in tok[1:]])
    return results


WORST = [0.0]  # the largest scaled deviation seen, for the summary line


def close(got, want):
    got, want = np.atleast_1d(np.asarray(got, float)), np.atleast_1d(np.asarray(want, float))
    if got.shape != want.shape:
        return False
    dev = np.abs(got - want) / np.maximum(1.0, np.abs(want))
    if dev.size and np.all(np.isfinite(dev)):
        WORST[0] = max(WORST[0], float(dev.max()))
    return bool(np.all(dev <= TOL))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--driver", required=True)
    ap.add_argument("--cases", type=int, default=60, help="random cases per kind (and per estimator)")
    ap.add_argument("--seed", type=int, default=21)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    cases = fixed_cases()
    for _ in range(a.cases):
        for est in ESTIMATORS:
            cases.append(adv_case(rng, est))
        cases.append(kl_case(rng))
        cases.append(ppo_case(rng))
        cases.append(agg_case(rng))
        cases.append(tis_case(rng))
    proc = subprocess.run([a.driver], input=serialise(cases), capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        print(f"driver failed (exit {proc.returncode}): {proc.stderr.strip()}")
        return 1
    got = parse(proc.stdout)
    if len(got) != len(cases):
        print(f"driver answered {len(got)} cases of {len(cases)}")
        return 1
    bad, compared = 0, 0
    for n, ((kind, inputs, want), out) in enumerate(zip(cases, got)):
        label = f"case {n} ({kind} {inputs.get('estimator', inputs.get('mode', inputs.get('agg', '')))}"
        label += f" is={inputs['is']} rs={inputs['rs']})" if kind == "tis" else ")"
        if "grad" in out and not np.all(np.isfinite(out["grad"])):
            print(f"{label}: non-finite gradient {out['grad'].tolist()}")
            bad += 1
        for key, w in want.items():
            compared += 1
            if key not in out:
                print(f"{label}: tagflow gave no {key}")
                bad += 1
            elif not close(out[key], w):
                print(f"{label}: {key}: tagflow {np.round(out[key], 7).tolist()} reference "
                      f"{np.round(np.atleast_1d(w), 7).tolist()}")
                bad += 1
    print(f"{len(cases)} cases, {compared} outputs compared, {bad} mismatches (tolerance {TOL}, "
          f"largest deviation {WORST[0]:.2e})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
