"""Training the EAGLE-3 draft head (`budgetdraft train-eagle3`): training-time test over the verifier's features
(the head itself and its drafting: `budgetdraft.decoding.baselines.eagle3`)."""

from __future__ import annotations

import csv
import json
import math
import time

import torch
import torch.nn.functional as F

from budgetdraft.base.atomic import atomic_path, check_out
from budgetdraft.decoding.baselines.eagle3 import (
    CONFIG_FILE,
    HEAD_FILE,
    Eagle3Head,
    head_config,
    rope,
    verifier_features,
)
from budgetdraft.training.hparams import Eagle3Hparams


def ttt_unroll(head, verifier, feats, input_ids, window_start, ttt_steps):
    """The training-time-test unroll. Returns (base positions [W], [h_0, ..., h_{k-1}] each [B, W, H], and h_0 of
    every real entry [B, T−1, H]).

    feats [B, T, 3H] verifier features, input_ids [B, T]. Step 0 runs on every real entry t = 0..T−2 (feature
    f_t, token x_{t+1}); steps j ≥ 1 run on the window of base positions t ≥ window_start, with feature =
    h_{j−1}[t] and token x_{t+1+j} (clamped at the end; such positions have no target)."""
    bsz, total = input_ids.shape
    embed = verifier.get_input_embeddings()
    dtype = head.fc.weight.dtype
    n = total - 1
    pos = torch.arange(1, total, device=input_ids.device)[None].expand(bsz, -1)
    cos, sin = rope(verifier, pos, dtype)
    hid = head.fc(feats[:, :n].to(dtype))
    q0, k0, v0 = head.qkv(embed(input_ids[:, 1:]).to(dtype), hid, cos, sin)
    out0 = head.finish(hid, F.scaled_dot_product_attention(q0, head.expand(k0), head.expand(v0), is_causal=True))
    w0 = min(max(0, window_start), n - 1)
    base = torch.arange(w0, n, device=input_ids.device)  # [W]
    k0e, v0e = head.expand(k0), head.expand(v0)
    causal = torch.arange(n, device=input_ids.device)[None] <= base[:, None]  # [W, n]
    scale = head.d**-0.5
    hs = [out0[:, w0:]]
    diag_k, diag_v = [], []
    for j in range(1, ttt_steps):
        e = embed(input_ids[:, (base + 1 + j).clamp(max=total - 1)]).to(dtype)
        c, s = rope(verifier, (base + 1 + j)[None].expand(bsz, -1), dtype)
        q, k, v = head.qkv(e, hs[-1], c, s)
        diag_k.append(head.expand(k))
        diag_v.append(head.expand(v))
        s0 = (torch.matmul(q, k0e.transpose(-1, -2)) * scale).masked_fill(~causal, float("-inf"))  # [B,nh,W,n]
        sd = torch.stack([(q * dk).sum(-1) for dk in diag_k], dim=-1) * scale  # [B, nh, W, j]: own chain only
        p = torch.softmax(torch.cat([s0.float(), sd.float()], dim=-1), dim=-1).to(q.dtype)
        attn = torch.matmul(p[..., :n], v0e) + (p[..., n:, None] * torch.stack(diag_v, dim=-2)).sum(-2)
        hs.append(head.finish(hs[-1], attn))
    return base, hs, out0


def ttt_loss(head, verifier, feats, input_ids, greedy, hp: Eagle3Hparams, generator: torch.Generator | None = None):
    """Weighted CE of the unrolled head; returns (loss, per-step top-1 accuracy list).

    greedy [B, T]: the verifier's greedy token after each position. Real entry t predicts greedy[t+1] (the token
    after x_{t+1}); step j at base t predicts greedy[t+1+j]. Step 0 is scored on ``step0_positions`` entries drawn
    from the whole sequence, steps j ≥ 1 on the last ``ttt_window`` base positions."""
    lm_head = verifier.get_output_embeddings()
    n = input_ids.shape[1] - 1
    base, hs, out0 = ttt_unroll(head, verifier, feats, input_ids, n - hp.ttt_window, hp.ttt_steps)
    pick = torch.randperm(n, generator=generator)[: hp.step0_positions].sort().values.to(base.device)
    scored = [(out0[:, pick], greedy[:, pick + 1])]
    for j, h in enumerate(hs[1:], start=1):
        idx = base + 1 + j
        scored.append((h[:, idx <= n], greedy[:, idx[idx <= n]]))
    losses, accs, weight_sum = [], [], 0.0
    for j, (h, tgt) in enumerate(scored):
        if tgt.numel():
            logits = lm_head(head.norm(h).to(lm_head.weight.dtype)).float()  # [B, v, V]
            losses.append((hp.step_decay**j) * F.cross_entropy(logits.flatten(0, 1), tgt.flatten()))
            weight_sum += hp.step_decay**j
            accs.append(float((logits.argmax(-1) == tgt).float().mean()))
    return sum(losses) / weight_sum, accs


def resolve_hparams(hparams: dict | Eagle3Hparams | None) -> Eagle3Hparams:
    """The typed hparams (``budgetdraft.training.hparams.Eagle3Hparams``, declared there with their defaults): unknown keys
    and counts below 1 are errors naming the key."""
    return hparams if isinstance(hparams, Eagle3Hparams) else Eagle3Hparams.from_json(hparams)


def frozen_verifier(verifier_spec: str, hp: Eagle3Hparams):
    from budgetdraft.decoding.loading import load_model

    verifier = load_model(verifier_spec, hp.device, hp.verifier_dtype).eval()
    for prm in verifier.parameters():
        prm.requires_grad_(False)
    return verifier


