"""EAGLE-3 (Li et al. 2025): a draft head over the verifier's fused low/mid/high-layer hidden states, trained with
training-time test, drafting a chain of γ greedy tokens for ``budgetdraft.decoding.speculative``.

Head (as EAGLE-3's ``cnets.py``): the outputs of verifier decoder layers ``layer_ids`` (default 2, L/2, L−3) are
concatenated and projected by ``fc`` (3H → H); one decoder layer whose attention reads
cat(RMSNorm(embedding of the next token), RMSNorm(feature)) (2H → q/k/v), with the feature as residual, then an
MLP, a final RMSNorm, and the verifier's own (frozen) LM head; the token embedding is the verifier's (frozen).
Simplification: the full verifier vocabulary is drafted (EAGLE-3 maps a reduced draft vocabulary back).

Entries: the real entry of position t pairs the verifier feature f_t with the token x_{t+1} (RoPE position t+1)
and predicts x_{t+2}. A chain step j ≥ 1 pairs the head's own previous output hidden state with the previous
draft token (position t+1+j) and attends to the real entries ≤ t and to its own chain.

Training-time test (``train``): the head is unrolled ``ttt_steps`` times; step 0 runs on the verifier features
of every position (teacher tokens), step j ≥ 1 feeds step j−1's output hidden states back as features with the
tokens j positions ahead, attending causally to the step-0 keys and to its own keys of steps 1..j at the same
position (EAGLE-3's diagonal mask), over the last ``ttt_window`` positions of the sequence. Loss: CE against the
verifier's own greedy token at every position (its LM head on the same forward that gives the features; EAGLE-3
uses the target model's soft distribution), on ``step0_positions`` random positions for step 0 and every
unrolled position for steps j ≥ 1, step j weighted ``step_decay``^j.

Drafting (``Eagle3Drafter``, a ``budgetdraft.drafter.Drafter``): it ``reads`` the outputs of the feature layers
over the prompt, handed to ``prefill`` from the outer verifier's own prefill (``VerifierPrefill.layer_outputs``:
no second verifier prefill, except for a prefill copied from a shared file, which ``speculative`` runs again and
charges to ``drafter_prefill_s``), and every layer's hidden states of each verify forward: ``after_verify`` takes
those of the accepted positions as the next real entries. ``drafter_prefill_s`` includes the head's pass over the
prompt.
"""

from __future__ import annotations

import csv
import json
import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from budgetdraft.atomic import atomic_path
from budgetdraft.drafter import GreedyDrafter, Reads, VerifierPrefill
from budgetdraft.kvcache import PreallocatedCache
from budgetdraft.metrics import cache_bytes, module_tensors
from budgetdraft.settings import Eagle3Hparams

HEAD_FILE, CONFIG_FILE = "head.safetensors", "eagle3.json"


def default_layer_ids(num_layers: int) -> list[int]:
    """EAGLE-3's low / mid / high layers (2, L//2, L−3), kept below the last layer (whose output is normed)."""
    top = max(num_layers - 2, 0)
    return [min(2, top), min(num_layers // 2, top), min(max(num_layers - 3, 0), top)]


def head_config(verifier, layer_ids=None) -> dict:
    c = verifier.config
    heads = c.num_attention_heads
    return {
        "hidden_size": c.hidden_size,
        "num_heads": heads,
        "num_kv_heads": getattr(c, "num_key_value_heads", heads),
        "head_dim": getattr(c, "head_dim", None) or c.hidden_size // heads,
        "intermediate_size": c.intermediate_size,
        "rms_norm_eps": c.rms_norm_eps,
        "vocab_size": c.vocab_size,
        "layer_ids": list(layer_ids) if layer_ids else default_layer_ids(c.num_hidden_layers),
        "draft_vocab": "full",
    }


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(size)), eps

    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)).to(dtype) * self.weight


