# SPDX-License-Identifier: Apache-2.0
"""Reference RL objectives in NumPy (float64), written from the published definitions, not
from tagflow's C++: the golden tests (golden_objectives.py) compare tagflow against these.

Sources, per function:
  grpo            Shao et al. 2024 (DeepSeekMath, arXiv:2402.03300) sec. 4.1.2 outcome supervision:
                  A_i = (r_i - mean(r)) / std(r); veRL compute_grpo_outcome_advantage uses torch.std
                  (unbiased) + eps 1e-6 and norm_adv_by_std_in_grpo=False for Dr.GRPO
                  (Liu et al. 2025, arXiv:2503.20783).
  rloo            Ahmadian et al. 2024 (arXiv:2402.14740) eq. (RLOO): r_i - 1/(k-1) sum_{j != i} r_j.
  reinforce_pp    Hu 2025 (REINFORCE++, arXiv:2501.03262): token rewards (KL penalty per token,
                  outcome score on the last token), discounted return-to-go, advantages
                  normalised over the global batch: (x - mean) / sqrt(var_unbiased + 1e-8)
                  (veRL masked_whiten).
  reinforce_pp_baseline  the same paper's group-mean baseline: (r - mean(group)) broadcast, then
                  the global normalisation.
  gae             Schulman et al. 2016 (arXiv:1506.02438): delta_t = r_t + gamma V_{t+1} - V_t,
                  A_t = delta_t + gamma lam A_{t+1}, V after the end 0; returns = A + V; tokens
                  the policy did not produce (mask 0) are not steps (veRL: skip observation tokens).
  KL estimators   Schulman 2020, "Approximating KL divergence" (joschu.net/blog/kl-approx.html)
                  with r = pi_ref / pi = exp(ref - logp): k1 = -log r, k2 = (log r)^2 / 2,
                  k3 = (r - 1) - log r; abs = |log r|. veRL clamps log r to [-20, 20] before exp
                  and k3 to [-10, 10].
  ppo             Schulman et al. 2017 (arXiv:1707.06347) clipped surrogate with asymmetric
                  ranges (DAPO clip-higher, arXiv:2503.14476) and dual clip (Ye et al. 2020,
                  arXiv:1912.09729): for A < 0 the loss is at most -c A. The log-ratio is clamped
                  to [-20, 20] (veRL).
  aggregation     veRL agg_loss: token-mean, seq-mean-token-sum, seq-mean-token-mean, and
                  Dr.GRPO's seq-mean-token-sum-norm (the token sum divided by a constant, the
                  generation budget, then the mean over sequences, Liu et al. 2025 sec. 3.2).
  off-policy correction  truncated importance sampling (Ionides 2008, "Truncated importance
                  sampling"; Yao et al. 2025, "Your efficient RL framework secretly brings you
                  off-policy RL training", TIS) of the decoupled PPO objective (Hilton et al. 2022,
                  arXiv:2110.00641; AReaL, Fu et al. 2025, arXiv:2505.24298): the per-token policy
                  loss against the proximal policy pi_old is multiplied by w = min(pi_old / pi_behaviour, C),
                  a constant; per token, or per sequence with the product of the token ratios.
                  Rejection (Liu, Li et al. 2025, "When speed kills stability", veRL rollout_rs): a
                  sequence whose ratio (product, or geometric mean over its tokens) lies outside
                  [lower, upper] (lower defaults to 1 / upper) leaves the loss and its normalisers;
                  at token level each produced token whose own ratio lies outside the band leaves
                  them alone. The veto (veRL rollout_token_veto_threshold) rejects the whole sequence
                  when any produced token's ratio, not clamped, is below the threshold.
                  Log-ratios are clamped to [-20, 20] before the exp (veRL's safety bound).
                  Batch normalisation (veRL rollout_is_batch_normalize): the truncated weights are
                  divided by their mean over the batch, before rejection: over the produced tokens
                  (token level) or over the sequences holding one (sequence level); not when that
                  mean is at most 1e-8.
  tagflow's conventions where the definitions are silent: masks are per token (1 = produced
  by the policy); every quantity is 0 on mask-0 tokens; a group of one sample has no baseline
  and gets advantage 0 (GRPO, RLOO, REINFORCE++-baseline); normalisers are global counts.
"""
import numpy as np

GRPO_EPS = 1e-6
WHITEN_EPS = 1e-8


def _groups(group_ids):
    out = {}
    for i, g in enumerate(group_ids):
        out.setdefault(g, []).append(i)
    return out