class SequenceFeatures:
    """The verifier's features and greedy tokens of each training sequence, kept in memory when they fit in
    ``feature_cache_mb`` (else recomputed at every visit)."""

    def __init__(self, verifier, input_ids: torch.Tensor, cfg: dict, cache_mb: float):
        self.verifier, self.input_ids, self.layer_ids = verifier, input_ids, cfg["layer_ids"]
        feat_mb = input_ids.shape[0] * input_ids.shape[1] * 3 * cfg["hidden_size"] * 4 / 2**20
        self.cache: dict[int, tuple] | None = {} if feat_mb <= cache_mb else None

    def __call__(self, i: int) -> tuple:
        if self.cache is not None and i in self.cache:
            return self.cache[i]
        with torch.no_grad():
            feats, greedy = verifier_features(self.verifier, self.input_ids[i : i + 1], self.layer_ids, greedy=True)
        if self.cache is not None:
            self.cache[i] = feats, greedy
        return feats, greedy


def save_head(out, head: Eagle3Head, config: dict, log_rows: list[dict]) -> None:
    """``out/head.safetensors`` + ``out/eagle3.json`` (``config``) + ``out/loss_log.csv``, atomically; an existing
    ``out`` is replaced only when it is an earlier head (``base.atomic.publish_dir``)."""
    from safetensors.torch import save_file

    with atomic_path(out, command="train-eagle3") as work:
        work.mkdir()
        save_file({k: v.detach().contiguous().cpu() for k, v in head.state_dict().items()}, str(work / HEAD_FILE))
        (work / CONFIG_FILE).write_text(json.dumps(config, indent=1, sort_keys=True))
        with open(work / "loss_log.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(log_rows[0]))
            writer.writeheader()
            writer.writerows(log_rows)


def train_head(verifier_spec: str, targets_file, out, hparams: dict | None = None, *, verbose: bool = True) -> dict:
    """Train an EAGLE-3 head and write ``out/head.safetensors`` + ``out/eagle3.json`` + ``out/loss_log.csv``.

    A non-finite loss, gradient norm or weight stops it with one ValueError naming the step (the drafter's rule,
    ``budgetdraft.training.train.check_finite``), and ``out`` is not written."""
    from budgetdraft.training.train import Diverged, stopped

    hp = resolve_hparams(hparams)
    check_out(out, "train-eagle3")  # before any work: a folder of the user's is refused, never replaced
    try:
        return _train_head(verifier_spec, targets_file, out, hp, verbose)
    except Diverged as err:
        raise stopped("EAGLE-3 head", err, out) from None


def _train_head(verifier_spec: str, targets_file, out, hp: Eagle3Hparams, verbose: bool) -> dict:
    from budgetdraft.decoding.loading import torch_dtype
    from budgetdraft.training.targets import load_targets
    from budgetdraft.training.train import check_finite, check_weights, lr_factor  # the drafter's schedule and checks

    if hp.threads:
        torch.set_num_threads(int(hp.threads))
    torch.manual_seed(int(hp.seed))
    verifier = frozen_verifier(verifier_spec, hp)
    data = load_targets(targets_file)
    input_ids = data["input_ids"].to(hp.device)  # the targets are recomputed at every position (ttt_loss)
    if data["verifier"] and verbose:
        print(f"sequences from the targets of verifier {data['verifier']}")
    cfg = head_config(verifier, hp.layer_ids)
    head = Eagle3Head(cfg).to(device=hp.device, dtype=torch_dtype(hp.dtype))
    opt = torch.optim.AdamW(head.parameters(), lr=hp.lr, weight_decay=hp.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, hp.warmup_steps, hp.steps))
    features = SequenceFeatures(verifier, input_ids, cfg, hp.feature_cache_mb)
    generator = torch.Generator().manual_seed(int(hp.seed))
    order = torch.randperm(input_ids.shape[0], generator=generator)
    log_rows, t0 = [], time.time()
    for step in range(hp.steps):
        i = int(order[step % input_ids.shape[0]])
        feats, greedy = features(i)
        loss, accs = ttt_loss(head, verifier, feats, input_ids[i : i + 1], greedy, hp, generator)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(head.parameters(), hp.grad_clip)
        opt.step()
        sched.step()
        loss_value, norm = torch.stack([loss.detach().float(), grad_norm.float()]).tolist()  # one host sync, as before
        check_finite(step, hp.steps, loss_value, norm)
        log_rows.append(
            {
                "step": step,
                "loss": loss_value,
                "acc_step0": accs[0] if accs else math.nan,
                "acc_mean": sum(accs) / len(accs) if accs else math.nan,
                "lr": sched.get_last_lr()[0],
                "seconds": time.time() - t0,
            }
        )
        if verbose and (step % hp.log_every == 0 or step == hp.steps - 1):
            print(
                f"step {step}: loss {log_rows[-1]['loss']:.4f} acc0 {log_rows[-1]['acc_step0']:.3f} "
                f"acc {log_rows[-1]['acc_mean']:.3f} ({time.time() - t0:.1f} s)",
                flush=True,
            )
    check_weights(head, hp.steps, hp.steps)
    save_head(
        out, head, {**cfg, "verifier": verifier_spec, "targets": str(targets_file), "hparams": hp.to_json()}, log_rows
    )
    return {"first_loss": log_rows[0]["loss"], "last_loss": log_rows[-1]["loss"], "rows": log_rows}