def _rotate(x, cos, sin):
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class Eagle3Head(nn.Module):
    def __init__(self, cfg: dict):
        super().__init__()
        self.cfg = cfg
        h, d, i, eps = cfg["hidden_size"], cfg["head_dim"], cfg["intermediate_size"], cfg["rms_norm_eps"]
        self.nh, self.nkv, self.d = cfg["num_heads"], cfg["num_kv_heads"], d
        self.layer_ids = list(cfg["layer_ids"])
        self.fc = nn.Linear(3 * h, h, bias=False)
        self.input_norm, self.hidden_norm = RMSNorm(h, eps), RMSNorm(h, eps)
        self.q_proj = nn.Linear(2 * h, self.nh * d, bias=False)
        self.k_proj = nn.Linear(2 * h, self.nkv * d, bias=False)
        self.v_proj = nn.Linear(2 * h, self.nkv * d, bias=False)
        self.o_proj = nn.Linear(self.nh * d, h, bias=False)
        self.post_norm = RMSNorm(h, eps)
        self.gate_proj, self.up_proj = nn.Linear(h, i, bias=False), nn.Linear(h, i, bias=False)
        self.down_proj = nn.Linear(i, h, bias=False)
        self.norm = RMSNorm(h, eps)

    def qkv(self, emb, hid, cos, sin):
        """emb, hid [B, q, H] -> (q [B, nh, q, D], k, v [B, nkv, q, D]) with RoPE applied."""
        b, n, _ = emb.shape
        x = torch.cat([self.input_norm(emb), self.hidden_norm(hid)], dim=-1)
        q = self.q_proj(x).view(b, n, self.nh, self.d).transpose(1, 2)
        k = self.k_proj(x).view(b, n, self.nkv, self.d).transpose(1, 2)
        v = self.v_proj(x).view(b, n, self.nkv, self.d).transpose(1, 2)
        cos, sin = cos[:, None].to(q.dtype), sin[:, None].to(q.dtype)
        return _rotate(q, cos, sin), _rotate(k, cos, sin), v

    def finish(self, hid, attn):
        """attn [B, nh, q, D] -> the layer's output hidden state [B, q, H] (residual = the feature)."""
        b, _, n, _ = attn.shape
        h = hid + self.o_proj(attn.transpose(1, 2).reshape(b, n, -1))
        x = self.post_norm(h)
        return h + self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    def expand(self, t):
        return t.repeat_interleave(self.nh // self.nkv, dim=1)

    def step(self, emb, hid, cos, sin, cache: PreallocatedCache):
        """Inference: new entries (causal among themselves) attend to everything in ``cache``."""
        q, k, v = self.qkv(emb, hid, cos, sin)
        keys, values = cache.layers[0].update(k, v)
        n, total = q.shape[2], keys.shape[2]
        mask = torch.arange(total, device=q.device)[None] <= torch.arange(total - n, total, device=q.device)[:, None]
        attn = F.scaled_dot_product_attention(q, self.expand(keys), self.expand(values), attn_mask=mask)
        return self.finish(hid, attn)


def rope(verifier, positions: torch.Tensor, dtype):
    """cos, sin [B, q, D] of the verifier's own rotary embedding at ``positions`` [B, q]."""
    dummy = torch.empty(1, dtype=dtype, device=positions.device)
    return verifier.model.rotary_emb(dummy, positions)


def verifier_features(verifier, input_ids: torch.Tensor, layer_ids, greedy: bool = False):
    """[B, T, 3H]: outputs of the verifier's decoder layers ``layer_ids``. With ``greedy``, also [B, T]: the
    verifier's greedy token after every position (its LM head on the final hidden state, 256 rows at a time)."""
    out = verifier.get_decoder()(input_ids=input_ids, output_hidden_states=True, use_cache=False)
    feats = torch.cat([out.hidden_states[i + 1] for i in layer_ids], dim=-1)
    if not greedy:
        return feats
    lm_head = verifier.get_output_embeddings()
    return feats, torch.cat([lm_head(h).argmax(-1) for h in out.last_hidden_state.split(256, dim=1)], dim=1)


# --------------------------------------------------------------------------------------------------------------
# Training with training-time test


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
    """The typed hparams (``budgetdraft.settings.Eagle3Hparams``, declared there with their defaults): unknown keys
    and counts below 1 are errors naming the key."""
    return hparams if isinstance(hparams, Eagle3Hparams) else Eagle3Hparams.from_json(hparams)


def frozen_verifier(verifier_spec: str, hp: Eagle3Hparams):
    from budgetdraft.models import load_model

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
    """``out/head.safetensors`` + ``out/eagle3.json`` (``config``) + ``out/loss_log.csv``, atomically."""
    from safetensors.torch import save_file

    with atomic_path(out) as work:
        work.mkdir()
        save_file({k: v.detach().contiguous().cpu() for k, v in head.state_dict().items()}, str(work / HEAD_FILE))
        (work / CONFIG_FILE).write_text(json.dumps(config, indent=1, sort_keys=True))
        with open(work / "loss_log.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(log_rows[0]))
            writer.writeheader()
            writer.writerows(log_rows)


def train(verifier_spec: str, targets_file, out, hparams: dict | None = None, *, verbose: bool = True) -> dict:
    """Train an EAGLE-3 head and write ``out/head.safetensors`` + ``out/eagle3.json`` + ``out/loss_log.csv``.

    A non-finite loss, gradient norm or weight stops it with one ValueError naming the step (the drafter's rule,
    ``budgetdraft.training.check_finite``), and ``out`` is not written."""
    from budgetdraft.training import Diverged, stopped

    hp = resolve_hparams(hparams)
    try:
        return _train(verifier_spec, targets_file, out, hp, verbose)
    except Diverged as err:
        raise stopped("EAGLE-3 head", err, out) from None


def _train(verifier_spec: str, targets_file, out, hp: Eagle3Hparams, verbose: bool) -> dict:
    from budgetdraft.models import torch_dtype
    from budgetdraft.targets import load_targets
    from budgetdraft.training import check_finite, check_weights, lr_factor  # the drafter's schedule and checks

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


def load_head(directory, device="cpu", dtype="float32") -> Eagle3Head:
    from safetensors.torch import load_file

    from budgetdraft.models import torch_dtype

    directory = Path(directory)
    if not (directory / CONFIG_FILE).is_file():
        raise FileNotFoundError(f"no EAGLE-3 head in {directory} (missing {CONFIG_FILE})")
    cfg = json.loads((directory / CONFIG_FILE).read_text())
    head = Eagle3Head(cfg)
    head.load_state_dict(load_file(str(directory / HEAD_FILE)))
    return head.to(device=device, dtype=torch_dtype(dtype)).eval()


# --------------------------------------------------------------------------------------------------------------
# Drafting


class Eagle3Drafter(GreedyDrafter):
    """EAGLE-3's head drafting for ``speculative`` (``budgetdraft.drafter.Drafter``)."""

    def __init__(self, verifier, head: Eagle3Head, prefill_chunk=None):
        cfg = head.cfg
        if cfg["hidden_size"] != verifier.config.hidden_size or cfg["vocab_size"] != verifier.config.vocab_size:
            raise ValueError("the EAGLE-3 head was trained for another verifier (hidden size / vocab differ)")
        self.model, self.head, self.device = verifier, head, verifier.device
        self.prefill_chunk = prefill_chunk
        self.embed, self.lm_head = verifier.get_input_embeddings(), verifier.get_output_embeddings()
        self.dtype = head.fc.weight.dtype
        self.reads = Reads(layers=tuple(sorted(set(head.layer_ids))), hidden_states=True)

    def _run(self, emb_tokens: list[int], hid: torch.Tensor) -> torch.Tensor:
        n = len(emb_tokens)
        pos = torch.arange(self.position, self.position + n, device=self.device)[None]
        cos, sin = rope(self.model, pos, self.dtype)
        emb = self.embed(torch.tensor([emb_tokens], device=self.device)).to(self.dtype)
        out = self.head.step(emb, hid, cos, sin, self.cache)
        self.position += n
        return out

    def _token(self, h: torch.Tensor) -> int:
        return int(self.lm_head(self.head.norm(h[:, -1:]).to(self.lm_head.weight.dtype))[0, -1].argmax())

    @torch.no_grad()
    def prefill(self, prompt: torch.Tensor, capacity: int, verifier: VerifierPrefill) -> None:
        p = prompt.shape[1]
        outputs = verifier.layer_outputs
        feats = torch.cat([outputs[i] for i in self.head.layer_ids], dim=-1).to(self.device)  # [1, P, 3H]
        self.cache = PreallocatedCache(1, p + capacity + 1)
        self.position = 1  # entry t (feature f_t, token x_{t+1}) sits at position t+1
        if p > 1:
            self._run(prompt[0, 1:].tolist(), self.head.fc(feats[:, : p - 1].to(self.dtype)))
        self.n_real = self.cache.get_seq_length()
        self.q_feats, self.q_tokens = feats[:, p - 1 :], []  # the last feature waits for its next token
        self.last_drafts: list[int] = []

    @torch.no_grad()
    def draft(self, pending: list[int], gamma: int) -> list[int]:
        if len(self.q_tokens) == self.q_feats.shape[1] - 1:
            self.q_tokens.append(pending[-1])
        if not self.q_tokens or self.q_tokens[-1] != pending[-1] or len(self.q_tokens) != self.q_feats.shape[1]:
            raise AssertionError("EAGLE-3 drafter out of step with the verify loop")
        self.cache.truncate(self.n_real)  # drop the last chain
        self.position = self.n_real + 1
        h = self._run(self.q_tokens, self.head.fc(self.q_feats.to(self.dtype)))
        self.n_real = self.cache.get_seq_length()
        self.q_feats, self.q_tokens = self.q_feats[:, :0], []
        drafts = [self._token(h)]
        hid = h[:, -1:]
        self.chain_hidden = [hid]  # the head's output at depth 0..γ−1 (tests compare it with ttt_unroll)
        for _ in range(gamma - 1):
            hid = self._run([drafts[-1]], hid)
            self.chain_hidden.append(hid)
            drafts.append(self._token(hid))
        self.last_drafts = drafts
        return drafts

    def rollback(self, kept_new: int) -> None:
        """Nothing to do: the chain is dropped at the next ``draft``; real entries come from ``after_verify``."""

    @torch.no_grad()
    def after_verify(self, verifier_output, accepted: int, bonus: int) -> None:
        hs = verifier_output.hidden_states
        feats = torch.cat([hs[i + 1][:, : accepted + 1] for i in self.head.layer_ids], dim=-1).to(self.device)
        self.q_feats = torch.cat([self.q_feats, feats], dim=1)
        self.q_tokens += self.last_drafts[:accepted] + [bonus]
        self.last_drafts = []

    def kv_bytes(self) -> int:
        return cache_bytes(self.cache)  # the head's one-layer cache

    def weight_tensors(self):
        return module_tensors(self.head)  # its embedding and LM head are the verifier's, counted with it


def drafter_factory(verifier, args, extra: dict):
    if extra:
        raise ValueError(f"eagle3 takes no --extra settings besides `training`, got {sorted(extra)}")
    head = load_head(args.drafter, args.device, args.drafter_dtype)
    return lambda: Eagle3Drafter(verifier, head)


# --------------------------------------------------------------------------------------------------------------
# Command line: python -m budgetdraft train-eagle3 --verifier DIR --targets FILE --out DIR --hparams JSON


def configure_parser(parser) -> None:
    parser.add_argument("--verifier", required=True, help="verifier model spec or directory")
    parser.add_argument("--targets", required=True, help="targets.safetensors (input_ids, targets)")
    parser.add_argument("--out", required=True, help="output directory (head.safetensors + eagle3.json)")
    parser.add_argument(
        "--hparams", default="", help="JSON object (inline or a file path): " + ", ".join(Eagle3Hparams().keys())
    )


def run(args) -> None:
    from budgetdraft.training import read_hparams

    train(args.verifier, args.targets, args.out, read_hparams(args.hparams))