def grpo(scores, group_ids, norm_std=True, unbiased=True):
    scores = np.asarray(scores, dtype=np.float64)
    adv = np.zeros_like(scores)
    for idx in _groups(group_ids).values():
        if len(idx) < 2:
            continue
        r = scores[idx]
        centred = r - r.mean()
        if norm_std:
            centred = centred / (r.std(ddof=1 if unbiased else 0) + GRPO_EPS)
        adv[idx] = centred
    return adv


def rloo(scores, group_ids):
    scores = np.asarray(scores, dtype=np.float64)
    adv = np.zeros_like(scores)
    for idx in _groups(group_ids).values():
        k = len(idx)
        if k < 2:
            continue
        for i in idx:
            others = [scores[j] for j in idx if j != i]
            adv[i] = scores[i] - np.mean(others)
    return adv


def group_mean_baseline(scores, group_ids):
    scores = np.asarray(scores, dtype=np.float64)
    adv = np.zeros_like(scores)
    for idx in _groups(group_ids).values():
        if len(idx) >= 2:
            adv[idx] = scores[idx] - scores[idx].mean()
    return adv


def kl(logp, ref, mode):
    logp = np.asarray(logp, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    log_r = ref - logp  # log(pi_ref / pi)
    if mode == "kl":
        return -log_r
    if mode == "abs":
        return np.abs(log_r)
    if mode == "mse":
        return 0.5 * log_r ** 2
    if mode == "low_var_kl":
        lr = np.clip(log_r, -20.0, 20.0)
        return np.clip(np.exp(lr) - 1.0 - lr, -10.0, 10.0)
    raise ValueError(mode)


def kl_grad(logp, ref, mode):
    """d kl / d logp, elementwise (a clamp passes no gradient where it is active)."""
    logp = np.asarray(logp, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    log_r = ref - logp
    if mode == "kl":
        return np.ones_like(logp)
    if mode == "abs":
        return -np.sign(log_r)
    if mode == "mse":
        return -log_r
    if mode == "low_var_kl":
        lr = np.clip(log_r, -20.0, 20.0)
        val = np.exp(lr) - 1.0 - lr
        inside = (np.abs(log_r) < 20.0) & (np.abs(val) < 10.0)
        # d/dlogp (e^{lr} - 1 - lr) = -(e^{lr} - 1)
        return np.where(inside, 1.0 - np.exp(lr), 0.0)
    raise ValueError(mode)


def token_rewards(score, mask, kl_values=None, kl_coef=0.0):
    """Per-token rewards: -kl_coef * kl on produced tokens, the outcome score on the last one."""
    mask = np.asarray(mask, dtype=bool)
    r = np.zeros(mask.size)
    if kl_values is not None:
        r[mask] = -kl_coef * np.asarray(kl_values, dtype=np.float64)[mask]
    produced = np.flatnonzero(mask)
    if produced.size:
        r[produced[-1]] += score
    return r


def returns_to_go(rewards, mask, gamma):
    """G_t over the produced tokens only (environment tokens are not steps); 0 elsewhere."""
    out = np.zeros(len(rewards))
    steps = np.flatnonzero(np.asarray(mask, dtype=bool))
    g = 0.0
    for t in steps[::-1]:
        g = rewards[t] + gamma * g
        out[t] = g
    return out


def gae(rewards, values, mask, gamma, lam):
    adv = np.zeros(len(rewards))
    steps = np.flatnonzero(np.asarray(mask, dtype=bool))
    next_v, running = 0.0, 0.0
    for t in steps[::-1]:
        delta = rewards[t] + gamma * next_v - values[t]
        running = delta + gamma * lam * running
        adv[t] = running
        next_v = values[t]
    ret = np.where(np.asarray(mask, dtype=bool), adv + np.asarray(values, dtype=np.float64), 0.0)
    return adv, ret


def whiten(rows, masks):
    """Global normalisation over every produced token of the batch (unbiased variance)."""
    flat = np.concatenate([np.asarray(r)[np.asarray(m, dtype=bool)] for r, m in zip(rows, masks)] + [np.zeros(0)])
    if flat.size == 0:
        return [np.zeros(len(r)) for r in rows]
    mean = flat.mean()
    scale = 1.0 / np.sqrt(flat.var(ddof=1) + WHITEN_EPS) if flat.size >= 2 else 1.0
    return [np.where(np.asarray(m, dtype=bool), (np.asarray(r) - mean) * scale, 0.0) for r, m in zip(rows, masks)]


def advantages(estimator, samples, norm_std=True, unbiased=True, gamma=1.0, lam=1.0, kl_in_reward=False,
               kl_coef=0.0, kl_mode="kl", whiten_adv=True):
    """samples: dicts with group, score, mask (bool per token), values, lp, ref.
    Returns (advantages per sample, returns per sample, sequence advantage, mean KL per token)."""
    rewards, kls = [], []
    for s in samples:
        k = kl(s["lp"], s["ref"], kl_mode) if kl_in_reward else None
        if k is not None:
            kls.append(k[s["mask"]])
        rewards.append(token_rewards(s["score"], s["mask"], k, kl_coef))
    kl_all = np.concatenate(kls) if kls else np.zeros(0)
    kl_mean = float(kl_all.mean()) if kl_all.size else 0.0
    masks = [s["mask"] for s in samples]
    groups = [s["group"] for s in samples]
    seq_scores = np.array([r.sum() for r in rewards])
    if estimator in ("grpo", "rloo"):
        a = grpo(seq_scores, groups, norm_std, unbiased) if estimator == "grpo" else rloo(seq_scores, groups)
        adv = [np.where(m, a[i], 0.0) for i, m in enumerate(masks)]
        ret = [returns_to_go(r, m, 1.0) for r, m in zip(rewards, masks)]
        return adv, ret, a, kl_mean
    if estimator == "reinforce_pp":
        ret = [returns_to_go(r, m, gamma) for r, m in zip(rewards, masks)]
        adv = whiten(ret, masks) if whiten_adv else ret
    elif estimator == "reinforce_pp_baseline":
        a = group_mean_baseline(seq_scores, groups)
        adv = [np.where(m, a[i], 0.0) for i, m in enumerate(masks)]
        adv = whiten(adv, masks) if whiten_adv else adv
        ret = [returns_to_go(r, m, 1.0) for r, m in zip(rewards, masks)]
    elif estimator == "gae":
        pairs = [gae(r, s["values"], m, gamma, lam) for r, s, m in zip(rewards, samples, masks)]
        adv = [p[0] for p in pairs]
        ret = [p[1] for p in pairs]
        adv = whiten(adv, masks) if whiten_adv else adv
    else:
        raise ValueError(estimator)
    seq = np.array([a[m].mean() if m.any() else 0.0 for a, m in zip(adv, masks)])
    return adv, ret, seq, kl_mean


def ppo_token_loss(lp, old, adv, clip_low, clip_high, dual_clip):
    """Per-token clipped surrogate loss, the clipped / dual-clipped indicators and d loss / d lp."""
    lp, old, adv = (np.asarray(x, dtype=np.float64) for x in (lp, old, adv))
    log_ratio = lp - old
    lr = np.clip(log_ratio, -20.0, 20.0)
    ratio = np.exp(lr)
    unclipped = -adv * ratio
    clipped = -adv * np.clip(ratio, 1.0 - clip_low, 1.0 + clip_high)
    loss = np.maximum(unclipped, clipped)
    took_clip = clipped > unclipped
    # gradient of the taken branch: -A * ratio through exp (0 where the log-ratio clamp is active)
    d_unclipped = np.where(np.abs(log_ratio) < 20.0, -adv * ratio, 0.0)
    grad = np.where(took_clip, 0.0, d_unclipped)
    lower = np.zeros_like(loss, dtype=bool)
    if dual_clip > 1.0:
        bound = -adv * dual_clip
        lower = (adv < 0) & (loss > bound)
        loss = np.where(lower, bound, loss)
        grad = np.where(lower, 0.0, grad)
    return loss, took_clip, lower, grad


def aggregate(x, mask, mode, tokens, seqs, norm_tokens=0.0):
    """x, mask: [rows, cols]; tokens/seqs: GLOBAL counts (the sum over micro-batches and ranks)."""
    x = np.asarray(x, dtype=np.float64)
    m = np.asarray(mask, dtype=np.float64)
    xm = np.where(m > 0, x, 0.0)
    if mode == "token-mean":
        return xm.sum() / tokens
    if mode == "seq-mean-token-sum":
        return xm.sum(axis=1).sum() / seqs
    if mode == "seq-mean-token-mean":
        return (xm.sum(axis=1) / np.maximum(m.sum(axis=1), 1.0)).sum() / seqs
    if mode == "seq-mean-token-sum-norm":
        return (xm.sum(axis=1) / norm_tokens).sum() / seqs
    raise ValueError(mode)


def aggregate_weights(mask, mode, tokens, seqs, norm_tokens=0.0):
    """d aggregate / d x per element (the aggregation is linear in x)."""
    m = np.asarray(mask, dtype=np.float64)
    if mode == "token-mean":
        return m / tokens
    if mode == "seq-mean-token-sum":
        return m / seqs
    if mode == "seq-mean-token-mean":
        return m / np.maximum(m.sum(axis=1, keepdims=True), 1.0) / seqs
    if mode == "seq-mean-token-sum-norm":
        return m / norm_tokens / seqs
    raise ValueError(mode)


LOG_BOUND = 20.0


def tis_weights(old, beh, mask, level, cap):
    """Truncated importance weights [rows, cols] of pi_old against pi_behaviour: 'token' gives each
    produced token min(pi_old / pi_beh, cap) (0 on tokens the policy did not produce), 'sequence'
    gives every token of a row min(prod over its produced tokens of pi_old / pi_beh, cap)."""
    old, beh = np.asarray(old, dtype=np.float64), np.asarray(beh, dtype=np.float64)
    m = np.asarray(mask, dtype=bool)
    log_ratio = np.where(m, old - beh, 0.0)
    if level == "token":
        return np.where(m, np.minimum(np.exp(np.clip(log_ratio, -LOG_BOUND, LOG_BOUND)), cap), 0.0)
    if level == "sequence":
        seq = np.minimum(np.exp(np.clip(log_ratio.sum(axis=1), -LOG_BOUND, LOG_BOUND)), cap)
        return np.repeat(seq[:, None], old.shape[1], axis=1)
    raise ValueError(level)


def tis_batch_mean(weights, mask, level, extra_sum=0.0, extra_count=0.0):
    """The mean truncated weight of a batch (other ranks' extra_sum over extra_count added): of the
    produced tokens ('token') or of the rows holding one, a row's weight counted once ('sequence')."""
    w, m = np.asarray(weights, dtype=np.float64), np.asarray(mask, dtype=bool)
    if level == "token":
        total, count = w[m].sum(), m.sum()
    else:
        rows = m.any(axis=1)
        total, count = w[rows, 0].sum() if w.shape[1] else 0.0, rows.sum()
    total, count = total + extra_sum, count + extra_count
    return total / count if count > 0 else 1.0


def rejected_rows(old, beh, mask, level, upper, lower):
    """Rows whose ratio leaves [lower, upper]: 'sequence' = the product of the produced tokens' ratios,
    'geometric' = their geometric mean; a row without produced tokens is never rejected."""
    old, beh = np.asarray(old, dtype=np.float64), np.asarray(beh, dtype=np.float64)
    m = np.asarray(mask, dtype=bool)
    n = m.sum(axis=1)
    log_sum = np.where(m, old - beh, 0.0).sum(axis=1)
    if level == "sequence":
        ratio = np.exp(np.clip(log_sum, -LOG_BOUND, LOG_BOUND))
    elif level == "geometric":
        ratio = np.exp(np.clip(log_sum / np.maximum(n, 1), -LOG_BOUND, LOG_BOUND))
    else:
        raise ValueError(level)
    return (n > 0) & ((ratio > upper) | (ratio < lower))


def rejected_tokens(old, beh, mask, upper, lower):
    """[rows, cols] bool: produced tokens whose own ratio pi_old / pi_beh (safety-clamped) lies
    outside [lower, upper] (token-level rejection)."""
    old, beh = np.asarray(old, dtype=np.float64), np.asarray(beh, dtype=np.float64)
    m = np.asarray(mask, dtype=bool)
    ratio = np.exp(np.clip(old - beh, -LOG_BOUND, LOG_BOUND))
    return m & ((ratio > upper) | (ratio < lower))


def vetoed_rows(old, beh, mask, veto):
    """Rows holding a produced token whose unclamped ratio is below veto (veto <= 0: none)."""
    old, beh = np.asarray(old, dtype=np.float64), np.asarray(beh, dtype=np.float64)
    m = np.asarray(mask, dtype=bool)
    if veto <= 0:
        return np.zeros(m.shape[0], bool)
    return (m & (old - beh < np.log(veto))).any(axis=1)


def ratio_max_per_row(old, beh, mask, level):
    """The largest ratio before truncation: of the produced tokens ('token'), or the sequence ratio."""
    old, beh = np.asarray(old, dtype=np.float64), np.asarray(beh, dtype=np.float64)
    m = np.asarray(mask, dtype=bool)
    if level == "sequence":
        return np.exp(np.clip(np.where(m, old - beh, 0.0).sum(axis=1), -LOG_BOUND, LOG_BOUND))
    r = np.where(m, np.exp(np.clip(old - beh, -LOG_BOUND, LOG_BOUND)), -np.inf)
    return np.where(m.any(axis=1), r.max(axis=1), 1.0)
